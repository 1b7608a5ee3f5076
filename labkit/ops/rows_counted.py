"""rows_fused's warp layout with its divisions moved off the data's path: a path of its own, for the dispatch table to
measure (kernels/rows_fused.cu, rows_fused_warp2_counted).

The warp layout's 11 Welford merges each divide by the sum of two counts. The counts depend on nothing but N, so
the counted entry point runs the merge tree on the counts alone first, keeping each quotient, while x is in flight;
the merges of the data then wait on no division. It runs at 7 blocks per SM, where it holds the 11 quotients
without spilling. The bits are torch's: the merge is written in torch's contraction (welford_merge_given), which the
SASS matcher checks (tests/test_sass.py), and the GPU tests compare int32 views.

On the H200 it was 2-4% faster than rows_fused_warp2 from 8192 rows of 768 to 1024 floats up and 10-20% slower at
4096 rows, where rows_fused_warp2's 8 blocks per SM hold every row in one wave (docs/decisions.md#rows_coef,
docs/decisions.md#rows_stream). Hence a path and not a replacement: where it serves is the dispatch table's to say.
It takes every row the warp layout takes (at most WARP_VECTORS[-1] * 512 floats), shorter rows with its threads' second
vectors unused, so that the table measures it at each N of the grid up to there and interpolates between them."""
from __future__ import annotations

from labkit.core.device import Device
from labkit.ops import rows_fused

PATH = "rows_counted"
KERNELS = rows_fused.KERNELS
MIN_ARCH = rows_fused.MIN_ARCH
FUNCTION = "rows_fused_warp2_counted"
MAX_N = rows_fused.THREADS * 4 * rows_fused.WARP_VECTORS[-1]  # the two-vector warp form's longest row: 1024 floats


def launches(rows: int, n: int, device: Device) -> rows_fused.RowsFusedLaunches:
    return rows_fused.own_entry_launches(rows, n, device, FUNCTION, PATH, MAX_N, "one warp's registers")


def rows_counted_layer_norm(x, weight, bias, eps: float = 1e-5, *, out=None, return_stats: bool = False):
    """LayerNorm over weight's shape with torch's vectorized-path arithmetic, the counted warp layout.

    Args and returns as labkit.ops.reference_order.reference_order_layer_norm. Raises ValueError naming the
    violated condition before any launch: an input torch's vectorized path would not take (labkit.ops.eligibility),
    a GPU before sm_80, or N above MAX_N.
    """
    from labkit.ops.launches import run

    return run(launches, x, weight, bias, eps, out, return_stats)
