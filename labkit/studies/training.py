"""Training with the drop-in (notebook 10): forward + backward speed against torch eager and torch.compile, the
backward's floor, host cost per call, and a small transformer trained with and without the swap, bit for bit.
This module is the study as labkit.studies.catalog sees it: the run's records, its `training` summary block,
the training goals and the verdict, read from the records the measurement modules write (training_sweep,
training_kernelbench, training_timeline, training_host, training_models, training_backward)."""
from __future__ import annotations

from labkit.studies import training_reach
from labkit.studies.bench import us as _us
from labkit.studies.training_backward import floor_rows, fuzz_counts
from labkit.studies.training_host import host_entries
from labkit.studies.training_kernelbench import (INTERLEAVED_PROTOCOL, KB_PROTOCOL, judged_by_kernelbench,
                                                 kernelbench_figures)
from labkit.studies.training_sweep import ORDINARY, WIDE, paired, paired_difference_ms
from labkit.studies.training_timeline import timeline_text
from labkit.tasks import shape_key


# --- readers: records -> summary, goals, verdict ----------------------------------------------------------------------

RUN_NAME = "training"
NOTEBOOK = "10_training"
ORDINARY_KEYS = tuple(shape_key(s) for s in ORDINARY)
L1_40_FWDBWD_GOAL_MS = 0.70  # the training goal: L1/40 forward + backward, eager per call
NATIVE_FLOOR_MS = 0.200  # the goal: >= 1.0x eager native wherever native's forward+backward takes >= 200 us


def _count(cases, key) -> str:
    judged = [c[key] for c in cases if c.get(key) is not None]
    return f"{sum(bool(v) for v in judged)}/{len(judged)}"


def _sum_counts(*counts: str) -> str:
    k = sum(int(c.split("/")[0]) for c in counts if c)
    n = sum(int(c.split("/")[1]) for c in counts if c)
    return f"{k}/{n}"


def training_block(records: dict) -> dict | None:
    """The `training` block of `labkit summary RUN --json`, read from the run's records."""
    sweep = records.get("training_sweep")
    if not sweep:
        return None
    l1 = next((r for r in sweep["shapes"] if r.get("l1_40")), None) or {}
    worst = (None, None)
    for r in sweep["shapes"]:
        e = r.get("eager") or {}
        if e.get("native") and e.get("dropin") and e["native"] >= NATIVE_FLOOR_MS:
            ratio = paired(r, "eager", "native", "dropin")
            if worst[0] is None or ratio < worst[0]:
                worst = (ratio, r["key"])
    ordinary = [v for _, v in _ratio_rows(sweep, ISSUE_ORDINARY_KEYS, "graph", "native")]
    entries = host_entries(records.get("training_host"))
    host = entries[0] if entries else {}
    ours = next((e for e in entries[1:] if e.get("backward_ours")), None)
    model = records.get("training_model") or {}
    ident = (records.get("training_identity") or {}).get("cases", [])
    interleaved = {"l1_40_fwdbwd_ms": (l1.get("eager") or {}).get("dropin"),
                   "l1_40_compiled_fwdbwd_ms": (l1.get("eager") or {}).get("native_compiled"),
                   "l1_40_native_fwdbwd_ms": (l1.get("eager") or {}).get("native"),
                   "l1_40_vs_compiled": paired(l1, "eager", "native_compiled", "dropin") if l1 else None,
                   "l1_40_vs_native": paired(l1, "eager", "native", "dropin") if l1 else None}
    kb = kernelbench_figures(records.get("training_kernelbench"))
    if kb:  # protocol B as KernelBench times it: its means over all trials; the goals judge block by block
        m = kb["mean_ms"]
        headline = {"l1_40_protocol": KB_PROTOCOL, "l1_40_fwdbwd_ms": m["dropin"],
                    "l1_40_compiled_fwdbwd_ms": m["native_compiled"], "l1_40_native_fwdbwd_ms": m["native"],
                    "l1_40_vs_compiled": m["native_compiled"] / m["dropin"],
                    "l1_40_vs_native": m["native"] / m["dropin"],
                    "l1_40_slowest_block_ms": kb["dropin_slowest_block_ms"],
                    "l1_40_vs_compiled_worst_block": kb["vs_compiled_worst_block"],
                    "l1_40_vs_native_worst_block": kb["vs_native_worst_block"]}
    else:  # runs before the training_kernelbench record: the sweep's interleaved rounds
        headline = {"l1_40_protocol": INTERLEAVED_PROTOCOL, **interleaved}
    return {**headline,
            "l1_40_graph_fwdbwd_ms": (l1.get("graph") or {}).get("dropin"),
            **{k.replace("l1_40_", "l1_40_interleaved_"): v for k, v in interleaved.items()},
            "fwdbwd_worst_ratio_vs_native": worst[0], "fwdbwd_worst_shape": worst[1],
            "ordinary_fwdbwd_worst_vs_native_graph": min(ordinary) if ordinary else None,
            "backward_identical": _count(ident, "backward"),
            "model_steps_identical": _sum_counts(model.get("losses_identical"), model.get("grads_identical"),
                                                 model.get("weights_identical")) if model else "0/0",
            "fuzz": fuzz_counts(records.get("training_fuzz")),
            "host_us_fwd_grad": host.get("dropin_fwd_grad_us"), "torch_host_us_fwd_grad": host.get("torch_fwd_grad_us"),
            "host_us_bwd": host.get("dropin_bwd_us"), "torch_host_us_bwd": host.get("torch_bwd_us"),
            "torch_host_us_nograd": host.get("torch_nograd_us"), "host_us_nograd": host.get("dropin_nograd_us"),
            # where our kernels serve both directions (their own path's host cost), when the run measured it
            "host_ours": None if ours is None else {
                "shape": shape_key(ours["shape"]), "forward_path": ours["forward_path"],
                **{f"{who}_{k}_us": ours.get(f"{label}_{k}_us") for who, label in (("ours", "dropin"), ("torch", "torch"))
                   for k in ("fwd_grad", "bwd", "nograd")}}}


