"""Training with the drop-in (notebook 10): forward + backward speed against torch eager and torch.compile, the
backward's floor, host cost per call, and a small transformer trained with and without the swap, bit for bit.
Run functions return JSON-able records; rows/verdict functions read them."""
from __future__ import annotations

import statistics
import time
from dataclasses import replace

from labkit.studies.bench import us as _us
from labkit.studies.measure import host_us_per_call
from labkit.tasks import L1_40, shape_key

# (rows, N) from (1, 2**24) to (65536, 256), 64 MiB of float32 each, plus ordinary transformer shapes and L1/40.
SWEEP = tuple((1 << k, 1 << (24 - k)) for k in range(0, 17, 2))
ORDINARY = ((4096, 768), (8192, 1024), (8192, 4096), (16384, 4096), (32768, 2048), (2048, 16384), (1024, 16384))
WIDE = (L1_40, (4, 1 << 22), (1, 8, 1024, 1024))
QUICK = ((1, 1 << 20), (64, 1 << 14), (4096, 768), (16, 64, 32, 32))
METHODS = ("native", "dropin", "dropin_our_backward", "dropin_torch_backward", "native_compiled", "dropin_compiled")


def shapes(mode: str) -> list[tuple[int, ...]]:
    return list(dict.fromkeys([*WIDE, *ORDINARY, *SWEEP])) if mode == "full" else list(QUICK)


def _tensors(shape, seed: int, device):
    import torch

    from labkit.inputs import make_affine, make_input

    x = make_input("uniform", shape, seed, device)
    w, b = make_affine("random_normal", shape[1:], seed, device)
    g = torch.Generator(device=device).manual_seed(seed + 1)
    dy = torch.randn(shape, device=device, generator=g)
    return x, w, b, dy


def step(fn, x, w, b, dy, ns, eps):
    """One forward with grad on and torch.autograd.grad for x, weight and bias (what a training step asks of it)."""
    import torch

    xs = x.detach().requires_grad_()
    y = fn(xs, ns, w, b, eps)
    return torch.autograd.grad(y, (xs, w, b), dy)


def methods(x, w, b, dy, eps: float, compiled: bool = True) -> dict:
    """Zero-argument forward + backward callables: torch's eager F.layer_norm, the drop-in as dispatched, the
    drop-in with our backward and with torch's backward forced, and both under torch.compile (static shapes)."""
    import torch

    import labkit
    from labkit.ops.dropin.plan import forced_backward

    ns = tuple(w.shape)
    w, b = w.detach().requires_grad_(), b.detach().requires_grad_()

    def forced(path):
        def call():
            with forced_backward(path):
                return step(labkit.layer_norm, x, w, b, dy, ns, eps)
        return call

    m = {"native": lambda: step(torch.nn.functional.layer_norm, x, w, b, dy, ns, eps),
         "dropin": lambda: step(labkit.layer_norm, x, w, b, dy, ns, eps),
         "dropin_our_backward": forced("auto"), "dropin_torch_backward": forced("native")}
    if compiled:
        from labkit.studies.measure import compile_static

        cn, cd = compile_static(lambda xx, ns_, ww, bb, e: torch.nn.functional.layer_norm(xx, ns_, ww, bb, e),
                                lambda xx, ns_, ww, bb, e: labkit.layer_norm(xx, ns_, ww, bb, e), fullgraph=True)
        m["native_compiled"] = lambda: step(cn, x, w, b, dy, ns, eps)
        m["dropin_compiled"] = lambda: step(cd, x, w, b, dy, ns, eps)
    return m


def _as_dispatched(fns: dict, protocol: str) -> dict:
    """`fns` as a model timed under `protocol` calls them: under graph replay the eager drop-in ("dropin") plans by
    the tables' graph-replay scores, forward and backward (`labkit.dispatch_protocol("graph")`, what a model under
    CUDA graphs sets); the compiled drop-in and the forced-backward methods plan as by default, as do all eager
    calls."""
    if protocol != "graph" or "dropin" not in fns:
        return fns
    from labkit import dispatch_protocol

    def dropin(call=fns["dropin"]):
        with dispatch_protocol("graph"):
            return call()
    return {**fns, "dropin": dropin}


def sweep(shape_list, rounds: int = 15, seed: int = 0, eps: float = 1e-5, device="cuda", compiled: bool = True,
          log=None) -> dict:
    """Forward + backward medians per shape and method, eager per call with the L2 flushed (protocol B: host time
    counts) and under graph replay (protocol A); a method that fails is recorded with its error. The
    `training_sweep` record."""
    import torch

    from labkit.studies.bench import PROTOCOL_A, PROTOCOL_B, time_methods

    eager_p = replace(PROTOCOL_B, rounds=EAGER_ROUND_FACTOR * rounds, warmups=3)
    graph_p = replace(PROTOCOL_A, rounds=rounds, repeats=3)
    out = []
    for shape in shape_list:
        t0 = time.perf_counter()
        x, w, b, dy = _tensors(shape, seed, device)
        row = {"key": shape_key(shape), "shape": list(shape), "rows": x.numel() // w.numel(), "n": w.numel(),
               "l1_40": tuple(shape) == L1_40, "errors": {}}
        ok = {}
        for name, fn in methods(x, w, b, dy, eps, compiled).items():
            try:
                fn()
                torch.cuda.synchronize()
                ok[name] = fn
            except Exception as exc:  # a failing method is a row of the table, not a crash of the sweep
                row["errors"][name] = f"{type(exc).__name__}: {str(exc)[:300]}"
        for key, protocol in (("eager", eager_p), ("graph", graph_p)):
            try:
                rec = time_methods(_as_dispatched(ok, key), protocol, "native")
                row[key] = {k: v["median_ms"] for k, v in rec.stats.items()}
                row[f"{key}_stats"] = rec.stats
                row[f"{key}_samples"] = rec.samples_ms  # per round, every method once in shuffled order: paired ratios
            except Exception as exc:
                row[key] = {}
                row["errors"][key] = f"{type(exc).__name__}: {str(exc)[:300]}"
        row["seconds"] = time.perf_counter() - t0
        out.append(row)
        x = w = b = dy = None  # freed before the next shape is made
        torch.cuda.empty_cache()
        if log:
            log(f"{row['key']}: {row['seconds']:.1f} s")
    return {"protocols": {"eager": eager_p.__dict__, "graph": graph_p.__dict__}, "methods": list(METHODS),
            "shapes": out}


# --- L1/40 under KernelBench's own timing ---------------------------------------------------------------------------

KB_METHODS = ("native", "dropin", "native_compiled")
KB_LABELS = {"native": "torch eager F.layer_norm", "dropin": "drop-in",
             "native_compiled": "torch.compile(F.layer_norm)"}


