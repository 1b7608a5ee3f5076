"""Dev probe (second call: with rows_fused_block.cu's counted block layout, and Liger on the import path): is the warp layout's gap to Liger at rows of <= 1,024 floats (issue 24's one ordinary-shape miss,
8192 x 1024) in torch's arithmetic, which the contract fixes, or in the schedule? Times rows_fused_floor.cu's floors
(the served warp layout with no statistics, and with Liger's plain two-pass sums; Liger's block-per-row layout with
the same sums) beside the served entry points, torch's kernel, a copy of x, Liger and torch.compile. Bits: int32
views of y, mean, rstd against torch.native_layer_norm for the served entry points (3 calls each); the floors'
largest |y - torch's y| for the record. Time: graph replay (protocol A, 25 rounds of 5 replays). The floor file is
copied into kernels/ for the run and removed after. Writes probe.json into $OUT.
Run: python3 data/dev/rows_floor/probe.py"""
import dataclasses
import json
import os
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from labkit.core.device import device_info  # noqa: E402
from labkit.core.launch import Kernel  # noqa: E402
from labkit.ops import plans, rows_counted, rows_fused  # noqa: E402
from labkit.studies import bench  # noqa: E402

FILE = "rows_fused_floor"
BLOCK_FILE = "rows_fused_block"  # torch's arithmetic in torch's block layout, quotients counted, one barrier
BLOCKS = {"regc2": "rows_fused_regc2", "regc2_b10": "rows_fused_regc2_b10", "regc2_b16": "rows_fused_regc2_b16",
          "regc4": "rows_fused_regc4"}
SHAPES = [(8192, 1024), (4096, 768), (4096, 1024), (8192, 768), (16384, 1024), (32768, 1024), (8192, 2048),
          (32768, 2048), (8192, 512), (65536, 256), (4097, 1000), (3, 1024)]
FLOORS = {"floor_none": "rows_fused_warp_floor_none2", "floor_sums": "rows_fused_warp_floor_sums2",
          "floor_block_sums": "rows_fused_reg_floor_sums2"}


def main():
    from labkit.studies import methods as registry
    for f in (FILE, BLOCK_FILE):
        shutil.copyfile(HERE / f"{f}.cu", ROOT / "kernels" / f"{f}.cu")
    dev, out = device_info(0), []
    try:
        for rows, n in SHAPES:
            torch.manual_seed(rows * 7 + n)
            x = torch.randn(rows, n, device="cuda") * 2 + 50
            w, b = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
            ref = torch.native_layer_norm(x, (n,), w, b, 1e-5)
            served = rows_fused.plan(rows, n, dev)
            ps = {"served": served,
                  **({"rows_counted": rows_counted.plan(rows, n, dev)} if n <= rows_counted.MAX_N else {}),
                  "reg2" if n <= 1024 else "reg4": rows_fused.entry_plan(rows, n, "rows_fused_reg2" if n <= 1024
                                                                          else "rows_fused_reg4")}
            for name, fn in BLOCKS.items():
                if n <= 512 * int(fn.split("regc")[1][0]):
                    ps[name] = dataclasses.replace(served, kernel=Kernel(BLOCK_FILE, fn, (rows,), (32, 4)))
            ident = {k: all(torch.equal(a.reshape(-1).view(torch.int32), c.reshape(-1).view(torch.int32))
                            for _ in range(3) for a, c in zip(plans.execute(p, x, w, b, 1e-5), ref))
                     for k, p in ps.items()}
            for name, fn in FLOORS.items():
                grid = (-(-rows // 4),) if rows_fused.is_warp(fn) else (rows,)
                ps[name] = dataclasses.replace(served, kernel=Kernel(FILE, fn, grid, (32, 4)))
            err = {k: float((plans.execute(ps[k], x, w, b, 1e-5)[0] - ref[0]).abs().max()) for k in FLOORS}
            y = torch.empty_like(x)
            fns = {"native": lambda: torch.nn.functional.layer_norm(x, (n,), w, b, 1e-5), "copy": lambda: y.copy_(x),
                   **{k: (lambda p: lambda: plans.execute(p, x, w, b, 1e-5))(p) for k, p in ps.items()}}
            with torch.no_grad():
                for name in ("liger", "inductor"):
                    built = registry.build(registry.get(name), x, w, b, 1e-5)
                    if built["fn"] is not None:
                        fns[name] = built["fn"]
            rec = bench.time_methods(fns, dataclasses.replace(bench.PROTOCOL_A, rounds=25), "native")
            row = {"rows": rows, "n": n, "served": served.kernel.function, "identical": ident, "floor_max_abs_err": err,
                   "graph": {m: s["median_ms"] * 1e3 for m, s in rec.stats.items()},
                   "graph_iqr": {m: (s["q25_ms"] * 1e3, s["q75_ms"] * 1e3) for m, s in rec.stats.items()}}
            print(f"{rows}x{n} {served.kernel.function} bad={[k for k, v in ident.items() if not v]} err={err}\n  "
                  + " ".join(f"{k}={v:.2f}" for k, v in row["graph"].items()), flush=True)
            out.append(row)
    finally:
        for f in (FILE, BLOCK_FILE):
            (ROOT / "kernels" / f"{f}.cu").unlink(missing_ok=True)
    meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "sms": dev.sm_count,
            "commit": os.environ.get("LABKIT_GIT_COMMIT")}
    Path(os.environ.get("OUT", "."), "probe.json").write_text(json.dumps({"meta": meta, "rows": out}, indent=1))


if __name__ == "__main__":
    main()
