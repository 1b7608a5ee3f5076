"""Loading compiled kernels onto a device and launching them on torch's current stream.

The one launch path of the package. A `Kernel` describes a launch (which function of which kernels/*.cu, grid,
block, dynamic shared memory, compile options); `prepare` turns it into a `Prepared` launch on one device, with
everything that does not change between calls done once: the module compiled or read from the cubin cache and
loaded, the function handle resolved, the shared-memory opt-in set. A call then only hands over its arguments
and torch's current stream. Ops build their Kernels from the shape (labkit.ops.*.plan) and sequence them;
`launch` is the general form for one-off kernels (floors, sanitizer rings), checking every tensor argument.

Tensor arguments reach kernels as raw device pointers, so every launch is legal inside `torch.cuda.graph` capture.
"""
from __future__ import annotations

import threading
import warnings
from dataclasses import dataclass

from labkit.core.compile import CompileRecord, compile_kernel
from labkit.core.views import device_pointer

_lock = threading.Lock()
_loaded: dict[tuple, tuple[object, CompileRecord]] = {}
_prepared: dict[tuple, "Prepared"] = {}
_streams: dict[tuple[int, int], object] = {}

# Dynamic shared memory a function may use without opting in (the same on every arch).
DEFAULT_SMEM = 48 * 1024


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

            compiled = compile_kernel(kernel, device_info(device_index).arch_name, tuple(options))
            with cp.cuda.Device(device_index):
                module = cp.cuda.function.Module()
                module.load(compiled.cubin)
            _loaded[key] = (module, compiled.record)
        return _loaded[key]


def loaded_records() -> list[CompileRecord]:
    """Compile records of every kernel this process has loaded: the provenance of a run's launches."""
    with _lock:
        return [record for _, record in _loaded.values()]


class Prepared:
    """A Kernel on one device: call it with the kernel's arguments (raw pointers and numpy scalars) and a stream
    from `stream()`. Launches with the device made current if it is not (the common case costs one query)."""

    __slots__ = ("spec", "device_index", "_fn", "_grid", "_block", "_smem", "_get_device", "_device")

    def __init__(self, spec: Kernel, device_index: int):
        import cupy as cp

        module, _ = load(spec.kernel, device_index, spec.options)
        fn = module.get_function(spec.function)
        if spec.shared_mem > DEFAULT_SMEM:
            from cupy_backends.cuda.api import driver

            with cp.cuda.Device(device_index):
                driver.funcSetAttribute(fn.ptr, driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                        spec.shared_mem)
        self.spec, self.device_index, self._fn = spec, device_index, fn
        self._grid, self._block, self._smem = tuple(spec.grid), tuple(spec.block), spec.shared_mem
        self._get_device, self._device = cp.cuda.runtime.getDevice, cp.cuda.Device

    def __call__(self, args: tuple, stream) -> None:
        if self._get_device() == self.device_index:
            self._fn(self._grid, self._block, args, shared_mem=self._smem, stream=stream)
        else:
            with self._device(self.device_index):
                self._fn(self._grid, self._block, args, shared_mem=self._smem, stream=stream)


def prepare(spec: Kernel, device_index: int) -> Prepared:
    """The Prepared launch of `spec` on a device, made once per process."""
    key = (spec, device_index)
    p = _prepared.get(key)
    if p is None:
        with _lock:
            p = _prepared.get(key)
        if p is None:
            p = Prepared(spec, device_index)
            with _lock:
                p = _prepared.setdefault(key, p)
    return p


def _raw_stream_getter():
    import torch

    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # one C call; torch.cuda.current_stream is ~2 us
    if raw is not None:
        return raw
    return lambda index: torch.cuda.current_stream(index).cuda_stream


_raw_stream = None


def stream(device_index: int):
    """(CuPy's handle on torch's current stream of the device, its raw handle): the capturing stream during graph
    capture, the caller's stream on any thread. Handles are cached per raw stream."""
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
    """Zero device memory on a stream (a memset node under graph capture)."""
    from cupy.cuda import runtime

    runtime.memsetAsync(ptr, 0, nbytes, stream_ptr)


def launch(kernel: str, function: str, grid, block, args, device, shared_mem: int = 0,
           options: tuple[str, ...] = ()) -> None:
    """Launch `function` from kernels/<kernel>.cu on torch's current stream of `device`. Tensor arguments must be
    contiguous CUDA tensors on that device (checked) and are passed as raw pointers."""
    from labkit.core.device import current_index

    index = current_index(device)
    converted = tuple(device_pointer(a, index) if hasattr(a, "data_ptr") else a for a in args)
    prepare(Kernel(kernel, function, tuple(grid), tuple(block), shared_mem, tuple(options)), index)(
        converted, stream(index)[0])