def kernelbench_fwdbwd(shape=L1_40, blocks: int = 3, num_trials: int = 100, seed: int = 0, eps: float = 1e-5,
                       device="cuda") -> dict:
    """The `training_kernelbench` record: one shape's forward + backward (`methods`: a forward with grad on and
    torch.autograd.grad for x, weight and bias) timed by KernelBench's cuda_event method
    (labkit.studies.kernelbench_timing.cuda_event_times: each program's trials back to back, a fresh 256 MiB
    thrash filled before each trial's start event with no synchronize between them, the first trial dropped; it
    reports the mean), for torch eager, the drop-in and torch.compile(F.layer_norm), `blocks` times over with the
    programs' order rotated. Protocol B as issue 24 defines it; the sweep's interleaved rounds (a method's call
    after another method's, the GPU idle at each start event) stand beside it."""
    import torch

    from labkit.studies.kernelbench_timing import DISCARD_FIRST, EVAL_WARMUP, rotated_blocks

    if blocks < 1 or num_trials < 1:
        raise ValueError(f"blocks and num_trials must be at least 1, got {blocks} and {num_trials}")
    x, w, b, dy = _tensors(shape, seed, device)
    fns = methods(x, w, b, dy, eps, compiled=True)
    samples, orders = rotated_blocks({n: (fns[n], EVAL_WARMUP) for n in KB_METHODS}, blocks, num_trials)
    x = w = b = dy = fns = None
    torch.cuda.empty_cache()
    return {"shape": list(shape), "blocks": blocks, "num_trials": num_trials, "discard_first": DISCARD_FIRST,
            "warmup": EVAL_WARMUP, "orders": orders, "samples_ms": samples}


KB_PROTOCOL = "KernelBench's cuda_event timing (protocol B): means over all trials"
INTERLEAVED_PROTOCOL = "eager per call, methods interleaved per round (medians; paired per-round ratios)"


def judged_by_kernelbench(t: dict) -> bool:
    """Whether a `training` block's L1/40 figures are KernelBench's timing (else the sweep's interleaved rounds)."""
    return t.get("l1_40_protocol") == KB_PROTOCOL


def kernelbench_figures(record: dict | None) -> dict | None:
    """From a `training_kernelbench` record at L1/40: every program's mean over all trials (as KernelBench reports),
    the drop-in's slowest block, and its worst block's ratios (their mean / the drop-in's, block by block: one block
    where a program runs slow as a whole must not carry a pooled mean). None for a record at another shape (quick
    mode's), which no L1/40 goal may read."""
    from labkit.studies.kernelbench_timing import block_means, pooled_means

    if not record or tuple(record["shape"]) != tuple(L1_40):
        return None
    samples = {n: record["samples_ms"][n] for n in KB_METHODS}
    block, pooled = block_means(samples), pooled_means(samples)
    per = {n: [o / d for o, d in zip(block[n], block["dropin"])] for n in ("native", "native_compiled")}
    return {"mean_ms": pooled, "block_means_ms": block, "dropin_slowest_block_ms": max(block["dropin"]),
            "vs_compiled_worst_block": min(per["native_compiled"]), "vs_native_worst_block": min(per["native"]),
            "vs_compiled_per_block": per["native_compiled"], "vs_native_per_block": per["native"]}


def kernelbench_rows(record: dict | None) -> list[dict]:
    """Per program: KernelBench's mean per block and over all trials, the median and quartiles."""
    from labkit.studies.kernelbench_timing import stats

    if not record:
        return []
    out = []
    for name in KB_METHODS:
        blocks = record["samples_ms"][name]
        s = stats([t for b in blocks for t in b])
        out.append({"method": KB_LABELS[name],
                    "mean ms per block": " / ".join(f"{statistics.fmean(b):#.3g}" for b in blocks),
                    "mean ms": s["mean_ms"],
                    "median ms [q1, q3]": f"{s['median_ms']:#.3g} [{s['q1_ms']:#.3g}, {s['q3_ms']:#.3g}]"})
    return out


# Eager samples are single host-bound calls with heavy tails (at (4096, 768) torch's own quartiles were 212 and 345 us
# in run training-774171, 25 rounds; git history keeps it): three times the graph rounds there, and every ratio a
# median of per-round ratios (`paired`), which the drift shared by a round's methods does not move.
EAGER_ROUND_FACTOR = 3

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


# --- a model trained with and without the swap --------------------------------------------------------------------

MODEL = {"vocab": 512, "d_model": 256, "heads": 4, "layers": 2, "batch": 8, "seq": 64, "steps": 3}


def _bits_equal(a, b) -> bool:
    import torch

    if a is None or b is None:
        return a is None and b is None
    return a.shape == b.shape and torch.equal(a.detach().contiguous().view(torch.int32),
                                              b.detach().contiguous().view(torch.int32))


def make_transformer(device="cuda", seed: int = 0, **cfg):
    """A small encoder-only transformer from torch's own modules (fp32, no dropout): embedding, TransformerEncoder
    layers (each with two nn.LayerNorms), a final nn.LayerNorm and a linear head."""
    import torch

    c = {**MODEL, **cfg}
    torch.manual_seed(seed)
    layer = torch.nn.TransformerEncoderLayer(c["d_model"], c["heads"], 4 * c["d_model"], dropout=0.0,
                                             batch_first=True)
    model = torch.nn.Sequential(torch.nn.Embedding(c["vocab"], c["d_model"]),
                                torch.nn.TransformerEncoder(layer, c["layers"], enable_nested_tensor=False),
                                torch.nn.LayerNorm(c["d_model"]), torch.nn.Linear(c["d_model"], c["vocab"]))
    with torch.no_grad():  # non-trivial affines, so a swap that ignored them would show
        for m in model.modules():
            if isinstance(m, torch.nn.LayerNorm):
                m.weight.normal_(1.0, 0.2)
                m.bias.normal_(0.0, 0.2)
    return model.to(device)


def _train(model, tokens, targets, steps: int, lr: float = 1e-3):
    import torch

    opt = torch.optim.Adam(model.parameters(), lr=lr)
    losses, grads = [], []
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        logits = model(tokens)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
        loss.backward()
        losses.append(loss.detach().clone())
        grads.append([p.grad.detach().clone() for p in model.parameters()])
        opt.step()
    return losses, grads, [p.detach().clone() for p in model.parameters()]


