"""Fast-statistics counterexamples: torch.var_mean statistics followed by four output passes, judged by the
official predicate against torch.native_layer_norm, and by the exact oracle against the truth.

Methods (all share one `torch.var_mean(x.reshape(rows, N), dim=1, unbiased=False)`):
  eager        ((x - mean) * rsqrt(var + eps)) * gamma + beta in eager torch (labkit.lab.split_stats, geometry="eager")
  torchscript  the same expression, torch.jit.script'ed (warmed up so the profiling executor may fuse it); if
               TorchScript is missing or raises on the installed torch, every case records the error string
  flat         kernels/split_affine.cu, tiles of one row together (geometry="flat")
  interleaved  kernels/split_affine.cu, rows fastest in the grid (geometry="interleaved")

Cases: "ordinary" = seeds x affine x {uniform, normal, normal_x100} (18 with three seeds), "offset" = seeds x
affine x {normal_plus_1000} (6), "constant_control" = constant 1e4 at (3, 64, 17, 19) with random affine.
"""
from __future__ import annotations

import torch

from labkit.inputs import AFFINES, make_affine, make_input
from labkit.lab.split_stats import scripted_pointwise, split_statistics, split_stats_layer_norm
from labkit.records import check
from labkit.tasks import UNEVEN_SHAPE, shape_key

METHODS = ("eager", "torchscript", "flat", "interleaved", "post_interleaved")  # post_*: the post's own kernel, flags
ORDINARY = ("uniform", "normal", "normal_x100")
OFFSET = ("normal_plus_1000",)
CPU_ORACLE_CONTROLS = ("constant_1e4", "normal_plus_1000")  # the controls the CPU oracle recomputes at UNEVEN_SHAPE
CATEGORIES = ("ordinary", "offset", "constant_control")
WARMUP = 3


def torchscript_status() -> dict:
    """{"available", "error", "warnings", "torch"}: whether torch.jit.script compiles the pointwise here."""
    s = scripted_pointwise()
    return {"torch": torch.__version__, "available": s.available, "error": s.error, "warnings": list(s.warnings)}


