"""The timing study: every registered LayerNorm method, checked, then timed under two protocols, per shape.

Per case (shape x affine; inputs from labkit.inputs, uniform, one fixed seed):
1. build and call every method once (compilers compile here, outside any timed region); a method that cannot be
   built or raises becomes a row with its error;
2. compare its output with native `torch.nn.functional.layer_norm` (labkit.records.check.compare: the official predicate
   and the bit-equal fraction); only methods passing the official predicate are timed, the others are listed
   with their failure;
3. protocol A (graph replay; a method whose graph capture fails is listed, not dropped) and protocol B (eager,
   L2 flushed), both with baseline "native" and paired per-round ratios;
4. achieved bandwidth = BYTES_FORMULA / median time, against a device-copy ceiling measured in the same run.

The result is one JSON-able dict (the `timing` record of a run); tables, plots and the verdict are computed from
a record, so live and replayed runs render the same way. Shapes and the quick-mode round caps come from
labkit.tasks.
"""
from __future__ import annotations

import re

import math
import time
from dataclasses import asdict, is_dataclass, replace

from labkit import tasks
from labkit.records.check import KERNELBENCH_PREDICATE, compare
from labkit.studies import bench
from labkit.studies.measure import COPY_CEILING_BYTES, copy_ceiling, default_timer, gbps, timeable
from labkit.tasks import L1_40, UNEVEN_SHAPE, shape_key

BASELINE = "native"
DISTRIBUTION = "uniform"
EPS = 1e-5
ELEMENT_BYTES = 4
BYTES_FORMULA = ("bytes = 4 * (rows*N + rows*N + 2*N): read x, write y, read gamma and beta once "
                 "(float32; N = normalized size). The minimum traffic of any LayerNorm; a method that reads x "
                 "twice moves more than it is credited with. Device copy: bytes = 2 * buffer bytes (read + write).")
RECORD_SCHEMA = 1


# --- cases, bytes, protocols ------------------------------------------------------------------------------------

def case_key(shape, affine: str) -> str:
    return f"{shape_key(shape)}/{affine}"


def cases_for(shapes) -> list[dict]:
    """The L1/40 shape with default and random affine; every other shape with random affine. Each case normalizes
    over all dims but the first."""
    out = []
    for shape in shapes:
        shape = tuple(int(d) for d in shape)
        if len(shape) < 2:
            raise ValueError(f"a timing shape needs a row dim and normalized dims, got {shape}")
        for affine in (("default", "random_normal") if shape == L1_40 else ("random_normal",)):
            out.append({"key": case_key(shape, affine), "shape": list(shape), "normalized_shape": list(shape[1:]),
                        "affine": affine})
    return out


def byte_count(shape, normalized_shape=None) -> int:
    """BYTES_FORMULA: read x, write y, read gamma and beta once (float32)."""
    numel = math.prod(int(d) for d in shape)
    n = math.prod(int(d) for d in (normalized_shape if normalized_shape is not None else shape[1:]))
    return ELEMENT_BYTES * (2 * numel + 2 * n)


def _capped(rounds: int, cap: int | None) -> int:
    return rounds if cap is None else min(rounds, cap)


def protocols_for(mode: str, which=("A", "B"), rounds: int = 35, repeats: int = 5, rounds_b: int = 100) -> dict:
    """Protocol A (the post's) and B (KernelBench's) as run in this notebook; the mode's config
    (tasks.config(mode).max_rounds_a / max_rounds_b) caps the rounds."""
    cfg = tasks.config(mode)
    unknown = set(which) - {"A", "B"}
    if unknown or not which:
        raise ValueError(f"protocols must be a non-empty subset of ['A', 'B'], got {list(which)}")
    out = {}
    if "A" in which:
        out["A"] = replace(bench.PROTOCOL_A, rounds=_capped(rounds, cfg.max_rounds_a), repeats=repeats)
    if "B" in which:
        out["B"] = replace(bench.PROTOCOL_B, rounds=_capped(rounds_b, cfg.max_rounds_b))
    return out


def estimate_calls(n_methods: int, protocols: dict) -> dict:
    """Calls per method per case: warmups + (A: one capture) + rounds x repeats, per protocol; `protocols` holds
    bench.Protocol objects or their recorded dicts."""
    recorded = {k: asdict(p) if is_dataclass(p) else p for k, p in protocols.items()}
    return {k: p["warmups"] + (1 if p["graph"] else 0) + p["rounds"] * p["repeats"] for k, p in recorded.items()} | {
        "methods": n_methods}


