"""Reference-order LayerNorm: torch's vectorized-path statistics, scheduled differently, same bits.

Path: kernels/reference_stats.cu (one (32,4) block per row, torch's order) -> kernels/affine_rows.cu (output
over many row-interleaved blocks) -> this wrapper, which validates before anything is launched.
"""
from __future__ import annotations

import numpy as np

from labkit.ops.torch_path import require_vectorized
from labkit.core.launch import launch
from labkit.core.validate import check_output, layer_norm_layout

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


def _consult_contract(x, weight, bias) -> None:
    """Refuse inputs on which torch would take RowwiseMomentsCUDAKernel instead of the vectorized kernel.

    Only well-formed calls are judged here (tensors, trailing dims equal to weight's shape); anything else is left
    to layer_norm_layout's messages. `out` is not torch's Y (torch allocates its own), so its alignment is
    checked by check_output as a limit of this kernel, not of torch."""
    import torch

    if not all(isinstance(t, torch.Tensor) for t in (x, weight, bias)):
        return
    shape = tuple(weight.shape)
    if not shape or x.dim() < len(shape) or tuple(x.shape[x.dim() - len(shape):]) != shape:
        return
    require_vectorized(x, weight, bias)


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
        ValueError naming the violated condition, before any launch. Inputs on which torch itself would not take
        its vectorized path (labkit.ops.torch_path: misaligned x/weight/bias, N % 4 != 0, N > 2**24,
        float64) are refused first, with a message saying so: torch's order is then a different reduction.
    """
    _consult_contract(x, weight, bias)
    layout = layer_norm_layout(x, weight, bias, eps)
    if out is not None:
        check_output("out", out, x)
    import torch

    y = torch.empty_like(x) if out is None else out
    mean, rstd = _alloc_stats(x, layout.rows)
    launch_reference_stats(x, mean, rstd, layout.rows, layout.n, eps)
    launch_affine_rows(x, mean, rstd, weight, bias, y, layout.rows, layout.n)
    return (y, mean, rstd) if return_stats else y
