"""The drop-in's host extension: host/layer_norm.cpp (with host/launch_program.h), built at first use with
torch.utils.cpp_extension against the installed torch and cached in torch's extension root
(~/.cache/torch_extensions, or $TORCH_EXTENSIONS_DIR), keyed by the sources' hash, torch's version and Python's, so
a torch upgrade or an edited source rebuilds it. A build says when it starts and how long it took
(labkit.core.log.first_use); a load says nothing.

It runs a plan's Programs (labkit.core.program) from C++ and gives the drop-in a C++ autograd node: an eager call
with autograd recording then costs about what torch's own node costs on the host, and the backward runs in the
engine's thread with no Python (notebook 10 measures both). It needs only a C++ compiler and ninja: the CUDA
driver is opened at run time.

Where it cannot be built or loaded (no compiler, LABKIT_HOST=0), or its stream query disagrees with torch's on a
device, `unavailable()` says why and the drop-in runs the same Programs from Python (labkit.core.program
.BoundProgram) through `_LayerNorm`: the same kernels and bits, more host time per call.
"""
from __future__ import annotations

import hashlib
import logging
import os
import sys
import threading
import time
from pathlib import Path

from labkit.core.environ import scoped_environ
from labkit.core.log import first_use
from labkit.core.sources import host_dir

SOURCES = ("layer_norm.cpp", "launch_program.h")

log = logging.getLogger(__name__)
_lock = threading.Lock()
_state: dict = {}
_checked_devices: dict[int, str | None] = {}


def source_hash() -> str:
    h = hashlib.sha256()
    for name in SOURCES:
        h.update((host_dir() / name).read_bytes())
    return h.hexdigest()[:12]


def extension_name() -> str:
    """The extension's module name: its sources' hash, torch's version and Python's (the build folder is named by
    it, and two interpreters must not share one build)."""
    import torch

    return (f"labkit_host_{source_hash()}_{torch.__version__.replace('.', '_').replace('+', '_')}"
            f"_py{sys.version_info.major}{sys.version_info.minor}")


def build_directory(name: str) -> Path:
    """Where the extension `name` is built and cached: torch's extension root ($TORCH_EXTENSIONS_DIR, else
    torch's user cache folder). Named here, not left to torch, so that whether the library is already there tells
    a build (tens of seconds, logged) from a load."""
    from torch.utils import cpp_extension

    return Path(os.environ.get("TORCH_EXTENSIONS_DIR") or cpp_extension.get_default_build_root()) / name


def _build():
    """(module or None, why not or None, seconds spent building it or None where it was loaded from the cache)"""
    if os.environ.get("LABKIT_HOST", "1") == "0":
        return None, "turned off (LABKIT_HOST=0)", None
    try:
        import torch
        from torch.utils import cpp_extension

        name = extension_name()
        where = build_directory(name)
        cached = (where / f"{name}.so").is_file()
        where.mkdir(parents=True, exist_ok=True)
        if not cached:  # the one wait of a first use longer than a few seconds: said when it starts, not only after
            first_use(log, "building the host extension %s (C++, once per torch and source version; tens of "
                      "seconds)", name)
        start = time.perf_counter()
        sources = host_dir()
        flags, ldflags = ["-O2"], []
        torch_cuda = Path(torch.__file__).parent / "lib" / "libtorch_cuda.so"
        if torch.version.cuda is not None and torch_cuda.is_file():
            # labkit.enable() calls torch's own CUDA LayerNorm kernels where ours do not serve
            flags.append("-DLABKIT_TORCH_CUDA")
            ldflags += [f"-L{torch_cuda.parent}", "-ltorch_cuda"]
        # torch runs ninja from PATH: a virtual environment's own ninja (a dependency) is beside its interpreter,
        # which is not on PATH where the environment is used without being activated
        bindir = str(Path(sys.executable).parent)
        path = os.environ.get("PATH", "")
        if bindir not in path.split(os.pathsep):
            path = bindir + os.pathsep + path
        with scoped_environ(PATH=path):
            module = cpp_extension.load(name=name, sources=[str(sources / "layer_norm.cpp")],
                                        extra_include_paths=[str(sources)], extra_cflags=flags,
                                        extra_ldflags=ldflags, build_directory=str(where), verbose=False)
        if cached:
            return module, None, None
        seconds = time.perf_counter() - start
        first_use(log, "built the host extension %s in %.1f s (C++, torch.utils.cpp_extension; cached in %s)", name,
                  seconds, where)
        return module, None, seconds
    except Exception as exc:  # no compiler, no ninja, a torch without headers: the Python runner serves
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return None, f"could not be built here ({type(exc).__name__}: {first[:200]})", None


