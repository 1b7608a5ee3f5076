import os, json, torch, numpy as np, cupy as cp
from labkit import inputs
from labkit.tensormap import encode_tiled_f32
import labkit.chain as lc
src = open(".gpu/tma_probe.cu").read()
res = {}
shape = (16, 64, 256, 256); rows, n = 16, 64 * 256 * 256
x = inputs.make_input("uniform", shape, 0, "cuda")
ws = lc._workspace(x.device, rows)
mean = torch.empty(rows, device="cuda"); rstd = torch.empty(rows, device="cuda")
for steps, stages, variant in ((16, 24, 0), (16, 24, 3), (8, 40, 0), (16, 24, 1)):
    mod = cp.RawModule(code=src, options=("--fmad=true", "--ftz=false", "-std=c++17", f"-DTMA_STEPS={steps}", f"-DTMA_STAGES={stages}", f"-DCHAIN_VARIANT={variant}"))
    f = mod.get_function("chain_stats_probe")
    smem = stages * steps * 528
    f.max_dynamic_shared_size_bytes = smem
    probe = cp.zeros(16 * rows * 4, cp.int64)
    tmap = encode_tiled_f32(x.data_ptr(), (128, 4, n // 512, rows), (512, 2048, 4 * n), (128, 1, steps, 1))
    from labkit.views import cupy_view
    args = (tmap, probe, cupy_view(ws["warp_state"]), cupy_view(ws["row_done"]), cupy_view(mean), cupy_view(rstd), np.int32(n), np.float32(1e-5))
    for _ in range(3): f((4, rows), (64,), args, shared_mem=smem)
    cp.cuda.Device().synchronize()
    s_, e_ = cp.cuda.Event(), cp.cuda.Event(); s_.record(); f((4, rows), (64,), args, shared_mem=smem); e_.record(); e_.synchronize()
    p = probe.get()[:256].reshape(2, rows * 4, 2)
    line = {"steps": steps, "stages": stages, "variant": variant, "ms": cp.cuda.get_elapsed_time(s_, e_),
            "consumer_wait_frac": float(p[0, :, 0].sum() / p[0, :, 1].sum()), "consumer_cycles": float(p[0, :, 1].mean()),
            "producer_wait_frac": float(p[1, :, 0].sum() / max(p[1, :, 1].sum(), 1)), "producer_cycles": float(p[1, :, 1].mean())}
    print(line, flush=True); res[f"{steps}_{stages}_{variant}"] = line
json.dump(res, open(os.environ.get("OUT", "/tmp") + "/probe.json", "w"), indent=1)