# --- eligibility ------------------------------------------------------------------------------------------------

def eligible_names(method_rows: dict) -> list[str]:
    """Methods that ran and pass the official predicate on the timing input, in row order."""
    return [name for name, row in method_rows.items()
            if row.get("error") is None and row.get("check") and row["check"].get("official_pass") is True]


_MISSING_MODULE = re.compile(r"No module named '([\w.]+)'")
_TRITON_BLOCK = re.compile(r"n = (\d+) exceeds the recommended Triton blocksize = (\d+)")


def error_text(error: str) -> str:
    """A recorded error as a reader needs it: a missing package named as such, anything else as recorded."""
    if m := _MISSING_MODULE.search(error):
        return f"not timed: {m.group(1).split('.')[0]} is not installed where this ran"
    if m := _TRITON_BLOCK.search(error):  # Liger's own row-size limit
        return (f"refused by the peer itself: its Triton kernel takes rows of at most {int(m.group(2)):,} "
                f"elements, these have {int(m.group(1)):,}")
    return error


def note_text(row: dict) -> str:
    """A method's note: how it was built when that matters (TorchScript, whose deprecation notices the run keeps in
    its notes) or its error."""
    notes = row.get("notes", {})
    if notes.get("deprecation"):
        how = notes.get("compiled_with", "torch.jit.script")
        whose = "the post's TorchScript route" if "trace" in how else "the book's TorchScript route"
        return f"built with {how}, {whose} (the installed torch marks TorchScript deprecated)"
    return error_text(row["error"]) if row.get("error") else ""


def failure_text(row: dict) -> str:
    """Why a method is not in the timing table, from its row."""
    if row.get("error"):
        return error_text(row["error"])
    if row.get("status") == "eligible":
        return "passed the official check but was not timed: see the protocol errors of this case"
    c = row.get("check")
    if c and not c.get("official_pass"):
        return (f"fails {KERNELBENCH_PREDICATE}: {c['bad_finite_candidate_scale']} finite elements over the budget"
                f" (max |diff|/limit {c['max_ratio_candidate_scale']:.3g}), {c['bad_special']} non-finite mismatches")
    return "not checked"


# --- timing machinery -------------------------------------------------------------------------------------------

def run_case(case: dict, methods: list, protocols: dict, device="cuda", seed: int = 0, eps: float = EPS,
             ceiling: dict | None = None, timer_factory=None) -> dict:
    """Check and time every method on one case; returns the case's record (JSON-able)."""
    import torch

    from labkit.inputs import make_affine, make_input
    from labkit.studies.methods import build

    cuda = str(device).startswith("cuda")
    if not cuda and any(p.graph for p in protocols.values()):
        raise ValueError("graph-replay protocols need a CUDA device")
    timer_factory = timer_factory or default_timer
    t0 = time.perf_counter()
    shape, nshape = tuple(case["shape"]), tuple(case["normalized_shape"])
    x = make_input(DISTRIBUTION, shape, seed, device)
    weight, bias = make_affine(case["affine"], nshape, seed, device)
    with torch.no_grad():
        reference = torch.nn.functional.layer_norm(x, nshape, weight, bias, eps)
    rows, fns = {}, {}
    for m in methods:
        built = build(m, x, weight, bias, eps)
        row = {"family": m.family, "reference_order": m.reference_order, "build_s": built["build_s"],
               "notes": built["notes"], "error": built["error"], "check": None, "status": "unavailable",
               "excluded": {}}
        if built["error"] is None:
            try:
                row["check"] = compare(reference, built["output"]).to_json()
                row["status"] = "eligible" if row["check"]["official_pass"] else "failed_check"
            except Exception as exc:
                row["error"] = f"check raised {type(exc).__name__}: {str(exc).strip()[:400]}"
                row["status"] = "check_error"
        rows[m.name] = row
        if row["status"] == "eligible":
            fns[m.name] = built["fn"]
        del built
    del reference
    if BASELINE not in fns:
        raise RuntimeError(f"the baseline {BASELINE!r} is not eligible on {case['key']}: {rows.get(BASELINE)}")
    timing, timing_errors = {}, {}
    with torch.no_grad():
        for key, protocol in protocols.items():
            names = timeable(fns, protocol, rows, key, 3)
            if BASELINE not in names:
                timing_errors[key] = f"baseline {BASELINE!r} cannot be graph-captured; protocol {key} skipped"
                continue
            try:
                rec = bench.time_methods({n: fns[n] for n in names}, protocol, baseline=BASELINE,
                                         timer=timer_factory(protocol))
                timing[key] = rec.to_json()
            except Exception as exc:
                timing_errors[key] = f"{type(exc).__name__}: {str(exc).strip()[:600]}"
            if cuda:
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
    for name, row in rows.items():
        if any(name in t["samples_ms"] for t in timing.values()):
            row["status"] = "timed"
    nbytes = byte_count(shape, nshape)
    bandwidth = {}
    for key, t in timing.items():
        ceil = (ceiling or {}).get(key, {}).get("median_gbps")
        bandwidth[key] = {name: {"median_gbps": gbps(nbytes, s["median_ms"]),
                                 "fraction_of_copy_ceiling": (gbps(nbytes, s["median_ms"]) / ceil) if ceil else None}
                          for name, s in t["stats"].items()}
    del x, weight, bias, fns
    if cuda:
        torch.cuda.empty_cache()
    return {**case, "rows": math.prod(shape) // math.prod(nshape), "n": math.prod(nshape), "bytes": nbytes,
            "seed": seed, "distribution": DISTRIBUTION, "eps": eps, "methods": rows,
            "eligible": eligible_names(rows), "timing": timing, "timing_errors": timing_errors,
            "bandwidth": bandwidth, "wall_s": time.perf_counter() - t0}


