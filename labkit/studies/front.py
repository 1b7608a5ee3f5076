"""The front page's content, read from committed (or this build's) runs: what the post asked, what the book found, one
headline table and one figure. Every number is a run's; the protocols are named once here (PROTOCOLS) and beside
every ratio. The site renders it (labkit.site.write_index); nothing here knows about HTML.

The runs it reads, by name: parallel_stats (notebook 07: the chain kernel at L1/40 under graph replay, with its
bit-identity matrix), dropin (08: the drop-in's forward over 2**24 elements in every row shape, eager per call and
graph replay), training (10: forward + backward the same way).
"""
from __future__ import annotations

from pathlib import Path

from labkit.records.post import about as post_about
from labkit.records.run import load_run
from labkit.studies import dropin, parallel_stats, training
from labkit.studies.catalog import summarize_run
from labkit.studies.plots import time_vs_shape
from labkit.tasks import L1_40, shape_key

L1_KEY = shape_key(L1_40)
RUNS = (parallel_stats.RUN_NAME, dropin.RUN_NAME, training.RUN_NAME)

# One set of names for the whole book.
PROTOCOLS = {
    "graph replay": "the call captured in a CUDA graph and replayed between CUDA events, methods in randomized "
                    "order (the post's protocol, \"A\"): the GPU's time, no host cost",
    "eager per call": "one CUDA-event pair around each ordinary Python call, the L2 cache flushed before it "
                      "(KernelBench's style of timing, \"B\"): what a user's eager loop pays, host time included",
}
GLOSSARY = {
    "L1/40": "KernelBench level 1, task 40: LayerNorm of a (16, 64, 256, 256) float32 tensor over its last three "
             "dims, 16 rows of 4,194,304 values",
    "bit-identical": "output, mean and rstd (and gradients) equal to torch's as int32 bit patterns, not within a "
                     "tolerance",
    "reference-order": "a kernel doing torch's arithmetic in torch's order (the post's design): same bits, "
                       "output pass spread over many blocks",
    "chain": "this book's kernel: torch's 128 per-thread Welford chains of each row spread over the whole GPU and "
             "merged in torch's tree, so the bits stay torch's",
    "drop-in": "labkit.layer_norm / labkit.LayerNorm: F.layer_norm's signature, our kernels where measured "
               "faster, torch's own elsewhere",
    "torch eager": "torch.nn.functional.layer_norm as shipped (its vectorized CUDA kernel)",
    "torch.compile": "torch.compile(F.layer_norm) (Inductor's generated kernel; not torch's bits)",
    "official check": "KernelBench's torch.allclose(reference, candidate, atol=1e-4, rtol=1e-4)",
}


def runs_by_name(paths: dict[str, Path] | None = None) -> dict[str, Path]:
    """The run each front-page source is read from: the build's own where it wrote or replayed one (`paths`),
    else the newest complete committed run of that name; absent names are left out."""
    from labkit.records.session import newest_complete_run

    out = {}
    for name in RUNS:
        if paths and name in paths:
            out[name] = Path(paths[name])
        elif (run := newest_complete_run(name)) is not None:
            out[name] = Path(run["path"])
    return out


def _records(path: Path | None) -> dict:
    return load_run(path)["records"] if path else {}


def _ratio(a, b):
    return a / b if a and b else None


