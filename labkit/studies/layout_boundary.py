"""The layout boundary (notebook 09): small-channel RMS / mean-abs / L2 normalization over dim 1, three routes.

Question: on NCHW input with 32-128 channels, does a channels-last row kernel pay off once the conversion to rows
and back is counted? The post (RTX 3090, torch 2.5.1) measured 0.675-0.679 ms for its row kernel on native rows,
6.74-6.89 ms for the conversion route, 0.67-0.69 ms for a direct NCHW kernel.

Run functions (GPU) return JSON-able records; the other functions turn records into rows, a figure and a verdict,
so live and replayed runs render alike. Inputs are drawn on the device with a seeded torch.Generator (a 256 MiB
case is drawn in microseconds there, in seconds on the host); the seed and the generator's device are recorded.
"""
from __future__ import annotations

import math
import time
import warnings
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


# --- where the time goes: one profiled call per route (the post's norm_baselines step) ---------------------------

PROFILE_ROUTES = ("eager", "torchscript_trace", "builtin")  # the post's three: the model, its frozen trace, the builtin
PROFILE_SEED = 42  # the post drew torch.rand after torch.manual_seed(42); a fresh device generator draws the same
PROFILE_WARMUPS = 3  # TorchScript's executor profiles its first call and optimizes from the next: the third is settled
PROFILE_TOP = 3  # aten ops per route in the table
KERNEL_NAME_CHARS = 160  # device kernel names are whole C++ template signatures


def _error_text(exc) -> str:
    return f"{type(exc).__name__}: {str(exc).strip()[:300]}"


def profile_call(fn, device="cuda", warmups: int = PROFILE_WARMUPS) -> dict:
    """`warmups` calls, then one call under torch.profiler (CPU activity, and CUDA on a GPU). Returns the aten:: ops
    of key_averages() (name, count, device_us, self_device_us: without the ops it calls), largest self time first;
    the device-side events (kernels, copies, memsets) with their times; device_us, their sum: the call's device
    time whether or not an aten op launched each kernel; and outside_aten_us, the part no aten op launched
    (TorchScript's fused kernels, e.g. fused_add_sqrt_div on L1/36, have none)."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    cuda = str(device).startswith("cuda")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    for _ in range(warmups):
        fn()
    sync()
    with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])) as prof:
        y = fn()
        sync()
    del y
    events = prof.key_averages()
    ops = [{"name": e.key, "count": int(e.count), "device_us": float(e.device_time_total),
            "self_device_us": float(e.self_device_time_total)} for e in events if e.key.startswith("aten::")]
    kernels = [{"name": e.key[:KERNEL_NAME_CHARS], "count": int(e.count), "device_us": float(e.device_time_total)}
               for e in events if e.device_type != DeviceType.CPU]
    ops.sort(key=lambda o: (-o["self_device_us"], o["name"]))
    kernels.sort(key=lambda k: (-k["device_us"], k["name"]))
    device_us = sum(k["device_us"] for k in kernels)
    return {"ops": ops, "kernels": kernels, "device_us": device_us, "kernel_launches": sum(k["count"] for k in kernels),
            "outside_aten_us": max(0.0, round(device_us - sum(o["self_device_us"] for o in ops), 3))}  # to the ns


def _profile_route(fn, err, ref, device, warmups) -> dict:
    """One route's entry: profiled only if it builds, runs and passes the official predicate against eager."""
    row = {"profiled": False, "error": err, "check": None}
    if err is not None:
        return row
    try:
        row["check"] = light_check(ref, fn())
        if not row["check"]["official_pass"]:
            row["skipped"] = "fails the official predicate against eager: not profiled"
            return row
        row |= profile_call(fn, device, warmups)
        row["profiled"] = True
    except Exception as exc:  # a route that fails is a row with its error, never a crash
        row["error"] = _error_text(exc)
    return row


