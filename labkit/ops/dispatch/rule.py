"""Which path serves a LayerNorm input on a GPU: the one dispatch rule, in code.

The rule reads nothing at import (tests/test_layers.py): it interpolates in the table measured for the device
(labkit.ops.dispatch.tables: each path's eager time / native's at the measured grid, citing the committed
dispatch_table run it was derived from; scripts/dispatch_table.py regenerates it, tests/test_dispatch.py checks
they agree). Two questions, one rule:
  choose    the drop-in: torch's own kernel ("native") or one of our paths that can take the input, whichever the
            table says is fastest, leaving torch's kernel only for more than MARGIN (under the eager protocol, our
            paths within TIE of the fastest are told apart by the graph replay scores);
  schedule  chain_layer_norm's automatic schedule: the fastest of our paths offered; on a device without a table,
            the waves rule (chains while a row's blocks fit about two per SM).
Paths (labkit.ops.paths; every one keeps torch's vectorized-path bits): chain, rows_fused, rows_counted,
rows_counted_block, rows_staged, rows_cluster, reference_order.
"""
from __future__ import annotations

import math

from labkit.core.device import Device
from labkit.ops import paths
from labkit.ops.dispatch import tables

ORDER = (paths.NATIVE, *paths.PATHS)  # ties go to the earlier

# A path other than torch's own serves an input only where its interpolated time / native's is below 1 - MARGIN:
# closer than that, run-to-run noise decides, and torch's kernel needs no plan of ours.
MARGIN = 0.03

# Under the eager protocol, our paths whose eager scores are within TIE of the fastest's are told apart by their
# graph replay scores from the same run: where host time is most of an eager call (small inputs: 50-60 us of the
# forced candidates' Python path against 10-20 us of GPU time) the eager medians differ by less than their
# quartiles do, and the GPU time is the difference that remains (run dispatch-table-6db688, since superseded, at
# 4096 x 1024: eager reference_order 0.83, rows_fused 0.85, quartiles overlapping; graph 1.02 and 0.66).
TIE = 0.10

# Beyond the longest N measured at a row level only the chain's score is carried on (its lead over torch grows
# with N); the other paths' scores there would be guesses, so they are not candidates.
EXTRAPOLATES = (paths.NATIVE, "chain")


def row_coord(rows: int, sm_count: int) -> float:
    """log2 of the waves the chain schedule's blocks per row fill on the GPU (0 while they fit one), rounded to 4
    places as the table's keys are: the row axis of the measured table, so that it carries to another SM count."""
    from labkit.ops.chain import BLOCKS_PER_ROW

    return round(max(0.0, math.log2(BLOCKS_PER_ROW * rows / sm_count)), 4)


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


def scores_in(table: dict, rows: int, n: int, sm_count: int) -> dict:
    """Each path's time / native's for rows x N, interpolated in `table` (a SCORES mapping): along log2 N at each
    measured row level, then between the two row levels around this input."""
    x, y = row_coord(rows, sm_count), math.log2(n)
    lo, hi, t = _between(table, x)
    at = {}
    for level in {lo, hi}:
        ys = table[level]
        a, b, u = _between(ys, y)
        at[level] = _blend(ys[a], ys[b], u)
        if y > max(ys):
            at[level] = {p: v for p, v in at[level].items() if p in EXTRAPOLATES}
    return _blend(at[lo], at[hi], t)


def pick(sc: dict, order: tuple[str, ...] = ORDER, tie: dict | None = None) -> str:
    """The path a {path: time / native} map selects: the fastest (ties in `order`: ORDER for the forward,
    BACKWARD_ORDER for the backward), if it is not torch's and is more than MARGIN faster than torch's; else
    native. `tie` (the graph replay scores, for an eager pick): among our paths within TIE of the fastest and
    more than MARGIN faster than torch's, the one `tie` has fastest."""
    best = min(sc, key=lambda p: (sc[p], order.index(p)))
    if tie and best != paths.NATIVE and best in tie:  # no graph score for the fastest: no evidence to overrule it
        near = [p for p in sc if p != paths.NATIVE and p in tie and sc[p] <= sc[best] * (1 + TIE)
                and sc[p] < 1 - MARGIN]
        if near:
            best = min(near, key=lambda p: (tie[p], order.index(p)))
    return best if best != paths.NATIVE and sc[best] < 1 - MARGIN else paths.NATIVE


# The protocols a table is measured under (labkit.studies.bench): "eager", one call between CUDA events with the L2
# flushed (host time counts: what an eager model pays), and "graph", replay of a captured CUDA graph (no host
# time: what a model under CUDA graphs or torch.compile's cudagraphs pays). They disagree where host cost decides.
PROTOCOLS = ("eager", "graph")