def loaded():
    """The extension module if this process has built or loaded it already, else None (never builds it)."""
    return _state.get("module")


_on_load: list = []


def when_loaded(fn) -> None:
    """Call fn(module) once the extension is loaded in this process (now, if it is already)."""
    with _lock:  # module() runs the list under the lock: a registration is either run there or here
        m = _state.get("module")
        if m is None:
            _on_load.append(fn)
    if m is not None:
        fn(m)


def module():
    """The extension module, or None (then `unavailable()` says why). Built once per process."""
    if "module" not in _state:
        with _lock:
            if "module" not in _state:
                m, _state["why"], _state["built_in"] = _build()
                for fn in _on_load if m is not None else ():
                    try:
                        fn(m)
                    except Exception as exc:  # what fn registers is an optimisation: the module still serves
                        log.warning("labkit host extension: %s failed at load (%s: %s)", getattr(fn, "__name__", fn),
                                    type(exc).__name__, exc)
                _state["module"] = m
                _refresh()
    return _state["module"]


def built_in() -> float | None:
    """Seconds this process spent building the extension; None where it was loaded from the cache, could not be
    built, or has not been asked for yet."""
    return _state.get("built_in")


# The eager fast path (op.layer_norm reads fast[0] on every call): the extension's `call`, which serves a signature
# whose decision get_plan has remembered, while the extension is built and nothing suspends it; else None. Never
# builds the extension: until a GPU plan has asked for it, every call takes the Python path.
fast: list = [None]


def _refresh() -> None:
    m = _state.get("module")
    fast[0] = m.call if m is not None and not _state.get("suspended") and not _state.get("off") else None


def suspend(delta: int) -> None:
    """+1 on entering a process-wide context that changes what get_plan decides (a forced backward, `off`), -1 on
    leaving it: while any is active, every call takes the Python path. (A dispatch protocol is a context variable,
    per thread and task: layer_norm reads it on each call instead.)"""
    with _lock:
        _state["suspended"] = _state.get("suspended", 0) + delta
        _refresh()


def unavailable_reason_off() -> str | None:
    """`off`'s reason while it is active (labkit.ops.dropin.plan reads it without building the extension)."""
    return "turned off for this measurement (labkit.ops.dropin.host.off)" if _state.get("off") else None


def remember(x, ns: tuple, weight, bias, eps, needs_grad: bool, ours) -> None:
    """Record get_plan's answer for this call's signature in the fast path: torch's call (`ours` None) or the host
    plan `ours`. Only while the fast path serves (never inside a context it is suspended for)."""
    m = _state.get("module")
    if m is None or fast[0] is None:
        return
    m.remember(x, ns, weight, bias, eps, needs_grad, m.TORCH if ours is None else m.OURS, ours)


def forget() -> None:
    """Drop every remembered answer (labkit.ops.dropin.plan.clear)."""
    m = _state.get("module")
    if m is not None:
        m.forget()


class off:
    """`with host.off():` plans made inside use the Python runner (for measuring one runner against the other;
    plans already cached keep theirs, so clear labkit.ops.dropin.plan's cache around it)."""

    def __enter__(self):
        with _lock:
            _state["off"] = _state.get("off", 0) + 1
            _refresh()
        return self

    def __exit__(self, *exc):
        with _lock:
            _state["off"] -= 1
            _refresh()


def unavailable(device_index: int | None = None) -> str | None:
    """Why the host extension does not serve (on this device, where given), or None where it does."""
    if (why := unavailable_reason_off()) is not None:
        return why
    if module() is None:
        return _state["why"]
    if device_index is None:
        return None
    why = _checked_devices.get(device_index, "unchecked")
    if why == "unchecked":
        why = _checked_devices[device_index] = _check_device(device_index)
    return why


def _check_device(index: int) -> str | None:
    """The extension's launches go to the stream torch calls current: checked once per device, on the default
    stream and on a side stream, against torch's own raw handle."""
    import torch

    m = module()
    error = m.driver_error()
    if error:
        return error
    try:
        ok = m.current_stream(index) == torch._C._cuda_getCurrentRawStream(index)
        side = torch.cuda.Stream(device=index)
        with torch.cuda.stream(side):
            ok = ok and m.current_stream(index) == side.cuda_stream
    except Exception as exc:
        return f"its stream query failed ({type(exc).__name__}: {exc})"
    return None if ok else "its stream query disagrees with torch's current stream"


def program(bound_program):
    """A labkit.core.program.BoundProgram as the extension's Program."""
    from labkit.core.program import native_steps

    return module().Program(len(bound_program.program.slots), native_steps(bound_program))
