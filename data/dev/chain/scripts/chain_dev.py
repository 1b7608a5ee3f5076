import json, os, sys, time, torch
from labkit import bench, inputs, identity
from labkit.chain import chain_layer_norm, launch_chain_stats, _workspace
from labkit.reference_order import reference_order_layer_norm, launch_affine_rows
from labkit.split_stats import split_stats_layer_norm
torch.backends.cudnn.allow_tf32 = False
OUT = os.environ.get("OUT", "/tmp")
res = {"identity": [], "timing": {}}
import labkit.chain as lc
def cand(schedule):
    def f(x, w, b, e):
        if schedule.startswith("chain_"):
            return chain_layer_norm(x, w, b, e, schedule="chain", return_stats=True, blocking=schedule.split("_", 1)[1])
        return chain_layer_norm(x, w, b, e, schedule=schedule, return_stats=True)
    return f
cases = [((16,64,256,256), d) for d in ("uniform", "normal_plus_1000", "constant_1e4")] + \
        [((8,32,128,256), "uniform"), ((4096,1,1,1024), "uniform"), ((3,64,17,19), "normal_plus_1000"),
         ((3,64,17,19), "constant_1e4"), ((5,516), "normal"), ((7,4), "normal"), ((2,4*128*3+8), "normal"),
         ((1,1<<24), "normal_plus_1000"), ((200, 4096), "normal"), ((33, 2052), "uniform")]
for shape, dist in cases:
    x = inputs.make_input(dist, shape, 0, "cuda"); w, b = inputs.make_affine("random_normal", shape[1:], 0, "cuda")
    for sch in ("chain_auto", "chain_w4"):
        try:
            r = identity.compare_to_native(cand(sch), x, w, b, 1e-5, {"shape": list(shape), "dist": dist, "schedule": sch})
            line = {k: r[k] for k in ("shape", "dist", "schedule", "identical")}
            line.update({k + "_eq": r[k]["bit_equal_fraction"] for k in ("output", "mean", "rstd")})
        except Exception as e:
            line = {"shape": list(shape), "dist": dist, "schedule": sch, "error": repr(e)}
        res["identity"].append(line); print(line, flush=True)
    del x, w, b; torch.cuda.empty_cache()
# graph replay with mutation
x = inputs.make_input("uniform", (16,64,256,256), 1, "cuda"); w, b = inputs.make_affine("random_normal", (64,256,256), 1, "cuda")
for _ in range(3): chain_layer_norm(x, w, b, 1e-5)
torch.cuda.synchronize(); g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g): y, m, s = chain_layer_norm(x, w, b, 1e-5, return_stats=True)
x.mul_(0.8); w.mul_(0.9); b.add_(0.01); g.replay(); torch.cuda.synchronize()
ref = identity.native_layer_norm(x, w, b, 1e-5)
from labkit.check import bit_identical
res["graph_mutation_identical"] = all(bit_identical(r, q) for r, q in zip(ref, (y, m, s))); print("graph mutation", res["graph_mutation_identical"])
del g, y, m, s
P = bench.Protocol(rounds=int(os.environ.get("ROUNDS", "15")))
def timeit(shape, extra_inductor=True):
    x = inputs.make_input("uniform", shape, 0, "cuda"); w, b = inputs.make_affine("random_normal", shape[1:], 0, "cuda")
    rows = x.numel() // w.numel(); n = w.numel()
    mean = torch.empty(rows, device="cuda"); rstd = torch.empty(rows, device="cuda"); y = torch.empty_like(x)
    ln = torch.nn.LayerNorm(shape[1:]).cuda(); ln.weight.data.copy_(w); ln.bias.data.copy_(b)
    from labkit.chain import launch_chain_stats as lcs
    methods = {"native": lambda: torch.nn.functional.layer_norm(x, shape[1:], w, b, 1e-5),
               "reference_order": lambda: reference_order_layer_norm(x, w, b, 1e-5),
               "chain_auto": lambda: chain_layer_norm(x, w, b, 1e-5),
               "chain_w4": lambda: chain_layer_norm(x, w, b, 1e-5, schedule="chain", blocking="w4"),
               "rows_fused": lambda: chain_layer_norm(x, w, b, 1e-5, schedule="rows_fused"),
               "stage_stats_w4": lambda: lcs(x, mean, rstd, rows, n, 1e-5, "w4"),
               "stage_w4_loads_only": lambda: lcs(x, mean, rstd, rows, n, 1e-5, "w4", ("-DCHAIN_VARIANT=1",)),
               "stage_affine": lambda: launch_affine_rows(x, mean, rstd, w, b, y, rows, n),
               "split_interleaved": lambda: split_stats_layer_norm(x, w, b, 1e-5, geometry="interleaved")}
    if lc.choose_blocking(n) == "tma":
        methods["stage_stats_tma"] = lambda: lcs(x, mean, rstd, rows, n, 1e-5, "tma")
        methods["stage_tma_loads_only"] = lambda: lcs(x, mean, rstd, rows, n, 1e-5, "tma", ("-DCHAIN_VARIANT=1",))
        methods["stage_tma_chains_only"] = lambda: lcs(x, mean, rstd, rows, n, 1e-5, "tma", ("-DCHAIN_VARIANT=2",))
    if extra_inductor:
        t0 = time.time(); comp = torch.compile(ln); 
        with torch.no_grad(): comp(x)
        print("inductor compile s", time.time() - t0, flush=True)
        methods["inductor"] = lambda: comp(x)
    with torch.no_grad():
        rec = bench.time_methods(methods, P, baseline="native")
    out = {k: {kk: round(vv, 5) for kk, vv in v.items() if kk != "n"} for k, v in rec.stats.items()}
    ratios = {k: round(v["median"], 3) for k, v in rec.ratio_vs_baseline.items()}
    print(shape, json.dumps({k: v["median_ms"] for k, v in out.items()}), "ratios", ratios, flush=True)
    res["timing"][str(shape)] = {"stats": out, "ratios": ratios}
    torch._dynamo.reset(); torch.cuda.empty_cache()
for shape in [(16,64,256,256), (8,32,128,256), (3,64,17,19)]:
    timeit(shape, extra_inductor=(shape[0] == 16))
# copy ceiling
a = torch.empty(1 << 30, dtype=torch.uint8, device="cuda"); c = torch.empty_like(a)
rec = bench.time_methods({"copy_1GiB": lambda: c.copy_(a)}, bench.Protocol(rounds=10))
ms = rec.stats["copy_1GiB"]["median_ms"]; res["copy"] = {"ms": ms, "TBps_rw": 2 * (1 << 30) / ms / 1e9}; print(res["copy"])
json.dump(res, open(f"{OUT}/chain_dev.json", "w"), indent=1)
