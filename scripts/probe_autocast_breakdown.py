"""Probe (H100 at 137fede, eager per call, CUDA events, median of 20, no L2 flush): where the time of a bf16-autocast
fwd+bwd at L1/40 goes (the casts autocast makes, the float32 drop-in between them), and bf16 fwd+bwd with our
backward. Output: $OUT/probe_ac.json; the finding is docs/decisions.md#low_precision_backward."""
import json, os, torch, labkit
import torch.nn.functional as F
def t(fn, n=20):
    for _ in range(3): fn()
    ms = []
    for _ in range(n):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); torch.cuda.synchronize(); ms.append(a.elapsed_time(b))
    ms.sort(); return round(ms[n//2], 4)
shape = (16, 64, 256, 256); ns = shape[1:]
g = torch.Generator(device="cuda").manual_seed(0)
xb = torch.randn(shape, device="cuda", generator=g).to(torch.bfloat16).requires_grad_()
w = torch.randn(ns, device="cuda", generator=g).requires_grad_(); b = torch.randn(ns, device="cuda", generator=g).requires_grad_()
dyf = torch.randn(shape, device="cuda", generator=g)
xf = xb.detach().float().requires_grad_()
res = {"gpu": torch.cuda.get_device_name(), "protocol": "eager per call, CUDA events, median of 20"}
res["cast_bf16_to_f32"] = t(lambda: xb.detach().float())
res["cast_f32_to_bf16"] = t(lambda: dyf.to(torch.bfloat16))
res["f32_fwdbwd_dropin"] = t(lambda: torch.autograd.grad(labkit.layer_norm(xf, ns, w, b), (xf, w, b), dyf))
def ac(fn):
    def f():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            y = fn(xb, ns, w, b)
        return torch.autograd.grad(y, (xb, w, b), dyf)
    return f
res["autocast_fwdbwd_dropin"] = t(ac(labkit.layer_norm))
res["autocast_fwdbwd_native"] = t(ac(F.layer_norm), n=5)
res["f32_fwd_dropin"] = t(lambda: labkit.layer_norm(xf.detach(), ns, w.detach(), b.detach()))
wb, bb = w.detach().bfloat16().requires_grad_(), b.detach().bfloat16().requires_grad_()
dyb = dyf.bfloat16()
res["bf16_fwdbwd_dropin"] = t(lambda: torch.autograd.grad(labkit.layer_norm(xb, ns, wb, bb), (xb, wb, bb), dyb))
res["bf16_fwd_dropin"] = t(lambda: labkit.layer_norm(xb.detach(), ns, wb.detach(), bb.detach()))
res["explain_bf16"] = {k: str(v) for k, v in labkit.explain(xb, ns, wb, bb).items() if k in ("path", "backward", "backward_reason")}
print(json.dumps(res, indent=1)); json.dump(res, open(os.environ["OUT"] + "/probe_ac.json", "w"), indent=1)
