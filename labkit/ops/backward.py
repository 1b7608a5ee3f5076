"""LayerNorm backward with torch's bits: dX, dgamma and dbeta as torch.ops.aten.native_layer_norm_backward computes
them on its vectorized path, on a schedule that reads x and dy twice where torch reads them three times.

Two or three launches (labkit.core.launch Kernels, `launches(rows, n, device, schedule)`), in one of three
schedules:
- "chain" (few long rows): the row sums of torch's dX kernel with a row's 128 chains spread over 4 * S blocks fed
  by tensor maps on sm_90, by a cp.async ring below (kernels/grad_chain_sums.cu; S, the split, the most that fit
  one wave with enough stages per block: `chain_split`; the ring as deep as the device's shared memory allows:
  `chain_stages`), then
  kernels/grad_columns.cu: dX, dgamma and dbeta from one more read of x and dy, in the order of torch's
  GammaBetaBackwardCUDAKernelTemplate for this (rows, N) (`gamma_beta_template`);
- "rows" (wide rows, where that template's grid of N/32 column blocks fills the GPU): torch's one 128-thread
  block per row for the sums (kernels/grad_row_sums.cu), then grad_columns as above;
- "split" (narrow rows, where the template's grid is too small to carry dX too): kernels/grad_rows_fused.cu, torch's
  dX schedule with x and dy kept in registers (one read for sums and dX), then grad_columns with dX off (torch's
  GammaBeta pass).
grad_columns keeps torch's order for every (column, group) chain, but spreads the template's groups over blocks where
torch's own layout (N / 32 blocks of 32 columns) would leave SMs idle, and folds them after (`column_layout`); which
of the rows and split schedules serves is the device table's backward scores' choice (`choose_schedule` is the
default without one).
Where torch leaves partial dgamma/dbeta sums for its own `.sum(0)` (M > 64K, small N), so does this, and `run`
runs that same `.sum(0)`.

bfloat16/float16 (torch's kernels for T: x, dy and gamma converted to float as loaded, float sums, dX, dgamma and
dbeta rounded to T once, torch's partials rounded to T before its `.sum(0)`; `backward` and the drop-in take them:
DROP_IN_DTYPES): every schedule runs the 2-byte builds of its kernel files (labkit.ops.dtypes.KERNELS;
kernels/dtype.cuh), with grad_columns.cu's streamed and prefetched loads (the tiled pass is float32 only); the
chain's stages hold half the bytes and its tensor maps 2-byte elements, so x, dy and gamma must be 16-byte aligned
where tensor maps read them (sm_90), 8 elsewhere (`GradLaunches.align`).
The arithmetic is held in kernels/grad_ln.cuh and described, with what it was checked against, by
labkit.studies.backward_contract.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from labkit.core.device import Device, current_index, device_info
from labkit.core.launch import Kernel, device_scope, stream
from labkit.core.program import BACKWARD_SLOTS, I32, U64, BoundProgram, Launch, Map, Memset, Program, Ptr
from labkit.core.tensormap import TensorMapGeometry
from labkit.ops import dtypes, eligibility
from labkit.ops.launches import Scratch, bound

PATH = "grad"
KERNELS = ("grad_row_sums", "grad_chain_sums", "grad_rows_fused", "grad_columns", "grad_columns_tiled")  # .cu files
MIN_ARCH = 80  # every schedule; the chain's row sums by tensor maps on sm_90, by a cp.async ring below
SUMS_THREADS = 128  # torch's num_threads() for the dX kernel
CHAIN_SPLITS = (1, 2, 4, 8)  # kernels/grad_chain_sums.cu's entry points: 32 / S chains per block
CHAIN_STAGE_BYTES = 3 * 32 * 512  # one stage of its ring (x, dy and gamma), whatever the split: 48 KiB
CHAIN_STAGES = 4  # its ring's depth by default (GRAD_STAGES), and always with tensor maps: what was measured
CHAIN_MIN_RING = 2  # the fewest stages its ring takes (the consumers read the next slot before releasing one)
CHAIN_SMEM = CHAIN_STAGES * CHAIN_STAGE_BYTES  # 192 KiB per block
CHAIN_STATIC_SMEM = 2176  # its static shared memory below sm_90 at most (S = 8's exchange tiles, the barriers;
                          # ptxas), beside the ring (sm_90's cubins report 1 KiB more, well within its 227 KiB)
CHAIN_THREADS = {1: 64, 2: 96, 4: 96, 8: 96}  # by split: a chain warp (S = 1) or a warp per sum, and a producer
# S = 4 and 8 only where each block runs at least this many stages of 32 S steps: measured on the H200
# (docs/decisions.md#grad_pairs, whole backward, graph replay), S = 8 lost at 2 x 771 steps (3 whole stages and a
# partial one: 26.2 us against S = 4's 22.7) and won from 8,192 steps at 1-4 rows; S = 4 lost at 7 x 129 steps (one whole
# stage: 14.6 us against 13.1) and won at 771. At 4 x 2,100 steps (grad_prep's probe) the rule's S = 8 took 54.9 us
# and S = 4 52.7: within 4%, left to the rule.
CHAIN_MIN_STAGES = 4
COLUMN_THREADS = 256  # kernels/grad_columns.cu's most threads per block: (float4 columns) x (groups in the block)
COLUMN_MIN_CX = 8     # float4 columns per block at least: 128 bytes of a row per group, a whole cache line
COLUMN_WAVES = 2      # blocks the column pass aims for, per SM, where the template has groups to spread
SCHEDULES = ("auto", "chain", "rows", "split")
FUSED_VECTORS = (2, 4, 8, 16)  # kernels/grad_rows_fused.cu's entry points: float4 vectors of x and dy kept per thread
LOADS = ("streamed", "prefetched", "tiled")  # the column pass's entry points, by how its loads are issued:
                                            # grad_columns.cu's two, kernels/grad_columns_tiled.cu
TILED_VECS, TILED_THREADS = 8, 256  # grad_columns_tiled's kVecs (float4 columns per block) and kThreads
TILED_ROWS = 64                     # its kTileRows: rows of a chain per tile
TILED_SMEM = 3 * (2 * TILED_ROWS * 4 * TILED_VECS + 4 * TILED_ROWS) * 4  # its ring: 3 tiles (x, dy, 4 row stats)
FOLD_THREADS = 32  # grad_columns_fold's block: N / 32 blocks read the groups' values (0.5 us faster than N / 256
                   # at N <= 1024 on the H200: docs/decisions.md#grad_tiled)
# grad_columns_tiled serves where the template's chains are long and few: below four warps' worth of (float4
# column, group) threads per SM (N < 2,112 with 32 groups on 132 SMs), and at least one tile per chain; not in the
# partial form. Measured on the H200 (docs/decisions.md#grad_tiled, boundary_fed73d8.json: the backward alone under
# graph replay, bits equal everywhere), against grad_columns.cu's layouts in the split schedule: faster at N = 1,536 and
# 2,048 from 4,096 rows (4096 x 1536 49.9 -> 41.8 us, 32768 x 2048 345.7 -> 325.2), slower at N = 4,096 (8192 x
# 4096 170.0 -> 172.6), where chains are a few rows (1024 x 4096 30.0 -> 38.2) and in the partial form (70000 x 256
# 129.9 -> 157.1).
TILED_WARPS_PER_SM = 4


@dataclass(frozen=True)
class GammaBetaTemplate:
    """Which GammaBetaBackwardCUDAKernelTemplate torch launches for (M, N) on a GPU with `sm_count` SMs:
    `groups` per block (block_dim_y), `rows_per_group` (rows_per_block_y / block_dim_y), and `partial_groups`
    (blocks.y of the M >> N form, whose partials torch sums with .sum(0); 1 otherwise)."""

    groups: int
    rows_per_group: int
    partial_groups: int = 1


@dataclass(frozen=True)
class ColumnLayout:
    """The column pass's grid for a template. kernels/grad_columns.cu: blocks of `cx` float4 columns x
    `per_block` groups, and `blocks_y` blocks over the groups (block b holds groups b, b + blocks_y, ...). `fold`:
    its blocks' values still need the tree's last steps (grad_columns_fold); in the partial form they are torch's
    partials instead.
    `prefetch`: few threads for the GPU (spread groups, or the partial form), so each loads rows ahead itself
    (grad_columns_prefetched); else torch's own layout, whose many blocks per SM hide the latency
    (grad_columns_streamed). With `loads` "tiled", kernels/grad_columns_tiled.cu: a 1-D grid of 256-thread
    blocks, one per (`cx` = 8 float4 columns, group) item over `blocks_y` groups (per_block 1)."""

    cx: int
    per_block: int
    blocks_y: int
    fold: bool
    prefetch: bool = True
    loads: str | None = None  # one of LOADS where chosen; None: "prefetched" or "streamed" by `prefetch`

    @property
    def function(self) -> str:
        return f"grad_columns_{self.loads or ('prefetched' if self.prefetch else 'streamed')}"

    @property
    def kernel(self) -> str:
        return "grad_columns_tiled" if self.loads == "tiled" else "grad_columns"

    def launch(self, n4: int) -> tuple[tuple[int, int], tuple[int, ...]]:
        """(grid, block) of the column pass over n4 float4 columns."""
        if self.loads == "tiled":  # one block per item: (column block, group), column blocks fastest
            return (-(-n4 // TILED_VECS) * self.blocks_y,), (TILED_THREADS,)
        return (-(-n4 // self.cx), self.blocks_y), (self.cx, self.per_block)


def column_layout(rows: int, n: int, sm_count: int, t: GammaBetaTemplate | None = None,
                  loads: str = "auto", smem_optin: int | None = None) -> ColumnLayout:
    """Where the template's chains are long and fewer than TILED_WARPS_PER_SM warps of threads per SM, and its ring
    fits `smem_optin` (the device's shared memory per block; None: no limit), grad_columns_tiled: a block per (32
    columns, group), copying 64-row tiles into a ring of TILED_SMEM bytes (`loads` "tiled" forces it, a ValueError
    where the ring does not fit). Else grad_columns.cu: where the template's groups x N/4 float4 threads are too few to fill COLUMN_WAVES blocks
    of COLUMN_THREADS per SM, smaller blocks with fewer groups each (at least COLUMN_MIN_CX columns), the groups
    spread over blocks and folded by grad_columns_fold. torch's own layout keeps all groups of 32 columns in one
    block: N / 32 blocks, 24 of 132 SMs at N = 768. The partial form keeps one group per block (torch sums those).
    Another `loads` forces that entry point on grad_columns.cu's layout."""
    t = t or gamma_beta_template(rows, n, sm_count)
    n4 = n // 4
    fits = smem_optin is None or TILED_SMEM <= smem_optin
    if loads == "tiled" and not fits:
        raise ValueError(f"the tiled column pass needs {TILED_SMEM} bytes of shared memory per block, the device "
                         f"allows {smem_optin}")
    few = t.groups * n4 < TILED_WARPS_PER_SM * 32 * sm_count and rows >= TILED_ROWS * t.groups
    if loads == "tiled" or (loads == "auto" and t.partial_groups == 1 and few and fits):
        blocks_y = t.partial_groups if t.partial_groups > 1 else t.groups
        return ColumnLayout(TILED_VECS, 1, blocks_y, t.partial_groups == 1 and t.groups > 1, False, "tiled")
    lay = _spread_layout(t, n4, sm_count)
    return lay if loads == "auto" else replace(lay, loads=loads)


