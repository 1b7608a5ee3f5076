"""The drop-in's dispatch table from measurement: every candidate path timed on a grid of
(rows, N) as a user calls it (eager, CUDA events around one call, L2 flushed: host time counts), reduced to each
path's time / native's per grid point, and written as the device's module in labkit/ops/dispatch/tables/, which
the rule reads.

The table's row axis (labkit.ops.dispatch.rule.row_coord) is log2 of the waves the chain schedule's four blocks per
row fill, so that it carries to a GPU with another SM count; its other axis is log2 N. The rule interpolates
between the measured points.
scripts/dispatch_table.py runs the grid on a GPU into a run named "dispatch_table" and regenerates the module;
tests/test_dispatch.py checks that every committed module is what derive_scores makes of the run it cites.
"""
from __future__ import annotations

import math

# The grid: rows from 1 to 65536 and N from 2**8 to 2**24, at most 2**26 elements (256 MiB) per input, and few
# rows where N is long (torch's one block per row takes tens of ms there, and the class is clear by then). Rows
# 8192 and 32768 and N 2**9 and 2**11 make it denser where ordinary transformer shapes sit and torch's kernel and
# rows_fused cross; the table committed before them (run 9b141b) was measured without them.
GRID_ROWS = (1, 4, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536)
GRID_LOG2_N = (8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 20, 22, 24)
GRID_MAX_NUMEL = 1 << 26
GRID_MAX_ROWS = {20: 64, 22: 16, 24: 1}  # by log2 N
def grid_shapes() -> list[tuple[int, int]]:
    out = []
    for k in GRID_LOG2_N:
        for rows in GRID_ROWS:
            n = 1 << k
            if rows * n <= GRID_MAX_NUMEL and rows <= GRID_MAX_ROWS.get(k, rows):
                out.append((rows, n))
    return out


def warm_up(seconds: float = 3.0, device="cuda") -> dict:
    """Keep the GPU busy with torch's LayerNorm at L1/40 for `seconds` (the clocks ramp up under load), so that the
    first shapes measured are not measured on an idle GPU. Returns what ran."""
    import time

    import torch

    x = torch.randn(16, 1 << 22, device=device)
    calls, t0 = 0, time.perf_counter()
    with torch.no_grad():
        while time.perf_counter() - t0 < seconds:
            torch.nn.functional.layer_norm(x, (1 << 22,))
            torch.cuda.synchronize()
            calls += 1
    return {"seconds": time.perf_counter() - t0, "calls": calls, "shape": [16, 1 << 22]}


def graph_sweep(sweep: dict) -> dict:
    """`sweep` with each shape's graph-replay medians where derive_scores reads the eager ones: the graph table
    (GRAPH) comes from the same run as the eager one (labkit.studies.dropin_sweep.sweep times both)."""
    return {**sweep, "shapes": [{**r, "eager": r.get("graph") or {}} for r in sweep["shapes"]]}


def derive_scores(sweep: dict, order=None) -> dict[float, dict[int, dict[str, float]]]:
    """{row level: {log2 N: {path: eager time / native's}}} from a sweep record (labkit.studies.dropin_sweep.sweep's
    format, or backward_sweep's with `order` = ("native", *BACKWARD_PATHS)): row levels are
    labkit.ops.dispatch.rule.row_coord (rounded to 4 places); the shapes of one (level, N) (e.g. 1 to 32 rows, all
    one wave) are combined by geometric mean; a path that failed at any of them is left out of that point."""
    from labkit.ops.dispatch.rule import ORDER, row_coord

    order = order or ORDER
    sms = sweep["device"]["sm_count"]
    groups: dict[tuple[float, int], list[dict]] = {}
    for r in sweep["shapes"]:
        key = (row_coord(r["rows"], sms), r["n"].bit_length() - 1)
        groups.setdefault(key, []).append(r["eager"])
    out: dict[float, dict[int, dict[str, float]]] = {}
    for (x, y), times in sorted(groups.items()):
        point = {}
        for path in order:
            ratios = [t[path] / t["native"] for t in times if t.get(path) and t.get("native")]
            if len(ratios) == len(times):
                point[path] = round(math.exp(sum(map(math.log, ratios)) / len(ratios)), 4)
        if point.get("native"):  # without native's time at every shape of the point there is nothing to compare
            out.setdefault(x, {})[y] = point
    return out


