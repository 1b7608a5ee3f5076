"""Dev probe: where a rows_cluster row's time goes, and the output group's gamma/beta loads further ahead.
waves.json showed every cluster of 2 resident (66) and each CTA moving a chunk per 1.2 us even with 8 clusters on an
idle memory system, so the limit is a CTA's own pipeline. (1) Events of CTAs 0-7 over their first 32 rows from the
trace build (rows_cluster.cu TRACE_EVENT: the output group's warp 0 after each chunk and on the row's statistics,
the chain's last chunk arrived, its relay or statistics sent, the relay received, the producer's last copy issued),
at 1024 x 65536 with 66 and with 8 clusters of 2 and at 4096 x 16384 with 66. (2) Graph replay (protocol A, 15
rounds of 5) of ROWS_CLUSTER_OUT_AHEAD = 1, 2, 3 beside rows_staged and torch, bits (int32 views) of each first.
Run: timeout 250 python3 data/dev/rows_cluster/ahead.py (writes ahead.json into $OUT)."""
import dataclasses
import json
import os
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

import cupy as cp  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from labkit.core import launch  # noqa: E402
from labkit.core.device import device_info  # noqa: E402
from labkit.ops import plans, rows_staged  # noqa: E402
from labkit.records.check import bit_identical  # noqa: E402
from labkit.studies import bench  # noqa: E402

import probe  # noqa: E402

TRACE = ("-DROWS_CLUSTER_TRACE",)
EVENTS = 24
SHAPES = [(1024, 65536), (512, 65536), (1024, 57344), (2048, 32768), (4096, 16384)]


def with_options(p, options):
    return dataclasses.replace(p, kernel=dataclasses.replace(p.kernel, options=options))


def events(p, x, w, b):
    """[cta][k][event] in us from the earliest event, -1 where none was written."""
    q = with_options(p, TRACE)
    plans.execute(q, x, w, b, 1e-5)  # loads the module
    torch.cuda.synchronize()
    module, _ = launch.load(probe.FILE, 0, TRACE)
    size = 8 * 32 * EVENTS
    mem = cp.cuda.MemoryPointer(cp.cuda.UnownedMemory(module.get_global_var("rows_cluster_events"), 8 * size,
                                                      module), 0)
    arr = cp.ndarray((size,), dtype=np.uint64, memptr=mem)
    arr.fill(0)
    plans.execute(q, x, w, b, 1e-5)
    torch.cuda.synchronize()
    t = arr.get().astype(np.int64).reshape(8, 32, EVENTS)
    t0 = t[t > 0].min()
    return np.where(t > 0, (t - t0) / 1e3, -1.0).round(3).tolist()


def main():
    shutil.copyfile(HERE / f"{probe.FILE}.cu", ROOT / "kernels" / f"{probe.FILE}.cu")
    try:
        run()
    finally:
        (ROOT / "kernels" / f"{probe.FILE}.cu").unlink(missing_ok=True)


def run():
    dev, out = device_info(0), {"events": {}, "rows": []}
    meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "sms": dev.sm_count,
            "commit": os.environ.get("LABKIT_GIT_COMMIT")}
    for rows, n in SHAPES:
        torch.manual_seed(rows + n)
        x = torch.randn(rows, n, device="cuda") * 2 + 50
        w, b = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
        ref = torch.native_layer_norm(x, (n,), w, b, 1e-5)
        served = rows_staged.plan(rows, n, dev)
        if (rows, n) in ((1024, 65536), (4096, 16384)):
            for g in ((66, 8) if n == 65536 else (66,)):
                out["events"][f"{rows}x{n}_g{g}"] = events(probe.cluster_plan(served, rows, n, 2, dev, g), x, w, b)
        ps = {"staged": served}
        base = probe.cluster_plan(served, rows, n, 2, dev)
        for a in (1, 2, 3):
            ps[f"c2_ahead{a}"] = with_options(base, (f"-DROWS_CLUSTER_OUT_AHEAD={a}",))
        ident = {k: all(bit_identical(t.view(r.shape), r) for t, r in zip(plans.execute(p, x, w, b, 1e-5), ref))
                 for k, p in ps.items()}
        torch.cuda.synchronize()
        fns = {"native": lambda: torch.nn.functional.layer_norm(x, (n,), w, b, 1e-5),
               **{k: (lambda p: lambda: plans.execute(p, x, w, b, 1e-5))(p) for k, p in ps.items()}}
        rec = bench.time_methods(fns, dataclasses.replace(bench.PROTOCOL_A, rounds=15), "native")
        row = {"rows": rows, "n": n, "identical": ident,
               "graph": {m: s["median_ms"] * 1e3 for m, s in rec.stats.items()},
               "graph_iqr": {m: (s["q25_ms"] * 1e3, s["q75_ms"] * 1e3) for m, s in rec.stats.items()}}
        print(f"{rows}x{n} bad={[k for k, v in ident.items() if not v]} "
              + " ".join(f"{k}={v:.1f}" for k, v in row["graph"].items()), flush=True)
        out["rows"].append(row)
        Path(os.environ.get("OUT", "."), "ahead.json").write_text(json.dumps({"meta": meta, **out}))


if __name__ == "__main__":
    main()
