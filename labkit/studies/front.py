"""The front page's content, read from committed (or this build's) runs: what the post asked, what the book found, one
headline table and one figure. Every number is a run's; the protocols are named once here (PROTOCOLS) and beside
every ratio. The site renders it (labkit.site.write_index); nothing here knows about HTML.

The runs it reads, by name: parallel_stats (notebook 07: the chain kernel at L1/40 under graph replay, with its
bit-identity matrix), bit_identity (01: the reference-order kernel's matrix), dropin (08: the drop-in's forward over
2**24 elements in every row shape, eager per call and graph replay), training (10: forward + backward the same way).
The goals statement counts every goal those runs judge (each study's `goals`, the list its verdict prints).
"""
from __future__ import annotations

from pathlib import Path

from labkit.records.post import about as post_about
from labkit.records.run import load_run, short_id
from labkit.records.text import speed
from labkit.studies import (bit_identity, dropin, kernelbench_timing, parallel_stats, training, training_kernelbench,
                            training_sweep)
from labkit.studies.bench import PROTOCOL_DEFINITIONS, PROTOCOL_NAMES
from labkit.studies.catalog import summarize_run
from labkit.studies.goals import HOST, tally
from labkit.studies.plots import time_vs_shape
from labkit.tasks import L1_40, shape_key

L1_KEY = shape_key(L1_40)
RUNS = (parallel_stats.RUN_NAME, bit_identity.RUN_NAME, dropin.RUN_NAME, training.RUN_NAME, kernelbench_timing.RUN_NAME)
GRAPH, EAGER = PROTOCOL_NAMES["A"], PROTOCOL_NAMES["B"]
# the studies whose runs' goals the front page counts, in reading order: (study, notebook, what it judges)
GOAL_RUNS = ((parallel_stats, "07", "the chain kernel at L1/40 and the post's shapes"),
             (kernelbench_timing, "07", "L1/40, KernelBench's timing and graph replay"),
             (dropin, "08", "the drop-in's forward"), (training, "10", "the drop-in's forward + backward"))

# One set of names for the whole book: the two protocols (labkit.studies.bench), then the words the tables use.
PROTOCOLS = {PROTOCOL_NAMES[k]: PROTOCOL_DEFINITIONS[k] for k in ("A", "B")}
_PROTOCOL_LETTERS = {name: f"protocol {k}" for k, name in PROTOCOL_NAMES.items()}  # goal lines name them so
GLOSSARY = {
    "L1/40": "KernelBench level 1, task 40: LayerNorm of a (16, 64, 256, 256) float32 tensor over its last three "
             "dims, 16 rows of 4,194,304 values",
    "bit-identical": "output, mean and rstd (and gradients) equal to torch's as int32 bit patterns, not within a "
                     "tolerance",
    "native, torch eager": "torch's own kernel, F.layer_norm as shipped; 'x native' and 'x torch eager' are its "
                           "time / ours",
    "reference-order (reference_order)": "a kernel doing torch's arithmetic in torch's order (the post's design): "
                                         "same bits, output pass spread over many blocks",
    "chain": "this book's kernel: each row's 128 per-thread Welford chains spread over the whole GPU, merged in "
             "torch's tree: torch's bits",
    "rows_fused": "the reference-order path for many short rows: torch's arithmetic with x kept in registers, "
                  "in torch's block per row or, for rows of at most 1,024 floats, a warp per row standing in for "
                  "torch's four warps (kernels/rows_fused.cu)",
    "drop-in": "labkit.layer_norm / labkit.LayerNorm: F.layer_norm's signature; our kernels where measured "
               "faster, torch's elsewhere",
    "torch.compile, Inductor": "torch.compile(F.layer_norm): Inductor, its code generator, writes its own kernel "
                               "('inductor' in tables); not torch's bits",
    "split_interleaved": "the fast-statistics prototype: torch.var_mean, then kernels/split_affine.cu, rows "
                         "fastest; not torch's answer",
    "official check": "KernelBench's torch.allclose(reference, candidate, atol=1e-4, rtol=1e-4)",
    "KernelBench's timing": "its evaluator's own cuda_event method: protocol B, exactly (notebook 07)",
}


