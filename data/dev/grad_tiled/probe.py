"""Dev probe: the backward's tiled column pass (kernels/grad_columns_tiled.cu) with its items run persistently and
the fold fused (grad_columns_tiled_v.cu here), against the committed pass and its grad_columns_fold launch.
Variants, each inside the whole backward of the "split" and "rows" schedules:
  base        the committed plan (grad_columns_tiled, one item a block, then grad_columns_fold)
  base_fold32 the same with grad_columns_fold in blocks of 32 threads (N / 32 blocks in place of N / 256)
  item        grad_columns_tiled_v.cu, one item a block, then grad_columns_fold
  item_ff     one item a block, fold fused (a memset of the arrival counters before it)
  persist     3 blocks a SM looping over the items, then grad_columns_fold
  stagedS     grad_columns_staged.cu at S ring stages (cp.async), one item a block; _persist: persistent;
              _fold32: with the fold in blocks of 32 threads
First run (commit 805c352: base, item, item_ff, persist, persist_ff): tiled.json of that call; item and persist
2-4% faster than base, the fused fold 1-3% slower than its kernel.
Bits: int32 views of dx, dweight, dbias against torch.ops.aten.native_layer_norm_backward for four masks/affine
cases, 2 calls each. Time: the backward alone under graph replay (protocol A, 15 rounds), torch's beside it.
The variant is copied into kernels/ on the device machine for the run and removed after. Writes tiled.json into
$OUT. Run: python3 data/dev/grad_tiled/probe.py"""
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
from labkit.core.program import I32, U64, BoundProgram, Launch, Memset, Program, Ptr  # noqa: E402
from labkit.ops import backward as grad  # noqa: E402
from labkit.ops.plans import Scratch  # noqa: E402
from labkit.studies import bench  # noqa: E402

# Shapes the tiled pass serves (N <= 1052 with 32 groups, at least 64 rows a chain), ragged ones among them.
SHAPES = [(4096, 768), (8192, 1024), (16384, 1024), (8192, 768), (32768, 768), (32768, 1024), (65536, 256),
          (4096, 1000), (2048, 256), (5000, 768), (12345, 512), (3000, 300), (8192, 512), (16384, 256)]
TILED_V, STAGED = "grad_columns_tiled_v", "grad_columns_staged"
STAGE_BYTES = 2 * 64 * 32 * 4 + 4 * 64 * 4  # grad_columns_staged.cu's Tile
MASKS = {"all": ([True, True, True], True), "no_dgamma": ([True, False, True], True),
         "no_dbeta": ([True, True, False], True), "no_affine": ([True, False, False], False)}


def bits_equal(ours, ref):
    return all((a is None and c is None) or torch.equal(a.reshape(-1).view(torch.int32), c.reshape(-1).view(torch.int32))
               for a, c in zip(ours, ref))


