"""Probe (training reach): host microseconds per compiled fwd+bwd with the registered ops served from C++ and from Python, the planner calls, and a cProfile of 200 compiled steps. Run on the GPU: python scripts/probe_compiled_host.py 8x768"""
import cProfile, io, pstats, sys, time
import torch
import labkit
from labkit.ops.dropin import host, op, plan
from labkit.studies.measure import compile_static, host_us_per_call

asked = {"f": 0, "b": 0}
rf, rb = plan.host_forward_plan, plan.host_backward_plan
def cf(*a):
    asked["f"] += 1; return rf(*a)
def cb(*a):
    asked["b"] += 1; return rb(*a)
plan.host_forward_plan, plan.host_backward_plan = cf, cb
shape = tuple(int(s) for s in sys.argv[1].split("x")) if len(sys.argv) > 1 else (8, 768)
g = torch.Generator(device="cuda").manual_seed(0)
x = torch.randn(shape, device="cuda", generator=g).requires_grad_()
ns = shape[-1:]
w = torch.randn(ns, device="cuda", generator=g).requires_grad_()
b = torch.randn(ns, device="cuda", generator=g).requires_grad_()
dy = torch.randn(shape, device="cuda", generator=g)
sync = torch.cuda.synchronize
(f,) = compile_static(labkit.layer_norm)
def step():
    f(x, ns, w, b).backward(dy)
def eager():
    labkit.layer_norm(x, ns, w, b).backward(dy)
def fwd_only():
    with torch.no_grad():
        f(x, ns, w, b)
print("served", host.module().ops_served())
print("compiled fwd+bwd us", host_us_per_call(step, 300, sync, warmups=30), "asked", asked, "planned", host.module().ops_planned())
print("compiled fwd no-grad us", host_us_per_call(fwd_only, 300, sync, warmups=30))
print("eager fwd+bwd us", host_us_per_call(eager, 300, sync, warmups=30))
(t,) = compile_static(torch.nn.functional.layer_norm)
def tstep():
    t(x, ns, w, b).backward(dy)
print("compiled torch fwd+bwd us", host_us_per_call(tstep, 300, sync, warmups=30))
print("eager torch fwd+bwd us", host_us_per_call(lambda: torch.nn.functional.layer_norm(x, ns, w, b).backward(dy), 300, sync, warmups=30))
pr = cProfile.Profile(); pr.enable()
for _ in range(200):
    step()
sync(); pr.disable()
s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(25); print(s.getvalue()[:6000])
op.unserve_ops()
(f,) = compile_static(labkit.layer_norm)
print("unserved compiled fwd+bwd us", host_us_per_call(step, 300, sync, warmups=30))
