"""torch's own (32, 4) block per row with the merges' quotients counted ahead and one block barrier a row: a path of
its own, for the dispatch table to measure (kernels/rows_fused.cu, rows_fused_reg2_counted).

The layout is rows_fused's block one (thread t of the row's 128 holds torch's thread t's float4s in registers, x read
once). Each of torch's eight merges (five warp steps, three in the 4-warp tree) divides by the sum of two counts
that depend on N alone, so the kernel makes the quotients while x is in flight; and every thread runs the 4-warp
tree from the warps' states in shared memory, so one barrier serves the tree and the statistics' broadcast. The bits
are torch's: the merge is written in torch's contraction (welford_merge_given), which the SASS matcher checks
(tests/test_sass.py), and the GPU tests compare int32 views.

Why a path beside rows_fused and rows_counted (the warp layout, four of torch's threads a lane): on the H200 the
warp layout's schedule alone, with no statistics computed, ran 8192 x 1024 at 21.1 us, slower than Liger's block
layout with its plain sums (20.7), and this kernel at 21.3 against rows_fused's 21.8; at 4,096 rows, and at N <= 768,
it was slower than the warp layout (22% at 4096 x 1024, 16-37% at N = 768, 72-123% at N <= 512) (docs/decisions.md#rows_floor). Where it serves is the table's to say. It takes
rows of at most MAX_N floats (two float4s a thread), shorter ones with threads' second vectors unused, so that the
table measures it at each N of the grid up to there."""
from __future__ import annotations

from labkit.core.device import Device
from labkit.ops import rows_fused

PATH = "rows_counted_block"
KERNELS = rows_fused.KERNELS
MIN_ARCH = rows_fused.MIN_ARCH
FUNCTION = "rows_fused_reg2_counted"
MAX_N = rows_fused.THREADS * 4 * 2  # two float4s per thread: 1024 floats


def launches(rows: int, n: int, device: Device) -> rows_fused.RowsFusedLaunches:
    return rows_fused.own_entry_launches(rows, n, device, FUNCTION, PATH, MAX_N, "two float4s a thread")


def rows_counted_block_layer_norm(x, weight, bias, eps: float = 1e-5, *, out=None, return_stats: bool = False):
    """LayerNorm over weight's shape with torch's vectorized-path arithmetic, the counted block layout.

    Args and returns as labkit.ops.reference_order.reference_order_layer_norm. Raises ValueError naming the
    violated condition before any launch: an input torch's vectorized path would not take (labkit.ops.eligibility),
    a GPU before sm_80, or N above MAX_N.
    """
    from labkit.ops.launches import run

    return run(launches, x, weight, bias, eps, out, return_stats)
