"""Dev probe: rows_fused's two layouts of torch's arithmetic (kernels/rows_fused.cu), a warp per row against a
(32, 4) block per row, at every (rows, N) of a grid where both can hold the row; bits checked against torch for
both, then timed under graph replay (protocol A) and eager per call with the L2 flushed (protocol B), torch's own
kernel beside them. Writes layout.json into $OUT (or the current directory). Not a committed run: it informs which
layout function_for should pick (today: the warp layout wherever it holds the row)."""
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


def layouts(rows, n):
    n4 = n // 4
    kb = next(k for k in rows_fused.VECTORS if n4 <= 128 * k)
    kw = next(k for k in rows_fused.WARP_VECTORS if n4 <= 128 * k)
    block = rows_fused.RowsFusedPlan(rows, n, Kernel("rows_fused", f"rows_fused_reg{kb}", (rows,), (32, 4)))
    warp = rows_fused.RowsFusedPlan(rows, n, Kernel("rows_fused", f"rows_fused_warp{kw}", (-(-rows // 4),), (32, 4)))
    return {"block": block, "warp": warp}


def main():
    dev = device_info(0)
    out = []
    for rows in (512, 1024, 2048, 4096, 8192, 16384, 32768, 65536):
        for n in (256, 512, 768, 1024, 1536, 2048):
            x = torch.randn(rows, n, device="cuda") * 3 + 100
            w, b = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
            ref = torch.native_layer_norm(x, (n,), w, b, 1e-5)
            ps = layouts(rows, n)
            row = {"rows": rows, "n": n, "functions": {k: p.kernel.function for k, p in ps.items()}}
            for k, p in ps.items():
                got = plans.execute(p, x, w, b, 1e-5)
                row[f"{k}_identical"] = all(torch.equal(a.view(torch.int32), c.view(torch.int32).reshape(a.shape))
                                            for a, c in zip(got, ref))
            fns = {"native": lambda: torch.nn.functional.layer_norm(x, (n,), w, b, 1e-5),
                   **{k: (lambda p: lambda: plans.execute(p, x, w, b, 1e-5))(p) for k, p in ps.items()}}
            for name, proto in (("graph", dataclasses.replace(bench.PROTOCOL_A, rounds=30)),
                                ("eager", dataclasses.replace(bench.PROTOCOL_B, rounds=30))):
                rec = bench.time_methods(fns, proto, "native")
                row[name] = {m: s["median_ms"] * 1e3 for m, s in rec.stats.items()}
                row[name + "_iqr"] = {m: (s["q25_ms"] * 1e3, s["q75_ms"] * 1e3) for m, s in rec.stats.items()}
            print(rows, n, row["functions"], {k: row[k + "_identical"] for k in ps},
                  "graph us", {k: round(v, 1) for k, v in row["graph"].items()},
                  "eager us", {k: round(v, 1) for k, v in row["eager"].items()}, flush=True)
            out.append(row)
            del x, ref
    meta = {"gpu": torch.cuda.get_device_name(), "sm_count": dev.sm_count, "torch": torch.__version__,
            "commit": os.environ.get("LABKIT_GIT_COMMIT"), "protocols": {"graph": "A, 30 rounds x 5 replays",
                                                                        "eager": "B, 30 rounds, L2 flushed"}}
    Path(os.environ.get("OUT", "."), "layout.json").write_text(json.dumps({"meta": meta, "shapes": out}, indent=1))


if __name__ == "__main__":
    main()
