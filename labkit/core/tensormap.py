"""CUDA tensor maps (TMA descriptors) built with the driver's cuTensorMapEncodeTiled through ctypes.

A map is 128 opaque bytes passed to the kernel by value (a size-one numpy array of that many bytes, which
CuPy hands to cuLaunchKernel as is), so it is captured into CUDA graphs with the launch.
"""
from __future__ import annotations

import ctypes

import numpy as np

_FLOAT32 = 7          # CU_TENSOR_MAP_DATA_TYPE_FLOAT32
_L2_PROMOTION_256B = 3
_lib = None

MAP_DTYPE = np.dtype((np.void, 128))


def _driver():
    global _lib
    if _lib is None:
        try:
            _lib = ctypes.CDLL("libcuda.so.1")
        except OSError as exc:
            raise ValueError(f"tensor maps need the CUDA driver (libcuda.so.1): {exc}") from exc
        _lib.cuTensorMapEncodeTiled.restype = ctypes.c_int
    return _lib


def encode_tiled_f32(address: int, dims, strides_bytes, box) -> np.ndarray:
    """A float32 tiled tensor map: dims innermost first, byte strides of dims 1.., box extents per dim."""
    rank = len(dims)
    if not (len(strides_bytes) == rank - 1 and len(box) == rank and 1 <= rank <= 5):
        raise ValueError(f"rank mismatch: dims {dims}, strides {strides_bytes}, box {box}")
    if address % 16 or any(s % 16 for s in strides_bytes):
        raise ValueError("tensor maps need a 16-byte aligned address and strides that are multiples of 16 bytes")
    u64, u32 = ctypes.c_uint64, ctypes.c_uint32
    out = (u64 * 16)()
    res = _driver().cuTensorMapEncodeTiled(
        ctypes.byref(out), _FLOAT32, rank, ctypes.c_void_p(address), (u64 * rank)(*dims),
        (u64 * (rank - 1))(*strides_bytes), (u32 * rank)(*box), (u32 * rank)(*([1] * rank)),
        0, 0, _L2_PROMOTION_256B, 0)  # no interleave, no swizzle, zero fill out of bounds
    if res != 0:
        raise RuntimeError(f"cuTensorMapEncodeTiled failed with CUresult {res} for dims {dims}, box {box}")
    return np.frombuffer(bytes(out), dtype=MAP_DTYPE).copy()
