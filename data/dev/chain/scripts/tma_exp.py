import json, os, torch, numpy as np, cupy as cp
from labkit import bench, inputs
from labkit.launch import launch
from labkit.tensormap import encode_tiled_f32
import labkit.chain as lc
OUT = os.environ.get("OUT", "/tmp"); res = {}
# 1. chain latency floor with clock64
src = open(".gpu/chain_floor.cu").read().replace('#include "welford_ln.cuh"', open(".gpu/welford_ln.cuh").read().replace("#pragma once", ""))
mod = cp.RawModule(code=src, options=("--fmad=true", "--ftz=false", "-std=c++17"))
f = mod.get_function("chain_floor")
out = cp.zeros(64 * 64, cp.float32); cyc = cp.zeros(64, cp.int64)
for threads in ():
    for pushes in (32768,):
        f((64,), (threads,), (out, cyc, np.int32(pushes), np.float32(1.0))); cp.cuda.Device().synchronize()
        s, e = cp.cuda.Event(), cp.cuda.Event(); s.record()
        f((64,), (threads,), (out, cyc, np.int32(pushes), np.float32(1.0))); e.record(); e.synchronize()
        ms = cp.cuda.get_elapsed_time(s, e); c = float(cyc.get().mean())
        line = {"threads": threads, "pushes": pushes, "ms": ms, "cycles_per_push": c / pushes, "implied_GHz": c / ms / 1e6}
        print("floor", line, flush=True); res.setdefault("floor", []).append(line)
# 2. TMA loads-only variants at L1/40
shape = (16, 64, 256, 256); rows, n = 16, 64 * 256 * 256
x = inputs.make_input("uniform", shape, 0, "cuda")
mean = torch.empty(rows, device="cuda"); rstd = torch.empty(rows, device="cuda")
ws = lc._workspace(x.device, rows)
def run(variant, steps, stages, backoff=1):
    opts = (f"-DCHAIN_VARIANT={variant}", f"-DTMA_STEPS={steps}", f"-DTMA_STAGES={stages}", f"-DPRODUCER_BACKOFF={backoff}")
    smem = stages * steps * 528
    tmap = encode_tiled_f32(x.data_ptr(), (128, 4, n // 512, rows), (512, 2048, 4 * n), (128, 1, steps, 1))
    extra = (ws["recip"],) if variant == 4 else ()
    return lambda: launch("chain_stats_tma", "chain_stats_tma", (4, rows), (64,),
                          (tmap, *extra, ws["warp_state"], ws["row_done"], mean, rstd, np.int32(n), np.float32(1e-5)),
                          x.device, shared_mem=smem, options=opts)
methods = {}
for variant in (3, 4):
    for steps, stages in ((16, 24),):
        if stages * steps * 512 <= 227 * 1024:
            methods[f"v{variant}_steps{steps}_stages{stages}"] = run(variant, steps, stages)
methods["v0_steps16_stages24"] = run(0, 16, 24)
methods["v0_steps16_stages24_nobackoff"] = run(0, 16, 24, 0)
methods["v3_steps16_stages24_nobackoff"] = run(3, 16, 24, 0)
methods["v1_steps16_stages24"] = run(1, 16, 24)
methods["v2_steps16_stages24"] = run(2, 16, 24)
rec = bench.time_methods(methods, bench.Protocol(rounds=10))
for k, v in rec.stats.items():
    print(k, round(v["median_ms"], 4), "TB/s", round(x.numel() * 4 / v["median_ms"] / 1e9, 3), flush=True)
res["tma"] = {k: v["median_ms"] for k, v in rec.stats.items()}
json.dump(res, open(f"{OUT}/tma_exp.json", "w"), indent=1)