def _fast_mean_rstd(x, weight, eps: float):
    """(mean, rstd) of the prototype (labkit.lab.split_stats.split_statistics) for x normalized over weight's shape."""
    n = weight.numel()
    _, mean, rstd = split_statistics(x, x.numel() // n, n, eps)
    return mean, rstd


def fused_graph_kinds() -> list[str]:
    """Fusion nodes in the last optimized TorchScript graph (empty: no fusion happened)."""
    try:
        graph = torch.jit.last_executed_optimized_graph()
    except Exception:
        return []
    return sorted({n.kind() for n in graph.nodes() if "Fusion" in n.kind() or "TensorExpr" in n.kind()})


def method_fn(method: str):
    """candidate(x, weight, bias, eps) -> y for one method (labkit.lab.split_stats geometry of that name)."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")

    def candidate(x, weight, bias, eps):
        if method == "torchscript":
            # TorchScript's profiling executor runs its optimized (possibly fused) graph only after warm-up:
            # judge the code that is timed, not the first call.
            for _ in range(WARMUP):
                split_stats_layer_norm(x, weight, bias, eps, geometry=method)
        return split_stats_layer_norm(x, weight, bias, eps, geometry=method)

    return candidate


def fast_stats_cases(seeds=(0, 1, 2), affines=AFFINES, ordinary=ORDINARY, offset=OFFSET,
                     control_seeds=None) -> list[dict]:
    """The cases (before methods): ordinary and offset at the study shape, constant control at (3, 64, 17, 19)."""
    cases = [{"seed": int(s), "affine": a, "distribution": d, "category": "ordinary"}
             for s in seeds for d in ordinary for a in affines]
    cases += [{"seed": int(s), "affine": a, "distribution": d, "category": "offset"}
              for s in seeds for d in offset for a in affines]
    cases += [{"seed": int(s), "affine": "random_normal", "distribution": "constant_1e4",
               "category": "constant_control", "shape": list(UNEVEN_SHAPE)}
              for s in (seeds if control_seeds is None else control_seeds)]
    return cases


def run_fast_stats(shape, seeds=(0, 1, 2), methods=METHODS, device: str = "cuda", eps: float = 1e-5,
                   affines=AFFINES, log=None) -> dict:
    """The `fast_stats` record: one entry per (case, method) with the official CheckRecord of the output against
    torch.native_layer_norm ("output"; None with "error" if the method could not run), plus how far the
    prototype's mean and rstd are from torch's (ulps) — shared by all methods of a case. `log(line)`, if given,
    hears each entry's verdict as it is computed."""
    from labkit.ops.reference import native_layer_norm
    from labkit.exact.oracle import ulp_steps

    shape = tuple(int(d) for d in shape)
    out = []
    for case in fast_stats_cases(seeds, affines):
        cshape = tuple(case.get("shape", shape))
        x = make_input(case["distribution"], cshape, case["seed"], device)
        w, b = make_affine(case["affine"], cshape[1:], case["seed"], device)
        ref_y, ref_mean, ref_rstd = native_layer_norm(x, w, b, eps)
        fmean, frstd = _fast_mean_rstd(x, w, eps)
        stats = {}
        for stat, a, r in (("mean", fmean, ref_mean), ("rstd", frstd, ref_rstd)):
            a, r = a.cpu().numpy(), r.cpu().numpy()
            try:
                stats[f"{stat}_max_ulp_vs_native"] = int(abs(ulp_steps(a, r)).max())
            except Exception:
                stats[f"{stat}_max_ulp_vs_native"] = None
        for method in methods:
            entry = {**case, "shape": list(cshape), "method": method, "eps": eps, "stats": stats}
            try:
                y = method_fn(method)(x, w, b, eps)
                entry["output"] = check.compare(ref_y, y).to_json()
                entry["error"] = None
                if method == "torchscript":
                    entry["fusion"] = fused_graph_kinds()
                del y
            except Exception as exc:
                entry["output"], entry["error"] = None, f"{type(exc).__name__}: {exc}"
            out.append(entry)
            if log is not None:
                o = entry["output"]
                log(f"{case['category']:16s} s{case['seed']} {case['distribution']:16s} {case['affine']:13s} "
                    f"{method:11s} " + (f"official {'pass' if o['official_pass'] else 'FAIL'}, "
                                        f"{o['bad_finite_candidate_scale']} failing" if o else entry["error"]))
        del x, ref_y
        if device == "cuda":
            torch.cuda.empty_cache()
    return {"cases": out, "methods": list(methods), "shape": list(shape), "eps": eps,
            "torchscript": torchscript_status(), "predicate": check.KERNELBENCH_PREDICATE}


# ------------------------------------------------------------------------------------------- tables ---


def case_table(record: dict | None) -> list[dict]:
    """One row per (case, method)."""
    if not record:
        return []
    rows = []
    for c in record["cases"]:
        o = c["output"]
        base = {"category": c["category"], "seed": c["seed"], "affine": c["affine"], "distribution": c["distribution"],
                "method": c["method"]}
        if o is None:
            rows.append({**base, "official": "ERROR", "failing elements": c["error"]})
            continue
        rows.append({**base, "official": "pass" if o["official_pass"] else "FAIL",
                     "failing elements": o["bad_finite_candidate_scale"] + o["bad_special"],
                     "failing (ref-scaled)": o["bad_finite_reference_scale"],
                     "max abs error": o["max_abs_error"], "max ratio (candidate scale)": o["max_ratio_candidate_scale"],
                     "max ratio (reference scale)": o["max_ratio_reference_scale"],
                     "bit-equal fraction": o["bit_equal_fraction"],
                     "mean ulps vs torch": c["stats"].get("mean_max_ulp_vs_native"),
                     "rstd ulps vs torch": c["stats"].get("rstd_max_ulp_vs_native")})
    return rows


def record_line(record: dict | None, source: str) -> str:
    """What the fast-statistics record holds: its shape, methods, and (case x method) entry counts per category."""
    if not record or not record.get("cases"):
        return f"No fast-statistics record: {source}."
    counts = {cat: sum(c["category"] == cat for c in record["cases"]) for cat in CATEGORIES}
    return (f"record: {len(record['cases'])} (case x method) entries at shape {tuple(record['shape'])} (constant "
            f"control at {UNEVEN_SHAPE}), methods "
            f"{', '.join(map(str, record.get('methods') or [])) or 'none recorded'}; "
            + ", ".join(f"{cat} {n}" for cat, n in counts.items()) + f" — {source}")


def method_summary(record: dict | None) -> list[dict]:
    """Per method and category: cases passing / failing the official predicate, errors, worst ratio."""
    if not record:
        return []
    rows = []
    for m in record.get("methods", METHODS):
        for cat in CATEGORIES:
            cs = [c for c in record["cases"] if c["method"] == m and c["category"] == cat]
            if not cs:
                continue
            ok = [c for c in cs if c["output"]]
            ratios = [c["output"]["max_ratio_candidate_scale"] for c in ok
                      if c["output"]["max_ratio_candidate_scale"] is not None]
            rows.append({"method": m, "category": cat, "cases": len(cs),
                         "official pass": sum(c["output"]["official_pass"] for c in ok),
                         "official fail": sum(not c["output"]["official_pass"] for c in ok),
                         "errors": len(cs) - len(ok),
                         "failing elements (sum)": sum(c["output"]["bad_finite_candidate_scale"]
                                                       + c["output"]["bad_special"] for c in ok),
                         "worst ratio": max(ratios) if ratios else None,
                         "error": next((c["error"] for c in cs if c["error"]), "")})
    return rows


def figure(record: dict | None, title: str = ""):
    """Left: each case's max budget ratio (official, candidate scale; log) per method, the 1.0 line = the check.
    Right: fraction of elements failing, per distribution and method. None if there is no record."""
    if not record:
        return None
    import matplotlib.pyplot as plt
    import numpy as np

    methods = record.get("methods", list(METHODS))
    keys = list(dict.fromkeys((c["category"], c["distribution"], c["seed"], c["affine"]) for c in record["cases"]))
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(14, 4.8), gridspec_kw={"width_ratios": [1.6, 1]})
    floor = 1e-6
    markers = dict(zip(METHODS, ("o", "s", "^", "v")))
    for j, m in enumerate(methods):
        xs, ys = [], []
        for i, k in enumerate(keys):
            c = next((c for c in record["cases"] if c["method"] == m
                      and (c["category"], c["distribution"], c["seed"], c["affine"]) == k), None)
            if c and c["output"] and c["output"]["max_ratio_candidate_scale"] is not None:
                xs.append(i + (j - 1.5) * 0.12)
                ys.append(max(c["output"]["max_ratio_candidate_scale"], floor))
        ax1.scatter(xs, ys, label=m, marker=markers.get(m, "o"), s=22, alpha=0.8)
    ax1.axhline(1.0, color="red", lw=1, ls="--", label="budget (ratio 1 = fails above)")
    ax1.set_yscale("log")
    ax1.set_xticks(range(len(keys)))
    ax1.set_xticklabels([f"{d} s{s} {'rnd' if a == 'random_normal' else 'def'}" for _, d, s, a in keys],
                        rotation=90, fontsize=7)
    ax1.set_ylabel(f"max |diff| / (atol + rtol|cand|)  (floored at {floor:g})")
    ax1.set_title("per-case max budget ratio (official predicate)")
    ax1.legend(fontsize=8)
    dists = list(dict.fromkeys(k[1] for k in keys))
    width = 0.8 / max(len(methods), 1)
    for j, m in enumerate(methods):
        fr = []
        for d in dists:
            cs = [c for c in record["cases"] if c["method"] == m and c["distribution"] == d and c["output"]]
            bad = sum(c["output"]["bad_finite_candidate_scale"] + c["output"]["bad_special"] for c in cs)
            tot = sum(c["output"]["elements"] for c in cs)
            fr.append(bad / tot if tot else 0.0)
        ax2.bar(np.arange(len(dists)) + (j - (len(methods) - 1) / 2) * width, fr, width, label=m)
    ax2.set_xticks(range(len(dists)))
    ax2.set_xticklabels(dists, rotation=20, fontsize=8)
    ax2.set_ylabel("fraction of elements failing")
    ax2.set_title("failing fraction per distribution")
    ax2.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


