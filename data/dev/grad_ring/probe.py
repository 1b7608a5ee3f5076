"""Dev probe: the column pass's entry points forced (labkit.ops.backward.LOADS; at 094baaa also grad_columns.cu's
ring, now grad_columns_ring.cu here) against the one the layout picks ("auto": grad_columns_prefetched or _streamed), in
every schedule that can take the shape ("rows": sums then dX + dgamma/dbeta; "split": fused dX then dgamma/dbeta
alone; "chain": chain sums then dX + dgamma/dbeta). PROBE_LOADS (comma-separated) picks the forced ones.
Bits: int32 views of dx, dweight, dbias against torch.ops.aten.native_layer_norm_backward, 2 calls each.
Time: the backward alone under graph replay (protocol A, 15 rounds), torch's aten backward beside it.
Writes probe.json into $OUT. Run: python3 data/dev/grad_ring/probe.py"""
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

# Ordinary shapes of issue 22, the training sweep's many-row shapes, and edges of the GammaBeta template: one group
# (M < 64), 8 and 16 groups, ragged N, the partial form (M > 64K, N / 32 < SMs / 2).
LOADS = os.environ.get("PROBE_LOADS", "tiled").split(",")
SHAPES = [(16, 65536), (32, 131072), (8, 1 << 20),
          (4096, 768), (8192, 1024), (16384, 1024), (8192, 4096), (16384, 4096), (32768, 2048), (4096, 4096),
          (65536, 256), (2048, 16384), (1024, 16384), (4096, 1000), (8192, 768), (32768, 768), (32768, 1024),
          (3, 768), (100, 768), (200, 512), (1000, 2048), (64, 4096), (70000, 256), (131072, 64), (4096, 8192)]


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
        row = {"rows": rows, "n": n, "identical": {}, "function": {}, "smem": {}}
        for sch in grad.plannable(rows, n, dev):
            if sch == "chain" and rows > 64:  # the chain schedule serves few rows (choose_schedule); slow here
                continue
            for loads in ("auto", *LOADS):
                try:
                    p = grad.plan(rows, n, dev, sch, loads)
                except ValueError as e:
                    row["identical"][f"{sch}/{loads}"] = f"refused: {e}"
                    continue
                key = f"{sch}/{loads}"
                row["function"][key] = p.columns.function
                row["smem"][key] = p.columns.shared_mem
                run = (lambda p: lambda: grad.run(p, dy, x, (n,), mean, rstd, w, b, mask, 0))(p)
                row["identical"][key] = all(bits_equal(run(), ref) for _ in range(2))
                fns[key] = run
        rec = bench.time_methods(fns, dataclasses.replace(bench.PROTOCOL_A, rounds=15), "native")
        row["graph_us"] = {m: s["median_ms"] * 1e3 for m, s in rec.stats.items()}
        row["graph_iqr_us"] = {m: (s["q25_ms"] * 1e3, s["q75_ms"] * 1e3) for m, s in rec.stats.items()}
        print(f"{rows}x{n} " + " ".join(f"{k}={v:.2f}" for k, v in row["graph_us"].items())
              + f" not_identical={[k for k, v in row['identical'].items() if v is not True]}", flush=True)
        out.append(row)
        del x, dy, ref
    meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
            "commit": os.environ.get("LABKIT_GIT_COMMIT"), "seconds": time.perf_counter() - t_all}
    Path(os.environ.get("OUT", "."), "probe.json").write_text(json.dumps({"meta": meta, "rows": out}, indent=1))


if __name__ == "__main__":
    main()
