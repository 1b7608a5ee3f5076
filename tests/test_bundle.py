"""`labkit bundle`: a committed run's reproduction archive verifies; a changed, removed or added file is named."""
import hashlib
import io
import json
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from labkit import cli
from labkit.core.compile import REPO_ROOT
from labkit.records import bundle
from labkit.records.run import committed_runs

RUN = committed_runs("environment")[-1]  # the smallest committed run: records, executed notebook, log
META = json.loads((RUN / "run.json").read_text())
RUN_ID, COMMIT = META["run_id"], META["provenance"]["git_commit"]


def _git_has(commit: str) -> bool:
    return subprocess.run(["git", "cat-file", "-e", f"{commit}^{{commit}}"], cwd=REPO_ROOT,
                          capture_output=True).returncode == 0


# The kernel and labkit sources come from git at the run's commit; a copy of the tree without that history
# cannot make a bundle of this run (and write_bundle says so, tested below with a commit nobody has).
needs_history = pytest.mark.skipif(not _git_has(COMMIT), reason=f"this checkout lacks the run's commit {COMMIT}")


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _members(archive) -> dict[str, bytes]:
    with tarfile.open(archive, "r:gz") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def _rewrite(src, dst, edit) -> None:
    """Copy the archive member by member through `edit(name, data) -> [(name, data), ...]`."""
    out = []
    with tarfile.open(src, "r:gz") as tar:
        for m in tar.getmembers():
            out += edit(m.name, tar.extractfile(m).read())
    with tarfile.open(dst, "w:gz") as tar:
        for name, data in out:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    out = tmp_path_factory.mktemp("bundle") / "env-run.tar.gz"
    if _git_has(COMMIT):
        assert cli.main(["bundle", str(RUN), "--out", str(out)]) == 0
    return out


@needs_history
def test_committed_run_bundle_holds_what_reproduces_it_and_verifies(archive, capsys):
    files = _members(archive)
    top = "env-run/"
    assert all(name.startswith(top) for name in files)
    files = {name[len(top):]: data for name, data in files.items()}
    # the run directory, byte for byte, its executed notebook and manifest included
    for f in RUN.iterdir():
        assert files[f"runs/{RUN_ID}/{f.name}"] == f.read_bytes()
    page = files[f"pages/{RUN_ID}/00_environment.html"].decode()
    assert page.lstrip().lower().startswith("<!doctype html") and RUN_ID in page
    # the kernel sources the run hashed, whichever of working tree and git holds them
    src = f"sources/{COMMIT[:12]}"
    recorded = META["provenance"]["kernel_sources_sha256"]
    assert {k: _sha(files[f"{src}/kernels/{k}"]) for k in recorded} == recorded
    index = json.loads(files["bundle.json"])
    for name, digest in recorded.items():
        tree = REPO_ROOT / "kernels" / name
        changed = not tree.is_file() or _sha(tree.read_bytes()) != digest
        assert index["origin"][f"{src}/kernels/{name}"] == (f"git {COMMIT}" if changed else "working tree")
    # labkit as it was at the run's commit, and how that commit installs
    at_commit = subprocess.run(["git", "show", f"{COMMIT}:labkit/records/run.py"], cwd=REPO_ROOT,
                               capture_output=True, check=True).stdout
    assert files[f"{src}/labkit/records/run.py"] == at_commit
    assert f"{src}/environment.yml" in files and f"{src}/pyproject.toml" in files
    # license notices verbatim, the project's own included
    for rel in ("licenses/PYTORCH_LICENSE.txt", "licenses/KERNELBENCH_LICENSE.txt", "LICENSE"):
        assert files[rel] == (REPO_ROOT / rel).read_bytes()
    assert b"BSD" in files["licenses/PYTORCH_LICENSE.txt"] or b"Redistribution" in files["licenses/PYTORCH_LICENSE.txt"]
    assert files["LICENSE"].startswith(b"MIT License")
    # the manifest lists every other file with its sha256
    listed = dict(reversed(line.split("  ", 1)) for line in files["MANIFEST.sha256"].decode().splitlines())
    assert listed == {p: _sha(d) for p, d in files.items() if p != "MANIFEST.sha256"}
    assert bundle.verify_bundle(archive) == ([], len(files))
    capsys.readouterr()
    assert cli.main(["bundle", "--verify", str(archive)]) == 0
    assert "bundle OK" in capsys.readouterr().out


