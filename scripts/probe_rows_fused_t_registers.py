"""Probe (H100 at 72c13e2, one process per kernel version on the same warm machine): bf16 forward at ordinary
shapes under graph replay (protocol A), labkit.studies.training_reach.ordinary, with rows_fused.cu as committed
("new": the 2-byte builds keep the loaded vectors) and then with its previous text copied over it ("old",
e1ca5d6's kernels/rows_fused.cu), as build/gpucmd/g6.sh ran it:
    python3 scripts/probe_rows_fused_t_registers.py new; cp OLD.cu kernels/rows_fused.cu; python3 ... old
Output: $OUT/ord_<label>.json; the finding is docs/decisions.md#rows_fused_t_registers."""
import json, os, sys
from dataclasses import replace
import torch
from labkit.studies import training_reach as r
from labkit.studies.bench import PROTOCOL_A, PROTOCOL_B
label = sys.argv[1]
eager, graph = replace(PROTOCOL_B, rounds=15), replace(PROTOCOL_A, rounds=15)
shapes = ((4096, 768), (8192, 1024), (8192, 4096), (16384, 4096), (2048, 16384), (1024, 8192), (32768, 2048))
rows = r.ordinary(shapes, eager, graph, 0, "cuda")
out = []
for row in rows:
    g = row["graph"]["stats"] if "stats" in row["graph"] else row["graph"]
    med = {k: round(v["median_us"] if "median_us" in v else v["median_ms"] * 1000, 2) for k, v in g.items()} if isinstance(g, dict) else g
    out.append({"shape": row["key"], "path": row["path"], "identical": row["identical"], "graph_us": med})
    print(label, out[-1], flush=True)
json.dump({"label": label, "gpu": torch.cuda.get_device_name(), "rows": out, "raw": rows}, open(f"{os.environ['OUT']}/ord_{label}.json", "w"), indent=1, default=str)
