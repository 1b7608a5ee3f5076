"""Dev probe: keeping part of x on chip between the chain schedule's passes, built (chain_stats_tma_hold.cu here;
kernels/ is not changed: the file is copied in for the run and removed after). At L1/40:
- "hold": the statistics (the served kernel, signalling rstd last) on 64 SMs and, on a side stream, chain_hold on
  the SMs they leave idle, holding HOLD_COLS * 512 float4 columns of all 16 rows each; then the served output pass
  over the other columns, joined with the holders;
- "hold, holders' columns skipped": the same statistics and output pass without the holders (their columns of y not
  written): what the schedule would take if holding cost nothing;
- "served": the served chain forward.
Bits: int32 views of y, mean and rstd against torch.native_layer_norm, 3 calls. Time: graph replay (protocol A, 25
rounds of 5). Writes hold.json into $OUT. Run from the repository root: python3 data/dev/hold/probe.py"""
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

import numpy as np  # noqa: E402
import torch  # noqa: E402

from labkit.core.device import device_info  # noqa: E402
from labkit.core.launch import function, launch  # noqa: E402
from labkit.ops import chain  # noqa: E402
from labkit.ops.plans import execute, output_only, stats_only  # noqa: E402
from labkit.studies import bench  # noqa: E402

FILE = "chain_stats_tma_hold"
T, COLS, ROWS, REG_ROWS = 512, 3, 16, 7


def main():
    dev = device_info(0)
    shutil.copy(HERE / f"{FILE}.cu", ROOT / "kernels" / f"{FILE}.cu")
    out = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(), "hold_cols": COLS * T,
           "reg_rows": REG_ROWS}
    t0 = time.perf_counter()
    try:
        rows, n = ROWS, 64 * 256 * 256
        n4 = n // 4
        g = torch.Generator(device="cuda").manual_seed(11)
        x = torch.randn(rows, n, device="cuda", generator=g) + 3
        w = torch.randn(n, device="cuda", generator=g)
        b = torch.randn(n, device="cuda", generator=g)
        ref = torch.native_layer_norm(x, (n,), w, b, 1e-5)
        served = chain.plan(rows, n, dev)
        holders = dev.sm_count - served.stats.grid[0] * served.stats.grid[1]
        held = holders * COLS * T  # float4 columns held, the first ones of every row
        out.update(holders=holders, held_bytes=rows * held * 16)
        stats_plan = dataclasses.replace(served, stats=dataclasses.replace(served.stats, kernel=FILE))
        rest_blocks = (n4 - held) // 256
        assert rest_blocks * 256 == n4 - held
        rest = dataclasses.replace(served, output=dataclasses.replace(served.output, grid=(rest_blocks,)))
        y = torch.empty_like(x)
        mean = torch.empty(rows, device="cuda")
        rstd = torch.empty(rows, device="cuda")
        off = 4 * held
        fx, fy, fw, fb = x.view(-1)[off:], y.view(-1)[off:], w[off:], b[off:]
        smem = (ROWS - REG_ROWS) * COLS * T * 16
        side = torch.cuda.Stream()

        def hold(with_holders=True):
            main_stream = torch.cuda.current_stream()
            rstd.view(torch.int32).fill_(-1)  # the bits 0xFFFFFFFF: statistics not out yet
            if with_holders:
                side.wait_stream(main_stream)
                with torch.cuda.stream(side):
                    launch(FILE, "chain_hold", (holders,), (T,), (x, mean, rstd, w, b, y, np.int32(n4)), x.device,
                           shared_mem=smem)
            stats_only(stats_plan, x, mean, rstd, 1e-5)
            output_only(rest, fx, mean, rstd, fw, fb, fy)
            if with_holders:
                main_stream.wait_stream(side)
            return y, mean, rstd

        # Everything loaded before the first holder runs: a module load while holders wait for statistics that are
        # not launched yet could wait on them. And no work on the legacy default stream, which waits for others.
        function(FILE, "chain_hold", 0, (), smem)
        hold(False)
        torch.cuda.synchronize()
        fns = {"served": lambda: execute(served, x, w, b, 1e-5), "hold": hold,
               "hold, holders' columns skipped": lambda: hold(False)}
        out["identical"] = {}
        for name in ("served", "hold"):
            ok = True
            for _ in range(3):
                y.fill_(float("nan"))
                got = fns[name]()
                torch.cuda.synchronize()
                ok &= all(torch.equal(a.reshape(-1).view(torch.int32), c.reshape(-1).view(torch.int32))
                          for a, c in zip(got, ref))
            out["identical"][name] = bool(ok)
        print("identical", out["identical"], flush=True)
        rec = bench.time_methods(fns, dataclasses.replace(bench.PROTOCOL_A, rounds=25))
        out["ms"] = rec.stats
        print({k: round(v["median_ms"] * 1e3, 1) for k, v in rec.stats.items()}, flush=True)
        y.fill_(float("nan"))
        hold()
        torch.cuda.synchronize()
        out["identical_after_replays"] = all(
            torch.equal(a.reshape(-1).view(torch.int32), c.reshape(-1).view(torch.int32))
            for a, c in zip((y, mean, rstd), ref))
    finally:
        os.remove(ROOT / "kernels" / f"{FILE}.cu")
    out["seconds"] = time.perf_counter() - t0
    os.makedirs(os.environ.get("OUT", "."), exist_ok=True)
    json.dump(out, open(os.path.join(os.environ.get("OUT", "."), "hold.json"), "w"), indent=1)
    print(json.dumps({k: v for k, v in out.items() if k != "ms"}), flush=True)


if __name__ == "__main__":
    with torch.cuda.stream(torch.cuda.Stream()):
        main()
