"""Notebook 10's forward + backward sweep: the shapes, the timed methods (torch eager, the drop-in as dispatched
and with each backward forced, both compiled), the sweep under both protocols, and its rows, paired ratios and
figure. Apart from labkit.studies.training (the verdict); the KernelBench, timeline, host and floor measurements
build their inputs (and the first two their methods) here."""
from __future__ import annotations

import time
from dataclasses import replace

from labkit.studies.bench import us as _us
from labkit.tasks import L1_40, shape_key


# (rows, N) from (1, 2**24) to (65536, 256), 64 MiB of float32 each, plus ordinary transformer shapes and L1/40.
SWEEP = tuple((1 << k, 1 << (24 - k)) for k in range(0, 17, 2))
ORDINARY = ((4096, 768), (8192, 1024), (8192, 4096), (16384, 4096), (32768, 2048), (2048, 16384), (1024, 16384))
WIDE = (L1_40, (4, 1 << 22), (1, 8, 1024, 1024))
QUICK = ((1, 1 << 20), (64, 1 << 14), (4096, 768), (16, 64, 32, 32))
METHODS = ("native", "dropin", "dropin_our_backward", "dropin_torch_backward", "native_compiled", "dropin_compiled")


def shapes(mode: str) -> list[tuple[int, ...]]:
    return list(dict.fromkeys([*WIDE, *ORDINARY, *SWEEP])) if mode == "full" else list(QUICK)


def _tensors(shape, seed: int, device):
    import torch

    from labkit.inputs import make_affine, make_input

    x = make_input("uniform", shape, seed, device)
    w, b = make_affine("random_normal", shape[1:], seed, device)
    g = torch.Generator(device=device).manual_seed(seed + 1)
    dy = torch.randn(shape, device=device, generator=g)
    return x, w, b, dy


def step(fn, x, w, b, dy, ns, eps):
    """One forward with grad on and torch.autograd.grad for x, weight and bias (what a training step asks of it)."""
    import torch

    xs = x.detach().requires_grad_()
    y = fn(xs, ns, w, b, eps)
    return torch.autograd.grad(y, (xs, w, b), dy)


def methods(x, w, b, dy, eps: float, compiled: bool = True) -> dict:
    """Zero-argument forward + backward callables: torch's eager F.layer_norm, the drop-in as dispatched, the
    drop-in with our backward and with torch's backward forced, and both under torch.compile (static shapes)."""
    import torch

    import labkit
    from labkit.ops.dropin.plan import forced_backward

    ns = tuple(w.shape)
    w, b = w.detach().requires_grad_(), b.detach().requires_grad_()

    def forced(path):
        def call():
            with forced_backward(path):
                return step(labkit.layer_norm, x, w, b, dy, ns, eps)
        return call

    m = {"native": lambda: step(torch.nn.functional.layer_norm, x, w, b, dy, ns, eps),
         "dropin": lambda: step(labkit.layer_norm, x, w, b, dy, ns, eps),
         "dropin_our_backward": forced("auto"), "dropin_torch_backward": forced("native")}
    if compiled:
        from labkit.studies.measure import compile_static

        cn, cd = compile_static(lambda xx, ns_, ww, bb, e: torch.nn.functional.layer_norm(xx, ns_, ww, bb, e),
                                lambda xx, ns_, ww, bb, e: labkit.layer_norm(xx, ns_, ww, bb, e), fullgraph=True)
        m["native_compiled"] = lambda: step(cn, x, w, b, dy, ns, eps)
        m["dropin_compiled"] = lambda: step(cd, x, w, b, dy, ns, eps)
    return m


def _as_dispatched(fns: dict, protocol: str) -> dict:
    """`fns` as a model timed under `protocol` calls them: under graph replay the eager drop-in ("dropin") plans by
    the tables' graph-replay scores, forward and backward (`labkit.dispatch_protocol("graph")`, what a model under
    CUDA graphs sets); the compiled drop-in and the forced-backward methods plan as by default, as do all eager
    calls."""
    if protocol != "graph" or "dropin" not in fns:
        return fns
    from labkit import dispatch_protocol

    def dropin(call=fns["dropin"]):
        with dispatch_protocol("graph"):
            return call()
    return {**fns, "dropin": dropin}


