"""Where the layout boundary's time goes (notebook 09): one call per route under torch.profiler (the post's
norm_baselines step), the `op_profile` record, and its rows and sentence. Apart from the timings because one
profiled call explains them and is no part of them."""
from __future__ import annotations

import math
import time
import warnings

from labkit import tasks
from labkit.studies.layout_routes import RECORD_SCHEMA, light_check, make_case_input, methods_for


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
