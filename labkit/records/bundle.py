"""Reproduction bundles: everything needed to check and rerun committed runs, in one verifiable archive.

A bundle is a gzip-compressed tar (`.tar.gz`) holding one folder, named after the archive:

    runs/<run_id>/...                 every file of the run directory, its manifest.json included
    pages/<run_id>/<notebook>.html    the page of each executed notebook (from a built book, or made anew)
    sources/<commit>/kernels/...      the kernel sources the run hashed (kernel_sources_sha256), byte-exact
    sources/<commit>/labkit/...       the labkit package at the run's git commit
    sources/<commit>/pyproject.toml, environment.yml   how that commit installs
    licenses/..., LICENSE             PyTorch's and KernelBench's notices verbatim, the project's own license
    bundle.json                       which run, commit and origin (working tree or git) each file came from
    MANIFEST.sha256                   the SHA-256 of every other file, in `sha256sum` format

Why tar.gz and not zip: the member order, times, owners and modes are set here, so the same runs give the same
bytes; `git archive` already speaks tar; and after `tar xzf` the manifest checks with the stock
`sha256sum -c MANIFEST.sha256`, no labkit needed. `labkit bundle --verify` checks it without extracting.
"""
from __future__ import annotations

import datetime as _dt
import gzip
import hashlib
import io
import json
import re
import tarfile
from pathlib import Path
from typing import Callable

from labkit.core.atomic import atomic_write_bytes
from labkit.core.compile import REPO_ROOT
from labkit.records.run import git_output as _git, load_run

MANIFEST = "MANIFEST.sha256"
SUFFIXES = (".tar.gz", ".tgz")
LICENSE_FILES = ("licenses/PYTORCH_LICENSE.txt", "licenses/KERNELBENCH_LICENSE.txt", "LICENSE")
INSTALL_FILES = ("pyproject.toml", "environment.yml")
_MANIFEST_LINE = re.compile(r"([0-9a-f]{64})  (.+)")


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _has_commit(repo: Path, commit: str) -> bool:
    return _git(repo, "cat-file", "-e", f"{commit}^{{commit}}") is not None


def _tree_is_commit(repo: Path, commit: str, paths: list[str]) -> bool:
    """The working tree holds `commit`'s version of `paths`: HEAD is that commit and they are unchanged."""
    head = _git(repo, "rev-parse", "HEAD")
    status = _git(repo, "status", "--porcelain", "--", *paths)
    return head is not None and head.decode().strip() == commit and status is not None and not status.strip()


class _Contents:
    """The files going into the bundle: path -> bytes, and where each came from."""

    def __init__(self):
        self.files: dict[str, bytes] = {}
        self.origin: dict[str, str] = {}

    def add(self, path: str, data: bytes, origin: str) -> None:
        if "\n" in path or "\\" in path:
            raise ValueError(f"bundle paths cannot hold a newline or backslash (sha256sum escapes them): {path!r}")
        if path in self.files and self.files[path] != data:
            raise ValueError(f"two different files for {path} in one bundle ({self.origin[path]} and {origin})")
        self.files[path] = data
        self.origin[path] = origin


def _kernel_source(repo: Path, commit: str | None, name: str, recorded: str, run_id: str) -> tuple[bytes, str]:
    """The kernel source whose sha256 is `recorded`: the working tree's file if it still matches, else the file
    at the run's commit. Neither matching is an error naming the file and both hashes."""
    tree = repo / "kernels" / name
    tree_data = tree.read_bytes() if tree.is_file() else None
    if tree_data is not None and _sha256(tree_data) == recorded:
        return tree_data, "working tree"
    git_data = _git(repo, "show", f"{commit}:kernels/{name}") if commit else None
    if git_data is not None and _sha256(git_data) == recorded:
        return git_data, f"git {commit}"
    raise ValueError(
        f"kernels/{name}: run {run_id} recorded sha256 {recorded}, but the working tree has "
        f"{_sha256(tree_data) if tree_data is not None else 'no such file'} and git commit {commit} has "
        f"{_sha256(git_data) if git_data is not None else 'no such file'}")


def _commit_files(repo: Path, commit: str, run_id: str) -> dict[str, tuple[bytes, str]]:
    """labkit/ and the install files at `commit`: the working tree's when it is that commit (HEAD, unchanged),
    else `git archive` of the commit."""
    wanted = ["labkit", *INSTALL_FILES]
    if _tree_is_commit(repo, commit, wanted):
        listed = _git(repo, "ls-files", "-z", "--", *wanted) or b""
        return {p: ((repo / p).read_bytes(), "working tree") for p in listed.decode().split("\0") if p}
    raw = _git(repo, "archive", "--format=tar", commit, "--", *wanted) if _has_commit(repo, commit) else None
    if raw is None:
        raise ValueError(f"run {run_id} ran git commit {commit}, which this repository does not hold (a shallow "
                         f"or partial clone?) and the working tree is not: cannot take the labkit sources it ran")
    out = {}
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        for m in tar.getmembers():
            if m.isfile():
                out[m.name] = (tar.extractfile(m).read(), f"git {commit}")
    return out