VERSIONED_PACKAGES = ("triton", "liger-kernel", "numpy", "cupy-cuda13x")  # besides torch, in the record


def versions() -> dict:
    import torch

    from labkit.studies.methods import package_versions

    return {"torch": torch.__version__, **package_versions(VERSIONED_PACKAGES)}


def run_study(cases: list, protocols: dict, device="cuda", seed: int = 0, eps: float = EPS, methods=None,
              ceiling_bytes: int = COPY_CEILING_BYTES, timer_factory=None,
              log=None) -> dict:
    """Measure the copy ceiling, then run every case; the `timing` record of a run. `log(line)`, if given, hears
    each case start and finish."""
    from labkit.studies import methods as registry

    log = log or (lambda line: None)
    if methods is None:
        methods = registry.registered()
    t0 = time.perf_counter()
    log(f"[timing] device copy ceiling ({ceiling_bytes >> 20} MiB buffer) ...")
    ceiling = copy_ceiling(protocols, ceiling_bytes, device, timer_factory)
    done = []
    for case in cases:
        log(f"[timing] {case['key']} ...")
        rec = run_case(case, methods, protocols, device, seed, eps, ceiling, timer_factory)
        log(f"[timing] {case['key']}: timed {rec['eligible']} in {rec['wall_s']:.1f}s")
        done.append(rec)
    return {"schema": RECORD_SCHEMA, "baseline": BASELINE, "distribution": DISTRIBUTION, "seed": seed, "eps": eps,
            "byte_formula": BYTES_FORMULA, "protocols": {k: asdict(p) for k, p in protocols.items()},
            "methods": [m.to_json() for m in methods],
            "versions": versions(),
            "clocks": "left alone: no clock locking, no persistence-mode or power-limit changes",
            "copy_ceiling": ceiling, "cases": done, "wall_s": time.perf_counter() - t0}


def run(mode: str, device="cuda", shapes=None, protocols=("A", "B"), rounds: int = 35, repeats: int = 5,
        rounds_b: int = 100, seed: int = 0, log=None, **study) -> dict:
    """The study as a notebook runs it: the mode's shapes (tasks.config(mode).timing_shapes) unless `shapes` is
    given, the protocols with the mode's round caps; returns the `timing` record. `study`: further run_study
    arguments (methods, ceiling_bytes, timer_factory)."""
    shapes = [tuple(s) for s in shapes] if shapes else tasks.config(mode).timing_shapes
    return run_study(cases_for(shapes), protocols_for(mode, protocols, rounds, repeats, rounds_b), device=device,
                     seed=seed, log=log, **study)


def compile_records() -> list[dict]:
    """The compile records of every kernel this process loaded (the run's `compile` record)."""
    from labkit.core.launch import loaded_records

    return [r.to_json() for r in loaded_records()]


