"""Reference-order LayerNorm: torch's vectorized-path statistics, scheduled differently, same bits.

Path: kernels/reference_stats.cu (one (32,4) block per row, torch's order) -> kernels/affine_rows.cu (output
over many row-interleaved blocks) -> this wrapper, which validates before anything is launched.
"""
from __future__ import annotations

from dataclasses import dataclass

from labkit.core.device import Device
from labkit.core.launch import Kernel
from labkit.core.program import EPS, FORWARD_SLOTS, I32, BoundProgram, Launch, Program, Ptr
from labkit.ops.launches import NO_SCRATCH, Scratch, run

PATH = "reference_order"
KERNELS = ("reference_stats", "affine_rows")
MIN_ARCH = 80
THREADS_AFFINE = 256  # kernels/affine_rows.cu's launch bounds


@dataclass(frozen=True)
class ReferenceOrderLaunches:
    rows: int
    n: int
    stats: Kernel   # grid (rows,): torch's one block per row
    output: Kernel  # grid (rows, tiles): rows fastest, so neighbouring blocks share gamma/beta tiles
    scratch: Scratch = NO_SCRATCH
    path: str = PATH

    def program(self, device_index: int) -> Program:
        return Program(FORWARD_SLOTS, (
            Launch(self.stats, (Ptr("x"), Ptr("mean"), Ptr("rstd"), I32(self.n), EPS), "stats"),
            Launch(self.output, (Ptr("x"), Ptr("mean"), Ptr("rstd"), Ptr("weight"), Ptr("bias"), Ptr("y"),
                                 I32(self.n // 4)), "output")))

    def bind(self, device_index: int) -> BoundProgram:
        return BoundProgram(self.program(device_index), device_index)


def launches(rows: int, n: int, device: Device) -> ReferenceOrderLaunches:
    """The launches for rows x N on `device`; ValueError where they cannot run there."""
    if device.arch < MIN_ARCH:
        raise ValueError(f"the reference-order kernels are built for sm_{MIN_ARCH} and later, device is "
                         f"{device.arch_name}")
    tiles = -(-(n // 4) // THREADS_AFFINE)
    if tiles > device.max_grid_y:
        raise ValueError(f"affine_rows puts N's tiles in grid.y, which holds at most {device.max_grid_y} "
                         f"(got {tiles} tiles for N={n})")
    return ReferenceOrderLaunches(rows, n, Kernel("reference_stats", "reference_order_stats", (rows,), (32, 4)),
                                  Kernel("affine_rows", "affine_rows_interleaved", (rows, tiles), (THREADS_AFFINE,)))


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
        ValueError naming the violated condition (labkit.ops.eligibility), before any launch; inputs on which
        torch itself would leave its vectorized path (misaligned x/weight/bias, N % 4 != 0, N > 2**24) say so.
    """
    return run(launches, x, weight, bias, eps, out, return_stats)
