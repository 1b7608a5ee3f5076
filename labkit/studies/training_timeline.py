"""Where protocol B's time goes in one forward + backward call (notebook 10): the profiled `training_b_timeline`
record, its split into per-call timelines, and the rows and sentence the L1/40 goal reads. Apart because it
reads a profiler trace, not timings."""
from __future__ import annotations

from labkit.studies.training_sweep import QUICK, _tensors, methods
from labkit.tasks import L1_40


TIMELINE_METHODS = ("dropin", "native_compiled")
METHOD_LABELS = {"dropin": "drop-in", "native_compiled": "torch.compile(F.layer_norm)"}
TIMELINE_CALLS = 5
HOST_OPS_KEPT = 12  # per call: the longest host events before its first kernel (the record keeps them for reading)


def timeline_shape(mode: str) -> tuple[int, ...]:
    """L1/40 in full mode; quick mode's smallest wide shape."""
    return L1_40 if mode == "full" else QUICK[-1]


def b_timeline(shape=L1_40, calls: int = TIMELINE_CALLS, seed: int = 0, eps: float = 1e-5, device="cuda") -> dict:
    """Where protocol B's time goes at one shape: `calls` forward + backward calls of the drop-in and of torch.compile,
    each timed as protocol B times it (the L2 flushed, an event pair around the call) under torch.profiler, after
    one profiled call that is dropped. Per call (`call_timelines`): the event time, the kernels' busy time, the wait
    from the start event to the first kernel (the host's entry into the call, while the GPU idles) and the GPU's
    idle time between its kernels, and the longest host events while the GPU waited for its first kernel. The
    profiler's own per-op cost slows the host, so the host's shares are upper bounds; the `training_b_timeline`
    record."""
    from torch.profiler import ProfilerActivity, profile

    from labkit.studies.bench import PROTOCOL_B, CudaEventTimer

    x, w, b, dy = _tensors(shape, seed, device)
    fns = methods(x, w, b, dy, eps, compiled=True)
    timer = CudaEventTimer(PROTOCOL_B.flush_l2_bytes)
    out = {}
    for name in TIMELINE_METHODS:
        fn = fns[name]
        for _ in range(PROTOCOL_B.warmups):
            timer(fn, 1)
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], acc_events=True) as prof:
            event_ms = [timer(fn, 1) for _ in range(calls + 1)]
        events = [{"gpu": str(e.device_type).endswith("CUDA"), "name": e.name, "ts": e.time_range.start,
                   "end": e.time_range.end} for e in prof.events()]
        split = call_timelines(events, calls + 1)
        # the first profiled call carries the profiler's start-up (3.4 ms against 0.8 in training-455d92): dropped
        out[name] = {"event_ms": event_ms[1:], **split, "timelines": split["timelines"][1:],
                     "dropped_first_ms": event_ms[0]}
    return {"shape": list(shape), "protocol": PROTOCOL_B.name, "calls": calls, "methods": out}


def call_timelines(events: list[dict], calls: int) -> dict:
    """Split a profiled trace of `calls` CudaEventTimer calls into one timeline each. A call is its start event's
    record, the kernels it launched, its end event's record and the synchronize on it: its kernels are those that
    start after the start record returns and end before that synchronize returns (the L2 flush runs, and is waited
    for, before the record). `events`: {"gpu": kernel or host, "name", "ts", "end"} in us. {"timelines": [...]}, or
    {"timelines": [], "error": why} where the trace does not have that shape."""
    host = sorted((e for e in events if not e["gpu"]), key=lambda e: e["ts"])
    records = [e for e in host if "EventRecord" in e["name"]]
    syncs = [e for e in host if e["name"] == "cudaEventSynchronize"]
    if len(records) != 2 * calls or len(syncs) != calls:
        return {"timelines": [], "error": f"{len(records)} event records and {len(syncs)} event synchronizes in "
                                          f"the trace, expected {2 * calls} and {calls}"}
    kernels = sorted((e for e in events if e["gpu"]), key=lambda e: e["ts"])
    out = []
    for start, done in zip(records[::2], syncs):
        ks = [k for k in kernels if k["ts"] >= start["end"] and k["end"] <= done["end"]]
        if not ks:
            return {"timelines": [], "error": "a call with no kernel in the trace"}
        # what the host ran while the GPU waited for the first kernel: the longest host events in that window
        waiting = [e for e in host if start["end"] <= e["ts"] < ks[0]["ts"]]
        longest = sorted(waiting, key=lambda e: e["end"] - e["ts"], reverse=True)[:HOST_OPS_KEPT]
        busy, reach = 0.0, ks[0]["ts"]
        for k in ks:  # the union of the kernels' intervals
            busy += max(0.0, k["end"] - max(k["ts"], reach))
            reach = max(reach, k["end"])
        first, last = ks[0]["ts"], max(k["end"] for k in ks)
        out.append({"kernels": len(ks), "busy_us": busy, "wait_first_us": first - start["end"],
                    "idle_between_us": (last - first) - busy, "span_us": last - start["end"],
                    "host_before_first": [{"name": e["name"][:80], "at_us": e["ts"] - start["end"],
                                           "us": e["end"] - e["ts"]} for e in longest]})
    return {"timelines": out}


def timeline_rows(record: dict | None) -> list[dict]:
    """One row per method: medians over the profiled calls."""
    from statistics import median

    rows = []
    for name, m in ((record or {}).get("methods") or {}).items():
        t = m.get("timelines") or []
        med = (lambda k: median(c[k] for c in t) if t else None)  # noqa: E731
        rows.append({"method": METHOD_LABELS.get(name, name), "event ms (profiled)": median(m["event_ms"]),
                     "kernels busy ms": None if med("busy_us") is None else med("busy_us") / 1e3,
                     "before the first kernel us": med("wait_first_us"),
                     "idle between kernels us": med("idle_between_us"), "kernels": med("kernels"),
                     **({"trace": m["error"]} if m.get("error") else {})})
    return rows


def timeline_text(record: dict | None, method: str = "dropin") -> str | None:
    """The drop-in's profiled eager call at L1/40 in words, for the L1/40 goal: GPU busy, then the host's share."""
    if not record or tuple(record["shape"]) != tuple(L1_40):
        return None
    row = next((r for r in timeline_rows(record) if r["method"] == METHOD_LABELS.get(method, method)), None)
    if not row or row["kernels busy ms"] is None:
        return None
    return (f"profiled as the eager rounds time a call (the GPU idle at the start event): kernels busy "
            f"{row['kernels busy ms']:.3g} of {row['event ms (profiled)']:.3g} ms; "
            f"host shares, with the profiler's cost in them: {row['before the first kernel us']:.0f} us before the "
            f"first kernel, {row['idle between kernels us']:.0f} us idle between kernels")
