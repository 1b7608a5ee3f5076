"""Probe: is labkit.enable() (our kernels registered as torch's CUDA native_layer_norm(_backward)) worth adopting?

Eager, CUDA events around each call (host included), median and quartiles of ROUNDS calls, ms; and host cost per
call (CPU wall of 2,000 calls at a tiny shape, synchronized once at the end), us. Methods: torch's F.layer_norm,
labkit.layer_norm, and F.layer_norm under labkit.enable(); forward without grad, forward + backward
(torch.autograd.grad for x, weight, bias), and forward + backward under torch.autocast(bfloat16) with bf16 x.
Also whether each method's outputs equal torch's as int32 views. Writes JSON to --out. GPU only.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F

import labkit

ROUNDS = 25


def _stats(v):
    v = sorted(v)
    return {"median": statistics.median(v), "q25": v[len(v) // 4], "q75": v[3 * len(v) // 4]}


def _events(fn, rounds=ROUNDS):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(rounds):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        s.record()
        fn()
        e.record()
        e.synchronize()
        out.append(s.elapsed_time(e))
    return _stats(out)


def _host(fn, calls=2000):
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / calls * 1e6


def _inputs(shape, dtype=torch.float32):
    ns = shape[1:]
    x = (torch.randn(shape, device="cuda") * 2 + 1).to(dtype).requires_grad_()
    w = torch.randn(ns, device="cuda").requires_grad_()
    b = torch.randn(ns, device="cuda").requires_grad_()
    return x, ns, w, b, torch.randn(shape, device="cuda", dtype=dtype)


METHODS = {"torch": F.layer_norm, "labkit.layer_norm": labkit.layer_norm, "enabled": F.layer_norm}


def measure(shape) -> dict:
    out = {}
    x, ns, w, b, dy = _inputs(shape)
    ref = _torch_fb(x, ns, w, b, dy)
    for method, f in METHODS.items():
        def fwd():
            with torch.no_grad():
                return f(x, ns, w, b)

        def fb():
            y = f(x, ns, w, b)
            return (y, *torch.autograd.grad(y, (x, w, b), dy))

        if method == "enabled":
            labkit.enable()
        try:
            r = {"fwd_ms": _events(fwd), "fwdbwd_ms": _events(fb)}
            r["bits"] = [torch.equal(a.view(torch.int32), c.view(torch.int32))
                         for a, c in zip(fb(), ref)]
        finally:
            labkit.disable()
        out[method] = r
    xb, _, _, _, dyb = _inputs(shape, torch.bfloat16)
    for method, f in METHODS.items():
        def amp():
            with torch.autocast("cuda", dtype=torch.bfloat16):
                y = f(xb, ns, w, b)
            return (y, *torch.autograd.grad(y, (xb, w, b), dyb))

        if method == "enabled":
            labkit.enable()
        try:
            out[method]["autocast_bf16_fwdbwd_ms"] = _events(amp)
        finally:
            labkit.disable()
    return out


def _torch_fb(x, ns, w, b, dy):
    y = F.layer_norm(x, ns, w, b)
    return (y, *torch.autograd.grad(y, (x, w, b), dy))


def host_cost(shape=(8, 768)) -> dict:
    x, ns, w, b, dy = _inputs(shape)
    out = {}
    for method, f in METHODS.items():
        if method == "enabled":
            labkit.enable()
        try:
            with torch.no_grad():
                nograd = _host(lambda: f(x, ns, w, b))
            grad = _host(lambda: torch.autograd.grad(f(x, ns, w, b), (x, w, b), dy))
        finally:
            labkit.disable()
        out[method] = {"fwd_us": nograd, "fwdbwd_us": grad}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out")
    args = ap.parse_args()
    report = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "host_cost_8x768": host_cost(),
              "shapes": {str(s): measure(s) for s in [(16, 64, 256, 256), (8192, 4096), (4096, 768)]}}
    text = json.dumps(report, indent=1)
    if args.out:
        open(args.out, "w").write(text)
    for s, r in report["shapes"].items():
        for m, v in r.items():
            print(s, f"{m:18s}", "fwd", round(v["fwd_ms"]["median"], 4), "fwd+bwd", round(v["fwdbwd_ms"]["median"], 4),
                  "autocast", round(v["autocast_bf16_fwdbwd_ms"]["median"], 4), "bits", v["bits"])
    print("host us (8x768):", json.dumps(report["host_cost_8x768"]))


if __name__ == "__main__":
    main()