def summary(records: dict, prov: dict) -> dict:
    block = training_block(records)
    out = {"training": block} if block else {}
    reach = training_reach.block(records.get("training_reach"))
    if reach:
        out["reach"] = reach  # how people train: autocast, bf16/fp16, compiled
    return out


def _fmt(v, f=".3g"):
    return "n/a" if v is None else format(v, f)


def summary_lines(s: dict) -> list[str]:
    t = s.get("training")
    if not t:
        return []
    how = "KernelBench's timing" if judged_by_kernelbench(t) else "eager"
    return [f"training: L1/40 fwd+bwd {_fmt(t['l1_40_fwdbwd_ms'])} ms {how} (graph {_fmt(t['l1_40_graph_fwdbwd_ms'])}"
            f", torch.compile {_fmt(t['l1_40_compiled_fwdbwd_ms'])}, native {_fmt(t['l1_40_native_fwdbwd_ms'])}); "
            f"worst eager x native {_fmt(t['fwdbwd_worst_ratio_vs_native'], '.2f')} at {t['fwdbwd_worst_shape']}; "
            f"bits backward {t['backward_identical']}, model {t['model_steps_identical']}"]


def page_headline(records: dict, s: dict) -> str:
    from labkit.records.text import on_gpu, ratio
    from labkit.studies.goals import tally_text

    t = s.get("training")
    if not t or t.get("l1_40_fwdbwd_ms") is None:
        return f"training: no forward + backward timing in the record {on_gpu(s)}"
    from labkit.studies.bench import PROTOCOL_NAMES

    vs_comp = t.get("l1_40_vs_compiled")
    vs = f", {ratio(vs_comp)} torch.compile" if vs_comp else ""
    how = "KernelBench's timing (mean)" if judged_by_kernelbench(t) else PROTOCOL_NAMES["B"]
    return (f"L1/40 forward + backward under {how}: {t['l1_40_fwdbwd_ms']:.3g} ms{vs}; backward bits "
            f"{t['backward_identical']}, model steps {t['model_steps_identical']} identical"
            f"{tally_text(goals(records))} {on_gpu(s)}")



