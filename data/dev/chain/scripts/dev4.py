"""Ring shapes and output-pass store/load policies (H200)."""
import json, os, time, torch
from labkit import bench, inputs, identity, chain_study
from labkit.chain import chain_layer_norm, launch_chain_stats, launch_affine_columns, TmaConfig
OUT = os.environ.get("OUT", "/tmp")
res = {"identity": [], "timing": {}, "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
CONFIGS = {"64x6a4": TmaConfig(64, 6, 4), "64x6a8": TmaConfig(64, 6, 8), "64x6a16": TmaConfig(64, 6, 16), "96x4a8": TmaConfig(96, 4, 8), "128x3a8": TmaConfig(128, 3, 8), "128x3a4": TmaConfig(128, 3, 4), "32x12a8": TmaConfig(32, 12, 8),
           "32x12a2": TmaConfig(32, 12, 2), "64x6a4": TmaConfig(64, 6, 4), "48x8a4": TmaConfig(48, 8, 4),
           "192x2a8": TmaConfig(192, 2, 8)}
AFF = {"plain": ()}
shape = (16, 64, 256, 256)
x = inputs.make_input("normal_plus_1000", shape, 1, "cuda"); w, b = inputs.make_affine("random_normal", shape[1:], 1, "cuda")
rows, n = 16, w.numel()
def runner(cfg, aopts):
    def f(x, w, b, e):
        mean = torch.empty(rows, device="cuda"); rstd = torch.empty(rows, device="cuda"); y = torch.empty_like(x)
        launch_chain_stats(x, mean, rstd, rows, n, e, "tma", tma=cfg)
        launch_affine_columns(x, mean, rstd, w, b, y, rows, n, aopts)
        return y, mean, rstd
    return f
for name, cfg in CONFIGS.items():
    for an, ao in AFF.items():
        if an != "plain": continue
        r = identity.compare_to_native(runner(cfg, ao), x, w, b, 1e-5)
        line = {"config": name, "affine": an, "identical": r["identical"]}; res["identity"].append(line); print(line, flush=True)
x = inputs.make_input("uniform", shape, 0, "cuda"); w, b = inputs.make_affine("random_normal", shape[1:], 0, "cuda")
mean = torch.empty(rows, device="cuda"); rstd = torch.empty(rows, device="cuda"); y = torch.empty_like(x)
chain_layer_norm(x, w, b)
st = lambda cfg, opts=(): (lambda: launch_chain_stats(x, mean, rstd, rows, n, 1e-5, "tma", opts, tma=cfg))
aff = lambda ao: (lambda: launch_affine_columns(x, mean, rstd, w, b, y, rows, n, ao))
m = {"native": lambda: torch.nn.functional.layer_norm(x, shape[1:], w, b, 1e-5),
     "chain": lambda: chain_layer_norm(x, w, b, 1e-5)}
for name, cfg in CONFIGS.items():
    m["stats_" + name] = st(cfg)
    m["chains_only_" + name] = st(cfg, ("-DCHAIN_VARIANT=2",))
for an, ao in AFF.items():
    m["affine_" + an] = aff(ao)
    m["stats64+affine_" + an] = (lambda ao: (lambda: (st(CONFIGS["64x6a8"])(), aff(ao)())))(ao)
m["stats128+affine_plain"] = lambda: (st(CONFIGS["128x3a8"])(), aff(())())
a = torch.empty(1 << 28, dtype=torch.float32, device="cuda"); c = torch.empty_like(a)
m["ceiling_mul_1GiB"] = lambda: torch.mul(a, 1.0, out=c)
rec = bench.time_methods(m, bench.Protocol(rounds=15), baseline="native")
out = {k: {kk: round(vv, 5) for kk, vv in v.items() if kk != "n"} for k, v in rec.stats.items()}
res["timing"][str(shape)] = {"stats": out, "ratios": {k: round(v["median"], 3) for k, v in rec.ratio_vs_baseline.items()}}
for k, v in out.items(): print(f"{k:28s} {v['median_ms']:.4f} [{v['q25_ms']:.4f}, {v['q75_ms']:.4f}]", flush=True)
res["floor"] = chain_study.chain_floor(rounds=15); print("floor", res["floor"], flush=True)
json.dump(res, open(f"{OUT}/dev4.json", "w"), indent=1)
