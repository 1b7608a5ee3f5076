"""The fused consumer (notebook 11): LayerNorm with the elementwise ops after it in its output pass
(labkit.fused_layer_norm), against the same chain unfused, with the bytes each kernel must move counted from the
shapes, the time each method takes beside the device-copy ceiling measured in the same run, the bits, and
KernelBench's two level-2 tasks that hold the pattern and L1/40 with a GELU + scale consumer (labkit.tasks.FUSED_TASKS).

Run functions return records (`traffic`, `timing`, `bits`, `kernelbench`); readers turn records into rows, a
figure, the `fused` summary block, the goals and the verdict. Nothing here prints or knows about notebooks.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import replace

from labkit.records.text import speed
from labkit.tasks import L1_40, shape_key

RUN_NAME = "fused_consumer"
NOTEBOOK = "11_fused_consumer"

# The consumer timed at L1/40: GELU then a scale, as KernelBench's L2/34 writes it after its LayerNorm.
ACTIVATION, SCALE = "gelu", 2.0
QUICK_SHAPE = (4, 64, 64, 64)  # quick mode: 4 rows of 262,144, the chain's layout at a sixteenth of the size
EAGER, LAYER_NORM, UNFUSED, FUSED, COMPILED = ("torch eager", "layer_norm (drop-in) alone", "drop-in + eager ops",
                                               "fused", "torch.compile")
METHODS = (EAGER, LAYER_NORM, UNFUSED, FUSED, COMPILED)
GOALS = (  # (what, numerator, denominator, lowest passing value of num / den, paired per round)
    ("fused within 1.1x of the drop-in LayerNorm alone", LAYER_NORM, FUSED, 1 / 1.1),
    ("fused >= 1.5x faster than the drop-in then eager GELU and scale", UNFUSED, FUSED, 1.5),
    ("fused >= 1.0x torch.compile of the chain", COMPILED, FUSED, 1.0),
)


def timing_shape(mode: str) -> tuple[int, ...]:
    return L1_40 if mode == "full" else QUICK_SHAPE


# --- traffic: the bytes each kernel must move, from the shapes ------------------------------------------------------

def _kernel(name: str, reads: dict, writes: dict) -> dict:
    """One kernel's row: what it reads and writes (tensor -> bytes) and their sum."""
    return {"kernel": name, "reads": ", ".join(reads), "writes": ", ".join(writes),
            "bytes": sum(reads.values()) + sum(writes.values())}


def _layer_norm_kernels(path: str, full: int, n: int, rows: int, out: str, extra_reads: dict) -> list[dict]:
    """The kernels one LayerNorm path runs, as its code moves data: the chain reads x in its statistics pass and
    again in its output pass; rows_fused and its counted entry points keep a row in registers (x read once);
    torch's vectorized kernel reads a row for its statistics and again for its output."""
    params = {"weight": 4 * n, "bias": 4 * n}
    stats = {"mean": 4 * rows, "rstd": 4 * rows}
    if path == "chain":
        return [_kernel("chain statistics", {"x": full}, stats),
                _kernel("chain output", {"x": full, **params, **stats, **extra_reads}, {out: full})]
    if path.startswith("rows_"):
        return [_kernel(path, {"x": full, **params, **extra_reads}, {out: full, **stats})]
    return [_kernel("torch layer_norm", {"x (statistics)": full, "x (output)": full, **params, **extra_reads},
                    {out: full, **stats})]


def traffic(shape, ns, dropin_path: str, fused_path: str) -> dict:
    """The `traffic` record: per method the kernels it launches at `shape` with their bytes, the LayerNorm's own
    by the path the drop-in takes there (`dropin_path`) and the fused one's by `fused_path`. torch.compile's
    kernels are Inductor's: counted as its least possible traffic, x read once and the output written once."""
    n = math.prod(ns)
    rows = math.prod(shape) // n
    full = 4 * rows * n
    consumer = [_kernel("gelu", {"y": full}, {"g": full}), _kernel("mul (scale)", {"g": full}, {"out": full})]
    methods = {
        EAGER: _layer_norm_kernels("native", full, n, rows, "y", {}) + consumer,
        LAYER_NORM: _layer_norm_kernels(dropin_path, full, n, rows, "y", {}),
        UNFUSED: _layer_norm_kernels(dropin_path, full, n, rows, "y", {}) + consumer,
        FUSED: _layer_norm_kernels(fused_path, full, n, rows, "out", {}),
        COMPILED: [_kernel("Inductor's (least possible)", {"x": full}, {"out": full})],
    }
    return {"shape": list(shape), "normalized_shape": list(ns), "rows": rows, "n": n, "tensor_bytes": full,
            "dropin_path": dropin_path, "fused_path": fused_path,
            "methods": {m: {"kernels": ks, "bytes": sum(k["bytes"] for k in ks)} for m, ks in methods.items()}}


