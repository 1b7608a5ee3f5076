"""Chain-parallel reference-order LayerNorm: torch's statistics contract with the chains spread over the GPU.

Each (row, warp) pair's 32 Welford chains run in their own block, fed by tensor-map copies on sm_90
(kernels/chain_stats_tma.cu; kernels/chain_stats.cu where chains are ragged) or by a cp.async ring below sm_90 (the
same file's chain_stats_ring: same consumer, same order, same bits),
merge in torch's tree, then kernels/affine_columns.cu writes the output. `chain_layer_norm` also serves many rows,
through labkit.ops.rows_fused (torch's per-row arithmetic, x kept in registers), where the dispatch rule says that is faster: both keep the
bits.
"""
from __future__ import annotations

import functools
import threading
from dataclasses import dataclass

import numpy as np

from labkit.core.device import Device, current_index, device_info
from labkit.core.launch import Kernel, launch
from labkit.core.program import EPS, FORWARD_SLOTS, I32, U64, BoundProgram, Launch, Map, Memset, Program, Ptr
from labkit.core.tensormap import TensorMapGeometry
from labkit.ops import dtypes, eligibility, rows_fused
from labkit.ops.launches import Scratch, execute

PATH = "chain"
KERNELS = ("chain_stats_tma", "chain_stats", "affine_columns")
MIN_ARCH = 80  # shared-memory mbarriers and cp.async (the ring blocking); tma, w1 and w4 need sm_90
BULK_ARCH = 90  # bulk and tensor-map copies, mbarrier transaction counts: the tma, w1 and w4 blockings
KERNEL_MIN_ARCH = {"chain_stats": BULK_ARCH}  # w1/w4; chain_stats_tma.cu builds its ring entry point below sm_90
SCHEDULES = ("auto", "chain", "rows_fused")
BLOCKING_NAMES = ("tma", "ring", "w1", "w4")
STEPS_PER_STAGE = 8  # must match kernels/chain_stats.cu
BLOCKS_PER_ROW = 4   # one block per warp of a row's 128 chains (tma, w1) or one per row (w4: 4 warps a block)
AFFINE_THREADS = 256  # must match kernels/affine_columns.cu's launch bounds


@dataclass(frozen=True)
class ChainBlocking:
    """How kernels/chain_stats.cu maps a row's four warps of chains to blocks (must match its template
    arguments). The tma blocking (kernels/chain_stats_tma.cu) is described by TmaConfig instead."""

    function: str
    warps: int   # consumer warps per block
    stages: int  # ring depth

    @property
    def threads(self) -> int:
        return 32 * (self.warps + 1)

    @property
    def smem_bytes(self) -> int:
        return self.stages * STEPS_PER_STAGE * (self.warps * 512 + 16)


BLOCKINGS = {"w1": ChainBlocking("chain_stats_w1", 1, 16), "w4": ChainBlocking("chain_stats_w4", 4, 12)}


@dataclass(frozen=True)
class TmaConfig:
    """Compile-time shape of kernels/chain_stats_tma.cu's ring (its defaults are the kernel's own), fed by tensor
    maps (tma) or cp.async (ring)."""

    steps: int = 64  # steps per stage = one tensor copy; the tensor map's box has this many steps
    stages: int = 6  # ring depth
    ahead: int = 8   # steps the consumer reads ahead of the one it pushes

    def __post_init__(self):
        if not (1 <= self.steps <= 256 and self.stages >= 2 and self.ahead >= 1 and self.steps % self.ahead == 0):
            raise ValueError(f"TmaConfig needs 1 <= steps <= 256 (a TMA box dimension), stages >= 2 and ahead "
                             f"dividing steps, got {self}")

    @property
    def smem_bytes(self) -> int:
        """The ring for float32: per stage, `steps` segments of 512 bytes and their 4 reciprocals each."""
        return self.smem_bytes_of(4)

    def smem_bytes_of(self, itemsize: int) -> int:
        """The ring for elements of `itemsize` bytes: a segment is a warp's 128 elements of a step."""
        return self.stages * self.steps * (128 * itemsize + 16)

    @property
    def options(self) -> tuple[str, ...]:
        if self == TmaConfig():
            return ()
        return (f"-DTMA_STEPS={self.steps}", f"-DTMA_STAGES={self.stages}", f"-DTMA_AHEAD={self.ahead}")