COMPILE_RATIO_GOAL, NATIVE_RATIO_GOAL, ORDINARY_GRAPH_GOAL, FLOOR_GOAL = 1.2, 22, 1.3, 1.15  # the training goals
WIDE_COMPILE_GOAL = 1.0  # (4, 4194304) and (1, 8, 1024, 1024) against torch.compile, eager per call
BELOW_FLOOR_SLOWER_US = 10  # where native takes < NATIVE_FLOOR_MS: no more than this much slower than native
ISSUE_ORDINARY_KEYS = ORDINARY_KEYS[:6]  # the six the training goals name; (1024, 16384) is also in its sweep


def _ratio_rows(sweep: dict | None, keys, protocol: str, baseline: str) -> list[tuple[str, float]]:
    """(shape, baseline time / the drop-in's: `paired`) under `protocol` for the sweep's shapes in `keys`, in their
    order."""
    by_key = {r["key"]: r for r in (sweep or {}).get("shapes", [])}
    out = []
    for k in keys:
        v = paired(by_key[k], protocol, baseline, "dropin") if k in by_key else None
        if v is not None:
            out.append((k, v))
    return out


def _sweep_goals(sweep: dict | None) -> list[dict]:
    """The goals judged shape by shape: the two other wide shapes against torch.compile, every ordinary shape
    against native (naming each that falls short), and the sweep's shapes where native takes under 200 us."""
    from labkit.studies.bench import PROTOCOL_NAMES
    from labkit.studies.goals import goal, listed

    if not sweep:
        return []
    eager, graph = PROTOCOL_NAMES["B"], PROTOCOL_NAMES["A"]
    wide = _ratio_rows(sweep, [shape_key(s) for s in WIDE[1:]], "eager", "native_compiled")
    ordinary = _ratio_rows(sweep, ISSUE_ORDINARY_KEYS, "graph", "native")
    short = [(k, v) for k, v in ordinary if v < ORDINARY_GRAPH_GOAL]
    below = [(r["key"], paired_difference_ms(r, "eager", "dropin", "native") * 1e3) for r in sweep["shapes"]
             if (r.get("eager") or {}).get("native") and r["eager"].get("dropin")
             and r["eager"]["native"] < NATIVE_FLOOR_MS]
    worst_below = max(below, key=lambda kv: kv[1], default=None)
    return [goal("few wide rows vs torch.compile", listed(wide, limit=WIDE_COMPILE_GOAL),
                 f">= {WIDE_COMPILE_GOAL}x each",
                 (all(v >= WIDE_COMPILE_GOAL for _, v in wide) if wide else None), eager,
                 "wide rows x torch.compile"),
            goal("ordinary shapes, each x native",
                 f"{listed(ordinary, limit=ORDINARY_GRAPH_GOAL)}; short of {ORDINARY_GRAPH_GOAL}x: "
                 f"{listed(short, limit=ORDINARY_GRAPH_GOAL)}", f">= {ORDINARY_GRAPH_GOAL}x each",
                 (not short) if ordinary else None, graph, "ordinary shapes x torch eager",
                 f"short: {listed(short, limit=ORDINARY_GRAPH_GOAL)}"),
            goal(f"where native takes < {NATIVE_FLOOR_MS * 1e3:.0f} us",
                 "no such shape in the sweep" if worst_below is None else
                 f"{len(below)} shapes, at most {worst_below[1]:+.1f} us against native ({worst_below[0]})",
                 f"no more than {BELOW_FLOOR_SLOWER_US} us slower",
                 None if worst_below is None else worst_below[1] <= BELOW_FLOOR_SLOWER_US, eager,
                 f"slower than torch eager below {NATIVE_FLOOR_MS * 1e3:.0f} us")]