def op_profile(device="cuda", mode: str = "full", routes=PROFILE_ROUTES, warmups: int = PROFILE_WARMUPS,
               log=None) -> dict:
    """Per task (L1/36, 38, 39) and route, one call profiled after `warmups` (profile_call) on uniform [0, 1) input
    drawn with seed PROFILE_SEED: the post's (4, 64, 512, 512) in full mode, LAYOUT_QUICK_SHAPE in quick. The checks
    use light_check (torch.allclose itself and the bit-equal fraction). This explains the timing record and is no
    part of it: one call is one sample, and the profiler's own work is in it. Warnings raised while building and
    calling (TorchScript's deprecation notices) are kept per task."""
    import torch

    from labkit.lab import channel_norm as cn

    log = log or (lambda line: None)
    t0 = time.perf_counter()
    shape = tasks.layout_shape(tasks.LAYOUT_SHAPE[1], mode)
    out = []
    for family in cn.FAMILIES:
        task = tasks.LAYOUT_TASKS[family]
        eps = task.init_args[1]
        log(f"[layout] profiling {task.key} at {shape} ...")
        x = make_case_input("uniform", shape, PROFILE_SEED, device)
        with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ref = cn.reference(family, x, eps)
            entries = {name: _profile_route(fn, err, ref, device, warmups)
                       for name, (fn, err) in methods_for(family, x, eps, routes).items()}
            del ref
        out.append({"family": family, "task": task.key, "eps": eps, "routes": entries,
                    "warnings": sorted({f"{w.category.__name__}: {w.message}" for w in caught})})
        del x
        if str(device).startswith("cuda"):
            torch.cuda.empty_cache()
    return {"schema": RECORD_SCHEMA, "mode": mode, "shape": list(shape), "seed": PROFILE_SEED,
            "generator": f"torch.Generator(device={str(device)!r})", "warmups": warmups,
            "activities": ["CPU", "CUDA"] if str(device).startswith("cuda") else ["CPU"],
            "note": "one profiled call per route, to explain the timings: not a timing measurement", "tasks": out,
            "wall_s": time.perf_counter() - t0}


# --- CPU-possible parts -------------------------------------------------------------------------------------------

def kernel_builds(arch: str = "sm_90") -> list[dict]:
    """Both kernel files compiled with NVRTC for `arch` (no GPU needed): what a GPU run would load."""
    from labkit.core.compile import compile_kernel

    rows = []
    for k in ("channel_norm_nchw", "channel_norm_rows"):
        r = compile_kernel(k, arch).record
        rows.append({"kernel": k, "arch": r.arch, "nvrtc": ".".join(map(str, r.nvrtc_version)),
                     "options": " ".join(r.options), "cubin sha256": r.cubin_sha256[:16], "cache hit": r.cache_hit})
    return rows


def plan_rows(channels=tasks.LAYOUT_CHANNELS, shapes=((4, 512, 512), (112, 512, 512), (3, 17, 19))) -> list[dict]:
    """torch's reduction plan for each channel count and (N, H, W): the tree the direct kernel reproduces."""
    from labkit.lab import channel_norm as cn

    out = []
    for n, h, w in shapes:
        for c in channels:
            p = cn.reduction_plan(int(c), n, h * w)
            out.append({"shape": f"({n}, {c}, {h}, {w})", "output vec": p["output_vec"], "block": tuple(p["block"]),
                        "warps per output": p["split"], "values per thread": p["values_per_thread"]})
    return out