@dataclass(frozen=True)
class ChainSettings:
    """Launch settings of chain_layer_norm; the defaults choose from the shape, and every choice keeps the bits.

    schedule: "auto" (the dispatch rule, labkit.ops.dispatch), "chain" (few long rows) or "rows_fused" (many rows).
    blocking: for the chain schedule, "auto" or one of BLOCKING_NAMES ("tma": one warp of chains per block fed by
        tensor-map copies, needs N % 512 == 0 and sm_90; "ring": the same below sm_90, fed by cp.async; "w4":
        whole-row blocks; "w1": per-step copies; w1 and w4 need sm_90).
    tma: the tma or ring blocking's ring (default: the kernel's own for tma, `ring_config(device)` for ring).
    options: extra -D flags for the statistics kernel (the stage-breakdown variants, CHAIN_VARIANT).
    """

    schedule: str = "auto"
    blocking: str = "auto"
    tma: TmaConfig | None = None
    options: tuple[str, ...] = ()

    def __post_init__(self):
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        if self.blocking != "auto" and self.blocking not in BLOCKING_NAMES:
            raise ValueError(f"blocking must be one of {sorted(BLOCKING_NAMES)}, got {self.blocking!r}")


DEFAULT_SETTINGS = ChainSettings()


def choose_blocking(n: int, device: Device) -> str:
    """chain_stats_tma.cu needs equal-length chains (N % 512 == 0): fed by tensor maps where the device has them,
    by its cp.async ring where it does not; ragged chains take whole-row blocks with bulk copies (sm_90)."""
    if n % 512 == 0:
        return "tma" if device.tensor_maps else "ring"
    return "w4"


RING_STEPS = 32      # steps per stage of the cp.async ring: 16.5 KiB stages, so small GPUs still hold several
RING_MAX_STAGES = 8  # 132 KiB in flight per block where shared memory allows (an SM runs one such block)
STATIC_SMEM = 1024   # headroom for the kernel's static shared memory (its barriers) within the opt-in limit


