"""Which CUDA extra of the package matches the installed torch, and a check that the installed one does.

The rule, `cuda_extra(torch.version.cuda)`: a torch built for CUDA 12.x takes `pip install -e ".[cuda12]"`, one built
for CUDA 13.x takes `".[cuda13]"`. CuPy's CUDA runtime and NVRTC must share torch's CUDA major: the launches run on
torch's stream in torch's CUDA context, and a runtime of a newer major than the driver (which torch's build already
fits) does not start. A CPU build of torch (`torch.version.cuda is None`) takes `cuda13`: there nothing launches,
NVRTC only compiles sm_90 cubins, and NVRTC 13.0 is the H200's, so the CPU machine's cubins carry the H200's cache
keys (labkit.core.compile keys every cubin by its NVRTC version, so cubins of the two majors never mix).

`python -c "import torch; print(torch.version.cuda)"` prints the version the rule reads; `labkit env` prints the
extra it picks. `check_match()` raises, before a first launch, when the installed extra is the other one.
"""
from __future__ import annotations

import re

# extra -> the packages it installs (pyproject.toml's [project.optional-dependencies]; a test holds them equal)
EXTRA_PACKAGES = {
    "cuda12": ("cupy-cuda12x", "nvidia-cuda-nvrtc-cu12"),
    "cuda13": ("cupy-cuda13x", "nvidia-cuda-nvrtc"),
}
CPU_EXTRA = "cuda13"  # torch without CUDA: NVRTC only compiles, and 13.0 gives the H200's cache keys


def cuda_extra(torch_cuda_version: str | None) -> str:
    """The extra for a torch built for `torch_cuda_version` (torch.version.cuda: "12.4", "13.0", or None for a CPU
    build). Raises ValueError naming the value for a CUDA major without an extra, or a value that is no version."""
    if torch_cuda_version is None:
        return CPU_EXTRA
    m = re.fullmatch(r"(\d+)\.\d+(\.\d+)?", str(torch_cuda_version))
    extra = f"cuda{m.group(1)}" if m else None
    if extra not in EXTRA_PACKAGES:
        raise ValueError(f"torch.version.cuda is {torch_cuda_version!r}: labkit has extras for CUDA 12.x (cuda12) and "
                         f"13.x (cuda13) only")
    return extra


def install_command(extra: str) -> str:
    """The line that replaces whichever CUDA extra is installed by `extra` (two CuPy packages side by side break
    CuPy, so the other extras' packages go first)."""
    others = [p for e, pkgs in EXTRA_PACKAGES.items() if e != extra for p in pkgs]
    return f'pip uninstall -y {" ".join(others)} && pip install -e ".[{extra}]"'


def _major(version: str) -> int:
    return int(str(version).split(".")[0])


def mismatch(torch_cuda: str | None, cupy_runtime: str | None, nvrtc: str | None) -> str | None:
    """Why the installed CuPy / NVRTC do not fit torch, or None when they do. Versions as "major.minor" strings;
    `cupy_runtime` / `nvrtc` are None when CuPy / NVRTC are not installed. A CPU build of torch needs NVRTC (CPU mode
    compiles every kernel with it) and any major of it: nothing launches there."""
    if torch_cuda is None:
        if nvrtc is None:
            return (f"NVRTC (with CuPy) is not installed, and CPU mode compiles every kernel with it; run "
                    f'pip install -e ".[{CPU_EXTRA}]" (labkit.core.toolkit.cuda_extra)')
        return None
    extra = cuda_extra(torch_cuda)
    if cupy_runtime is None or nvrtc is None:
        missing = "CuPy" if cupy_runtime is None else "NVRTC"
        return (f"torch is built for CUDA {torch_cuda} but {missing} is not installed; run "
                f'pip install -e ".[{extra}]" (labkit.core.toolkit.cuda_extra)')
    if _major(cupy_runtime) == _major(torch_cuda) == _major(nvrtc):
        return None
    return (f"torch is built for CUDA {torch_cuda}, but CuPy's CUDA runtime is {cupy_runtime} and NVRTC is {nvrtc}: "
            f"the installed CUDA extra is not the one torch needs; run {install_command(extra)} "
            f"(labkit.core.toolkit.cuda_extra)")


def installed_versions() -> tuple[str | None, str | None, str | None]:
    """(torch.version.cuda, CuPy's CUDA runtime, NVRTC) as "major.minor"; None for what is missing. For a CPU build
    of torch the CUDA runtime is not asked (there may be no driver), NVRTC is."""
    import torch

    nvrtc = _nvrtc()
    if torch.version.cuda is None:
        return None, None, nvrtc
    try:
        from cupy.cuda import runtime
    except ImportError:
        return torch.version.cuda, None, None
    rt = runtime.runtimeGetVersion()  # 13020 for 13.2
    return torch.version.cuda, f"{rt // 1000}.{rt % 1000 // 10}", nvrtc


def _nvrtc() -> str | None:
    """NVRTC's version as "major.minor", or None when CuPy or NVRTC is missing (read here, not through
    labkit.core.compile.nvrtc_version, which runs check_match first)."""
    try:
        from cupy_backends.cuda.libs import nvrtc
    except ImportError:
        return None
    try:
        return ".".join(str(int(v)) for v in nvrtc.getVersion())
    except Exception:  # cuda-pathfinder found no libnvrtc (DynamicLibNotFoundError)
        return None


_checked: list[bool] = []


def check_match() -> None:
    """Raise RuntimeError (the environment, not an input, is wrong) naming torch's CUDA version, CuPy's and NVRTC's,
    and the install line to run, when the installed CUDA extra is not the one torch's build needs (see
    `cuda_extra`). Called before the process's first CuPy call on a GPU (labkit.core.device.device_info) and its
    first NVRTC compile; passes once, then costs nothing. NVRTC is checked apart from CuPy: CuPy 14 for CUDA 12
    loads libnvrtc.so.13 as readily as .so.12."""
    if _checked:
        return
    if (why := mismatch(*installed_versions())) is not None:
        raise RuntimeError(why)
    _checked.append(True)