# --- tables from a record (each takes None, the record of no run, and returns no rows) -------------------------

def _case(record: dict, key: str) -> dict:
    for c in record["cases"]:
        if c["key"] == key:
            return c
    raise KeyError(f"no case {key!r}; have {[c['key'] for c in record['cases']]}")


def case_keys(record: dict | None) -> list[str]:
    return [c["key"] for c in (record or {}).get("cases", [])]


def record_line(record: dict | None, provenance: dict | None, source: str) -> str:
    """What the record holds and where it comes from: GPU, torch, cases and protocols with their rounds."""
    if not record:
        return (f"No timing record: {source}. Nothing below was measured; run this notebook on a GPU "
                f"(labkit book --device cuda --mode full --only 03) and curate the run.")
    prov = provenance or {}
    protos = ", ".join(f"{k} ({p['rounds']} rounds x {p['repeats']})" for k, p in record["protocols"].items())
    return (f"{source}: {prov.get('gpu')}, torch {prov.get('torch')}; {len(record['cases'])} cases "
            f"({', '.join(case_keys(record))}); protocols {protos}")


def method_rows(record: dict | None) -> list[dict]:
    """The methods the run checked and timed, and whether this checkout still registers each under that name."""
    from labkit.studies import methods as registry

    here = {m.name for m in registry.registered()}
    return [{"method": m["name"], "family": m["family"], "reference order": m["reference_order"],
             "what": m["description"], "registered in this checkout": m["name"] in here}
            for m in (record or {}).get("methods", [])]


def protocol_rows(record: dict | None) -> list[dict]:
    """The protocols as run, with the calls each method makes per case (warmups + graph capture + samples)."""
    protocols = (record or {}).get("protocols", {})
    calls = estimate_calls(len((record or {}).get("methods", [])), protocols)
    return [{"key": k, **p, "calls per method per case": calls[k]} for k, p in protocols.items()]


def byte_rows(record: dict | None) -> list[dict]:
    """Per case: rows, N and the bytes credited to every method (BYTES_FORMULA), as recorded."""
    return [{"case": c["key"], "rows": c["rows"], "N": c["n"], "normalized shape": c["normalized_shape"],
             "bytes": c["bytes"]} for c in (record or {}).get("cases", [])]


def timing_rows(record: dict, key: str, protocol: str = "A") -> list[dict]:
    """The timing table of one case and protocol: medians [q25, q75], paired speedup vs native, bandwidth,
    and the bit-equal fraction, fastest first."""
    case = _case(record, key)
    t = case["timing"].get(protocol)
    if not t:
        return []
    out = []
    for name, s in t["stats"].items():
        row, r = case["methods"][name], t["ratio_vs_baseline"][name]
        bw = case["bandwidth"][protocol][name]
        out.append({"method": name, "family": row["family"], "ref order": row["reference_order"],
                    "median ms": s["median_ms"], "q25 ms": s["q25_ms"], "q75 ms": s["q75_ms"],
                    "speedup vs native [q25, q75]": f"{r['median']:.3g} [{r['q25']:.3g}, {r['q75']:.3g}]",
                    "GB/s": round(bw["median_gbps"], 1),
                    "% copy ceiling": (round(100 * bw["fraction_of_copy_ceiling"], 1)
                                       if bw.get("fraction_of_copy_ceiling") else None),
                    "bit-equal fraction": row["check"]["bit_equal_fraction"],
                    "max abs diff": row["check"]["max_abs_error"], "n": s["n"]})
    return sorted(out, key=lambda r: r["median ms"])


def untimed_rows(record: dict, key: str) -> list[dict]:
    """Every method of the case that is missing from some protocol's table, with the reason."""
    case = _case(record, key)
    out = []
    for name, row in case["methods"].items():
        if row["status"] != "timed":
            out.append({"method": name, "status": row["status"],
                        "bit-equal fraction": (row["check"] or {}).get("bit_equal_fraction"),
                        "why not timed": failure_text(row)})
        for proto, why in row.get("excluded", {}).items():
            out.append({"method": name, "status": f"not in protocol {proto}", "bit-equal fraction":
                        (row["check"] or {}).get("bit_equal_fraction"), "why not timed": why})
    for proto, err in case.get("timing_errors", {}).items():
        out.append({"method": "(all)", "status": f"protocol {proto} failed", "bit-equal fraction": None,
                    "why not timed": err})
    return out


