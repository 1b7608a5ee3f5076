"""Which path serves a LayerNorm input on a GPU: the dispatch rule, in code, and the arch each path needs.

The rule reads nothing at import (tests/test_layers.py): the table it interpolates in is the generated module
labkit/ops/dropin/measured.py (each path's eager time / native's at the measured grid), which cites the committed
dispatch_table run it was derived from (RULE_SOURCE; scripts/dispatch_table.py regenerates both,
tests/test_dispatch.py checks they agree). Notebook 08 times the rule's
picks again in its own run and says where the fastest path there differs.

Paths (every one keeps torch's vectorized-path bits; "native" is torch's own kernel):
  native           torch.native_layer_norm
  chain            kernels/chain_stats_tma.cu (N % 512 == 0) or chain_stats.cu + affine_columns.cu: a row's chains
                   spread over 4 blocks; sm_90 only (mbarriers, bulk/tensor copies)
  rows_fused       kernels/rows_fused.cu: torch's one-block-per-row schedule, x kept in registers
  reference_order  kernels/reference_stats.cu + affine_rows.cu: the post's design
"""
from __future__ import annotations

import math
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


# A path other than torch's own serves an input only where its interpolated time / native's is below 1 - MARGIN:
# closer than that, run-to-run noise decides, and torch's kernel needs no plan of ours.
MARGIN = 0.03


def row_coord(rows: int, sm_count: int) -> float:
    """log2 of the waves the chain schedule's 4 blocks per row fill on the GPU (0 while they fit one), rounded to 4
    places as the table's keys are: the row axis of the measured table, so that it carries to another SM count."""
    return round(max(0.0, math.log2(4 * rows / sm_count)), 4)


# Beyond the longest N measured at a row level only the chain's score is carried on (its lead over torch grows
# with N); the other paths' scores there would be guesses, so they are not candidates.
EXTRAPOLATES = ("native", "chain")


def _between(points: dict, q: float) -> tuple:
    """(lo, hi, t): the measured keys around q and q's fraction between them (clamped at the ends)."""
    keys = sorted(points)
    if q <= keys[0]:
        return keys[0], keys[0], 0.0
    if q >= keys[-1]:
        return keys[-1], keys[-1], 0.0
    lo = max(k for k in keys if k <= q)
    hi = min(k for k in keys if k >= q)
    return lo, hi, (0.0 if hi == lo else (q - lo) / (hi - lo))


def _blend(a: dict, b: dict, t: float) -> dict:
    """Geometric interpolation of two {path: time / native} maps; a path missing from either is left out."""
    return {p: math.exp((1 - t) * math.log(a[p]) + t * math.log(b[p])) for p in a if p in b}


def scores(rows: int, n: int, sm_count: int) -> dict:
    """Each path's time / native's for rows x N, interpolated in the measured table (measured.SCORES): along
    log2 N at each measured row level, then between the two row levels around this input."""
    x, y = row_coord(rows, sm_count), math.log2(n)
    lo, hi, t = _between(measured.SCORES, x)
    at = {}
    for level in {lo, hi}:
        ys = measured.SCORES[level]
        a, b, u = _between(ys, y)
        at[level] = _blend(ys[a], ys[b], u)
        if y > max(ys):
            at[level] = {p: v for p, v in at[level].items() if p in EXTRAPOLATES}
    return _blend(at[lo], at[hi], t)


def pick(sc: dict) -> str:
    """The path a {path: time / native} map selects: the fastest (ties in PATHS order), if it is not torch's and is
    more than MARGIN faster than torch's; else native."""
    best = min(sc, key=lambda p: (sc[p], PATHS.index(p)))
    return best if best != "native" and sc[best] < 1 - MARGIN else "native"


def choose(rows: int, n: int, device: Device) -> tuple[str, str]:
    """(path, why) for an input our kernels can take (float32, contiguous, aligned, N % 4 == 0, N <= 2**24)."""
    if device.arch != measured.DEVICE["arch"]:
        # other archs differ in shared memory (the tma ring needs 198 KiB), copy engines and clocks: unmeasured
        return "native", (f"sm_{device.arch}: the dispatch table was measured on sm_{measured.DEVICE['arch']} "
                          f"({measured.DEVICE['name']}); unmeasured here, so torch's own kernel serves")
    sc = scores(rows, n, device.sm_count)
    if rows > CHAIN_MAX_ROWS:
        sc.pop("chain", None)
    path = pick(sc)
    shown = ", ".join(f"{p} {v:.2f}" for p, v in sorted(sc.items(), key=lambda kv: kv[1]))
    where = f"{rows} x {n} on {device.sm_count} SMs, time / native interpolated from the table: {shown}"
    if path != "native":
        return path, f"{where} ({RULE_SOURCE})"
    return "native", f"{where}: nothing more than {MARGIN:.0%} faster than torch's kernel ({RULE_SOURCE})"


def pickable_paths(arch: int) -> tuple[str, ...]:
    """Every path the rule can return on `arch` for some shape: those the measured table has faster than native by
    the margin somewhere (interpolation never goes below the smallest measured score), on the table's own arch;
    native elsewhere."""
    if arch != measured.DEVICE["arch"]:
        return ("native",)
    seen = {p for level in measured.SCORES.values() for sc in level.values() for p, v in sc.items() if v < 1 - MARGIN}
    return tuple(p for p in PATHS if p in seen | {"native"})


def pickable_kernels(arch: int) -> tuple[str, ...]:
    """The kernels/*.cu files the rule may launch on `arch` (what must compile for it)."""
    return tuple(k for p in pickable_paths(arch) for k in PATH_KERNELS[p])


def candidate_kernels(arch: int) -> tuple[str, ...]:
    """Every kernel of every path allowed on `arch`: what a measurement there could make the rule pick."""
    return tuple(k for p in PATHS if arch >= PATH_MIN_ARCH[p] for k in PATH_KERNELS[p])
