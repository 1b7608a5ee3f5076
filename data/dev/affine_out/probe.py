"""Dev probe: variants of the chain schedule's output pass (affine_columns_v.cu here; kernels/affine_columns.cu is
not changed) inside the whole chain forward, at the chain schedule's shapes. Bits: int32 views of y, mean and rstd
against torch.native_layer_norm, 2 calls each. Time: the whole forward under graph replay (protocol A, 25 rounds
of 5), the served plan beside; the variant file is copied into kernels/ on the device machine for the run and
removed after. Also the copy ceiling in the same process. Writes affine.json into $OUT. Run from the repository
root: python3 data/dev/affine_out/probe.py"""
import dataclasses
import json
import os
import re
import shutil
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from labkit.core.device import device_info  # noqa: E402
from labkit.core.launch import Kernel  # noqa: E402
from labkit.ops import chain  # noqa: E402
from labkit.ops.plans import execute  # noqa: E402
from labkit.studies import bench  # noqa: E402
from labkit.studies.measure import copy_ceiling_a  # noqa: E402

VARIANT = "affine_columns_v"
SHAPES = [(16, 64 * 256 * 256), (4, 1 << 22), (1, 1 << 24), (8, 1 << 21), (32, 1 << 20), (16, 512 * 1031)]


def entries():
    return re.findall(r"^AFFINE_V\((\d+), (\d+), (\d), (\d), (\d)\)", (HERE / f"{VARIANT}.cu").read_text(), re.M)


def main():
    dev = device_info(0)
    shutil.copy(HERE / f"{VARIANT}.cu", ROOT / "kernels" / f"{VARIANT}.cu")
    out = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(), "shapes": []}
    t0 = time.perf_counter()
    try:
        out["ceiling"] = copy_ceiling_a(rounds=15)
        for rows, n in SHAPES:
            g = torch.Generator(device="cuda").manual_seed(rows * 7 + n)
            x = torch.rand(rows, n, device="cuda", generator=g)
            w = torch.randn(n, device="cuda", generator=g)
            b = torch.randn(n, device="cuda", generator=g)
            ref = torch.native_layer_norm(x, (n,), w, b, 1e-5)
            served = chain.plan(rows, n, dev)
            plans = {"served": served}
            for t, u, s, l, r in entries():
                name = f"affine_v_{t}_{u}_{s}_{l}_{r}"
                k = Kernel(VARIANT, name, (-(-(n // 4) // int(t)),), (int(t),))
                plans[name] = dataclasses.replace(served, output=k)
            row = {"rows": rows, "n": n, "identical": {}, "ms": {}}
            fns = {}
            for name, p in plans.items():
                fn = (lambda p: lambda: execute(p, x, w, b, 1e-5))(p)
                row["identical"][name] = all(
                    all(torch.equal(a.reshape(-1).view(torch.int32), c.reshape(-1).view(torch.int32))
                        for a, c in zip(fn(), ref)) for _ in range(2))
                fns[name] = fn
            rec = bench.time_methods(fns, dataclasses.replace(bench.PROTOCOL_A, rounds=25))
            row["ms"] = rec.stats
            out["shapes"].append(row)
            best = min(rec.stats, key=lambda k: rec.stats[k]["median_ms"])
            print(rows, n, "served", round(rec.stats["served"]["median_ms"] * 1e3, 1), "best", best,
                  round(rec.stats[best]["median_ms"] * 1e3, 1),
                  "not identical:", [k for k, v in row["identical"].items() if not v], flush=True)
            x = w = b = ref = None
            torch.cuda.empty_cache()
    finally:
        os.remove(ROOT / "kernels" / f"{VARIANT}.cu")
    out["seconds"] = time.perf_counter() - t0
    os.makedirs(os.environ.get("OUT", "."), exist_ok=True)
    json.dump(out, open(os.path.join(os.environ.get("OUT", "."), "affine.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