def check_rows(record: dict, key: str) -> list[dict]:
    case = _case(record, key)
    out = []
    for name, row in case["methods"].items():
        c = row["check"] or {}
        out.append({"method": name, "official pass": c.get("official_pass"),
                    "bit-equal fraction": c.get("bit_equal_fraction"), "max abs diff": c.get("max_abs_error"),
                    "over budget": c.get("bad_finite_candidate_scale"), "build+first call s": round(row["build_s"], 2),
                    "note": note_text(row)})
    return out


def _every_case(rows_of, record: dict | None) -> list[dict]:
    return [{"case": key, **row} for key in case_keys(record) for row in rows_of(key)]


def all_check_rows(record: dict | None) -> list[dict]:
    """check_rows of every case, one table, with a `case` column."""
    return _every_case(lambda key: check_rows(record, key), record)


def all_timing_rows(record: dict | None, protocol: str = "A") -> list[dict]:
    """timing_rows of every case under one protocol, one table, with a `case` column (fastest first per case)."""
    return _every_case(lambda key: timing_rows(record, key, protocol), record)


def all_untimed_rows(record: dict | None) -> list[dict]:
    """untimed_rows of every case, one table, with a `case` column."""
    return _every_case(lambda key: untimed_rows(record, key), record)


def shape_rows(record: dict | None, protocol: str = "A") -> list[dict]:
    """One row per method, one column per case: paired median speedup vs native (median ms)."""
    out = {}
    for case in (record or {}).get("cases", []):
        t = case["timing"].get(protocol)
        for name, row in case["methods"].items():
            cell = out.setdefault(name, {"method": name})
            if t and name in t["stats"]:
                cell[case["key"]] = (f"{t['ratio_vs_baseline'][name]['median']:.3g}x "
                                     f"({t['stats'][name]['median_ms']:#.3g} ms)")
            else:
                cell[case["key"]] = f"— ({row['status']})"
    return list(out.values())


def ceiling_rows(record: dict | None) -> list[dict]:
    return [{"protocol": k, "buffer MiB": v["buffer_bytes"] >> 20, "bytes moved per call": v["bytes_moved"],
             "median ms": v["median_ms"], "GB/s (read + write)": round(v["median_gbps"], 1),
             "faster copy": v.get("ceiling_method"),
             "rounds x repeats": f"{v['timing']['protocol']['rounds']} x {v['timing']['protocol']['repeats']}"}
            for k, v in (record or {}).get("copy_ceiling", {}).items()]


# --- plots ------------------------------------------------------------------------------------------------------

def _timed_cases(record: dict | None, protocol: str) -> list[dict]:
    return [c for c in (record or {}).get("cases", []) if c["timing"].get(protocol)]


def plot_samples(record: dict | None, protocol: str = "A", label: str = ""):
    """Per-round samples per method, one panel per case (box + points, log-scale ms); None without timings."""
    import matplotlib.pyplot as plt
    import numpy as np

    cases = _timed_cases(record, protocol)
    if not cases:
        return None
    fig, axes = plt.subplots(len(cases), 1, figsize=(11, 3.2 * len(cases)), squeeze=False)
    rng = np.random.default_rng(0)
    for ax, case in zip(axes[:, 0], cases):
        t = case["timing"][protocol]
        names = sorted(t["samples_ms"], key=lambda n: t["stats"][n]["median_ms"])
        data = [t["samples_ms"][n] for n in names]
        ax.boxplot(data, showfliers=False, widths=0.5)
        for i, d in enumerate(data, start=1):
            ax.plot(i + rng.uniform(-0.15, 0.15, len(d)), d, ".", ms=3, alpha=0.5, color="tab:blue")
        ax.set_yscale("log")
        ax.set_xticks(range(1, len(names) + 1), names, rotation=25, ha="right", fontsize=8)
        ax.set_ylabel("ms per call")
        ax.set_title(f"{case['key']} — protocol {protocol}, {t['protocol']['rounds']} rounds", fontsize=10)
        ax.grid(True, which="both", axis="y", alpha=0.3)
    fig.suptitle(f"Per-round samples {label}".strip(), fontsize=11)
    fig.tight_layout()
    return fig