# ------------------------------------------------------------------------------ CPU-side arithmetic ---


def cpu_counterexamples(fixtures: list[dict], eps: float = 1e-5, shape=UNEVEN_SHAPE, seed: int = 0) -> dict:
    """What the CPU can say about the fast-statistics formula.

    With GPU fixtures: the split-statistics formula evaluated by torch on the CPU (var_mean + eager pointwise) from
    each fixture's inputs, checked against the fixture's torch-on-GPU native output (GPU bits) — and, where the
    fixture carries it, the GPU's own fast-statistics output against the same native output (GPU vs GPU).
    Without fixtures: CPU torch only (split formula vs CPU torch.layer_norm at `shape`), labelled as such — CPU
    torch's LayerNorm is NOT the GPU reference.
    """
    from labkit.records.fixtures import is_gpu_fixture
    from labkit.ops.reference import native_layer_norm
    from labkit.inputs import DISTRIBUTIONS

    rows = []
    gpu_fixtures = [f for f in fixtures if is_gpu_fixture(f)]
    for f in gpu_fixtures:
        x = torch.from_numpy(f["x"])
        w, b = torch.from_numpy(f["gamma"]), torch.from_numpy(f["beta"])
        ref = torch.from_numpy(f["y"])
        y_cpu = method_fn("eager")(x, w, b, f["eps"])
        rows.append({"fixture": f["name"], "reference": "torch native on GPU (fixture bits)",
                     "candidate": "split formula, torch on CPU", **_check_row(ref, y_cpu)})
        if "fast_y" in f:
            rows.append({"fixture": f["name"], "reference": "torch native on GPU (fixture bits)",
                         "candidate": "split formula, torch on GPU (fixture bits)",
                         **_check_row(ref, torch.from_numpy(f["fast_y"]))})
    if gpu_fixtures:
        return {"source": "GPU golden fixtures (data/fixtures) vs the split formula", "rows": rows}
    for dist in DISTRIBUTIONS:
        x = make_input(dist, shape, seed, "cpu")
        w, b = make_affine("random_normal", shape[1:], seed, "cpu")
        ref = native_layer_norm(x, w, b, eps)[0]
        rows.append({"fixture": f"{dist} {shape_key(shape)} s{seed}",
                     "reference": "torch.layer_norm on CPU (NOT the GPU reference)",
                     "candidate": "split formula, torch on CPU", **_check_row(ref, method_fn("eager")(x, w, b, eps))})
    return {"source": "no GPU fixtures yet: CPU torch only", "rows": rows}


