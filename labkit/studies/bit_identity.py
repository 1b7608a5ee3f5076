"""The bit-identity matrix of the reference-order kernel against torch.native_layer_norm, and its controls.

- `run_matrix`: seeds x affine {default, random_normal} x 5 distributions (30 cases with three seeds), each a
  `identity.compare_to_native` record (output, mean, rstd as int32 views) plus seed/affine/distribution/shape;
- `graph_replay`: capture the kernel in a CUDA graph, mutate x, gamma, beta in place, replay, compare;
- `uneven_width`: the row width 20,672 = 64*17*19 (not a multiple of 512) at (3, 64, 17, 19), every distribution,
  including the constant-offset controls (normal + 1000, constant 1e4);
- `edge_controls`: zero, tiny, subnormal and non-finite inputs x eps in {0, 1e-5, 1e-3}, judged by bits, by the
  official predicate, and — reported apart, never as an official pass — by the named equal-NaN convention.

Run functions return records; the table, summary and verdict functions read a record (live or replayed alike).
"""
from __future__ import annotations

import math

from labkit import tasks
from labkit.inputs import AFFINES, DISTRIBUTIONS, make_affine, make_input
from labkit.records import check
from labkit.records.check import identical_count
from labkit.tasks import EDGE_SHAPE, UNEVEN_SHAPE

EDGE_KINDS = ("zero", "tiny", "subnormal", "nonfinite")
EDGE_EPS = (0.0, 1e-5, 1e-3)
MUTATION = "x *= 0.8, gamma *= 0.9, beta += 0.01 (in place, after capture)"
EQUAL_NAN = ("equal_nan_allclose: torch.allclose(reference, candidate, atol=1e-4, rtol=1e-4, equal_nan=True) — "
             "a stress-check convention, NOT the official predicate")
CONTROLS = {"normal_plus_1000": "offset control", "constant_1e4": "constant-offset control"}


def shape_for(mode: str, shape=None) -> tuple:
    """The matrix shape: an explicit override, else the mode's `tasks.config(mode).matrix_shape`."""
    if shape:
        return tuple(int(d) for d in shape)
    return tasks.config(mode).matrix_shape


def matrix_cases(seeds=(0, 1, 2), affines=AFFINES, distributions=DISTRIBUTIONS) -> list[dict]:
    """The matrix's cases in run order (seed, then distribution, then affine: one input serves both affines)."""
    for a in affines:
        if a not in AFFINES:
            raise ValueError(f"affine must be one of {AFFINES}, got {a!r}")
    for d in distributions:
        if d not in DISTRIBUTIONS:
            raise ValueError(f"distribution must be one of {DISTRIBUTIONS}, got {d!r}")
    return [{"name": f"s{s}-{d}-{a}", "seed": int(s), "affine": a, "distribution": d}
            for s in seeds for d in distributions for a in affines]


def reference_candidate(x, weight, bias, eps):
    """The kernel under test: labkit's reference-order LayerNorm, returning (y, mean, rstd)."""
    from labkit.ops.reference_order import reference_order_layer_norm

    return reference_order_layer_norm(x, weight, bias, eps, return_stats=True)


def _native_candidate(x, weight, bias, eps):
    from labkit.ops.reference import native_layer_norm

    return native_layer_norm(x, weight, bias, eps)


def default_candidate(device: str):
    """The reference-order kernel on CUDA; on CPU torch itself (a plumbing check of the record format only)."""
    return reference_candidate if device == "cuda" else _native_candidate