def ring_config(device: Device) -> TmaConfig:
    """The cp.async ring's shape on `device`: RING_STEPS steps a stage, as many stages as its shared memory holds
    (at most RING_MAX_STAGES, at least 2); ValueError where two do not fit."""
    stage = TmaConfig(RING_STEPS, 2, 8).smem_bytes // 2
    stages = min(RING_MAX_STAGES, (device.smem_optin_bytes - STATIC_SMEM) // stage)
    if stages < 2:
        raise ValueError(f"the ring blocking needs two stages of {stage} bytes of shared memory per block, the "
                         f"device allows {device.smem_optin_bytes}")
    return TmaConfig(RING_STEPS, stages, 8)


def default_ring(device: Device) -> TmaConfig:
    """The ring the tma or ring blocking runs on `device` unless ChainSettings names one: the tensor-map kernel's own
    on sm_90, `ring_config` below; ValueError where no ring fits."""
    return TmaConfig() if device.tensor_maps else ring_config(device)


def stats_options(device: Device) -> tuple[str, ...]:
    """The compile options the chain's launches pass kernels/chain_stats_tma.cu on `device` by default (what
    `labkit warmup` compiles)."""
    try:
        return default_ring(device).options
    except ValueError:  # no ring fits: the chain is not planned there
        return ()


MAX_PUSHES = 4 * -(-(eligibility.MAX_NORMALIZED // 4) // 128)  # longest chain torch's vectorized path allows


@dataclass(frozen=True)
class ChainLaunches:
    rows: int
    n: int
    blocking: str
    stats: Kernel                        # grid (4 // warps per block, rows)
    output: Kernel                       # a thread per 4-element column over all rows, last columns first
    tensor_map: TensorMapGeometry | None  # tma: x as [rows][steps][4 warps][128 elements of x's dtype]
    reciprocals: bool                    # w1/w4 read the device's reciprocal table (tma and ring compute theirs)
    scratch: Scratch                     # per-warp states [rows, 4, 3] floats, then per-row counters [rows], zeroed
    path: str = PATH

    def program(self, device_index: int) -> Program:
        # the per-row counters: the kernel's last block per row resets its own, but a killed or faulted launch
        # would not, so they are zeroed per call (a node of the graph under capture)
        done = Ptr("scratch", self.scratch.zeroed_at)
        if self.tensor_map is not None:
            head = (Map("x", self.tensor_map),)
        elif self.reciprocals:
            head = (Ptr("x"), U64(reciprocal_table(device_index).data_ptr()))
        else:  # the ring: its producer computes the reciprocals as the tma kernel's does
            head = (Ptr("x"),)
        return Program(FORWARD_SLOTS, (
            Memset("scratch", self.scratch.zeroed_at, self.scratch.zeroed_bytes, "stats"),
            Launch(self.stats, head + (Ptr("scratch"), done, Ptr("mean"), Ptr("rstd"), I32(self.n), EPS), "stats"),
            Launch(self.output, (Ptr("x"), Ptr("mean"), Ptr("rstd"), Ptr("weight"), Ptr("bias"), Ptr("y"),
                                 I32(self.rows), I32(self.n // 4)), "output")))

    def bind(self, device_index: int) -> BoundProgram:
        return BoundProgram(self.program(device_index), device_index)


def output_kernel(n: int, dtype: str = dtypes.FLOAT32) -> Kernel:
    """The output pass's launch (kernels/affine_columns.cu) for rows of N elements of `dtype`: a thread per 4-element
    column over all rows, last columns first; its arguments are (x, mean, rstd, weight, bias, y, rows, N / 4), mean
    and rstd float32 in every dtype."""
    return Kernel("affine_columns", "affine_columns", (-(-(n // 4) // AFFINE_THREADS),), (AFFINE_THREADS,),
                  options=dtypes.options(dtype))


def launches(rows: int, n: int, device: Device, settings: ChainSettings = DEFAULT_SETTINGS,
             dtype: str = dtypes.FLOAT32) -> ChainLaunches:
    """The chain schedule's launches for rows x N of `dtype` on `device`; ValueError where they cannot run there.

    bfloat16/float16 (labkit.ops.dtypes) take the tma and ring blockings only (N % 512 == 0; chain_stats.cu's w1/w4
    have no 2-byte build; the drop-in's plans reach them, chain_layer_norm takes float32), and the tma blocking's tensor
    map needs x 16-byte aligned where torch asks 8 of a 2-byte type (the drop-in's plan checks 16 per call; the bound
    program's encode raises ValueError before its memset or any launch). An autocast build (labkit.ops.dtypes.AUTOCAST:
    x of T, everything else float32) runs T's statistics pass and its own output pass."""
    # the statistics pass reads x alone: an autocast build runs x's type's build
    options, itemsize = dtypes.options(dtypes.x_dtype(dtype)), dtypes.itemsize(dtype)
    if device.arch < MIN_ARCH:
        raise ValueError(f"the chain kernels need sm_{MIN_ARCH} (shared-memory barriers, cp.async), device is "
                         f"{device.arch_name}")
    if rows > device.max_grid_y:
        raise ValueError(f"the chain schedule puts rows in grid.y, which holds at most {device.max_grid_y} "
                         f"(got rows={rows})")
    blocking = choose_blocking(n, device) if settings.blocking == "auto" else settings.blocking
    if blocking in ("tma", "ring") and n % 512 != 0:
        raise ValueError(f"the {blocking} blocking needs N % 512 == 0 (equal-length chains), got N={n}")
    if blocking != "ring" and device.arch < BULK_ARCH:
        raise ValueError(f"the {blocking} blocking needs sm_{BULK_ARCH} (bulk copies, mbarrier transactions), device "
                         f"is {device.arch_name}" + (": N % 512 == 0 takes the ring" if n % 512 == 0 else ""))
    if blocking in BLOCKINGS and dtype != dtypes.FLOAT32:
        raise ValueError(f"the {blocking} blocking (chain_stats.cu) reads float32 only, got dtype {dtype}: 2-byte "
                         f"types take the tma or ring blocking (N % 512 == 0)")
    geometry = None
    if blocking == "tma":
        tma = settings.tma or default_ring(device)
        stats = Kernel("chain_stats_tma", "chain_stats_tma", (BLOCKS_PER_ROW, rows), (64,), tma.smem_bytes_of(itemsize),
                       tma.options + settings.options + options)
        # x as [rows][steps][4 warps][128 elements]: a segment is 128 elements, a step 4 of them, a row N
        geometry = TensorMapGeometry((128, 4, n // 512, rows), (128 * itemsize, 512 * itemsize, n * itemsize),
                                     (128, 1, tma.steps, 1), itemsize)
    elif blocking == "ring":
        if device.tensor_maps:  # the ring is chain_stats_tma.cu's entry point below sm_90 only (one per target)
            raise ValueError(f"the ring blocking is built below sm_{BULK_ARCH}; {device.arch_name} takes tma")
        ring = settings.tma or default_ring(device)  # stages sized for float32: a 2-byte type's take half as much
        stats = Kernel("chain_stats_tma", "chain_stats_ring", (BLOCKS_PER_ROW, rows), (64,),
                       ring.smem_bytes_of(itemsize), ring.options + settings.options + options)
    else:
        b = BLOCKINGS[blocking]
        stats = Kernel("chain_stats", b.function, (BLOCKS_PER_ROW // b.warps, rows), (b.threads,), b.smem_bytes,
                       settings.options)
    if stats.shared_mem + STATIC_SMEM > device.smem_optin_bytes:  # the opt-in limit counts static memory too
        raise ValueError(f"the {blocking} blocking needs {stats.shared_mem} bytes of shared memory per block beside "
                         f"its static barriers, the device allows {device.smem_optin_bytes}")
    output = output_kernel(n, dtype)
    return ChainLaunches(rows, n, blocking, stats, output, geometry, blocking in BLOCKINGS,
                         Scratch(52 * rows, zeroed_at=48 * rows, zeroed_bytes=4 * rows))


_lock = threading.Lock()
_recip_tables: dict[int, object] = {}


def reciprocal_table(device_index: int):
    """The device's table of correctly rounded reciprocals (kernels/chain_stats.cu reads it), built once.

    Read-only once built, so every stream and thread may share it; building waits for the kernel that fills it,
    so a call on another stream never reads it half-written. Built outside graph capture only."""
    import torch

    with _lock:
        table = _recip_tables.get(device_index)
        if table is None:
            if torch.cuda.is_current_stream_capturing():
                raise ValueError("the w1/w4 blockings build the device's reciprocal table at their first call: "
                                 "call once outside CUDA graph capture first")
            device = torch.device("cuda", device_index)
            table = torch.empty(MAX_PUSHES, device=device, dtype=torch.float32)
            launch("chain_stats", "reciprocal_table", (-(-MAX_PUSHES // 256),), (256,),
                   (table, np.int32(MAX_PUSHES)), device)
            torch.cuda.current_stream(device).synchronize()
            _recip_tables[device_index] = table
        return table


@functools.lru_cache(maxsize=4096)
def schedule_launches(rows: int, n: int, device: Device, settings: ChainSettings = DEFAULT_SETTINGS):
    """The launches chain_layer_norm runs: the chain schedule, rows_fused, or (auto) the one the dispatch rule picks
    among those two that can take the shape. Cached: a repeated shape costs a dictionary lookup."""
    if settings.schedule == "rows_fused":
        return rows_fused.launches(rows, n, device)
    if settings.schedule == "chain":
        return launches(rows, n, device, settings)
    from labkit.ops.dispatch import rule

    candidates = {}
    for name, make in (("chain", lambda: launches(rows, n, device, settings)),
                       ("rows_fused", lambda: rows_fused.launches(rows, n, device))):
        try:
            candidates[name] = make()
        except ValueError:
            continue
    if not candidates:
        raise ValueError(f"neither the chain nor the rows_fused schedule runs on {device.arch_name}")
    return candidates[rule.schedule(rows, n, device, tuple(candidates))]


def chain_layer_norm(x, weight, bias, eps: float = 1e-5, *, out=None, return_stats: bool = False,
                     settings: ChainSettings | None = None):
    """LayerNorm with torch's vectorized-path arithmetic, scheduled for the whole GPU.

    Args:
        x, weight, bias, eps, out, return_stats: as `labkit.ops.reference_order.reference_order_layer_norm`.
        settings: a ChainSettings (default: schedule and blocking chosen from the shape).
    Returns:
        y, or (y, mean, rstd).
    Raises:
        ValueError naming the violated condition, before any launch.
    """
    layout = eligibility.check(x, weight, bias, eps, out=out)
    p = schedule_launches(layout.rows, layout.n, device_info(current_index(x.device)),
                          settings or DEFAULT_SETTINGS)
    y, mean, rstd = execute(p, x, weight, bias, eps, out)
    return (y, mean, rstd) if return_stats else y
