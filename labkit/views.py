"""Zero-copy CuPy views of torch CUDA tensors that are safe inside CUDA graph capture.

`cupy.from_dlpack(tensor)` during `torch.cuda.graph` capture fails on torch 2.11 ("operation would make the
legacy stream depend on a capturing blocking stream"): the DLPack exchange synchronizes with the legacy
stream. A view built from the raw pointer touches no stream at all, so it is what every launch uses.
"""
from __future__ import annotations

import numpy as np

_DTYPES = {"torch.float32": np.float32, "torch.int32": np.int32, "torch.int64": np.int64, "torch.uint8": np.uint8,
           "torch.float64": np.float64}


def cupy_view(t):
    """A cupy.ndarray aliasing `t`'s memory (contiguous CUDA tensors only); `t` is kept alive by the view."""
    import cupy as cp

    dtype = _DTYPES.get(str(t.dtype))
    if dtype is None:
        raise ValueError(f"cupy_view supports {sorted(_DTYPES)}, got {t.dtype}")
    if not t.is_cuda:
        raise ValueError(f"cupy_view needs a CUDA tensor, got device {t.device}")
    if not t.is_contiguous():
        raise ValueError("cupy_view needs a contiguous tensor")
    nbytes = t.numel() * t.element_size()
    mem = cp.cuda.UnownedMemory(t.data_ptr(), nbytes, t, device_id=t.device.index)
    return cp.ndarray(tuple(t.shape), dtype=dtype, memptr=cp.cuda.MemoryPointer(mem, 0))


def torch_stream_ptr(device) -> int:
    """The raw handle of torch's current stream on `device` (the capturing stream during graph capture)."""
    import torch

    return torch.cuda.current_stream(device).cuda_stream
