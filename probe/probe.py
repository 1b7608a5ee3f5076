"""Probe (not committed): host cost per call and racecheck timing data for the helpers."""
import time, torch, json, sys
from labkit.ops.chain import chain_layer_norm
from labkit.ops.reference_order import reference_order_layer_norm
import torch.nn.functional as F
res = {}
dev = "cuda"
for shape in [(256, 8192), (2048, 2048), (33, 4, 4096), (32, 1, 1, 65536), (4, 768), (16, 64, 256, 256)]:
    x = torch.randn(shape, device=dev)
    n = shape[-1] if len(shape) <= 3 else shape[-1]
    ns = x.shape[1:] if len(shape) == 4 else x.shape[-1:]
    w = torch.randn(ns, device=dev); b = torch.randn(ns, device=dev)
    fns = {"torch": lambda: F.layer_norm(x, ns, w, b, 1e-5),
           "chain": lambda: chain_layer_norm(x, w, b, 1e-5),
           "reference_order": lambda: reference_order_layer_norm(x, w, b, 1e-5)}
    row = {}
    for k, f in fns.items():
        try:
            for _ in range(20): f()
            torch.cuda.synchronize()
            N = 2000 if x.numel() < 10**7 else 50
            t0 = time.perf_counter(); c0 = time.process_time()
            for _ in range(N): f()
            t1 = time.perf_counter(); c1 = time.process_time()
            torch.cuda.synchronize(); t2 = time.perf_counter()
            # per-call with events
            ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(30)]
            for s, e in ev:
                s.record(); f(); e.record()
            torch.cuda.synchronize()
            ms = sorted(s.elapsed_time(e) for s, e in ev)[15]
            row[k] = {"host_us_per_call": (t1 - t0) / N * 1e6, "cpu_us_per_call": (c1 - c0) / N * 1e6,
                      "wall_us_per_call": (t2 - t0) / N * 1e6, "event_median_ms": ms}
        except Exception as e:
            row[k] = {"error": repr(e)[:300]}
    res[str(shape)] = row
print(json.dumps(res, indent=1))