def reference_rows(seed: int = 0, shape=(2, 64, 5, 6)) -> list[dict]:
    """On the CPU: each task's eager reference against its formula in float64 (the official predicate), and the
    tree emulator against a float64 sum."""
    import numpy as np
    import torch

    from labkit.lab import channel_norm as cn

    x = torch.randn(shape, generator=torch.Generator().manual_seed(seed))
    xd = x.double()
    formulas = {"rms": xd / torch.sqrt((xd * xd).mean(1, keepdim=True) + cn.EPS),
                "mean_abs": xd / xd.abs().mean(1, keepdim=True),
                "l2": xd / torch.sqrt((xd * xd).sum(1, keepdim=True))}
    rows = []
    for family in cn.FAMILIES:
        ref = cn.reference(family, x)
        rows.append({"check": f"{tasks.LAYOUT_TASKS[family].key} eager reference vs float64 formula",
                     "official pass": official_allclose(formulas[family].float(), ref),
                     "max abs diff": float((formulas[family] - ref.double()).abs().max())})
    col = x[0, :, 0, 0].numpy()
    for split in (1, 4):
        s = cn.tree_sum(col, split, "square")
        exact = float(np.sum(col.astype(np.float64) ** 2))
        rows.append({"check": f"tree sum of squares (split {split}) vs float64", "official pass":
                     bool(abs(float(s) - exact) <= 1e-4 + 1e-4 * abs(float(s))), "max abs diff": abs(float(s) - exact)})
    return rows


# --- rows from records --------------------------------------------------------------------------------------------

def _ordinary(record):
    return [c for c in (record or {}).get("cases", []) if c["distribution"] in ORDINARY]


def _controls(record):
    return [c for c in (record or {}).get("cases", []) if c["distribution"] in CONTROLS]


def correctness_rows(record: dict | None) -> list[dict]:
    """Per family and route: ordinary cases passing the official predicate, bit-identical cases, the lowest
    bit-equal fraction and the largest ulp distance against eager."""
    out = {}
    for c in _ordinary(record):
        for route, ch in c["routes"].items():
            r = out.setdefault((c["family"], route), {"family": c["family"], "kernel": route, "cases": 0,
                                                      "official pass": 0, "bit-identical": 0,
                                                      "min bit-equal fraction": 1.0, "max ulp": 0})
            r["cases"] += 1
            r["official pass"] += bool(ch["official_pass"])
            r["bit-identical"] += ch["bit_equal_fraction"] == 1.0
            r["min bit-equal fraction"] = min(r["min bit-equal fraction"], ch["bit_equal_fraction"])
            r["max ulp"] = max(r["max ulp"], ch["max_ulp"] or 0)
    return list(out.values())


def channel_rows(record: dict | None, route: str = "direct_nchw") -> list[dict]:
    """One route's bit identity per family and channel count (the stretch goal's table)."""
    out = {}
    for c in _ordinary(record):
        ch = c["routes"].get(route)
        if ch is None:
            continue
        r = out.setdefault((c["family"], c["channels"]), {"family": c["family"], "channels": c["channels"],
                                                          "cases": 0, "bit-identical": 0, "max ulp": 0})
        r["cases"] += 1
        r["bit-identical"] += ch["bit_equal_fraction"] == 1.0
        r["max ulp"] = max(r["max ulp"], ch["max_ulp"] or 0)
    return list(out.values())


def control_rows(record: dict | None) -> list[dict]:
    """Controls, apart: per case and kernel the official verdict, the equal-NaN convention and the bit-equal
    fraction."""
    return [{"family": c["family"], "channels": c["channels"], "seed": c["seed"], "control": c["distribution"],
             "kernel": route, "official pass": ch["official_pass"], "equal-NaN pass (not official)":
             ch["equal_nan_pass"], "bit-equal fraction": ch["bit_equal_fraction"], "max ulp": ch["max_ulp"]}
            for c in _controls(record) for route, ch in c["routes"].items()]


