"""CUDA tensor maps (TMA descriptors) built with the driver's cuTensorMapEncodeTiled through ctypes.

A map is 128 opaque bytes passed to the kernel by value (a size-one numpy array of that many bytes, which
CuPy hands to cuLaunchKernel as is), so it is captured into CUDA graphs with the launch. A path's launches describe
a map as a `TensorMapGeometry` (float32 or 2-byte elements, dims innermost first); a `TensorMapEncoder` encodes
that geometry at an address, keeping the maps it made (a model's activations come back to the same few addresses
from torch's caching allocator, and an encode costs microseconds).
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass

import numpy as np

_FLOAT32 = 7          # CU_TENSOR_MAP_DATA_TYPE_FLOAT32
_UINT16 = 1           # CU_TENSOR_MAP_DATA_TYPE_UINT16: bfloat16/float16 elements, which a copy moves as bits
_DATA_TYPES = {4: _FLOAT32, 2: _UINT16}  # by element bytes
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


@dataclass(frozen=True)
class TensorMapGeometry:
    """A tiled map: dims innermost first (in elements), byte strides of dims 1.., box extents per dim; elements of
    `element_bytes`: float32 (4), or 2-byte elements (bfloat16/float16, moved as their bits: a copy converts
    nothing)."""

    dims: tuple[int, ...]
    strides_bytes: tuple[int, ...]
    box: tuple[int, ...]
    element_bytes: int = 4

    def __post_init__(self):
        if self.element_bytes not in _DATA_TYPES:
            raise ValueError(f"element_bytes must be one of {tuple(_DATA_TYPES)}, got {self.element_bytes}")
        rank = len(self.dims)
        if not (len(self.strides_bytes) == rank - 1 and len(self.box) == rank and 1 <= rank <= 5):
            raise ValueError(f"rank mismatch: dims {self.dims}, strides {self.strides_bytes}, box {self.box}")
        if any(s % 16 for s in self.strides_bytes):
            raise ValueError(f"tensor-map strides must be multiples of 16 bytes, got {self.strides_bytes}")
        # cuTensorMapEncodeTiled's own conditions on the box (no interleave): said here, where the launches are
        # described, rather than as a CUresult at the first call
        if any(not 1 <= b <= 256 for b in self.box):
            raise ValueError(f"tensor-map box extents must be 1 to 256, got {self.box}")
        if self.box[0] * self.element_bytes % 16:
            raise ValueError(f"a tensor map's innermost box extent must span a multiple of 16 bytes, got "
                             f"{self.box[0]} elements of {self.element_bytes} bytes")

    @property
    def data_type(self) -> int:
        """The CUtensorMapDataType the encode takes (the host extension's programs carry it)."""
        return _DATA_TYPES[self.element_bytes]


class TensorMapEncoder:
    """cuTensorMapEncodeTiled for one geometry, its ctypes arrays built once; maps kept per address."""

    MAX_CACHED = 64

    def __init__(self, geometry: TensorMapGeometry):
        u64, u32 = ctypes.c_uint64, ctypes.c_uint32
        rank = len(geometry.dims)
        self.geometry = geometry
        self._encode = _driver().cuTensorMapEncodeTiled
        self._rank = rank
        self._dims = (u64 * rank)(*geometry.dims)
        self._strides = (u64 * (rank - 1))(*geometry.strides_bytes)
        self._box = (u32 * rank)(*geometry.box)
        self._elem = (u32 * rank)(*([1] * rank))
        self._cache: dict[int, np.ndarray] = {}

    def __call__(self, address: int) -> np.ndarray:
        m = self._cache.get(address)
        if m is not None:
            return m
        if address % 16:
            raise ValueError(f"tensor maps need a 16-byte aligned address, got {address:#x}")
        out = (ctypes.c_uint64 * 16)()
        res = self._encode(ctypes.byref(out), _DATA_TYPES[self.geometry.element_bytes], self._rank,
                           ctypes.c_void_p(address), self._dims, self._strides, self._box, self._elem, 0, 0,
                           _L2_PROMOTION_256B, 0)
        # no interleave, no swizzle, zero fill out of bounds
        if res != 0:
            raise RuntimeError(f"cuTensorMapEncodeTiled failed with CUresult {res} for {self.geometry} at "
                               f"address {address:#x}")
        m = np.frombuffer(bytes(out), dtype=MAP_DTYPE).copy()
        if len(self._cache) >= self.MAX_CACHED:
            self._cache.clear()
        self._cache[address] = m
        return m