def _check_row(ref, cand) -> dict:
    r = check.compare(ref, cand)
    return {"official": "pass" if r.official_pass else "FAIL", "failing elements": r.bad_finite_candidate_scale
            + r.bad_special, "max abs error": r.max_abs_error, "max ratio (candidate scale)":
            r.max_ratio_candidate_scale, "bit-equal fraction": r.bit_equal_fraction}


def oracle_candidates_cpu(fix: dict | None, distribution: str, shape=UNEVEN_SHAPE, seed: int = 0,
                          eps: float = 1e-5) -> tuple[dict, tuple, str]:
    """(candidates, (x, weight, bias), label) for the oracle on the CPU.

    With a GPU fixture: native = the fixture's torch-on-GPU bits, fast stats (GPU) = the fixture's var_mean bits
    and eager output recorded on the GPU, fast stats (CPU) = torch.var_mean on the CPU with the same formula.
    Without: both from CPU torch (labelled so) — torch's CPU LayerNorm is not the GPU kernel.
    """
    from labkit.records.fixtures import is_gpu_fixture
    from labkit.ops.reference import native_layer_norm

    if fix is not None and is_gpu_fixture(fix):
        x, w, b = (torch.from_numpy(fix[k]) for k in ("x", "gamma", "beta"))
        eps = fix["eps"]
        cands = {"native (GPU fixture)": (fix["y"], fix["mean"], fix["rstd"])}
        if "fast_mean" in fix:
            cands["fast stats (GPU fixture)"] = (fix.get("fast_y"), fix["fast_mean"], fix["fast_rstd"])
        fm, fr = _fast_mean_rstd(x, w, eps)
        cands["fast stats (CPU torch)"] = (method_fn("eager")(x, w, b, eps), fm, fr)
        return cands, (x, w, b, eps), f"{fix['name']}: GPU bits from fixture ({fix.get('gpu')}), plus CPU torch"
    x = make_input(distribution, shape, seed, "cpu")
    w, b = make_affine("random_normal", shape[1:], seed, "cpu")
    y, m, r = native_layer_norm(x, w, b, eps)
    fm, fr = _fast_mean_rstd(x, w, eps)
    cands = {"torch.layer_norm (CPU, NOT the GPU reference)": (y, m, r),
             "fast stats (CPU torch)": (method_fn("eager")(x, w, b, eps), fm, fr)}
    return cands, (x, w, b, eps), f"{distribution} {shape} seed {seed}: CPU torch only (no GPU fixture yet)"