def runs_by_name(paths: dict[str, Path] | None = None) -> dict[str, Path]:
    """The run each front-page source is read from: the build's own where it wrote or replayed one (`paths`),
    else the newest complete committed run of that name; absent names are left out. KernelBench's timing at L1/40
    is read from the newest committed run holding it (kernelbench_timing.newest_run), notebook 08's included: the
    one notebook 07 judges its goals on."""
    from labkit.records.session import newest_complete_run

    out = {}
    for name in RUNS:
        if name == kernelbench_timing.RUN_NAME:  # recorded by its own script and by notebook 08: the newest
            # committed run holding it, the one notebook 07 shows and judges (a build's own run is not committed yet)
            if (path := kernelbench_timing.newest_run()) is not None:
                out[name] = path
        elif paths and name in paths:
            out[name] = Path(paths[name])
        elif (run := newest_complete_run(name)) is not None:
            out[name] = Path(run["path"])
    return out


def run_ids(runs: dict[str, Path]) -> list[tuple[str, str]]:
    """(id, short id: labkit.records.run.short_id) of the runs the front page reads (its table, goals, figure and
    note), sorted by id."""
    # a set: one run can be the source of two names (notebook 08's also holds KernelBench's timing)
    return sorted({(meta["run_id"], short_id(meta)) for meta in (_records(p)["run"] for p in runs.values())})


def _records(path: Path | None) -> dict:
    return load_run(path)["records"] if path else {}


def _ratio(a, b):
    return a / b if a and b else None


def _shape(key: str, l1_40: bool) -> str:
    return f"{key} (L1/40)" if l1_40 else key


def _reference_bits(runs: dict[str, Path], cases: list[dict]) -> str | None:
    """The reference-order kernel's bit identity as k/n: notebook 01's matrix at L1/40 where its run is there, else
    the timing run's own checks at L1/40 (`cases`: one checked call per timed case)."""
    if p := runs.get(bit_identity.RUN_NAME):
        recs = _records(p)
        if block := bit_identity.identity_block(recs, {}):
            return f"{block['identical']}/{block['cases']} cases (notebook 01)"
    checks = [(c["methods"].get("reference_order") or {}).get("check") or {} for c in cases]
    judged = [c.get("bit_equal_fraction") == 1.0 for c in checks if c]
    return f"{sum(judged)}/{len(judged)} timed cases" if judged else None


FWDBWD = "drop-in (our backward kernels)"
FWDBWD_KB = "drop-in, KernelBench's timing"