# --- timing ---------------------------------------------------------------------------------------------------------

def _callables(shape, device: str) -> tuple[dict, dict]:
    """({method: callable}, the traffic record) at `shape`: KernelBench's L1/40 affine (ones, zeros), the consumer
    GELU then * SCALE."""
    import torch
    import torch.nn.functional as F

    import labkit
    from labkit.ops.epilogue import Epilogue, compose
    from labkit.studies.measure import compile_static

    ns = tuple(shape[1:])
    x = torch.rand(shape, generator=torch.Generator().manual_seed(42)).to(device)
    w, b = torch.ones(ns, device=device), torch.zeros(ns, device=device)
    e = Epilogue(ACTIVATION, SCALE)

    def eager():
        return compose(F.layer_norm(x, ns, w, b, 1e-5), e)

    (compiled,) = compile_static(eager)
    fns = {EAGER: eager,
           LAYER_NORM: lambda: labkit.layer_norm(x, ns, w, b, 1e-5),
           UNFUSED: lambda: compose(labkit.layer_norm(x, ns, w, b, 1e-5), e),
           FUSED: lambda: labkit.fused_layer_norm(x, ns, w, b, 1e-5, activation=ACTIVATION, scale=SCALE),
           COMPILED: compiled}
    paths = (labkit.explain(x, ns, w, b)["path"],
             labkit.explain_fused(x, ns, w, b, activation=ACTIVATION, scale=SCALE)["path"])
    return fns, traffic(shape, ns, *paths)


def timing(shape, rounds: int, device: str = "cuda", b_trials: int = 100) -> dict:
    """The `timing` record at `shape`, under no_grad: every method under protocol A (graph replay) and protocol B
    (KernelBench's eager events, the L2 flushed), the copy ceiling under both in the same run, and the traffic."""
    import torch

    from labkit.studies import bench, measure

    protocols = {"A": replace(bench.PROTOCOL_A, rounds=rounds), "B": replace(bench.PROTOCOL_B, rounds=b_trials)}
    with torch.no_grad():
        fns, moved = _callables(shape, device)
        out = {"shape": list(shape), "activation": ACTIVATION, "scale": SCALE, "traffic": moved, "timing": {}}
        for key, protocol in protocols.items():
            out["timing"][key] = bench.time_methods(fns, protocol, baseline=FUSED).to_json()
        out["copy_ceiling"] = measure.copy_ceiling(protocols, device=device)
    return out


# --- bits -----------------------------------------------------------------------------------------------------------

BITS_SHAPES = {"quick": (((4, 1 << 18), (1 << 18,)), ((4096, 768), (768,)), ((1000, 3000), (3000,))),
               "full": ((L1_40, L1_40[1:]), ((4096, 64), (64,)), ((8192, 768), (768,)), ((512, 16384), (16384,)),
                        ((3000, 1000), (1000,)))}


def bits(mode: str, device: str = "cuda") -> dict:
    """The `bits` record: per shape and epilogue, whether the fused forward and its gradients (of sum(out * g), in
    x, weight, bias and the residual) have the int32 bits of torch's eager chain, and which path served."""
    import torch

    import labkit
    from labkit.ops.epilogue import Epilogue, compose

    epilogues = [Epilogue("gelu", SCALE), Epilogue("gelu_tanh"), Epilogue("relu"), Epilogue("silu", 0.5),
                 Epilogue("gelu", 0.75, True)]
    cases = []
    for shape, ns in BITS_SHAPES[mode]:
        g = torch.Generator().manual_seed(1)
        x, w, b, r, dout = (torch.randn(s, generator=g).to(device) for s in (shape, ns, ns, shape, shape))
        for e in epilogues:
            res = r if e.residual else None
            kw = dict(activation=e.activation, scale=e.scale, residual=res)
            case = {"case": f"{shape_key(shape)} {e.activation or ''}"
                            f"{'' if e.scale is None else f' *{e.scale:g}'}{' +residual' if e.residual else ''}",
                    "path": labkit.explain_fused(x, ns, w, b, **kw)["path"]}
            try:
                leaves = [t.clone().requires_grad_() for t in (x, w, b, r)]
                ours = labkit.fused_layer_norm(leaves[0], ns, leaves[1], leaves[2],
                                               residual=leaves[3] if e.residual else None,
                                               activation=e.activation, scale=e.scale)
                ref_leaves = [t.clone().requires_grad_() for t in (x, w, b, r)]
                ref = compose(torch.nn.functional.layer_norm(ref_leaves[0], ns, ref_leaves[1], ref_leaves[2]), e,
                              ref_leaves[3])
                case["forward"] = _same(ours, ref)
                used = 4 if e.residual else 3
                got = torch.autograd.grad((ours * dout).sum(), leaves[:used])
                want = torch.autograd.grad((ref * dout).sum(), ref_leaves[:used])
                case["backward"] = all(_same(a, c) for a, c in zip(got, want))
            except Exception as exc:  # a failing case is a row with its error, not a dead sweep
                case.update(forward=False, backward=False, error=f"{type(exc).__name__}: {exc}"[:300])
            cases.append(case)
        del x, w, b, r, dout
    return {"cases": cases}


