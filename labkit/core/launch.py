"""Loading compiled kernels onto a device and launching them on torch's current stream."""
from __future__ import annotations

import threading
import warnings

from labkit.core.compile import CompileRecord, compile_kernel, device_arch
from labkit.core.views import device_pointer, torch_stream_ptr

_lock = threading.Lock()
_loaded: dict[tuple, tuple[object, CompileRecord, dict]] = {}
_streams: dict[tuple[int, int], object] = {}
_opted_in: dict[tuple, int] = {}


def load(kernel: str, device_index: int, options: tuple[str, ...] = ()):
    """(cupy Module, CompileRecord, function cache) for `kernels/<kernel>.cu` on a device, compiled once per
    set of extra options (e.g. -D variants used by stage-breakdown experiments)."""
    key = (device_index, kernel, tuple(options))
    with _lock:
        if key not in _loaded:
            import cupy as cp

            compiled = compile_kernel(kernel, device_arch(device_index), tuple(options))
            with cp.cuda.Device(device_index):
                module = cp.cuda.function.Module()
                module.load(compiled.cubin)
            _loaded[key] = (module, compiled.record, {})
        return _loaded[key]


def loaded_records() -> list[CompileRecord]:
    """Compile records of every kernel this process has loaded: the provenance of a run's launches."""
    with _lock:
        return [record for _, record, _ in _loaded.values()]


def _stream(device):
    """CuPy's handle on torch's current stream (the capturing stream during graph capture), cached per handle."""
    import cupy as cp

    key = (device.index, torch_stream_ptr(device))
    if key not in _streams:
        with warnings.catch_warnings():
            # ExternalStream wraps a raw handle without touching it; its suggested replacement needs the
            # __cuda_stream__ protocol, which torch 2.5's streams lack.
            warnings.simplefilter("ignore", DeprecationWarning)
            _streams[key] = cp.cuda.ExternalStream(key[1], device.index)
    return _streams[key]


def launch(kernel: str, function: str, grid, block, args, device, shared_mem: int = 0,
           options: tuple[str, ...] = ()) -> None:
    """Launch `function` from `kernels/<kernel>.cu` on torch's current stream of `device`.

    Tensor arguments are passed as raw device pointers, so this is legal inside `torch.cuda.graph` capture.
    """
    import cupy as cp

    if device.index is None:  # torch.device("cuda"): the current device, as torch would take it
        import torch

        device = torch.device("cuda", torch.cuda.current_device())
    module, _, functions = load(kernel, device.index, options)
    if function not in functions:
        functions[function] = module.get_function(function)
    fn = functions[function]
    if shared_mem > 48 * 1024 and _opted_in.get((device.index, kernel, function, options), 0) < shared_mem:
        from cupy_backends.cuda.api import driver

        # More than the default 48 KiB of dynamic shared memory needs an explicit opt-in per function.
        driver.funcSetAttribute(fn.ptr, driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, shared_mem)
        _opted_in[(device.index, kernel, function, options)] = shared_mem
    converted = tuple(device_pointer(a, device.index) if hasattr(a, "data_ptr") else a for a in args)
    with cp.cuda.Device(device.index):
        fn(tuple(grid), tuple(block), converted, shared_mem=shared_mem, stream=_stream(device))
