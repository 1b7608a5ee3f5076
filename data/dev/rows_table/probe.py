"""Dev probe: do the warp and block layouts of torch's arithmetic gain when every merge's n-only operands (na, nb,
a.count) come from a per-module table (rows_fused_tabled.cu) instead of a division and two products in every warp?
Times the tabled entry points (`warpt`/`regt`: flag by an acquire load; `warpr`/`regr`: relaxed flag, table through
L2) beside the served entry point, rows_fused_warp<K>, rows_counted_block's rows_fused_reg2_counted, the rows_floor
probe's no-statistics floor, torch's kernel, a copy of x, Liger and torch.compile. Bits: int32 views of y, mean and
rstd against torch.native_layer_norm on the first call (the division path, which writes the table) and three
more (the table path). Time: graph replay (protocol A, 25 rounds of 5 replays). The .cu files are copied into
kernels/ for the run and removed after. Writes probe.json into $OUT.
Run: source scripts/gpu_env.sh; python3 data/dev/rows_table/probe.py"""
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
from labkit.ops import plans, rows_fused  # noqa: E402
from labkit.studies import bench  # noqa: E402

FILE = "rows_fused_tabled"
FLOOR = (HERE.parent / "rows_floor" / "rows_fused_floor.cu", "rows_fused_floor", "rows_fused_warp_floor_none2")
SHAPES = [(4096, 768), (8192, 1024), (8192, 768), (4096, 1024), (16384, 1024), (32768, 1024), (4096, 512),
          (65536, 256), (4097, 1000), (3, 1024)]


def _same(a, c):
    return torch.equal(a.reshape(-1).view(torch.int32), c.reshape(-1).view(torch.int32))


def main():
    from labkit.studies import methods as registry
    shutil.copyfile(HERE / f"{FILE}.cu", ROOT / "kernels" / f"{FILE}.cu")
    shutil.copyfile(FLOOR[0], ROOT / "kernels" / f"{FLOOR[1]}.cu")
    dev, out = device_info(0), []
    try:
        for rows, n in SHAPES:
            torch.manual_seed(rows * 7 + n)
            x = torch.randn(rows, n, device="cuda") * 2 + 50
            w, b = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
            ref = torch.native_layer_norm(x, (n,), w, b, 1e-5)
            k = 1 if n // 4 <= 128 else 2
            served = rows_fused.plan(rows, n, dev)
            warp_grid, block_grid = (-(-rows // 4),), (rows,)
            ps = {"served": served,
                  f"warp{k}": rows_fused.entry_plan(rows, n, f"rows_fused_warp{k}"),
                  "regc2": rows_fused.entry_plan(rows, n, "rows_fused_reg2_counted")}
            new = {f"warpt{k}": (f"rows_fused_warpt{k}", warp_grid), f"warpr{k}": (f"rows_fused_warpr{k}", warp_grid),
                   "regt2": ("rows_fused_regt2", block_grid), "regr2": ("rows_fused_regr2", block_grid),
                   "regr2_b16": ("rows_fused_regr2_b16", block_grid)}
            for name, (fn, grid) in new.items():
                ps[name] = dataclasses.replace(served, kernel=Kernel(FILE, fn, grid, (32, 4)))
            ident = {name: [all(_same(a, c) for a, c in zip(plans.execute(p, x, w, b, 1e-5), ref)) for _ in range(4)]
                     for name, p in ps.items()}
            ps["floor_none"] = dataclasses.replace(served, kernel=Kernel(FLOOR[1], FLOOR[2], warp_grid, (32, 4)))
            y = torch.empty_like(x)
            fns = {"native": lambda: torch.nn.functional.layer_norm(x, (n,), w, b, 1e-5), "copy": lambda: y.copy_(x),
                   **{name: (lambda p: lambda: plans.execute(p, x, w, b, 1e-5))(p) for name, p in ps.items()}}
            with torch.no_grad():
                for name in ("liger", "inductor"):
                    built = registry.build(registry.get(name), x, w, b, 1e-5)
                    if built["fn"] is not None:
                        fns[name] = built["fn"]
            rec = bench.time_methods(fns, dataclasses.replace(bench.PROTOCOL_A, rounds=25), "native")
            row = {"rows": rows, "n": n, "served": served.kernel.function, "identical": ident,
                   "graph": {m: s["median_ms"] * 1e3 for m, s in rec.stats.items()},
                   "graph_iqr": {m: (s["q25_ms"] * 1e3, s["q75_ms"] * 1e3) for m, s in rec.stats.items()}}
            bad = [name for name, v in ident.items() if not all(v)]
            print(f"{rows}x{n} {served.kernel.function} bad={bad}\n  "
                  + " ".join(f"{m}={v:.2f}" for m, v in row["graph"].items()), flush=True)
            out.append(row)
    finally:
        (ROOT / "kernels" / f"{FILE}.cu").unlink(missing_ok=True)
        (ROOT / "kernels" / f"{FLOOR[1]}.cu").unlink(missing_ok=True)
    meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "sms": dev.sm_count,
            "commit": os.environ.get("LABKIT_GIT_COMMIT")}
    Path(os.environ.get("OUT", "."), "probe.json").write_text(json.dumps({"meta": meta, "rows": out}, indent=1))


if __name__ == "__main__":
    main()
