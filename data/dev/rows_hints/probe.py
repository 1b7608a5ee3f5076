"""Dev probe: cache hints on the served warp layout's loads of x and stores of y (rows_fused_hints.cu), beside the
served entry point, Liger, torch.compile, torch's kernel and a copy of x. Bits: int32 views of y, mean and rstd
against torch.native_layer_norm, 3 calls each. Time: graph replay (protocol A, 50 rounds of 5 replays), each shape's
methods timed in one call. The .cu file is copied into kernels/ for the run and removed after. Writes probe.json
into $OUT. Run: source scripts/gpu_env.sh; python3 data/dev/rows_hints/probe.py"""
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

FILE = "rows_fused_hints"
MODES = ["l0s0", "l0s1", "l0s2", "l1s0", "l1s1", "l2s0", "l2s1", "l3s0"]
SHAPES = [(4096, 768), (8192, 1024), (8192, 768), (4096, 1024), (16384, 1024), (32768, 768), (4096, 512),
          (65536, 256), (4097, 1000)]


def _same(a, c):
    return torch.equal(a.reshape(-1).view(torch.int32), c.reshape(-1).view(torch.int32))


def main():
    from labkit.studies import methods as registry
    shutil.copyfile(HERE / f"{FILE}.cu", ROOT / "kernels" / f"{FILE}.cu")
    dev, out = device_info(0), []
    try:
        for rows, n in SHAPES:
            torch.manual_seed(rows * 7 + n)
            x = torch.randn(rows, n, device="cuda") * 2 + 50
            w, b = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
            ref = torch.native_layer_norm(x, (n,), w, b, 1e-5)
            k = 1 if n // 4 <= 128 else 2
            served = rows_fused.plan(rows, n, dev)
            ps = {"served": served}
            for m in MODES:
                ps[m] = dataclasses.replace(served, kernel=Kernel(FILE, f"rows_fused_warp{k}_{m}", (-(-rows // 4),),
                                                                  (32, 4)))
            ident = {name: all(_same(a, c) for _ in range(3) for a, c in zip(plans.execute(p, x, w, b, 1e-5), ref))
                     for name, p in ps.items()}
            y = torch.empty_like(x)
            fns = {"native": lambda: torch.nn.functional.layer_norm(x, (n,), w, b, 1e-5), "copy": lambda: y.copy_(x),
                   **{name: (lambda p: lambda: plans.execute(p, x, w, b, 1e-5))(p) for name, p in ps.items()}}
            with torch.no_grad():
                for name in ("liger", "inductor"):
                    built = registry.build(registry.get(name), x, w, b, 1e-5)
                    if built["fn"] is not None:
                        fns[name] = built["fn"]
            rec = bench.time_methods(fns, dataclasses.replace(bench.PROTOCOL_A, rounds=50), "native")
            row = {"rows": rows, "n": n, "served": served.kernel.function, "identical": ident,
                   "graph": {m: s["median_ms"] * 1e3 for m, s in rec.stats.items()},
                   "graph_iqr": {m: (s["q25_ms"] * 1e3, s["q75_ms"] * 1e3) for m, s in rec.stats.items()}}
            bad = [name for name, v in ident.items() if not v]
            print(f"{rows}x{n} {served.kernel.function} bad={bad}\n  "
                  + " ".join(f"{m}={v:.2f}" for m, v in row["graph"].items()), flush=True)
            out.append(row)
    finally:
        (ROOT / "kernels" / f"{FILE}.cu").unlink(missing_ok=True)
    meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "sms": dev.sm_count,
            "commit": os.environ.get("LABKIT_GIT_COMMIT")}
    Path(os.environ.get("OUT", "."), "probe.json").write_text(json.dumps({"meta": meta, "rows": out}, indent=1))


if __name__ == "__main__":
    main()
