"""Dev probe (not a result): host cost with the C++ fast path, and where the eager fwd+bwd at L1/40 loses ~0.1 ms
against graph replay (a profiler timeline of protocol-B calls)."""
import json, os, sys, time
sys.path.insert(0, os.getcwd())
import torch
import labkit
from labkit.studies import training
from labkit.studies.bench import CudaEventTimer
OUT = os.environ.get("OUT", "build/probe_out"); os.makedirs(OUT, exist_ok=True)
out = {}
t0 = time.time()
out["host"] = training.host_cost(calls=2000)
for e in out["host"]["shapes"]:
    print({k: (round(v, 2) if isinstance(v, float) else v) for k, v in e.items()})
print("host s", time.time() - t0)
# L1/40 eager fwd+bwd: the timeline of 3 protocol-B calls
shape = (16, 64, 256, 256)
x, w, b, dy = training._tensors(shape, 0, "cuda")
m = training.methods(x, w, b, dy, 1e-5, compiled=False)
timer = CudaEventTimer(256 << 20)
res = {}
for name in ("dropin", "native", "dropin_torch_backward"):
    fn = m[name]
    for _ in range(3): timer(fn, 1)
    ts = sorted(timer(fn, 1) for _ in range(15))
    res[name] = {"eager_median_ms": ts[7]}
    if name == "native":
        continue
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(3): timer(fn, 1)
    prof.export_chrome_trace(os.path.join(OUT, f"trace_{name}.json"))
    evs = []
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            evs.append((e.time_range.start, e.time_range.end, e.name[:70]))
    evs.sort()
    lines = []
    prev = None
    for s, e, n in evs:
        lines.append(f"{s:14.1f} {e - s:9.1f} gap {0 if prev is None else s - prev:9.1f}  {n}")
        prev = e
    res[name]["gpu_timeline"] = lines
    print(name, res[name]["eager_median_ms"]); print("\n".join(lines[-40:]))
    print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=25))
out["l1_40"] = res
json.dump(out, open(os.path.join(OUT, "gap.json"), "w"), indent=1, default=str)