def _would(value: float | None, limit: float, at_least: bool) -> str:
    """' (would meet)' / ' (would miss)': the goal judged on a figure shown beside the one that judges it."""
    if value is None:
        return ""
    return " (would meet)" if (value >= limit if at_least else value <= limit) else " (would miss)"


def _l1_40_goals(t: dict, records: dict) -> list[dict]:
    """The three L1/40 training goals. Under KernelBench's timing (a run with `training_kernelbench`) each is judged in
    every block, as notebook 07 judges the forward's (the slowest block's mean, the worst block's ratio), with the
    mean over all trials and the sweep's interleaved rounds beside it; older runs: the interleaved rounds."""
    from labkit.studies.bench import PROTOCOL_NAMES
    from labkit.studies.goals import beside, goal

    graph = PROTOCOL_NAMES["A"]
    kb = judged_by_kernelbench(t)
    l1 = t["l1_40_slowest_block_ms"] if kb else t["l1_40_fwdbwd_ms"]
    vs_comp = t["l1_40_vs_compiled_worst_block"] if kb else t["l1_40_vs_compiled"]
    vs_nat = t["l1_40_vs_native_worst_block"] if kb else t["l1_40_vs_native"]
    why = timeline_text(records.get("training_b_timeline"))
    protocol = PROTOCOL_NAMES["B"]  # KernelBench's cuda_event method is protocol B, exactly; the rounds its older form
    if kb:
        il = t["l1_40_interleaved_fwdbwd_ms"]
        beside_time = (f"; mean of all trials {_fmt(t['l1_40_fwdbwd_ms'])} ms; in the sweep's interleaved eager "
                       f"rounds, where the host's entry counts, {_fmt(il)} ms{_would(il, L1_40_FWDBWD_GOAL_MS, False)}"
                       + (f"; {why}" if why else ""))
        kbt = "KernelBench's cuda_event timing (its L2 thrash runs while the host enters the call)"
        what, per = f"{kbt}, slowest block", f"{kbt}, worst block"
        ic, inat = t["l1_40_interleaved_vs_compiled"], t["l1_40_interleaved_vs_native"]
        beside_comp = (f"; all trials {_fmt(t['l1_40_vs_compiled'], '.3g')}x (torch.compile "
                       f"{_fmt(t['l1_40_compiled_fwdbwd_ms'])} ms); interleaved rounds "
                       f"{beside(ic, COMPILE_RATIO_GOAL)}{_would(ic, COMPILE_RATIO_GOAL, True)}")
        beside_nat = (f"; all trials {_fmt(t['l1_40_vs_native'], '.3g')}x (torch eager "
                      f"{_fmt(t['l1_40_native_fwdbwd_ms'])} ms); interleaved rounds "
                      f"{beside(inat, NATIVE_RATIO_GOAL)}{_would(inat, NATIVE_RATIO_GOAL, True)}")
    else:
        beside_time = f"; {why}" if why else ""
        what, per = "median", "per round"
        beside_comp = f"; torch.compile {_fmt(t['l1_40_compiled_fwdbwd_ms'])} ms (median)"
        beside_nat = f"; torch eager {_fmt(t['l1_40_native_fwdbwd_ms'])} ms (median)"
    return [goal("L1/40 forward + backward", f"{what} {beside(l1, L1_40_FWDBWD_GOAL_MS, 'ms')} ({graph}: "
                 f"{_fmt(t['l1_40_graph_fwdbwd_ms'])} ms{beside_time})", f"<= {L1_40_FWDBWD_GOAL_MS} ms",
                 None if l1 is None else l1 <= L1_40_FWDBWD_GOAL_MS, protocol, "L1/40 forward + backward",
                 f"{what} {beside(l1, L1_40_FWDBWD_GOAL_MS, 'ms')}"),
            goal("L1/40 vs torch.compile", f"{per} {beside(vs_comp, COMPILE_RATIO_GOAL)}{beside_comp}",
                 f">= {COMPILE_RATIO_GOAL}x", None if vs_comp is None else vs_comp >= COMPILE_RATIO_GOAL, protocol,
                 "L1/40 x torch.compile"),
            goal("L1/40 vs eager native", f"{per} {beside(vs_nat, NATIVE_RATIO_GOAL)}{beside_nat}",
                 f">= {NATIVE_RATIO_GOAL}x", None if vs_nat is None else vs_nat >= NATIVE_RATIO_GOAL, protocol,
                 "L1/40 x torch eager", f"{per} {beside(vs_nat, NATIVE_RATIO_GOAL)}")]


