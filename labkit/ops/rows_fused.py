"""Rows-fused reference-order LayerNorm: torch's per-row arithmetic (kernels/rows_fused.cu), keeping each
thread's float4 vectors in registers between the statistics and the output, so x is read once where a row fits (torch
reads it twice). For many short rows, where torch's schedule already fills the GPU.

Two layouts of the same arithmetic: rows of at most WARP_VECTORS[-1] * 512 floats run one warp per row, each lane
holding four of torch's 128 threads (no block barrier, four rows per block); longer rows run torch's (32, 4) block
per row. Both give torch's bits: the warp layout makes every merge of torch's four warp reductions and 4-warp tree,
packed onto the lanes whose results torch never reads (kernels/rows_fused.cu, welford_packed_rows4). It stops at two
vectors per torch thread because the packing probe (docs/decisions.md#rows_packed, H200) measured four slower than the
block (rows of 1536 and 2048 floats).

Every entry point is built for bfloat16 and float16 too (`dtype` of `launches`, labkit.ops.dtypes): torch's float
arithmetic on the elements converted to float as loaded, y rounded to the dtype once at the store. Only
the drop-in's plans (labkit.ops.paths.DTYPES) and `low_precision_layer_norm` (the last function here) launch those
builds (docs/decisions.md#low_precision_kernels, #how_people_train).

Two more entry points of the same file are paths of their own, for the dispatch table to measure: `rows_counted`
and `rows_counted_block` (below), each a `CountedPath` with the attributes a path module has (labkit.ops.paths) and
a public function of its own here."""
from __future__ import annotations

from dataclasses import dataclass, replace

from labkit.core.device import Device
from labkit.core.launch import Kernel
from labkit.core.program import EPS, FORWARD_SLOTS, I32, BoundProgram, Launch, Program, Ptr
from labkit.ops import dtypes
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