def run_matrix(shape, seeds=(0, 1, 2), affines=AFFINES, distributions=DISTRIBUTIONS, device: str = "cuda",
               eps: float = 1e-5, candidate=None, log=None) -> dict:
    """The `bit_identity` record: {"cases": [compare_to_native record + seed/affine/distribution/shape/name]}.
    `log(line)`, if given, hears each case's verdict as it is computed."""
    import torch

    from labkit.studies.identity import compare_to_native

    candidate = candidate or default_candidate(device)
    shape = tuple(int(d) for d in shape)
    cases, x, x_key = [], None, None
    for case in matrix_cases(seeds, affines, distributions):
        key = (case["seed"], case["distribution"])
        if key != x_key:
            x = None
            if device == "cuda":
                torch.cuda.empty_cache()
            x, x_key = make_input(case["distribution"], shape, case["seed"], device), key
        w, b = make_affine(case["affine"], shape[1:], case["seed"], device)
        rec = compare_to_native(candidate, x, w, b, eps, {**case, "shape": list(shape), "eps": eps})
        cases.append(rec)
        if log is not None:
            log(f"{case['name']}: {'identical' if rec['identical'] else 'DIFFERENT'}")
    return {"cases": cases, "candidate": getattr(candidate, "__name__", str(candidate)), "shape": list(shape),
            "eps": eps}


def graph_replay(shape, seed: int = 2, distribution: str = "uniform", affine: str = "random_normal",
                 eps: float = 1e-5) -> dict:
    """Capture reference_order_layer_norm in a CUDA graph, replay once as captured, then mutate the captured
    tensors in place and replay again: both replays compared with torch on the current values."""
    import torch

    from labkit.ops.reference import native_layer_norm

    shape = tuple(int(d) for d in shape)
    x = make_input(distribution, shape, seed, "cuda")
    w, b = make_affine(affine, shape[1:], seed, "cuda")
    for _ in range(3):  # warm-up on the side stream is torch's recommendation; also loads the modules
        reference_candidate(x, w, b, eps)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y, mean, rstd = reference_candidate(x, w, b, eps)

    def compare_now():
        ref = native_layer_norm(x, w, b, eps)
        recs = {k: check.compare(r, got) for k, r, got in zip(("output", "mean", "rstd"), ref, (y, mean, rstd))}
        return {**{k: v.to_json() for k, v in recs.items()}, "identical": all(v.identical for v in recs.values())}

    g.replay()
    torch.cuda.synchronize()
    before = compare_now()
    y_before = y.clone()
    x.mul_(0.8)
    w.mul_(0.9)
    b.add_(0.01)
    g.replay()
    torch.cuda.synchronize()
    after = compare_now()
    changed = int((y_before.view(torch.int32) != y.view(torch.int32)).sum().item())
    del g
    return {"shape": list(shape), "seed": seed, "distribution": distribution, "affine": affine, "eps": eps,
            "mutation": MUTATION, "before_mutation": before, "after_mutation": after,
            "output_elements_changed_by_mutation": changed, "identical": before["identical"] and after["identical"]}


def uneven_width(seeds=(0, 1, 2), device: str = "cuda", eps: float = 1e-5, candidate=None) -> dict:
    """The `uneven_width` record: every distribution and affine at (3, 64, 17, 19), N = 20,672."""
    rec = run_matrix(UNEVEN_SHAPE, seeds, AFFINES, DISTRIBUTIONS, device, eps, candidate)
    for c in rec["cases"]:
        c["control"] = CONTROLS.get(c["distribution"], "")
    rec["n"] = math.prod(UNEVEN_SHAPE[1:])
    return rec


