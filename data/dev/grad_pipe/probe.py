"""Dev probe: the few-row row sums at S = 8 with the tile exchange pipelined one group ahead of the chain
(grad_chain_sums_pipe.cu here: pipe8_1 exchange then chain, pipe8_2 half chain / exchange / half chain; pipe8_0 is
the served kernel built from the same file) against the served grad_chain_sums_split8, S = 8 forced
(labkit.ops.backward.chain_split replaced) wherever 32 blocks per row fit one wave, inside the whole backward.
Bits: int32 views of dx, dweight, dbias against torch.ops.aten.native_layer_norm_backward, 2 calls each.
Time: the backward alone under graph replay (protocol A, 15 rounds), torch's aten backward beside it, and the chain
floor (N/128 elements per chain at 4 cycles each, at the SM clock labkit.studies.measure.chain_floor implies).
The variant is copied into kernels/ on the device machine for the run and removed after. Writes pipe.json into
$OUT. Run: python3 data/dev/grad_pipe/probe.py"""
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

# The floor's shapes, fewer long rows, ragged last stages, the step counts around the split rule's minimum.
SHAPES = [(1, 1 << 24), (2, 1 << 23), (4, 1 << 22), (1, 1 << 20), (1, 512 * 4133), (3, 512 * 1027), (2, 512 * 771)]
VARIANT = "grad_chain_sums_pipe"
CHAIN_SPLIT = grad.chain_split


def bits_equal(ours, ref):
    return all(torch.equal(a.reshape(-1).view(torch.int32), c.reshape(-1).view(torch.int32)) for a, c in zip(ours, ref))


def forced(rows, n, dev, split):
    grad.chain_split = lambda *args: split
    try:
        return grad.plan(rows, n, dev, "chain")
    finally:
        grad.chain_split = CHAIN_SPLIT


def main():
    dev = device_info(0)
    shutil.copy(HERE / f"{VARIANT}.cu", ROOT / "kernels" / f"{VARIANT}.cu")
    try:
        from labkit.studies.measure import chain_floor
        clock, clock_error = chain_floor(rounds=15)["sm_clock_ghz_implied"], None
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
            plans = {"auto": grad.plan(rows, n, dev, "chain")}
            p = forced(rows, n, dev, 8)
            plans["split8"] = p
            for k in (0, 1, 2):
                plans[f"pipe{k}"] = dataclasses.replace(
                    p, sums=Kernel(VARIANT, f"grad_chain_sums_pipe8_{k}", p.sums.grid, (96,), p.sums.shared_mem))
            row = {"rows": rows, "n": n, "auto": plans["auto"].sums.function, "identical": {}}
            for name, q in plans.items():
                run = (lambda q: lambda: grad.run(q, dy, x, (n,), mean, rstd, w, b, mask, 0))(q)
                row["identical"][name] = all(bits_equal(run(), ref) for _ in range(2))
                fns[name] = run
            m0 = [True, False, False]  # no affine: torch multiplies by ones, the plan passes ones
            ref0 = torch.ops.aten.native_layer_norm_backward(dy, x, [n], mean, rstd, None, None, m0)
            for name in [k for k in plans if k.startswith("pipe")]:
                row["identical"][f"{name}_no_affine"] = bits_equal(
                    grad.run(plans[name], dy, x, (n,), mean, rstd, None, None, m0, 0)[:1], ref0[:1])
            rec = bench.time_methods(fns, dataclasses.replace(bench.PROTOCOL_A, rounds=15), "native")
            row["graph_us"] = {k: st["median_ms"] * 1e3 for k, st in rec.stats.items()}
            row["graph_iqr_us"] = {k: (st["q25_ms"] * 1e3, st["q75_ms"] * 1e3) for k, st in rec.stats.items()}
            if clock:
                row["chain_floor_us"] = (n // 128) * 4 / (clock * 1e3)
            print(f"{rows}x{n} auto={row['auto']} " + " ".join(f"{k}={v:.1f}" for k, v in row["graph_us"].items())
                  + f" floor={row.get('chain_floor_us', 0):.1f} identical={row['identical']}", flush=True)
            out.append(row)
            del x, dy, ref
    finally:
        (ROOT / "kernels" / f"{VARIANT}.cu").unlink()
    meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "sm_clock_ghz": clock,
            "clock_error": clock_error, "commit": os.environ.get("LABKIT_GIT_COMMIT"),
            "seconds": time.perf_counter() - t_all}
    Path(os.environ.get("OUT", "."), "pipe.json").write_text(json.dumps({"meta": meta, "rows": out}, indent=1))


if __name__ == "__main__":
    main()