def timing_rows(record: dict | None, protocol: str = "A") -> list[dict]:
    """Per family and method: median [q25, q75] ms, paired ratio vs eager, GB/s and % of the copy ceiling, and
    the check on the timing input; untimed methods with their reason."""
    if not record:
        return []
    ceil = record.get("copy_ceiling", {}).get(protocol, {}).get("median_gbps")
    out = []
    for fam in record["families"]:
        if "skipped" in fam:
            out.append({"family": fam["family"], "method": "(all)", "status": fam["skipped"]})
            continue
        t = fam["timing"].get(protocol, {})
        for name, row in fam["methods"].items():
            s, r = t.get("stats", {}).get(name), t.get("ratio_vs_baseline", {}).get(name)
            ck = row.get("check") or {}
            base = {"family": fam["family"], "shape": "x".join(map(str, fam["shape"])), "method": name}
            if s is None:
                out.append({**base, "status": row["status"], "why": row.get("error") or
                            row.get("excluded", {}).get(protocol) or fam["timing_errors"].get(protocol) or
                            ("fails the official check" if ck and not ck.get("official_pass") else "")})
                continue
            gb = fam["bytes"] / (s["median_ms"] * 1e-3) / 1e9
            out.append({**base, "median ms": round(s["median_ms"], 4),
                        "[q25, q75] ms": f"[{s['q25_ms']:#.3g}, {s['q75_ms']:#.3g}]",
                        "eager / method": f"{r['median']:.3g} [{r['q25']:.3g}, {r['q75']:.3g}]",
                        "GB/s": round(gb, 1), "% copy ceiling": round(100 * gb / ceil, 1) if ceil else None,
                        "bytes": fam["bytes"], "bit-equal fraction": ck.get("bit_equal_fraction"), "n": s["n"]})
    return out


def ceiling_rows(record: dict | None) -> list[dict]:
    return timing_study.ceiling_rows(record)


def route_ms(fam: dict, protocol: str = "A") -> dict:
    """{route: median ms} of one family's timing (absent routes omitted)."""
    stats = fam.get("timing", {}).get(protocol, {}).get("stats", {})
    return {r: stats[r]["median_ms"] for r in (*ROUTES, BASELINE) if r in stats}