def sweep(shape_list, rounds: int = 15, seed: int = 0, eps: float = 1e-5, device="cuda", compiled: bool = True,
          log=None) -> dict:
    """Forward + backward medians per shape and method, eager per call with the L2 flushed (protocol B: host time
    counts) and under graph replay (protocol A); a method that fails is recorded with its error. The
    `training_sweep` record."""
    from labkit.ops.dropin.aten import refuse_while_enabled

    refuse_while_enabled("the training sweep")
    import torch

    from labkit.studies.bench import PROTOCOL_A, PROTOCOL_B, time_methods

    eager_p = replace(PROTOCOL_B, rounds=EAGER_ROUND_FACTOR * rounds, warmups=3)
    graph_p = replace(PROTOCOL_A, rounds=rounds, repeats=3)
    out = []
    for shape in shape_list:
        t0 = time.perf_counter()
        x, w, b, dy = _tensors(shape, seed, device)
        row = {"key": shape_key(shape), "shape": list(shape), "rows": x.numel() // w.numel(), "n": w.numel(),
               "l1_40": tuple(shape) == L1_40, "errors": {}}
        ok = {}
        for name, fn in methods(x, w, b, dy, eps, compiled).items():
            try:
                fn()
                torch.cuda.synchronize()
                ok[name] = fn
            except Exception as exc:  # a failing method is a row of the table, not a crash of the sweep
                row["errors"][name] = f"{type(exc).__name__}: {str(exc)[:300]}"
        for key, protocol in (("eager", eager_p), ("graph", graph_p)):
            try:
                rec = time_methods(_as_dispatched(ok, key), protocol, "native")
                row[key] = {k: v["median_ms"] for k, v in rec.stats.items()}
                row[f"{key}_stats"] = rec.stats
                row[f"{key}_samples"] = rec.samples_ms  # per round, every method once in shuffled order: paired ratios
            except Exception as exc:
                row[key] = {}
                row["errors"][key] = f"{type(exc).__name__}: {str(exc)[:300]}"
        row["seconds"] = time.perf_counter() - t0
        out.append(row)
        x = w = b = dy = None  # freed before the next shape is made
        torch.cuda.empty_cache()
        if log:
            log(f"{row['key']}: {row['seconds']:.1f} s")
    return {"protocols": {"eager": eager_p.__dict__, "graph": graph_p.__dict__}, "methods": list(METHODS),
            "shapes": out}


# Eager samples are single host-bound calls with heavy tails (at (4096, 768) torch's own quartiles were 212 and 345 us
# in run training-774171, 25 rounds; git history keeps it): three times the graph rounds there, and every ratio a
# median of per-round ratios (`paired`), which the drift shared by a round's methods does not move.
EAGER_ROUND_FACTOR = 3


def _per_round(row: dict, protocol: str, a: str, b: str, combine) -> float | None:
    """`combine(a's times, b's times)` for one sweep row under `protocol`: the median over rounds where the row kept
    its samples (each round times every method once), else (older records) `combine` of the medians."""
    import numpy as np

    s = row.get(f"{protocol}_samples") or {}
    x, y = s.get(a), s.get(b)
    if x and y and len(x) == len(y):
        return float(np.median(combine(np.asarray(x, dtype=float), np.asarray(y, dtype=float))))
    t = row.get(protocol) or {}
    return float(combine(t[a], t[b])) if t.get(a) and t.get(b) else None


def paired(row: dict, protocol: str, num: str, den: str) -> float | None:
    """`num`'s time / `den`'s, as a median of per-round ratios (`_per_round`)."""
    import numpy as np

    return _per_round(row, protocol, num, den, np.divide)


def paired_difference_ms(row: dict, protocol: str, a: str, b: str) -> float | None:
    """`a`'s time - `b`'s in ms, as a median of per-round differences (`_per_round`)."""
    import numpy as np

    return _per_round(row, protocol, a, b, np.subtract)


