"""Dev probe: where the staged tiled column pass (kernels/grad_columns_tiled.cu, committed) should serve. Each shape's
backward in both schedules with the column layout as `column_layout` picks it ("auto") and forced to the tiled pass
("tiled"), torch's beside them. Bits: int32 views of dx, dweight, dbias against
torch.ops.aten.native_layer_norm_backward, 2 calls each. Time: the backward alone under graph replay (protocol A,
15 rounds). Writes boundary.json into $OUT. Run: python3 data/dev/grad_tiled/boundary.py"""
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from labkit.core.device import device_info  # noqa: E402
from labkit.ops import backward as grad  # noqa: E402
from labkit.studies import bench  # noqa: E402

# Around the rule's boundary (32 groups x N / 4 threads against 2 warps a SM: N = 1,056 on 132 SMs), chains a few
# rows long, and the partial form (rows > 65,536 and N / 32 < SMs / 2).
SHAPES = [(2048, 1024), (4096, 1536), (4096, 2048), (8192, 2048), (16384, 2048), (32768, 2048), (2048, 4096),
          (4096, 4096), (8192, 4096), (1024, 4096), (1024, 8192), (64, 4096), (200, 512), (300, 1024),
          (1000, 768), (70000, 256), (100000, 512), (131072, 1024), (1024, 768), (512, 1024)]


def bits_equal(ours, ref):
    return all(torch.equal(a.reshape(-1).view(torch.int32), c.reshape(-1).view(torch.int32)) for a, c in zip(ours, ref))


def main():
    dev = device_info(0)
    out = []
    t_all = time.perf_counter()
    for rows, n in SHAPES:
        g = torch.Generator(device="cuda").manual_seed(rows * 31 + n)
        x = torch.randn(rows, n, device="cuda", generator=g) * 3 + 1
        w = torch.randn(n, device="cuda", generator=g)
        b = torch.randn(n, device="cuda", generator=g)
        dy = torch.randn(rows, n, device="cuda", generator=g)
        _, mean, rstd = torch.native_layer_norm(x, (n,), w, b, 1e-5)
        mask = [True, True, True]
        ref = torch.ops.aten.native_layer_norm_backward(dy, x, [n], mean, rstd, w, b, mask)
        fns = {"native": lambda: torch.ops.aten.native_layer_norm_backward(dy, x, [n], mean, rstd, w, b, mask)}
        row = {"rows": rows, "n": n, "identical": {}, "layout": {}}
        for schedule in ("split", "rows"):
            for loads in ("auto", "tiled"):
                p = grad.plan(rows, n, dev, schedule, loads=loads)
                key = f"{schedule}/{loads}"
                row["layout"][key] = p.columns.function
                run = (lambda p: lambda: grad.run(p, dy, x, (n,), mean, rstd, w, b, mask, 0))(p)
                row["identical"][key] = all(bits_equal(run(), ref) for _ in range(2))
                fns[key] = run
        rec = bench.time_methods(fns, dataclasses.replace(bench.PROTOCOL_A, rounds=15), "native")
        row["graph_us"] = {k: st["median_ms"] * 1e3 for k, st in rec.stats.items()}
        row["graph_iqr_us"] = {k: (st["q25_ms"] * 1e3, st["q75_ms"] * 1e3) for k, st in rec.stats.items()}
        bad = [k for k, v in row["identical"].items() if not v]
        print(f"{rows}x{n} auto={row['layout']['split/auto']} "
              + " ".join(f"{k}={v:.1f}" for k, v in row["graph_us"].items()) + f" not_identical={bad}", flush=True)
        out.append(row)
        del x, dy, ref
    meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
            "commit": os.environ.get("LABKIT_GIT_COMMIT"), "seconds": time.perf_counter() - t_all}
    Path(os.environ.get("OUT", "."), "boundary.json").write_text(json.dumps({"meta": meta, "rows": out}, indent=1))


if __name__ == "__main__":
    main()