def entry_launches(rows: int, n: int, function: str, dtype: str = dtypes.FLOAT32) -> RowsFusedLaunches:
    """The launches that run entry point `function` on rows x n of `dtype` (labkit.ops.dtypes: the kernel build that
    reads and writes it), its grid by its layout (a warp or a block per row). `launches` takes function_for(n); tests
    name every entry point. The row must fit `function` unless it is the largest block entry point (the others are
    built without the re-read of a longer row's rest)."""
    grid = (-(-rows // 4),) if is_warp(function) else (rows,)
    return RowsFusedLaunches(rows, n, Kernel("rows_fused", function, grid, (32, 4), options=dtypes.options(dtype)))


def launches(rows: int, n: int, device: Device, dtype: str = dtypes.FLOAT32) -> RowsFusedLaunches:
    """rows x N of `dtype` on `device`. A 4-element vector holds as many registers in every dtype (its elements are
    converted to float as loaded), so the entry point depends on N alone."""
    if device.arch < MIN_ARCH:
        raise ValueError(f"rows_fused is built for sm_{MIN_ARCH} and later, device is {device.arch_name}")
    return entry_launches(rows, n, function_for(n), dtype)


def own_entry_launches(rows: int, n: int, device: Device, function: str, path: str, max_n: int, holds: str,
                       dtype: str = dtypes.FLOAT32):
    """The launches of a path that runs one rows_fused entry point of its own (rows_counted, rows_counted_block): a
    ValueError for N above `max_n`, naming what bounds it (`holds`), and for whatever rows_fused refuses (the arch),
    with its reason; else entry_launches(function) under `path`."""
    if n > max_n:
        unit = "floats" if dtype == dtypes.FLOAT32 else f"{dtype} elements"  # a vector is 4 elements in any dtype
        raise ValueError(f"{path} takes rows of at most {max_n} {unit} ({holds}), got N={n}")
    launches(rows, n, device)
    return replace(entry_launches(rows, n, function, dtype), path=path)


# --- the counted entry points: paths of their own -----------------------------------------------------------------

@dataclass(frozen=True)
class CountedPath:
    """A path that runs one counted entry point of kernels/rows_fused.cu: what labkit.ops.paths reads of a path
    module (PATH, KERNELS, MIN_ARCH, launches). Its public function is `<PATH>_layer_norm` in this module."""

    PATH: str
    FUNCTION: str  # its entry point in kernels/rows_fused.cu
    MAX_N: int     # the longest row it keeps in registers
    holds: str     # what bounds MAX_N, for the refusal
    KERNELS: tuple = KERNELS
    MIN_ARCH: int = MIN_ARCH

    def launches(self, rows: int, n: int, device: Device, dtype: str = dtypes.FLOAT32) -> RowsFusedLaunches:
        return own_entry_launches(rows, n, device, self.FUNCTION, self.PATH, self.MAX_N, self.holds, dtype)


# rows_fused's warp layout with its divisions moved off the data's path: a path of its own, for the dispatch table to
# measure (kernels/rows_fused.cu, rows_fused_warp2_counted).
#
# The warp layout's 11 Welford merges each divide by the sum of two counts. The counts depend on nothing but N, so
# the counted entry point runs the merge tree on the counts alone first, keeping each quotient, while x is in flight;
# the merges of the data then wait on no division. It runs at 7 blocks per SM, where it holds the 11 quotients
# without spilling. The bits are torch's: the merge is written in torch's contraction (welford_merge_given), which the
# SASS matcher checks (tests/test_sass.py), and the GPU tests compare int32 views.
#
# On the H200 it was 2-4% faster than rows_fused_warp2 from 8192 rows of 768 to 1024 floats up and 10-20% slower at
# 4096 rows, where rows_fused_warp2's 8 blocks per SM hold every row in one wave (docs/decisions.md#rows_coef,
# docs/decisions.md#rows_stream). Hence a path and not a replacement: where it serves is the dispatch table's to say.
# It takes every row the warp layout takes (at most WARP_VECTORS[-1] * 512 floats), shorter rows with its threads'
# second vectors unused, so that the table measures it at each N of the grid up to there and interpolates between them.
rows_counted = CountedPath("rows_counted", "rows_fused_warp2_counted",
                           THREADS * 4 * WARP_VECTORS[-1],  # the two-vector warp form's longest row: 1024 floats
                           "one warp's registers")

# torch's own (32, 4) block per row with the merges' quotients counted ahead and one block barrier a row: a path of
# its own, for the dispatch table to measure (kernels/rows_fused.cu, rows_fused_reg2_counted).
#
# The layout is rows_fused's block one (thread t of the row's 128 holds torch's thread t's float4s in registers, x read
# once). Each of torch's eight merges (five warp steps, three in the 4-warp tree) divides by the sum of two counts
# that depend on N alone, so the kernel makes the quotients while x is in flight; and every thread runs the 4-warp
# tree from the warps' states in shared memory, so one barrier serves the tree and the statistics' broadcast. The bits
# are torch's: the merge is written in torch's contraction (welford_merge_given), which the SASS matcher checks
# (tests/test_sass.py), and the GPU tests compare int32 views.
#
# Why a path beside rows_fused and rows_counted (the warp layout, four of torch's threads a lane): on the H200 the
# warp layout's schedule alone, with no statistics computed, ran 8192 x 1024 at 21.1 us, slower than Liger's block
# layout with its plain sums (20.7), and this kernel at 21.3 against rows_fused's 21.8; at 4,096 rows, and at N <= 768,
# it was slower than the warp layout (22% at 4096 x 1024, 16-37% at N = 768, 72-123% at N <= 512)
# (docs/decisions.md#rows_floor). Where it serves is the table's to say. It takes rows of at most MAX_N floats (two float4s a thread), shorter ones with threads' second vectors unused, so that the
# table measures it at each N of the grid up to there.
rows_counted_block = CountedPath("rows_counted_block", "rows_fused_reg2_counted",
                                 THREADS * 4 * 2,  # two float4s per thread: 1024 floats
                                 "two float4s a thread")


def _counted_layer_norm(path: CountedPath, x, weight, bias, eps, out, return_stats):
    from labkit.ops.launches import run

    return run(path.launches, x, weight, bias, eps, out, return_stats)


def rows_counted_layer_norm(x, weight, bias, eps: float = 1e-5, *, out=None, return_stats: bool = False):
    """LayerNorm over weight's shape with torch's vectorized-path arithmetic, the counted warp layout.

    Args and returns as labkit.ops.reference_order.reference_order_layer_norm. Raises ValueError naming the
    violated condition before any launch: an input torch's vectorized path would not take (labkit.ops.eligibility),
    a GPU before sm_80, or N above rows_counted.MAX_N.
    """
    return _counted_layer_norm(rows_counted, x, weight, bias, eps, out, return_stats)


def rows_counted_block_layer_norm(x, weight, bias, eps: float = 1e-5, *, out=None, return_stats: bool = False):
    """LayerNorm over weight's shape with torch's vectorized-path arithmetic, the counted block layout.

    Args and returns as labkit.ops.reference_order.reference_order_layer_norm. Raises ValueError naming the
    violated condition before any launch: an input torch's vectorized path would not take (labkit.ops.eligibility),
    a GPU before sm_80, or N above rows_counted_block.MAX_N.
    """
    return _counted_layer_norm(rows_counted_block, x, weight, bias, eps, out, return_stats)


def low_precision_layer_norm(x, weight, bias, eps: float = 1e-5, *, out=None, return_stats: bool = False):
    """LayerNorm over weight's shape with torch's vectorized-path arithmetic, rows_fused's layouts, for x of float32,
    bfloat16 or float16 (weight and bias of x's dtype; mean and rstd float32): the bfloat16/float16 builds called
    directly, with no dispatch (labkit.layer_norm plans them as it plans float32). Not named `rows_fused_layer_norm`: that name would make it rows_fused's
    own public function (labkit.ops.paths.public_function), which the studies run in float32 through chain_layer_norm.

    Args and returns as labkit.ops.reference_order.reference_order_layer_norm, y of x's dtype. Raises ValueError
    naming the violated condition before any launch (labkit.ops.eligibility with LOW_PRECISION_FUNCTIONS: for 2-byte
    dtypes x, weight and bias 8-byte aligned), or for a GPU before sm_80.
    """
    from labkit.core.device import current_index, device_info
    from labkit.ops import eligibility
    from labkit.ops.launches import execute

    layout = eligibility.check(x, weight, bias, eps, out=out, policy=eligibility.LOW_PRECISION_FUNCTIONS)
    p = launches(layout.rows, layout.n, device_info(current_index(x.device)), layout.dtype)
    y, mean, rstd = execute(p, x, weight, bias, eps, out)
    return (y, mean, rstd) if return_stats else y
