"""Dev probe: do blocks of one or two rows close the warp layout's gap to Liger at rows of up to 1,024 floats?
Times rows_fused_blocks.cu's entry points (rows_fused_warp2_counted, rows_fused_warp2 and rows_fused_warp1 in blocks
of `r1` one warp or `r2` two warps, a row each) against the served entry points, torch's kernel, a copy of x (the floor), Liger, and torch.compile at the peer shapes.
Bits: int32 views of y, mean, rstd against torch.native_layer_norm, 3 calls per entry point and shape. Time: graph
replay (protocol A, 25 rounds of 5 replays), and the same with 256 MiB written before every replay. The variant file
is copied into kernels/ for the run and removed after. Writes probe.json into $OUT.
Run: python3 data/dev/rows_blocks/probe.py"""
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

FILE = "rows_fused_blocks"
VARIANTS = {"counted": (1, 2), "warp2": (1, 2), "warp1": (1, 2)}  # rows (warps) per block
SHAPES = [(8192, 1024), (4096, 768), (4096, 1024), (16384, 1024), (32768, 1024), (2048, 1024), (8192, 768),
          (32768, 768), (65536, 768), (8192, 512), (65536, 512), (65536, 256), (131072, 128), (4097, 1000),
          (8193, 200), (1024, 768), (3, 768), (12288, 1024)]
PEERS = {(8192, 1024), (4096, 768), (4096, 1024), (16384, 1024)}


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
            served = rows_fused.plan(rows, n, dev)
            ps = {"served": served, "rows_counted": rows_counted.plan(rows, n, dev)}
            own = "warp1" if served.kernel.function == "rows_fused_warp1" else "warp2"
            for kind in ("counted", own):
                for r in VARIANTS[kind]:
                    ps[f"{kind}_r{r}"] = dataclasses.replace(
                        served, kernel=Kernel(FILE, f"rows_fused_warp_blocks_{kind}_r{r}", (-(-rows // r),), (32, r)))
            ident = {k: all(torch.equal(a.reshape(-1).view(torch.int32), c.reshape(-1).view(torch.int32))
                            for _ in range(3) for a, c in zip(plans.execute(p, x, w, b, 1e-5), ref))
                     for k, p in ps.items()}
            y = torch.empty_like(x)
            fns = {"native": lambda: torch.nn.functional.layer_norm(x, (n,), w, b, 1e-5), "copy": lambda: y.copy_(x),
                   **{k: (lambda p: lambda: plans.execute(p, x, w, b, 1e-5))(p) for k, p in ps.items()}}
            with torch.no_grad():
                for name in ("liger", "inductor") if (rows, n) in PEERS else ("liger",):
                    built = registry.build(registry.get(name), x, w, b, 1e-5)
                    if built["fn"] is not None:
                        fns[name] = built["fn"]
            rec = bench.time_methods(fns, dataclasses.replace(bench.PROTOCOL_A, rounds=25), "native")
            cold = bench.time_methods(fns, dataclasses.replace(bench.PROTOCOL_A, rounds=25, repeats=1,
                                                               flush_l2_bytes=256 << 20), "native")
            row = {"rows": rows, "n": n, "served": served.kernel.function, "identical": ident,
                   "graph": {m: s["median_ms"] * 1e3 for m, s in rec.stats.items()},
                   "graph_iqr": {m: (s["q25_ms"] * 1e3, s["q75_ms"] * 1e3) for m, s in rec.stats.items()},
                   "graph_flushed": {m: s["median_ms"] * 1e3 for m, s in cold.stats.items()}}
            print(f"{rows}x{n} {served.kernel.function} bad={[k for k, v in ident.items() if not v]}\n  "
                  + " ".join(f"{k}={v:.2f}/{row['graph_flushed'][k]:.2f}" for k, v in row["graph"].items()),
                  flush=True)
            out.append(row)
    finally:
        (ROOT / "kernels" / f"{FILE}.cu").unlink(missing_ok=True)
    meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "sms": dev.sm_count,
            "commit": os.environ.get("LABKIT_GIT_COMMIT")}
    Path(os.environ.get("OUT", "."), "probe.json").write_text(json.dumps({"meta": meta, "rows": out}, indent=1))


if __name__ == "__main__":
    main()