def oracle_gpu_candidates(x, w, b, eps: float) -> dict:
    """On the GPU: torch native (= the reference-order kernel's bits, see notebook 01), the prototype's eager
    output with its var_mean statistics, and the interleaved kernel's output (same statistics)."""
    from labkit.ops.reference import native_layer_norm

    y, m, r = native_layer_norm(x, w, b, eps)
    fm, fr = _fast_mean_rstd(x, w, eps)
    return {"native (GPU)": (y, m, r), "fast stats eager (GPU)": (method_fn("eager")(x, w, b, eps), fm, fr),
            "fast stats interleaved kernel (GPU)": (method_fn("interleaved")(x, w, b, eps), fm, fr)}


def run_oracle(shape, distributions=("constant_1e4", "normal_plus_1000", "normal"), seed: int = 0,
               affine: str = "random_normal", device: str = "cuda", eps: float = 1e-5, fixtures=None,
               log=None) -> dict:
    """The `oracle` record: compare_to_truth for each control. On CUDA from live GPU tensors (copied to the CPU);
    on CPU from fixtures or CPU torch (see oracle_candidates_cpu). constant_1e4 always runs at UNEVEN_SHAPE
    (3, 64, 17, 19). `log(line)`, if given, hears how long each case took."""
    from labkit.exact.oracle import compare_to_truth

    cases = []
    for dist in distributions:
        cshape = UNEVEN_SHAPE if dist == "constant_1e4" else tuple(shape)
        if device == "cuda":
            x = make_input(dist, cshape, seed, "cuda")
            w, b = make_affine(affine, cshape[1:], seed, "cuda")
            cands = {k: tuple(t.cpu() if t is not None else None for t in v)
                     for k, v in oracle_gpu_candidates(x, w, b, eps).items()}
            args, label = (x.cpu(), w.cpu(), b.cpu(), eps), f"{dist} {cshape} seed {seed}: live GPU tensors"
            del x
            torch.cuda.empty_cache()
        else:
            from labkit.records.fixtures import find_fixture

            fix = find_fixture(fixtures or [], cshape, dist, seed, affine)
            cands, args, label = oracle_candidates_cpu(fix, dist, cshape, seed, eps)
        res = compare_to_truth(cands, *args)
        cases.append({"distribution": dist, "shape": list(cshape), "seed": seed, "affine": affine, "source": label,
                      **res})
        if log is not None:
            log(f"oracle {label}: {res['seconds']:.1f}s")
    return {"cases": cases}


def cpu_oracle(fixtures, eps: float = 1e-5, seed: int = 0) -> dict:
    """The oracle computed now on this machine at UNEVEN_SHAPE for the constant and offset controls: GPU bits
    where a golden fixture supplies them, CPU torch otherwise (each case's `source` says which)."""
    return run_oracle(UNEVEN_SHAPE, CPU_ORACLE_CONTROLS, seed, device="cpu", eps=eps, fixtures=fixtures)


def oracle_table(record: dict | None) -> list[dict]:
    """Per case and candidate: max |ulps| of mean and rstd from the correctly rounded truth, output errors."""
    if not record:
        return []
    rows = []
    for c in record["cases"]:
        for name, p in c["candidates"].items():
            o = p.get("output") or {}
            rows.append({"case": f"{c['distribution']} {shape_key(c['shape'])}", "candidate": name,
                         "mean max |ulp|": p.get("max_abs_mean_ulp"), "rstd max |ulp|": p.get("max_abs_rstd_ulp"),
                         "output max abs err": o.get("max_abs_err"), "output median abs err": o.get("median_abs_err"),
                         "output median ulp": o.get("median_ulp"),
                         "output median rel err": o.get("median_rel_err")})
    return rows


