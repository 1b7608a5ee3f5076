"""Which path serves a LayerNorm input on a GPU: the dispatch rule, in code, and the arch each path needs.

The rule reads nothing at import (tests/test_layers.py): the table it looks shapes up in is the generated module
labkit/ops/dropin/measured.py, which cites the committed dispatch_table run it was derived from (RULE_SOURCE;
scripts/dispatch_table.py regenerates both, tests/test_dispatch.py checks they agree). Notebook 08 times the rule's
picks again in its own run and says where the fastest path there differs.

Paths (every one keeps torch's vectorized-path bits; "native" is torch's own kernel):
  native           torch.native_layer_norm
  chain            kernels/chain_stats_tma.cu (N % 512 == 0) or chain_stats.cu + affine_columns.cu: a row's chains
                   spread over 4 blocks; sm_90 only (mbarriers, bulk/tensor copies)
  rows_fused       kernels/rows_fused.cu: torch's one-block-per-row schedule, x kept in registers
  reference_order  kernels/reference_stats.cu + affine_rows.cu: the post's design
"""
from __future__ import annotations

from dataclasses import dataclass

from labkit.ops.dropin import measured

PATHS = ("native", "chain", "rows_fused", "reference_order")

# The kernels (kernels/<name>.cu) each path launches, and the oldest arch they compile for.
PATH_KERNELS = {
    "native": (),
    "chain": ("chain_stats_tma", "chain_stats", "affine_columns"),
    "rows_fused": ("rows_fused",),
    "reference_order": ("reference_stats", "affine_rows"),
}
PATH_MIN_ARCH = {"native": 0, "chain": 90, "rows_fused": 80, "reference_order": 80}


RULE_SOURCE = f"dispatch table from run {measured.RUN_ID}"

CHAIN_MAX_ROWS = 65535  # the chain schedule puts rows in grid.y


@dataclass(frozen=True)
class Device:
    """What the rule needs to know about a GPU."""

    arch: int       # 90 for sm_90
    sm_count: int

    @property
    def has_tensor_maps(self) -> bool:
        return self.arch >= 90


def row_class(rows: int, sm_count: int) -> int:
    """0 while the chain schedule's 4 blocks per row fit one wave of the GPU, then one more per doubling of waves:
    the class carries to a GPU with another SM count."""
    waves = -(-4 * rows // sm_count)
    return (waves - 1).bit_length()


def n_class(n: int) -> int:
    """floor(log2(N))."""
    return n.bit_length() - 1


def _nearest(keys, k: int) -> int:
    """The largest measured class <= k, else the smallest measured: an unmeasured N class takes the shorter rows'
    answer, which is the conservative side for the chain (its lead over torch grows with N)."""
    below = [c for c in keys if c <= k]
    return max(below) if below else min(keys)


def choose(rows: int, n: int, device: Device) -> tuple[str, str]:
    """(path, why) for an input our kernels can take (float32, contiguous, aligned, N % 4 == 0, N <= 2**24)."""
    if not device.has_tensor_maps:
        return "native", (f"sm_{device.arch}: the dispatch table was measured on sm_90 ({measured.DEVICE['name']}); "
                          f"unmeasured here, so torch's own kernel serves")
    rc, nc = row_class(rows, device.sm_count), n_class(n)
    table = measured.TABLE
    row = table[_nearest(table, rc)]
    paths = row[_nearest(row, nc)]
    for path in paths:
        if path == "chain" and rows > CHAIN_MAX_ROWS:
            continue
        if path in PATHS:
            return path, (f"{rows} x {n}: row class {rc} ({-(-4 * rows // device.sm_count)} wave(s) of the chain "
                          f"schedule on {device.sm_count} SMs), N class 2^{nc}; fastest there as measured "
                          f"({RULE_SOURCE})")
    return "native", f"no measured path of this class can take {rows} rows ({RULE_SOURCE})"


def pickable_paths(arch: int) -> tuple[str, ...]:
    """Every path the rule can return on `arch` for some shape: the measured table's on sm_90, native elsewhere."""
    if arch < 90:
        return ("native",)
    seen = {p for row in measured.TABLE.values() for paths in row.values() for p in paths}
    return tuple(p for p in PATHS if p in seen | {"native"})


def pickable_kernels(arch: int) -> tuple[str, ...]:
    """The kernels/*.cu files the rule may launch on `arch` (what must compile for it)."""
    return tuple(k for p in pickable_paths(arch) for k in PATH_KERNELS[p])


def candidate_kernels(arch: int) -> tuple[str, ...]:
    """Every kernel of every path allowed on `arch`: what a measurement there could make the rule pick."""
    return tuple(k for p in PATHS if arch >= PATH_MIN_ARCH[p] for k in PATH_KERNELS[p])