def _same(a, b) -> bool:
    import torch

    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(a.view(torch.int32), b.view(torch.int32))


# --- KernelBench's level-2 tasks ------------------------------------------------------------------------------------

KB_CORRECT_TRIALS = 5  # the evaluator's num_correct_trials
KB_TOLERANCE = 1e-2    # its atol and rtol for float32


def kernelbench(mode: str, num_trials: int, device: str = "cuda") -> dict:
    """The `kernelbench` record: per task of labkit.tasks.FUSED_TASKS, its correctness trials as KernelBench's
    evaluator makes them (ModelNew against Model on fresh inputs, allclose at KB_TOLERANCE; and here whether the
    bits are equal), then its cuda_event timing of the reference, its torch.compile and ModelNew
    (labkit.studies.kernelbench_timing: the reference and ModelNew with grad mode on, as the evaluator times them;
    the compiled baseline under no_grad). Quick mode shrinks the batch to 4 (L1/40's rows to 4)."""
    import torch

    from labkit.studies import kernelbench_timing as kbt
    from labkit.tasks import FUSED_TASKS

    out = []
    for key, task in FUSED_TASKS.items():
        shape = task.input_shape if mode == "full" else (4,) + task.input_shape[1:]
        row = {"task": key, "name": task.name, "input_shape": list(shape)}
        try:
            torch.manual_seed(kbt.SEED)
            model = task.make_model(device)
            torch.manual_seed(kbt.SEED)
            new = task.make_model_new(device)
            torch._dynamo.reset()
            compiled = torch.compile(task.make_model(device), backend="inductor", mode="default")
            allclose, identical = 0, 0
            with torch.no_grad(), torch.backends.cudnn.flags(enabled=True, benchmark=False, deterministic=True):
                for trial in range(KB_CORRECT_TRIALS):
                    (x,) = task.make_inputs(device, seed=trial, shape=shape)
                    a, b = new(x), model(x)
                    allclose += bool(torch.allclose(a, b, atol=KB_TOLERANCE, rtol=KB_TOLERANCE))
                    identical += _same(a, b)
            row.update(correct=f"{allclose}/{KB_CORRECT_TRIALS}", bits_identical=f"{identical}/{KB_CORRECT_TRIALS}")
            (x,) = task.make_inputs(device, seed=kbt.SEED, shape=shape)

            def no_grad(fn):
                def call():
                    with torch.no_grad():
                        return fn()
                return call

            progs = {"reference": (lambda: model(x), kbt.EVAL_WARMUP),
                     "torch.compile": (no_grad(lambda: compiled(x)), kbt.REF_PROGRAM_WARMUP),
                     "ModelNew (labkit)": (lambda: new(x), kbt.EVAL_WARMUP)}
            row["times_ms"] = {name: kbt.stats(kbt.cuda_event_times(fn, warm, num_trials))
                               for name, (fn, warm) in progs.items()}
        except Exception as exc:
            row.update(correct=row.get("correct", f"0/{KB_CORRECT_TRIALS}"), error=f"{type(exc).__name__}: {exc}"[:300])
        out.append(row)
        torch.cuda.empty_cache()
    return {"tasks": out, "correct_trials": KB_CORRECT_TRIALS, "tolerance": KB_TOLERANCE}


# --- readers: records -> rows, figure, summary, goals, verdict -------------------------------------------------------

def traffic_rows(rec: dict | None) -> list[dict]:
    if not rec:
        return []
    t = rec["traffic"]
    rows = []
    for method, m in t["methods"].items():
        for k in m["kernels"]:
            rows.append({"method": method, "kernel": k["kernel"], "reads": k["reads"], "writes": k["writes"],
                         "MB": k["bytes"] / 1e6})
        rows.append({"method": method, "kernel": "total", "reads": "", "writes": "", "MB": m["bytes"] / 1e6})
    return rows


