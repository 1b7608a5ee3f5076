"""Dev probe: kernels/rows_fused.cu's warp-per-row layout with the packed reduction (rows_fused_packed{K}: torch's
merges made once each, on lanes whose results torch never reads) against the entry point the dispatch serves today
(rows_fused_warp1 / rows_fused_reg{K}) and the block layout, at many-row shapes with N <= 2048. Bits checked (int32
views of y, mean, rstd against torch.native_layer_norm, 3 calls each) and timed under graph replay (protocol A, 25
rounds of 5 replays). Writes probe.json into $OUT. Not a committed run."""
import dataclasses
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import torch  # noqa: E402

from labkit.core.device import device_info  # noqa: E402
from labkit.core.launch import Kernel  # noqa: E402
from labkit.ops import plans, rows_fused  # noqa: E402
from labkit.studies import bench  # noqa: E402

NS = (256, 512, 768, 1024, 1536, 2048, 1000, 200, 2044)
ROWS = (1024, 4096, 8192, 32768)
EXTRA = [(4096, 768), (8192, 1024), (65536, 256), (65536, 512), (16384, 1024), (3, 768), (4097, 1028)]


def candidates(rows, n, dev):
    n4 = n // 4
    base = rows_fused.plan(rows, n, dev)
    out = {"base:" + base.kernel.function: base}
    k = next((k for k in (1, 2, 4) if n4 <= 128 * k), None)
    if k is not None:
        out[f"rows_fused_packed{k}"] = dataclasses.replace(
            base, kernel=Kernel("rows_fused", f"rows_fused_packed{k}", (-(-rows // 4),), (32, 4)))
    kb = next((k for k in rows_fused.VECTORS if n4 <= 128 * k), None)
    if kb is not None and not base.kernel.function.startswith("rows_fused_reg"):
        out[f"rows_fused_reg{kb}"] = rows_fused.entry_plan(rows, n, f"rows_fused_reg{kb}")
    return out


def main():
    dev = device_info(0)
    shapes = list(dict.fromkeys([(r, n) for n in NS for r in ROWS] + EXTRA))
    out = []
    for rows, n in shapes:
        x = torch.randn(rows, n, device="cuda") * 2 + 50
        w, b = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
        ref = torch.native_layer_norm(x, (n,), w, b, 1e-5)
        ps = candidates(rows, n, dev)
        row = {"rows": rows, "n": n, "identical": {}}
        for k, p in ps.items():
            ok = True
            for _ in range(3):
                got = plans.execute(p, x, w, b, 1e-5)
                ok &= all(torch.equal(a.reshape(-1).view(torch.int32), c.reshape(-1).view(torch.int32))
                          for a, c in zip(got, ref))
            row["identical"][k] = ok
        fns = {"native": lambda: torch.nn.functional.layer_norm(x, (n,), w, b, 1e-5),
               **{k: (lambda p: lambda: plans.execute(p, x, w, b, 1e-5))(p) for k, p in ps.items()}}
        rec = bench.time_methods(fns, dataclasses.replace(bench.PROTOCOL_A, rounds=25), "native")
        row["graph"] = {m: s["median_ms"] * 1e3 for m, s in rec.stats.items()}
        row["graph_iqr"] = {m: (s["q25_ms"] * 1e3, s["q75_ms"] * 1e3) for m, s in rec.stats.items()}
        print(rows, n, [k for k, v in row["identical"].items() if not v] or "all identical", "graph us",
              {k: round(v, 2) for k, v in row["graph"].items()}, flush=True)
        out.append(row)
    meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
            "commit": os.environ.get("LABKIT_GIT_COMMIT")}
    Path(os.environ.get("OUT", "."), "probe.json").write_text(json.dumps({"meta": meta, "shapes": out}, indent=1))


if __name__ == "__main__":
    main()
