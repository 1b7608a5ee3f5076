"""Run directories: JSON records with full provenance, written atomically.

A run directory is created fresh (never reused), each record is written to a temporary file and renamed into
place, and `manifest.json` — the list of records with their sha256 — is written last. An interrupted run
therefore leaves complete files or none, no manifest, and never touches an earlier run.
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import platform
import re
import secrets
import subprocess
from pathlib import Path

from labkit.core.atomic import atomic_write_json
from labkit.core.compile import REPO_ROOT
from labkit.core.sources import kernel_dir

SCHEMA = 1


def git_output(repo: Path, *args: str, timeout: float = 60) -> bytes | None:
    """git's stdout in `repo` as bytes, or None when git fails (no repository, unknown commit or path)."""
    try:
        return subprocess.run(["git", *args], cwd=repo, capture_output=True, timeout=timeout, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None


def _git(*args: str) -> str | None:
    out = git_output(REPO_ROOT, *args, timeout=10)
    return None if out is None else out.decode().strip()


def kernel_source_hashes() -> dict[str, str]:
    """sha256 of every kernel source, keyed by its path under kernels/ (sanitizer probes in kernels/sanitize too)."""
    root = kernel_dir()
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*.cu*"))}


def _driver_version() -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20, check=True).stdout.strip()
        return out.splitlines()[0] if out else None
    except (OSError, subprocess.SubprocessError):
        return None


def _git_state() -> dict:
    """Commit and dirtiness of the code that runs. A machine that receives a copy of the tree (the GPU machine)
    may hold no .git or a stale one, so the launching side's LABKIT_GIT_COMMIT / LABKIT_GIT_DIRTY win when set."""
    env_commit = os.environ.get("LABKIT_GIT_COMMIT")
    if env_commit:
        dirty = os.environ.get("LABKIT_GIT_DIRTY", "").strip().lower()
        return {"git_commit": env_commit, "git_dirty": {"true": True, "false": False}.get(dirty),
                "git_source": "LABKIT_GIT_COMMIT"}
    head = _git("rev-parse", "HEAD")
    return {"git_commit": head, "git_dirty": bool(_git("status", "--porcelain", "--untracked-files=no")) if head else None,
            "git_source": "git" if head else None}


def provenance(device: str = "auto") -> dict:
    """Everything that can change a run's bits or times, as far as this process can see it."""
    import numpy
    import torch

    info = {
        "date_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        **_git_state(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "numpy": numpy.__version__,
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "kernel_sources_sha256": kernel_source_hashes(),
        "cuda_available": torch.cuda.is_available(),
    }
    try:
        import cupy

        from labkit.core.compile import nvrtc_version

        info["cupy"] = cupy.__version__
        info["nvrtc"] = list(nvrtc_version())
    except Exception as exc:  # CuPy or NVRTC missing: record why instead of failing the run
        info["cupy_error"] = repr(exc)
    if torch.cuda.is_available() and device != "cpu":
        props = torch.cuda.get_device_properties(0)
        info.update({
            "gpu": props.name,
            "gpu_capability": f"sm_{props.major}{props.minor}",
            "gpu_sms": props.multi_processor_count,
            "gpu_memory_bytes": props.total_memory,
            "gpu_l2_bytes": getattr(props, "L2_cache_size", None),
            "driver": _driver_version(),
        })
        try:
            import cupy

            from labkit.core.device import device_info

            limits = device_info(0)
            info["gpu_smem_optin_bytes"], info["gpu_max_grid_y"] = limits.smem_optin_bytes, limits.max_grid_y
            if limits.ptx:  # the arch override (LABKIT_ARCH): the kernels this run launched were that arch's PTX
                info["arch_override"] = limits.target
            info["cuda_runtime"] = cupy.cuda.runtime.runtimeGetVersion()
            info["cuda_driver_api"] = cupy.cuda.runtime.driverGetVersion()
        except Exception as exc:
            info["cuda_version_error"] = repr(exc)
    else:
        info["gpu"] = None
    return info


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower() or "x"


def short_id(meta: dict) -> str:
    """A run as the README and the notes cite it, its name and random suffix ('dropin-273b32'), from its run.json
    (`meta`): the id Run.create made, less its date and GPU."""
    run_id, name = meta["run_id"], _slug(meta["name"])
    at = run_id.rfind(f"-{name}-")
    return run_id[at + 1:] if at >= 0 else run_id


