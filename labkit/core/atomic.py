"""Atomic file writes: a temporary file in the target's folder, flushed to disk, then renamed over the target,
so a reader sees the old file or the new one, never a half-written one. The file ends with the mode a plain open()
would give it (0666 less the umask), not mkstemp's private 0600: pages and records are build outputs to share."""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path


def _umask() -> int:
    """The process umask. Linux reports it in /proc; elsewhere it can only be read by setting it, which is
    set back at once (a thread creating a file in between would see 0o022, a common default)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def default_file_mode() -> int:
    """0666 & ~umask: the mode open(path, "w") gives a new file."""
    return 0o666 & ~_umask()


def default_dir_mode() -> int:
    """0777 & ~umask: the mode mkdir gives a new folder (mkdtemp gives 0700)."""
    return 0o777 & ~_umask()


def atomic_write_bytes(path: Path, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, default_file_mode())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_json(path: Path, obj) -> None:
    atomic_write_bytes(path, (json.dumps(obj, indent=1, sort_keys=False, allow_nan=True) + "\n").encode())
