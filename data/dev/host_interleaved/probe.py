"""Dev probe (not a committed run): the drop-in's L1/40 forward + backward under protocol B's start, alone (its calls
back to back) and interleaved (each round times torch eager, the drop-in and torch.compile once, in a shuffled
order, as notebook 10's sweep does). Per drop-in call: the event pair's time, the host's time in the forward and in
torch.autograd.grad (perf_counter), and what the caching allocator did during the call (torch.cuda.memory_stats
deltas: device allocations made and freed, allocation retries). Writes probe.json into $OUT."""
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import torch  # noqa: E402

from labkit.studies import training  # noqa: E402

ROUNDS = 20
KEYS = ("num_device_alloc", "num_device_free", "num_alloc_retries")


def timed(fn, x, w, b, dy, ns, flush):
    flush.zero_()
    torch.cuda.synchronize()
    before = torch.cuda.memory_stats()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    t0 = time.perf_counter()
    xs = x.detach().requires_grad_()
    y = fn(xs, ns, w, b, 1e-5)
    t1 = time.perf_counter()
    g = torch.autograd.grad(y, (xs, w, b), dy)
    t2 = time.perf_counter()
    end.record()
    end.synchronize()
    after = torch.cuda.memory_stats()
    del y, g
    return {"event_ms": start.elapsed_time(end), "fwd_host_us": (t1 - t0) * 1e6, "bwd_host_us": (t2 - t1) * 1e6,
            **{k: after.get(k, 0) - before.get(k, 0) for k in KEYS}}


def summary(calls):
    return {"calls": len(calls), **{f"median_{k}": statistics.median(c[k] for c in calls)
                                    for k in ("event_ms", "fwd_host_us", "bwd_host_us")},
            **{f"calls_with_{k}": sum(c[k] > 0 for c in calls) for k in KEYS}}


def main():
    import labkit
    shape = (16, 64, 256, 256)
    x, w, b, dy = training._tensors(shape, 0, "cuda")
    w, b = w.detach().requires_grad_(), b.detach().requires_grad_()
    ns = tuple(w.shape)
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    compiled = torch.compile(lambda t, n, ww, bb, e: torch.nn.functional.layer_norm(t, n, ww, bb, e), dynamic=False,
                             fullgraph=True)
    fns = {"native": torch.nn.functional.layer_norm, "dropin": labkit.layer_norm, "native_compiled": compiled}
    for fn in fns.values():
        for _ in range(3):
            timed(fn, x, w, b, dy, ns, flush)
    alone = [timed(labkit.layer_norm, x, w, b, dy, ns, flush) for _ in range(ROUNDS)]
    rng = random.Random(0)
    inter, others = [], {"native": [], "native_compiled": []}
    for _ in range(ROUNDS):
        order = list(fns)
        rng.shuffle(order)
        for name in order:
            r = timed(fns[name], x, w, b, dy, ns, flush)
            (inter if name == "dropin" else others[name]).append(r)
    alone_after = [timed(labkit.layer_norm, x, w, b, dy, ns, flush) for _ in range(ROUNDS)]
    out = {"alone": summary(alone), "interleaved": summary(inter), "alone_after": summary(alone_after),
           "others": {k: summary(v) for k, v in others.items()},
           "calls": {"alone": alone, "interleaved": inter, "alone_after": alone_after}}
    for k in ("alone", "interleaved", "alone_after"):
        print(k, {a: (round(v, 4) if isinstance(v, float) else v) for a, v in out[k].items()}, flush=True)
    meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
            "commit": os.environ.get("LABKIT_GIT_COMMIT")}
    Path(os.environ.get("OUT", "."), "probe.json").write_text(json.dumps({"meta": meta, **out}, indent=1))


if __name__ == "__main__":
    main()
