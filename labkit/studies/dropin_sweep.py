"""The drop-in's forward speed (notebook 08): every path at every shape under both protocols and compiled
(`dropin_sweep`), the host cost per call (`dropin_host`), the floor at 1-4 long rows (`dropin_floor`), their rows
and figure, and the dispatch rule read against the sweep. Apart from labkit.studies.dropin (the verdict) because
these are the measurements the peers and the tuner build on."""
from __future__ import annotations

import time
from dataclasses import replace

from labkit.ops.paths import PATHS
from labkit.studies.measure import host_us_per_call
from labkit.tasks import L1_40, config, shape_key


# (rows, N) from (1, 2**24) to (65536, 256): 64 MiB of float32 each, the row count doubling.
SWEEP = tuple((1 << k, 1 << (24 - k)) for k in range(17))
QUICK_SWEEP = ((1, 1 << 20), (4, 1 << 18), (64, 1 << 14), (4096, 256))
EAGER_METHODS = ("native", "dropin", *PATHS)  # torch, the drop-in as dispatched, each of our paths forced
HOST_SHAPE = (8, 256)   # "a tiny shape": the kernel is shorter than the host's part of a call
HOST_CALLS = 10_000


def shapes(mode: str) -> list[tuple[int, ...]]:
    """The sweep (full) or its corners (quick), then the timing study's shapes of the mode."""
    sweep = SWEEP if mode == "full" else QUICK_SWEEP
    return [*sweep, *config(mode).timing_shapes]


def _affine(shape, seed, device):
    from labkit.inputs import make_affine

    return make_affine("random_normal", shape[1:], seed, device)


def _methods(x, w, b, eps):
    """torch, the drop-in as dispatched, and each path built for x's dtype forced (labkit.ops.paths.DTYPES)."""
    import torch

    from labkit import layer_norm
    from labkit.ops.dropin import layer_norm_with
    from labkit.ops.paths import DTYPES

    ns = tuple(w.shape)
    dtype = str(x.dtype).removeprefix("torch.")
    m = {"native": lambda: torch.nn.functional.layer_norm(x, ns, w, b, eps),
         "dropin": lambda: layer_norm(x, ns, w, b, eps)}
    for path in EAGER_METHODS[2:]:
        if dtype in DTYPES[path]:
            m[path] = (lambda p: lambda: layer_norm_with(p, x, ns, w, b, eps))(path)
    return m


def _compiled(x, w, b, eps):
    """nn.LayerNorm's functional and the drop-in's, compiled for this shape (measure.compile_static), as a user
    compiles a model."""
    import torch

    from labkit import layer_norm
    from labkit.studies.measure import compile_static

    ns = tuple(w.shape)
    native, ours = compile_static(lambda x, w, b: torch.nn.functional.layer_norm(x, ns, w, b, eps),
                                  lambda x, w, b: layer_norm(x, ns, w, b, eps), fullgraph=True)
    return {"native_compiled": lambda: native(x, w, b), "dropin_compiled": lambda: ours(x, w, b)}


def _raise_recompile_limit() -> None:
    import torch._dynamo

    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, max(256, getattr(torch._dynamo.config, name)))


def _medians(rec) -> dict:
    return {k: v["median_ms"] for k, v in rec.stats.items()}


