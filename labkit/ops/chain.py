"""Chain-parallel reference-order LayerNorm: torch's statistics contract with the chains spread over the GPU.

Two schedules of one contract, chosen from the shape (both bit-identical to torch's vectorized path):
- "chain" (few, long rows): each (row, warp) pair's 32 Welford chains run in their own block, fed by tensor-map
  copies (kernels/chain_stats_tma.cu; kernels/chain_stats.cu where chains are ragged), merge in torch's tree,
  then kernels/affine_columns.cu writes the output.
- "rows_fused" (many rows): kernels/rows_fused.cu is torch's own one-block-per-row schedule, keeping each
  thread's vectors in registers so x is read once.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from labkit.core.launch import launch
from labkit.core.validate import MAX_NORMALIZED, check_output, layer_norm_layout

SCHEDULES = ("auto", "chain", "rows_fused")
STEPS_PER_STAGE = 8  # must match kernels/chain_stats.cu


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
BLOCKING_NAMES = ("tma", *BLOCKINGS)
DEFAULT_BLOCKING = "auto"
MAX_DYNAMIC_SMEM = 227 * 1024  # sm_90 opt-in limit per block


@dataclass(frozen=True)
class TmaConfig:
    """Compile-time shape of kernels/chain_stats_tma.cu's ring (its defaults are the kernel's own)."""

    steps: int = 64  # steps per stage = one tensor copy; the tensor map's box has this many steps
    stages: int = 6  # ring depth
    ahead: int = 8   # steps the consumer reads ahead of the one it pushes

    def __post_init__(self):
        if not (1 <= self.steps <= 256 and self.stages >= 2 and self.ahead >= 1 and self.steps % self.ahead == 0):
            raise ValueError(f"TmaConfig needs 1 <= steps <= 256 (a TMA box dimension), stages >= 2 and ahead "
                             f"dividing steps, got {self}")
        if tma_smem_bytes(self) > MAX_DYNAMIC_SMEM:
            raise ValueError(f"TmaConfig {self} needs {tma_smem_bytes(self)} bytes of shared memory, more than "
                             f"{MAX_DYNAMIC_SMEM}")

    @property
    def options(self) -> tuple[str, ...]:
        if self == TmaConfig():
            return ()
        return (f"-DTMA_STEPS={self.steps}", f"-DTMA_STAGES={self.stages}", f"-DTMA_AHEAD={self.ahead}")


def tma_smem_bytes(config: "TmaConfig | None" = None) -> int:
    """The ring: per stage, `steps` segments of 512 bytes and their 4 reciprocals each."""
    c = config or TmaConfig()
    return c.stages * c.steps * (512 + 16)


def choose_blocking(n: int) -> str:
    """The tensor-map kernel needs equal-length chains (N % 512 == 0); otherwise whole-row blocks with
    contiguous copies, which handle ragged chains."""
    return "tma" if n % 512 == 0 else "w4"


MAX_PUSHES = 4 * -(-(MAX_NORMALIZED // 4) // 128)                # longest chain torch's vectorized path allows

_lock = threading.Lock()
_recip_tables: dict[int, object] = {}


def choose_schedule(rows: int, sm_count: int) -> str:
    """Chains when four blocks per row still fit in about two blocks per SM; otherwise torch's own schedule."""
    return "chain" if rows * 4 <= 2 * sm_count else "rows_fused"


