"""The layout boundary's measurements (notebook 09): seeded inputs per distribution, the checks against eager,
the correctness matrix of the three routes (direct NCHW, rows on channels-last, conversion) and their timings
under both protocols, at the evaluation shape and the tasks' default shapes. Run functions (GPU) return
JSON-able records; labkit.studies.layout_boundary turns them into rows, a figure and a verdict, and is kept
apart so that live and replayed runs render through the same readers."""
from __future__ import annotations

import math
import time
from dataclasses import asdict

from labkit import tasks
from labkit.records.check import KERNELBENCH_PREDICATE, compare, equal_nan_allclose, official_allclose
from labkit.studies import bench, measure, timing as timing_study


ORDINARY = ("uniform", "normal", "offset", "tiny", "mixed_sign")
CONTROLS = ("zeros", "constant", "nonfinite", "subnormal")
ROUTES = ("direct_nchw", "rows", "conversion")
BASELINES = ("eager", "torchscript", "builtin", "compile")
BASELINE = "eager"
DIAGNOSTIC = "direct_nchw_l2_mul"  # L2 with rounded squares: shows whether eager contracts acc + x*x to an FMA
ELEMENT_BYTES = 4
BYTES_FORMULA = ("bytes = 8 * numel: read x once, write y once (float32), the least any route can move; the "
                 "conversion route moves 3x that (two extra copies), eager moves more (its intermediates).")
RECORD_SCHEMA = 1
DEFAULT_ROUNDS = 5  # protocol A rounds at the tasks' default shapes (7.5-8.6 GB inputs: ~10 ms per eager call)


# --- inputs -----------------------------------------------------------------------------------------------------

