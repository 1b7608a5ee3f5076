"""Probe (issue 54, training reach), run on the GPU: what autocast, a compiled graph and a bf16 call pay through the
drop-in, eager per call (CUDA events around each call, medians and quartiles, ratios paired within a round), and the
host microseconds per call of the registered op against torch's own op at a tiny shape. Prints JSON.

    python scripts/probe_reach.py --out reach.json [--label after]
"""
from __future__ import annotations

import argparse
import json

import torch

import labkit
from labkit.studies import bench
from labkit.studies.measure import compile_static, host_us_per_call

EAGER = bench.Protocol(name="eager-per-call", graph=False, warmups=5, rounds=25, repeats=1)
L1_40 = (16, 64, 256, 256)


def _fwdbwd(fn, x, ns, w, b, dy, autocast=None):
    def step():
        if autocast is None:
            y = fn(x, ns, w, b)
        else:
            with torch.autocast("cuda", dtype=autocast):
                y = fn(x, ns, w, b)
        torch.autograd.backward(y, dy.to(y.dtype))
    return step


def _leaves(shape, dtype=torch.float32, pdtype=torch.float32, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    ns = shape[1:] if len(shape) == 4 else shape[-1:]
    x = torch.randn(shape, device="cuda", generator=g).to(dtype).requires_grad_()
    w = torch.randn(ns, device="cuda", generator=g).to(pdtype).requires_grad_()
    b = torch.randn(ns, device="cuda", generator=g).to(pdtype).requires_grad_()
    dy = torch.randn(shape, device="cuda", generator=g)
    return x, tuple(ns), w, b, dy


def _stats(rec, baseline=None):
    out = {k: {m: v[m] for m in ("median_ms", "q25_ms", "q75_ms")} for k, v in rec.stats.items()}
    if baseline is not None:
        out["ratios_vs_" + baseline] = {k: v["median"] for k, v in rec.ratio_vs_baseline.items()}
    return out


def autocast_l1_40():
    x, ns, w, b, dy = _leaves(L1_40, torch.bfloat16)
    F = torch.nn.functional.layer_norm
    xd = x.detach()
    methods = {"native": _fwdbwd(F, x, ns, w, b, dy, torch.bfloat16),
               "dropin": _fwdbwd(labkit.layer_norm, x, ns, w, b, dy, torch.bfloat16),
               "cast_alone": lambda: xd.to(torch.float32)}
    return _stats(bench.time_methods(methods, EAGER, baseline="native"), "native")


def compiled_vs_eager(shape):
    x, ns, w, b, dy = _leaves(shape)
    (compiled,) = compile_static(labkit.layer_norm)
    methods = {"eager_dropin": _fwdbwd(labkit.layer_norm, x, ns, w, b, dy),
               "compiled_dropin": _fwdbwd(compiled, x, ns, w, b, dy)}
    return _stats(bench.time_methods(methods, EAGER, baseline="eager_dropin"), "eager_dropin")


def bf16_eager(shape):
    x, ns, w, b, _ = _leaves(shape, torch.bfloat16, torch.bfloat16)
    xd, wd, bd = x.detach(), w.detach(), b.detach()
    F = torch.nn.functional.layer_norm
    methods = {"native": lambda: F(xd, ns, wd, bd), "dropin": lambda: labkit.layer_norm(xd, ns, wd, bd)}
    return _stats(bench.time_methods(methods, EAGER, baseline="native"), "native")


def host_cost_tiny():
    x, ns, w, b, dy = _leaves((8, 768))
    xd, wd, bd = x.detach(), w.detach(), b.detach()
    y, mean, rstd = torch.ops.aten.native_layer_norm(xd, list(ns), wd, bd, 1e-5)
    mask = [True, True, True]
    calls = {
        "labkit_op_forward": lambda: torch.ops.labkit.layer_norm.default(xd, list(ns), wd, bd, 1e-5),
        "aten_op_forward": lambda: torch.ops.aten.native_layer_norm.default(xd, list(ns), wd, bd, 1e-5),
        "labkit_op_backward": lambda: torch.ops.labkit.layer_norm_backward.default(dy, xd, list(ns), mean, rstd, wd,
                                                                                   bd, mask),
        "aten_op_backward": lambda: torch.ops.aten.native_layer_norm_backward.default(dy, xd, list(ns), mean, rstd,
                                                                                     wd, bd, mask),
    }
    (compiled,) = compile_static(labkit.layer_norm)
    f = _fwdbwd(compiled, x, ns, w, b, dy)
    (compiled_torch,) = compile_static(torch.nn.functional.layer_norm)
    g = _fwdbwd(compiled_torch, x, ns, w, b, dy)
    out = {k: host_us_per_call(fn, 2000, torch.cuda.synchronize) for k, fn in calls.items()}
    out["compiled_dropin_fwdbwd"] = host_us_per_call(f, 500, torch.cuda.synchronize, warmups=20)
    out["compiled_torch_fwdbwd"] = host_us_per_call(g, 500, torch.cuda.synchronize, warmups=20)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--label", default="")
    a = ap.parse_args()
    res = {"label": a.label, "torch": torch.__version__, "gpu": torch.cuda.get_device_name(0),
           "protocol": EAGER.name}
    steps = [("host_cost_tiny_us", host_cost_tiny), ("autocast_bf16_l1_40_fwdbwd", autocast_l1_40),
             ("bf16_fwd_4096x768", lambda: bf16_eager((4096, 768))),
             ("bf16_fwd_8192x4096", lambda: bf16_eager((8192, 4096)))]
    for shape in (L1_40, (4, 4194304), (8192, 4096)):
        steps.append((f"compiled_vs_eager_fwdbwd_{'x'.join(map(str, shape))}", lambda s=shape: compiled_vs_eager(s)))
    for name, fn in steps:
        try:
            res[name] = fn()
        except Exception as exc:
            res[name] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
        print(name, json.dumps(res[name]), flush=True)
        json.dump(res, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
