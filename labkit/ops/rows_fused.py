"""Rows-fused reference-order LayerNorm: torch's own one-block-per-row schedule and arithmetic (kernels/rows_fused.cu),
keeping each thread's float4 vectors in registers between the statistics and the output, so x is read once where a
row fits (torch reads it twice). For many short rows, where torch's schedule already fills the GPU."""
from __future__ import annotations

from dataclasses import dataclass

from labkit.core.device import Device
from labkit.core.launch import Kernel
from labkit.core.program import EPS, FORWARD_SLOTS, I32, BoundProgram, Launch, Program, Ptr
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

    def program(self, device_index: int) -> Program:
        args = (Ptr("x"), Ptr("weight"), Ptr("bias"), Ptr("y"), Ptr("mean"), Ptr("rstd"), I32(self.n), EPS)
        return Program(FORWARD_SLOTS, (Launch(self.kernel, args, "fused"),))  # statistics and output: one pass

    def bind(self, device_index: int) -> BoundProgram:
        return BoundProgram(self.program(device_index), device_index)


def plan(rows: int, n: int, device: Device) -> RowsFusedPlan:
    if device.arch < MIN_ARCH:
        raise ValueError(f"rows_fused is built for sm_{MIN_ARCH} and later, device is {device.arch_name}")
    return RowsFusedPlan(rows, n, Kernel("rows_fused", function_for(n), (rows,), (32, 4)))
