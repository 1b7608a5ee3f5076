"""Dev probe, the second: rows_fused_counted.cu's counted warp layout (kernels/rows_fused.cu's
welford_packed_rows4_counted: the count pass first, then mean and m2 merged with the counts it kept) at 7, 6 and 5
blocks per SM (`k7`, `k6`, `k5`) against the served rows_fused entry points and rows_coef's `c7`, with torch.compile
and Liger beside them at the peer shapes.
Bits: int32 views of y, mean, rstd against torch.native_layer_norm, 3 calls. Time: graph replay (protocol A,
25 rounds of 5 replays). The variant files are copied into kernels/ for the run
under their own names and removed after. Writes probe.json into $OUT. Run: python3 data/dev/rows_stream/probe.py"""
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

FILES = ("rows_fused_counted", "rows_fused_count_exact")
COUNTED = (7, 6, 5)  # MIN_BLOCKS of each counted entry point (two vectors per torch thread only)
SHAPES = [(4096, 768), (8192, 1024), (4096, 1024), (8192, 768), (16384, 1024), (32768, 1024), (32768, 768),
          (65536, 768), (4096, 256), (32768, 256), (65536, 256), (8192, 512), (32768, 512), (4096, 1000),
          (8192, 200), (1024, 768), (3, 768), (4097, 1000), (8193, 200), (65536, 1024)]
PEERS = {(4096, 768), (8192, 1024), (4096, 1024), (32768, 1024), (32768, 768), (65536, 256), (16384, 1024)}


def main():
    from labkit.studies import methods as registry
    for f in FILES:
        shutil.copyfile(HERE / f"{f}.cu", ROOT / "kernels" / f"{f}.cu")
    dev, out = device_info(0), []
    try:
        for rows, n in SHAPES:
            torch.manual_seed(rows * 7 + n)
            x = torch.randn(rows, n, device="cuda") * 2 + 50
            w, b = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
            ref = torch.native_layer_norm(x, (n,), w, b, 1e-5)
            base = rows_fused.plan(rows, n, dev)
            f = base.kernel.function
            ps = {"base": base}
            if rows_fused.is_warp(f):
                k = int(f[len("rows_fused_warp"):])
                if k == 2:
                    for mb in COUNTED:
                        ps[f"k{mb}"] = dataclasses.replace(
                            base, kernel=Kernel(FILES[0], f"rows_fused_warp2_counted{mb}", base.kernel.grid, (32, 4)))
                    ps["c7"] = dataclasses.replace(base, kernel=Kernel(FILES[1], f"{f}_c7", base.kernel.grid, (32, 4)))
            row = {"rows": rows, "n": n, "served": f, "identical": {}}
            for key, p in ps.items():
                row["identical"][key] = all(
                    torch.equal(a.reshape(-1).view(torch.int32), c.reshape(-1).view(torch.int32))
                    for _ in range(3) for a, c in zip(plans.execute(p, x, w, b, 1e-5), ref))
            fns = {"native": lambda: torch.nn.functional.layer_norm(x, (n,), w, b, 1e-5),
                   **{key: (lambda p: lambda: plans.execute(p, x, w, b, 1e-5))(p) for key, p in ps.items()}}
            if (rows, n) in PEERS:
                with torch.no_grad():
                    for name in ("inductor", "liger"):
                        built = registry.build(registry.get(name), x, w, b, 1e-5)
                        if built["fn"] is not None:
                            fns[name] = built["fn"]
            rec = bench.time_methods(fns, dataclasses.replace(bench.PROTOCOL_A, rounds=25), "native")
            row["graph"] = {m: s["median_ms"] * 1e3 for m, s in rec.stats.items()}
            row["graph_iqr"] = {m: (s["q25_ms"] * 1e3, s["q75_ms"] * 1e3) for m, s in rec.stats.items()}
            print(f"{rows}x{n} {f} bad={[k for k, v in row['identical'].items() if not v]} "
                  + " ".join(f"{k}={v:.2f}" for k, v in row["graph"].items()), flush=True)
            out.append(row)
    finally:
        for f in FILES:
            (ROOT / "kernels" / f"{f}.cu").unlink(missing_ok=True)
    meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
            "commit": os.environ.get("LABKIT_GIT_COMMIT")}
    Path(os.environ.get("OUT", "."), "probe_counted.json").write_text(json.dumps({"meta": meta, "rows": out}, indent=1))


if __name__ == "__main__":
    main()