def model_steps(device="cuda", seed: int = 0, **cfg) -> dict:
    """MODEL['steps'] Adam steps of the transformer with nn.LayerNorm and with the drop-in swapped in (the same
    initial parameters and batch), under torch.use_deterministic_algorithms (without it torch's own model differs
    from itself: matmul and embedding backward reduce in a nondeterministic order): losses, every gradient of every
    step and the weights after the last, as int32 views. The `training_model` record."""
    import copy
    import torch

    from labkit import swap_layer_norms
    from labkit.ops.dropin import explain
    from labkit.studies.measure import deterministic_algorithms

    c = {**MODEL, **cfg}
    with deterministic_algorithms():
        ref = make_transformer(device, seed, **c)
        ours = copy.deepcopy(ref)
        swapped = swap_layer_norms(ours)
        g = torch.Generator(device="cpu").manual_seed(seed + 1)
        tokens = torch.randint(0, c["vocab"], (c["batch"], c["seq"]), generator=g).to(device)
        targets = torch.randint(0, c["vocab"], (c["batch"], c["seq"]), generator=g).to(device)
        r_loss, r_grads, r_w = _train(ref, tokens, targets, c["steps"])
        o_loss, o_grads, o_w = _train(ours, tokens, targets, c["steps"])
    ln = next(m for m in ours.modules() if type(m).__name__ == "LayerNorm")
    path = explain(torch.empty(c["batch"] * c["seq"], c["d_model"], device=device), (c["d_model"],), ln.weight,
                   ln.bias)
    grad_pairs = [(a, b) for ga, gb in zip(r_grads, o_grads) for a, b in zip(ga, gb)]
    return {**c, "swapped": swapped, "parameters": len(r_w), "ln_path": path["path"], "ln_reason": path["reason"],
            "losses": [float(v) for v in r_loss], "losses_identical": f"{sum(map(_bits_equal, r_loss, o_loss))}/"
                                                                      f"{len(r_loss)}",
            "grads_identical": f"{sum(_bits_equal(a, b) for a, b in grad_pairs)}/{len(grad_pairs)}",
            "weights_identical": f"{sum(map(_bits_equal, r_w, o_w))}/{len(r_w)}"}


WIDE_MODEL = {"channels": 64, "height": 256, "width": 256, "batch": 16, "steps": 5}


