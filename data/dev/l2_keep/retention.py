"""Dev probe, after probe.py found nothing: does L2 hold the rows' tails when the statistics pass ends, and would
reading fewer bytes of x speed the output pass at all? At L1/40, under graph replay (protocol A, 15 rounds of 5),
us:
- the whole forward (served; the statistics with each block's last 16 stages fetched evict_last);
- the statistics pass followed by the output pass over only the last eighth of every row's columns (what the
  statistics read last), or over only the first eighth (what they read first): the difference is what L2 carries;
  the same with the evict_last statistics;
- those partial output passes alone (no statistics before them);
- HBM alone: a 256 MiB write (fill), a 256 MiB read (amax) and a 256 MiB copy (read + write), so the output pass's
  time can be split between its reads and its writes.
Writes retention.json into $OUT. Run from the repository root: python3 data/dev/l2_keep/retention.py"""
import dataclasses
import json
import os
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from labkit.core.device import device_info  # noqa: E402
from labkit.core.launch import launch  # noqa: E402
from labkit.ops import chain  # noqa: E402
from labkit.ops.plans import execute  # noqa: E402
from labkit.studies import bench  # noqa: E402

FILES = ("chain_stats_tma_keep", "affine_columns_keep")


def main():
    dev = device_info(0)
    for f in FILES:
        shutil.copy(HERE / f"{f}.cu", ROOT / "kernels" / f"{f}.cu")
    try:
        rows, n = 16, 64 * 256 * 256
        n4 = n // 4
        g = torch.Generator(device="cuda").manual_seed(5)
        x = torch.rand(rows, n, device="cuda", generator=g)
        w = torch.randn(n, device="cuda", generator=g)
        b = torch.randn(n, device="cuda", generator=g)
        y = torch.empty_like(x)
        served = chain.plan(rows, n, dev)
        mean, rstd = execute(served, x, w, b, 1e-5)[1:]
        blocks = n4 // 8 // 256  # an eighth of every row's float4 columns, 256 a block

        def plan(keep, output=None):
            p = dataclasses.replace(served, stats=dataclasses.replace(
                served.stats, kernel="chain_stats_tma_keep", options=(f"-DKEEP_STAGES={keep}", "-DREST_FIRST=0")))
            if output:
                p = dataclasses.replace(p, output=dataclasses.replace(
                    served.output, kernel="affine_columns_keep", function=output, grid=(blocks,)))
            return lambda: execute(p, x, w, b, 1e-5)

        def alone(fn):
            return lambda: launch("affine_columns_keep", fn, (blocks,), (256,),
                                  (x, mean, rstd, w, b, y, np.int32(rows), np.int32(n4)), x.device)

        buf = torch.empty(64 << 20, device="cuda")
        buf2 = torch.empty(64 << 20, device="cuda")
        methods = {
            "forward_served": lambda: execute(served, x, w, b, 1e-5), "forward_keep16": plan(16),
            "stats_then_tail": plan(0, "affine_tail"), "stats_then_head": plan(0, "affine_head"),
            "stats_keep16_then_tail": plan(16, "affine_tail"), "stats_keep16_then_head": plan(16, "affine_head"),
            "tail_alone": alone("affine_tail"), "head_alone": alone("affine_head"),
            "write_256MiB": lambda: buf.fill_(1.0), "read_256MiB": lambda: buf.amax(),
            "copy_256MiB": lambda: buf2.copy_(buf),
        }
        rec = bench.time_methods(methods, dataclasses.replace(bench.PROTOCOL_A, rounds=15))
        out = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(), "stats": rec.stats,
               "eighth_bytes": rows * n // 8 * 4}
        print({k: round(v["median_ms"] * 1e3, 1) for k, v in rec.stats.items()}, flush=True)
    finally:
        for f in FILES:
            os.remove(ROOT / "kernels" / f"{f}.cu")
    os.makedirs(os.environ.get("OUT", "."), exist_ok=True)
    json.dump(out, open(os.path.join(os.environ.get("OUT", "."), "retention.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
