"""Host microseconds per forward + backward call, torch beside the drop-in (notebook 10): the `training_host`
record at a tiny shape torch's kernels serve and at one ours serve, and its rows. Apart because it times the
host, not the GPU."""
from __future__ import annotations

from labkit.studies.measure import host_us_per_call
from labkit.studies.training_sweep import _tensors
from labkit.tasks import shape_key


HOST_SHAPE = (8, 256)  # tiny: the GPU keeps up, so a loop's wall time is the host's
# The hand-off measurement needs a tiny shape torch's kernels serve both ways: the first of these the dispatch
# hands to torch on this GPU (on the H200 its tables route (8, 256)'s forward to rows_fused; N % 4 != 0 is never
# ours), so the "torch's kernel serves" goals measure what they say.
HOST_TINY_CANDIDATES = (HOST_SHAPE, (8, 255), (8, 250))
# Candidates for a second host measurement where our kernels serve both directions (the first the dispatch routes
# to them on this GPU): the cost of the drop-in's own path, which the tiny shape's hand-off to torch never pays.
HOST_OURS_CANDIDATES = ((16, 1 << 16), (64, 1 << 16), (16, 1 << 18), (4, 1 << 20), (16, 1 << 20))


HOST_REPEATS = 5  # batches per cost in host_cost (their median is the cost)


def _host_one(shape, calls: int, device, repeats: int = HOST_REPEATS) -> dict:
    import statistics

    import torch

    import labkit
    from labkit.ops.dropin import explain
    from labkit.ops.dropin.plan import backward_is_torchs

    x, w, b, dy = _tensors(shape, 0, device)
    ns = tuple(w.shape)
    w, b = w.requires_grad_(), b.requires_grad_()
    xs = x.detach().clone().requires_grad_()
    sync = torch.cuda.synchronize if torch.device(device).type == "cuda" else (lambda: None)
    per = max(1, calls // repeats)
    out = {"shape": list(shape), "calls": calls, "repeats": repeats, "calls_per_batch": per,
           "forward_path": explain(x, ns, w, b)["path"],
           "backward_ours": not backward_is_torchs(x, ns, w, b)}
    # the backward alone needs forwards made before the clock; where keeping them all would take more than
    # 1 GiB, it is the whole step's time less the forward's instead
    keep_outputs = (per + 100) * x.numel() * 4 <= 1 << 30
    out["bwd_measured_as"] = "autograd.grad of kept forwards" if keep_outputs else "step minus forward"
    fns = (("torch", torch.nn.functional.layer_norm), ("dropin", labkit.layer_norm))
    samples: dict[str, list[float]] = {}

    def sample(key, us):
        samples.setdefault(key, []).append(us)

    # `repeats` batches of `per` calls, torch's and the drop-in's interleaved (the order alternating per batch), so
    # that the host's drift over the measurement (clocks, other processes, the allocator's state) falls on both;
    # each cost is the median of its batches' per-call means
    for rep in range(repeats):
        for label, fn in (fns if rep % 2 == 0 else fns[::-1]):
            fwd = host_us_per_call(lambda: fn(xs, ns, w, b, 1e-5), per, sync)
            sample(f"{label}_fwd_grad_us", fwd)
            if keep_outputs:
                ys = [fn(xs, ns, w, b, 1e-5) for _ in range(per + 100)]
                it = iter(ys)
                sample(f"{label}_bwd_us",
                       host_us_per_call(lambda: torch.autograd.grad(next(it), (xs, w, b), dy), per, sync))
                del ys, it
            else:
                whole = host_us_per_call(lambda: torch.autograd.grad(fn(xs, ns, w, b, 1e-5), (xs, w, b), dy), per,
                                         sync)
                sample(f"{label}_bwd_us", whole - fwd)
            with torch.no_grad():
                sample(f"{label}_nograd_us", host_us_per_call(lambda: fn(x, ns, w, b, 1e-5), per, sync))
    for key, values in samples.items():
        out[key] = statistics.median(values)
        out[key.removesuffix("_us") + "_batches_us"] = values
    return out


def host_cost(calls: int = 2000, device="cuda") -> dict:
    """Host microseconds per call, torch beside the drop-in in the same run: a forward with grad on, a backward
    (torch.autograd.grad of one forward's output, the forward made before the clock starts), and a no-grad
    forward; at the first of HOST_TINY_CANDIDATES the drop-in hands to torch both ways and at the first of
    HOST_OURS_CANDIDATES where our kernels serve both directions (their own path's cost; absent where none does).
    Each cost is the median of HOST_REPEATS batches, torch's and the drop-in's interleaved. The `training_host`
    record: {"calls", "shapes": [per shape: the costs, each batch's ("*_batches_us"), "forward_path",
    "backward_ours"]}."""
    import torch

    from labkit.ops.dropin import explain
    from labkit.ops.dropin.plan import backward_is_torchs

    def torchs_both_ways(shape) -> tuple[bool, bool]:
        """(torch's kernel serves the forward, torch's the backward) for `shape` on this device."""
        x, w = torch.empty(shape, device=device), torch.empty(shape[1:], device=device)
        return explain(x, shape[1:], w, w)["path"] == "native", backward_is_torchs(x, shape[1:], w, w)

    tiny = next((s for s in HOST_TINY_CANDIDATES if torchs_both_ways(s) == (True, True)), HOST_SHAPE)
    entries = [_host_one(tiny, calls, device)]
    ours = next((s for s in HOST_OURS_CANDIDATES if torchs_both_ways(s) == (False, False)), None)
    if ours is not None:
        entries.append(_host_one(ours, calls, device))
    from labkit.ops.dropin import host

    why = host.unavailable(torch.device(device).index or 0) if torch.device(device).type == "cuda" else "CPU"
    return {"calls": calls, "shapes": entries,
            "host_extension": {"serves": why is None, "why_not": why, "source_hash": host.source_hash()}}


def host_entries(host: dict | None) -> list[dict]:
    """The per-shape entries of a `training_host` record (a run from before the second shape has one, flat)."""
    if not host:
        return []
    return list(host["shapes"]) if "shapes" in host else [host]


def host_rows(host: dict | None) -> list[dict]:
    rows = []
    for e in host_entries(host):
        served = (f"ours ({e['forward_path']}, our backward)" if e.get("backward_ours") else
                  "torch's (the drop-in hands the call to F.layer_norm)") if "forward_path" in e else "not recorded"
        rows += [{"shape": shape_key(e["shape"]), "kernels": served, "call": what, "torch us": e.get(f"torch_{k}_us"),
                  "drop-in us": e.get(f"dropin_{k}_us"), "calls": e["calls"]}
                 for k, what in (("fwd_grad", "forward, grad on"), ("bwd", "backward (autograd.grad)"),
                                 ("nograd", "forward, no grad"))]
    return rows