def _spread_layout(t: GammaBetaTemplate, n4: int, sm_count: int) -> ColumnLayout:
    """grad_columns.cu's layout for a template (column_layout's second case)."""
    if t.partial_groups > 1:
        cx = min(COLUMN_THREADS, max(COLUMN_MIN_CX, 1 << (n4 - 1).bit_length()))
        return ColumnLayout(cx, 1, t.partial_groups, False)
    threads = t.groups * n4
    per_block_threads = COLUMN_THREADS
    while per_block_threads > 32 and threads < COLUMN_WAVES * sm_count * per_block_threads:
        per_block_threads //= 2
    per_block = min(t.groups, per_block_threads // COLUMN_MIN_CX)
    return ColumnLayout(per_block_threads // per_block, per_block, t.groups // per_block, t.groups > per_block,
                        per_block_threads < COLUMN_THREADS or t.groups > per_block)


def gamma_beta_template(rows: int, n: int, sm_count: int) -> GammaBetaTemplate:
    """torch v2.11.0's LaunchGammaBetaBackwardCUDAKernel, decided as its host code decides."""
    block_dim_x = 32
    if rows > 64 * 1024 and n // block_dim_x < sm_count // 2:
        blocks_x = -(-n // block_dim_x)
        return GammaBetaTemplate(1, 32, min((64 * 1024 // 2) // blocks_x, -(-rows // 32)))
    if rows < 64:
        return GammaBetaTemplate(1, 8)
    if rows < 128:
        return GammaBetaTemplate(8, 8)
    if rows < 256:
        return GammaBetaTemplate(16, 8)
    return GammaBetaTemplate(32, 8)


@dataclass(frozen=True)
class GradLaunches:
    rows: int
    n: int
    schedule: str                        # "chain", "rows" or "split"
    sums: Kernel
    columns: Kernel
    template: GammaBetaTemplate
    tensor_map: TensorMapGeometry | None  # chain on sm_90: x and dy as [rows][steps][4 S segments][128 / S
                                         # elements of the dtype]; None below (the ring reads the arrays by pointer)
    scratch: Scratch                     # s1, s2 [rows]; chain: chain sums [rows, 128, 2], then row counters (zeroed);
                                         # with a fold, the blocks' dgamma and dbeta values, [blocks_y, N]
                                         # each, from `parts_at`
    fold: Kernel | None = None           # grad_columns_fold: the tree's last steps over the column blocks' values
    parts_at: int = 0
    parts: int = 1                       # the column layout's blocks_y: groups (or partial groups) of values
    path: str = PATH
    dtype: str = dtypes.FLOAT32          # the build: x's, dy's and gamma's type, dX, dgamma and dbeta come out in
                                         # it; an autocast build's x and dX are T, the rest float32
    x_map: TensorMapGeometry | None = None  # an autocast build's chain on sm_90: x's map (2-byte elements)

    @property
    def align(self) -> int:
        """Bytes x, dy and gamma must be aligned to: 16 where tensor maps read them or an autocast build's float
        arrays are read, else torch's vector of the dtype (4 elements: 16 bytes for float32, 8 for 2-byte types)."""
        if self.tensor_map is not None or self.dtype in dtypes.AUTOCAST:
            return 16
        return eligibility.CONDITIONS.alignment_bytes(dtypes.itemsize(self.dtype))

    def misaligned(self, x, dy, weight) -> bool:
        """Whether this call's x, dy or weight (None: the plan's ones) is off `align`: torch serves that call."""
        return eligibility.misaligned(*(t.data_ptr() for t in (x, dy, weight) if t is not None), align=self.align)

    def program(self, device_index: int) -> Program:
        """dgamma/dbeta slots at address 0 where not wanted (or, in the partial form, [partial_groups, N] buffers
        for the caller's .sum(0)); `weight` is ones where the forward had none."""
        rows, n4 = self.rows, self.n // 4
        layout_args = (I32(self.template.rows_per_group),)
        if self.columns.function == "grad_columns_tiled":  # its grid is 1-D: it takes the groups as an argument
            layout_args += (I32(self.parts),)
        if self.dtype in dtypes.LOW_PRECISION:  # narrow_out: T results or partials, or float values
            layout_args += (I32(0 if self.fold is not None else 1),)  # for grad_columns_fold
        stats = (Ptr("mean"), Ptr("rstd"))
        if self.fold is None:
            outs, tail = (Ptr("dgamma"), Ptr("dbeta")), ()
        else:
            parts = self.parts
            pg, pb = Ptr("scratch", self.parts_at), Ptr("scratch", self.parts_at + 4 * parts * self.n)
            outs = (pg, pb)
            tail = (Launch(self.fold, (pg, pb, Ptr("dgamma"), Ptr("dbeta"), I32(parts), I32(self.n)), "columns"),)
        if self.schedule == "split":  # sums and dX in one pass; the GammaBeta pass then writes no dX
            return Program(BACKWARD_SLOTS, (
                Launch(self.sums, (Ptr("x"), Ptr("dy"), Ptr("weight")) + stats + (Ptr("dx"), I32(n4)), "sums"),
                Launch(self.columns, (Ptr("x"), Ptr("dy"), Ptr("weight")) + stats + (U64(0), U64(0), U64(0))
                       + outs + (I32(rows), I32(n4)) + layout_args, "columns")) + tail)
        s1, s2 = Ptr("scratch"), Ptr("scratch", 4 * rows)
        steps = []
        if self.schedule == "chain":
            if self.tensor_map is not None:  # sm_90: tensor-map copies
                g = self.tensor_map
                weight_map = TensorMapGeometry(g.dims[:3] + (1,), g.strides_bytes, g.box, g.element_bytes)
                feed = (Map("x", self.x_map or g), Map("dy", g), Map("weight", weight_map))
            else:  # below sm_90: the cp.async ring reads the arrays themselves
                feed = (Ptr("x"), Ptr("dy"), Ptr("weight"))
            steps.append(Memset("scratch", self.scratch.zeroed_at, self.scratch.zeroed_bytes, "sums"))
            steps.append(Launch(self.sums, feed + stats + (
                Ptr("scratch", 8 * rows), Ptr("scratch", self.scratch.zeroed_at), s1, s2, I32(self.n)), "sums"))
        else:
            steps.append(Launch(self.sums, (Ptr("x"), Ptr("dy"), Ptr("weight")) + stats + (s1, s2, I32(n4)),
                                "sums"))
        steps.append(Launch(self.columns, (Ptr("x"), Ptr("dy"), Ptr("weight")) + stats + (
            s1, s2, Ptr("dx")) + outs + (I32(rows), I32(n4)) + layout_args, "columns"))
        return Program(BACKWARD_SLOTS, tuple(steps) + tail)

    def bind(self, device_index: int) -> BoundProgram:
        return BoundProgram(self.program(device_index), device_index)


def choose_schedule(rows: int, n: int, device: Device) -> str:
    """The chain schedule while a row's four blocks fit about two per SM (and its kernel can: N % 512 == 0, its ring
    in the device's shared memory); else "rows" where the GammaBeta template's N/32 column blocks fill the GPU twice,
    "split" below."""
    if n % 512 == 0 and rows * 4 <= 2 * device.sm_count and rows <= device.max_grid_y and chain_stages(device):
        return "chain"
    return "rows" if -(-n // 32) >= 2 * device.sm_count else "split"


def candidates(rows: int, n: int, device: Device, dtype: str = dtypes.FLOAT32) -> dict:
    """{schedule: launches} for every schedule that can take rows x N of `dtype` on `device`."""
    out = {}
    for sch in SCHEDULES[1:]:
        try:
            out[sch] = launches(rows, n, device, sch, dtype=dtype)
        except ValueError:
            continue
    return out


def chain_steps(split: int) -> int:
    """Steps per stage of the split's entry point (GradGeometry<S>::kSteps): the tensor maps' box."""
    return 32 * split


def chain_stages(device: Device) -> int:
    """Stages of grad_chain_sums' ring on `device` (GRAD_STAGES), 0 where none fits its shared memory per block
    beside the kernel's static CHAIN_STATIC_SMEM. With tensor maps CHAIN_STAGES, the ring the sm_90 measurements
    used; below sm_90 (the cp.async ring) the most that fit, from CHAIN_MIN_RING up to CHAIN_STAGES: 3 on sm_80
    (144 KiB of its 163), 2 on sm_86 and sm_89 (96 KiB of 99)."""
    fit = min(CHAIN_STAGES, (device.smem_optin_bytes - CHAIN_STATIC_SMEM) // CHAIN_STAGE_BYTES)
    if device.tensor_maps:
        return CHAIN_STAGES if fit == CHAIN_STAGES else 0
    return fit if fit >= CHAIN_MIN_RING else 0


def chain_options(device: Device) -> tuple[str, ...]:
    """grad_chain_sums' compile options on `device`, as its launches pass them: the ring's depth where it is not
    GRAD_STAGES' default."""
    stages = chain_stages(device)
    return () if stages in (0, CHAIN_STAGES) else (f"-DGRAD_STAGES={stages}",)


def chain_function(split: int, device: Device) -> str:
    """grad_chain_sums.cu's entry point for a split on `device`: one warp pushing both sums at S = 1, a warp per sum
    (each instruction doing S steps' products) above (why: that file); fed by tensor maps on sm_90, by the cp.async
    ring (grad_chain_sums_ring_*) below."""
    prefix = "grad_chain_sums_" if device.tensor_maps else "grad_chain_sums_ring_"
    return prefix + ("s1" if split == 1 else f"split{split}")


def chain_split(rows: int, n: int, device: Device) -> int:
    """The largest split that keeps the sums in one wave (one block per SM: the ring fills its shared memory),
    at least 1: 4 * S * rows <= SMs, and from S = 4 on at least CHAIN_MIN_STAGES stages of 32 S steps per block."""
    steps = n // 512
    fits = [s for s in CHAIN_SPLITS
            if 4 * s * rows <= device.sm_count and (s <= 2 or steps >= CHAIN_MIN_STAGES * 32 * s)]
    return fits[-1] if fits else 1


def fused_function(n: int) -> str:
    """grad_rows_fused's entry point with the fewest registers that keeps a whole row (else the largest)."""
    n4 = n // 4
    k = next((k for k in FUSED_VECTORS if n4 <= SUMS_THREADS * k), FUSED_VECTORS[-1])
    return f"grad_rows_fused_reg{k}"


def launches(rows: int, n: int, device: Device, schedule: str = "auto", loads: str = "auto",
             dtype: str = dtypes.FLOAT32) -> GradLaunches:
    """`loads`: the column pass's entry point (one of LOADS), or "auto": the layout's (`column_layout`). `dtype`:
    x's (the -D option of kernels/dtype.cuh on every kernel)."""
    options = dtypes.options(dtype)
    if options and loads == "tiled":
        raise ValueError(f"the tiled column pass is built for float32 only, got {dtype}")
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
    if loads != "auto" and loads not in LOADS:
        raise ValueError(f"loads must be 'auto' or one of {LOADS}, got {loads!r}")
    if device.arch < MIN_ARCH:
        raise ValueError(f"the backward kernels are built for sm_{MIN_ARCH} and later, device is {device.arch_name}")
    if schedule == "auto":
        schedule = choose_schedule(rows, n, device)
    if dtype in dtypes.AUTOCAST and schedule != "chain":  # grad_row_sums/grad_rows_fused have no autocast build
        raise ValueError(f"the {dtype} build serves the chain schedule only, got {schedule!r}")
    n4 = n // 4
    t = gamma_beta_template(rows, n, device.sm_count)
    lay = column_layout(rows, n, device.sm_count, t, loads, device.smem_optin_bytes)
    if options and lay.loads == "tiled":  # grad_columns.cu's own layout for 2-byte rows
        lay = _spread_layout(t, n4, device.sm_count)
    grid, block = lay.launch(n4)
    columns = Kernel(lay.kernel, lay.function, grid, block, TILED_SMEM if lay.loads == "tiled" else 0, options)
    if lay.loads != "tiled" and lay.blocks_y > device.max_grid_y:  # the tiled pass's grid is 1-D
        raise ValueError(f"{lay.blocks_y} partial groups exceed grid.y ({device.max_grid_y})")
    fold = (Kernel("grad_columns", "grad_columns_fold", (-(-n // FOLD_THREADS),), (FOLD_THREADS,), 0, options)
            if lay.fold else None)
    sums_bytes = 8 * rows
    x_geometry = None
    if schedule == "chain":
        if n % 512 != 0:
            raise ValueError(f"the chain schedule needs N % 512 == 0, got N={n}")
        if rows > device.max_grid_y:
            raise ValueError(f"the chain schedule puts rows in grid.y, which holds at most {device.max_grid_y} "
                             f"(got rows={rows})")
        stages = chain_stages(device)
        if not stages:
            least = CHAIN_SMEM if device.tensor_maps else CHAIN_MIN_RING * CHAIN_STAGE_BYTES
            raise ValueError(f"the chain schedule needs {least + CHAIN_STATIC_SMEM} bytes of shared memory per "
                             f"block, the device allows {device.smem_optin_bytes}")
        split = chain_split(rows, n, device)
        item, x_item = dtypes.itemsize(dtypes.param_dtype(dtype)), dtypes.itemsize(dtype)
        # a stage holds x's array, then dy's and gamma's: a third of the float32 stage each at 4-byte elements
        stage = CHAIN_STAGE_BYTES * (x_item + 2 * item) // 12
        sums = Kernel("grad_chain_sums", chain_function(split, device), (4 * split, rows), (CHAIN_THREADS[split],),
                      stages * stage, chain_options(device) + options)
        geometry = None
        if device.tensor_maps:
            def chain_map(item):  # [rows][steps][4 S segments][128 / S elements]: one block's chains in one step
                seg = 128 // split * item
                return TensorMapGeometry((128 // split, 4 * split, n // 512, rows), (seg, 512 * item, n * item),
                                         (128 // split, 1, chain_steps(split), 1), item)
            geometry = chain_map(item)
            x_geometry = chain_map(x_item) if x_item != item else None
        scratch = Scratch(sums_bytes + 1028 * rows, zeroed_at=sums_bytes + 1024 * rows, zeroed_bytes=4 * rows)
    elif schedule == "rows":
        sums = Kernel("grad_row_sums", "grad_row_sums", (rows,), (SUMS_THREADS,), 0, options)
        geometry, scratch = None, Scratch(sums_bytes)
    else:
        sums = Kernel("grad_rows_fused", fused_function(n), (rows,), (SUMS_THREADS,), 0, options)
        geometry, scratch = None, Scratch(0)
    parts_at = 0
    if fold is not None:  # the column blocks' values after the sums' scratch, 16-byte aligned
        parts_at = -(-scratch.nbytes // 16) * 16
        scratch = Scratch(parts_at + 2 * 4 * lay.blocks_y * n, scratch.zeroed_at, scratch.zeroed_bytes)
    return GradLaunches(rows, n, schedule, sums, columns, t, geometry, scratch, fold, parts_at, lay.blocks_y,
                        dtype=dtype, x_map=x_geometry)


# The dtypes every schedule is built for, and those the drop-in serves with them: every built dtype, since the 2-byte
# builds passed their GPU tests (tests/test_gpu_low_precision.py's backward tests; docs/decisions.md
# #low_precision_backward). The trust canary checks each schedule in each of them.
BUILT_DTYPES = (dtypes.FLOAT32,) + dtypes.LOW_PRECISION
DROP_IN_DTYPES = BUILT_DTYPES
# What the backward takes of a forward's inputs: affine optional, autograd recorded, weight and bias of x's dtype.
# POLICY: the functions called directly (`backward`), every built dtype, addresses checked now; DROP_IN_POLICY: the
# drop-in, which checks each call's addresses itself.
POLICY = eligibility.Policy(affine_required=False, autograd=True, addresses=True, dtypes=BUILT_DTYPES)
DROP_IN_POLICY = replace(POLICY, addresses=False, dtypes=DROP_IN_DTYPES)


def input_refusal(x, normalized_shape, weight, bias, addresses: bool = True) -> str | None:
    """Why our backward may not take a forward's inputs, whatever grad_y, mean and rstd come (None: it may).
    `addresses=False` is the drop-in's question (DROP_IN_POLICY)."""
    why = eligibility.refusal(x, weight, bias, 0.0, normalized_shape, policy=POLICY if addresses else DROP_IN_POLICY)
    return None if why is None else str(why)


def refusal(dy, x, normalized_shape, mean, rstd, weight, bias, addresses: bool = True) -> str | None:
    """Why our backward may not take these tensors (None: it may). x/weight/bias as the drop-in's forward takes
    them (labkit.ops.eligibility, affine optional); dy like x, as torch's vectorized dX kernel needs it (x's dtype,
    contiguous, aligned to its 4-element vector: 16 bytes for float32, 8 for 2-byte types); mean and rstd float32
    with one value per row. `addresses=False` leaves the alignment checks to the caller (the drop-in checks each
    call's addresses). A schedule reading by tensor maps asks 16 bytes of x, dy and gamma: `backward` checks that
    once it has the launches (GradLaunches.align), as the drop-in does per call."""
    import math

    import torch

    why = input_refusal(x, normalized_shape, weight, bias, addresses)
    if why is not None:
        return why
    if not isinstance(dy, torch.Tensor) or dy.dtype != x.dtype or dy.shape != x.shape or dy.device != x.device:
        return f"grad_y must be a {eligibility._dtype_name(x)} tensor shaped like x on {x.device}"
    align = eligibility.CONDITIONS.alignment_bytes(x.element_size())
    if not dy.is_contiguous() or (addresses and eligibility.misaligned(dy.data_ptr(), align=align)):
        return f"grad_y must be contiguous and {align}-byte aligned (torch's vectorized dX kernel needs it)"
    if dy.is_neg() or dy._is_zerotensor():
        return "grad_y must not be a lazily negated view or a ZeroTensor (its memory does not hold grad_y)"
    rows = x.numel() // math.prod(normalized_shape)
    for name, t in (("mean", mean), ("rstd", rstd)):
        if not isinstance(t, torch.Tensor) or t.dtype != torch.float32 or t.numel() != rows or not t.is_contiguous():
            return f"{name} must be a contiguous float32 tensor with one value per row ({rows})"
        if t.is_neg() or t._is_zerotensor():
            return f"{name} must not be a lazily negated view or a ZeroTensor"
    return None


def backward(dy, x, normalized_shape, mean, rstd, weight, bias, mask=(True, True, True), schedule: str = "auto"):
    """(dx, dweight, dbias) as torch.ops.aten.native_layer_norm_backward returns them (None where `mask` or the
    absent parameter says so), bit for bit. ValueError naming the condition where our kernels cannot take it."""
    import math

    ns = tuple(int(d) for d in normalized_shape)
    why = refusal(dy, x, ns, mean, rstd, weight, bias)
    if why is not None:
        raise ValueError(why)
    n = math.prod(ns)
    rows = x.numel() // n
    index = current_index(x.device)
    p = launches(rows, n, device_info(index), schedule, dtype=eligibility._dtype_name(x))
    if p.misaligned(x, dy, weight):
        raise ValueError(f"x, grad_y and weight must be {p.align}-byte aligned where the {p.schedule} schedule's "
                         f"tensor maps read them (got addresses x {x.data_ptr():#x}, grad_y {dy.data_ptr():#x})")
    return run(p, dy, x, ns, mean, rstd, weight, bias, mask, index)


_NO_EPS = np.float32(0.0)  # the backward programs take no eps


def run(p: GradLaunches, dy, x, ns, mean, rstd, weight, bias, mask, index: int, ones=None, launcher=None):
    """Run launches `p` on validated tensors (mean and rstd contiguous, any shape with one value per row). `ones`: a
    cached ones tensor of shape ns for an absent weight; `launcher`: `bound(p, index)`, where the caller keeps it."""
    import torch

    want_x, want_w, want_b = mask[0], mask[1] and weight is not None, mask[2] and bias is not None
    pdt = getattr(torch, dtypes.param_dtype(p.dtype))  # gamma's: x's, float32 in an autocast build
    g = weight if weight is not None else (ones if ones is not None else torch.ones(ns, dtype=pdt, device=x.device))
    dx = torch.empty_like(x)
    scratch = torch.empty(p.scratch.nbytes, dtype=torch.uint8, device=x.device) if p.scratch.nbytes else None
    parts = p.template.partial_groups
    shape = (parts, p.n) if parts > 1 else ns  # torch's partials take dgamma's dtype (T), as the result does
    dgp = torch.empty(shape, dtype=pdt, device=x.device) if want_w else None
    dbp = torch.empty(shape, dtype=pdt, device=x.device) if want_b else None
    ptr = (lambda t: t.data_ptr() if t is not None else 0)
    b = launcher if launcher is not None else bound(p, index)
    with device_scope(index):
        b((dy.data_ptr(), x.data_ptr(), mean.data_ptr(), rstd.data_ptr(), g.data_ptr(), dx.data_ptr(), ptr(dgp),
           ptr(dbp), ptr(scratch)), _NO_EPS, stream(index))
    if parts > 1:  # torch's own .sum(0) of the same partials, as LaunchGammaBetaBackwardCUDAKernel does
        dgp = dgp.sum(0).view(ns) if dgp is not None else None
        dbp = dbp.sum(0).view(ns) if dbp is not None else None
    return (dx if want_x else None), dgp, dbp