def derive_protocols(sweep: dict, order=None) -> tuple[dict, dict]:
    """(eager scores, graph-replay scores) of one sweep record (derive_scores of it and of `graph_sweep` of it): the
    forward's SCORES and GRAPH, or with `order` labkit.ops.dispatch.rule.BACKWARD_ORDER the backward's BACKWARD and
    BACKWARD_GRAPH."""
    return derive_scores(sweep, order), derive_scores(graph_sweep(sweep), order)


def backward_sweep(shape_list, rounds: int = 9, seed: int = 0, eps: float = 1e-5, device="cuda", log=None) -> dict:
    """The backward alone at each shape, as the drop-in's autograd node serves it, under both protocols: eager per
    call (CUDA events around one call, L2 flushed: host time counts) and graph replay (the GPU's time). Every method
    goes through the host extension's backward entry point (labkit.ops.dropin.host), the code the node runs: torch's
    backward ("native": a plan with no backward program, so at::native_layer_norm_backward from C++) and each of our
    schedules that can take the shape, forced. Where the extension does not serve, torch's op from Python and our
    bound programs from Python (`host_path` False). The `backward_sweep` record (labkit.studies.dropin_sweep.sweep's
    format: per shape `eager` and `graph` medians with their stats)."""
    from labkit.ops.dropin.aten import refuse_while_enabled

    refuse_while_enabled("the backward sweep")
    import time as _time
    from dataclasses import replace

    import torch

    from labkit.core.device import current_index, device_info
    from labkit.inputs import make_affine, make_input
    from labkit.ops import backward as grad
    from labkit.ops.dispatch.rule import BACKWARD_PATHS
    from labkit.ops.dropin import host
    from labkit.ops.dropin.plan import host_plan
    from labkit.ops.launches import bound
    from labkit.studies.bench import PROTOCOL_A, PROTOCOL_B, time_methods
    from labkit.tasks import shape_key

    eager_p = replace(PROTOCOL_B, rounds=rounds)
    graph_p = replace(PROTOCOL_A, rounds=rounds, repeats=3)
    index = current_index(torch.device(device))
    dev = device_info(index)
    ext = host.module() if host.unavailable(index) is None else None
    rows_out = []
    for shape in shape_list:
        t0 = _time.perf_counter()
        x = make_input("uniform", shape, seed, device)
        w, b = make_affine("random_normal", shape[1:], seed, device)
        dy = torch.randn(shape, device=device, generator=torch.Generator(device=device).manual_seed(seed))
        ns = tuple(shape[1:])
        rows, n = x.numel() // w.numel(), w.numel()
        _, mean, rstd = torch.native_layer_norm(x, ns, w, b, eps)
        mean, rstd = mean.reshape(-1), rstd.reshape(-1)
        mask = [True, True, True]

        def call(gp):
            if ext is not None:
                hp = host_plan(index, None, 0, gp, ns, 0.0, [rows], rows, None, None)
                return lambda: ext.backward(hp, dy, x, mean, rstd, w, b, mask)
            if gp is None:
                return lambda: torch.ops.aten.native_layer_norm_backward(dy, x, list(ns), mean, rstd, w, b, mask)
            launcher = bound(gp, index)
            return lambda: grad.run(gp, dy, x, ns, mean, rstd, w, b, mask, index, None, launcher)

        fns = {"native": call(None)}
        for sch, gp in grad.candidates(rows, n, dev).items():
            fns[sch] = call(gp)
        row = {"key": shape_key(shape), "shape": list(shape), "rows": rows, "n": n, "errors": {}}
        for key, protocol in (("eager", eager_p), ("graph", graph_p)):
            try:
                rec = time_methods(fns, protocol, "native")
                row[key] = {k: v["median_ms"] for k, v in rec.stats.items()}
                row[f"{key}_stats"] = rec.stats
            except Exception as exc:  # a protocol that fails is a gap in the table, not a crash of the sweep
                row[key] = {}
                row["errors"][key] = f"{type(exc).__name__}: {str(exc)[:300]}"
        row["seconds"] = _time.perf_counter() - t0
        rows_out.append(row)
        x = dy = None  # freed before the next shape is made
        if log:
            log(f"{rows_out[-1]['key']}: {rows_out[-1]['seconds']:.1f} s")
    return {"device": {"name": torch.cuda.get_device_name(), "arch": dev.arch, "sm_count": dev.sm_count},
            "paths": ["native", *BACKWARD_PATHS], "host_path": ext is not None,
            "protocols": {"eager": eager_p.__dict__, "graph": graph_p.__dict__}, "shapes": rows_out}


