"""Development measurements for the step-pipelined TMA consumer and the column output pass (H200)."""
import json, os, sys, time, torch
from labkit import bench, inputs, identity, chain_study
from labkit.chain import (chain_layer_norm, launch_chain_stats, launch_affine_columns, TmaConfig, _workspace)
from labkit.reference_order import launch_affine_rows
from labkit.check import bit_identical
OUT = os.environ.get("OUT", "/tmp")
res = {"identity": [], "timing": {}, "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
CONFIGS = {"16x24a4": TmaConfig(), "16x24a2": TmaConfig(16, 24, 2), "16x24a8": TmaConfig(16, 24, 8),
           "32x12a4": TmaConfig(32, 12, 4), "8x48a4": TmaConfig(8, 48, 4)}
def run(x, w, b, cfg, unroll=4):
    rows, n = x.numel() // w.numel(), w.numel()
    mean = torch.empty(rows, device="cuda"); rstd = torch.empty(rows, device="cuda"); y = torch.empty_like(x)
    launch_chain_stats(x, mean, rstd, rows, n, 1e-5, "tma", tma=cfg)
    launch_affine_columns(x, mean, rstd, w, b, y, rows, n, (f"-DAFFINE_UNROLL={unroll}",) if unroll != 4 else ())
    return y, mean, rstd
cases = [((16, 64, 256, 256), d) for d in ("normal_plus_1000", "constant_1e4", "uniform")] + \
        [((2, 512), "normal"), ((3, 512 * 17), "normal_plus_1000"), ((2, 512 * (16 * 24 + 5)), "normal"),
         ((5, 512 * 16 * 25), "normal_plus_1000"), ((1, 1 << 24), "normal"), ((66, 512 * 33), "uniform")]
for shape, dist in cases:
    x = inputs.make_input(dist, shape, 0, "cuda"); w, b = inputs.make_affine("random_normal", shape[1:], 0, "cuda")
    for name, cfg in CONFIGS.items():
        for unroll in ((4, 8) if name == "16x24a4" else (4,)):
            try:
                r = identity.compare_to_native(lambda x, w, b, e: run(x, w, b, cfg, unroll), x, w, b, 1e-5)
                line = {"shape": list(shape), "dist": dist, "config": name, "unroll": unroll, "identical": r["identical"]}
                line.update({k + "_eq": r[k]["bit_equal_fraction"] for k in ("output", "mean", "rstd")})
            except Exception as e:
                line = {"shape": list(shape), "dist": dist, "config": name, "error": repr(e)}
            res["identity"].append(line); print(line, flush=True)
    del x, w, b; torch.cuda.empty_cache()
json.dump(res, open(f"{OUT}/dev2.json", "w"), indent=1)
P = bench.Protocol(rounds=int(os.environ.get("ROUNDS", "15")))
shape = (16, 64, 256, 256)
x = inputs.make_input("uniform", shape, 0, "cuda"); w, b = inputs.make_affine("random_normal", shape[1:], 0, "cuda")
rows, n = 16, w.numel()
mean = torch.empty(rows, device="cuda"); rstd = torch.empty(rows, device="cuda"); y = torch.empty_like(x)
chain_layer_norm(x, w, b)
st = lambda cfg, opts=(): (lambda: launch_chain_stats(x, mean, rstd, rows, n, 1e-5, "tma", opts, tma=cfg))
aff = lambda u: (lambda: launch_affine_columns(x, mean, rstd, w, b, y, rows, n, (f"-DAFFINE_UNROLL={u}",) if u != 4 else ()))
m = {"native": lambda: torch.nn.functional.layer_norm(x, shape[1:], w, b, 1e-5),
     "chain": lambda: chain_layer_norm(x, w, b, 1e-5),
     "affine_rows": lambda: launch_affine_rows(x, mean, rstd, w, b, y, rows, n),
     "stats_w4": lambda: launch_chain_stats(x, mean, rstd, rows, n, 1e-5, "w4"),
     "loads_only_16x24a4": st(TmaConfig(), ("-DCHAIN_VARIANT=1",)),
     "chains_only_16x24a4": st(TmaConfig(), ("-DCHAIN_VARIANT=2",)),
     "chains_only_32x12a4": st(TmaConfig(32, 12, 4), ("-DCHAIN_VARIANT=2",))}
for name, cfg in CONFIGS.items():
    m["stats_" + name] = st(cfg)
for u in (4, 8, 16):
    m[f"affine_columns_u{u}"] = aff(u)
    m[f"stats+columns_u{u}"] = (lambda u: (lambda: (st(TmaConfig())(), aff(u)())))(u)
m["stats+rows"] = lambda: (st(TmaConfig())(), launch_affine_rows(x, mean, rstd, w, b, y, rows, n))
m["stats_32x12+columns_u4"] = lambda: (st(TmaConfig(32, 12, 4))(), aff(4)())
rec = bench.time_methods(m, P, baseline="native")
out = {k: {kk: round(vv, 5) for kk, vv in v.items() if kk != "n"} for k, v in rec.stats.items()}
res["timing"][str(shape)] = {"stats": out, "ratios": {k: round(v["median"], 3) for k, v in rec.ratio_vs_baseline.items()}}
for k, v in out.items(): print(f"{k:28s} {v['median_ms']:.4f} [{v['q25_ms']:.4f}, {v['q75_ms']:.4f}]", flush=True)
res["floor"] = chain_study.chain_floor(rounds=15); print("floor", res["floor"], flush=True)
json.dump(res, open(f"{OUT}/dev2.json", "w"), indent=1)
