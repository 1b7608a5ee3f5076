"""Dev probe: the chain schedule's row sums with a warp per sum, grad_chain_sums_split<S> (kernels/grad_chain_sums.cu:
32 / S chains per block, each instruction doing S steps' products), at every split S that fits one wave (forced by
replacing labkit.ops.backward.chain_split), against the single-warp entry point served before (grad_chain_sums_s2 of
grad_chain_sums_before.cu here, the file at b7c8183) and grad_chain_sums_s1, inside the whole backward (sums, then
grad_columns' dX + dgamma/dbeta).
Bits: int32 views of dx, dweight, dbias against torch.ops.aten.native_layer_norm_backward, 2 calls each, for each.
Time: the backward alone under graph replay (protocol A, 15 rounds), torch's aten backward beside it, and the chain
floor (N/128 elements per chain at 4 cycles each, at the SM clock labkit.studies.measure.chain_floor implies).
The old file is copied into kernels/ on the device machine for the run and removed after (kernels are compiled from
there only). Writes probe.json into $OUT. Run: python3 data/dev/grad_pairs/probe.py"""
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
from labkit.ops import backward as grad  # noqa: E402
from labkit.studies import bench  # noqa: E402

# Few long rows (the floor's shapes and L1/40), ragged last stages (N/512 not a multiple of 64), odd row counts.
SHAPES = [(1, 1 << 24), (2, 1 << 23), (4, 1 << 22), (8, 1 << 21), (16, 1 << 22), (16, 1 << 20), (16, 65536),
          (1, 512 * 37), (16, 512 * 37), (3, 512 * 17), (2, 512 * (64 * 6 * 2 + 3)), (5, 1 << 20), (7, 512 * 129),
          (12, 512 * 1001)]
BEFORE = "grad_chain_sums_before"
CHAIN_SPLIT = grad.chain_split


def bits_equal(ours, ref):
    return all(torch.equal(a.reshape(-1).view(torch.int32), c.reshape(-1).view(torch.int32)) for a, c in zip(ours, ref))


def main():
    dev = device_info(0)
    shutil.copy(HERE / f"{BEFORE}.cu", ROOT / "kernels" / f"{BEFORE}.cu")
    try:
        from labkit.studies.measure import chain_floor
        clock = chain_floor(rounds=15)["sm_clock_ghz_implied"]
        clock_error = None
    except Exception as exc:  # the floor is then left out
        clock, clock_error = None, f"{type(exc).__name__}: {exc}"
    out = []
    t_all = time.perf_counter()
    try:
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
            auto = grad.chain_split(rows, n, dev)
            p = grad.plan(rows, n, dev, "chain")
            s = p.sums
            plans = {}
            for split in grad.CHAIN_SPLITS:
                if split == 1 or 4 * split * rows <= dev.sm_count:
                    grad.chain_split = (lambda k: lambda *args: k)(split)
                    try:
                        plans[f"split{split}"] = grad.plan(rows, n, dev, "chain")
                    finally:
                        grad.chain_split = CHAIN_SPLIT
            if 8 * rows <= dev.sm_count:  # the served kernel before, at its 8 blocks per row
                q = plans["split2"]
                plans["before_s2"] = dataclasses.replace(
                    q, sums=Kernel(BEFORE, "grad_chain_sums_s2", q.sums.grid, (64,), q.sums.shared_mem))
            row = {"rows": rows, "n": n, "auto_split": auto, "function": s.function, "identical": {}}
            for name, q in plans.items():
                run = (lambda q: lambda: grad.run(q, dy, x, (n,), mean, rstd, w, b, mask, 0))(q)
                row["identical"][name] = all(bits_equal(run(), ref) for _ in range(2))
                fns[name] = run
            # no affine: torch multiplies by ones, our plan passes ones
            m0 = [True, False, False]
            ref0 = torch.ops.aten.native_layer_norm_backward(dy, x, [n], mean, rstd, None, None, m0)
            row["identical"]["auto_no_affine"] = bits_equal(
                grad.run(p, dy, x, (n,), mean, rstd, None, None, m0, 0)[:1], ref0[:1])
            rec = bench.time_methods(fns, dataclasses.replace(bench.PROTOCOL_A, rounds=15), "native")
            row["graph_us"] = {m: st["median_ms"] * 1e3 for m, st in rec.stats.items()}
            row["graph_iqr_us"] = {m: (st["q25_ms"] * 1e3, st["q75_ms"] * 1e3) for m, st in rec.stats.items()}
            if clock:
                row["chain_floor_us"] = (n // 128) * 4 / (clock * 1e3)
            print(f"{rows}x{n} {s.function} " + " ".join(f"{k}={v:.1f}" for k, v in row["graph_us"].items())
                  + f" floor={row.get('chain_floor_us', 0):.1f} identical={row['identical']}", flush=True)
            out.append(row)
            del x, dy, ref
    finally:
        (ROOT / "kernels" / f"{BEFORE}.cu").unlink()
    meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "sm_clock_ghz": clock,
            "clock_error": clock_error, "commit": os.environ.get("LABKIT_GIT_COMMIT"),
            "seconds": time.perf_counter() - t_all}
    Path(os.environ.get("OUT", "."), "probe.json").write_text(json.dumps({"meta": meta, "rows": out}, indent=1))


if __name__ == "__main__":
    main()