def headline_rows(runs: dict[str, Path]) -> list[dict]:
    """One row per headline result at L1/40: what, shape, protocol, our ms, x torch eager and x torch.compile (each
    ratio from one run), bit identity as k/n from the records, and the goal the study set with met/missed."""
    rows = []
    if p := runs.get(parallel_stats.RUN_NAME):
        s = summarize_run(p)
        cases = [c for c in _records(p).get("timing", {}).get("cases", []) if c["key"].startswith(f"{L1_KEY}/")]
        # the case notebook 07's verdict reads (default affine first), its ratios paired within the run
        case = next((c for c in cases if c["key"].endswith("/default")), cases[0] if cases else None)
        med = {m: _med(case, "A", m) for m in ("chain", "native", "inductor", "reference_order")}
        bits = s.get("bit_identity") or {}
        shape = _shape(L1_KEY, True)
        if med.get("chain"):
            rows.append({"result": "forward: chain kernel (the drop-in's path), notebook 07", "shape": shape,
                         "protocol": GRAPH,
                         "ms": med["chain"], "x torch eager": _paired(case, "A", "native", "chain"),
                         "x torch.compile": _paired(case, "A", "inductor", "chain"),
                         "bit-identical": f"{bits.get('identical')}/{bits.get('cases')} cases" if bits else None,
                         "goal": f"<= {parallel_stats.L1_40_GOAL_MS} ms",
                         "met": med["chain"] <= parallel_stats.L1_40_GOAL_MS, "run": s["run_id"]})
        if med.get("reference_order"):
            rows.append({"result": "forward: reference-order kernel (the post's design)", "shape": shape,
                         "protocol": GRAPH, "ms": med["reference_order"],
                         "x torch eager": _paired(case, "A", "native", "reference_order"),
                         "x torch.compile": _paired(case, "A", "inductor", "reference_order"),
                         "bit-identical": _reference_bits(runs, cases),
                         "goal": None, "met": None, "run": s["run_id"]})
    if p := runs.get(dropin.RUN_NAME):
        recs = _records(p)
        block = dropin.dropin_block(recs) or {}
        row = next((r for r in (recs.get("dropin_sweep") or {}).get("shapes", []) if r.get("l1_40")), None)
        if row and (row.get("eager") or {}).get("dropin"):
            e, c = row["eager"], row.get("compiled") or {}
            ratio = _ratio(e.get("native"), e["dropin"])
            rows.append({"result": "forward: drop-in labkit.layer_norm", "shape": _shape(row["key"], True),
                         "protocol": EAGER, "ms": e["dropin"], "x torch eager": ratio,
                         "x torch.compile": _ratio(c.get("native_compiled"), e["dropin"]),
                         "bit-identical": f"{block.get('forward_identical')} inputs",
                         "goal": f">= {dropin.L1_40_EAGER_RATIO_GOAL}x torch eager",
                         "met": ratio is not None and ratio >= dropin.L1_40_EAGER_RATIO_GOAL,
                         "run": recs["run"]["run_id"]})
    if p := runs.get(training.RUN_NAME):
        recs = _records(p)
        t = training.training_block(recs) or {}
        row = next((r for r in (recs.get("training_sweep") or {}).get("shapes", []) if r.get("l1_40")), None)
        bits = f"{t.get('backward_identical')} inputs; model steps {t.get('model_steps_identical')}"
        # the run judges L1/40 under KernelBench's timing (notebook 10)
        kb = training_kernelbench.judged_by_kernelbench(t)
        if kb and row:  # the sweep's interleaved eager figure goes beside it in the summary sentence
            il = t.get("l1_40_interleaved_fwdbwd_ms")
            rows.append({"result": f"forward + backward: {FWDBWD_KB}", "shape": _shape(row["key"], True),
                         "protocol": EAGER, "ms": t["l1_40_fwdbwd_ms"], "x torch eager": t["l1_40_vs_native"],
                         "x torch.compile": t["l1_40_vs_compiled"], "bit-identical": bits,
                         "goal": f"<= {training.L1_40_FWDBWD_GOAL_MS} ms", "interleaved ms": il,
                         "met": t["l1_40_slowest_block_ms"] <= training.L1_40_FWDBWD_GOAL_MS,
                         "run": recs["run"]["run_id"]})
        for proto, key in (((GRAPH, "graph"),) if kb else ((EAGER, "eager"), (GRAPH, "graph"))):
            d = (row or {}).get(key) or {}
            if not d.get("dropin"):
                continue
            goal = proto == EAGER
            rows.append({"result": f"forward + backward: {FWDBWD}",
                         "shape": _shape(row["key"], True), "protocol": proto,
                         "ms": d["dropin"], "x torch eager": training_sweep.paired(row, key, "native", "dropin"),
                         "x torch.compile": training_sweep.paired(row, key, "native_compiled", "dropin"),
                         "bit-identical": bits,
                         "goal": f"<= {training.L1_40_FWDBWD_GOAL_MS} ms" if goal else None,
                         "met": d["dropin"] <= training.L1_40_FWDBWD_GOAL_MS if goal else None,
                         "run": recs["run"]["run_id"]})
    return rows


def _meta(path: Path | None) -> dict:
    if not path:
        return {}
    prov = _records(path)["run"]["provenance"]
    return {"gpu": prov.get("gpu"), "torch": prov.get("torch")}


