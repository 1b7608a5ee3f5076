"""Default ring (64x6, ahead 8) and the output pass launched as a programmatic dependent (H200)."""
import json, os, time, torch
from labkit import bench, inputs, identity, chain_study
from labkit.chain import chain_layer_norm, launch_chain_stats, launch_affine_columns, TmaConfig
from labkit.reference_order import launch_affine_rows
OUT = os.environ.get("OUT", "/tmp")
res = {"identity": [], "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
shape = (16, 64, 256, 256); rows = 16
for dist in ("normal_plus_1000", "constant_1e4", "uniform"):
    x = inputs.make_input(dist, shape, 2, "cuda"); w, b = inputs.make_affine("random_normal", shape[1:], 2, "cuda")
    for ov in (True, False):
        r = identity.compare_to_native(lambda x, w, b, e: chain_layer_norm(x, w, b, e, return_stats=True, overlap_output=ov), x, w, b, 1e-5)
        line = {"dist": dist, "overlap": ov, "identical": r["identical"]}; res["identity"].append(line); print(line, flush=True)
x = inputs.make_input("uniform", shape, 0, "cuda"); w, b = inputs.make_affine("random_normal", shape[1:], 0, "cuda")
n = w.numel(); mean = torch.empty(rows, device="cuda"); rstd = torch.empty(rows, device="cuda"); y = torch.empty_like(x)
chain_layer_norm(x, w, b)
st = lambda cfg=None, opts=(): (lambda: launch_chain_stats(x, mean, rstd, rows, n, 1e-5, "tma", opts, tma=cfg))
aff = lambda ao=(), ov=False: (lambda: launch_affine_columns(x, mean, rstd, w, b, y, rows, n, ao, ov))
E16 = ("-DAFFINE_EARLY_ROWS=16", "-DAFFINE_MIN_BLOCKS=2")
m = {"native": lambda: torch.nn.functional.layer_norm(x, shape[1:], w, b, 1e-5),
     "chain": lambda: chain_layer_norm(x, w, b, 1e-5),
     "chain_no_overlap": lambda: chain_layer_norm(x, w, b, 1e-5, overlap_output=False),
     "stats": st(), "chains_only": st(None, ("-DCHAIN_VARIANT=2",)), "loads_only": st(None, ("-DCHAIN_VARIANT=1",)),
     "affine_columns": aff(), "affine_columns_e16": aff(E16), "affine_rows": lambda: launch_affine_rows(x, mean, rstd, w, b, y, rows, n),
     "stats+affine_pdl": lambda: (st()(), aff((), True)()),
     "stats+affine_pdl_e16": lambda: (st()(), aff(E16, True)()),
     "stats+affine": lambda: (st()(), aff()()),
     "stats_32x12a8+affine_pdl": lambda: (st(TmaConfig(32, 12, 8))(), aff((), True)()),
     "stats_96x4a8+affine_pdl": lambda: (st(TmaConfig(96, 4, 8))(), aff((), True)())}
rec = bench.time_methods(m, bench.Protocol(rounds=21), baseline="native")
out = {k: {kk: round(vv, 5) for kk, vv in v.items() if kk != "n"} for k, v in rec.stats.items()}
res["timing"] = {"stats": out, "ratios": {k: round(v["median"], 3) for k, v in rec.ratio_vs_baseline.items()}}
for k, v in out.items(): print(f"{k:28s} {v['median_ms']:.4f} [{v['q25_ms']:.4f}, {v['q75_ms']:.4f}]", flush=True)
# eager (protocol-B-like) sanity: PDL launch path from Python
rec = bench.time_methods({"chain": m["chain"], "chain_no_overlap": m["chain_no_overlap"]}, bench.PROTOCOL_B)
print("protocol B", {k: round(v["median_ms"], 4) for k, v in rec.stats.items()})
json.dump(res, open(f"{OUT}/dev5.json", "w"), indent=1)