def _host_bound_text(records: dict, t: dict) -> str:
    """Why the worst eager ratio is what it is, where the shape is host-bound: both methods' GPU time under graph
    replay far below their eager time, and the eager quartiles of the two."""
    row = next((r for r in (records.get("training_sweep") or {}).get("shapes", [])
                if r["key"] == t.get("fwdbwd_worst_shape")), None)
    if not row or not row.get("graph") or not row.get("eager_stats"):
        return ""
    g, e = row["graph"], row["eager_stats"]
    if not all(k in g and k in e for k in ("native", "dropin")) or \
            max(g["native"], g["dropin"]) * 2 > min(e["native"]["median_ms"], e["dropin"]["median_ms"]):
        return ""  # not host-bound: a GPU time within half of an eager time
    q = {k: f"{_us(e[k]['q25_ms']):.0f}-{_us(e[k]['q75_ms']):.0f}" for k in ("native", "dropin")}
    return (f" (host-bound: under graph replay the drop-in takes {_us(g['dropin']):.0f} us against native's "
            f"{_us(g['native']):.0f}; eager per call the quartiles are {q['dropin']} and {q['native']} us)")


def goals(records: dict) -> list[dict]:
    """The training goals judged on a `training` run (labkit.studies.goals): L1/40's forward + backward time and its
    ratios to torch.compile and torch eager, the worst ratios over shapes, the host cost per call, the fuzz, and
    the backward's floors. [] without a `training_sweep` record."""
    from labkit.studies.bench import PROTOCOL_NAMES
    from labkit.studies.goals import HOST, beside, goal, listed

    t = training_block(records)
    if not t:
        return []
    eager, graph = PROTOCOL_NAMES["B"], PROTOCOL_NAMES["A"]
    worst = t["fwdbwd_worst_ratio_vs_native"]
    fz = t["fuzz"]
    out = [*_l1_40_goals(t, records),
           goal(f"worst x native where native >= {NATIVE_FLOOR_MS * 1e3:.0f} us",
                f"{beside(worst, 1.0)} at {t['fwdbwd_worst_shape']}{_host_bound_text(records, t)}", ">= 1.0x",
                None if worst is None else worst >= 1,
                eager, f"worst x torch eager where torch takes >= {NATIVE_FLOOR_MS * 1e3:.0f} us"),
           goal("host at a tiny shape (torch's kernels, handed off)",
                f"forward with grad {_fmt(t['host_us_fwd_grad'])} us vs torch {_fmt(t['torch_host_us_fwd_grad'])}; "
                f"backward {_fmt(t['host_us_bwd'])} vs {_fmt(t['torch_host_us_bwd'])}", "within 10 us each",
                _within(t, "fwd_grad", 10) and _within(t, "bwd", 10), HOST, "at a tiny shape, with grad"),
           goal("no grad at the tiny shape (torch's kernel serves)",
                f"{_fmt(t.get('host_us_nograd'))} us vs torch {_fmt(t.get('torch_host_us_nograd'))}", "within 3 us",
                _within(t, "nograd", 3), HOST, "at a tiny shape, no grad"),
           _host_ours_goal(t),
           goal("bits and fuzz", f"backward {t['backward_identical']}; model steps (losses, gradients, weights) "
                f"{t['model_steps_identical']}; fuzz {fz['cases']} cases, {fz['checks']} schedule checks, "
                f"{fz['mismatches']} mismatch(es)", ">= 2,000 cases, 0 mismatches",
                fz["cases"] >= 2000 and fz["mismatches"] == 0, None, "fuzz: 2,000 cases, no mismatch")]
    out[4:4] = _sweep_goals(records.get("training_sweep"))  # after the worst-ratio goal, before the host's
    rows = floor_rows(records.get("training_floor"))
    floors = [(f"{r['shape']} ({r['schedule']})", r["ours / floor"]) for r in rows]
    if floors:  # one goal over the measured shapes, naming each over its floor's slack
        over = [(r["shape"], r["ours / floor"]) for r in rows if r["ours / floor"] > FLOOR_GOAL]
        complete = [(r["shape"], r["ours / complete floor"]) for r in rows if "ours / complete floor" in r]
        why = (f"; against every byte it must move (gamma read, dgamma and dbeta written too): {listed(complete)}"
               if complete else "")
        out.append(goal("backward within its floor", f"{listed(floors, limit=FLOOR_GOAL)} its floor{why}",
                        f"<= {FLOOR_GOAL}x each",
                        not over, graph, "backward / floor", f"over: {listed(over, limit=FLOOR_GOAL)}"))
    return out