def oracle_verdicts(record: dict | None) -> list[dict]:
    """Per case: which candidate is closer to the truth for mean, rstd (rows) and output (max error)."""
    if not record:
        return []

    def wins(d: dict, tied: int | None = None) -> str:
        parts = [f"{k}: {n}" for k, n in (d or {}).items()]
        return "; ".join(parts + ([f"tied: {tied}"] if tied is not None else []))

    out = []
    for c in record["cases"]:
        v = c["verdict"]
        out.append({"case": f"{c['distribution']} {shape_key(c['shape'])}", "source": c["source"],
                    "mean: closer": v["mean"]["closer"],
                    "mean rows closer": wins(v["mean"]["rows_closer"], v["mean"]["rows_tied"]),
                    "rstd: closer": v["rstd"]["closer"],
                    "rstd rows closer": wins(v["rstd"]["rows_closer"], v["rstd"]["rows_tied"]),
                    "output: closer (max err)": v.get("output", {}).get("closer"),
                    "output elements closer": wins(v.get("output", {}).get("elements_closer"),
                                                   v.get("output", {}).get("elements_tied"))})
    return out


def torchscript_report(record: dict | None, source: str) -> list[dict]:
    """TorchScript as recorded in the run (if any) and on this machine now."""
    rows = []
    if record and record.get("torchscript"):
        t = record["torchscript"]
        fusion = sorted({k for c in record["cases"] if c["method"] == "torchscript" for k in c.get("fusion") or []})
        rows.append({"where": source, "torch": t["torch"], "torch.jit.script works": t["available"],
                     "error": t["error"] or "", "deprecated in that torch": bool(t["warnings"]),
                     "fusion nodes seen": ", ".join(fusion) or "none"})
    t = torchscript_status()
    rows.append({"where": "this machine, now", "torch": t["torch"], "torch.jit.script works": t["available"],
                 "error": t["error"] or "", "deprecated in that torch": bool(t["warnings"]),
                 "fusion nodes seen": "n/a"})
    return rows


def oracle_headline(record: dict | None, what: str) -> str:
    """One sentence per oracle case: which candidate is closer to the exact truth, per statistic."""
    if not record:
        return f"No oracle verdict: {what}."
    lines = []
    for c in record["cases"]:
        v = c["verdict"]
        worst = "; ".join(f"{k} {p.get('max_abs_mean_ulp')} / {p.get('max_abs_rstd_ulp')}"
                          for k, p in c["candidates"].items())
        lines.append(f"{c['distribution']} {tuple(c['shape'])} [{c['source']}]: mean closer: {v['mean']['closer']}; "
                     f"rstd closer: {v['rstd']['closer']}; output closer: {v.get('output', {}).get('closer')} "
                     f"(max |ulp| from the correctly rounded truth, mean/rstd: {worst})")
    return f"Oracle ({what}):\n" + "\n".join(lines)


def headline(record: dict | None, source: str) -> str:
    """Counts of the official verdict per category (method x case combinations)."""
    if not record:
        return f"No fast-statistics counts: {source}."
    blk = fast_stats_block({"fast_stats": record})
    return (f"Ordinary cases passing the official check: {blk['ordinary_pass']}/{blk['ordinary_cases']}; offset "
            f"(+1000) cases failing it: {blk['offset_fail']}/{blk['offset_cases']}; constant-control failing: "
            f"{blk['constant_control_fail']}/{blk['constant_control_cases']} (counts are method x case "
            f"combinations; {blk['errors']} combinations could not run) — {source}.")


# --- the run's summary and headline (labkit.studies.catalog dispatches here) -------------------------------------

RUN_NAME = "fast_stats_counterexamples"
NOTEBOOK = "02_fast_stats_counterexamples"