def goals_by_notebook(runs: dict[str, Path]) -> list[dict]:
    """Per run that judges goals (GOAL_RUNS): its notebook, what it judges, the tally (labkit.studies.goals.tally)
    and the goals it missed, grouped by protocol, each as the front page says it."""
    out = []
    for study, notebook, what in GOAL_RUNS:
        if (p := runs.get(study.RUN_NAME)) is None:
            continue
        judged = study.goals(_records(p))
        if not judged:
            continue
        missed: dict[str, list[tuple[str, str]]] = {}  # per protocol: (the goal's name, with its figure and target)
        for g in judged:
            if g["met"] is False:
                missed.setdefault(g["protocol"] or "other", []).append(
                    (g["brief"], f"{g['brief']} {g['short']} (goal {g['target']})"))
        protocols = list(dict.fromkeys(g["protocol"] for g in judged if g["protocol"]))
        out.append({"notebook": notebook, "what": what, **tally(judged), "missed_by_protocol": missed,
                    "protocols": protocols, "run": _records(p)["run"]["run_id"], "study": study.RUN_NAME})
    return out


def goals_sentence(goals: list[dict]) -> str:
    """The total over goals_by_notebook: the first line of the front page's goals statement."""
    met, judged = sum(g["met"] for g in goals), sum(g["judged"] for g in goals)
    unjudged = sum(g["not judged"] for g in goals)
    return (f"Goals, as the runs' own verdicts judge them: {met} of {judged} met, {judged - met} missed"
            + (f" ({unjudged} more not judged)" if unjudged else "") + ".")


def goal_lines(goals: list[dict], figures: bool = True) -> list[str]:
    """One line per notebook of goals_by_notebook: its count, then each missed goal under its protocol, with its
    figure and target (`figures`) or by name only (the front page's short list)."""
    lines = []
    for g in goals:
        line = f"{g['notebook']}, {g['what']}: {g['met']} of {g['judged']} met"
        if not g["missed_by_protocol"] and g["protocols"]:
            line += f" ({', '.join(g['protocols'])})"
        for protocol, goals_missed in g["missed_by_protocol"].items():
            missed = [full if figures else brief for brief, full in goals_missed]
            # a timing protocol by its letter: the glossary beside the list spells each out
            short = _PROTOCOL_LETTERS.get(protocol, protocol)
            where = "" if protocol == "other" else f" in {protocol}" if protocol == HOST else f" under {short}"
            line += f"; missed{where}: " + "; ".join(missed)
        lines.append(line + (f"; {g['not judged']} not judged" if g["not judged"] else "") + ".")
    return lines


def figure(runs: dict[str, Path]):
    """Time against row shape at 2**24 elements (rows = 2**24 / N), log axes: the forward (notebook 08's sweep)
    and forward + backward (notebook 10's), for torch eager, the drop-in eager per call and under graph replay,
    and torch.compile (eager per call, where timed). None without either sweep."""
    panels = []
    if p := runs.get(dropin.RUN_NAME):
        panels.append(("forward", _records(p).get("dropin_sweep"), "compiled"))
    if p := runs.get(training.RUN_NAME):
        panels.append(("forward + backward", _records(p).get("training_sweep"), "eager"))
    return time_vs_shape(panels)


def _slowest_compile(title: str, sweep: dict | None, key: str) -> dict | None:
    """The figure's torch.compile point furthest above torch eager in one panel, with its spread from the record."""
    worst = None
    for r in (sweep or {}).get("shapes", []):
        if r.get("rows", 0) * r.get("n", 0) != 1 << 24:
            continue
        ms, native = (r.get(key) or {}).get("native_compiled"), (r.get("eager") or {}).get("native")
        if ms and native and (worst is None or ms / native > worst["x"]):
            st = (r.get(f"{key}_stats") or {}).get("native_compiled") or {}
            worst = {"panel": title, "shape": r["key"], "ms": ms, "native_ms": native, "x": ms / native,
                     "q25": st.get("q25_ms"), "q75": st.get("q75_ms"), "n": st.get("n")}
    if worst:
        worst["warmups"] = ((sweep.get("protocols") or {}).get("eager") or {}).get("warmups")
    return worst


# The commit from which notebooks 08 and 10 compile afresh per shape with dynamic=False (dynamo reset first); their
# runs from before it compiled one lambda shape after shape, which recompiles with dynamic shapes.
STATIC_COMPILE_SINCE = "fb010bb2b3c7702294e217dba2de4fa6cd4f94ed"