def edge_input(kind: str, shape=EDGE_SHAPE, seed: int = 0, device: str = "cpu"):
    """zero: all zeros; tiny: N(0,1) * 1e-30 (squares underflow); subnormal: N(0,1) * 1e-41 (every value
    subnormal); nonfinite: N(0,1) with row 0 holding a NaN, row 1 a +inf, row 2 both infinities, row 3 finite."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    base = torch.randn(shape, generator=gen)
    if kind == "zero":
        x = torch.zeros(shape)
    elif kind == "tiny":
        x = base * 1e-30
    elif kind == "subnormal":
        x = base * 1e-41
    elif kind == "nonfinite":
        x = base.clone()
        rows = x.reshape(shape[0], -1)
        rows[0, 3] = float("nan")
        if shape[0] > 1:
            rows[1, 5] = float("inf")
        if shape[0] > 2:
            rows[2, 1], rows[2, 7] = float("inf"), float("-inf")
    else:
        raise ValueError(f"edge kind must be one of {EDGE_KINDS}, got {kind!r}")
    return x.to(device)


def edge_controls(device: str = "cuda", seed: int = 0, shape=EDGE_SHAPE, kinds=EDGE_KINDS, eps_values=EDGE_EPS,
                  candidate=None) -> dict:
    """The `edge_controls` record. Per case: the bit verdict (`identical`), the official predicate on each of
    output/mean/rstd (`official_pass`, equal_nan=False), and the equal-NaN convention (`equal_nan_pass`) kept
    apart under its own name."""
    import torch

    from labkit.ops.reference import native_layer_norm
    from labkit.studies.identity import compare_to_native

    candidate = candidate or default_candidate(device)
    shape = tuple(int(d) for d in shape)
    cases = []
    for kind in kinds:
        x = edge_input(kind, shape, seed, device)
        w, b = make_affine("random_normal", shape[1:], seed, device)
        for eps in eps_values:
            rec = compare_to_native(candidate, x, w, b, eps, {"kind": kind, "eps": eps, "seed": seed,
                                                              "shape": list(shape)})
            ref = native_layer_norm(x, w, b, eps)
            got = candidate(x, w, b, eps)
            rec["official_pass"] = all(rec[k]["official_pass"] for k in ("output", "mean", "rstd"))
            rec["equal_nan_pass"] = all(check.equal_nan_allclose(r, g) for r, g in zip(ref, got))
            rec["reference_nan_outputs"] = int(torch.isnan(ref[0]).sum().item())
            rec["reference_inf_outputs"] = int(torch.isinf(ref[0]).sum().item())
            cases.append(rec)
    return {"shape": list(shape), "official_predicate": check.KERNELBENCH_PREDICATE, "convention": EQUAL_NAN,
            "candidate": getattr(candidate, "__name__", str(candidate)), "cases": cases}


# ------------------------------------------------------------------------------------------------ tables ---


def matrix_table(record: dict | None) -> list[dict]:
    """One row per case: bit-equal fractions of output/mean/rstd and the verdict."""
    if not record:
        return []
    return [{"seed": c["seed"], "affine": c["affine"], "distribution": c["distribution"],
             "shape": tasks.shape_key(c["shape"]), "output bits equal": c["output"]["bit_equal_fraction"],
             "mean": c["mean"]["bit_equal_fraction"], "rstd": c["rstd"]["bit_equal_fraction"],
             "max |diff| output": c["output"]["max_abs_error"] or 0.0,
             "identical": "yes" if c["identical"] else "NO"} for c in record["cases"]]


def uneven_table(record: dict | None) -> list[dict]:
    return [{**row, "control": c.get("control", "")}
            for row, c in zip(matrix_table(record), (record or {}).get("cases", []))]


def graph_table(record: dict | None) -> list[dict]:
    if not record:
        return []
    shape = tasks.shape_key(record["shape"])  # the record's shape, whatever this execution's mode
    return [{"replay": label, "shape": shape, "output bits equal": r["output"]["bit_equal_fraction"],
             "mean": r["mean"]["bit_equal_fraction"], "rstd": r["rstd"]["bit_equal_fraction"],
             "identical": "yes" if r["identical"] else "NO"}
            for label, r in (("as captured", record["before_mutation"]),
                             (f"after {record['mutation']}", record["after_mutation"]))] + [
        {"replay": "output elements changed by the mutation (must be > 0)", "shape": shape,
         "output bits equal": record["output_elements_changed_by_mutation"]}]


def edge_table(record: dict | None) -> list[dict]:
    """Bits and the official predicate first; the equal-NaN convention last, in a column that says it is not it."""
    if not record:
        return []
    return [{"kind": c["kind"], "eps": c["eps"], "NaN in torch output": c["reference_nan_outputs"],
             "inf in torch output": c["reference_inf_outputs"],
             "bit-identical (output, mean, rstd)": "yes" if c["identical"] else "NO",
             "OFFICIAL allclose (equal_nan=False)": "pass" if c["official_pass"] else "fail",
             "equal-NaN convention (NOT official)": "pass" if c["equal_nan_pass"] else "fail"}
            for c in record["cases"]]


def record_line(record: dict | None, source: str) -> str:
    """What the matrix record holds (its shape, case count, seeds, affines, distributions, candidate), so the
    table below it is read against the run that made it rather than this execution's parameters."""
    if not record or not record.get("cases"):
        return f"No bit-identity matrix record: {source}."
    cases = record["cases"]
    shapes = list(dict.fromkeys(tuple(c["shape"]) for c in cases))
    seeds = list(dict.fromkeys(c["seed"] for c in cases))
    affines = list(dict.fromkeys(c["affine"] for c in cases))
    dists = list(dict.fromkeys(c["distribution"] for c in cases))
    return (f"record: {len(cases)} cases at shape {', '.join(map(str, shapes))} (seeds {', '.join(map(str, seeds))}, "
            f"{len(affines)} affines, {len(dists)} distributions; candidate {record.get('candidate')}) — {source}")