def _median(rec: dict, protocol: str, method: str) -> float | None:
    s = (rec.get("timing", {}).get(protocol) or {}).get("stats", {}).get(method)
    return s["median_ms"] if s else None


def _paired(rec: dict, protocol: str, num: str, den: str) -> float | None:
    samples = (rec.get("timing", {}).get(protocol) or {}).get("samples_ms") or {}
    if not samples.get(num) or not samples.get(den):
        return None
    return statistics.median(a / b for a, b in zip(samples[num], samples[den]))


def timing_rows(rec: dict | None) -> list[dict]:
    """Per method and protocol: median ms, the bytes its kernels must move, GB/s at that rate, and that rate as a
    share of the copy ceiling measured in the same run."""
    if not rec:
        return []
    rows = []
    for protocol in ("A", "B"):
        ceiling = rec["copy_ceiling"][protocol]["median_gbps"]
        for method in METHODS:
            ms = _median(rec, protocol, method)
            moved = rec["traffic"]["methods"][method]["bytes"]
            gbps = None if ms is None else moved / (ms * 1e-3) / 1e9
            rows.append({"protocol": protocol, "method": method, "median_ms": ms, "bytes_MB": moved / 1e6,
                         "gbps": gbps, "of_copy_ceiling": None if gbps is None else gbps / ceiling,
                         "x_fused": _paired(rec, protocol, method, FUSED)})
        rows.append({"protocol": protocol, "method": "device copy (ceiling)",
                     "median_ms": rec["copy_ceiling"][protocol]["median_ms"],
                     "bytes_MB": rec["copy_ceiling"][protocol]["bytes_moved"] / 1e6, "gbps": ceiling,
                     "of_copy_ceiling": 1.0, "x_fused": None})
    return rows