def sweep(shape_list, rounds: int = 15, seed: int = 0, eps: float = 1e-5, device="cuda", log=None,
          compiled: bool = True, dtype: str = "float32") -> dict:
    """Every candidate path at every shape: eager per call (CUDA events around one call, L2 flushed: KernelBench's
    protocol, host time counts), graph replay (protocol A) and compiled (eager protocol on torch.compile'd
    callables; `compiled=False` leaves that out). A path that cannot take a shape is recorded with its reason.
    `dtype`: x, weight and bias of that dtype (a bfloat16/float16 model's LayerNorm), the paths built for it. The
    `dropin_sweep` record."""
    from labkit.ops.dropin.aten import refuse_while_enabled

    refuse_while_enabled("the drop-in sweep")
    import torch

    from labkit.core.device import current_index, device_info
    from labkit.inputs import make_input
    from labkit.ops import paths
    from labkit.ops.dispatch import rule
    from labkit.ops.dtypes import LOW_PRECISION
    from labkit.studies.bench import PROTOCOL_A, PROTOCOL_B, time_methods

    if dtype not in ("float32", *LOW_PRECISION):
        raise ValueError(f"dtype must be one of float32, {', '.join(LOW_PRECISION)}, got {dtype!r}")
    torch_dtype = getattr(torch, dtype)
    eager_p, graph_p = replace(PROTOCOL_B, rounds=rounds), replace(PROTOCOL_A, rounds=rounds)
    dev = device_info(current_index(torch.device(device)))
    _raise_recompile_limit()
    rows_out = []
    for shape in shape_list:
        t0 = time.perf_counter()
        x = make_input("uniform", shape, seed, device).to(torch_dtype)
        w, b = (v.to(x.dtype) for v in _affine(shape, seed, device))
        rows, n = x.numel() // w.numel(), w.numel()
        row = {"key": shape_key(shape), "shape": list(shape), "rows": rows, "n": n, "l1_40": tuple(shape) == L1_40,
               "rule": rule.choose(rows, n, dev, tuple(paths.candidates(rows, n, dev, dtype)))[0], "errors": {}}
        with torch.no_grad():
            ok = {}
            for name, fn in _methods(x, w, b, eps).items():
                try:
                    fn()
                    ok[name] = fn
                except ValueError as exc:
                    row["errors"][name] = str(exc)
            e, g = time_methods(ok, eager_p, "native"), time_methods(ok, graph_p, "native")
            row["eager"], row["graph"] = _medians(e), _medians(g)
            row["eager_stats"], row["graph_stats"] = e.stats, g.stats
            try:
                if not compiled:
                    raise LookupError("not timed compiled (compiled=False)")
                c = time_methods(_compiled(x, w, b, eps), eager_p, "native_compiled")
                row["compiled"], row["compiled_stats"] = _medians(c), c.stats
            except LookupError as exc:
                row["compiled"], row["errors"]["compiled"] = {}, str(exc)
            except Exception as exc:  # a compile failure is a finding, not a crash of the sweep
                row["compiled"], row["errors"]["compiled"] = {}, f"{type(exc).__name__}: {exc}"
        row["seconds"] = time.perf_counter() - t0
        rows_out.append(row)
        x = None  # freed before the next shape is made
        if log:
            log(f"{row['key']}: {row['seconds']:.1f} s")
    return {"device": {"arch": dev.arch, "sm_count": dev.sm_count, "name": torch.cuda.get_device_name()},
            "dtype": dtype, "rule_source": rule.table_source(dev),
            "protocols": {"eager": eager_p.__dict__, "graph": graph_p.__dict__}, "shapes": rows_out}


def host_cost(shape=HOST_SHAPE, calls: int = HOST_CALLS, device="cuda") -> dict:
    """Host time per call over `calls` back-to-back calls at a tiny shape (the GPU keeps up, so the loop's wall
    time is the host's): torch's F.layer_norm, the drop-in as dispatched, our kernel path forced, and the op
    through the dispatcher (what autograd/compile pay). The `dropin_host` record."""
    import torch

    from labkit import layer_norm
    from labkit.ops.dropin import explain, layer_norm_with
    from labkit.ops.dropin.op import layer_norm_op

    x = torch.rand(shape, device=device)
    w, b = _affine(shape, 0, device)
    ns = tuple(w.shape)
    sync = torch.cuda.synchronize if torch.device(device).type == "cuda" else (lambda: None)
    with torch.no_grad():
        out = {"shape": list(shape), "calls": calls,
               "torch_us": host_us_per_call(lambda: torch.nn.functional.layer_norm(x, ns, w, b), calls, sync),
               "dropin_us": host_us_per_call(lambda: layer_norm(x, ns, w, b), calls, sync),
               "dropin_path": explain(x, ns, w, b)["path"],
               "op_us": host_us_per_call(lambda: layer_norm_op(x, list(ns), w, b, 1e-5), calls, sync)}
        for path in ("chain", "rows_fused"):
            try:
                out[f"{path}_us"] = host_us_per_call(lambda: layer_norm_with(path, x, ns, w, b), calls, sync)
            except ValueError as exc:
                out[f"{path}_us"], out[f"{path}_error"] = None, str(exc)
    return out


# The drop-in's floor check: 1, 2 and 4 rows of 4M and 8M elements, where the chain path serves one row with 128
# dependent chains of N / 128 pushes each and nothing else can hide that chain.
FLOOR_ROWS = (1, 2, 4)
FLOOR_NS = (1 << 22, 1 << 23)
FLOOR_SLACK = 0.15  # the goal: within 15% of the floor