def speed_rows(sweep_record: dict | None) -> list[dict]:
    """Per shape: forward + backward medians (us) of torch eager, the drop-in, and both compiled, eager per call,
    L2 flushed (protocol B) and the drop-in under graph replay (protocol A); ratios native / drop-in per protocol,
    each the median of per-round ratios (`paired`)."""
    rows = []
    for r in (sweep_record or {}).get("shapes", []):
        e, g = r.get("eager") or {}, r.get("graph") or {}
        rows.append({"shape": r["key"], "torch eager us": _us(e.get("native")), "drop-in eager us":
                     _us(e.get("dropin")), "eager x torch": paired(r, "eager", "native", "dropin"),
                     "drop-in graph us": _us(g.get("dropin")),
                     "graph x torch (graph)": paired(r, "graph", "native", "dropin"),
                     "torch.compile eager us": _us(e.get("native_compiled")),
                     "compiled drop-in eager us": _us(e.get("dropin_compiled")),
                     "x torch.compile (eager)": paired(r, "eager", "native_compiled", "dropin")})
    return rows


def figure(sweep_record: dict | None, label: str = ""):
    """Forward + backward time against elements per row (labkit.studies.plots.time_vs_shape, as the front page
    draws it); a figure saying so when the record has no such timing."""
    import matplotlib.pyplot as plt

    from labkit.studies.plots import time_vs_shape

    fig = time_vs_shape([(label or "forward + backward", sweep_record, "eager")])
    if fig is None:
        fig, ax = plt.subplots(figsize=(8, 2))
        ax.text(0.5, 0.5, "no forward + backward timing in the record", ha="center", va="center")
        ax.set_axis_off()
    return fig


def others_win(sweep_record: dict | None) -> str:
    """The compiled drop-in against the uncompiled one (forward + backward, eager per call with the L2 flushed): the
    same kernels, so the difference is torch.compile's runtime on the host; and where torch.compile itself wins."""
    from labkit.studies.bench import PROTOCOL_NAMES

    rows = [r for r in speed_rows(sweep_record) if r.get("compiled drop-in eager us") and r.get("drop-in eager us")]
    if not rows:
        return "No compiled timing in this run: nothing to say about torch.compile."
    times = [(r["shape"], r["compiled drop-in eager us"] / r["drop-in eager us"]) for r in rows]
    lo, hi = min(times, key=lambda t: t[1]), max(times, key=lambda t: t[1])
    mid = sorted(t[1] for t in times)[len(times) // 2]
    l140 = next((t for t in times if t[0] == "16x64x256x256"), None)
    said = (f"Under {PROTOCOL_NAMES['B']}, forward + backward, the compiled drop-in takes "
            + (f"{l140[1]:.2f}x the uncompiled drop-in's time at L1/40 and " if l140 else "")
            + f"{mid:.2f}x at the median of {len(times)} shapes ({lo[1]:.2f}x at {lo[0]} to {hi[1]:.2f}x at {hi[0]}). "
            "It runs the same kernels (the drop-in is an opaque operator: Inductor fuses nothing around it and "
            "keeps its bits), so the difference is host time in torch.compile's runtime.")
    loses = [(r["shape"], r["x torch.compile (eager)"]) for r in rows
             if r.get("x torch.compile (eager)") is not None and r["x torch.compile (eager)"] < 1]
    wins = [(r["shape"], r["x torch.compile (eager)"]) for r in rows
            if r.get("x torch.compile (eager)") is not None and r["x torch.compile (eager)"] >= 1]
    if loses:
        said += (" torch.compile (Inductor's fused kernel, not torch's bits) beats the uncompiled drop-in "
                 f"(ratio torch.compile / drop-in, same protocol) at {len(loses)} of {len(loses) + len(wins)} shapes: "
                 + ", ".join(f"{s} {v:.2f}x" for s, v in loses) + ".")
    if wins:
        best = max(wins, key=lambda t: t[1])
        said += (f" The uncompiled drop-in beats torch.compile (ratio torch.compile / drop-in, same protocol) at "
                 f"{len(wins)} of {len(loses) + len(wins)} shapes, up to {best[1]:.2f}x at {best[0]}.")
    return said