def fast_stats_block(records: dict) -> dict | None:
    """Headline counts of a `fast_stats` record (notebook 02), read as recorded.

    Every count is over (method x case) combinations — e.g. 4 methods x 18 ordinary cases = 72 — not over input
    cases. A combination whose method could not run (e.g. TorchScript raising on the installed torch) has no
    output: it is counted in `errors` and in no other count. `ordinary_pass`: ordinary combinations passing the
    official predicate; `offset_fail`: offset (+1000) combinations failing it; `per_method` repeats the counts for
    each method.
    """
    cases = records.get("fast_stats", {}).get("cases")
    if not cases:
        return None

    def counts(cs: list) -> dict:
        ran = [c for c in cs if c.get("output")]
        by = {cat: [c for c in ran if c.get("category") == cat] for cat in ("ordinary", "offset", "constant_control")}
        return {"ordinary_pass": sum(bool(c["output"]["official_pass"]) for c in by["ordinary"]),
                "ordinary_cases": len(by["ordinary"]),
                "offset_fail": sum(not c["output"]["official_pass"] for c in by["offset"]),
                "offset_cases": len(by["offset"]),
                "constant_control_fail": sum(not c["output"]["official_pass"] for c in by["constant_control"]),
                "constant_control_cases": len(by["constant_control"]),
                "errors": len(cs) - len(ran)}

    methods = list(dict.fromkeys(c.get("method") for c in cases))
    return {**counts(cases), "per_method": {m: counts([c for c in cases if c.get("method") == m]) for m in methods}}


def fast_stats_line(f: dict) -> str:
    return (f"fast statistics: ordinary {f['ordinary_pass']}/{f['ordinary_cases']} pass, offset "
            f"{f['offset_fail']}/{f['offset_cases']} fail, constant control {f['constant_control_fail']}/"
            f"{f['constant_control_cases']} fail, {f['errors']} error(s) ({len(f.get('per_method', {}))} methods)")


def summary(records: dict, prov: dict) -> dict:
    from labkit.records import post_compare

    out = {}
    if block := fast_stats_block(records):
        out["fast_stats"] = block
    if records.get("fast_stats"):
        out["post"] = post_compare.block(post_compare.fast_stats_rows(records["fast_stats"], prov))
    return out


def summary_lines(s: dict) -> list[str]:
    return [fast_stats_line(s["fast_stats"])] if s.get("fast_stats") else []


def page_headline(records: dict, summary: dict) -> str:
    from labkit.records.text import on_gpu

    f = summary["fast_stats"]
    return (f"fast statistics pass the official check in {f['ordinary_pass']}/{f['ordinary_cases']} ordinary "
            f"combinations and fail it in {f['offset_fail']}/{f['offset_cases']} offset (+1000) ones {on_gpu(summary)}")


def plain_verdict(record: dict | None, oracle: dict | None) -> list[str]:
    """The page's short verdict: a few plain sentences, every number from the records."""
    if not record or not (blk := fast_stats_block({"fast_stats": record})):
        return ["No fast-statistics run to judge."]
    out = [f"Taking the statistics from torch.var_mean changes the answer: the fast statistics pass the official "
           f"check in {blk['ordinary_pass']} of {blk['ordinary_cases']} ordinary cases, but fail it in "
           f"{blk['offset_fail']} of {blk['offset_cases']} cases offset by +1000 and in "
           f"{blk['constant_control_fail']} of {blk['constant_control_cases']} constant-1e4 controls (counts over "
           f"method x case).",
           "So they are no substitute for torch's LayerNorm where a row's mean is large against its spread."]
    for c in (oracle or {}).get("cases", []):
        cands = c["candidates"]
        native = next((k for k in cands if k.startswith("native")), None)
        fast = next((k for k in cands if k != native), None)
        if native and fast and c["distribution"] in ("normal_plus_1000", "constant_1e4"):
            a, b = cands[fast].get("max_abs_rstd_ulp"), cands[native].get("max_abs_rstd_ulp")
            word = "closer than" if a is not None and b is not None and a < b else "no closer than"
            out.append(f"Against the exact truth ({c['distribution'].replace('_', ' ')}, "
                       f"{shape_key(c['shape'])}), the fast statistics are {word} torch's: worst rstd "
                       f"{cands[fast].get('max_abs_rstd_ulp')} ulp from the correctly rounded value against torch's "
                       f"{cands[native].get('max_abs_rstd_ulp')}.")
    out.append("Failing the check means differing from torch, not being further from the truth.")
    return out[:5]
