"""Dev probe: can L2 carry the rows' tails from the chain's statistics pass to its output pass? Variants of
kernels/chain_stats_tma.cu (chain_stats_tma_keep.cu: each block's last stages fetched with L2::evict_last, the
rest optionally evict_first) and of kernels/affine_columns.cu (affine_columns_keep.cu: x loaded evict_first,
y stored streaming, the lines read put back to evict_normal), inside the whole chain forward at the chain
schedule's shapes. Same arithmetic, so the same bits: int32 views of y, mean and rstd against
torch.native_layer_norm, 2 calls each. Time: graph replay (protocol A, 15 rounds of 5), each variant paired with
the served plan in its own timing, every line of x put back to evict_normal between timings. At L1/40 also
KernelBench's eager protocol (B) for the served plan and the best variants, and a residency check: after one
forward and a 256 MiB flush, a read of the rows' tails against a read of the same bytes at their heads (a
variant whose evict_last lines outlive the call would read its tails faster). Writes l2_keep.json into $OUT.
Run from the repository root: python3 data/dev/l2_keep/probe.py"""
import dataclasses
import itertools
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
from labkit.core.launch import Kernel, launch  # noqa: E402
from labkit.ops import chain  # noqa: E402
from labkit.ops.plans import execute  # noqa: E402
from labkit.studies import bench  # noqa: E402

FILES = ("chain_stats_tma_keep", "affine_columns_keep")
SHAPES = [(16, 64 * 256 * 256), (4, 1 << 22), (1, 1 << 24), (8, 1 << 21), (32, 1 << 20)]
KEEP_MIB = (0, 16, 32, 48)
OUTPUTS = ("affine_k_0_0_0", "affine_k_0_0_1", "affine_k_1_1_0", "affine_k_1_1_1", "affine_k_0_1_1")
STAGE_BYTES = 64 * 512  # kernels/chain_stats_tma.cu's default stage


def variants(served, rows, n):
    stages = n // 512 // 64
    for keep_mib, rest, out in itertools.product(KEEP_MIB, (0, 1), OUTPUTS):
        if keep_mib == 0 and rest == 1:
            continue
        keep = min(stages, round(keep_mib * 2**20 / (4 * rows * STAGE_BYTES)))
        stats = dataclasses.replace(served.stats, kernel="chain_stats_tma_keep",
                                    options=(f"-DKEEP_STAGES={keep}", f"-DREST_FIRST={rest}"))
        output = dataclasses.replace(served.output, kernel="affine_columns_keep", function=out)
        yield f"keep{keep_mib}_rest{rest}_{out[-5:]}", dataclasses.replace(served, stats=stats, output=output)


def normal(x):
    lines = x.numel() // 32
    launch("affine_columns_keep", "l2_normal", (-(-lines // 256),), (256,), (x, __import__("numpy").int64(lines)),
           x.device)
    torch.cuda.synchronize()


def residency(fn, x, flush, reps=10):
    """Median us of summing the rows' last eighth and first eighth, after one forward and a flush each time."""
    n = x.shape[1]
    out = {}
    for name, part in (("tail", x[:, n - n // 8:]), ("head", x[:, : n // 8])):
        ts = []
        for _ in range(reps):
            fn()
            flush.zero_()
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            part.sum()
            b.record()
            b.synchronize()
            ts.append(a.elapsed_time(b) * 1e3)
        out[name] = sorted(ts)[reps // 2]
        normal(x)
    return out


def main():
    dev = device_info(0)
    for f in FILES:
        shutil.copy(HERE / f"{f}.cu", ROOT / "kernels" / f"{f}.cu")
    out = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(), "shapes": []}
    t0 = time.perf_counter()
    proto = dataclasses.replace(bench.PROTOCOL_A, rounds=15)
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    try:
        for rows, n in SHAPES:
            g = torch.Generator(device="cuda").manual_seed(rows * 7 + n)
            x = torch.rand(rows, n, device="cuda", generator=g)
            w = torch.randn(n, device="cuda", generator=g)
            b = torch.randn(n, device="cuda", generator=g)
            ref = torch.native_layer_norm(x, (n,), w, b, 1e-5)
            served = chain.plan(rows, n, dev)
            fns = {"served": (lambda p: lambda: execute(p, x, w, b, 1e-5))(served)}
            row = {"rows": rows, "n": n, "identical": {}, "ms": {}, "served_ms": {}}
            for name, p in variants(served, rows, n):
                fn = (lambda p: lambda: execute(p, x, w, b, 1e-5))(p)
                row["identical"][name] = all(
                    all(torch.equal(a.reshape(-1).view(torch.int32), c.reshape(-1).view(torch.int32))
                        for a, c in zip(fn(), ref)) for _ in range(2))
                normal(x)
                rec = bench.time_methods({"served": fns["served"], name: fn}, proto)
                normal(x)
                row["ms"][name] = rec.stats[name]
                row["served_ms"][name] = rec.stats["served"]
                fns[name] = fn
            ratio = {k: row["ms"][k]["median_ms"] / row["served_ms"][k]["median_ms"] for k in row["ms"]}
            best = sorted(ratio, key=ratio.get)[:3]
            row["best"] = best
            print(rows, n, "served", round(row["served_ms"][best[0]]["median_ms"] * 1e3, 1),
                  "best", [(k, round(row["ms"][k]["median_ms"] * 1e3, 1)) for k in best],
                  "not identical:", [k for k, v in row["identical"].items() if not v], flush=True)
            if (rows, n) == SHAPES[0]:
                pick = ["served"] + best + [k for k in ("keep32_rest1_0_0_1", "keep32_rest0_0_0_0") if k not in best]
                row["residency_us"] = {k: residency(fns[k], x, flush) for k in pick}
                print("residency", row["residency_us"], flush=True)
                recb = bench.time_methods({k: fns[k] for k in pick}, bench.PROTOCOL_B)
                normal(x)
                row["b_ms"] = recb.stats
                print("B", {k: round(v["median_ms"] * 1e3, 1) for k, v in recb.stats.items()}, flush=True)
            out["shapes"].append(row)
            x = w = b = ref = fns = None
            torch.cuda.empty_cache()
    finally:
        for f in FILES:
            os.remove(ROOT / "kernels" / f"{f}.cu")
    out["seconds"] = time.perf_counter() - t0
    os.makedirs(os.environ.get("OUT", "."), exist_ok=True)
    json.dump(out, open(os.path.join(os.environ.get("OUT", "."), "l2_keep.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