def protocol_scores(table, protocol: str) -> tuple[dict, str]:
    """(the SCORES mapping `table` holds for `protocol`, and a note when it falls back to the eager one)."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"protocol must be one of {PROTOCOLS}, got {protocol!r}")
    if protocol == "graph":
        graph = getattr(table, "GRAPH", None)
        if graph:
            return graph, "graph replay scores"
        return table.SCORES, "eager scores: the table holds no graph replay ones"
    return table.SCORES, "eager scores"


def carried(path: str, table, sm_count: int) -> bool:
    """Whether `table`'s scores for `path` may serve a device of `sm_count` SMs: always where the table was measured
    at that SM count; from a table carried through the wave axis only for a path whose module does not say
    CARRIES = False (rows_cluster: how many clusters a GPU holds at once depends on its GPCs)."""
    return (path == paths.NATIVE or getattr(paths.PATHS[path], "CARRIES", True)
            or table.DEVICE["sm_count"] == sm_count)


def choose(rows: int, n: int, device: Device, available: tuple[str, ...], protocol: str = "eager") -> tuple[str, str]:
    """(path, why) for an input our kernels may take (labkit.ops.eligibility), among the paths in `available`
    (those whose plan can take rows x N on `device`) and torch's own kernel, by the table's scores for `protocol`
    (PROTOCOLS: how the calls will be made)."""
    table, which = tables.for_device(device.arch, device.sm_count, device.name, device.target)
    if table is None:
        return paths.NATIVE, f"{which}: torch's own kernel serves (our paths are unmeasured here)"
    scores, kind = protocol_scores(table, protocol)
    sc = {p: v for p, v in scores_in(scores, rows, n, device.sm_count).items()
          if p == paths.NATIVE or (p in available and carried(p, table, device.sm_count))}
    graph = getattr(table, "GRAPH", None) if protocol == "eager" else None
    tie = scores_in(graph, rows, n, device.sm_count) if graph else None
    path = pick(sc, tie=tie)
    shown = ", ".join(f"{p} {v:.2f}" for p, v in sorted(sc.items(), key=lambda kv: kv[1]))
    where = f"{rows} x {n} on {device.sm_count} SMs, time / native interpolated from the table's {kind}: {shown}"
    if tie and path != paths.NATIVE and path != min(sc, key=lambda p: (sc[p], ORDER.index(p))):
        where += f" (within {TIE:.0%} of the fastest: graph replay's {tie[path]:.2f} decides)"
    if path != paths.NATIVE:
        return path, f"{where} ({which})"
    return paths.NATIVE, f"{where}: nothing more than {MARGIN:.0%} faster than torch's kernel ({which})"


def schedule(rows: int, n: int, device: Device, offered: tuple[str, ...]) -> str:
    """The fastest of our paths in `offered` for rows x N by the device's table (native left out: the caller asked
    for our kernels); without a table, the chain while its blocks fit about two per SM, else the first other."""
    table, _ = tables.for_device(device.arch, device.sm_count, device.name, device.target)
    if table is not None:
        sc = {p: v for p, v in scores_in(table.SCORES, rows, n, device.sm_count).items()
              if p in offered and carried(p, table, device.sm_count)}
        if sc:
            return min(sc, key=lambda p: (sc[p], ORDER.index(p)))
    from labkit.ops.chain import BLOCKS_PER_ROW

    if "chain" in offered and rows * BLOCKS_PER_ROW <= 2 * device.sm_count:
        return "chain"
    return next((p for p in offered if p != "chain"), offered[0])


def table_source(device: Device) -> str:
    """Which table serves `device` and why (labkit.explain's rule_source)."""
    return tables.for_device(device.arch, device.sm_count, device.name, device.target)[1]


def pickable_paths(arch: int, sm_count: int) -> tuple[str, ...]:
    """Every path the rule can return on a device for some shape: those its table has faster than native by the
    margin somewhere (interpolation never goes below the smallest measured score); native where it has no table."""
    table, _ = tables.for_device(arch, sm_count)
    if table is None:
        return (paths.NATIVE,)
    seen = {p for level in table.SCORES.values() for sc in level.values() for p, v in sc.items() if v < 1 - MARGIN}
    return tuple(p for p in ORDER if p in seen | {paths.NATIVE} and
                 (p == paths.NATIVE or (arch >= paths.PATHS[p].MIN_ARCH and carried(p, table, sm_count))))


def pickable_kernels(arch: int, sm_count: int) -> tuple[str, ...]:
    """The kernels/*.cu files the rule may launch on a device (what must compile for it)."""
    return tuple(k for p in pickable_paths(arch, sm_count) for k in paths.kernels(p, arch))


BACKWARD_PATHS = ("chain", "rows", "split")  # labkit.ops.backward's schedules, each a path the backward rule weighs
BACKWARD_ORDER = (paths.NATIVE, *BACKWARD_PATHS)  # ties go to the earlier


def choose_backward(rows: int, n: int, device: Device, available: tuple[str, ...] = BACKWARD_PATHS,
                    protocol: str = "eager") -> tuple[str, str]:
    """(path, why) for a backward our kernels can take: the fastest of torch's backward ("native") and our
    schedules in `available`, by the device table's backward scores for `protocol` (BACKWARD: time / torch's eager
    per call, as the drop-in's autograd node runs them; BACKWARD_GRAPH: under graph replay, where the table has
    them), leaving torch's only for more than MARGIN; under the eager protocol, near ties told apart by graph
    replay as the forward's are (`pick`). "native" where the device has no backward table."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"protocol must be one of {PROTOCOLS}, got {protocol!r}")
    table, which = tables.for_device(device.arch, device.sm_count, device.name, device.target)
    measured = getattr(table, "BACKWARD", None) if table is not None else None
    if not measured:
        return paths.NATIVE, f"backward unmeasured on this GPU ({which}): torch's backward serves"
    graph = getattr(table, "BACKWARD_GRAPH", None)
    kind = "eager"
    if protocol == "graph" and graph:
        measured, graph, kind = graph, None, "graph replay"
    sc = {p: v for p, v in scores_in(measured, rows, n, device.sm_count).items()
          if p == paths.NATIVE or p in available}
    tie = scores_in(graph, rows, n, device.sm_count) if graph else None
    path = pick(sc, BACKWARD_ORDER, tie=tie)
    shown = ", ".join(f"{p} {v:.2f}" for p, v in sorted(sc.items(), key=lambda kv: kv[1]))
    return path, (f"{rows} x {n}: backward time / native interpolated ({kind}): {shown} ({which}, run "
                  f"{table.BACKWARD_RUN_ID})")