def wide_model(device="cuda", seed: int = 0, rounds: int = 10, **cfg) -> dict:
    """A model with a LayerNorm over (C, H, W), as at L1/40: a 1x1 convolution, LayerNorm((C, H, W)), GELU and a
    second 1x1 convolution, trained with SGD with nn.LayerNorm and with the drop-in: step times (CUDA events around
    each whole step, median of `rounds`) and the gradients of the first step as int32 views. The `training_wide`
    record."""
    import copy

    import torch

    from labkit import swap_layer_norms

    c = {**WIDE_MODEL, **cfg}
    torch.manual_seed(seed)
    shape = (c["channels"], c["height"], c["width"])
    ref = torch.nn.Sequential(torch.nn.Conv2d(c["channels"], c["channels"], 1), torch.nn.LayerNorm(shape),
                              torch.nn.GELU(), torch.nn.Conv2d(c["channels"], c["channels"], 1)).to(device)
    ours = copy.deepcopy(ref)
    swap_layer_norms(ours)
    x = torch.randn(c["batch"], *shape, device=device, generator=torch.Generator(device=device).manual_seed(seed))
    out = {**c}
    first = []
    for name, model in (("native", ref), ("dropin", ours)):
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        times = []
        for i in range(rounds + 2):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            opt.zero_grad(set_to_none=True)
            model(x).square().mean().backward()
            if i == 0:
                first.append([p.grad.detach().clone() for p in model.parameters()])
            opt.step()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        out[f"{name}_step_ms"] = sorted(times[2:])[len(times[2:]) // 2]
    out["first_step_grads_identical"] = f"{sum(map(_bits_equal, *first))}/{len(first[0])}"
    return out


# --- the backward's floor -------------------------------------------------------------------------------------------

FLOOR_SHAPES = ((16, 64 * 256 * 256), (4, 1 << 22), (2, 1 << 23), (1, 1 << 24))
CHAIN_CYCLES_PER_ELEMENT = 4  # grad_push: one dependent FADD (s1) and one FFMA (s2) per element, 4 cycles each


def floor_check(rounds: int = 15, seed: int = 0, device="cuda") -> dict:
    """The backward's floor at few long rows, measured parts in this run: the row sums cannot finish before their
    chains do (CHAIN_CYCLES_PER_ELEMENT x N/128 cycles at the SM clock measured by labkit.studies.measure.chain_floor)
    nor before x and dy are read once; the output pass reads x and dy again and writes dx. Floor = max(chain, sums'
    bytes at the copy ceiling) + the output pass's bytes at the copy ceiling. Beside it, our backward alone (graph
    replay). The `training_floor` record."""
    from dataclasses import replace

    import torch

    from labkit.ops import backward as grad
    from labkit.studies.bench import PROTOCOL_A, time_methods
    from labkit.studies.measure import chain_floor, copy_ceiling_a

    ceiling = copy_ceiling_a(rounds=rounds, device=device)
    clock = chain_floor(rounds=rounds, device=device)["sm_clock_ghz_implied"]
    gbps = ceiling["read_plus_write_gbps"]
    rows_out = []
    for rows, n in FLOOR_SHAPES:
        x, w, b, dy = _tensors((rows, n), seed, device)
        _, mean, rstd = torch.native_layer_norm(x, (n,), w, b, 1e-5)
        rec = time_methods({"ours": lambda: grad.backward(dy, x, (n,), mean, rstd, w, b)},
                           replace(PROTOCOL_A, rounds=rounds, repeats=3))
        elems = rows * n
        chain_ms = CHAIN_CYCLES_PER_ELEMENT * (n // 128) / (clock * 1e6)
        sums_ms = 2 * 4 * elems / (gbps * 1e6)
        output_ms = 3 * 4 * elems / (gbps * 1e6)
        floor_ms = max(chain_ms, sums_ms) + output_ms
        rows_out.append({"key": shape_key((rows, n)), "rows": rows, "n": n, "chain_ms": chain_ms, "sums_bytes_ms":
                         sums_ms, "output_bytes_ms": output_ms, "floor_ms": floor_ms,
                         "ours": rec.stats["ours"], "schedule": grad.launches(rows, n, _device(x)).schedule})
        x = dy = None  # freed before the next shape is made
    return {"ceiling": ceiling, "sm_clock_ghz": clock, "shapes": rows_out}


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


def _device(x):
    from labkit.core.device import current_index, device_info

    return device_info(current_index(x.device))


# --- bits of the backward at many inputs ------------------------------------------------------------------------------

def identity(device="cuda", eps: float = 1e-5) -> dict:
    """Forward and backward bits (y, grad of x, weight, bias; int32 views) of labkit.layer_norm with our backward
    forced wherever its predicate takes the input, against F.layer_norm with autograd, on the drop-in's identity
    cases (labkit.studies.dropin.identity_cases: our kernels' shapes and every input torch sends down another
    path). The `training_identity` record."""
    import torch

    import labkit
    from labkit.ops.dropin.plan import forced_backward
    from labkit.studies.dropin import identity_cases

    rows = []
    for case in identity_cases(device):
        x, ns, w, b = case["make"]()
        row = {"case": case["case"], "shape": list(x.shape), "dtype": str(x.dtype).replace("torch.", "")}
        try:
            outs = []
            for fn, path in ((torch.nn.functional.layer_norm, None), (labkit.layer_norm, "auto")):
                ts = [t.detach().clone().requires_grad_() if t is not None else None for t in (x, w, b)]
                with forced_backward(path):
                    y = fn(ts[0], ns, ts[1], ts[2], eps)
                    gy = torch.randn(y.shape, generator=torch.Generator().manual_seed(7)).to(y.dtype).to(y.device)
                    if y.numel():
                        y.backward(gy)
                outs.append([y.detach()] + [t.grad if t is not None else None for t in ts])
            equal = [_bits_equal_any(a, c) for a, c in zip(*outs)]
            row.update({"forward": equal[0], "backward": all(equal[1:])})
        except Exception as exc:  # a failure of the drop-in, recorded, never skipped
            row.update({"forward": False, "backward": False, "error": f"{type(exc).__name__}: {exc}"})
        rows.append(row)
    return {"cases": rows}


def _bits_equal_any(a, b) -> bool:
    import torch

    if a is None or b is None:
        return a is None and b is None
    view = {torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16,
            torch.float64: torch.int64}[a.dtype]
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(a.contiguous().view(view),
                                                                     b.contiguous().view(view))


# --- readers: records -> rows, figure, verdict, summary ---------------------------------------------------------------

RUN_NAME = "training"
NOTEBOOK = "10_training"
ORDINARY_KEYS = tuple(shape_key(s) for s in ORDINARY)
L1_40_FWDBWD_GOAL_MS = 0.70  # issue 22: L1/40 forward + backward, eager per call
NATIVE_FLOOR_MS = 0.200  # the goal: >= 1.0x eager native wherever native's forward+backward takes >= 200 us


def _per_round(row: dict, protocol: str, a: str, b: str, combine) -> float | None:
    """`combine(a's times, b's times)` for one sweep row under `protocol`: the median over rounds where the row kept
    its samples (each round times every method once), else (older records) `combine` of the medians."""
    import numpy as np

    s = row.get(f"{protocol}_samples") or {}
    x, y = s.get(a), s.get(b)
    if x and y and len(x) == len(y):
        return float(np.median(combine(np.asarray(x, dtype=float), np.asarray(y, dtype=float))))
    t = row.get(protocol) or {}
    return float(combine(t[a], t[b])) if t.get(a) and t.get(b) else None


def paired(row: dict, protocol: str, num: str, den: str) -> float | None:
    """`num`'s time / `den`'s, as a median of per-round ratios (`_per_round`)."""
    import numpy as np

    return _per_round(row, protocol, num, den, np.divide)


def paired_difference_ms(row: dict, protocol: str, a: str, b: str) -> float | None:
    """`a`'s time - `b`'s in ms, as a median of per-round differences (`_per_round`)."""
    import numpy as np

    return _per_round(row, protocol, a, b, np.subtract)


def speed_rows(sweep_record: dict | None) -> list[dict]:
    """Per shape: forward + backward medians (us) of torch eager, the drop-in, and both compiled, eager per call,
    L2 flushed (protocol B) and the drop-in under graph replay (protocol A); ratios native / drop-in per protocol,
    each the median of per-round ratios (`paired`)."""
    rows = []
    for r in (sweep_record or {}).get("shapes", []):
        e, g = r.get("eager") or {}, r.get("graph") or {}
        rows.append({"shape": r["key"], "torch eager us": _us(e.get("native")), "drop-in eager us":
                     _us(e.get("dropin")), "eager x torch": paired(r, "eager", "native", "dropin"),
                     "drop-in graph us": _us(g.get("dropin")),
                     "graph x torch (graph)": paired(r, "graph", "native", "dropin"),
                     "torch.compile eager us": _us(e.get("native_compiled")),
                     "compiled drop-in eager us": _us(e.get("dropin_compiled")),
                     "x torch.compile (eager)": paired(r, "eager", "native_compiled", "dropin")})
    return rows


def figure(sweep_record: dict | None, label: str = ""):
    """Forward + backward time against elements per row (labkit.studies.plots.time_vs_shape, as the front page
    draws it); a figure saying so when the record has no such timing."""
    import matplotlib.pyplot as plt

    from labkit.studies.plots import time_vs_shape

    fig = time_vs_shape([(label or "forward + backward", sweep_record, "eager")])
    if fig is None:
        fig, ax = plt.subplots(figsize=(8, 2))
        ax.text(0.5, 0.5, "no forward + backward timing in the record", ha="center", va="center")
        ax.set_axis_off()
    return fig


def model_rows(model: dict | None) -> list[dict]:
    """The small transformer's record as a reader reads it: the model, the path its LayerNorms took, and the bits
    (losses, gradients, weights after the last step) of the swapped model against the original."""
    if not model:
        return []
    return [{"model": f"{model['layers']} layers, d_model {model['d_model']}, {model['heads']} heads, vocab "
                      f"{model['vocab']}", "batch x seq": f"{model['batch']} x {model['seq']}", "steps": model["steps"],
             "LayerNorms swapped": model["swapped"], "their path": model["ln_path"],
             "losses identical": model["losses_identical"], "gradients identical": model["grads_identical"],
             "weights identical": model["weights_identical"]}]


def wide_rows(wide: dict | None) -> list[dict]:
    """The wide-LayerNorm model's record: its shape, step times (ms) and first-step gradient bits."""
    if not wide:
        return []
    return [{"LayerNorm over": f"({wide['channels']}, {wide['height']}, {wide['width']})", "batch": wide["batch"],
             "steps": wide["steps"], "torch step ms": wide["native_step_ms"],
             "drop-in step ms": wide["dropin_step_ms"],
             "x torch": wide["native_step_ms"] / wide["dropin_step_ms"] if wide.get("dropin_step_ms") else None,
             "first-step gradients identical": wide["first_step_grads_identical"]}]


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


def complete_floor_ms(row: dict, gbps: float) -> tuple[float, float]:
    """(sums, output) bytes at the copy ceiling counting every byte the backward must move: the issue's floor counts
    x and dy read and dx written; the row sums also read gamma (N floats), the output pass reads gamma and writes
    dgamma and dbeta (3N floats): half of the output pass's bytes at one row, a third at two, a fifth at four."""
    elems, n = row["rows"] * row["n"], row["n"]
    return 4 * (2 * elems + n) / (gbps * 1e6), 4 * (3 * elems + 3 * n) / (gbps * 1e6)


def floor_rows(floor: dict | None) -> list[dict]:
    """The floor table: the issue's floor (x, dy read, dx written) and the complete one (complete_floor_ms) beside
    our backward's median under graph replay."""
    out = []
    gbps = ((floor or {}).get("ceiling") or {}).get("read_plus_write_gbps")
    for r in (floor or {}).get("shapes", []):
        row = {"shape": r["key"], "schedule": r["schedule"], "chain us": _us(r["chain_ms"]),
               "sums bytes us": _us(r["sums_bytes_ms"]), "output bytes us": _us(r["output_bytes_ms"]),
               "floor us": _us(r["floor_ms"]), "ours (graph) us": _us(r["ours"]["median_ms"]),
               "ours / floor": r["ours"]["median_ms"] / r["floor_ms"]}
        if gbps:
            sums, output = complete_floor_ms(r, gbps)
            complete = max(r["chain_ms"], sums) + output
            row.update({"complete floor us": _us(complete), "ours / complete floor": r["ours"]["median_ms"] / complete})
        out.append(row)
    return out


def _count(cases, key) -> str:
    judged = [c[key] for c in cases if c.get(key) is not None]
    return f"{sum(bool(v) for v in judged)}/{len(judged)}"


def _sum_counts(*counts: str) -> str:
    k = sum(int(c.split("/")[0]) for c in counts if c)
    n = sum(int(c.split("/")[1]) for c in counts if c)
    return f"{k}/{n}"


def training_block(records: dict) -> dict | None:
    """The `training` block of `labkit summary RUN --json` (issue 22 item 9), read from the run's records."""
    sweep = records.get("training_sweep")
    if not sweep:
        return None
    l1 = next((r for r in sweep["shapes"] if r.get("l1_40")), None) or {}
    worst = (None, None)
    for r in sweep["shapes"]:
        e = r.get("eager") or {}
        if e.get("native") and e.get("dropin") and e["native"] >= NATIVE_FLOOR_MS:
            ratio = paired(r, "eager", "native", "dropin")
            if worst[0] is None or ratio < worst[0]:
                worst = (ratio, r["key"])
    ordinary = [v for _, v in _ratio_rows(sweep, ISSUE_ORDINARY_KEYS, "graph", "native")]
    entries = host_entries(records.get("training_host"))
    host = entries[0] if entries else {}
    ours = next((e for e in entries[1:] if e.get("backward_ours")), None)
    model = records.get("training_model") or {}
    ident = (records.get("training_identity") or {}).get("cases", [])
    interleaved = {"l1_40_fwdbwd_ms": (l1.get("eager") or {}).get("dropin"),
                   "l1_40_compiled_fwdbwd_ms": (l1.get("eager") or {}).get("native_compiled"),
                   "l1_40_native_fwdbwd_ms": (l1.get("eager") or {}).get("native"),
                   "l1_40_vs_compiled": paired(l1, "eager", "native_compiled", "dropin") if l1 else None,
                   "l1_40_vs_native": paired(l1, "eager", "native", "dropin") if l1 else None}
    kb = kernelbench_figures(records.get("training_kernelbench"))
    if kb:  # protocol B as KernelBench times it: its means over all trials; the goals judge block by block
        m = kb["mean_ms"]
        headline = {"l1_40_protocol": KB_PROTOCOL, "l1_40_fwdbwd_ms": m["dropin"],
                    "l1_40_compiled_fwdbwd_ms": m["native_compiled"], "l1_40_native_fwdbwd_ms": m["native"],
                    "l1_40_vs_compiled": m["native_compiled"] / m["dropin"],
                    "l1_40_vs_native": m["native"] / m["dropin"],
                    "l1_40_slowest_block_ms": kb["dropin_slowest_block_ms"],
                    "l1_40_vs_compiled_worst_block": kb["vs_compiled_worst_block"],
                    "l1_40_vs_native_worst_block": kb["vs_native_worst_block"]}
    else:  # runs before the training_kernelbench record: the sweep's interleaved rounds
        headline = {"l1_40_protocol": INTERLEAVED_PROTOCOL, **interleaved}
    return {**headline,
            "l1_40_graph_fwdbwd_ms": (l1.get("graph") or {}).get("dropin"),
            **{k.replace("l1_40_", "l1_40_interleaved_"): v for k, v in interleaved.items()},
            "fwdbwd_worst_ratio_vs_native": worst[0], "fwdbwd_worst_shape": worst[1],
            "ordinary_fwdbwd_worst_vs_native_graph": min(ordinary) if ordinary else None,
            "backward_identical": _count(ident, "backward"),
            "model_steps_identical": _sum_counts(model.get("losses_identical"), model.get("grads_identical"),
                                                 model.get("weights_identical")) if model else "0/0",
            "fuzz": fuzz_counts(records.get("training_fuzz")),
            "host_us_fwd_grad": host.get("dropin_fwd_grad_us"), "torch_host_us_fwd_grad": host.get("torch_fwd_grad_us"),
            "host_us_bwd": host.get("dropin_bwd_us"), "torch_host_us_bwd": host.get("torch_bwd_us"),
            "torch_host_us_nograd": host.get("torch_nograd_us"), "host_us_nograd": host.get("dropin_nograd_us"),
            # where our kernels serve both directions (their own path's host cost), when the run measured it
            "host_ours": None if ours is None else {
                "shape": shape_key(ours["shape"]), "forward_path": ours["forward_path"],
                **{f"{who}_{k}_us": ours.get(f"{label}_{k}_us") for who, label in (("ours", "dropin"), ("torch", "torch"))
                   for k in ("fwd_grad", "bwd", "nograd")}}}


def summary(records: dict, prov: dict) -> dict:
    block = training_block(records)
    return {"training": block} if block else {}


def _fmt(v, f=".3g"):
    return "n/a" if v is None else format(v, f)


def summary_lines(s: dict) -> list[str]:
    t = s.get("training")
    if not t:
        return []
    how = "KernelBench's timing" if judged_by_kernelbench(t) else "eager"
    return [f"training: L1/40 fwd+bwd {_fmt(t['l1_40_fwdbwd_ms'])} ms {how} (graph {_fmt(t['l1_40_graph_fwdbwd_ms'])}"
            f", torch.compile {_fmt(t['l1_40_compiled_fwdbwd_ms'])}, native {_fmt(t['l1_40_native_fwdbwd_ms'])}); "
            f"worst eager x native {_fmt(t['fwdbwd_worst_ratio_vs_native'], '.2f')} at {t['fwdbwd_worst_shape']}; "
            f"bits backward {t['backward_identical']}, model {t['model_steps_identical']}"]


def page_headline(records: dict, s: dict) -> str:
    from labkit.records.text import on_gpu, ratio
    from labkit.studies.goals import tally_text

    t = s.get("training")
    if not t or t.get("l1_40_fwdbwd_ms") is None:
        return f"training: no forward + backward timing in the record {on_gpu(s)}"
    from labkit.studies.bench import PROTOCOL_NAMES

    vs_comp = t.get("l1_40_vs_compiled")
    vs = f", {ratio(vs_comp)} torch.compile" if vs_comp else ""
    how = "KernelBench's timing (mean)" if judged_by_kernelbench(t) else PROTOCOL_NAMES["B"]
    return (f"L1/40 forward + backward under {how}: {t['l1_40_fwdbwd_ms']:.3g} ms{vs}; backward bits "
            f"{t['backward_identical']}, model steps {t['model_steps_identical']} identical"
            f"{tally_text(goals(records))} {on_gpu(s)}")



COMPILE_RATIO_GOAL, NATIVE_RATIO_GOAL, ORDINARY_GRAPH_GOAL, FLOOR_GOAL = 1.2, 22, 1.3, 1.15  # issue 22's goals
WIDE_COMPILE_GOAL = 1.0  # (4, 4194304) and (1, 8, 1024, 1024) against torch.compile, eager per call
BELOW_FLOOR_SLOWER_US = 10  # where native takes < NATIVE_FLOOR_MS: no more than this much slower than native
ISSUE_ORDINARY_KEYS = ORDINARY_KEYS[:6]  # the six the issue names; (1024, 16384) is also in its sweep


def _ratio_rows(sweep: dict | None, keys, protocol: str, baseline: str) -> list[tuple[str, float]]:
    """(shape, baseline time / the drop-in's: `paired`) under `protocol` for the sweep's shapes in `keys`, in their
    order."""
    by_key = {r["key"]: r for r in (sweep or {}).get("shapes", [])}
    out = []
    for k in keys:
        v = paired(by_key[k], protocol, baseline, "dropin") if k in by_key else None
        if v is not None:
            out.append((k, v))
    return out


def _sweep_goals(sweep: dict | None) -> list[dict]:
    """The goals judged shape by shape: the two other wide shapes against torch.compile, every ordinary shape
    against native (naming each that falls short), and the sweep's shapes where native takes under 200 us."""
    from labkit.studies.bench import PROTOCOL_NAMES
    from labkit.studies.goals import goal, listed

    if not sweep:
        return []
    eager, graph = PROTOCOL_NAMES["B"], PROTOCOL_NAMES["A"]
    wide = _ratio_rows(sweep, [shape_key(s) for s in WIDE[1:]], "eager", "native_compiled")
    ordinary = _ratio_rows(sweep, ISSUE_ORDINARY_KEYS, "graph", "native")
    short = [(k, v) for k, v in ordinary if v < ORDINARY_GRAPH_GOAL]
    below = [(r["key"], paired_difference_ms(r, "eager", "dropin", "native") * 1e3) for r in sweep["shapes"]
             if (r.get("eager") or {}).get("native") and r["eager"].get("dropin")
             and r["eager"]["native"] < NATIVE_FLOOR_MS]
    worst_below = max(below, key=lambda kv: kv[1], default=None)
    return [goal("few wide rows vs torch.compile", listed(wide, limit=WIDE_COMPILE_GOAL),
                 f">= {WIDE_COMPILE_GOAL}x each",
                 (all(v >= WIDE_COMPILE_GOAL for _, v in wide) if wide else None), eager,
                 "wide rows x torch.compile"),
            goal("ordinary shapes, each x native",
                 f"{listed(ordinary, limit=ORDINARY_GRAPH_GOAL)}; short of {ORDINARY_GRAPH_GOAL}x: "
                 f"{listed(short, limit=ORDINARY_GRAPH_GOAL)}", f">= {ORDINARY_GRAPH_GOAL}x each",
                 (not short) if ordinary else None, graph, "ordinary shapes x torch eager",
                 f"short: {listed(short, limit=ORDINARY_GRAPH_GOAL)}"),
            goal(f"where native takes < {NATIVE_FLOOR_MS * 1e3:.0f} us",
                 "no such shape in the sweep" if worst_below is None else
                 f"{len(below)} shapes, at most {worst_below[1]:+.1f} us against native ({worst_below[0]})",
                 f"no more than {BELOW_FLOOR_SLOWER_US} us slower",
                 None if worst_below is None else worst_below[1] <= BELOW_FLOOR_SLOWER_US, eager,
                 f"slower than torch eager below {NATIVE_FLOOR_MS * 1e3:.0f} us")]


def _would(value: float | None, limit: float, at_least: bool) -> str:
    """' (would meet)' / ' (would miss)': the goal judged on a figure shown beside the one that judges it."""
    if value is None:
        return ""
    return " (would meet)" if (value >= limit if at_least else value <= limit) else " (would miss)"


def _l1_40_goals(t: dict, records: dict) -> list[dict]:
    """Issue 22's three L1/40 goals. Under KernelBench's timing (a run with `training_kernelbench`) each is judged in
    every block, as notebook 07 judges the forward's (the slowest block's mean, the worst block's ratio), with the
    mean over all trials and the sweep's interleaved rounds beside it; older runs: the interleaved rounds."""
    from labkit.studies.bench import PROTOCOL_NAMES
    from labkit.studies.goals import beside, goal

    graph = PROTOCOL_NAMES["A"]
    kb = judged_by_kernelbench(t)
    l1 = t["l1_40_slowest_block_ms"] if kb else t["l1_40_fwdbwd_ms"]
    vs_comp = t["l1_40_vs_compiled_worst_block"] if kb else t["l1_40_vs_compiled"]
    vs_nat = t["l1_40_vs_native_worst_block"] if kb else t["l1_40_vs_native"]
    why = timeline_text(records.get("training_b_timeline"))
    protocol = PROTOCOL_NAMES["B"]  # KernelBench's cuda_event method is protocol B, exactly; the rounds its older form
    if kb:
        il = t["l1_40_interleaved_fwdbwd_ms"]
        beside_time = (f"; mean of all trials {_fmt(t['l1_40_fwdbwd_ms'])} ms; in the sweep's interleaved eager "
                       f"rounds, where the host's entry counts, {_fmt(il)} ms{_would(il, L1_40_FWDBWD_GOAL_MS, False)}"
                       + (f"; {why}" if why else ""))
        kbt = "KernelBench's cuda_event timing (its L2 thrash runs while the host enters the call)"
        what, per = f"{kbt}, slowest block", f"{kbt}, worst block"
        ic, inat = t["l1_40_interleaved_vs_compiled"], t["l1_40_interleaved_vs_native"]
        beside_comp = (f"; all trials {_fmt(t['l1_40_vs_compiled'], '.3g')}x (torch.compile "
                       f"{_fmt(t['l1_40_compiled_fwdbwd_ms'])} ms); interleaved rounds "
                       f"{beside(ic, COMPILE_RATIO_GOAL)}{_would(ic, COMPILE_RATIO_GOAL, True)}")
        beside_nat = (f"; all trials {_fmt(t['l1_40_vs_native'], '.3g')}x (torch eager "
                      f"{_fmt(t['l1_40_native_fwdbwd_ms'])} ms); interleaved rounds "
                      f"{beside(inat, NATIVE_RATIO_GOAL)}{_would(inat, NATIVE_RATIO_GOAL, True)}")
    else:
        beside_time = f"; {why}" if why else ""
        what, per = "median", "per round"
        beside_comp = f"; torch.compile {_fmt(t['l1_40_compiled_fwdbwd_ms'])} ms (median)"
        beside_nat = f"; torch eager {_fmt(t['l1_40_native_fwdbwd_ms'])} ms (median)"
    return [goal("L1/40 forward + backward", f"{what} {beside(l1, L1_40_FWDBWD_GOAL_MS, 'ms')} ({graph}: "
                 f"{_fmt(t['l1_40_graph_fwdbwd_ms'])} ms{beside_time})", f"<= {L1_40_FWDBWD_GOAL_MS} ms",
                 None if l1 is None else l1 <= L1_40_FWDBWD_GOAL_MS, protocol, "L1/40 forward + backward",
                 f"{what} {beside(l1, L1_40_FWDBWD_GOAL_MS, 'ms')}"),
            goal("L1/40 vs torch.compile", f"{per} {beside(vs_comp, COMPILE_RATIO_GOAL)}{beside_comp}",
                 f">= {COMPILE_RATIO_GOAL}x", None if vs_comp is None else vs_comp >= COMPILE_RATIO_GOAL, protocol,
                 "L1/40 x torch.compile"),
            goal("L1/40 vs eager native", f"{per} {beside(vs_nat, NATIVE_RATIO_GOAL)}{beside_nat}",
                 f">= {NATIVE_RATIO_GOAL}x", None if vs_nat is None else vs_nat >= NATIVE_RATIO_GOAL, protocol,
                 "L1/40 x torch eager", f"{per} {beside(vs_nat, NATIVE_RATIO_GOAL)}")]


def _host_bound_text(records: dict, t: dict) -> str:
    """Why the worst eager ratio is what it is, where the shape is host-bound: both methods' GPU time under graph
    replay far below their eager time, and the eager quartiles of the two."""
    row = next((r for r in (records.get("training_sweep") or {}).get("shapes", [])
                if r["key"] == t.get("fwdbwd_worst_shape")), None)
    if not row or not row.get("graph") or not row.get("eager_stats"):
        return ""
    g, e = row["graph"], row["eager_stats"]
    if not all(k in g and k in e for k in ("native", "dropin")) or \
            max(g["native"], g["dropin"]) * 2 > min(e["native"]["median_ms"], e["dropin"]["median_ms"]):
        return ""  # not host-bound: a GPU time within half of an eager time
    q = {k: f"{_us(e[k]['q25_ms']):.0f}-{_us(e[k]['q75_ms']):.0f}" for k in ("native", "dropin")}
    return (f" (host-bound: under graph replay the drop-in takes {_us(g['dropin']):.0f} us against native's "
            f"{_us(g['native']):.0f}; eager per call the quartiles are {q['dropin']} and {q['native']} us)")


def goals(records: dict) -> list[dict]:
    """Issue 22's goals judged on a `training` run (labkit.studies.goals): L1/40's forward + backward time and its
    ratios to torch.compile and torch eager, the worst ratios over shapes, the host cost per call, the fuzz, and
    the backward's floors. [] without a `training_sweep` record."""
    from labkit.studies.bench import PROTOCOL_NAMES
    from labkit.studies.goals import HOST, beside, goal, listed

    t = training_block(records)
    if not t:
        return []
    eager, graph = PROTOCOL_NAMES["B"], PROTOCOL_NAMES["A"]
    worst = t["fwdbwd_worst_ratio_vs_native"]
    fz = t["fuzz"]
    out = [*_l1_40_goals(t, records),
           goal(f"worst x native where native >= {NATIVE_FLOOR_MS * 1e3:.0f} us",
                f"{beside(worst, 1.0)} at {t['fwdbwd_worst_shape']}{_host_bound_text(records, t)}", ">= 1.0x",
                None if worst is None else worst >= 1,
                eager, f"worst x torch eager where torch takes >= {NATIVE_FLOOR_MS * 1e3:.0f} us"),
           goal("host at a tiny shape (torch's kernels, handed off)",
                f"forward with grad {_fmt(t['host_us_fwd_grad'])} us vs torch {_fmt(t['torch_host_us_fwd_grad'])}; "
                f"backward {_fmt(t['host_us_bwd'])} vs {_fmt(t['torch_host_us_bwd'])}", "within 10 us each",
                _within(t, "fwd_grad", 10) and _within(t, "bwd", 10), HOST, "at a tiny shape, with grad"),
           goal("no grad at the tiny shape (torch's kernel serves)",
                f"{_fmt(t.get('host_us_nograd'))} us vs torch {_fmt(t.get('torch_host_us_nograd'))}", "within 3 us",
                _within(t, "nograd", 3), HOST, "at a tiny shape, no grad"),
           _host_ours_goal(t),
           goal("bits and fuzz", f"backward {t['backward_identical']}; model steps (losses, gradients, weights) "
                f"{t['model_steps_identical']}; fuzz {fz['cases']} cases, {fz['checks']} schedule checks, "
                f"{fz['mismatches']} mismatch(es)", ">= 2,000 cases, 0 mismatches",
                fz["cases"] >= 2000 and fz["mismatches"] == 0, None, "fuzz: 2,000 cases, no mismatch")]
    out[4:4] = _sweep_goals(records.get("training_sweep"))  # after the worst-ratio goal, before the host's
    rows = floor_rows(records.get("training_floor"))
    floors = [(f"{r['shape']} ({r['schedule']})", r["ours / floor"]) for r in rows]
    if floors:  # one goal over the measured shapes, naming each over its floor's slack
        over = [(r["shape"], r["ours / floor"]) for r in rows if r["ours / floor"] > FLOOR_GOAL]
        complete = [(r["shape"], r["ours / complete floor"]) for r in rows if "ours / complete floor" in r]
        why = (f"; against every byte it must move (gamma read, dgamma and dbeta written too): {listed(complete)}"
               if complete else "")
        out.append(goal("backward within its floor", f"{listed(floors, limit=FLOOR_GOAL)} its floor{why}",
                        f"<= {FLOOR_GOAL}x each",
                        not over, graph, "backward / floor", f"over: {listed(over, limit=FLOOR_GOAL)}"))
    return out


def verdict_lines(records: dict, source: str) -> list[str]:
    from labkit.studies.goals import goal_line

    if not training_block(records):
        return [f"training: no GPU measurement to judge ({source})."]
    return [f"training ({source}):", *map(goal_line, goals(records)), *_runner_lines(records.get("training_host"))]


GPU_BOUND_FACTOR = 1.5  # torch's no-grad call this much slower than at the tiny shape: the GPU is in the time


def _host_ours_goal(t: dict) -> dict:
    """The host cost where our kernels serve both directions, judged only where it is a host-only measure."""
    from labkit.studies.goals import HOST, goal

    o = t.get("host_ours")
    what = "host where our kernels serve both ways"
    if not o:
        return goal(what, "not measured in this run", "within 10 us each", None, HOST,
                    "where our kernels serve both ways")
    times = (f"forward with grad {_fmt(o['ours_fwd_grad_us'])} us vs torch {_fmt(o['torch_fwd_grad_us'])}; backward "
             f"{_fmt(o['ours_bwd_us'])} vs {_fmt(o['torch_bwd_us'])}; no grad {_fmt(o['ours_nograd_us'])} vs "
             f"{_fmt(o['torch_nograd_us'])}")
    tiny = t.get("torch_host_us_nograd")
    where = f"{what} ({o['shape']}, forward {o['forward_path']})"
    if tiny and o["torch_nograd_us"] > GPU_BOUND_FACTOR * tiny:
        return goal(where, f"{times}; not a host-only measure (torch's own no-grad call takes "
                    f"{_fmt(o['torch_nograd_us'])} us here against {_fmt(tiny)} at the tiny shape, so GPU time is in "
                    f"it)", "within 10 us each", None, HOST, "where our kernels serve both ways")
    over = [f"{label} {_fmt(o[f'ours_{k}_us'])} us vs {_fmt(o[f'torch_{k}_us'])}"
            for k, label in (("fwd_grad", "forward with grad"), ("bwd", "backward"))
            if o[f"ours_{k}_us"] > o[f"torch_{k}_us"] + 10]
    return goal(where, times, "within 10 us each", not over, HOST, "where our kernels serve both ways",
                "; ".join(over))


def _runner_lines(host: dict | None) -> list[str]:
    ext = (host or {}).get("host_extension")
    if not ext:
        return []
    if ext["serves"]:
        return ["  our kernels launched from C++ (the host extension and its autograd node, "
                f"host/ sources {ext['source_hash']})"]
    return [f"  our kernels launched from Python: the host extension {ext['why_not']}"]


def _within(t: dict, what: str, us: float) -> bool:
    a, b = t.get(f"host_us_{what}"), t.get(f"torch_host_us_{what}")
    return a is not None and b is not None and a <= b + us


RECORDS = ("training_sweep", "training_kernelbench", "training_b_timeline", "training_host", "training_model",
           "training_wide", "training_floor", "training_identity", "training_fuzz")


def collect(session) -> dict:
    return {name: session.record(name) for name in RECORDS}


# --- fuzzing the backward against torch -------------------------------------------------------------------------------

def fuzz(n_cases: int = 2000, seed: int = 0, time_budget_s: float = 120.0, max_numel: int = 1 << 22,
         device="cuda") -> dict:
    """Random (rows, N) with N % 4 == 0 (and some ragged N, which must route to torch), value classes (normal,
    offset, huge, tiny, mixed scale, constant rows, non-finite), eps and affines: dx, dweight and dbias of our
    backward (every schedule that takes the shape) against torch.ops.aten.native_layer_norm_backward, int32 views.
    The `training_fuzz` record: per case the shape, values and each schedule's verdict."""
    import numpy as np
    import torch

    from labkit.ops import backward as grad

    rng = np.random.default_rng(seed)
    dev = _device(torch.empty(0, device=device))
    kinds = ("normal", "offset", "huge", "tiny", "mixed", "constant", "nonfinite")
    cases, t0 = [], time.perf_counter()
    while len(cases) < n_cases and time.perf_counter() - t0 < time_budget_s:
        n = 4 * int(np.exp(rng.uniform(0, np.log(max_numel // 4))))
        rows = max(1, int(np.exp(rng.uniform(0, np.log(max(1, max_numel // n))))))
        kind = kinds[int(rng.integers(len(kinds)))]
        eps = float(rng.choice([1e-5, 0.0, 1e-2]))
        affine = str(rng.choice(["both", "weight", "none"]))
        g = torch.Generator(device=device).manual_seed(int(rng.integers(1 << 30)))
        x = torch.randn(rows, n, device=device, generator=g)
        if kind == "offset":
            x += 1000
        elif kind == "huge":
            x *= 1e30
        elif kind == "tiny":
            x *= 1e-30
        elif kind == "mixed":
            x *= torch.exp(8 * torch.randn(rows, n, device=device, generator=g))
        elif kind == "constant":
            x[:] = x[:, :1]
        elif kind == "nonfinite":
            x.view(-1)[:: 1 + int(rng.integers(50))] = float("inf")
        dy = torch.randn(rows, n, device=device, generator=g)
        w = torch.randn(n, device=device, generator=g) if affine != "none" else None
        b = torch.randn(n, device=device, generator=g) if affine == "both" else None
        _, mean, rstd = torch.native_layer_norm(x, (n,), w, b, eps)
        mask = [True, w is not None, b is not None]
        ref = torch.ops.aten.native_layer_norm_backward(dy, x, [n], mean, rstd, w, b, mask)
        case = {"shape": [rows, n], "values": kind, "eps": eps, "affine": affine, "schedules": {}}
        for sch in grad.candidates(rows, n, dev):
            try:
                got = grad.backward(dy, x, (n,), mean, rstd, w, b, tuple(mask), schedule=sch)
                case["schedules"][sch] = all(_bits_equal_any(a, c) for a, c in zip(got, ref))
            except Exception as exc:
                case["schedules"][sch] = f"{type(exc).__name__}: {exc}"
        cases.append(case)
        x = dy = None  # freed before the next case is made
    return {"cases": cases, "seconds": time.perf_counter() - t0, "seed": seed}


def fuzz_counts(record: dict | None) -> dict:
    cases = (record or {}).get("cases", [])
    checks = [v for c in cases for v in c["schedules"].values()]
    return {"cases": len(cases), "shapes": len({tuple(c["shape"]) for c in cases}), "checks": len(checks),
            "mismatches": sum(v is not True for v in checks)}