def _page(nb: Path, run_id: str, book_dir: Path | None, render_page) -> tuple[bytes, str]:
    """A built book's page for this notebook when it shows this run; otherwise one made from the run's own
    executed notebook (a book page replaying another run would be the wrong page)."""
    if book_dir is not None:
        built = Path(book_dir) / f"{nb.stem}.html"
        if built.is_file() and run_id in built.read_text(encoding="utf-8", errors="replace"):
            return built.read_bytes(), f"book {built}"
    if render_page is None:
        raise ValueError(f"no page for {nb}: no built book page shows run {run_id}, and no page renderer was given")
    return render_page(nb), "nbconvert of the executed notebook"


def _run_files(run_dir: Path, book_dir: Path | None, render_page, repo: Path, contents: _Contents) -> dict:
    loaded = load_run(run_dir)
    meta = loaded["records"]["run"]
    run_id = meta["run_id"]
    if not loaded["complete"]:
        raise ValueError(f"{run_dir} is not a complete run (missing manifest.json, or a file no longer matches it)")
    prov = meta.get("provenance", {})
    commit = prov.get("git_commit")
    hashes = prov.get("kernel_sources_sha256")
    if not commit or not hashes:
        raise ValueError(f"run {run_id} records no git_commit or kernel_sources_sha256 "
                         f"(got {commit!r}, {type(hashes).__name__}): cannot tell which sources it ran")
    for f in sorted(p for p in run_dir.rglob("*") if p.is_file()):
        contents.add(f"runs/{run_id}/{f.relative_to(run_dir).as_posix()}", f.read_bytes(), f"run {run_dir}")
    pages = {}
    for nb in sorted(run_dir.glob("*.ipynb")):
        data, origin = _page(nb, run_id, book_dir, render_page)
        contents.add(f"pages/{run_id}/{nb.stem}.html", data, origin)
        pages[nb.name] = origin
    src = f"sources/{commit[:12]}"
    for name, recorded in sorted(hashes.items()):
        data, origin = _kernel_source(repo, commit, name, recorded, run_id)
        contents.add(f"{src}/kernels/{name}", data, origin)
    for path, (data, origin) in sorted(_commit_files(repo, commit, run_id).items()):
        contents.add(f"{src}/{path}", data, origin)
    return {"run_id": run_id, "name": meta.get("name"), "git_commit": commit, "git_dirty": prov.get("git_dirty"),
            "gpu": prov.get("gpu"), "torch": prov.get("torch"), "date_utc": prov.get("date_utc"),
            "sources": src, "pages": pages}


def bundle_name(out: Path) -> str:
    """The archive's top folder: its file name without the suffix."""
    for suffix in SUFFIXES:
        if out.name.endswith(suffix) and len(out.name) > len(suffix):
            return out.name[: -len(suffix)]
    raise ValueError(f"a bundle is a .tar.gz archive; got {out}")


def _tar_bytes(top: str, files: dict[str, bytes], mtime: int) -> bytes:
    """Byte-reproducible: sorted members, fixed time, owner and mode, no gzip time stamp."""
    raw = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz:
        with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for path in sorted(files):
                info = tarfile.TarInfo(f"{top}/{path}")
                info.size, info.mtime, info.mode = len(files[path]), mtime, 0o644
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                tar.addfile(info, io.BytesIO(files[path]))
    return raw.getvalue()


def write_bundle(run_dirs: list[Path], out: Path, book_dir: Path | None = None,
                 render_page: Callable[[Path], bytes] | None = None, repo: Path = REPO_ROOT) -> Path:
    """Write the bundle of `run_dirs` to `out` (.tar.gz). Pages come from `book_dir` where its page shows the
    run, else from `render_page(executed_notebook) -> html bytes`. Raises ValueError naming what is missing or
    does not match (an incomplete run, a kernel source no file or commit matches, an absent license)."""
    out, repo = Path(out), Path(repo)
    top = bundle_name(out)
    if not run_dirs:
        raise ValueError("a bundle needs at least one run directory")
    contents = _Contents()
    runs = [_run_files(Path(d), book_dir, render_page, repo, contents) for d in run_dirs]
    for rel in LICENSE_FILES:
        if not (repo / rel).is_file():
            raise ValueError(f"license notice {rel} is missing from {repo}")
        contents.add(rel, (repo / rel).read_bytes(), "working tree")
    index = {"format": 1, "made_by": "labkit bundle", "runs": runs,
             "verify": f"labkit bundle --verify {out.name}   (or: tar xzf {out.name} && cd {top} && "
                       f"sha256sum -c {MANIFEST})",
             "origin": dict(sorted(contents.origin.items()))}
    contents.add("bundle.json", (json.dumps(index, indent=1) + "\n").encode(), "labkit bundle")
    manifest = "".join(f"{_sha256(data)}  {path}\n" for path, data in sorted(contents.files.items()))
    files = {**contents.files, MANIFEST: manifest.encode()}
    newest = max(_dt.datetime.fromisoformat(r["date_utc"]) for r in runs if r["date_utc"]) \
        if any(r["date_utc"] for r in runs) else _dt.datetime(2000, 1, 1, tzinfo=_dt.timezone.utc)
    atomic_write_bytes(out, _tar_bytes(top, files, int(newest.timestamp())))
    return out


