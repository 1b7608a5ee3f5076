"""CUDA binary tools: finding cuobjdump / nvdisasm, their versions, running them, and disassembling a cubin.

cuobjdump and nvdisasm are looked up on PATH, in $CUDA_HOME/bin, /usr/local/cuda/bin, and in the
`nvidia/cu13/bin` folder of the pip wheels `nvidia-cuda-cuobjdump` / `nvidia-cuda-nvdisasm`. Without them,
`labkit.sass.elf.resource_usage` falls back to reading the cubin's ELF section headers and the disassembly-based
functions raise ToolMissing, so callers (notebooks, tests) can replay committed summaries instead.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from labkit.core.cubin import complete_cubin


class ToolMissing(RuntimeError):
    """cuobjdump / nvdisasm not found: disassembly is not possible on this machine."""


def find_tool(name: str) -> str | None:
    """Path of a CUDA binary tool (cuobjdump, nvdisasm), or None. LABKIT_SASS_TOOLS=off hides them (to exercise
    the replay paths on a machine that has them)."""
    if os.environ.get("LABKIT_SASS_TOOLS", "").lower() in ("off", "0", "no"):
        return None
    found = shutil.which(name)
    if found:
        return found
    candidates = []
    for env in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(env):
            candidates.append(Path(os.environ[env]) / "bin" / name)
    candidates.append(Path("/usr/local/cuda/bin") / name)
    for entry in sys.path:
        candidates.append(Path(entry) / "nvidia" / "cu13" / "bin" / name)
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return str(c)
    return None


def tool_versions() -> dict:
    out = {}
    for name in ("cuobjdump", "nvdisasm"):
        path = find_tool(name)
        if path is None:
            out[name] = None
            continue
        text = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60).stdout
        release = re.search(r"release ([\d.]+), (V[\d.]+)", text)
        out[name] = {"path": path, "version": release.group(2) if release else text.strip().splitlines()[-1]}
    return out


def run_tool(tool: str, *args: str, timeout: int = 600) -> str:
    path = find_tool(tool)
    if path is None:
        raise ToolMissing(f"{tool} not found (PATH, $CUDA_HOME/bin, /usr/local/cuda/bin, pip nvidia-cuda-{tool})")
    proc = subprocess.run([path, *args], capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{tool} {' '.join(args)} failed: {proc.stderr.strip()[:2000]}")
    return proc.stdout


def disassemble(cubin: bytes, function: str | None = None) -> str:
    """SASS text of a cubin (optionally one function), by cuobjdump -sass, else nvdisasm."""
    cubin, _ = complete_cubin(cubin)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "k.cubin"
        path.write_bytes(cubin)
        if find_tool("cuobjdump"):
            args = ["-sass"] + (["-fun", function] if function else []) + [str(path)]
            return run_tool("cuobjdump", *args)
        args = ["-c"] + (["-fun", function] if function else []) + [str(path)]
        return run_tool("nvdisasm", *args)


def add_wheel_arguments(ap, workdir_note: str = "") -> None:
    """The --wheel and --workdir arguments every command that reads torch's SASS from a CUDA wheel takes."""
    ap.add_argument("--wheel", required=True, help="torch CUDA wheel, e.g. torch-2.11.0-cp312-...whl")
    ap.add_argument("--workdir", required=True, help="scratch folder outside the repository (GBs)" + workdir_note)


def scratch_dir(workdir: str) -> Path:
    """--workdir as a Path; SystemExit where it lies inside the repository: torch's binaries are never committed."""
    from labkit.core.compile import REPO_ROOT

    path = Path(workdir)
    if path.resolve().is_relative_to(REPO_ROOT):
        raise SystemExit("--workdir must be outside the repository: torch's binaries are never committed")
    return path