def headline_rows(runs: dict[str, Path]) -> list[dict]:
    """One row per headline result at L1/40: what, protocol, our ms, x torch eager and x torch.compile (each
    ratio from one run), bit identity, and the goal the study set with met/missed."""
    rows = []
    if p := runs.get(parallel_stats.RUN_NAME):
        s = summarize_run(p)
        t = (s.get("timing") or {}).get(f"{L1_KEY}/random_normal") or {}
        med = {m: (v or {}).get("median_ms") for m, v in t.items()}
        bits = s.get("bit_identity") or {}
        if med.get("chain"):
            rows.append({"result": "forward: chain kernel (the drop-in's path)", "protocol": "graph replay",
                         "ms": med["chain"], "x torch eager": _ratio(med.get("native"), med["chain"]),
                         "x torch.compile": _ratio(med.get("inductor"), med["chain"]),
                         "bit-identical": f"{bits.get('identical')}/{bits.get('cases')} cases" if bits else None,
                         "goal": f"<= {parallel_stats.L1_40_GOAL_MS} ms",
                         "met": med["chain"] <= parallel_stats.L1_40_GOAL_MS, "run": s["run_id"]})
        if med.get("reference_order"):
            rows.append({"result": "forward: reference-order kernel (the post's design)", "protocol": "graph replay",
                         "ms": med["reference_order"], "x torch eager": _ratio(med.get("native"),
                                                                               med["reference_order"]),
                         "x torch.compile": _ratio(med.get("inductor"), med["reference_order"]),
                         "bit-identical": "yes (every timed call checked)"
                         if (t.get("reference_order") or {}).get("bit_equal_fraction") == 1.0 else "no",
                         "goal": None, "met": None, "run": s["run_id"]})
    if p := runs.get(dropin.RUN_NAME):
        recs = _records(p)
        block = dropin.dropin_block(recs) or {}
        row = next((r for r in (recs.get("dropin_sweep") or {}).get("shapes", []) if r.get("l1_40")), None)
        if row and (row.get("eager") or {}).get("dropin"):
            e, c = row["eager"], row.get("compiled") or {}
            ratio = _ratio(e.get("native"), e["dropin"])
            rows.append({"result": "forward: drop-in labkit.layer_norm", "protocol": "eager per call",
                         "ms": e["dropin"], "x torch eager": ratio,
                         "x torch.compile": _ratio(c.get("native_compiled"), e["dropin"]),
                         "bit-identical": f"{block.get('forward_identical')} inputs",
                         "goal": f">= {dropin.L1_40_EAGER_RATIO_GOAL}x torch eager",
                         "met": ratio is not None and ratio >= dropin.L1_40_EAGER_RATIO_GOAL,
                         "run": recs["run"]["run_id"]})
    if p := runs.get(training.RUN_NAME):
        recs = _records(p)
        t = training.training_block(recs) or {}
        row = next((r for r in (recs.get("training_sweep") or {}).get("shapes", []) if r.get("l1_40")), None)
        for proto, key in (("eager per call", "eager"), ("graph replay", "graph")):
            d = (row or {}).get(key) or {}
            if not d.get("dropin"):
                continue
            goal = proto == "eager per call"
            rows.append({"result": "forward + backward: drop-in (our backward kernels)", "protocol": proto,
                         "ms": d["dropin"], "x torch eager": _ratio(d.get("native"), d["dropin"]),
                         "x torch.compile": _ratio(d.get("native_compiled"), d["dropin"]),
                         "bit-identical": f"{t.get('backward_identical')} inputs; model steps "
                                          f"{t.get('model_steps_identical')}",
                         "goal": f"<= {training.L1_40_FWDBWD_GOAL_MS} ms" if goal else None,
                         "met": d["dropin"] <= training.L1_40_FWDBWD_GOAL_MS if goal else None,
                         "run": recs["run"]["run_id"]})
    return rows


def _meta(path: Path | None) -> dict:
    if not path:
        return {}
    prov = _records(path)["run"]["provenance"]
    return {"gpu": prov.get("gpu"), "torch": prov.get("torch")}


def summary_sentences(runs: dict[str, Path], rows: list[dict] | None = None) -> list[str]:
    """What was asked and what was found, in a few sentences, every number from `headline_rows` (pass them when
    already read)."""
    post = post_about()
    rows = {(r["result"].split(":")[0], r["result"].split(": ")[-1].split(" ")[0], r["protocol"]): r
            for r in (headline_rows(runs) if rows is None else rows)}
    meta = next((m for m in (_meta(p) for p in runs.values()) if m), {})
    out = [f"The post \u201c{post['title']}\u201d ({post['author']}, {post['date']}) made PyTorch's FP32 LayerNorm at "
           f"L1/40 faster with tested bit identity: torch's arithmetic in torch's order, the output pass spread over "
           f"many blocks, {post['reference_order_ratio'].replace('--', '-')}x torch on an {post['hardware']} "
           f"({post['software']}). It also showed that a faster statistics pass changes the answer."]
    x = lambda v: "n/a" if v is None else f"{v:.3g}x"  # noqa: E731
    found = []
    ref = rows.get(("forward", "reference-order", "graph replay"))
    chain = rows.get(("forward", "chain", "graph replay"))
    if ref:
        found.append(f"the post's reference-order kernel runs L1/40 in {ref['ms']:.3g} ms, {x(ref['x torch eager'])} "
                     f"torch eager (graph replay)")
    if chain:
        found.append(f"this book's chain kernel, which spreads each row's statistics over the whole GPU and keeps "
                     f"the bits ({chain['bit-identical']}), in {chain['ms']:.3g} ms: {x(chain['x torch eager'])} "
                     f"torch eager and {x(chain['x torch.compile'])} torch.compile (graph replay)")
    fb = rows.get(("forward + backward", "drop-in", "eager per call"))
    if fb:
        found.append(f"in training, the drop-in's forward + backward keeps eager's bits ({fb['bit-identical']}) and "
                     f"takes {fb['ms']:.3g} ms, {x(fb['x torch eager'])} torch eager and {x(fb['x torch.compile'])} "
                     f"torch.compile (eager per call)")
    if found:
        where = f"On an {meta.get('gpu')} with torch {meta.get('torch')}" if meta else "Here"
        out.append(f"{where}, " + "; ".join(found) + ".")
    missed = [f"{r['result'].split(':')[0]} {r['goal']} ({r['protocol']}; {r['ms']:.3g} ms)"
              for r in rows.values() if r["met"] is False]
    if missed:
        out.append("Goals not yet met: " + "; ".join(missed) + ".")
    out.append("Added here: the chain kernel, a drop-in with eager's bits forward and backward (compiled too), "
               "backward kernels, machine-code evidence of torch's FMA contractions, and an audit of every run.")
    return out


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
