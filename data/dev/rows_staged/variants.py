"""Dev probe: kernels/rows_staged.cu's output group, width (STAGED_OUT_WARPS) and prefetch depth (STAGED_OUT_AHEAD)
as -D variants, bits checked (int32 views against torch.native_layer_norm) and timed under graph replay (protocol A,
25 rounds of 5 replays) beside rows_fused, reference_order and torch's kernel. Writes variants.json into $OUT.
Not a committed run: it picks the kernel's defaults."""
import dataclasses
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import torch  # noqa: E402

from labkit.core.device import device_info  # noqa: E402
from labkit.ops import plans, reference_order, rows_fused, rows_staged  # noqa: E402
from labkit.studies import bench  # noqa: E402

VARIANTS = {"w8a1": (8, 1), "w16a1": (16, 1), "w16a2": (16, 2), "w8a2": (8, 2)}
SHAPES = [(2048, 16384), (4096, 8192), (1024, 65536), (512, 32768), (8192, 4096), (256, 131072), (16384, 4096),
          (2048, 32768)]


def variant(rows, n, dev, warps, ahead):
    p = rows_staged.plan(rows, n, dev)
    k = dataclasses.replace(p.kernel, block=(128 + 32 * warps + 32,),
                            options=(f"-DSTAGED_OUT_WARPS={warps}", f"-DSTAGED_OUT_AHEAD={ahead}"))
    return dataclasses.replace(p, kernel=k)


def main():
    dev = device_info(0)
    out = []
    for rows, n in SHAPES:
        x = torch.randn(rows, n, device="cuda") * 2 + 50
        w, b = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
        ref = torch.native_layer_norm(x, (n,), w, b, 1e-5)
        ps = {"rows_fused": rows_fused.plan(rows, n, dev), "reference_order": reference_order.plan(rows, n, dev),
              **{k: variant(rows, n, dev, *v) for k, v in VARIANTS.items()}}
        row = {"rows": rows, "n": n, "identical": {}}
        for k, p in ps.items():
            ok = True
            for _ in range(5):
                got = plans.execute(p, x, w, b, 1e-5)
                ok &= all(torch.equal(a.reshape(-1).view(torch.int32), c.reshape(-1).view(torch.int32))
                          for a, c in zip(got, ref))
            row["identical"][k] = ok
        fns = {"native": lambda: torch.nn.functional.layer_norm(x, (n,), w, b, 1e-5),
               **{k: (lambda p: lambda: plans.execute(p, x, w, b, 1e-5))(p) for k, p in ps.items()}}
        rec = bench.time_methods(fns, dataclasses.replace(bench.PROTOCOL_A, rounds=25), "native")
        row["graph"] = {m: s["median_ms"] * 1e3 for m, s in rec.stats.items()}
        row["graph_iqr"] = {m: (s["q25_ms"] * 1e3, s["q75_ms"] * 1e3) for m, s in rec.stats.items()}
        print(rows, n, [k for k, v in row["identical"].items() if not v] or "all identical", "graph us",
              {k: round(v, 1) for k, v in row["graph"].items()}, flush=True)
        out.append(row)
    meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "commit": os.environ.get("LABKIT_GIT_COMMIT"),
            "variants": VARIANTS}
    Path(os.environ.get("OUT", "."), "variants.json").write_text(json.dumps({"meta": meta, "shapes": out}, indent=1))


if __name__ == "__main__":
    main()