def verdict_lines(records: dict, source: str) -> list[str]:
    from labkit.studies.goals import goal_line

    if not training_block(records):
        return [f"training: no GPU measurement to judge ({source})."]
    reach = records.get("training_reach")
    return [f"training ({source}):", *map(goal_line, goals(records)), *_runner_lines(records.get("training_host")),
            *(training_reach.verdict_lines(reach, source) if reach else [])]


GPU_BOUND_FACTOR = 1.5  # torch's no-grad call this much slower than at the tiny shape: the GPU is in the time


def _host_ours_goal(t: dict) -> dict:
    """The host cost where our kernels serve both directions, judged only where it is a host-only measure."""
    from labkit.studies.goals import HOST, goal

    o = t.get("host_ours")
    what = "host where our kernels serve both ways"
    if not o:
        return goal(what, "not measured in this run", "within 10 us each", None, HOST,
                    "where our kernels serve both ways")
    times = (f"forward with grad {_fmt(o['ours_fwd_grad_us'])} us vs torch {_fmt(o['torch_fwd_grad_us'])}; backward "
             f"{_fmt(o['ours_bwd_us'])} vs {_fmt(o['torch_bwd_us'])}; no grad {_fmt(o['ours_nograd_us'])} vs "
             f"{_fmt(o['torch_nograd_us'])}")
    tiny = t.get("torch_host_us_nograd")
    where = f"{what} ({o['shape']}, forward {o['forward_path']})"
    if tiny and o["torch_nograd_us"] > GPU_BOUND_FACTOR * tiny:
        return goal(where, f"{times}; not a host-only measure (torch's own no-grad call takes "
                    f"{_fmt(o['torch_nograd_us'])} us here against {_fmt(tiny)} at the tiny shape, so GPU time is in "
                    f"it)", "within 10 us each", None, HOST, "where our kernels serve both ways")
    over = [f"{label} {_fmt(o[f'ours_{k}_us'])} us vs {_fmt(o[f'torch_{k}_us'])}"
            for k, label in (("fwd_grad", "forward with grad"), ("bwd", "backward"))
            if o[f"ours_{k}_us"] > o[f"torch_{k}_us"] + 10]
    return goal(where, times, "within 10 us each", not over, HOST, "where our kernels serve both ways",
                "; ".join(over))


def _runner_lines(host: dict | None) -> list[str]:
    ext = (host or {}).get("host_extension")
    if not ext:
        return []
    if ext["serves"]:
        return ["  our kernels launched from C++ (the host extension and its autograd node, "
                f"host/ sources {ext['source_hash']})"]
    return [f"  our kernels launched from Python: the host extension {ext['why_not']}"]


def _within(t: dict, what: str, us: float) -> bool:
    a, b = t.get(f"host_us_{what}"), t.get(f"torch_host_us_{what}")
    return a is not None and b is not None and a <= b + us


RECORDS = ("training_sweep", "training_kernelbench", "training_b_timeline", "training_host", "training_model",
           "training_wide", "training_floor", "training_identity", "training_fuzz", "training_reach")


