"""Probe (training reach): torch.profiler of 5 eager and 5 compiled fwd+bwd steps of the drop-in (which kernels run, host and GPU totals). Run on the GPU: python scripts/probe_compiled_profile.py 4x4194304"""
import sys, torch, labkit
from torch.profiler import profile, ProfilerActivity
from labkit.studies.measure import compile_static
shape = tuple(int(s) for s in sys.argv[1].split("x"))
g = torch.Generator(device="cuda").manual_seed(0)
x = torch.randn(shape, device="cuda", generator=g).requires_grad_()
ns = shape[1:] if len(shape) == 4 else shape[-1:]
w = torch.randn(ns, device="cuda", generator=g).requires_grad_()
b = torch.randn(ns, device="cuda", generator=g).requires_grad_()
dy = torch.randn(shape, device="cuda", generator=g)
(f,) = compile_static(labkit.layer_norm)
for name, fn in (("eager", labkit.layer_norm), ("compiled", f)):
    for _ in range(5):
        fn(x, ns, w, b).backward(dy)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
        for _ in range(5):
            fn(x, ns, w, b).backward(dy)
        torch.cuda.synchronize()
    print("=====", name, shape)
    print(p.key_averages().table(sort_by="cuda_time_total", row_limit=14, max_name_column_width=60))