def _static_compile(path: Path | None) -> bool | None:
    """Whether the run at `path` compiled its torch.compile points per shape with dynamic=False: its commit descends
    from STATIC_COMPILE_SINCE (git decides); None where git cannot say (no repository, an unknown commit)."""
    import subprocess

    from labkit.records.run import REPO_ROOT

    commit = _records(path)["run"]["provenance"].get("git_commit") if path else None
    if not commit:
        return None
    try:
        r = subprocess.run(["git", "merge-base", "--is-ancestor", STATIC_COMPILE_SINCE, commit], cwd=REPO_ROOT,
                           capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return {0: True, 1: False}.get(r.returncode)


def figure_note(runs: dict[str, Path]) -> str | None:
    """What the figure's torch.compile points are, from the sweeps' records: the point furthest above torch eager
    in each panel with the spread of its calls (a steady per-call time, not a compile inside the timing), and how
    the sweeps compiled (one lambda recompiled shape after shape, unlike notebooks 03 and 07's fresh compile per
    shape with dynamic=False), with notebook 07's Inductor at L1/40 beside it. None without a compiled point."""
    points = []
    if p := runs.get(dropin.RUN_NAME):
        points.append(_slowest_compile("forward", _records(p).get("dropin_sweep"), "compiled"))
    if p := runs.get(training.RUN_NAME):
        points.append(_slowest_compile("forward + backward", _records(p).get("training_sweep"), "eager"))
    points = [w for w in points if w]
    if not points:
        return None
    said = []
    for w in points:
        spread = (f"; middle half of {w['n']} calls {w['q25']:.3g}-{w['q75']:.3g} ms"
                  if w.get("q25") is not None and w.get("n") else "")
        said.append(f"{w['panel']} at {w['shape']}, {w['ms']:.3g} ms ({w['x']:.3g}x torch eager's "
                    f"{w['native_ms']:.3g} ms{spread})")
    ind = ""
    if p := runs.get(parallel_stats.RUN_NAME):
        t = ((summarize_run(p).get("timing") or {}).get(f"{L1_KEY}/random_normal") or {}).get("inductor") or {}
        if t.get("median_ms"):
            ind = f" (Inductor at L1/40: {t['median_ms']:.3g} ms, {GRAPH})"
    warm = next((w["warmups"] for w in points if w.get("warmups") is not None), None)
    return (f"torch.compile's points are steady per-call times under {EAGER}"
            + (f", after {warm} warm-up calls" if warm is not None else "") + ", not compiles; the slowest against "
            "torch eager: " + "; ".join(said) + ". " + _compile_how(runs) + ind + ". The records do not say which "
            "kernels ran.")


def _compile_how(runs: dict[str, Path]) -> str:
    """How the figure's sweeps compiled, per run (labkit.studies.front._static_compile)."""
    names = {"08": dropin.RUN_NAME, "10": training.RUN_NAME}
    how = {nb: _static_compile(runs.get(name)) for nb, name in names.items()}
    static = [nb for nb, v in how.items() if v]
    dynamic = [nb for nb, v in how.items() if v is False]
    unknown = [nb for nb, v in how.items() if v is None and runs.get(names[nb])]
    parts = []
    if static:
        parts.append(f"notebook{'s' if len(static) > 1 else ''} {' and '.join(static)}, like 03 and 07, compile "
                     f"afresh per shape with dynamic=False")
    if dynamic:
        parts.append(f"notebook{'s' if len(dynamic) > 1 else ''} {' and '.join(dynamic)} compiled one lambda shape "
                     f"after shape without dynamic=False, so torch.compile recompiled it with the sizes that changed "
                     f"symbolic (03 and 07 compile afresh per shape with dynamic=False)")
    if unknown:
        parts.append(f"how notebook{'s' if len(unknown) > 1 else ''} {' and '.join(unknown)} compiled is not known "
                     f"here (no git history to place the run's commit)")
    text = "; ".join(parts)
    return text[:1].upper() + text[1:] if text else "03 and 07 compile afresh per shape with dynamic=False"


# --- the post-shaped first screen: title, question, bullets, the L1/40 bars -----------------------------------------

QUESTION = ("Can PyTorch's FP32 LayerNorm at KernelBench's L1/40 shape (16 rows of 4,194,304 values) run faster "
            "while returning torch's exact bits, and is the post's faster answer that changes the bits wrong?")


def _timing_case(runs: dict[str, Path] | None = None) -> tuple[dict | None, dict]:
    """Notebook 03's L1/40 case with random affine parameters (as a trained model's; the claims table reads the
    same case) and its run's provenance, from the newest committed timing run."""
    from labkit.records.session import newest_complete_run
    from labkit.studies import timing

    p = (runs or {}).get(timing.RUN_NAME)
    if p is None and (run := newest_complete_run(timing.RUN_NAME)) is not None:
        p = Path(run["path"])
    if p is None:
        return None, {}
    recs = _records(p)
    case = next((c for c in (recs.get("timing") or {}).get("cases", []) if c["key"] == f"{L1_KEY}/random_normal"),
                None)
    return case, {**recs["run"]["provenance"], "run_id": recs["run"]["run_id"]}


def _paired(case, protocol, num, den):
    from labkit.studies import timing

    return timing.paired(case, protocol, num, den)


def _med(case, protocol, method):
    return ((((case or {}).get("timing") or {}).get(protocol) or {}).get("stats", {}).get(method) or {}).get(
        "median_ms")


def title(runs: dict[str, Path]) -> str:
    """The finding as a title, its figures from notebook 03's L1/40 case under graph replay."""
    case, _ = _timing_case(runs)
    native, ind = _paired(case, "A", "native", "chain"), _paired(case, "A", "inductor", "chain")
    if not native:
        return "Wide LayerNorm at KernelBench L1/40: torch's exact bits, faster"
    vs = "level with" if ind and abs(ind - 1) < 0.1 else "ahead of" if ind and ind > 1 else "behind"
    return (f"Torch's exact LayerNorm bits at KernelBench L1/40, {native:.3g}x faster than torch eager and "
            f"{vs} torch.compile")


def bullets(runs: dict[str, Path], rows: list[dict] | None = None) -> list[str]:
    """Three to five findings, every number from a committed run, every ratio naming its protocol and baseline."""
    from labkit.studies import fast_stats, post_beside

    rows = headline_rows(runs) if rows is None else rows
    case, prov = _timing_case(runs)
    out = []
    a = {m: _med(case, "A", m) for m in ("chain", "native", "inductor", "reference_order")}
    b = {m: _med(case, "B", m) for m in ("chain", "native", "inductor")}
    ra = {m: _paired(case, "A", m, "chain") for m in ("native", "inductor")}
    rb = {m: _paired(case, "B", m, "chain") for m in ("native", "inductor")}
    bits = ((case or {}).get("methods", {}).get("chain") or {}).get("check", {}).get("bit_equal_fraction")
    ps = next((r for r in rows if r["result"].startswith("forward: chain")), None)
    if a["chain"] and ra["native"] and ra["inductor"]:
        s = ("Bit-identical and fast: the chain kernel returns torch's bits"
             + (f" ({ps['bit-identical']}, notebook 07)" if ps else " (every element)" if bits == 1 else "")
             + f" and runs L1/40 in {a['chain']:.3g} ms with launches replayed from a CUDA graph (graph replay, "
               f"protocol A): {ra['native']:.3g}x torch eager, {ra['inductor']:.3g}x torch.compile (paired "
               f"medians of notebook 03's run, random affine).")
        if b["chain"] and rb["native"] and rb["inductor"]:
            s += (f" Timed eager per call with L2 flushed (KernelBench's way, protocol B): {b['chain']:.3g} ms, "
                  f"{rb['native']:.3g}x torch eager, {rb['inductor']:.3g}x torch.compile"
                  + ("; the larger lead over torch.compile there is per-call cost (host "
                     "launch, a flushed L2), not kernel time" if rb["inductor"] > ra["inductor"] else "") + ".")
        out.append(s)
    if a["reference_order"] and a["native"]:
        out.append(f"The post's design holds on an {prov.get('gpu')}: its reference-order kernel is "
                   f"{_paired(case, 'A', 'native', 'reference_order'):.3g}x torch eager under graph replay (protocol A), against "
                   f"the post's {post_about()['reference_order_ratio'].replace('--', '-')}x on an "
                   f"{post_about()['hardware']}; the book's chain kernel is "
                   f"{_paired(case, 'A', 'reference_order', 'chain'):.3g}x faster again with the same bits."
                   if a["chain"] else ".")
    from labkit.records.post import figure as _pf

    def post_fig(fid):
        return _pf(fid)["source"]["token"]

    fs = post_beside.runs_by_name().get(fast_stats.RUN_NAME)
    table = fast_stats.oracle_table(_records(fs).get("oracle")) if fs else []
    const = [r for r in table if r["case"].startswith("constant_1e4")]
    nat = next((r for r in const if r["candidate"].startswith("native")), None)
    fast = [r for r in const if not r["candidate"].startswith("native")]
    if nat and fast:
        out.append(f"The \u201cfailing\u201d fast statistics are right where the post blamed them (notebook 02's "
                   f"exact oracle): at the constant {post_fig('fast_stats.constant.value')} control torch's own rstd is {nat['rstd max |ulp|']:,} ulp from the exact "
                   f"value, while the fast statistics' mean is {max(r['mean max |ulp|'] for r in fast)} ulp and "
                   f"rstd {max(r['rstd max |ulp|'] for r in fast)} ulp off"
                   + (", their output exact" if all(r["output max abs err"] == 0 for r in fast) else "")
                   + ". Matching torch is the contract, not accuracy.")
    fb = next((r for r in rows if r["result"] == f"forward + backward: {FWDBWD_KB}"), None)
    fg = next((r for r in rows if r["result"] == f"forward + backward: {FWDBWD}" and r["protocol"] == GRAPH), None)
    if fb:
        tp = runs.get(training.RUN_NAME)
        gpu = (_records(tp)["run"].get("provenance") or {}).get("gpu") if tp else None
        s = (f"A drop-in for training: labkit.layer_norm keeps eager's bits forward and backward "
             f"({fb['bit-identical']}) and runs L1/40's forward + backward in {fb['ms']:.3g} ms"
             + (f" on an {gpu}" if gpu else "") + " under KernelBench's "
             f"timing (eager per call, protocol B): {fb['x torch eager']:.3g}x torch eager, "
             f"{fb['x torch.compile']:.3g}x torch.compile.")
        if fg and fg["x torch.compile"]:
            s += (f" Under graph replay (protocol A) it is {fg['x torch.compile']:.3g}x torch.compile"
                  + (": most of the eager-timing lead over torch.compile is host time, not kernel time."
                     if fg["x torch.compile"] < fb["x torch.compile"] else "."))
        out.append(s)
    if (fz := _fused_bullet()) is not None:
        out.append(fz)
    return out


def _fused_bullet() -> str | None:
    """The post's other next step (notebook 11), from the newest fused_consumer run."""
    from labkit.studies import fused, post_beside

    path = post_beside.runs_by_name().get(fused.RUN_NAME)
    recs = _records(path) if path else {}
    block = fused.fused_block(recs) if recs else None
    if not block or block.get("l1_40_fused_ms") is None:
        return None
    ratios = {g["goal"]: g["ratio"] for g in fused.goals(recs.get("timing")) if g["protocol"] == "A"}
    vs = {num: ratios.get(what) for what, num, den, _ in fused.GOALS if den == fused.FUSED}
    if vs.get(fused.UNFUSED) is None or vs.get(fused.COMPILED) is None:
        return None
    gpu = ((recs.get("run") or {}).get("provenance") or {}).get("gpu") or "its GPU"
    return (f"The post's other next step (notebook 11): GELU and a scale in the LayerNorm's output pass keep eager's "
            f"bits ({block['bits_identical']}) and take {block['l1_40_fused_ms']:.3g} ms at L1/40 on an {gpu}, "
            f"{speed(vs[fused.UNFUSED])} than running them after it and {speed(vs[fused.COMPILED])} than "
            f"torch.compile (graph replay, protocol A, paired medians).")


# The methods of notebook 03 at L1/40, as the main figure names them, and the post's figure beside each where the
# post timed the same method (its ids in data/post/figures.json; the post's medians at random affine, graph replay).
BAR_METHODS = (
    ("native", "torch eager (F.layer_norm)", "timing.native.16x64x256x256.random.median"),
    ("native_torchscript_traced", "torch eager, TorchScript trace", "timing.native_torchscript.16x64x256x256.random.median"),
    ("noaffine_eager_affine", "torch no-affine + eager affine", "timing.noaffine_eager_affine.16x64x256x256.noaffine_block"),
    ("noaffine_traced_affine", "torch no-affine + traced affine",
     "timing.noaffine_torchscript_affine.16x64x256x256.noaffine_block"),
    ("reference_order", "reference order (the post's design)", "timing.reference_order.16x64x256x256.random.median"),
    ("split_eager", "fast stats + eager affine", "timing.split_eager.16x64x256x256.random.median.fast_stats_block"),
    ("split_traced", "fast stats + traced affine",
     "timing.split_torchscript.16x64x256x256.random.median.fast_stats_block"),
    ("split_flat", "fast stats + flat kernel", "timing.fast_stats_flat.16x64x256x256.random.median.fast_stats_block"),
    ("post_split_interleaved", "fast stats + the post's kernel",
     "timing.fast_stats_interleaved.16x64x256x256.random.median.fast_stats_block"),
    ("split_interleaved", "fast stats + interleaved kernel", None),
    ("inductor", "torch.compile (Inductor)", None),
    ("chain", "chain kernel (this book)", None),
)


def l1_40_figure(runs: dict[str, Path] | None = None):
    """Every method of notebook 03 at L1/40 as a bar (median ms, log scale): graph replay (protocol A) and eager
    per call (protocol B) from one run, the post's RTX 3090 medians beside as their own series; bit-identical methods
    marked. None without the timing run."""
    import matplotlib.pyplot as plt

    from labkit.records import post

    case, prov = _timing_case(runs)
    if not case:
        return None
    kept = [(m, label, fid) for m, label, fid in BAR_METHODS if _med(case, "A", m)]
    bits = {m: ((case["methods"].get(m) or {}).get("check") or {}).get("bit_equal_fraction") for m, _, _ in kept}
    about = post.about()
    fig, ax = plt.subplots(figsize=(10, 0.36 * len(kept) + 1.2))
    h = 0.27
    ys = list(range(len(kept)))[::-1]
    series = ((f"{prov.get('gpu')}, graph replay (protocol A)", "A", -h, "#1f77b4"),
              (f"{prov.get('gpu')}, eager per call, L2 flushed (protocol B)", "B", 0, "#9ecae1"))
    for label, proto, off, color in series:
        vals = [_med(case, proto, m) for m, _, _ in kept]
        ax.barh([y + off for y, v in zip(ys, vals) if v], [v for v in vals if v], height=h, color=color, label=label)
    pv = [(y, post.figure(fid)["value"]) for y, (_, _, fid) in zip(ys, kept) if fid]
    ax.barh([y + h for y, _ in pv], [v for _, v in pv], height=h, color="#f4a259",
            label=f"the post, {about['hardware']}, graph replay ({about['software']})")
    ax.set_yticks(ys)
    ax.set_yticklabels([label + ("  \u2713 torch's bits" if bits[m] == 1 else "") for m, label, _ in kept], fontsize=10)
    for tick, (m, _, _) in zip(ax.get_yticklabels(), kept):
        if bits[m] == 1:
            tick.set_color("#1a7f37")
            tick.set_fontweight("bold")
    ax.set_xscale("log")
    ax.set_xlabel("median time per call, ms (log scale)", fontsize=10)
    ax.tick_params(axis="x", labelsize=10)
    for y, (m, _, _) in zip(ys, kept):
        v = _med(case, "A", m)
        ax.text(v * 1.03, y - h, f"{v:.3g}", va="center", fontsize=9)
    ax.set_xlim(left=0.1)
    ax.set_title("L1/40, LayerNorm of (16, 64, 256, 256) float32: every method of notebook 03\n"
                 "green, ✓: output equal to torch's bit for bit", fontsize=10.5)
    ax.grid(True, axis="x", which="both", alpha=0.25)
    ax.legend(fontsize=9.5, loc="upper center", bbox_to_anchor=(0.45, -0.14), ncol=1, frameon=False)
    fig.tight_layout()
    return fig
