"""Reference-order LayerNorm: torch's vectorized-path statistics, scheduled differently, same bits.

Path: kernels/reference_stats.cu (one (32,4) block per row, torch's order) -> kernels/affine_rows.cu (output
over many row-interleaved blocks) -> this wrapper, which validates before anything is launched.
"""
from __future__ import annotations

import numpy as np

from .launch import launch
from .validate import check_output, layer_norm_layout

THREADS_AFFINE = 256


def _alloc_stats(x, rows):
    import torch

    return torch.empty(rows, device=x.device, dtype=torch.float32), torch.empty(rows, device=x.device,
                                                                                 dtype=torch.float32)


def launch_reference_stats(x, mean, rstd, rows: int, n: int, eps: float) -> None:
    launch("reference_stats", "reference_order_stats", (rows,), (32, 4),
           (x, mean, rstd, np.int32(n), np.float32(eps)), x.device)


def launch_affine_rows(x, mean, rstd, weight, bias, y, rows: int, n: int) -> None:
    n4 = n // 4
    launch("affine_rows", "affine_rows_interleaved", (rows, -(-n4 // THREADS_AFFINE)), (THREADS_AFFINE,),
           (x, mean, rstd, weight, bias, y, np.int32(n4)), x.device)


def reference_order_layer_norm(x, weight, bias, eps: float = 1e-5, *, out=None, return_stats: bool = False):
    """LayerNorm over weight's shape with torch's vectorized-path arithmetic.

    Args:
        x: float32 CUDA tensor, contiguous, 16-byte aligned, trailing dims equal to weight.shape.
        weight, bias: the affine parameters (required), float32, contiguous, aligned, same device.
        eps: added to the variance before rsqrtf.
        out: optional preallocated output like x.
        return_stats: also return mean and rstd, each of shape [rows].
    Returns:
        y, or (y, mean, rstd).
    Raises:
        ValueError naming the violated condition, before any launch.
    """
    layout = layer_norm_layout(x, weight, bias, eps)
    if out is not None:
        check_output("out", out, x)
    import torch

    y = torch.empty_like(x) if out is None else out
    mean, rstd = _alloc_stats(x, layout.rows)
    launch_reference_stats(x, mean, rstd, layout.rows, layout.n, eps)
    launch_affine_rows(x, mean, rstd, weight, bias, y, layout.rows, layout.n)
    return (y, mean, rstd) if return_stats else y
