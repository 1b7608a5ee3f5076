"""Kernel arguments from torch CUDA tensors that are safe inside CUDA graph capture, and cheap.

`cupy.from_dlpack(tensor)` during `torch.cuda.graph` capture fails on torch 2.11 ("operation would make the
legacy stream depend on a capturing blocking stream"): the DLPack exchange synchronizes with the legacy
stream. A raw device pointer touches no stream at all, and costs no CuPy array per argument (a view per
tensor cost tens of microseconds per launch, which eager timings of small shapes saw), so it is what every
launch passes.
"""
from __future__ import annotations

import numpy as np


def device_pointer(t, device_index: int) -> np.uint64:
    """`t`'s data pointer as a 64-bit kernel argument; `t` must be a contiguous CUDA tensor on the launch device.
    The caller keeps `t` alive until the kernel has run (stream order does, for torch's caching allocator)."""
    if not t.is_cuda:
        raise ValueError(f"kernel arguments must be CUDA tensors, got device {t.device}")
    if t.device.index != device_index:
        raise ValueError(f"kernel argument on {t.device}, launch on cuda:{device_index}")
    if not t.is_contiguous():
        raise ValueError("kernel arguments must be contiguous tensors")
    return np.uint64(t.data_ptr())