def figure(rec: dict | None, title: str):
    """Median time per method under both protocols, bars, with the time the copy ceiling would take for each
    method's bytes as a tick."""
    if not rec:
        return None
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 3.6))
    width = 0.38
    for i, protocol in enumerate(("A", "B")):
        ms = [_median(rec, protocol, m) or 0.0 for m in METHODS]
        xs = [j + (i - 0.5) * width for j in range(len(METHODS))]
        ax.bar(xs, ms, width, label=f"protocol {protocol}")
        ceiling = rec["copy_ceiling"][protocol]["median_gbps"]
        floor = [rec["traffic"]["methods"][m]["bytes"] / (ceiling * 1e9) * 1e3 for m in METHODS]
        ax.scatter(xs, floor, marker="_", s=300, color="black", zorder=3,
                   label="its bytes at the copy ceiling" if i == 0 else None)
    ax.set_xticks(range(len(METHODS)), METHODS, rotation=15, fontsize=8)
    ax.set_ylabel("ms (median)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def bits_rows(rec: dict | None) -> list[dict]:
    return list((rec or {}).get("cases", []))


def kernelbench_rows(rec: dict | None) -> list[dict]:
    rows = []
    for t in (rec or {}).get("tasks", []):
        times = t.get("times_ms") or {}
        row = {"task": t["task"], "correct (KernelBench)": t.get("correct"), "bits identical": t.get("bits_identical")}
        for name, s in times.items():
            row[f"{name} mean_ms"] = s["mean_ms"]
        ours, ref, comp = (times.get(k, {}).get("mean_ms") for k in ("ModelNew (labkit)", "reference",
                                                                     "torch.compile"))
        row["vs reference"] = speed(ref / ours) if ref and ours else "—"
        row["vs torch.compile"] = speed(comp / ours) if comp and ours else "—"
        if t.get("error"):
            row["error"] = t["error"]
        rows.append(row)
    return rows


def _count(flags) -> str:
    flags = list(flags)
    return f"{sum(bool(f) for f in flags)}/{len(flags)}"


def fused_block(records: dict) -> dict | None:
    """The `fused` block of `labkit summary RUN --json`, read from the run's records."""
    t = records.get("timing")
    if not t:
        return None
    cases = (records.get("bits") or {}).get("cases", [])
    kb = (records.get("kernelbench") or {}).get("tasks", [])
    k = sum(int(r["correct"].split("/")[0]) for r in kb if r.get("correct"))
    n = sum(int(r["correct"].split("/")[1]) for r in kb if r.get("correct"))
    return {"l1_40_fused_ms": _median(t, "A", FUSED), "l1_40_layer_norm_ms": _median(t, "A", LAYER_NORM),
            "l1_40_unfused_ms": _median(t, "A", UNFUSED), "l1_40_compile_ms": _median(t, "A", COMPILED),
            "l1_40_eager_ms": _median(t, "A", EAGER),
            "l1_40_compile_b_ms": _median(t, "B", COMPILED), "l1_40_fused_b_ms": _median(t, "B", FUSED),
            "l1_40_shape": shape_key(t["shape"]),
            # a case counts only where our kernels served it: torch's chain would be identical by definition
            "bits_identical": _count([c.get("path") not in (None, "native") and c.get("forward") and c.get("backward")
                                      for c in cases]),
            "bits_served_by_torch": sum(c.get("path") in (None, "native") for c in cases),
            "kernelbench_correct": f"{k}/{n}"}


def summary(records: dict, prov: dict) -> dict:
    block = fused_block(records)
    return {"fused": block} if block else {}


def _fmt(v, f=".3g") -> str:
    return "n/a" if v is None else format(v, f)


def summary_lines(s: dict) -> list[str]:
    f = s.get("fused")
    if not f:
        return []
    return [f"fused consumer at {f['l1_40_shape']}: fused {_fmt(f['l1_40_fused_ms'])} ms, layer_norm alone "
            f"{_fmt(f['l1_40_layer_norm_ms'])}, unfused {_fmt(f['l1_40_unfused_ms'])}, torch.compile "
            f"{_fmt(f['l1_40_compile_ms'])} (graph replay); bits {f['bits_identical']}, KernelBench correct "
            f"{f['kernelbench_correct']}"]


def page_headline(records: dict, s: dict) -> str:
    from labkit.records.text import on_gpu

    f = s.get("fused")
    if not f or f.get("l1_40_fused_ms") is None:
        return f"fused consumer: no timing in the record {on_gpu(s)}"
    return (f"LayerNorm + GELU + scale fused at {f['l1_40_shape']}: {_fmt(f['l1_40_fused_ms'])} ms against "
            f"{_fmt(f['l1_40_unfused_ms'])} unfused and {_fmt(f['l1_40_compile_ms'])} for torch.compile "
            f"{on_gpu(s)}")


def goals(rec: dict | None) -> list[dict]:
    """Each goal under each protocol: the paired per-round ratio (num / den, median) and whether it passes."""
    rows = []
    for what, num, den, lowest in GOALS:
        for protocol in ("A", "B"):
            r = _paired(rec or {}, protocol, num, den)
            rows.append({"goal": what, "protocol": protocol, "ratio": r, "needs": f">= {lowest:.3g}",
                         "met": None if r is None else r >= lowest})
    return rows


def verdict_lines(records: dict, source: str) -> list[str]:
    """The verdict the records support, and what they do not cover."""
    block = fused_block(records)
    if not block:
        return [f"No fused-consumer timing to judge ({source})."]
    lines = []
    for g in goals(records.get("timing")):
        state = "not measured" if g["met"] is None else ("met" if g["met"] else "NOT met")
        lines.append(f"{g['goal']} (protocol {g['protocol']}): {_fmt(g['ratio'], '.3f')} — {state}.")
    lines.append(f"Bits (forward and gradients against torch's eager chain, counted where our kernels served): "
                 f"{block['bits_identical']} cases identical, {block['bits_served_by_torch']} served by torch's chain; "
                 f"KernelBench's correctness trials: {block['kernelbench_correct']} ({source}).")
    for row in kernelbench_rows(records.get("kernelbench")):
        if row.get("ModelNew (labkit) mean_ms") is not None:
            lines.append(f"{row['task']} under KernelBench's cuda_event timing (means; ModelNew and the reference with "
                         f"grad on as its evaluator times them, torch.compile under no_grad as its baselines are "
                         f"made): ModelNew {_fmt(row['ModelNew (labkit) mean_ms'])} ms, {row['vs reference']} than "
                         f"the reference, {row['vs torch.compile']} than its torch.compile.")
    return lines


def plain_verdict(records: dict) -> list[str]:
    block = fused_block(records)
    if not block:
        return ["No fused-consumer run yet."]
    met = [g["met"] for g in goals(records.get("timing")) if g["met"] is not None]
    return [f"{sum(met)} of {len(met)} timing goals met at {block['l1_40_shape']}; bits {block['bits_identical']}; "
            f"KernelBench correct {block['kernelbench_correct']}."]


def collect(session) -> dict:
    """The run's records as the readers take them."""
    return {name: session.record(name) for name in ("timing", "bits", "kernelbench")}
