"""Loading compiled kernels onto a device and launching them on torch's current stream."""
from __future__ import annotations

import threading

from .compile import CompileRecord, compile_kernel, device_arch
from .views import cupy_view, torch_stream_ptr

_lock = threading.Lock()
_loaded: dict[tuple[int, str], tuple[object, CompileRecord]] = {}


def load(kernel: str, device_index: int):
    """(cupy Module, CompileRecord) for `kernels/<kernel>.cu` on a device, compiled once per process."""
    key = (device_index, kernel)
    with _lock:
        if key not in _loaded:
            import cupy as cp

            compiled = compile_kernel(kernel, device_arch(device_index))
            with cp.cuda.Device(device_index):
                module = cp.cuda.function.Module()
                module.load(compiled.cubin)
            _loaded[key] = (module, compiled.record)
        return _loaded[key]


def loaded_records() -> list[CompileRecord]:
    """Compile records of every kernel this process has loaded: the provenance of a run's launches."""
    with _lock:
        return [record for _, record in _loaded.values()]


def launch(kernel: str, function: str, grid, block, args, device, shared_mem: int = 0) -> None:
    """Launch `function` from `kernels/<kernel>.cu` on torch's current stream of `device`.

    Tensor arguments become raw-pointer views, so this is legal inside `torch.cuda.graph` capture.
    """
    import cupy as cp

    module, _ = load(kernel, device.index)
    converted = tuple(cupy_view(a) if hasattr(a, "data_ptr") else a for a in args)
    stream = cp.cuda.ExternalStream(torch_stream_ptr(device), device.index)
    with cp.cuda.Device(device.index):
        module.get_function(function)(tuple(grid), tuple(block), converted, shared_mem=shared_mem, stream=stream)