# ---------------------------------------------------------------------------------------------------------------
# Verification
# ---------------------------------------------------------------------------------------------------------------

def _read_members(archive: Path) -> tuple[list[tarfile.TarInfo], dict[str, list[bytes]]]:
    try:
        with tarfile.open(archive, mode="r:gz") as tar:
            members = tar.getmembers()
            data: dict[str, list[bytes]] = {}
            for m in members:
                if m.isfile():
                    data.setdefault(m.name, []).append(tar.extractfile(m).read())
    except (OSError, EOFError, tarfile.TarError, gzip.BadGzipFile) as exc:
        raise ValueError(f"{archive} is not a readable .tar.gz bundle: {type(exc).__name__}: {exc}") from exc
    return members, data


def _parse_manifest(text: str) -> tuple[dict[str, str], list[str]]:
    listed, problems = {}, []
    for n, line in enumerate(text.splitlines(), 1):
        m = _MANIFEST_LINE.fullmatch(line)
        if not m:
            problems.append(f"malformed: {MANIFEST} line {n}: {line[:120]!r}")
        elif m.group(2) in listed:
            problems.append(f"malformed: {MANIFEST} lists {m.group(2)} twice")
        else:
            listed[m.group(2)] = m.group(1)
    return listed, problems


def _provenance_problems(files: dict[str, bytes], missing: set[str]) -> list[str]:
    """Checks that hold inside an intact bundle whatever its manifest says: each run's own manifest.json matches
    its files, and each kernel source matches the sha256 its run recorded. Files in `missing` (already named as
    missing) are not named again."""
    problems = []
    for path in sorted(p for p in files if re.fullmatch(r"runs/[^/]+/manifest\.json", p)):
        run = path.rsplit("/", 1)[0]
        try:
            listed = json.loads(files[path])["files"]
            meta = json.loads(files[f"{run}/run.json"])
        except (KeyError, ValueError, TypeError) as exc:
            problems.append(f"inconsistent: {run}: unreadable run.json or manifest.json ({type(exc).__name__})")
            continue
        for name, digest in listed.items():
            got = files.get(f"{run}/{name}")
            if f"{run}/{name}" not in missing and (got is None or _sha256(got) != digest):
                problems.append(f"inconsistent: {run}/{name} does not match {run}/manifest.json")
        prov = meta.get("provenance", {})
        src = f"sources/{str(prov.get('git_commit'))[:12]}/kernels"
        for name, digest in (prov.get("kernel_sources_sha256") or {}).items():
            got = files.get(f"{src}/{name}")
            if f"{src}/{name}" not in missing and (got is None or _sha256(got) != digest):
                problems.append(f"inconsistent: {src}/{name} is not the kernel source {run}/run.json recorded "
                                f"(sha256 {digest})")
    return problems


def verify_bundle(archive: Path) -> tuple[list[str], int]:
    """([problem, ...], files checked). Each problem names one file: `changed:` (its sha256 differs from the
    manifest's), `missing:` (listed, not in the archive), `extra:` (in the archive, not listed, or not a plain
    file inside the bundle folder), `duplicate:`, `malformed:` or `inconsistent:` (a run's own manifest or its
    recorded kernel hashes disagree with the files). An intact bundle gives []."""
    archive = Path(archive)
    members, data = _read_members(archive)
    tops = sorted({n.split("/", 1)[0] for n in data if n.endswith("/" + MANIFEST) and n.count("/") == 1})
    if len(tops) != 1:
        return [f"missing: {MANIFEST} (want exactly one <folder>/{MANIFEST}; found {len(tops)})"], 0
    top = tops[0]
    problems = []
    files: dict[str, bytes] = {}
    for m in members:
        if m.isdir() and m.name.rstrip("/") == top:
            continue
        rel = m.name[len(top) + 1:] if m.name.startswith(top + "/") else None
        if rel is None or not rel or ".." in rel.split("/"):
            problems.append(f"extra: {m.name} (outside {top}/)")
        elif m.isdir():
            continue
        elif not m.isfile():
            problems.append(f"extra: {rel} (a link or special file, never part of a bundle)")
        elif len(data[m.name]) > 1:
            if rel not in files:
                problems.append(f"duplicate: {rel} is in the archive {len(data[m.name])} times")
            files[rel] = data[m.name][-1]  # what extraction leaves on disk
        else:
            files[rel] = data[m.name][0]
    listed, bad = _parse_manifest(files.pop(MANIFEST).decode("utf-8", errors="replace"))
    problems += bad
    for rel, digest in listed.items():
        if rel not in files:
            problems.append(f"missing: {rel} (listed in {MANIFEST})")
        elif _sha256(files[rel]) != digest:
            problems.append(f"changed: {rel} (sha256 {_sha256(files[rel])}, {MANIFEST} says {digest})")
    problems += [f"extra: {rel} (not listed in {MANIFEST})" for rel in sorted(set(files) - set(listed))]
    problems += _provenance_problems(files, set(listed) - set(files))
    return problems, len(files) + 1
