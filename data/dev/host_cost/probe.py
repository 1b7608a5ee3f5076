"""Dev probe: where the drop-in's host time goes when our kernels serve both directions. Per shape, host us per call
(wall time of 2,000 back-to-back calls, median of 5 batches; the shapes are small enough for the GPU to keep up) of
torch's path and of the drop-in's layers one at a time: the Python entry, the extension's `call`, its `train`, the
forward and backward Programs alone, torch's allocator. Writes probe.json into $OUT. Not a committed run."""
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import labkit  # noqa: E402
from labkit.ops.dropin import host, plan as plans  # noqa: E402

SHAPES = [(16, 65536), (4096, 768), (8192, 1024), (64, 4096)]
CALLS, BATCHES = 2000, 5


def per_call(fn):
    for _ in range(200):
        fn()
    torch.cuda.synchronize()
    got = []
    for _ in range(BATCHES):
        t0 = time.perf_counter()
        for _ in range(CALLS):
            fn()
        got.append((time.perf_counter() - t0) / CALLS * 1e6)
        torch.cuda.synchronize()
    return statistics.median(got)


def main():
    m = host.module()
    out = []
    for shape in SHAPES:
        ns = shape[1:]
        x = torch.randn(shape, device="cuda")
        w = torch.randn(ns, device="cuda").requires_grad_()
        b = torch.randn(ns, device="cuda").requires_grad_()
        dy = torch.randn(shape, device="cuda")
        xr = x.detach().requires_grad_()
        labkit.layer_norm(xr, ns, w, b, 1e-5)  # plans and remembers the grad signature
        p = plans.get_plan(xr, ns, w, b, 1e-5, True)
        hp = p.host
        row = {"shape": list(shape), "forward_path": p.path, "has_host": hp is not None}
        if hp is None:
            out.append(row)
            print(row, flush=True)
            continue
        gp = plans.backward_plan(xr, ns, w, b)
        row["backward_schedule"] = getattr(gp, "schedule", None)
        if gp is not None:
            row["backward_steps"] = [type(s).__name__ + ":" + getattr(getattr(s, "kernel", None), "function", "")
                                     for s in plans.bound(gp, 0).program.steps]
        row["forward_steps"] = [type(s).__name__ + ":" + getattr(getattr(s, "kernel", None), "function", "")
                                for s in p.launch.program.steps] if hasattr(p, "launch") else None
        y0, mean, rstd = m.forward_stats(hp, x, w.detach(), b.detach())
        wd, bd = w.detach(), b.detach()
        fast = host.fast[0]
        t = {}
        t["native_nograd"] = lambda: F.layer_norm(x, ns, wd, bd, 1e-5)
        t["dropin_nograd"] = lambda: labkit.layer_norm(x, ns, wd, bd, 1e-5)
        t["native_fwd_grad"] = lambda: F.layer_norm(xr, ns, w, b, 1e-5)
        t["dropin_fwd_grad"] = lambda: labkit.layer_norm(xr, ns, w, b, 1e-5)
        t["fast_call_fwd_grad"] = lambda: fast(xr, ns, w, b, 1e-5)
        t["train_direct"] = lambda: m.train(hp, xr, w, b)
        t["forward_stats_direct"] = lambda: m.forward_stats(hp, x, wd, bd)
        t["native_forward_stats"] = lambda: torch.native_layer_norm(x, ns, wd, bd, 1e-5)
        t["native_fwdbwd"] = lambda: torch.autograd.grad(F.layer_norm(xr, ns, w, b, 1e-5), (xr, w, b), dy)
        t["dropin_fwdbwd"] = lambda: torch.autograd.grad(labkit.layer_norm(xr, ns, w, b, 1e-5), (xr, w, b), dy)
        t["backward_direct"] = lambda: m.backward(hp, dy, x, mean, rstd, wd, bd, [True, True, True])
        t["native_backward_direct"] = lambda: torch.ops.aten.native_layer_norm_backward(
            dy, x, list(ns), mean, rstd, wd, bd, [True, True, True])
        t["empty_like"] = lambda: torch.empty_like(x)
        t["empty_small"] = lambda: torch.empty(shape[0], device="cuda")
        row["host_us"] = {k: per_call(f) for k, f in t.items()}
        print(json.dumps(row), flush=True)
        out.append(row)
    meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
            "commit": os.environ.get("LABKIT_GIT_COMMIT")}
    Path(os.environ.get("OUT", "."), "host_probe.json").write_text(json.dumps({"meta": meta, "shapes": out}, indent=1))


if __name__ == "__main__":
    main()