def plot_speedups(record: dict | None, protocol: str = "A", label: str = ""):
    """Paired speedup vs native per method and case: median with q25/q75 error bars, log scale; None without
    timings."""
    import matplotlib.pyplot as plt

    cases = _timed_cases(record, protocol)
    if not cases:
        return None
    names = list(dict.fromkeys(n for c in cases for n in c["timing"][protocol]["ratio_vs_baseline"]))
    fig, ax = plt.subplots(figsize=(11, 4.5))
    width = 0.8 / len(cases)
    for j, case in enumerate(cases):
        r = case["timing"][protocol]["ratio_vs_baseline"]
        xs = [i + (j - (len(cases) - 1) / 2) * width for i, n in enumerate(names) if n in r]
        med = [r[n]["median"] for n in names if n in r]
        lo = [r[n]["median"] - r[n]["q25"] for n in names if n in r]
        hi = [r[n]["q75"] - r[n]["median"] for n in names if n in r]
        ax.errorbar(xs, med, yerr=[lo, hi], fmt="o", ms=4, capsize=3, label=case["key"])
    ax.axhline(1.0, color="gray", lw=1, ls="--")
    ax.set_yscale("log")
    ax.set_xticks(range(len(names)), names, rotation=25, ha="right", fontsize=8)
    ax.set_ylabel("speedup vs native (paired per round)")
    ax.set_title(f"Speedup vs native, protocol {protocol}, median [q25, q75] {label}".strip(), fontsize=10)
    ax.grid(True, which="both", axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


# --- verdict ----------------------------------------------------------------------------------------------------

def _slower(case: dict, protocol: str) -> list[str]:
    """Methods slower than native in at least 3/4 of the paired rounds (q75 of the speedup < 1): the only
    evidence on which this study calls something a regression."""
    r = case["timing"][protocol]["ratio_vs_baseline"]
    return [f"{n} {r[n]['median']:.3g}x" for n in r if n != BASELINE and r[n]["q75"] < 1.0]


def _run_line(who: str, record: dict, provenance: dict) -> str:
    return (f"{who}: {provenance.get('gpu')} ({provenance.get('gpu_sms')} SMs), torch {provenance.get('torch')} "
            f"(CUDA {provenance.get('torch_cuda')}), driver {provenance.get('driver')}; "
            f"clocks {record.get('clocks', 'not recorded')}.")


def _case_line(case: dict, protocol: str) -> str:
    t = case["timing"].get(protocol)
    if not t:
        return f"{case['key']}: no protocol {protocol} timing ({case.get('timing_errors', {})})."
    native = t["stats"][BASELINE]["median_ms"]
    timed = [n for n in t["stats"] if n != BASELINE]
    identical = [n for n in timed if case["methods"][n]["check"]["bit_equal_fraction"] == 1.0]
    best = max(timed, key=lambda n: t["ratio_vs_baseline"][n]["median"]) if timed else None
    best_id = max(identical, key=lambda n: t["ratio_vs_baseline"][n]["median"]) if identical else None
    parts = [f"{case['key']} (protocol {protocol}): native {native:.4g} ms"]
    if best_id:
        r = t["ratio_vs_baseline"][best_id]
        parts.append(f"fastest bit-identical method other than native: {best_id} {r['median']:.3g}x "
                     f"[{r['q25']:.3g}, {r['q75']:.3g}]")
    if best and best != best_id:
        r = t["ratio_vs_baseline"][best]
        parts.append(f"fastest method passing the official check: {best} {r['median']:.3g}x "
                     f"[{r['q25']:.3g}, {r['q75']:.3g}], bit-equal fraction "
                     f"{case['methods'][best]['check']['bit_equal_fraction']:.3g}")
    slower = _slower(case, protocol)
    parts.append("slower than native in at least 3/4 of rounds: " + (", ".join(slower) if slower else "none"))
    missing = [f"{n} ({error_text(row['error']) if row.get('error') else row['status']})"
               for n, row in case["methods"].items() if row["status"] != "timed"]
    if missing:
        parts.append("not timed: " + ", ".join(missing))
    return "; ".join(parts) + "."


def verdict_lines(record: dict, provenance: dict, run_id: str, protocol: str = "A") -> list[str]:
    """What the record supports, and what it does not, in sentences whose numbers all come from the record."""
    return ([_run_line(f"Run {run_id}", record, provenance)]
            + [_case_line(case, protocol) for case in record["cases"]] + [_limits(provenance)])


def _limits(provenance: dict) -> str:
    l2 = provenance.get("gpu_l2_bytes")
    return ("Not supported by this run: other GPUs, locked clocks, other torch builds, other input "
                 "distributions or seeds (one uniform input per case; the bit-identity notebook covers the rest), "
                 "and any claim about a method that was not timed. Protocol A replays CUDA graphs, so its times "
                 "exclude launch overhead; protocol B includes it. Inputs smaller than the L2"
                 + (f" ({l2 / 2**20:.0f} MiB)" if l2 else "") + " stay cached under protocol A, so their "
                 "bandwidth can exceed the DRAM copy ceiling.")


def verdict(record: dict | None, provenance: dict | None, source: str) -> str:
    """The notebook's verdict: the run, then per case under protocol A (and B where it was run) what is faster or
    slower than native, then what the run does not support; a no-claim sentence when there is no record."""
    if not record:
        return f"No timing run ({source}), so this notebook supports no speed claim. Nothing here was measured."
    prov = provenance or {}
    lines = [_run_line(source, record, prov)]
    for protocol in ("A", "B"):
        if protocol in record["protocols"]:
            lines.append(f"{bench.PROTOCOL_NAMES[protocol][0].upper()}{bench.PROTOCOL_NAMES[protocol][1:]}:")
            lines += ["- " + _case_line(case, protocol) for case in record["cases"]]
    for case in (c for c in record["cases"] if tuple(c["shape"]) == UNEVEN_SHAPE):
        for protocol in (p for p in ("A", "B") if case["timing"].get(p)):
            slower = _slower(case, protocol)
            lines.append(f"At {UNEVEN_SHAPE}, where the post saw a regression, protocol {protocol} of this run shows "
                         + (f"slower than native in at least 3/4 of rounds: {', '.join(slower)}." if slower
                            else "no method slower than native in at least 3/4 of rounds."))
    return "\n".join(lines + [_limits(prov)])


# --- the run's summary and headline (labkit.studies.catalog dispatches here) -------------------------------------

RUN_NAME = "timing"
NOTEBOOK = "03_timing"


def timing_block(records: dict) -> dict | None:
    """Headline numbers of a `timing` record (notebook 03), read as recorded: per case ("<shape>/<affine>") and
    method, protocol A's median [q25, q75] ms and the bit-equal fraction vs native. A method that was not timed
    (unavailable, failed the official check) has null times and its status."""
    cases = records.get("timing", {}).get("cases")
    if not cases:
        return None
    out = {}
    for case in cases:
        stats = case.get("timing", {}).get("A", {}).get("stats", {})
        block = out.setdefault(case["key"], {})
        for name, row in case["methods"].items():
            s = stats.get(name, {})
            block[name] = {"median_ms": s.get("median_ms"), "q25_ms": s.get("q25_ms"), "q75_ms": s.get("q75_ms"),
                           "bit_equal_fraction": (row.get("check") or {}).get("bit_equal_fraction"),
                           "status": row.get("status")}
    return out


def timing_line(t: dict, shown: int = 3) -> str:
    """The first case (the book's headline shape): bit-identical methods and the others apart, fastest first."""
    case, methods = next(iter(t.items()))
    timed = sorted(((m, v) for m, v in methods.items() if v.get("median_ms") is not None),
                   key=lambda mv: mv[1]["median_ms"])
    untimed = [m for m, v in methods.items() if v.get("median_ms") is None]

    def listing(group: list) -> str:
        text = ", ".join(f"{m} {v['median_ms']:.4g}" for m, v in group[:shown])
        return text + (f", +{len(group) - shown} more" if len(group) > shown else "")

    exact = [mv for mv in timed if mv[1].get("bit_equal_fraction") == 1.0]
    other = [mv for mv in timed if mv[1].get("bit_equal_fraction") != 1.0]
    parts = [f"bit-identical {listing(exact)}" if exact else "", f"others {listing(other)}" if other else "",
             f"not timed {', '.join(untimed)}" if untimed else ""]
    return (f"timing {case} ({len(t)} case(s)), median ms: " + "; ".join(p for p in parts if p))


def summary(records: dict, prov: dict) -> dict:
    from labkit.records import post_compare

    out = {}
    if block := timing_block(records):
        out["timing"] = block
    if records.get("timing"):
        methods = [m["name"] for m in records["timing"].get("methods", [])]
        out["post"] = post_compare.block(post_compare.timing_rows(records["timing"], prov, methods))
    return out


def summary_lines(s: dict) -> list[str]:
    return [timing_line(s["timing"])] if s.get("timing") else []


def l1_40_case(timing_record: dict) -> dict | None:
    """The L1/40 case of a timing record (default affine first), else its first case."""
    cases = timing_record.get("cases") or []
    key = tasks.shape_key(tasks.L1_40)
    at_shape = [c for c in cases if c["key"].split("/")[0] == key]
    at_shape.sort(key=lambda c: not c["key"].endswith("/default"))
    return (at_shape or cases or [None])[0]


def paired(case: dict | None, protocol: str, num: str, den: str) -> float | None:
    """num's time over den's in one timing case, per round of the run, median: the ratio every page reports (above
    1: den is faster). None where either was not timed under that protocol."""
    import numpy as np

    samples = ((((case or {}).get("timing") or {}).get(protocol) or {}).get("samples_ms") or {})
    if not samples.get(num) or not samples.get(den):
        return None
    return float(np.median(np.asarray(samples[num]) / np.asarray(samples[den])))


def case_name(case: dict) -> str:
    return "L1/40" if case["key"].split("/")[0] == tasks.shape_key(tasks.L1_40) else case["key"].split("/")[0]


def page_headline(records: dict, summary: dict) -> str:
    from labkit.records.text import on_gpu, ratio

    case = l1_40_case(records["timing"])
    t = case["timing"].get("A") if case else None
    if not t:
        return f"no protocol A timing in the record {on_gpu(summary)}"
    native = t["stats"]["native"]["median_ms"]
    ratios = t["ratio_vs_baseline"]
    timed = [m for m in t["stats"] if m != "native"]
    identical = [m for m in timed if (case["methods"][m].get("check") or {}).get("bit_equal_fraction") == 1.0]
    parts = [f"at {case_name(case)} under {bench.PROTOCOL_NAMES['A']}: native {native:.3g} ms"]
    if identical:
        best = max(identical, key=lambda m: ratios[m]["median"])
        parts.append(f"fastest bit-identical: {best} {ratio(ratios[best]['median'])} native")
    if timed:
        best = max(timed, key=lambda m: ratios[m]["median"])
        if best not in identical:
            parts.append(f"fastest passing the official check: {best} {ratio(ratios[best]['median'])} native "
                         "(not bit-identical)")
    return "; ".join(parts) + f" {on_gpu(summary)}"


def plain_verdict(record: dict | None) -> list[str]:
    """The page's short verdict: a few plain sentences, every number from the record, each ratio with its protocol
    and its baseline (native torch, paired per round)."""
    from labkit.records.text import ratio

    if not record or not (case := l1_40_case(record)):
        return ["No timing run, so this page supports no speed claim."]
    out = []
    a, b = case["timing"].get("A"), case["timing"].get("B")
    name = case_name(case)
    if a and "chain" in a["stats"]:
        out.append(f"At {name} native torch takes {a['stats'][BASELINE]['median_ms']:.3g} ms under "
                   f"{bench.PROTOCOL_NAMES['A']}, and the chain kernel, bit-identical to it, runs "
                   f"{ratio(a['ratio_vs_baseline']['chain']['median'])} faster (baseline native torch, paired median).")
        timed = [n for n in a["stats"] if n != BASELINE]
        best = max(timed, key=lambda n: a["ratio_vs_baseline"][n]["median"])
        if best != "chain":
            out.append(f"The fastest method that only passes the official check, {best}, runs "
                       f"{ratio(a['ratio_vs_baseline'][best]['median'])} faster under the same protocol, with "
                       f"{case['methods'][best]['check']['bit_equal_fraction']:.1%} of its outputs bit-identical.")
    if b and "chain" in b["stats"]:
        out.append(f"Under {bench.PROTOCOL_NAMES['B']} the chain kernel runs "
                   f"{ratio(b['ratio_vs_baseline']['chain']['median'])} faster than native torch at {name}.")
    lost = [c["key"].split("/")[0] for c in record["cases"] if c["timing"].get("B")
            and all(r["median"] < 1 for n, r in c["timing"]["B"]["ratio_vs_baseline"].items() if n != BASELINE)]
    if lost:
        out.append(f"At {' and '.join(dict.fromkeys(lost))} no method beats native torch under "
                   f"{bench.PROTOCOL_NAMES['B']}, which counts a call's host time ({bench.PROTOCOL_NAMES['A']} does not).")
    return out[:5]
