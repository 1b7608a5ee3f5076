"""Rows-fused reference-order LayerNorm: torch's per-row arithmetic (kernels/rows_fused.cu), keeping each
thread's float4 vectors in registers between the statistics and the output, so x is read once where a row fits (torch
reads it twice). For many short rows, where torch's schedule already fills the GPU.

Two layouts of the same arithmetic: rows of at most WARP_VECTORS[-1] * 512 floats run one warp per row, each lane
holding four of torch's 128 threads (no block barrier, four rows per block); longer rows run torch's (32, 4) block
per row. Both give torch's bits: the warp layout makes every merge of torch's four warp reductions and 4-warp tree,
packed onto the lanes whose results torch never reads (kernels/rows_fused.cu, welford_packed_rows4). It stops at two
vectors per torch thread because the packing probe (docs/decisions.md#rows_packed, H200) measured four slower than the
block (rows of 1536 and 2048 floats)."""
from __future__ import annotations

from dataclasses import dataclass, replace

from labkit.core.device import Device
from labkit.core.launch import Kernel
from labkit.core.program import EPS, FORWARD_SLOTS, I32, BoundProgram, Launch, Program, Ptr
from labkit.ops.launches import NO_SCRATCH, Scratch

PATH = "rows_fused"
KERNELS = ("rows_fused",)
MIN_ARCH = 80
VECTORS = (2, 4, 8, 16, 32)  # kernels/rows_fused.cu's block entry points: float4 vectors kept per thread
WARP_VECTORS = (1, 2)       # its warp-per-row entry points: float4 vectors kept per torch thread (4x per lane)
THREADS = 128                # torch's threads per row, whose chains both layouts keep


def function_for(n: int) -> str:
    """The entry point with the fewest registers that still keeps a whole row in registers: a warp per row for
    rows of at most WARP_VECTORS[-1] * 512 floats, else a block per row (the largest re-reads the rest of a longer row). Fewer registers,
    more rows per SM, which short rows need; only rows_fused_reg{VECTORS[-1]} is built for rows that do not fit."""
    n4 = n // 4
    k = next((k for k in WARP_VECTORS if n4 <= THREADS * k), None)
    if k is not None:
        return f"rows_fused_warp{k}"
    k = next((k for k in VECTORS if n4 <= THREADS * k), VECTORS[-1])
    return f"rows_fused_reg{k}"


def is_warp(function: str) -> bool:
    return function.startswith("rows_fused_warp")


@dataclass(frozen=True)
class RowsFusedLaunches:
    rows: int
    n: int
    kernel: Kernel  # block (32, 4); grid (rows,) for a block per row, ceil(rows / 4) for a warp per row
    scratch: Scratch = NO_SCRATCH
    path: str = PATH

    def program(self, device_index: int) -> Program:
        rows = (I32(self.rows),) if is_warp(self.kernel.function) else ()
        args = (Ptr("x"), Ptr("weight"), Ptr("bias"), Ptr("y"), Ptr("mean"), Ptr("rstd"), *rows, I32(self.n), EPS)
        return Program(FORWARD_SLOTS, (Launch(self.kernel, args, "fused"),))  # statistics and output: one pass

    def bind(self, device_index: int) -> BoundProgram:
        return BoundProgram(self.program(device_index), device_index)


def entry_launches(rows: int, n: int, function: str) -> RowsFusedLaunches:
    """The launches that run entry point `function` on rows x n, its grid by its layout (a warp or a block per row).
    `launches` takes function_for(n); tests name every entry point. The row must fit `function` unless it is the
    largest block entry point (the others are built without the re-read of a longer row's rest)."""
    grid = (-(-rows // 4),) if is_warp(function) else (rows,)
    return RowsFusedLaunches(rows, n, Kernel("rows_fused", function, grid, (32, 4)))


def launches(rows: int, n: int, device: Device) -> RowsFusedLaunches:
    if device.arch < MIN_ARCH:
        raise ValueError(f"rows_fused is built for sm_{MIN_ARCH} and later, device is {device.arch_name}")
    return entry_launches(rows, n, function_for(n))


def own_entry_launches(rows: int, n: int, device: Device, function: str, path: str, max_n: int, holds: str):
    """The launches of a path that runs one rows_fused entry point of its own (rows_counted, rows_counted_block): a
    ValueError for N above `max_n`, naming what bounds it (`holds`), and for whatever rows_fused refuses (the arch),
    with its reason; else entry_launches(function) under `path`."""
    if n > max_n:
        raise ValueError(f"{path} takes rows of at most {max_n} floats ({holds}), got N={n}")
    launches(rows, n, device)
    return replace(entry_launches(rows, n, function), path=path)
