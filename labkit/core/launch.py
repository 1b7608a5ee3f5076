"""Loading compiled kernels onto a device and launching them on torch's current stream.

The one launch path of the package. A `Kernel` describes a launch (which function of which kernels/*.cu, grid,
block, dynamic shared memory, compile options); `prepare` turns it into a `Prepared` launch on one device, with
everything that does not change between calls done once: the module compiled or read from the cubin cache and
loaded, the function handle resolved, the shared-memory opt-in raised to what it needs. A call then only hands over
its arguments and torch's current stream. Ops build their Kernels from the shape (labkit.ops.*.launches) and sequence
them inside `device_scope`; `launch` is the general form for one-off kernels (floors, sanitizer rings), checking
every tensor argument.

Function handles are cached per (device, kernel, function, options), never per shape, so a model that sees many
row counts loads each function once. Tensor arguments reach kernels as raw device pointers, so every launch is
legal inside `torch.cuda.graph` capture.
"""
from __future__ import annotations

import contextlib
import threading
import warnings
from dataclasses import dataclass

from labkit.core.compile import CompileRecord, compile_kernel
from labkit.core.views import device_pointer

_lock = threading.Lock()
_loaded: dict[tuple, tuple[object, CompileRecord]] = {}
_functions: dict[tuple, list] = {}  # (device, kernel, function, options) -> [cupy Function, opted-in bytes]
_streams: dict[tuple[int, int], object] = {}


@dataclass(frozen=True)
class Kernel:
    """One launch of `function` in kernels/<kernel>.cu."""

    kernel: str
    function: str
    grid: tuple[int, ...]
    block: tuple[int, ...]
    shared_mem: int = 0            # dynamic shared memory per block, bytes
    options: tuple[str, ...] = ()  # extra compile options (-D variants)


def load(kernel: str, device_index: int, options: tuple[str, ...] = ()):
    """(cupy Module, CompileRecord) for kernels/<kernel>.cu on a device, compiled once per set of extra options."""
    key = (device_index, kernel, tuple(options))
    with _lock:
        if key not in _loaded:
            import cupy as cp

            from labkit.core.device import device_info

            compiled = compile_kernel(kernel, device_info(device_index).target, tuple(options))
            with cp.cuda.Device(device_index):
                module = cp.cuda.function.Module()
                module.load(compiled.cubin)
            _loaded[key] = (module, compiled.record)
        return _loaded[key]


def loaded_records() -> list[CompileRecord]:
    """Compile records of every kernel this process has loaded: the provenance of a run's launches."""
    with _lock:
        return [record for _, record in _loaded.values()]


def function(kernel: str, name: str, device_index: int, options: tuple[str, ...] = (), shared_mem: int = 0):
    """The cupy Function `name` of kernels/<kernel>.cu on a device, loaded once and opted in to at least
    `shared_mem` bytes of dynamic shared memory (the opt-in only ever grows: a smaller launch of the same function
    must not take away what a larger one needs)."""
    key = (device_index, kernel, name, tuple(options))
    entry = _functions.get(key)
    if entry is None or entry[1] < shared_mem:
        module, _ = load(kernel, device_index, options)
        with _lock:
            entry = _functions.get(key)
            if entry is None:
                entry = _functions[key] = [module.get_function(name), 0]
            if entry[1] < shared_mem:
                import cupy as cp
                from cupy_backends.cuda.api import driver

                from labkit.core.device import device_info

                with cp.cuda.Device(device_index):
                    # The default cap (48 KiB) holds static and dynamic shared memory together: opt in wherever
                    # the two together pass it, not only where the dynamic part does.
                    static = driver.funcGetAttribute(driver.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, entry[0].ptr)
                    if shared_mem + static > device_info(device_index).smem_block_bytes:
                        driver.funcSetAttribute(entry[0].ptr, driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                                shared_mem)
                entry[1] = shared_mem
    return entry[0]


class Prepared:
    """A Kernel on one device: call it with the kernel's arguments (raw pointers and numpy scalars) and a stream
    from `stream()`, with the device current (`device_scope`)."""

    __slots__ = ("spec", "device_index", "_fn", "_grid", "_block", "_smem")

    def __init__(self, spec: Kernel, device_index: int):
        self._fn = function(spec.kernel, spec.function, device_index, spec.options, spec.shared_mem)
        self.spec, self.device_index = spec, device_index
        self._grid, self._block, self._smem = tuple(spec.grid), tuple(spec.block), spec.shared_mem

    def __call__(self, args: tuple, stream) -> None:
        self._fn(self._grid, self._block, args, shared_mem=self._smem, stream=stream)

    @property
    def function_handle(self) -> int:
        """The driver's CUfunction, for the host extension's launches (labkit.core.program.native_steps)."""
        return self._fn.ptr


def prepare(spec: Kernel, device_index: int) -> Prepared:
    return Prepared(spec, device_index)


_get_device = None


def device_scope(device_index: int):
    """A context that makes `device_index` the current device for what runs inside it (launches, memsets), or
    nothing when it already is (the common case costs one query)."""
    global _get_device
    import cupy as cp

    if _get_device is None:
        _get_device = cp.cuda.runtime.getDevice
    if _get_device() == device_index:
        return contextlib.nullcontext()
    return cp.cuda.Device(device_index)


def _raw_stream_getter():
    import torch

    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # one C call; torch.cuda.current_stream is ~2 us
    if raw is not None:
        return raw
    return lambda index: torch.cuda.current_stream(index).cuda_stream


_raw_stream = None


def stream(device_index: int):
    """(CuPy's handle on torch's current stream of the device, its raw handle): the capturing stream during graph
    capture, the caller's stream on any thread. Handles are cached per (device, raw stream)."""
    global _raw_stream
    if _raw_stream is None:
        _raw_stream = _raw_stream_getter()
    ptr = _raw_stream(device_index)
    s = _streams.get((device_index, ptr))  # the default stream's handle (0) is every device's
    if s is None:
        import cupy as cp

        with warnings.catch_warnings():
            # ExternalStream wraps a raw handle without touching it; its suggested replacement needs the
            # __cuda_stream__ protocol, which torch 2.5's streams lack.
            warnings.simplefilter("ignore", DeprecationWarning)
            s = _streams.setdefault((device_index, ptr), cp.cuda.ExternalStream(ptr, device_index))
    return s, ptr


def memset_async(ptr: int, nbytes: int, stream_ptr: int) -> None:
    """Zero device memory on a stream of the current device (a memset node under graph capture)."""
    from cupy.cuda import runtime

    runtime.memsetAsync(ptr, 0, nbytes, stream_ptr)


def launch(kernel: str, function: str, grid, block, args, device, shared_mem: int = 0,
           options: tuple[str, ...] = ()) -> None:
    """Launch `function` from kernels/<kernel>.cu on torch's current stream of `device`. Tensor arguments must be
    contiguous CUDA tensors on that device (checked) and are passed as raw pointers."""
    from labkit.core.device import current_index

    index = current_index(device)
    converted = tuple(device_pointer(a, index) if hasattr(a, "data_ptr") else a for a in args)
    k = prepare(Kernel(kernel, function, tuple(grid), tuple(block), shared_mem, tuple(options)), index)
    with device_scope(index):
        k(converted, stream(index)[0])
