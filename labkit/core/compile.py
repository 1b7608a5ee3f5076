"""NVRTC compilation of `kernels/*.cu` into cubins, with an on-disk cache.

The cache key is everything that can change the machine code: the kernel source and the headers it includes,
the compile options, the NVRTC version and the target architecture. Inputs and outputs never enter the key.
Entries are written atomically and carry a digest of their payload, so a truncated or corrupted entry is
detected on read and rebuilt instead of being loaded.

NVRTC needs no GPU: with an explicit `arch` the CPU machine builds the same sm_90 cubins the H200 runs. A
`compute_XY` target (the arch override, labkit.core.device) gives PTX instead, which the driver JIT-compiles at load.
"""
from __future__ import annotations

import hashlib
import logging
import os
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from labkit.core.atomic import atomic_write_bytes
from labkit.core.cubin import complete_cubin
from labkit.core.log import first_use
from labkit.core.sources import CHECKOUT, kernel_dir

REPO_ROOT = CHECKOUT  # data/, notebooks/ and git live only in a checkout (a wheel ships kernels/ and host/ alone)
log = logging.getLogger(__name__)

# --fmad=true: torch's CUDA build lets the compiler contract a*b+c into FMA, and the bits depend on it.
# --ftz=false, --prec-div=true, --prec-sqrt=true: IEEE denormals and divisions, i.e. no fast-math anywhere.
BASE_OPTIONS = ("--std=c++17", "--fmad=true", "--ftz=false", "--prec-div=true", "--prec-sqrt=true")

_MAGIC = b"LABKIT-CUBIN-1\n"
_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


@dataclass(frozen=True)
class CompileRecord:
    """What a cubin was built from; stored with every run that uses it."""

    kernel: str
    source_sha256: str  # the .cu file and every local header it includes, in include order
    headers: tuple[str, ...]
    options: tuple[str, ...]
    nvrtc_version: tuple[int, int]
    arch: str
    cubin_sha256: str
    cache_hit: bool

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class CompiledKernel:
    record: CompileRecord
    cubin: bytes


def _nvrtc_module():
    """CuPy's NVRTC binding, after the CUDA extra is checked (a missing one names the install line)."""
    from labkit.core.toolkit import check_match

    check_match()
    from cupy_backends.cuda.libs import nvrtc

    return nvrtc


def nvrtc_version() -> tuple[int, int]:
    nvrtc = _nvrtc_module()

    return tuple(int(v) for v in nvrtc.getVersion())


def available_kernels() -> list[str]:
    return sorted(p.stem for p in kernel_dir().glob("*.cu"))


def device_arch(device_index: int | None = None) -> str:
    """`sm_XY` of a CUDA device (default: the current one); raises ValueError when there is none (then pass `arch`
    explicitly). Read as every launch reads it: labkit.core.device.device_info."""
    import torch

    if not torch.cuda.is_available():
        raise ValueError("no CUDA device: pass arch explicitly, e.g. arch='sm_90'")
    from labkit.core.device import device_info

    return device_info(torch.cuda.current_device() if device_index is None else device_index).arch_name


def arch_number(arch: str) -> int:
    """90 for 'sm_90', 'sm_90a' or 'compute_90'; ValueError naming the value for anything else."""
    m = re.fullmatch(r"(?:sm_(\d{2,3})a?)|(?:compute_(\d{2,3}))", str(arch))
    if m is None:
        raise ValueError(f"arch must look like 'sm_90' (cubin) or 'compute_80' (PTX), got {arch!r}")
    return int(m.group(1) or m.group(2))


def kernel_sources(kernel: str) -> tuple[str, dict[str, str]]:
    """(text of kernels/<kernel>.cu, {header name: text}) of every local header it includes, in include order."""
    root = kernel_dir()
    path = root / f"{kernel}.cu"
    if not path.is_file():
        raise ValueError(f"unknown kernel {kernel!r}: no {path}; available: {available_kernels()}")
    text = path.read_text(encoding="utf-8")  # not the locale's: NVRTC 12.0-12.4 leaves it ASCII
    headers: dict[str, str] = {}
    pending = _INCLUDE.findall(text)
    while pending:
        name = pending.pop(0)
        if name in headers:
            continue
        header = root / name
        if not header.is_file():
            raise ValueError(f"kernel {kernel!r} includes {name!r}, which is not in {root}")
        headers[name] = header.read_text(encoding="utf-8")
        pending.extend(_INCLUDE.findall(headers[name]))
    return text, headers


def digest(*parts: str | bytes) -> str:
    """SHA-256 of `parts`, each length-prefixed (so ("ab", "c") and ("a", "bc") differ): the cache keys' hash."""
    h = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def sources_digest() -> str:
    """One digest of every kernels/*.cu and the headers each includes: what a measurement of the kernels (a tuned
    dispatch table) was made with."""
    parts: list[str] = []
    for k in available_kernels():
        text, headers = kernel_sources(k)
        parts += [k, text, *(f"{h}\n{t}" for h, t in headers.items())]
    return digest(*parts)


def cache_dir() -> Path:
    root = os.environ.get("LABKIT_CACHE_DIR")
    return Path(root) if root else Path.home() / ".cache" / "labkit" / "cubin"