def floor_check(rounds: int = 15, seed: int = 0, eps: float = 1e-5, device="cuda") -> dict:
    """The contract's floor at each (rows, N) of FLOOR_ROWS x FLOOR_NS, measured in this run: the dependent push
    chain of N / 128 pushes (kernels/chain_floor.cu, protocol A) plus the output pass's bytes (x read, y written)
    at the device copy ceiling (labkit.studies.measure.copy_ceiling_a); beside it the drop-in's eager
    (protocol B) and graph-replay (protocol A) medians. The `dropin_floor` record."""
    import torch

    from labkit import layer_norm
    from labkit.inputs import make_input
    from labkit.studies.bench import PROTOCOL_A, PROTOCOL_B, time_methods
    from labkit.studies.measure import copy_ceiling_a

    ceiling = copy_ceiling_a(rounds=rounds, device=device)
    chains = {n: chain_floor_for(n, rounds, device) for n in FLOOR_NS}
    rows_out = []
    for n in FLOOR_NS:
        for rows in FLOOR_ROWS:
            x = make_input("uniform", (rows, n), seed, device)
            w, b = _affine((rows, n), seed, device)
            out_bytes, floor_ms = schedule_floor(chains[n], ceiling, x.numel(), 4)
            with torch.no_grad():
                fn = {"dropin": lambda: layer_norm(x, (n,), w, b, eps)}
                e = time_methods(fn, replace(PROTOCOL_B, rounds=rounds)).stats["dropin"]
                g = time_methods(fn, replace(PROTOCOL_A, rounds=rounds)).stats["dropin"]
            rows_out.append({"key": shape_key((rows, n)), "rows": rows, "n": n, "chain_ms": chains[n]["ms"],
                             "output_bytes": out_bytes, "floor_ms": floor_ms, "eager": e, "graph": g})
            x = None  # freed before the next shape is made
    return {"ceiling": ceiling, "chain_floors": {str(n): c for n, c in chains.items()}, "slack": FLOOR_SLACK,
            "shapes": rows_out}


