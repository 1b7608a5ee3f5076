"""Which path serves a LayerNorm input on a GPU: the dispatch rule, in code, and the arch each path needs.

The rule reads nothing at import (tests/test_layers.py): its thresholds are constants that cite the committed
measurement they came from (RULE_SOURCE). Until a dropin run of notebook 08 is committed they are provisional,
and labkit.studies.dropin.rule_agreement says where a measured table disagrees with them.

Paths (every one keeps torch's vectorized-path bits; "native" is torch's own kernel):
  native           torch.native_layer_norm
  chain            kernels/chain_stats_tma.cu (N % 512 == 0) or chain_stats.cu + affine_columns.cu: a row's chains
                   spread over 4 blocks; sm_90 only (mbarriers, bulk/tensor copies)
  rows_fused       kernels/rows_fused.cu: torch's one-block-per-row schedule, x kept in registers
  reference_order  kernels/reference_stats.cu + affine_rows.cu: the post's design
"""
from __future__ import annotations

from dataclasses import dataclass

PATHS = ("native", "chain", "rows_fused", "reference_order")

# The kernels (kernels/<name>.cu) each path launches, and the oldest arch they compile for.
PATH_KERNELS = {
    "native": (),
    "chain": ("chain_stats_tma", "chain_stats", "affine_columns"),
    "rows_fused": ("rows_fused",),
    "reference_order": ("reference_stats", "affine_rows"),
}
PATH_MIN_ARCH = {"native": 0, "chain": 90, "rows_fused": 80, "reference_order": 80}

# Provisional until a committed dropin run replaces it (see labkit.studies.dropin.proposed_rule): the chain
# schedule where torch leaves most SMs idle (rows * 4 <= 2 * SMs, labkit.ops.chain.choose_schedule) and rows are
# long enough that the two launches' host cost (~2x torch's one) hides behind the kernel; torch everywhere
# else. The eager measurement (chain 0.27-0.77x native at 2k-64k-element rows with 80 us of host time,
# 24x at L1/40's 4M-element rows) is all that backs the numbers below.
RULE_SOURCE = "provisional: no committed dropin run yet (issue 16's eager table)"
CHAIN_MIN_N = 1 << 18        # shortest row the chain schedule serves
ROWS_FUSED_RANGE = None      # (min_rows, max_n) where rows_fused beats native, once measured; None: never


@dataclass(frozen=True)
class Device:
    """What the rule needs to know about a GPU."""

    arch: int       # 90 for sm_90
    sm_count: int

    @property
    def has_tensor_maps(self) -> bool:
        return self.arch >= 90


def choose(rows: int, n: int, device: Device) -> tuple[str, str]:
    """(path, why) for an input our kernels can take (float32, contiguous, aligned, N % 4 == 0, N <= 2**24)."""
    if device.has_tensor_maps and rows * 4 <= 2 * device.sm_count and n >= CHAIN_MIN_N:
        return "chain", (f"{rows} row(s) leave most of {device.sm_count} SMs idle under torch's one block per row, "
                         f"and N = {n} >= {CHAIN_MIN_N} ({RULE_SOURCE})")
    if ROWS_FUSED_RANGE is not None and rows >= ROWS_FUSED_RANGE[0] and n <= ROWS_FUSED_RANGE[1]:
        return "rows_fused", f"many short rows: x read once from registers ({RULE_SOURCE})"
    if not device.has_tensor_maps:
        return "native", (f"sm_{device.arch} has no tensor maps / bulk copies: the chain kernels need sm_90, and "
                          f"torch's own schedule is as fast as ours elsewhere")
    return "native", f"torch's kernel is at least as fast for {rows} x {n} ({RULE_SOURCE})"


def pickable_paths(arch: int) -> tuple[str, ...]:
    """Every path the rule can return on `arch` for some shape (whatever the thresholds)."""
    out = ["native"]
    if arch >= PATH_MIN_ARCH["chain"]:
        out.append("chain")
    if ROWS_FUSED_RANGE is not None and arch >= PATH_MIN_ARCH["rows_fused"]:
        out.append("rows_fused")
    return tuple(out)


def pickable_kernels(arch: int) -> tuple[str, ...]:
    """The kernels/*.cu files the rule may launch on `arch` (what must compile for it)."""
    return tuple(k for p in pickable_paths(arch) for k in PATH_KERNELS[p])


def candidate_kernels(arch: int) -> tuple[str, ...]:
    """Every kernel of every path allowed on `arch`: what a measurement there could make the rule pick."""
    return tuple(k for p in PATHS if arch >= PATH_MIN_ARCH[p] for k in PATH_KERNELS[p])
