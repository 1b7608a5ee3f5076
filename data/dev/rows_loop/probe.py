"""Dev probe: kernels/rows_fused.cu's persistent entry points rows_fused_loop{K}[a] (next row loaded into registers
while this one is reduced; `a`: gamma and beta kept in registers) against the block-per-row rows_fused_reg{K} the
dispatch serves today, at many-row shapes of N <= 4096, grid multipliers (blocks per SM) varied. Bits checked
(int32 views of y, mean, rstd against torch.native_layer_norm, 3 calls each) and timed under graph replay (protocol
A, 25 rounds of 5 replays). Writes probe.json into $OUT. Not a committed run."""
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

SHAPES = [(4096, 768), (8192, 1024), (16384, 1024), (2048, 768), (16384, 768), (32768, 1024), (1024, 1024),
          (8192, 2048), (32768, 2048), (8192, 1536), (4096, 4096), (8192, 4096), (16384, 4096), (8192, 3072),
          (4097, 1000), (65536, 768)]
MULTS = (4, 8, 16)


def loops(n):
    n4 = n // 4
    k = next(k for k in (2, 4, 8) if n4 <= 128 * k)
    names = [f"rows_fused_loop{k}"] + ([f"rows_fused_loop{k}a"] if k <= 4 else [])
    return names


def main():
    dev = device_info(0)
    sms = dev.sm_count
    out = []
    for rows, n in SHAPES:
        x = torch.randn(rows, n, device="cuda") * 2 + 50
        w, b = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
        ref = torch.native_layer_norm(x, (n,), w, b, 1e-5)
        base = rows_fused.plan(rows, n, dev)
        ps = {"base:" + base.kernel.function: base}
        for f in loops(n):
            for m in MULTS:
                g = min(rows, sms * m)
                ps[f"{f}x{m}"] = dataclasses.replace(base, kernel=Kernel("rows_fused", f, (g,), (32, 4)))
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
        best = min((k for k in row["graph"] if k.startswith("rows_fused_loop")), key=row["graph"].get)
        print(rows, n, [k for k, v in row["identical"].items() if not v] or "all identical", "graph us",
              {k: round(v, 2) for k, v in row["graph"].items()}, "best", best, flush=True)
        out.append(row)
    meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
            "commit": os.environ.get("LABKIT_GIT_COMMIT"), "mults": MULTS}
    Path(os.environ.get("OUT", "."), "probe.json").write_text(json.dumps({"meta": meta, "shapes": out}, indent=1))


if __name__ == "__main__":
    main()