def module_source(scores: dict, run_id: str, sweep: dict, backward: dict | None = None,
                  backward_run_id: str | None = None, graph: dict | None = None,
                  backward_graph: dict | None = None) -> str:
    """The device's generated table module (labkit/ops/dispatch/tables/) for `scores`, citing the run it came from;
    with `graph`, the same run's graph-replay scores (GRAPH); with `backward`, the backward's scores too (BACKWARD,
    citing BACKWARD_RUN_ID), and `backward_graph` that run's graph-replay ones (BACKWARD_GRAPH)."""
    dev = sweep["device"]
    lines = [f'"""The dispatch table measured on {dev["name"]} ({dev["sm_count"]} SMs, sm_{dev["arch"]}), generated by',
             "scripts/dispatch_table.py (labkit.studies.dispatch.derive_scores) from the run below; do not edit.",
             "",
             "SCORES[row level][log2 N] = {path: eager time / torch's}; row level = labkit.ops.dispatch.rule.row_coord.",
             "GRAPH: the same under graph replay (the same run); BACKWARD: the backward's eager scores;",
             "BACKWARD_GRAPH: the backward's under graph replay (its run).",
             '"""',
             f'RUN_ID = "{run_id}"',
             f'DEVICE = {{"name": "{dev["name"]}", "arch": {dev["arch"]}, "sm_count": {dev["sm_count"]}}}',
             *_table_lines("SCORES", scores)]
    if graph is not None:
        lines += _table_lines("GRAPH", graph)
    if backward is not None:
        lines += [f'BACKWARD_RUN_ID = "{backward_run_id}"', *_table_lines("BACKWARD", backward)]
        if backward_graph is not None:
            lines += _table_lines("BACKWARD_GRAPH", backward_graph)
    return "\n".join(lines) + "\n"


def _table_lines(name: str, table: dict) -> list[str]:
    """`name = {row level: {log2 N: {path: score}}}` as sorted source lines, one log2 N per line."""
    lines = [f"{name} = {{"]
    for x, level in sorted(table.items()):
        lines.append(f"    {x!r}: {{")
        lines += [f"        {y}: {point!r}," for y, point in sorted(level.items())]
        lines.append("    },")
    return lines + ["}"]


def module_path(sweep: dict):
    """Where the device's generated table lives: labkit/ops/dispatch/tables/<name>_sm<arch>_<sm count>.py."""
    from pathlib import Path

    from labkit.ops.dispatch import tables

    dev = sweep["device"]
    return Path(tables.__file__).parent / f"{tables.module_name(dev['name'], dev['arch'], dev['sm_count'])}.py"


def table_rows(scores: dict, sm_count: int, backward: bool = False, graph: dict | None = None) -> list[dict]:
    """The measured points as a grid for display: one row per row level (rows per wave level on this GPU), one
    column per log2 N, the path the rule takes there (`backward`: the backward's schedules; `graph`: the table's
    graph replay scores, which break the eager scores' near ties as the rule's eager choice does)."""
    from labkit.ops.chain import BLOCKS_PER_ROW
    from labkit.ops.dispatch.rule import BACKWARD_ORDER, ORDER, pick

    short = lambda p: "torch" if p == "native" else p.split("_")[0]  # noqa: E731  (chain, rows, reference)
    ys = sorted({y for level in scores.values() for y in level})
    out = []
    for x, level in sorted(scores.items()):
        row = {"rows (on this GPU)": f"<= {max(1, round(sm_count * 2 ** x / BLOCKS_PER_ROW))}"}
        for y in ys:
            sc = level.get(y)
            if not sc:
                row[f"2^{y}"] = ""
                continue
            tie = (graph or {}).get(x, {}).get(y)
            row[f"2^{y}"] = short(pick(sc, BACKWARD_ORDER if backward else ORDER, tie=tie))
        out.append(row)
    return out