def variant(p, dev, kernel, function, blocks_per_sm=None, fused=False, smem=0, fold_threads=None):
    """(plan with room for the counters, BoundProgram) of plan p with its column pass replaced by `function` of
    `kernel` (variant arguments: groups, and for grad_columns_tiled_v dgamma, dbeta, arrivals), one item a block or
    `blocks_per_sm` persistent blocks a SM; `fused` (tiled_v): the fold in the pass; `fold_threads`: the fold
    kernel's block size."""
    steps = list(p.program(0).steps)
    at = next(i for i, s in enumerate(steps) if isinstance(s, Launch) and s.kernel.function == "grad_columns_tiled")
    old = steps[at]
    gx = -(-(p.n // 4) // 8)
    items = gx * p.template.groups
    grid = (min(items, blocks_per_sm * dev.sm_count) if blocks_per_sm else items,)
    counters_at = -(-p.scratch.nbytes // 16) * 16
    plan = dataclasses.replace(p, scratch=Scratch(counters_at + 4 * gx, p.scratch.zeroed_at, p.scratch.zeroed_bytes))
    args = old.args + (I32(p.template.groups),)
    if kernel == TILED_V:
        last = Ptr("scratch", counters_at) if fused else U64(0)  # arrivals: null leaves the fold to its kernel
        args += (Ptr("dgamma"), Ptr("dbeta"), last)
    new = Launch(Kernel(kernel, function, grid, (256,), smem), args, old.stage)
    if function == "grad_columns_tiled":  # the committed pass as it is
        new = old
    if fused:
        steps = [s for s in steps if not (isinstance(s, Launch) and s.kernel.function == "grad_columns_fold")]
        steps[at:at + 1] = [Memset("scratch", counters_at, 4 * gx, old.stage), new]
    else:
        steps[at] = new
    if fold_threads:
        steps = [dataclasses.replace(s, kernel=dataclasses.replace(s.kernel, grid=(-(-p.n // fold_threads),),
                                                                   block=(fold_threads,)))
                 if isinstance(s, Launch) and s.kernel.function == "grad_columns_fold" else s for s in steps]
    prog = Program(p.program(0).slots, tuple(steps))
    return plan, BoundProgram(prog, 0)


def main():
    dev = device_info(0)
    for k in (TILED_V, STAGED):
        shutil.copy(HERE / f"{k}.cu", ROOT / "kernels" / f"{k}.cu")
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
            row = {"rows": rows, "n": n, "identical": {}, "graph_us": {}, "graph_iqr_us": {}}
            fns = {"native": lambda: torch.ops.aten.native_layer_norm_backward(dy, x, [n], mean, rstd, w, b,
                                                                               [True, True, True])}
            for schedule in ("split", "rows"):
                p = grad.plan(rows, n, dev, schedule, loads="tiled")
                runs = {"base": (p, None)}
                runs["base_fold32"] = variant(p, dev, "grad_columns_tiled", "grad_columns_tiled", fold_threads=32)
                runs["item"] = variant(p, dev, TILED_V, TILED_V)
                runs["persist"] = variant(p, dev, TILED_V, TILED_V, blocks_per_sm=3)
                runs["item_ff"] = variant(p, dev, TILED_V, TILED_V, fused=True)
                for st, per_sm in ((3, 4), (4, 3)):
                    f, smem = f"{STAGED}{st}", st * STAGE_BYTES
                    runs[f"staged{st}"] = variant(p, dev, STAGED, f, smem=smem)
                    runs[f"staged{st}_persist"] = variant(p, dev, STAGED, f, blocks_per_sm=per_sm, smem=smem)
                    runs[f"staged{st}_fold32"] = variant(p, dev, STAGED, f, smem=smem, fold_threads=32)
                for name, (q, launcher) in runs.items():
                    key = f"{schedule}/{name}"
                    ok = True
                    for mname, (mask, affine) in MASKS.items():
                        ww, bb = (w, b) if affine else (None, None)
                        ref = torch.ops.aten.native_layer_norm_backward(dy, x, [n], mean, rstd, ww, bb, mask)
                        for _ in range(2):
                            got = grad.run(q, dy, x, (n,), mean, rstd, ww, bb, mask, 0, launcher=launcher)
                            ok = ok and bits_equal(got, [r if m else None for r, m in zip(ref, mask)])
                    row["identical"][key] = ok
                    fns[key] = (lambda q, launcher: lambda: grad.run(q, dy, x, (n,), mean, rstd, w, b,
                                                                     [True, True, True], 0, launcher=launcher))(
                        q, launcher)
            rec = bench.time_methods(fns, dataclasses.replace(bench.PROTOCOL_A, rounds=15), "native")
            row["graph_us"] = {k: st["median_ms"] * 1e3 for k, st in rec.stats.items()}
            row["graph_iqr_us"] = {k: (st["q25_ms"] * 1e3, st["q75_ms"] * 1e3) for k, st in rec.stats.items()}
            bad = [k for k, v in row["identical"].items() if not v]
            print(f"{rows}x{n} " + " ".join(f"{k}={v:.1f}" for k, v in row["graph_us"].items())
                  + f" not_identical={bad}", flush=True)
            out.append(row)
            del x, dy
    finally:
        for k in (TILED_V, STAGED):
            (ROOT / "kernels" / f"{k}.cu").unlink()
    meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
            "commit": os.environ.get("LABKIT_GIT_COMMIT"), "seconds": time.perf_counter() - t_all}
    Path(os.environ.get("OUT", "."), "tiled.json").write_text(json.dumps({"meta": meta, "rows": out}, indent=1))


if __name__ == "__main__":
    main()