def make_case_input(distribution: str, shape, seed: int, device="cuda"):
    """Ordinary: uniform [0,1), normal, offset (normal + 1000), tiny (normal * 1e-6), mixed_sign (+-10^U(-3,3)).
    Controls: zeros, constant (every element 1e4, so each position's channels are equal), nonfinite (normal with
    +inf, -inf and NaN planted), subnormal (normal * 1e-20: squares underflow)."""
    import torch

    if distribution not in ORDINARY + CONTROLS:
        raise ValueError(f"distribution must be one of {ORDINARY + CONTROLS}, got {distribution!r}")
    gen = torch.Generator(device=device).manual_seed(seed)
    if distribution == "zeros":
        return torch.zeros(shape, device=device)
    if distribution == "constant":
        return torch.full(shape, 1e4, device=device)
    if distribution == "uniform":
        return torch.rand(shape, generator=gen, device=device)
    x = torch.randn(shape, generator=gen, device=device)
    if distribution == "offset":
        x += 1000
    elif distribution == "tiny":
        x *= 1e-6
    elif distribution == "subnormal":
        x *= 1e-20
    elif distribution == "mixed_sign":
        x = torch.sign(x) * torch.pow(10.0, torch.rand(shape, generator=gen, device=device) * 6 - 3)
    elif distribution == "nonfinite":
        flat = x.view(-1)
        step = max(1, flat.numel() // 7)
        flat[0::step * 3] = float("inf")
        flat[step::step * 3] = float("-inf")
        flat[2 * step::step * 3] = float("nan")
    return x


# --- comparison -------------------------------------------------------------------------------------------------

def max_ulp(reference, candidate) -> int | None:
    """Largest distance in float32 units in the last place over pairs where both are finite (None if none)."""
    import torch

    finite = torch.isfinite(reference) & torch.isfinite(candidate)
    if not bool(finite.any()):
        return None

    def ordered(t):
        i = t[finite].contiguous().view(torch.int32).to(torch.int64)
        return torch.where(i < 0, -(i & 0x7FFFFFFF), i)

    return int((ordered(reference) - ordered(candidate)).abs().max().item())


def check(reference, candidate) -> dict:
    """The official predicate with its counts, the bit-equal fraction, max ulp, and the equal-NaN convention
    (reported for the controls only, never as the official verdict)."""
    c = compare(reference, candidate)
    equal_nan_pass = equal_nan_allclose(reference, candidate)
    return {"official_pass": c.official_pass, "bit_equal_fraction": c.bit_equal_fraction,
            "max_abs_error": c.max_abs_error, "max_ratio": c.max_ratio_candidate_scale,
            "bad_finite": c.bad_finite_candidate_scale, "bad_special": c.bad_special,
            "max_ulp": max_ulp(reference, candidate), "equal_nan_pass": equal_nan_pass}


def light_check(reference, candidate) -> dict:
    """For 7.5-8.6 GB outputs, where compare()'s float64 copies would not fit: torch.allclose itself and the
    bit-equal fraction."""
    import torch

    equal = int((reference.view(torch.int32) == candidate.view(torch.int32)).sum().item())
    return {"official_pass": official_allclose(reference, candidate),
            "bit_equal_fraction": equal / reference.numel()}


# --- correctness ----------------------------------------------------------------------------------------------

def route_outputs(family: str, x, eps: float) -> dict:
    """Every kernel's output on NCHW x, in NCHW: direct, rows (on x converted outside), conversion, and the
    L2 diagnostic."""
    from labkit.lab import channel_norm as cn

    out = {"direct_nchw": cn.direct_nchw(family, x, eps),
           "rows": cn.from_rows(cn.rows(family, cn.to_rows(x), eps)),
           "conversion": cn.conversion(family, x, eps)}
    if family == "l2":
        out[DIAGNOSTIC] = cn.direct_nchw(family, x, eps, l2_fma=False)
    return out


def correctness(channels, seeds, mode: str = "full", device="cuda", distributions=ORDINARY, eps=None,
                log=None) -> dict:
    """Every family x channel count x seed x distribution, every route against the task's eager reference."""
    import torch

    from labkit.lab import channel_norm as cn

    log = log or (lambda line: None)
    t0 = time.perf_counter()
    cases = []
    for family in cn.FAMILIES:
        e = tasks.LAYOUT_TASKS[family].init_args[1] if eps is None else eps
        for c in channels:
            shape = tasks.layout_shape(int(c), mode)
            for seed in seeds:
                for dist in distributions:
                    x = make_case_input(dist, shape, int(seed), device)
                    with torch.no_grad():
                        ref = cn.reference(family, x, e)
                        outs = route_outputs(family, x, e)
                        checks = {name: check(ref, y) for name, y in outs.items()}
                    cases.append({"family": family, "channels": int(c), "shape": list(shape), "seed": int(seed),
                                  "distribution": dist, "eps": e, "routes": checks})
                    del x, ref, outs
            log(f"[layout] {family} C={c}: {len(cases)} cases so far")
    if str(device).startswith("cuda"):
        torch.cuda.empty_cache()
    return {"schema": RECORD_SCHEMA, "predicate": KERNELBENCH_PREDICATE, "mode": mode,
            "channels": [int(c) for c in channels], "seeds": [int(s) for s in seeds],
            "distributions": list(distributions), "generator": f"torch.Generator(device={str(device)!r})",
            "cases": cases, "wall_s": time.perf_counter() - t0}


# --- timing -----------------------------------------------------------------------------------------------------

def _compiled(family: str):
    import torch

    from labkit.lab import channel_norm as cn

    return torch.compile(cn.REFERENCES[family], dynamic=False)


def methods_for(family: str, x, eps: float, include=BASELINES + ROUTES) -> dict:
    """name -> (callable, error): the baselines and the three routes on NCHW x; `rows` gets its input already
    channels-last (converted here, outside any timed region). `torchscript` scripts the reference function;
    `torchscript_trace` (not in BASELINES) is the post's frozen trace of the task's model."""
    from labkit.lab import channel_norm as cn

    out = {}
    for name in include:
        try:
            if name == "eager":
                fn = lambda: cn.reference(family, x, eps)  # noqa: E731
            elif name == "torchscript":
                s = cn.scripted_reference(family)
                if not s.available:
                    raise RuntimeError(s.error)
                fn = (lambda f: lambda: f(x, eps))(s.fn)
            elif name == "torchscript_trace":
                fn = (lambda f: lambda: f(x))(frozen_trace(family, x))
            elif name == "builtin":
                fn = lambda: cn.builtin(family, x, eps)  # noqa: E731
            elif name == "compile":
                fn = (lambda f: lambda: f(x, eps))(_compiled(family))
            elif name == "direct_nchw":
                fn = lambda: cn.direct_nchw(family, x, eps)  # noqa: E731
            elif name == "rows":
                xr = cn.to_rows(x) if x.dim() > 2 else x
                fn = (lambda xr: lambda: cn.rows(family, xr, eps))(xr)
            elif name == "conversion":
                fn = lambda: cn.conversion(family, x, eps)  # noqa: E731
            else:
                raise ValueError(f"unknown method {name!r}")
            out[name] = (fn, None)
        except Exception as exc:
            out[name] = (None, f"{type(exc).__name__}: {str(exc).strip()[:300]}")
    return out


def frozen_trace(family: str, x):
    """The task's model traced on x and frozen, torch.jit.freeze(torch.jit.trace(model, x)): the post's TorchScript
    baseline (tracing runs the model once on x)."""
    import torch

    model = tasks.LAYOUT_TASKS[family].make_model(x.device)
    return torch.jit.freeze(torch.jit.trace(model, x))


def _as_nchw(name: str, y, x):
    from labkit.lab import channel_norm as cn

    return cn.from_rows(y) if name == "rows" and x.dim() > 2 else y


def time_family(family: str, shape, protocols: dict, device="cuda", seed: int = 0, include=BASELINES + ROUTES,
                light: bool = False, timer_factory=None) -> dict:
    """Check every method on one uniform input against eager, then time those that pass under each protocol
    (baseline eager, paired per-round ratios); GB/s from BYTES_FORMULA."""
    import torch

    from labkit.lab import channel_norm as cn

    t0 = time.perf_counter()
    eps = tasks.LAYOUT_TASKS[family].init_args[1]
    x = make_case_input("uniform", tuple(shape), seed, device)
    rows, fns = {}, {}
    with torch.no_grad():
        ref = cn.reference(family, x, eps)
        for name, (fn, err) in methods_for(family, x, eps, include).items():
            row = {"error": err, "check": None, "status": "unavailable", "excluded": {}}
            if err is None:
                try:
                    t1 = time.perf_counter()
                    y = _as_nchw(name, fn(), x)
                    torch.cuda.synchronize() if str(device).startswith("cuda") else None
                    row["first_call_s"] = time.perf_counter() - t1
                    row["check"] = (light_check if light else check)(ref, y)
                    row["status"] = "eligible" if row["check"]["official_pass"] else "failed_check"
                    del y
                except Exception as exc:
                    row["error"] = f"{type(exc).__name__}: {str(exc).strip()[:300]}"
            rows[name] = row
            if row["status"] == "eligible":
                fns[name] = fn
        del ref
        timing, errors = {}, {}
        for key, protocol in protocols.items():
            names = measure.timeable(fns, protocol, rows, key, 2)
            if BASELINE not in names:
                errors[key] = f"baseline {BASELINE!r} not timeable under protocol {key}"
                continue
            try:
                timer = (timer_factory or measure.default_timer)(protocol)
                timing[key] = bench.time_methods({n: fns[n] for n in names}, protocol, BASELINE, timer).to_json()
            except Exception as exc:
                errors[key] = f"{type(exc).__name__}: {str(exc).strip()[:400]}"
            if str(device).startswith("cuda"):
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
    for name, row in rows.items():
        if any(name in t["samples_ms"] for t in timing.values()):
            row["status"] = "timed"
    nbytes = 2 * ELEMENT_BYTES * math.prod(int(d) for d in shape)
    del x, fns
    if str(device).startswith("cuda"):
        torch.cuda.empty_cache()
    return {"family": family, "task": tasks.LAYOUT_TASKS[family].key, "shape": list(shape), "seed": seed,
            "eps": eps, "bytes": nbytes, "methods": rows, "timing": timing, "timing_errors": errors,
            "wall_s": time.perf_counter() - t0}


def timing(mode: str = "full", device="cuda", rounds: int = 35, channels: int = 64, log=None) -> dict:
    """Every family at the evaluation shape under protocols A and B, with the device copy ceiling in the same run."""
    from labkit.lab import channel_norm as cn

    log = log or (lambda line: None)
    t0 = time.perf_counter()
    protocols = timing_study.protocols_for(mode, ("A", "B"), rounds=rounds, rounds_b=max(rounds, 35))
    log("[layout] copy ceiling ...")
    ceiling = measure.copy_ceiling(protocols, measure.COPY_CEILING_BYTES, device)
    shape = tasks.layout_shape(channels, mode)
    families = []
    for family in cn.FAMILIES:
        log(f"[layout] timing {family} at {shape} ...")
        families.append(time_family(family, shape, protocols, device))
    return {"schema": RECORD_SCHEMA, "baseline": BASELINE, "byte_formula": BYTES_FORMULA, "shape": list(shape),
            "protocols": {k: asdict(p) for k, p in protocols.items()}, "copy_ceiling": ceiling,
            "families": families, "versions": timing_study.versions(), "wall_s": time.perf_counter() - t0}


def default_shapes(device="cuda", rounds: int = DEFAULT_ROUNDS, mode: str = "full", log=None) -> dict:
    """The tasks' own default inputs (7.5-8.6 GB each), protocol A with few rounds, light checks. L1/36's NCHW
    input gets all three routes; L1/38/39's (32768, 65535) reduce over the contiguous dim, so the input already
    is rows: the rows kernel runs on it directly and the NCHW routes do not apply."""
    import torch

    from labkit.lab import channel_norm as cn

    log = log or (lambda line: None)
    t0 = time.perf_counter()
    if tasks.config(mode).mode != "full":
        return {"schema": RECORD_SCHEMA, "mode": mode, "families": [],
                "note": "quick mode: the 7.5-8.6 GB default shapes are timed in full mode only"}
    protocol = bench.Protocol(name="A-graph-replay-default-shapes", warmups=2, rounds=rounds, repeats=1)
    free, total = torch.cuda.mem_get_info() if str(device).startswith("cuda") else (0, 0)
    out = []
    for family in cn.FAMILIES:
        task = tasks.LAYOUT_TASKS[family]
        shape = task.input_shape
        need = 6 * ELEMENT_BYTES * math.prod(shape)  # input, eager's intermediate, outputs kept by the graphs
        if need > free:
            out.append({"family": family, "task": task.key, "shape": list(shape),
                        "skipped": f"needs ~{need / 2**30:.0f} GiB, {free / 2**30:.0f} GiB free"})
            continue
        # 4-D L1/36: the NCHW routes (rows on a pre-converted 7.5 GB copy would add ~15 GB of graph memory and
        # is measured at the evaluation shape); 2-D L1/38/39: the input already is rows
        include = ("eager", "builtin", *(("direct_nchw", "conversion") if len(shape) > 2 else ("rows",)))
        log(f"[layout] default shape {task.key} {shape} ...")
        out.append(time_family(family, shape, {"A": protocol}, device, include=include, light=True))
    return {"schema": RECORD_SCHEMA, "protocol": asdict(protocol), "free_bytes_at_start": free,
            "total_bytes": total, "families": out, "wall_s": time.perf_counter() - t0}


def compile_records() -> list[dict]:
    return timing_study.compile_records()
