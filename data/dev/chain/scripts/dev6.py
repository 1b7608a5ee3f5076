"""When should the output pass launch? PDL trigger points vs no overlap (H200)."""
import json, os, time, torch
from labkit import bench, inputs, identity
from labkit.chain import chain_layer_norm, launch_chain_stats, launch_affine_columns, TmaConfig
OUT = os.environ.get("OUT", "/tmp")
res = {"identity": [], "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
shape = (16, 64, 256, 256); rows = 16
x = inputs.make_input("uniform", shape, 0, "cuda"); w, b = inputs.make_affine("random_normal", shape[1:], 0, "cuda")
n = w.numel(); mean = torch.empty(rows, device="cuda"); rstd = torch.empty(rows, device="cuda"); y = torch.empty_like(x)
chain_layer_norm(x, w, b)
def pipe(k, ov, ao=()):
    so = (f"-DPDL_TRIGGER_EIGHTHS={k}",) if k else ()
    return lambda: (launch_chain_stats(x, mean, rstd, rows, n, 1e-5, "tma", so),
                    launch_affine_columns(x, mean, rstd, w, b, y, rows, n, ao, ov))
m = {"native": lambda: torch.nn.functional.layer_norm(x, shape[1:], w, b, 1e-5), "no_overlap": pipe(0, False)}
for k in (0, 4, 6, 7):
    m[f"pdl_trigger_{k}_8"] = pipe(k, True)
    m[f"stats_trigger_{k}_8"] = (lambda so: (lambda: launch_chain_stats(x, mean, rstd, rows, n, 1e-5, "tma", so)))((f"-DPDL_TRIGGER_EIGHTHS={k}",) if k else ())
m["pdl_trigger_6_8_e16"] = pipe(6, True, ("-DAFFINE_EARLY_ROWS=16", "-DAFFINE_MIN_BLOCKS=2"))
m["pdl_trigger_6_8_e8"] = pipe(6, True, ("-DAFFINE_EARLY_ROWS=8", "-DAFFINE_MIN_BLOCKS=4"))
m["no_overlap_e8"] = pipe(0, False, ("-DAFFINE_EARLY_ROWS=8", "-DAFFINE_MIN_BLOCKS=4"))
rec = bench.time_methods(m, bench.Protocol(rounds=21), baseline="native")
out = {k: {kk: round(vv, 5) for kk, vv in v.items() if kk != "n"} for k, v in rec.stats.items()}
res["timing"] = {"stats": out}
for k, v in out.items(): print(f"{k:28s} {v['median_ms']:.4f} [{v['q25_ms']:.4f}, {v['q75_ms']:.4f}]", flush=True)
x = inputs.make_input("normal_plus_1000", shape, 3, "cuda")
for k in (6,):
    def f(x, w, b, e, k=k):
        mm = torch.empty(rows, device="cuda"); rr = torch.empty(rows, device="cuda"); yy = torch.empty_like(x)
        launch_chain_stats(x, mm, rr, rows, n, e, "tma", (f"-DPDL_TRIGGER_EIGHTHS={k}",))
        launch_affine_columns(x, mm, rr, w, b, yy, rows, n, (), True)
        return yy, mm, rr
    r = identity.compare_to_native(f, x, w, b, 1e-5); print("identity trigger", k, r["identical"])
json.dump(res, open(f"{OUT}/dev6.json", "w"), indent=1)
