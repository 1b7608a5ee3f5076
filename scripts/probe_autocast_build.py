"""Probe (H100, 2026-12-06, at f21a3bc; docs/decisions.md#autocast_build): bf16-autocast forward and fwd+bwd at L1/40
served by the autocast build against the cast path (autocast_builds.layer_norm patched to decline) and the float32
drop-in on an already-float32 x: medians of 20 CUDA-event times around one call (synchronized before, no L2 flush)
and the host time of the call; then the CUDA kernels of 5 fwd+bwd calls (torch.profiler); then N = 2**25 under
autocast against F.layer_norm."""
import time, torch, labkit
from labkit.ops.dropin import autocast as ac
torch.manual_seed(0)
shape = (16, 64, 256, 256); ns = shape[1:]
x = (torch.randn(shape, device="cuda") * 2 + 3).to(torch.bfloat16).requires_grad_()
w = torch.randn(ns, device="cuda").requires_grad_(); b = torch.randn(ns, device="cuda").requires_grad_()
dy = torch.randn(shape, device="cuda")
orig = ac.layer_norm
def fb(fn):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        y = fn(x, ns, w, b)
    return torch.autograd.grad(y, (x, w, b), dy)
def fwd(fn):
    with torch.autocast("cuda", dtype=torch.bfloat16), torch.no_grad():
        return fn(x, ns, w, b)
def timeit(f, reps=20):
    for _ in range(3): f()
    torch.cuda.synchronize()
    ev = []
    hs = []
    for _ in range(reps):
        s, e = torch.cuda.Event(True), torch.cuda.Event(True)
        s.record(); t0 = time.perf_counter(); f(); hs.append(time.perf_counter() - t0); e.record(); torch.cuda.synchronize()
        ev.append(s.elapsed_time(e))
    ev.sort(); hs.sort()
    return round(ev[len(ev)//2], 3), round(hs[len(hs)//2] * 1e3, 3)
for label, patch in (("build", orig), ("cast", lambda *a: None)):
    ac.layer_norm = patch
    print(label, "fwd (gpu ms, host ms)", timeit(lambda: fwd(labkit.layer_norm)), "fwd+bwd", timeit(lambda: fb(labkit.layer_norm)))
ac.layer_norm = orig
xf = x.detach().float().requires_grad_()
def fb32():
    y = labkit.layer_norm(xf, ns, w, b)
    return torch.autograd.grad(y, (xf, w, b), dy)
print("float32 dropin fwd+bwd", timeit(fb32))
print("plans", [(p.build, p.backward_launches and p.backward_launches.schedule) for p, _ in ac._plans.values() if p], [w for p, w in ac._plans.values() if p is None])
from torch.profiler import profile, ProfilerActivity
for label, patch in (("build", orig), ("cast", lambda *a: None)):
    ac.layer_norm = patch
    fb(labkit.layer_norm); torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(5): fb(labkit.layer_norm)
        torch.cuda.synchronize()
    print(label); print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=10, max_name_column_width=50))
ac.layer_norm = orig

# N > 2**24 under autocast: torch's float32 kernel takes its other path; the drop-in must give its bits
xb = torch.randn(1, 1 << 25, device="cuda").to(torch.bfloat16)
wb, bb = torch.randn(1 << 25, device="cuda"), torch.randn(1 << 25, device="cuda")
with torch.autocast("cuda", dtype=torch.bfloat16), torch.no_grad():
    got, want = labkit.layer_norm(xb, (1 << 25,), wb, bb), torch.nn.functional.layer_norm(xb, (1 << 25,), wb, bb)
print("N=2**25 bits equal:", torch.equal(got.view(torch.int32), want.view(torch.int32)))