def _read_entry(path: Path, ptx: bool = False) -> bytes | None:
    """The cached cubin (or PTX), or None when the entry is missing or does not match its stored digest."""
    try:
        blob = path.read_bytes()
    except FileNotFoundError:
        return None
    head = len(_MAGIC) + 64
    if len(blob) <= head or not blob.startswith(_MAGIC):
        return None
    stored, payload = blob[len(_MAGIC):head].decode("ascii", "replace"), blob[head:]
    if hashlib.sha256(payload).hexdigest() != stored or payload.startswith(b"\x7fELF") == ptx:
        return None
    return payload


def _write_entry(path: Path, cubin: bytes) -> None:
    atomic_write_bytes(path, _MAGIC + hashlib.sha256(cubin).hexdigest().encode() + cubin)


def nvrtc_compile(kernel: str, options: tuple[str, ...], sources=None, ptx: bool = False) -> tuple[bytes, str]:
    """(cubin as NVRTC hands it over, or with `ptx` the PTX text; program log) of kernels/<kernel>.cu compiled with
    exactly `options`, past the cache. `sources`: (text, headers) as kernel_sources returns them, when the caller has
    read them already. Raises RuntimeError with NVRTC's log when compilation fails."""
    nvrtc = _nvrtc_module()

    source, headers = sources if sources is not None else kernel_sources(kernel)
    names = tuple(headers)
    prog = nvrtc.createProgram(source, f"{kernel}.cu", tuple(headers[n].encode() for n in names),
                               tuple(n.encode() for n in names))
    try:
        try:
            nvrtc.compileProgram(prog, options)
        except nvrtc.NVRTCError as exc:
            raise RuntimeError(f"NVRTC failed on {kernel}.cu:\n{nvrtc.getProgramLog(prog)}") from exc
        return (nvrtc.getPTX(prog) if ptx else nvrtc.getCUBIN(prog)), nvrtc.getProgramLog(prog)
    finally:
        nvrtc.destroyProgram(prog)


def compile_kernel(kernel: str, arch: str | None = None, extra_options: tuple[str, ...] = ()) -> CompiledKernel:
    """Compile `kernels/<kernel>.cu` for `arch` (default: the current device), through the cache. `arch` is sm_XY
    for a cubin, or compute_XY for PTX (the image then is the PTX text with its terminating NUL, as the driver's
    module loader takes it)."""
    arch = arch or device_arch()
    arch_number(arch)
    ptx = arch.startswith("compute_")
    options = BASE_OPTIONS + (f"--gpu-architecture={arch}",) + tuple(extra_options)
    source, headers = kernel_sources(kernel)
    version = nvrtc_version()
    source_sha = digest(source, *(headers[n] for n in headers))
    key = digest(source_sha, repr(options), repr(version), arch)
    path = cache_dir() / f"{kernel}-{key[:32]}.cubin"
    cubin = _read_entry(path, ptx)
    hit = cubin is not None
    if cubin is None:
        start = time.perf_counter()
        cubin, _ = nvrtc_compile(kernel, options, (source, headers), ptx)
        _write_entry(path, cubin)
        # a cold compile is seconds a user waits on at a first call: say so (a cache hit costs nothing: silent)
        first_use(log, "NVRTC compiled %s for %s in %.1f s (cached in %s)", kernel, arch, time.perf_counter() - start,
                 path.parent)
    if ptx:
        cubin = cubin.rstrip(b"\0") + b"\0"
    else:
        # CuPy's getCUBIN drops the image's last (zero) byte; the driver does not mind, disassemblers and hashes do.
        cubin, _ = complete_cubin(cubin)
    record = CompileRecord(kernel, source_sha, tuple(headers), options, version, arch,
                           hashlib.sha256(cubin).hexdigest(), hit)
    return CompiledKernel(record, cubin)


def cache_path(record: CompileRecord) -> Path:
    key = digest(record.source_sha256, repr(record.options), repr(record.nvrtc_version), record.arch)
    return cache_dir() / f"{record.kernel}-{key[:32]}.cubin"


_ARCH_REFUSAL = re.compile(r"requires \.target sm_\d+ or higher")  # ptxas: a feature the target lacks
_buildable: dict[tuple[str, str], tuple] = {}


def compile_unless_refused(kernel: str, arch: str,
                           extra_options: tuple[str, ...] = ()) -> tuple[CompileRecord | None, str | None]:
    """(record, None) where NVRTC builds `kernel` for `arch` (with `extra_options`); (None, NVRTC's first error line)
    where it refuses because the arch lacks a feature the kernel uses. Any other compile error is raised."""
    try:
        return compile_kernel(kernel, arch, extra_options).record, None
    except RuntimeError as exc:
        first = next((ln for ln in str(exc).splitlines() if _ARCH_REFUSAL.search(ln)), None)
        if first is None:
            raise
        return None, first.split("error", 1)[-1].lstrip(" :").strip()


def compile_buildable(arch: str) -> tuple[list[CompileRecord], dict[str, str]]:
    """(records of every kernel NVRTC builds for `arch`, {kernel: NVRTC's first error line} for those it refuses
    because the arch lacks a feature they use: below sm_90 the chain kernels, which no path offers there). Any other
    compile error is raised: a kernel that stops compiling must not drop out of a record quietly. Remembered per
    arch and kernel sources (refused compiles are not cached on disk)."""
    key = (arch, sources_digest())
    if key not in _buildable:
        records, refused = [], {}
        for k in available_kernels():
            record, why = compile_unless_refused(k, arch)
            if record is None:
                refused[k] = why
            else:
                records.append(record)
        _buildable[key] = (records, refused)
    records, refused = _buildable[key]
    return list(records), dict(refused)
