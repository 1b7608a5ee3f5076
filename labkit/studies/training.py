"""Training with the drop-in (notebook 10): forward + backward speed against torch eager and torch.compile, the
backward's floor, host cost per call, and a small transformer trained with and without the swap, bit for bit.
Run functions return JSON-able records; rows/verdict functions read them."""
from __future__ import annotations

import math
import time
from dataclasses import replace

from labkit.tasks import L1_40, shape_key

# (rows, N) from (1, 2**24) to (65536, 256), 64 MiB of float32 each, plus ordinary transformer shapes and L1/40.
SWEEP = tuple((1 << k, 1 << (24 - k)) for k in range(0, 17, 2))
ORDINARY = ((4096, 768), (8192, 1024), (8192, 4096), (16384, 4096), (32768, 2048), (2048, 16384), (1024, 16384))
WIDE = (L1_40, (4, 1 << 22), (1, 8, 1024, 1024))
QUICK = ((1, 1 << 20), (64, 1 << 14), (4096, 768), (16, 64, 32, 32))
METHODS = ("native", "dropin", "dropin_our_backward", "dropin_torch_backward", "native_compiled", "dropin_compiled")


def shapes(mode: str) -> list[tuple[int, ...]]:
    return [*WIDE, *ORDINARY, *SWEEP] if mode == "full" else list(QUICK)


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
         "dropin_our_backward": forced("grad"), "dropin_torch_backward": forced("native")}
    if compiled:
        cn = torch.compile(lambda xx, ns_, ww, bb, e: torch.nn.functional.layer_norm(xx, ns_, ww, bb, e),
                           fullgraph=True)
        cd = torch.compile(lambda xx, ns_, ww, bb, e: labkit.layer_norm(xx, ns_, ww, bb, e), fullgraph=True)
        m["native_compiled"] = lambda: step(cn, x, w, b, dy, ns, eps)
        m["dropin_compiled"] = lambda: step(cd, x, w, b, dy, ns, eps)
    return m


def sweep(shape_list, rounds: int = 15, seed: int = 0, eps: float = 1e-5, device="cuda", compiled: bool = True,
          log=None) -> dict:
    """Forward + backward medians per shape and method, eager per call with the L2 flushed (protocol B: host time
    counts) and under graph replay (protocol A); a method that fails is recorded with its error. The
    `training_sweep` record."""
    import torch

    from labkit.studies.bench import PROTOCOL_A, PROTOCOL_B, time_methods

    eager_p, graph_p = replace(PROTOCOL_B, rounds=rounds, warmups=3), replace(PROTOCOL_A, rounds=rounds, repeats=3)
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
                rec = time_methods(ok, protocol, "native")
                row[key] = {k: v["median_ms"] for k, v in rec.stats.items()}
                row[f"{key}_stats"] = rec.stats
            except Exception as exc:
                row[key] = {}
                row["errors"][key] = f"{type(exc).__name__}: {str(exc)[:300]}"
        row["seconds"] = time.perf_counter() - t0
        out.append(row)
        del x, w, b, dy
        torch.cuda.empty_cache()
        if log:
            log(f"{row['key']}: {row['seconds']:.1f} s")
    return {"protocols": {"eager": eager_p.__dict__, "graph": graph_p.__dict__}, "methods": list(METHODS),
            "shapes": out}


def _per_call_us(fn, calls: int, sync) -> float:
    for _ in range(100):
        fn()
    sync()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t1 = time.perf_counter()
    sync()
    return (t1 - t0) / calls * 1e6


def host_cost(shape=(8, 256), calls: int = 2000, device="cuda") -> dict:
    """Host microseconds per call at a tiny shape (the GPU keeps up, so the loop's wall time is the host's), torch
    beside the drop-in in the same run: a forward with grad on, a backward (torch.autograd.grad of one forward's
    output, the forward made before the clock starts), and a no-grad forward. The `training_host` record."""
    import torch

    import labkit

    x, w, b, dy = _tensors(shape, 0, device)
    ns = tuple(w.shape)
    w, b = w.requires_grad_(), b.requires_grad_()
    xs = x.requires_grad_()
    sync = torch.cuda.synchronize if torch.device(device).type == "cuda" else (lambda: None)
    out = {"shape": list(shape), "calls": calls}
    for label, fn in (("torch", torch.nn.functional.layer_norm), ("dropin", labkit.layer_norm)):
        out[f"{label}_fwd_grad_us"] = _per_call_us(lambda: fn(xs, ns, w, b, 1e-5), calls, sync)
        ys = [fn(xs, ns, w, b, 1e-5) for _ in range(calls + 100)]
        it = iter(ys)
        out[f"{label}_bwd_us"] = _per_call_us(lambda: torch.autograd.grad(next(it), (xs, w, b), dy), calls, sync)
        del ys
        with torch.no_grad():
            out[f"{label}_nograd_us"] = _per_call_us(lambda: fn(x, ns, w, b, 1e-5), calls, sync)
    return out
