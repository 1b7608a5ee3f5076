"""Rows-fused reference-order LayerNorm: torch's own one-block-per-row schedule and arithmetic (kernels/rows_fused.cu),
keeping each thread's float4 vectors in registers between the statistics and the output, so x is read once where a
row fits (torch reads it twice). For many short rows, where torch's schedule already fills the GPU."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from labkit.core.device import Device
from labkit.core.launch import Kernel, prepare
from labkit.ops.plans import NO_SCRATCH, Scratch

PATH = "rows_fused"
KERNELS = ("rows_fused",)
MIN_ARCH = 80
VECTORS = (2, 4, 8)  # kernels/rows_fused.cu's entry points: float4 vectors kept per thread


def function_for(n: int) -> str:
    """The entry point with the fewest registers that still keeps a whole row in registers (else the largest,
    which re-reads the rest): fewer registers, more blocks per SM, which short rows need."""
    n4 = n // 4
    k = next((k for k in VECTORS if n4 <= 128 * k), VECTORS[-1])
    return f"rows_fused_reg{k}"


@dataclass(frozen=True)
class RowsFusedPlan:
    rows: int
    n: int
    kernel: Kernel  # grid (rows,), block (32, 4): torch's
    scratch: Scratch = NO_SCRATCH
    path: str = PATH

    def bind(self, device_index: int) -> "_Bound":
        return _Bound(self, device_index)


def plan(rows: int, n: int, device: Device) -> RowsFusedPlan:
    if device.arch < MIN_ARCH:
        raise ValueError(f"rows_fused is built for sm_{MIN_ARCH} and later, device is {device.arch_name}")
    return RowsFusedPlan(rows, n, Kernel("rows_fused", function_for(n), (rows,), (32, 4)))


class _Bound:
    def __init__(self, p: RowsFusedPlan, device_index: int):
        self._k = prepare(p.kernel, device_index)
        self._n = np.int32(p.n)

    def __call__(self, x, weight, bias, y, mean, rstd, scratch, eps, stream) -> None:
        u = np.uint64
        self._k((u(x), u(weight), u(bias), u(y), u(mean), u(rstd), self._n, eps), stream[0])
