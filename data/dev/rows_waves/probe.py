"""Dev probe: is the warp layout's gap to Liger at rows of 1,024 floats a wave tail? Times, under graph replay
(protocol A, 25 rounds of 5 replays), torch's kernel, the served rows_fused (rows_fused_warp2, 8 blocks per SM: 4,224
rows per wave on 132 SMs) and rows_counted (7 blocks per SM: 3,696 rows per wave), Liger, and a plain copy of x
(y.copy_(x): the same bytes read and written, the copy floor), over a dense row sweep at N = 1024 and N = 768 with
each path's wave boundaries in it. A tail shows as steps in time per row at the boundaries; a per-row cost shows as a
constant gap to the copy. Each shape is timed twice: as replayed (what the previous replay left in the 60 MB L2
serves part of x wherever x and y together come near its size, 8192 x 1024 among them) and with 256 MiB written
before every single replay (nothing left), which separates an L2 effect from the kernel's own. Bits: int32 views of y, mean, rstd against torch.native_layer_norm, one call per path and
shape. Writes probe.json into $OUT. Run: python3 data/dev/rows_waves/probe.py"""
import dataclasses
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from labkit.core.device import device_info  # noqa: E402
from labkit.ops import plans, rows_counted, rows_fused  # noqa: E402
from labkit.studies import bench  # noqa: E402


def row_counts(sms: int) -> list[int]:
    waves = {sms * blocks * 4 * k + d for blocks in (7, 8) for k in (1, 2, 3) for d in (0, 1)}
    return sorted(set(range(2048, 16385, 1024)) | waves)


def main():
    from labkit.studies import methods as registry
    dev, out = device_info(0), []
    for n in (1024, 768):
        for rows in row_counts(dev.sm_count):
            torch.manual_seed(rows * 7 + n)
            x = torch.randn(rows, n, device="cuda") * 2 + 50
            w, b = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
            ref = torch.native_layer_norm(x, (n,), w, b, 1e-5)
            ps = {"rows_fused": rows_fused.plan(rows, n, dev), "rows_counted": rows_counted.plan(rows, n, dev)}
            ident = {k: all(torch.equal(a.reshape(-1).view(torch.int32), c.reshape(-1).view(torch.int32))
                            for a, c in zip(plans.execute(p, x, w, b, 1e-5), ref)) for k, p in ps.items()}
            y = torch.empty_like(x)
            fns = {"native": lambda: torch.nn.functional.layer_norm(x, (n,), w, b, 1e-5),
                   "copy": lambda: y.copy_(x),
                   **{k: (lambda p: lambda: plans.execute(p, x, w, b, 1e-5))(p) for k, p in ps.items()}}
            with torch.no_grad():
                built = registry.build(registry.get("liger"), x, w, b, 1e-5)
                if built["fn"] is not None:
                    fns["liger"] = built["fn"]
            rec = bench.time_methods(fns, dataclasses.replace(bench.PROTOCOL_A, rounds=25), "native")
            cold = bench.time_methods(fns, dataclasses.replace(bench.PROTOCOL_A, rounds=25, repeats=1,
                                                               flush_l2_bytes=256 << 20), "native")
            row = {"rows": rows, "n": n, "identical": ident,
                   "grid": {k: list(p.kernel.grid) for k, p in ps.items()},
                   "graph": {m: s["median_ms"] * 1e3 for m, s in rec.stats.items()},
                   "graph_iqr": {m: (s["q25_ms"] * 1e3, s["q75_ms"] * 1e3) for m, s in rec.stats.items()},
                   "graph_flushed": {m: s["median_ms"] * 1e3 for m, s in cold.stats.items()}}
            print(f"{rows}x{n} bad={[k for k, v in ident.items() if not v]} "
                  + " ".join(f"{k}={v:.2f}/{row['graph_flushed'][k]:.2f}" for k, v in row["graph"].items()), flush=True)
            out.append(row)
    meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "sms": dev.sm_count,
            "commit": os.environ.get("LABKIT_GIT_COMMIT")}
    Path(os.environ.get("OUT", "."), "probe.json").write_text(json.dumps({"meta": meta, "rows": out}, indent=1))


if __name__ == "__main__":
    main()
