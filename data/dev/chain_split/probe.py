"""Dev probe: chain_stats_split.cu here (the mean chain and the m2 chain on two warps) in place of the served
chain_stats_tma, inside the chain forward. Bits: int32 views of y, mean and rstd against torch.native_layer_norm,
2 calls each, uniform and normal inputs. Time under graph replay (protocol A, 25 rounds of 5): the statistics
launch alone (labkit.ops.plans.stats_only) and the whole forward, served beside. The variant file is copied into
kernels/ on the device machine for the run and removed after. Writes split.json into $OUT. Run from the
repository root: python3 data/dev/chain_split/probe.py"""
import dataclasses
import json
import os
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
from labkit.ops.plans import execute, stats_only  # noqa: E402
from labkit.studies import bench  # noqa: E402

VARIANT = "chain_stats_split"
SHAPES = [(16, 64 * 256 * 256), (4, 1 << 22), (1, 1 << 24), (8, 1 << 21), (16, 512 * 1031), (2, 512 * 37),
          (3, 512 * 64), (64, 1 << 18)]


VARIANTS = {"split4": (), "split4_delay": ("-DSPLIT_DELAY_STORE=1",)}  # first run (split_v1.json): split4, split3


def smem(stages: int) -> int:
    return stages * (64 * 512 + 64 * 16) + 2 * 64 * 512


def main():
    dev = device_info(0)
    shutil.copy(HERE / f"{VARIANT}.cu", ROOT / "kernels" / f"{VARIANT}.cu")
    out = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(), "shapes": []}
    t0 = time.perf_counter()
    try:
        for rows, n in SHAPES:
            served = chain.plan(rows, n, dev)
            plans = {"served": served}
            for name, opts in VARIANTS.items():
                k = Kernel(VARIANT, VARIANT, (4, rows), (96,), smem(4), opts)
                plans[name] = dataclasses.replace(served, stats=k)
            row = {"rows": rows, "n": n, "identical": {}, "whole": {}, "stats": {}}
            for dist in ("uniform", "normal"):
                g = torch.Generator(device="cuda").manual_seed(rows * 13 + n)
                x = torch.rand(rows, n, device="cuda", generator=g) if dist == "uniform" else \
                    torch.randn(rows, n, device="cuda", generator=g) * 3 + 1
                w = torch.randn(n, device="cuda", generator=g)
                b = torch.randn(n, device="cuda", generator=g)
                ref = torch.native_layer_norm(x, (n,), w, b, 1e-5)
                for name, p in plans.items():
                    ok = all(all(torch.equal(a.reshape(-1).view(torch.int32), c.reshape(-1).view(torch.int32))
                                 for a, c in zip(execute(p, x, w, b, 1e-5), ref)) for _ in range(2))
                    row["identical"][f"{name} {dist}"] = ok
            mean = torch.empty(rows, device="cuda")
            rstd = torch.empty(rows, device="cuda")
            whole = {k: (lambda p: lambda: execute(p, x, w, b, 1e-5))(p) for k, p in plans.items()}
            stats = {k: (lambda p: lambda: stats_only(p, x, mean, rstd, 1e-5))(p) for k, p in plans.items()}
            proto = dataclasses.replace(bench.PROTOCOL_A, rounds=25)
            row["whole"] = bench.time_methods(whole, proto).stats
            row["stats"] = bench.time_methods(stats, proto).stats
            out["shapes"].append(row)
            print(rows, n, "whole", {k: round(v["median_ms"] * 1e3, 1) for k, v in row["whole"].items()},
                  "stats", {k: round(v["median_ms"] * 1e3, 1) for k, v in row["stats"].items()},
                  "not identical:", [k for k, v in row["identical"].items() if not v], flush=True)
            x = w = b = ref = None
            torch.cuda.empty_cache()
    finally:
        os.remove(ROOT / "kernels" / f"{VARIANT}.cu")
    out["seconds"] = time.perf_counter() - t0
    os.makedirs(os.environ.get("OUT", "."), exist_ok=True)
    json.dump(out, open(os.path.join(os.environ.get("OUT", "."), "split.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