def collect(session) -> dict:
    return {name: session.record(name) for name in RECORDS}


def plain_verdict(records: dict) -> list[str]:
    """The page's short verdict: a few plain sentences from the records and the goals (labkit.studies.goals), each
    ratio with its protocol and its baseline."""
    from labkit.records.text import ratio
    from labkit.studies.bench import PROTOCOL_NAMES
    from labkit.studies.goals import tally

    t = training_block(records)
    if not t:
        return ["No GPU training measurement to judge."]
    judged = goals(records)
    count = tally(judged)
    fz = t["fuzz"]
    bits = fz["cases"] >= 2000 and fz["mismatches"] == 0
    out = [(f"The drop-in's backward keeps torch's eager bits ({fz['cases']:,} fuzzed inputs, {fz['mismatches']} "
            f"mismatches), and it" if bits else "The drop-in") + f" meets {count['met']} of its {count['judged']} "
           "training goals in this run."]
    eager, graph = PROTOCOL_NAMES["B"], PROTOCOL_NAMES["A"]
    if t.get("l1_40_slowest_block_ms") is not None:
        out.append(f"Forward plus backward at L1/40 takes {t['l1_40_slowest_block_ms']:.3g} ms timed as KernelBench "
                   f"does, {eager}: {ratio(t['l1_40_vs_compiled_worst_block'])} faster than torch.compile and "
                   f"{ratio(t['l1_40_vs_native_worst_block'])} faster than torch eager, in its slowest block.")
    elif t.get("l1_40_fwdbwd_ms") is not None and t.get("l1_40_vs_compiled") is not None:
        out.append(f"Forward plus backward at L1/40 takes {t['l1_40_fwdbwd_ms']:.3g} ms, {eager}: "
                   f"{ratio(t['l1_40_vs_compiled'])} faster than torch.compile (paired median).")
    missed = [g for g in judged if g["met"] is False]
    if missed:
        out.append(f"It misses {len(missed)} of the {count['judged']} goals.")
    # the worst shape against torch eager first: the one a reader of the page asks about
    for g in sorted(missed, key=lambda g: not g["goal"].startswith("worst x native")):
        if g["goal"].startswith("worst x native") and t.get("fwdbwd_worst_ratio_vs_native") is not None:
            row = next((r for r in (records.get("training_sweep") or {}).get("shapes", [])
                        if r["key"] == t["fwdbwd_worst_shape"]), {})
            gr = row.get("graph") or {}
            why = (f"; the host's time per call decides there: under {graph} the drop-in takes "
                   f"{_us(gr['dropin']):.0f} us against torch eager's {_us(gr['native']):.0f} us"
                   if _host_bound_text(records, t) and "dropin" in gr and "native" in gr else "")
            out.append(f"At {t['fwdbwd_worst_shape']} forward plus backward runs at "
                       f"{ratio(t['fwdbwd_worst_ratio_vs_native'])} torch eager's speed under {eager}, short of the goal of "
                       f"1.0x wherever torch takes {NATIVE_FLOOR_MS * 1e3:.0f} us or more{why}.")
        elif g["goal"] == "backward within its floor":
            rows = floor_rows(records.get("training_floor"))
            over = [r for r in rows if r["ours / floor"] > FLOOR_GOAL]
            worst = max(over, key=lambda r: r["ours / floor"])
            out.append(f"Under {graph} the backward takes more than {FLOOR_GOAL}x the time its bytes need (its floor) "
                       f"at {len(over)} of {len(rows)} large shapes, at worst {ratio(worst['ours / floor'])} at "
                       f"{worst['shape']}.")
        else:
            out.append(f"{g['goal'][:1].upper()}{g['goal'][1:]}, {g['protocol'] or 'bits'}: {g['short']} "
                       f"(goal {g['target']}).")
    reach = training_reach.plain_sentence(records.get("training_reach"))
    return out[:4] + [reach] if reach else out[:5]  # how people train: its answer in one sentence