class Run:
    """A fresh run directory. Records go in with `write`; `close` writes the manifest that marks it complete."""

    def __init__(self, path: Path, meta: dict):
        self.path = Path(path)
        self.meta = meta
        self._files: list[str] = []

    @classmethod
    def create(cls, root: Path, name: str, params: dict | None = None, device: str = "auto") -> "Run":
        prov = provenance(device)
        stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        run_id = f"{stamp}-{_slug(prov.get('gpu') or 'cpu')}-{_slug(name)}-{secrets.token_hex(3)}"
        path = Path(root) / run_id
        path.mkdir(parents=True, exist_ok=False)
        run = cls(path, {"schema": SCHEMA, "run_id": run_id, "name": name, "params": params or {},
                         "provenance": prov})
        run.write("run", run.meta)
        return run

    @property
    def run_id(self) -> str:
        return self.meta["run_id"]

    def write(self, name: str, record) -> Path:
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
            raise ValueError(f"record names use letters, digits, '_', '.', '-' only; got {name!r}")
        target = self.path / f"{name}.json"
        atomic_write_json(target, record)
        if target.name not in self._files:
            self._files.append(target.name)
        return target

    def add_file(self, path: Path) -> None:
        """Register a file already written into the run directory (a notebook, an archive) in the manifest."""
        rel = Path(path).resolve().relative_to(self.path.resolve())
        if str(rel) not in self._files:
            self._files.append(str(rel))

    def close(self, status: str = "complete") -> Path:
        files = {f: hashlib.sha256((self.path / f).read_bytes()).hexdigest() for f in self._files}
        manifest = {"run_id": self.run_id, "status": status,
                    "closed_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                    "files": files}
        atomic_write_json(self.path / "manifest.json", manifest)
        return self.path / "manifest.json"


def load_run(path: Path) -> dict:
    """All records of a run directory keyed by name, with `complete` telling whether its manifest exists and
    every listed file still matches its hash."""
    path = Path(path)
    if not (path / "run.json").is_file():
        raise ValueError(f"{path} is not a run directory (no run.json)")
    records = {p.stem: json.loads(p.read_text()) for p in sorted(path.glob("*.json")) if p.name != "manifest.json"}
    manifest_path = path / "manifest.json"
    complete = False
    if manifest_path.is_file():
        manifest = json.loads(manifest_path.read_text())
        complete = manifest.get("status") == "complete" and all(
            (path / f).is_file() and hashlib.sha256((path / f).read_bytes()).hexdigest() == h
            for f, h in manifest["files"].items())
    return {"path": str(path), "complete": complete, "records": records}


DATA_RUNS = REPO_ROOT / "data" / "runs"


def committed_runs(name: str | None = None, root: Path = DATA_RUNS) -> list[Path]:
    """Complete run directories under data/runs (optionally of one name), oldest first."""
    found = []
    for meta in sorted(Path(root).glob("*/run.json")):
        run = json.loads(meta.read_text())
        if (name is None or run.get("name") == name) and (meta.parent / "manifest.json").is_file():
            found.append(meta.parent)
    return found


def corrected_provenance(prov: dict, commit: str) -> dict:
    """`prov` with its commit replaced by `commit` (the launching side's, when the GPU copy recorded its stale
    .git): allowed only when every kernel source hash the run recorded equals that commit's file, so the
    correction is checked, not asserted. The recorded commit stays as `git_commit_recorded`."""
    full = _git("rev-parse", "--verify", f"{commit}^{{commit}}")
    if not full:
        raise ValueError(f"--commit {commit!r}: not a commit of this repository")
    hashes = prov.get("kernel_sources_sha256") or {}
    if not hashes:
        raise ValueError("the run records no kernel_sources_sha256: nothing to check a corrected commit against")

    def at_commit(name: str) -> str | None:
        data = git_output(REPO_ROOT, "show", f"{full}:kernels/{name}")
        return None if data is None else hashlib.sha256(data).hexdigest()

    differ = sorted(n for n, h in hashes.items() if at_commit(n) != h)
    if differ:
        raise ValueError(f"--commit {full[:12]}: the run's kernel sources differ from that commit's in {differ}")
    if full == prov.get("git_commit"):
        return prov
    return dict(prov, git_commit=full, git_commit_recorded=prov.get("git_commit"),
                git_source=f"labkit curate --commit (recorded {prov.get('git_source')}; all "
                           f"{len(hashes)} kernel source hashes equal this commit's)")


def curate_run(run_dir: Path, dest_root: Path = DATA_RUNS, attachments: list[Path] = (),
               commit: str | None = None) -> Path:
    """Copy a complete run into `dest_root` (default data/runs) with its executed notebook and any other
    attached files (logs), and extend its manifest to cover them. The source run must be complete. `commit`
    corrects the recorded commit (see `corrected_provenance`), checked before anything is copied."""
    import shutil

    run_dir = Path(run_dir)
    loaded = load_run(run_dir)
    if not loaded["complete"]:
        raise ValueError(f"{run_dir} is not a complete run (missing or stale manifest.json)")
    target = Path(dest_root) / run_dir.name
    if target.exists():
        raise ValueError(f"{target} exists already; runs are never overwritten")
    meta = loaded["records"]["run"]
    fixed = corrected_provenance(meta["provenance"], commit) if commit else None
    shutil.copytree(run_dir, target)
    manifest = json.loads((target / "manifest.json").read_text())
    if fixed is not None and fixed is not meta["provenance"]:
        atomic_write_json(target / "run.json", dict(meta, provenance=fixed))
        manifest["files"]["run.json"] = hashlib.sha256((target / "run.json").read_bytes()).hexdigest()
    for extra in attachments:
        extra = Path(extra)
        shutil.copy2(extra, target / extra.name)
        manifest["files"][extra.name] = hashlib.sha256(extra.read_bytes()).hexdigest()
    manifest["curated_utc"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    atomic_write_json(target / "manifest.json", manifest)
    return target


def book_notebooks_for_run(book_dir: Path, run_id: str) -> list[Path]:
    """The executed notebook of a book build that wrote run `run_id`: the notebook whose outputs name the run (a
    live session prints where it wrote), whatever the notebook's file name.

    Its HTML page is not attached: `jupyter nbconvert --to html` (or `labkit book`) regenerates it from the
    executed notebook, and the pages were three quarters of the committed runs' bytes."""
    return [nb for nb in sorted(Path(book_dir).glob("[0-9][0-9]_*.ipynb")) if run_id in nb.read_text(encoding="utf-8")]
