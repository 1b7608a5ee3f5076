"""Rows-staged reference-order LayerNorm: torch's per-row arithmetic (kernels/rows_staged.cu) with each row staged
in shared memory by bulk asynchronous copies, for rows too long for rows_fused's registers to hold many of at once.

A persistent grid, one block per SM, each streaming its rows' 16 KiB chunks through a ring of shared memory. Its
chain group (torch's 128 threads) pushes each chunk as it lands. Its output group writes the previous row, from the
ring for the row's kept chunks and from memory for the earlier chunks of a row longer than the ring. The next rows
load meanwhile. The same bits as rows_fused and torch: each of torch's 128 chains pushes its float4s in order, then
torch's warp and 4-warp trees.
"""
from __future__ import annotations

from dataclasses import dataclass

from labkit.core.device import Device
from labkit.core.launch import Kernel
from labkit.core.program import EPS, FORWARD_SLOTS, I32, BoundProgram, Launch, Program, Ptr
from labkit.ops.launches import NO_SCRATCH, Scratch

PATH = "rows_staged"
KERNELS = ("rows_staged",)
MIN_ARCH = 90            # bulk copies completing mbarrier transactions
THREADS = 128            # torch's threads per row: the chain group
OUT_THREADS = 512        # the output group (kernels/rows_staged.cu STAGED_OUT_WARPS warps)
BLOCK = THREADS + OUT_THREADS + 32  # and the producer warp
CHUNK_VECTORS = 1024     # float4s per chunk (kernels/rows_staged.cu kChunk): 8 per chain
CHUNK_BYTES = 16 * CHUNK_VECTORS
MIN_SLOTS = 2            # a row's kept chunk and one for the next row's first
MAX_SLOTS = 32           # the producer keeps each slot's barrier phase in one bit of a 32-bit word
MAX_N = 2 ** 18          # the reciprocal table, n / 128 floats, stays at most 8 KiB of the ring's shared memory
STATS_RING = 4           # kernels/rows_staged.cu kStatsRing
# per slot: 3 mbarriers; then 2 mbarriers and a (mean, rstd) pair per statistics entry, 2 x 4 warp states
SLOT_BYTES = CHUNK_BYTES + 3 * 8
FIXED_BYTES = STATS_RING * (2 * 8 + 8) + 2 * 4 * 3 * 4
RESERVED_BYTES = 1024    # the shared memory sm_90 reserves per block, which cuobjdump counts as the kernel's static


def steps(n: int) -> int:
    """float4s of the longest of torch's 128 chains: the reciprocal table's length in float4s."""
    return -(-(n // 4) // THREADS)


def smem_bytes(n: int, slots: int) -> int:
    """kernels/rows_staged.cu's dynamic shared memory: the ring and its barriers, the reciprocals, the statistics
    ring, the warp states."""
    return slots * SLOT_BYTES + 16 * steps(n) + FIXED_BYTES


def slots_for(n: int, device: Device) -> int:
    """The deepest ring one block's opt-in shared memory holds beside the reserved KiB (at most MAX_SLOTS)."""
    return min(MAX_SLOTS, (device.smem_optin_bytes - RESERVED_BYTES - 16 * steps(n) - FIXED_BYTES) // SLOT_BYTES)


@dataclass(frozen=True)
class RowsStagedLaunches:
    rows: int
    n: int
    slots: int
    kernel: Kernel  # grid (min(rows, SMs),), block (BLOCK,)
    scratch: Scratch = NO_SCRATCH
    path: str = PATH

    def program(self, device_index: int) -> Program:
        args = (Ptr("x"), Ptr("weight"), Ptr("bias"), Ptr("y"), Ptr("mean"), Ptr("rstd"), I32(self.rows),
                I32(self.n), EPS, I32(self.slots))
        return Program(FORWARD_SLOTS, (Launch(self.kernel, args, "fused"),))

    def bind(self, device_index: int) -> BoundProgram:
        return BoundProgram(self.program(device_index), device_index)


def launches(rows: int, n: int, device: Device) -> RowsStagedLaunches:
    """The launch for rows x N on `device`; ValueError where it cannot run there."""
    if device.arch < MIN_ARCH:
        raise ValueError(f"rows_staged is built for sm_{MIN_ARCH} and later (bulk copies), device is "
                         f"{device.arch_name}")
    if n > MAX_N:
        raise ValueError(f"rows_staged keeps a reciprocal per push of a chain in shared memory, for N <= {MAX_N}; "
                         f"got N={n}")
    slots = slots_for(n, device)
    if slots < MIN_SLOTS:
        raise ValueError(f"rows_staged needs {MIN_SLOTS} ring slots of {CHUNK_BYTES} bytes; {device.name}'s "
                         f"{device.smem_optin_bytes} bytes of shared memory per block hold {slots} at N={n}")
    grid = min(rows, device.sm_count)
    return RowsStagedLaunches(rows, n, slots, Kernel("rows_staged", "rows_staged", (grid,), (BLOCK,),
                                                     smem_bytes(n, slots)))


def rows_staged_layer_norm(x, weight, bias, eps: float = 1e-5, *, out=None, return_stats: bool = False):
    """LayerNorm over weight's shape with torch's vectorized-path arithmetic, rows staged in shared memory.

    Args and returns as labkit.ops.reference_order.reference_order_layer_norm. Raises ValueError naming the
    violated condition before any launch: an input torch's vectorized path would not take (labkit.ops.eligibility),
    a GPU before sm_90, or N above MAX_N.
    """
    from labkit.ops.launches import run

    return run(launches, x, weight, bias, eps, out, return_stats)