@needs_history
def test_the_same_runs_give_the_same_bytes(archive, tmp_path):
    again = tmp_path / archive.name
    assert cli.main(["bundle", str(RUN), "--out", str(again)]) == 0
    assert again.read_bytes() == archive.read_bytes()


def _verify_fails(capsys, path) -> str:
    capsys.readouterr()
    assert cli.main(["bundle", "--verify", str(path)]) == 1
    return capsys.readouterr().err


@needs_history
def test_one_changed_byte_is_named(archive, tmp_path, capsys):
    target = f"env-run/runs/{RUN_ID}/bit_identity.json"

    def flip(name, data):
        if name == target:
            data = data[:100] + bytes([data[100] ^ 1]) + data[101:]
        return [(name, data)]

    tampered = tmp_path / "tampered.tar.gz"
    _rewrite(archive, tampered, flip)
    err = _verify_fails(capsys, tampered)
    assert f"changed: runs/{RUN_ID}/bit_identity.json" in err
    # the run's own manifest disagrees too: named as well
    assert f"inconsistent: runs/{RUN_ID}/bit_identity.json does not match" in err
    assert "FAILED" in err


@needs_history
def test_a_removed_file_is_named(archive, tmp_path, capsys):
    target = "env-run/sources/" + COMMIT[:12] + "/kernels/welford_ln.cuh"
    removed = tmp_path / "removed.tar.gz"
    _rewrite(archive, removed, lambda name, data: [] if name == target else [(name, data)])
    err = _verify_fails(capsys, removed)
    assert f"missing: sources/{COMMIT[:12]}/kernels/welford_ln.cuh" in err


@needs_history
def test_an_added_file_is_named(archive, tmp_path, capsys):
    def add(name, data):
        extra = [("env-run/pages/notes.txt", b"not from the run\n")] if name.endswith("MANIFEST.sha256") else []
        return [(name, data)] + extra

    added = tmp_path / "added.tar.gz"
    _rewrite(archive, added, add)
    err = _verify_fails(capsys, added)
    assert "extra: pages/notes.txt" in err


@needs_history
def test_each_mismatch_is_named_and_a_shadowing_duplicate_too(archive, tmp_path, capsys):
    run_json = f"env-run/runs/{RUN_ID}/run.json"

    def several(name, data):
        if name.endswith("/LICENSE"):
            return []
        if name == run_json:
            return [(name, data), (name, data.replace(b"NVIDIA H200", b"NVIDIA H100"))]
        return [(name, data)] + ([("outside.txt", b"x")] if name.endswith("bundle.json") else [])

    bad = tmp_path / "bad.tar.gz"
    _rewrite(archive, bad, several)
    err = _verify_fails(capsys, bad)
    for expected in ("missing: LICENSE", f"duplicate: runs/{RUN_ID}/run.json", f"changed: runs/{RUN_ID}/run.json",
                     "extra: outside.txt"):
        assert expected in err, (expected, err)


def test_not_an_archive_is_refused_in_one_line(tmp_path, capsys):
    junk = tmp_path / "junk.tar.gz"
    junk.write_bytes(b"not gzip")
    assert cli.main(["bundle", "--verify", str(junk)]) == 2
    err = capsys.readouterr().err
    assert "not a readable .tar.gz bundle" in err and len(err.strip().splitlines()) == 1


