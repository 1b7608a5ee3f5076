"""Fast-statistics LayerNorm prototypes: torch.var_mean, then the output pass.

Not reference-order: var_mean reduces in another tree, so these change the answer (see the counterexample
notebook). Output passes: eager torch pointwise, or kernels/split_affine.cu in flat or row-interleaved geometry.
"""
from __future__ import annotations

import numpy as np

from .launch import launch
from .validate import layer_norm_layout

THREADS = 256
GEOMETRIES = ("eager", "flat", "interleaved")


def row_var_mean(x, rows: int, n: int):
    import torch

    var, mean = torch.var_mean(x.reshape(rows, n), dim=1, unbiased=False)
    return var, mean


def eager_pointwise(x, var, mean, weight, bias, eps, rows: int, n: int):
    """The prototype's eager output: ((x - mean) * rsqrt(var + eps)) * weight + bias."""
    import torch

    xr = x.reshape(rows, n)
    y = ((xr - mean[:, None]) * torch.rsqrt(var[:, None] + eps)) * weight.reshape(1, n) + bias.reshape(1, n)
    return y.reshape(x.shape)


def split_stats_layer_norm(x, weight, bias, eps: float = 1e-5, *, geometry: str = "interleaved"):
    """LayerNorm with torch.var_mean statistics and the chosen output pass. Same validation as the reference."""
    if geometry not in GEOMETRIES:
        raise ValueError(f"geometry must be one of {GEOMETRIES}, got {geometry!r}")
    layout = layer_norm_layout(x, weight, bias, eps)
    rows, n = layout.rows, layout.n
    var, mean = row_var_mean(x, rows, n)
    if geometry == "eager":
        return eager_pointwise(x, var, mean, weight, bias, eps, rows, n)
    if geometry == "flat" and rows > 65535:
        raise ValueError(f"flat geometry puts rows in grid.y, which holds at most 65535 (got rows={rows})")
    import torch

    y = torch.empty_like(x)
    tiles = -(-(n // 4) // THREADS)
    grid = (rows, tiles) if geometry == "interleaved" else (tiles, rows)
    launch("split_affine", f"split_affine_{geometry}", grid, (THREADS,),
           (x, var, mean, weight, bias, y, np.int32(n // 4), np.float32(eps)), x.device)
    return y