def chain_floor_for(n: int, rounds: int, device) -> dict:
    """The chain schedule's push chain for rows of N elements, measured (labkit.studies.measure.chain_floor): each of
    a row's 128 chains pushes N / 128 elements, one after another."""
    from labkit.studies.measure import chain_floor

    return chain_floor(pushes=n // 128, rounds=rounds, device=device)


def schedule_floor(chain: dict, ceiling: dict, numel: int, itemsize: int) -> tuple[int, float]:
    """(output pass bytes, floor ms) of the chain schedule's forward: its dependent push chain (a chain_floor record)
    plus the output pass's bytes (x read, y written, `itemsize` bytes an element) at the copy ceiling (a
    copy_ceiling_a record). The pushes do not shrink with the dtype; the bytes do."""
    out_bytes = 2 * numel * itemsize
    return out_bytes, chain["ms"] + out_bytes / (ceiling["read_plus_write_gbps"] * 1e6)


def floor_rows(floor: dict | None) -> list[dict]:
    """Per shape: the floor's two parts, the drop-in's eager and graph medians, and drop-in / floor."""
    rows = []
    for r in (floor or {}).get("shapes", []):
        e, g = r["eager"]["median_ms"], r["graph"]["median_ms"]
        rows.append({"shape": r["key"], "push chain us": 1e3 * r["chain_ms"],
                     "output at ceiling us": 1e3 * (r["floor_ms"] - r["chain_ms"]), "floor us": 1e3 * r["floor_ms"],
                     "drop-in eager us": 1e3 * e, "eager / floor": e / r["floor_ms"],
                     "drop-in graph us": 1e3 * g, "graph / floor": g / r["floor_ms"]})
    return rows


def _ratio(d: dict, base: str, name: str):
    if d and d.get(base) and d.get(name):
        return d[base] / d[name]
    return None


def figure(sweep_record: dict | None):
    """The sweep's forward time against row shape (labkit.studies.plots.time_vs_shape); None without a sweep."""
    from labkit.studies.plots import time_vs_shape

    return time_vs_shape([("forward", sweep_record, "compiled")])


def speed_rows(sweep_record: dict | None) -> list[dict]:
    """Per shape: native and drop-in medians (us) and native/drop-in ratios under each protocol."""
    rows = []
    for r in (sweep_record or {}).get("shapes", []):
        e, g, c = r.get("eager", {}), r.get("graph", {}), r.get("compiled", {})
        rows.append({"shape": r["key"], "rule": r["rule"],
                     "native eager us": 1e3 * e["native"] if e.get("native") else None,
                     "drop-in eager us": 1e3 * e["dropin"] if e.get("dropin") else None,
                     "eager x": _ratio(e, "native", "dropin"), "graph x": _ratio(g, "native", "dropin"),
                     "compiled x (vs compiled nn.LayerNorm)": _ratio(c, "native_compiled", "dropin_compiled")})
    return rows


def fastest(times: dict) -> str | None:
    live = {k: v for k, v in times.items() if v}
    return min(live, key=live.get) if live else None


# The rule agrees with a measurement at a shape when its path is within this much of the fastest path.
AGREE_RELATIVE, AGREE_ABSOLUTE_MS = 0.05, 0.002


def dispatch_rows(sweep_record: dict | None) -> list[dict]:
    """The dispatch table: per shape, each path's eager median (us), the fastest, the rule's pick and agreement."""
    from labkit.ops.paths import DTYPES

    rows = []
    dtype = (sweep_record or {}).get("dtype", "float32")
    for r in (sweep_record or {}).get("shapes", []):
        e = {k: r["eager"].get(k) for k in EAGER_METHODS if k != "dropin" and (k == "native" or dtype in DTYPES[k])}
        best = fastest(e)
        pick = e.get(r["rule"])
        agree = bool(best and pick and pick <= e[best] * (1 + AGREE_RELATIVE) + AGREE_ABSOLUTE_MS)
        rows.append({"shape": r["key"], **{f"{k} us": (1e3 * v if v else None) for k, v in e.items()},
                     "fastest": best, "rule": r["rule"], "agrees": agree})
    return rows


def low_precision_dispatch(session) -> tuple[str, list[dict]]:
    """(a line per dtype, the rows) from a `dispatch_low_precision` session (scripts/dispatch_table.py --dtypes): at
    each grid point, each path built for the dtype (eager per call, us), the fastest, the path the rule picks (by the
    float32 scores, among the paths built for the dtype) and whether it is within the agreement margin of the
    fastest."""
    from labkit.ops.dtypes import LOW_PRECISION

    lines, rows = [], []
    for dtype in LOW_PRECISION:
        rec = session.record(f"dropin_sweep_{dtype}")
        if not rec:
            continue
        these = dispatch_rows(rec)
        agree = sum(r["agrees"] for r in these)
        line = (f"{dtype}: the rule's pick is within {AGREE_RELATIVE:.0%} (or {AGREE_ABSOLUTE_MS * 1e3:.0f} us) of the "
                f"fastest path at {agree} of {len(these)} grid points")
        worst = max((r for r in these if not r["agrees"]), key=lambda r: _pick_over_fastest(r) or 0.0, default=None)
        if worst is not None and _pick_over_fastest(worst):
            line += (f"; worst at {worst['shape']}: {worst['rule']} takes {_pick_over_fastest(worst):.2f}x "
                     f"{worst['fastest']}'s time")
        lines.append(line + f" (eager per call, {rec['device']['name']}).")
        rows += [{"dtype": dtype, **r} for r in these]
    if not lines:
        lines.append(f"2-byte dispatch data: {session.absent('dropin_sweep_bfloat16')}.")
    return "\n".join(lines), rows


def _pick_over_fastest(row: dict) -> float | None:
    pick, best = row.get(f"{row['rule']} us"), row.get(f"{row['fastest']} us") if row.get("fastest") else None
    return pick / best if pick and best else None


def protocol_picks(sweep_record: dict | None) -> list[dict]:
    """Per shape of a sweep: the rule's pick under each protocol (labkit.ops.dispatch.rule.PROTOCOLS: "eager" is
    what the run recorded, "graph" is the rule on the table's graph-replay scores) and what each pick measured in
    the same run, as torch's time / the pick's (x native) under that protocol — and the eager pick under graph
    replay, what a graph-captured model got before the rule knew the protocol."""
    from labkit.ops.dispatch import rule, tables

    if not sweep_record:
        return []
    d = sweep_record["device"]
    # the committed table of the run's GPU, never a table this machine's user tuned (README "GPUs")
    table, _ = tables.committed(d["arch"], d["sm_count"])
    if table is None:
        return []
    graph, _ = rule.protocol_scores(table, "graph")
    out = []
    for r in sweep_record["shapes"]:
        e, g = r.get("eager") or {}, r.get("graph") or {}
        offered = tuple(p for p in PATHS if e.get(p) and g.get(p))
        sc = {p: v for p, v in rule.scores_in(graph, r["rows"], r["n"], d["sm_count"]).items()
              if p == "native" or p in offered}
        gpick = rule.pick(sc)
        ratio = lambda t, p: t["native"] / t[p] if t.get("native") and t.get(p) else None  # noqa: E731
        out.append({"shape": r["key"], "eager pick": r["rule"], "x native, eager": ratio(e, r["rule"]),
                    "graph pick": gpick, "x native, graph replay": ratio(g, gpick),
                    "eager pick under graph replay, x native": ratio(g, r["rule"])})
    return out


def protocol_line(picks: list[dict], source: str) -> str:
    """The worst x native of the rule's pick under each protocol, from protocol_picks."""
    def worst(key):
        have = [(r[key], r["shape"]) for r in picks if r[key] is not None]
        return min(have) if have else (None, None)
    (we, se), (wg, sg), (wx, sx) = (worst("x native, eager"), worst("x native, graph replay"),
                                    worst("eager pick under graph replay, x native"))
    if we is None:
        return f"per protocol: {source}"
    differ = sum(r["eager pick"] != r["graph pick"] for r in picks)
    return (f"the rule per protocol over {len(picks)} shapes ({source}): the picks differ at {differ}; worst x native "
            f"under eager per call {we:.3g}x at {se}; under graph replay with the graph pick {wg:.3g}x at {sg} "
            f"(the eager pick there: {wx:.3g}x at {sx})")


def rule_grid_rows() -> list[dict]:
    """Every committed dispatch table (labkit/ops/dispatch/tables/) as a grid: the path the rule takes at each
    measured point, on the GPU it was measured on, for float32 and for bfloat16/float16 (the same float32 scores
    among the paths built for 2-byte rows, labkit.ops.paths.DTYPES: no 2-byte table is measured)."""
    from labkit.ops import dtypes, paths
    from labkit.ops.dispatch import tables
    from labkit.studies.dispatch import table_rows

    def only(scores, keep):
        if scores is None:
            return None
        return {x: {y: {p: v for p, v in sc.items() if p in keep} for y, sc in level.items()}
                for x, level in scores.items()}
    low = {p for p, ts in paths.DTYPES.items() if dtypes.LOW_PRECISION[0] in ts} | {paths.NATIVE}
    out = []
    for t in tables.tables():
        graph = getattr(t, "GRAPH", None)
        for label, keep in ((dtypes.FLOAT32, None), ("bfloat16/float16", low)):
            scores = t.SCORES if keep is None else only(t.SCORES, keep)
            out += [{"table": t.DEVICE["name"], "dtype": label, **row}
                    for row in table_rows(scores, t.DEVICE["sm_count"],
                                          graph=graph if keep is None else only(graph, keep))]
    return out


def host_rows(host: dict | None) -> list[dict]:
    if not host:
        return []
    names = {"torch_us": "torch F.layer_norm", "dropin_us": f"labkit.layer_norm (path: {host.get('dropin_path')})",
             "op_us": "torch.ops.labkit.layer_norm (the dispatcher)", "chain_us": "our chain path, forced",
             "rows_fused_us": "our rows_fused path, forced"}
    return [{"call": label, "host us per call": host.get(k), "shape": shape_key(host["shape"]), "calls": host["calls"]}
            for k, label in names.items()]


def others_win(sweep_record: dict | None) -> str:
    """Where torch.compile wins against the compiled drop-in (ratios below 1), beside the uncompiled drop-in's gain
    over torch eager, both eager per call with the L2 flushed; numbers from the sweep record."""
    from labkit.studies.bench import PROTOCOL_NAMES

    rows = speed_rows(sweep_record)
    comp = [(r["shape"], r["compiled x (vs compiled nn.LayerNorm)"]) for r in rows
            if r.get("compiled x (vs compiled nn.LayerNorm)") is not None]
    eager = [(r["shape"], r["eager x"]) for r in rows if r.get("eager x") is not None]
    if not comp:
        return "No compiled timing in this run: nothing to say about torch.compile."
    below = [c for c in comp if c[1] < 1]
    lo, hi = min(comp, key=lambda c: c[1]), max(comp, key=lambda c: c[1])
    said = (f"torch.compile wins: under {PROTOCOL_NAMES['B']} the compiled drop-in is below 1x compiled "
            f"nn.LayerNorm (baseline torch.compile, Inductor's own kernel, which does not keep torch's bits) at "
            f"{len(below)} of {len(comp)} shapes, from {lo[1]:.2f}x at {lo[0]} to {hi[1]:.2f}x at {hi[0]}; under "
            "torch.compile the drop-in is an opaque operator that Inductor cannot fuse.")
    if eager:
        elo, ehi = min(eager, key=lambda c: c[1]), max(eager, key=lambda c: c[1])
        said += (f" Uncompiled, beside torch eager (baseline torch eager, same protocol), the drop-in is "
                 f"{elo[1]:.2f}x at {elo[0]} to {ehi[1]:.1f}x at {ehi[0]}, with torch's bits.")
    return said
