"""Fast-statistics LayerNorm prototypes: torch.var_mean per row, then one output expression in four forms.

NOT reference-order: var_mean reduces in another tree, so these change the answer (the counterexample notebook
counts where). The output expression, written once here, is ((x - mean) * rsqrt(var + eps)) * gamma + beta:
  eager        torch pointwise ops
  torchscript  the same function compiled by torch.jit.script (its fuser may reorder nothing: same expression)
  flat         kernels/split_affine.cu, tiles of one row together in the grid
  interleaved  kernels/split_affine.cu, rows fastest in the grid (neighbouring blocks share gamma/beta tiles)
  post_flat, post_interleaved  kernels/post_affine.cu: the post's own prototype (one scalar per thread, 256-element
               tiles, compiled --fmad=false as the post compiled it), beside the book's float4 --fmad=true version

No `from __future__ import annotations`: TorchScript compiles `split_pointwise` from this file's source.
"""
import numpy as np
import torch

from labkit.core.launch import launch
from labkit.core.device import current_index, device_info
from labkit.ops import eligibility
from labkit.lab.scripted import script

THREADS = 256  # kernels/split_affine.cu: threads per block
GEOMETRIES = ("eager", "torchscript", "flat", "interleaved", "post_flat", "post_interleaved")
KERNEL_GEOMETRIES = ("flat", "interleaved", "post_flat", "post_interleaved")
# The post's compile flags for its prototype (appended after labkit.core.compile.BASE_OPTIONS: NVRTC takes the
# last of a repeated option, checked in tests/test_fast_stats.py by the absence of FFMA in the cubin).
POST_OPTIONS = ("--std=c++11", "--fmad=false")


def row_var_mean(x, rows: int, n: int):
    """(var, mean) of each row, population variance, as torch.var_mean reduces them."""
    var, mean = torch.var_mean(x.reshape(rows, n), dim=1, unbiased=False)
    return var, mean


def split_statistics(x, rows: int, n: int, eps: float):
    """(var, mean, rstd) of each row: `row_var_mean` and rsqrt(var + eps), the prototype's statistics."""
    var, mean = row_var_mean(x, rows, n)
    return var, mean, torch.rsqrt(var + eps)


def split_pointwise(xr: torch.Tensor, var: torch.Tensor, mean: torch.Tensor, weight: torch.Tensor,
                    bias: torch.Tensor, eps: float) -> torch.Tensor:
    """The prototype's output on the (rows, N) view; weight and bias of shape (N,) broadcast over rows."""
    return ((xr - mean.unsqueeze(1)) * torch.rsqrt(var.unsqueeze(1) + eps)) * weight + bias


def scripted_pointwise():
    """`split_pointwise` compiled by TorchScript (cached), as a labkit.lab.scripted.Scripted."""
    return script(split_pointwise)


def split_stats_layer_norm(x, weight, bias, eps: float = 1e-5, *, geometry: str = "interleaved"):
    """LayerNorm with torch.var_mean statistics and the chosen output pass.

    Same validation as the reference-order wrappers; eager and torchscript also run on CPU tensors (they launch
    no kernel of ours). Raises ValueError before any launch; RuntimeError if TorchScript cannot compile here.
    """
    if geometry not in GEOMETRIES:
        raise ValueError(f"geometry must be one of {GEOMETRIES}, got {geometry!r}")
    layout = eligibility.check(x, weight, bias, eps, require_cuda=geometry in KERNEL_GEOMETRIES)
    rows, n = layout.rows, layout.n
    if geometry in KERNEL_GEOMETRIES:
        # the output kernel's grid, checked before any launch: rows in grid.y (flat) or a row's tiles there
        # (interleaved; for the post's prototype that bound is the post's own, N <= 65535 * 256)
        post = geometry.startswith("post_")  # the post's: one float per thread; the book's: one float4
        tile = THREADS if post else 4 * THREADS
        tiles = -(-n // THREADS) if post else -(-(n // 4) // THREADS)
        interleaved = geometry.endswith("interleaved")
        grid = (rows, tiles) if interleaved else (tiles, rows)
        if grid[1] > (limit := device_info(current_index(x.device)).max_grid_y):
            if interleaved:
                raise ValueError(f"{geometry} puts a row's {tile}-element tiles in grid.y, which holds at most "
                                 f"{limit} (got N={n})")
            raise ValueError(f"{geometry} geometry puts rows in grid.y, which holds at most {limit} (got rows={rows})")
    var, mean = row_var_mean(x, rows, n)
    if geometry in ("eager", "torchscript"):
        fn = split_pointwise
        if geometry == "torchscript":
            compiled = scripted_pointwise()
            if not compiled.available:
                raise RuntimeError(f"TorchScript unavailable on torch {torch.__version__}: {compiled.error}")
            fn = compiled.fn
        return fn(x.reshape(rows, n), var, mean, weight.reshape(n), bias.reshape(n), float(eps)).reshape(x.shape)
    y = torch.empty_like(x)
    if geometry.startswith("post_"):
        launch("post_affine", f"post_affine_{geometry[5:]}", grid, (THREADS,),
               (x, var, mean, weight, bias, y, np.int32(n), np.float32(eps)), x.device, options=POST_OPTIONS)
        return y
    launch("split_affine", f"split_affine_{geometry}", grid, (THREADS,),
           (x, var, mean, weight, bias, y, np.int32(n // 4), np.float32(eps)), x.device)
    return y