def verdict(record: dict | None, prov: dict | None, source: str) -> str:
    """The verdict line: identical cases / cases, torch version and GPU of the run the numbers come from."""
    if not record or not record.get("cases"):
        return f"No bit-identity verdict: {source}."
    cases = record["cases"]
    ok, n = identical_count(cases)
    bad = [c.get("name") or f"s{c['seed']}-{c['distribution']}-{c['affine']}" for c in cases if not c["identical"]]
    prov = prov or {}
    line = (f"{ok}/{n} cases bit-identical (output, mean, rstd as int32 views) at shape "
            f"{tuple(cases[0]['shape'])} — torch {prov.get('torch')} on {prov.get('gpu')} ({source}).")
    return line + (f" NOT identical: {', '.join(bad)}." if bad else "")


# --- the run's summary and headline (labkit.studies.catalog dispatches here) -------------------------------------

RUN_NAME = "bit_identity"
NOTEBOOK = "01_bit_identity"


def identity_block(records: dict, prov: dict) -> dict | None:
    """{"cases", "identical", "torch", "gpu"} of a run's `bit_identity` record (notebooks 00, 01, 07)."""
    cases = records.get("bit_identity", {}).get("cases")
    if not cases:
        return None
    identical, n = identical_count(cases)
    return {"cases": n, "identical": identical, "torch": prov.get("torch"), "gpu": prov.get("gpu")}


def identity_line(b: dict) -> str:
    return f"bit identity: {b['identical']}/{b['cases']} cases bit-identical to torch"


def summary(records: dict, prov: dict) -> dict:
    """`labkit summary`'s blocks of a bit_identity run: the matrix counts and the post beside them."""
    from labkit.records import post_compare

    out = {}
    if block := identity_block(records, prov):
        out["bit_identity"] = block
    if records.get("bit_identity") and (records.get("uneven_width") or records.get("edge_controls")):
        out["post"] = post_compare.block(post_compare.bit_identity_rows(
            records["bit_identity"], records.get("uneven_width"), records.get("edge_controls"), prov))
    return out


def summary_lines(s: dict) -> list[str]:
    return [identity_line(s["bit_identity"])] if s.get("bit_identity") else []


def page_headline(records: dict, s: dict) -> str:
    from labkit.records.text import on_gpu

    b = s["bit_identity"]
    shape = records["bit_identity"].get("shape")
    at = f" at {tuple(shape)}" if shape else ""
    return f"{b['identical']}/{b['cases']} bit-identical{at} {on_gpu(s)}"