def _copy_run(tmp_path, edit_provenance) -> "Path":
    """A copy of the committed run with its provenance edited and its manifest re-hashed (data/ untouched)."""
    run = tmp_path / RUN.name
    shutil.copytree(RUN, run)
    meta = json.loads((run / "run.json").read_text())
    edit_provenance(meta["provenance"])
    (run / "run.json").write_text(json.dumps(meta, indent=1))
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["files"]["run.json"] = _sha((run / "run.json").read_bytes())
    (run / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return run


def _page(nb) -> bytes:
    return b"<!doctype html><p>page</p>"


@needs_history
def test_a_kernel_source_nothing_matches_is_named(tmp_path):
    run = _copy_run(tmp_path, lambda p: p["kernel_sources_sha256"].update({"affine_rows.cu": "0" * 64}))
    with pytest.raises(ValueError, match=r"kernels/affine_rows\.cu: run .* recorded sha256 0{64}"):
        bundle.write_bundle([run], tmp_path / "b.tar.gz", render_page=_page)
    assert not (tmp_path / "b.tar.gz").exists()


def test_a_commit_this_repository_lacks_is_named(tmp_path):
    run = _copy_run(tmp_path, lambda p: p.update(git_commit="f" * 40))
    with pytest.raises(ValueError, match="f{40}"):
        bundle.write_bundle([run], tmp_path / "b.tar.gz", render_page=_page)


@needs_history
def test_a_book_page_is_used_only_when_it_shows_the_run(tmp_path):
    book = tmp_path / "book"
    book.mkdir()
    (book / "00_environment.html").write_text(f"<html>replays {RUN_ID}</html>")
    out = bundle.write_bundle([RUN], tmp_path / "a.tar.gz", book, render_page=_page)
    page = _members(out)[f"a/pages/{RUN_ID}/00_environment.html"]
    assert page == f"<html>replays {RUN_ID}</html>".encode()
    (book / "00_environment.html").write_text("<html>replays some other run</html>")
    out = bundle.write_bundle([RUN], tmp_path / "b.tar.gz", book, render_page=_page)
    assert _members(out)[f"b/pages/{RUN_ID}/00_environment.html"] == _page(None)


def test_bad_requests_are_refused(tmp_path, capsys):
    with pytest.raises(ValueError, match="tar.gz"):
        bundle.write_bundle([RUN], tmp_path / "b.zip", render_page=_page)
    incomplete = tmp_path / "incomplete"
    shutil.copytree(RUN, incomplete)
    (incomplete / "manifest.json").unlink()
    with pytest.raises(ValueError, match="not a complete run"):
        bundle.write_bundle([incomplete], tmp_path / "b.tar.gz", render_page=_page)
    assert cli.main(["bundle", "--out", str(tmp_path / "c.tar.gz")]) == 2
    assert "at least one run directory" in capsys.readouterr().err


def test_a_run_of_the_checked_out_commit_takes_the_working_tree(tmp_path):
    """A run recorded at HEAD with the working tree's kernels: sources come from the tree when it is unchanged
    (from git at HEAD otherwise), byte-equal to the commit either way."""
    git = lambda *a: subprocess.run(["git", *a], cwd=REPO_ROOT, capture_output=True, check=True).stdout  # noqa: E731
    try:
        head = git("rev-parse", "HEAD").decode().strip()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    hashes = {p.name: _sha(p.read_bytes()) for p in sorted((REPO_ROOT / "kernels").glob("*.cu*"))}
    run = _copy_run(tmp_path, lambda p: p.update(git_commit=head, kernel_sources_sha256=hashes))
    out = bundle.write_bundle([run], tmp_path / "h.tar.gz", render_page=_page)
    files = {k[len("h/"):]: v for k, v in _members(out).items()}
    origin = json.loads(files["bundle.json"])["origin"]
    src = f"sources/{head[:12]}"
    assert all(origin[f"{src}/kernels/{k}"] == "working tree" for k in hashes)
    clean = not git("status", "--porcelain", "--", "labkit", "pyproject.toml", "environment.yml").strip()
    assert origin[f"{src}/labkit/records/run.py"] == ("working tree" if clean else f"git {head}")
    assert files[f"{src}/labkit/records/run.py"] == git("show", f"{head}:labkit/records/run.py")
    assert bundle.verify_bundle(out)[0] == []


@needs_history
def test_a_change_with_a_rewritten_manifest_is_still_caught_by_the_provenance(archive, tmp_path, capsys):
    """Whoever edits a record and its MANIFEST.sha256 line still disagrees with the run's own manifest.json; a
    swapped kernel source disagrees with the hash its run.json recorded."""
    record = f"runs/{RUN_ID}/compile.json"
    kernel = f"sources/{COMMIT[:12]}/kernels/affine_rows.cu"
    new = {record: b"{}\n", kernel: b"// another kernel\n"}

    def forge(name, data):
        rel = name.split("/", 1)[1]
        if rel in new:
            return [(name, new[rel])]
        if rel == "MANIFEST.sha256":
            lines = [f"{_sha(new[p])}  {p}" if p in new else f"{h}  {p}"
                     for h, p in (line.split("  ", 1) for line in data.decode().splitlines())]
            return [(name, ("\n".join(lines) + "\n").encode())]
        return [(name, data)]

    forged = tmp_path / "forged.tar.gz"
    _rewrite(archive, forged, forge)
    err = _verify_fails(capsys, forged)
    assert "changed:" not in err  # the manifest was rewritten to match
    assert f"inconsistent: {record} does not match runs/{RUN_ID}/manifest.json" in err
    assert f"inconsistent: {kernel} is not the kernel source runs/{RUN_ID}/run.json recorded" in err