def route_figure(record: dict | None, protocol: str = "A", label: str = ""):
    """Bars: the three routes and eager per family, median ms with q25-q75 whiskers, GB/s over each bar."""
    import matplotlib.pyplot as plt

    fams = [f for f in (record or {}).get("families", []) if f.get("timing", {}).get(protocol)]
    if not fams:
        return None
    names = (*ROUTES, BASELINE)
    fig, ax = plt.subplots(figsize=(10, 4.2))
    width = 0.8 / len(names)
    for j, name in enumerate(names):
        xs, med, lo, hi, gbs = [], [], [], [], []
        for i, fam in enumerate(fams):
            s = fam["timing"][protocol]["stats"].get(name)
            if s:
                xs.append(i + (j - (len(names) - 1) / 2) * width)
                med.append(s["median_ms"])
                lo.append(s["median_ms"] - s["q25_ms"])
                hi.append(s["q75_ms"] - s["median_ms"])
                gbs.append(fam["bytes"] / (s["median_ms"] * 1e-3) / 1e9)
        bars = ax.bar(xs, med, width, yerr=[lo, hi], capsize=2, label=name)
        for b, g in zip(bars, gbs):
            ax.annotate(f"{g:.0f}", (b.get_x() + b.get_width() / 2, b.get_height()), ha="center", va="bottom",
                        fontsize=7)
    ax.set_xticks(range(len(fams)), [f"{f['family']} ({f['task']})" for f in fams])
    ax.set_ylabel("median ms per call")
    shape = "x".join(map(str, fams[0]["shape"]))
    ax.set_title(f"Routes per family at {shape}, protocol {protocol}; numbers over bars: GB/s at "
                 f"8*numel bytes {label}".strip(), fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    return fig


def post_rows(record: dict | None, correctness_record: dict | None = None, here: str | None = None) -> list[dict]:
    """The post's layout figures beside this run's (per family: the post does not say which family it timed)."""
    from labkit.records import post

    pairs = []
    for fam in (record or {}).get("families", []):
        ms = route_ms(fam)
        note = (f"{fam['family']} at {'x'.join(map(str, fam['shape']))}, {bench.PROTOCOL_NAMES['A']}; the post names "
                f"neither the family nor the shape it timed, so the ratio compares two GPUs at perhaps different "
                f"inputs")
        pairs += [("layout.direct_nchw.time", ms.get("direct_nchw"), note, f"direct NCHW, {fam['family']}"),
                  ("layout.rows_kernel.time", ms.get("rows"), note, f"rows on channels-last, {fam['family']}"),
                  ("layout.convert_roundtrip.time", ms.get("conversion"), note, f"conversion route, {fam['family']}")]
    if not pairs:
        pairs = [(fid, None, "no timing record") for fid in
                 ("layout.direct_nchw.time", "layout.rows_kernel.time", "layout.convert_roundtrip.time")]
    ordinary = _ordinary(correctness_record)
    passed = sum(all(ch["official_pass"] for r, ch in c["routes"].items() if r in ROUTES) for c in ordinary)
    pairs.append(("layout.cases", passed if ordinary else None,
                  f"here: ordinary cases where all three routes pass, of {len(ordinary)} in this book's grid; the "
                  f"post's cases across 32/64/128 channels are not listed, so the two counts are of different cases"))
    return post.compare_rows(pairs, here=here)


def _sig3(v: float) -> float:
    """v rounded to 3 significant figures (412.37 -> 412.0, 1234.5 -> 1230.0)."""
    return 0.0 if not v else round(v, 2 - math.floor(math.log10(abs(v))))


def _us(v: float) -> str:
    return f"{_sig3(v):,.0f}" if abs(v) >= 100 else f"{_sig3(v):.3g}"


def op_profile_missing(source: str = "") -> str:
    where = f" ({source})" if source else ""
    return "no committed run has this record yet: the next GPU run of notebook 09 adds it" + where


def op_profile_rows(record: dict | None, source: str = "") -> list[dict]:
    """Per task and route: the profiled call's device time, kernel launches, aten ops, the device time no aten op
    launched, and the PROFILE_TOP aten ops with the most self device time (3 significant figures); a route not
    profiled says why. Without a record: one row saying so."""
    if not record:
        return [{"op profile": op_profile_missing(source)}]
    rows = []
    for t in record["tasks"]:
        for route, r in t["routes"].items():
            base = {"task": f"{t['task']} ({t['family']})", "route": route}
            if not r.get("profiled"):
                rows.append({**base, "note": r.get("error") or r.get("skipped") or "not profiled"})
                continue
            ops = sorted(r["ops"], key=lambda o: (-o["self_device_us"], o["name"]))
            busy = [o for o in ops if o["self_device_us"] > 0]  # views and dtype queries launch nothing
            rows.append({**base, "device us (whole call)": _sig3(r["device_us"]),
                         "kernel launches": r["kernel_launches"], "aten ops": len(ops),
                         "outside aten ops: device us": _sig3(r.get("outside_aten_us", 0.0)),
                         "top aten ops: self device us (calls)": "; ".join(
                             f"{o['name']} {_us(o['self_device_us'])} ({o['count']})" for o in busy[:PROFILE_TOP]),
                         "bit-equal fraction vs eager": (r.get("check") or {}).get("bit_equal_fraction")})
    return rows


def _dominant(r: dict) -> str:
    """The largest share of one profiled call's device time: an aten op's self time, or the kernels no aten op
    launched (named when they are TorchScript fusions, whose kernels are called fused_*)."""
    top = max(r.get("ops") or [], key=lambda o: o["self_device_us"], default=None)
    outside = r.get("outside_aten_us", 0.0)
    if top is not None and top["self_device_us"] >= outside:
        return f"{top['self_device_us'] / r['device_us']:.0%} in {top['name']}"
    fused = [k["name"] for k in r.get("kernels", []) if k["name"].startswith("fused_")]
    return f"{outside / r['device_us']:.0%} outside aten ops ({', '.join(fused) or 'kernels no aten op launched'})"


def op_profile_line(record: dict | None, source: str = "") -> str:
    """One sentence from the record: per task and route, the call's device time and what takes the largest share
    of it."""
    if not record:
        return f"Op profile: {op_profile_missing(source)}."
    parts = []
    for t in record["tasks"]:
        bits = []
        for route, r in t["routes"].items():
            if not r.get("profiled"):
                bits.append(f"{route} not profiled")
            elif not r["device_us"]:
                bits.append(f"{route} no device time recorded")
            else:
                bits.append(f"{route} {_us(r['device_us'])} us, {_dominant(r)}")
        parts.append(f"{t['task']}: " + ", ".join(bits))
    shape = "x".join(map(str, record["shape"]))
    return (f"Where the time goes, one profiled call per route at {shape} after {record['warmups']} warm-ups "
            "(to explain the timings, not to time): " + "; ".join(parts) + ".")


# --- verdict ------------------------------------------------------------------------------------------------------

def _stretch_line(correctness_record) -> str:
    rows = channel_rows(correctness_record)
    if not rows:
        return "Bit identity of the direct NCHW kernels: not measured."
    ident = sum(r["bit-identical"] for r in rows)
    n = sum(r["cases"] for r in rows)
    worst = max(r["max ulp"] for r in rows)
    diag = [ch for c in _ordinary(correctness_record) for r, ch in c["routes"].items() if r == DIAGNOSTIC]
    l2 = ""
    if diag:
        l2 = (f" L2 with rounded squares (no FMA) is bit-identical in {sum(d['bit_equal_fraction'] == 1.0 for d in diag)}"
              f"/{len(diag)} cases, which says whether eager's NormTwoOps contracts acc + x*x.")
    return (f"Stretch — direct NCHW kernels bit-identical to eager (int32 views) in {ident}/{n} ordinary cases "
            f"(max {worst} ulp): {'reached' if ident == n else 'not reached'}.{l2}")


def verdict_lines(timing_record: dict | None, correctness_record: dict | None, provenance: dict | None,
                  source: str, defaults_record: dict | None = None, controls_record: dict | None = None,
                  profile_record: dict | None = None) -> list[str]:
    """Sentences whose numbers all come from the records."""
    if not timing_record and not correctness_record:
        return [f"No layout-boundary run ({source}): nothing here was measured on a GPU, so no speed or "
                "correctness claim about the kernels is made. The CPU checks above cover the references and the "
                "reduction tree only."]
    prov = provenance or {}
    lines = [f"{source}: {prov.get('gpu')}, torch {prov.get('torch')} (the post: RTX 3090, torch 2.5.1)."]
    for r in correctness_rows(correctness_record):
        lines.append(f"- {r['family']} / {r['kernel']}: {r['official pass']}/{r['cases']} ordinary cases pass "
                     f"{KERNELBENCH_PREDICATE}; {r['bit-identical']} bit-identical; max {r['max ulp']} ulp.")
    controls = _controls(correctness_record) + _controls(controls_record)
    if controls:
        fails = sum(not ch["official_pass"] for c in controls for ch in c["routes"].values())
        lines.append(f"Controls (reported apart): {fails} of {sum(len(c['routes']) for c in controls)} control "
                     "checks fail the official predicate (NaN never equals NaN there); see the control table.")
    lines.append(_stretch_line(correctness_record))
    for fam in (timing_record or {}).get("families", []):
        ms = route_ms(fam)
        if {"direct_nchw", "conversion"} <= set(ms):
            rows_part = f", rows on native channels-last {ms['rows']:.4g} ms" if "rows" in ms else ""
            lines.append(f"{fam['family']} at {'x'.join(map(str, fam['shape']))} (protocol A): direct NCHW "
                         f"{ms['direct_nchw']:.4g} ms{rows_part}, conversion route {ms['conversion']:.4g} ms "
                         f"({ms['conversion'] / ms['direct_nchw']:.2g}x the direct kernel), eager "
                         f"{ms.get('eager', float('nan')):.4g} ms.")
    conv = [route_ms(f) for f in (timing_record or {}).get("families", [])]
    conv = [m for m in conv if {"direct_nchw", "conversion"} <= set(m)]
    if conv:
        worse = all(m["conversion"] > m["direct_nchw"] for m in conv)
        lines.append("Boundary: " + ("in every family the conversion route is slower than the direct NCHW kernel, "
                                     "as in the post: a native-layout gain does not pay for converting per call."
                                     if worse else "the conversion route is not slower in every family here; "
                                     "the post's boundary does not reproduce as stated on this machine."))
    for fam in (defaults_record or {}).get("families", []):
        if "skipped" in fam:
            lines.append(f"Default shape {fam['task']} {tuple(fam['shape'])}: skipped ({fam['skipped']}).")
            continue
        ms = {k: v["median_ms"] for k, v in fam["timing"].get("A", {}).get("stats", {}).items()}
        lines.append(f"Default shape {fam['task']} {tuple(fam['shape'])}, {fam['timing'].get('A', {}).get('protocol', {}).get('rounds')} "
                     "rounds: " + ", ".join(f"{k} {v:.4g} ms" for k, v in ms.items()) + ".")
    if profile_record:
        lines.append(op_profile_line(profile_record))
    lines.append("Not supported: other GPUs or torch builds (the bit identity follows one torch's Reduce.cuh "
                 "configuration), shapes whose plan the kernels refuse, training/backward.")
    return lines


# --- the run's summary and headline (labkit.studies.catalog dispatches here) -------------------------------------

RUN_NAME = "layout_boundary"
NOTEBOOK = "09_layout_boundary"


def layout_block(records: dict) -> dict | None:
    """Issue 12's `layout` block of a layout_boundary run (notebook 09): {family: {direct_nchw_ms, rows_ms,
    conversion_ms, cases, passed}}: protocol A medians at the evaluation shape; cases/passed count the (ordinary
    case, route) checks under the official predicate."""
    timing, correctness = records.get("timing") or {}, records.get("correctness") or {}
    if "families" not in timing and "cases" not in correctness:
        return None
    ordinary = [c for c in correctness.get("cases", []) if c.get("distribution") in ORDINARY]
    fams = {f["family"]: f for f in timing.get("families", [])}
    out = {}
    for family in sorted({c["family"] for c in ordinary} | set(fams)):
        stats = fams.get(family, {}).get("timing", {}).get("A", {}).get("stats", {})
        checks = [ch for c in ordinary if c["family"] == family for r, ch in c["routes"].items()
                  if r in ROUTES]
        out[family] = {f"{r}_ms": stats.get(r, {}).get("median_ms") for r in ROUTES}
        out[family] |= {"cases": len(checks), "passed": sum(bool(ch["official_pass"]) for ch in checks)}
    return out


def layout_line(layout: dict) -> str:
    fmt = lambda v: "n/a" if v is None else f"{v:.3g}"  # noqa: E731
    parts = [f"{fam} direct {fmt(b['direct_nchw_ms'])} / rows {fmt(b['rows_ms'])} / conversion "
             f"{fmt(b['conversion_ms'])} ms, {b['passed']}/{b['cases']} pass" for fam, b in layout.items()]
    return "layout: " + "; ".join(parts)


def summary(records: dict, prov: dict) -> dict:
    block = layout_block(records)
    return {"layout": block} if block else {}


def summary_lines(s: dict) -> list[str]:
    return [layout_line(s["layout"])] if s.get("layout") else []


def page_headline(records: dict, summary: dict) -> str:
    from labkit.records.text import on_gpu

    layout = summary.get("layout") or {}
    parts = []
    for family, b in layout.items():
        if b.get("direct_nchw_ms") and b.get("conversion_ms"):
            parts.append(f"{family}: direct NCHW {b['direct_nchw_ms']:.3g} ms, conversion route "
                         f"{b['conversion_ms']:.3g} ms")
    cases = sum(b["cases"] for b in layout.values())
    passed = sum(b["passed"] for b in layout.values())
    timed = f"under {bench.PROTOCOL_NAMES['A']}: " if parts else ""
    checks = f"{passed}/{cases} route checks pass the official predicate"
    return timed + "; ".join(parts + [checks]) + f" {on_gpu(summary)}"