def _recip_table(device):
    """The device's table of correctly rounded reciprocals (kernels/chain_stats.cu reads it), built once.

    Read-only once built, so every stream and thread may share it; building waits for the kernel that fills it,
    so a call on another stream never reads it half-written. Built outside graph capture only."""
    import torch

    with _lock:
        table = _recip_tables.get(device.index)
        if table is None:
            if torch.cuda.is_current_stream_capturing():
                raise ValueError("chain_layer_norm with the w1/w4 blockings: call once outside CUDA graph capture "
                                 "first (it builds the device's reciprocal table then)")
            table = torch.empty(MAX_PUSHES, device=device, dtype=torch.float32)
            launch("chain_stats", "reciprocal_table", (-(-MAX_PUSHES // 256),), (256,),
                   (table, np.int32(MAX_PUSHES)), device)
            torch.cuda.current_stream(device).synchronize()
            _recip_tables[device.index] = table
        return table


def _scratch(device, rows: int):
    """Per-call scratch (per-warp states, per-row arrival counters, zeroed) from torch's caching allocator on the
    call's stream: calls overlapping on other streams or threads never share it, and under graph capture it comes
    from the graph's private pool and lives as long as the graph."""
    import torch

    return (torch.empty(rows * 12, device=device, dtype=torch.float32),
            torch.zeros(rows, device=device, dtype=torch.int32))


def launch_chain_stats(x, mean, rstd, rows: int, n: int, eps: float, blocking: str = DEFAULT_BLOCKING,
                       options: tuple[str, ...] = (), tma: TmaConfig | None = None) -> None:
    """The statistics pass alone. `options` adds -D flags (the tma kernel's stage-breakdown variants,
    CHAIN_VARIANT); `tma` changes the tma blocking's ring (default: the kernel's own)."""
    if blocking == "auto":
        blocking = choose_blocking(n)
    warp_state, row_done = _scratch(x.device, rows)
    if blocking == "tma":
        from labkit.core.tensormap import encode_tiled_f32

        tma = tma or TmaConfig()
        # x as [rows][steps][4 warps][128 floats]: one box is `tma.steps` steps of one warp's 512-byte segments.
        tmap = encode_tiled_f32(x.data_ptr(), (128, 4, n // 512, rows), (512, 2048, 4 * n),
                                (128, 1, tma.steps, 1))
        launch("chain_stats_tma", "chain_stats_tma", (4, rows), (64,),
               (tmap, warp_state, row_done, mean, rstd, np.int32(n), np.float32(eps)),
               x.device, shared_mem=tma_smem_bytes(tma), options=tma.options + tuple(options))
        return
    b = BLOCKINGS[blocking]
    launch("chain_stats", b.function, (4 // b.warps, rows), (b.threads,),
           (x, _recip_table(x.device), warp_state, row_done, mean, rstd, np.int32(n), np.float32(eps)),
           x.device, shared_mem=b.smem_bytes, options=options)


AFFINE_THREADS = 256  # must match kernels/affine_columns.cu's launch bounds


def launch_affine_columns(x, mean, rstd, weight, bias, y, rows: int, n: int, options: tuple[str, ...] = ()) -> None:
    """The chain schedule's output pass: a thread per float4 column over all rows, last columns first."""
    n4 = n // 4
    launch("affine_columns", "affine_columns", (-(-n4 // AFFINE_THREADS),), (AFFINE_THREADS,),
           (x, mean, rstd, weight, bias, y, np.int32(rows), np.int32(n4)), x.device, options=options)


ROWS_FUSED_VECTORS = (2, 4, 8)  # kernels/rows_fused.cu's entry points: float4 vectors kept per thread


def rows_fused_function(n: int) -> str:
    """The entry point with the fewest registers that still keeps a whole row in registers (else the largest,
    which re-reads the rest): fewer registers, more blocks per SM, which short rows need."""
    n4 = n // 4
    k = next((k for k in ROWS_FUSED_VECTORS if n4 <= 128 * k), ROWS_FUSED_VECTORS[-1])
    return f"rows_fused_reg{k}"


def launch_rows_fused(x, weight, bias, y, mean, rstd, rows: int, n: int, eps: float) -> None:
    launch("rows_fused", rows_fused_function(n), (rows,), (32, 4),
           (x, weight, bias, y, mean, rstd, np.int32(n), np.float32(eps)), x.device)


@dataclass(frozen=True)
class ChainSettings:
    """Launch settings of chain_layer_norm; the defaults choose from the shape, and every choice keeps the bits.

    schedule: "auto", "chain" (few long rows) or "rows_fused" (many rows).
    blocking: for the chain schedule, "auto" or one of BLOCKING_NAMES ("tma": one warp of chains per block fed by
        tensor-map copies, needs N % 512 == 0; "w4": whole-row blocks; "w1": per-step copies, timed for comparison).
    """

    schedule: str = "auto"
    blocking: str = DEFAULT_BLOCKING

    def __post_init__(self):
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        if self.blocking != "auto" and self.blocking not in BLOCKING_NAMES:
            raise ValueError(f"blocking must be one of {sorted(BLOCKING_NAMES)}, got {self.blocking!r}")


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
    settings = settings or ChainSettings()
    schedule, blocking = settings.schedule, settings.blocking
    layout = layer_norm_layout(x, weight, bias, eps)
    if out is not None:
        check_output("out", out, x)
    import torch

    rows, n = layout.rows, layout.n
    if schedule == "auto":
        schedule = choose_schedule(rows, torch.cuda.get_device_properties(x.device).multi_processor_count)
    if blocking == "tma" and choose_blocking(n) != "tma":
        raise ValueError(f"the tma blocking needs N % 512 == 0 (equal-length chains), got N={n}")
    if schedule == "chain" and rows > 65535:
        raise ValueError(f"the chain schedule puts rows in grid.y, which holds at most 65535 (got rows={rows})")
    y = torch.empty_like(x) if out is None else out
    mean = torch.empty(rows, device=x.device, dtype=torch.float32)
    rstd = torch.empty(rows, device=x.device, dtype=torch.float32)
    if schedule == "chain":
        launch_chain_stats(x, mean, rstd, rows, n, eps, blocking)
        launch_affine_columns(x, mean, rstd, weight, bias, y, rows, n)
    else:
        launch_rows_fused(x, weight, bias, y, mean, rstd, rows, n, eps)
    return (y, mean, rstd) if return_stats else y
