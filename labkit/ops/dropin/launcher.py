"""The per-call launch path of the drop-in, with everything that does not change between calls done once.

labkit.core.launch.launch is general (any kernel, checks every argument, looks the module up by name per call);
here a plan resolves its cupy function handles and shared-memory opt-ins when it is made, and a call only reads
pointers, picks the stream and launches. Nothing is allocated per call but the outputs and the per-call scratch
(from torch's caching allocator on the call's stream, which is what keeps overlapping streams and graphs safe).
"""
from __future__ import annotations

import ctypes
import threading
import warnings

import numpy as np

from labkit.core.launch import load

_lock = threading.Lock()
_streams: dict[int, object] = {}


def function(kernel: str, name: str, device_index: int, shared_mem: int = 0, options: tuple[str, ...] = ()):
    """A cupy function handle, loaded (compiled or read from the cubin cache) once, opted in to `shared_mem`."""
    module, _, functions = load(kernel, device_index, options)
    with _lock:
        if name not in functions:
            functions[name] = module.get_function(name)
        fn = functions[name]
    if shared_mem > 48 * 1024:
        import cupy as cp
        from cupy_backends.cuda.api import driver

        with cp.cuda.Device(device_index):
            driver.funcSetAttribute(fn.ptr, driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, shared_mem)
    return fn


def _raw_stream_getter():
    import torch

    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return raw
    return lambda index: torch.cuda.current_stream(index).cuda_stream


_raw_stream = None


def stream(device_index: int):
    """(cupy handle on torch's current stream of the device, its raw handle), cached per raw handle."""
    global _raw_stream
    if _raw_stream is None:
        _raw_stream = _raw_stream_getter()
    ptr = _raw_stream(device_index)
    s = _streams.get(ptr)
    if s is None:
        import cupy as cp

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            s = _streams[ptr] = cp.cuda.ExternalStream(ptr, device_index)
    return s, ptr


class DeviceScope:
    """Make `device_index` current for the launch only when it is not already (the common case costs a query)."""

    def __init__(self):
        import cupy as cp

        self._cp = cp
        self._get = cp.cuda.runtime.getDevice

    def current(self, device_index: int) -> bool:
        return self._get() == device_index

    def enter(self, device_index: int):
        return self._cp.cuda.Device(device_index)


_scope = None


def scope() -> DeviceScope:
    global _scope
    if _scope is None:
        _scope = DeviceScope()
    return _scope


def memset_async(ptr: int, nbytes: int, stream_ptr: int) -> None:
    """Zero device memory on a stream (capturable: a memset node under graph capture)."""
    from cupy.cuda import runtime

    runtime.memsetAsync(ptr, 0, nbytes, stream_ptr)


_FLOAT32 = 7          # CU_TENSOR_MAP_DATA_TYPE_FLOAT32
_L2_PROMOTION_256B = 3
MAP_DTYPE = np.dtype((np.void, 128))


class TensorMapEncoder:
    """cuTensorMapEncodeTiled for one (dims, strides, box) layout, ctypes arrays built once; maps cached per
    address (a model's activations come back to the same few addresses from torch's caching allocator)."""

    MAX_CACHED = 64

    def __init__(self, dims, strides_bytes, box):
        from labkit.core.tensormap import _driver

        u64, u32 = ctypes.c_uint64, ctypes.c_uint32
        rank = len(dims)
        self._encode = _driver().cuTensorMapEncodeTiled
        self._args = (_FLOAT32, rank)
        self._dims = (u64 * rank)(*dims)
        self._strides = (u64 * (rank - 1))(*strides_bytes)
        self._box = (u32 * rank)(*box)
        self._elem = (u32 * rank)(*([1] * rank))
        self._cache: dict[int, np.ndarray] = {}

    def __call__(self, address: int) -> np.ndarray:
        m = self._cache.get(address)
        if m is not None:
            return m
        out = (ctypes.c_uint64 * 16)()
        res = self._encode(ctypes.byref(out), *self._args, ctypes.c_void_p(address), self._dims, self._strides,
                           self._box, self._elem, 0, 0, _L2_PROMOTION_256B, 0)
        if res != 0:
            raise RuntimeError(f"cuTensorMapEncodeTiled failed with CUresult {res} at address {address:#x}")
        m = np.frombuffer(bytes(out), dtype=MAP_DTYPE).copy()
        if len(self._cache) >= self.MAX_CACHED:
            self._cache.clear()
        self._cache[address] = m
        return m
