"""rows_fused with constant reciprocals for the register-kept vectors vs native (H200)."""
import json, os, time, torch
from labkit import bench, inputs
from labkit.chain import chain_layer_norm
OUT = os.environ.get("OUT", "/tmp")
res = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "timing": {}}
for shape in [(4096, 1, 1, 1024), (200, 4096), (1024, 4096), (65536, 256), (3, 64, 17, 19)]:
    x = inputs.make_input("uniform", shape, 0, "cuda"); w, b = inputs.make_affine("random_normal", shape[1:], 0, "cuda")
    m = {"native": lambda: torch.nn.functional.layer_norm(x, tuple(shape[1:]), w, b, 1e-5),
         "chain": lambda: chain_layer_norm(x, w, b, 1e-5)}
    rec = bench.time_methods(m, bench.Protocol(rounds=21), baseline="native")
    out = {k: round(v["median_ms"], 5) for k, v in rec.stats.items()}
    r = round(rec.ratio_vs_baseline["chain"]["median"], 3)
    res["timing"][str(shape)] = {"median_ms": out, "chain_vs_native": r}; print(shape, out, "ratio", r, flush=True)
json.dump(res, open(f"{OUT}/dev7.json", "w"), indent=1)
