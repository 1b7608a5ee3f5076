"""Dev probe: do the output group's and producer's polls slow the chain? trace4.json (after the parallel statistics
send) has the last CTA of a cluster of 4 pushing a chunk in about 0.5 us, some 30 cycles a push against the 8 of its
FADD+FFMA dependence, while 16 output warps poll their barriers on the same sub-partitions. ROWS_CLUSTER_BACKOFF=ns
sleeps between those polls. Bits (int32 views) of every variant, then graph replay (protocol A, 15 rounds of 5) beside
rows_staged and torch; the event trace (ahead.py's layout) of clusters of 4 at 1024 x 65536 with a 256-ns backoff.
Run: timeout 250 python3 data/dev/rows_cluster/backoff.py (writes backoff.json into $OUT)."""
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

SHAPES = [(1024, 65536), (512, 65536), (256, 131072), (2048, 32768), (4096, 16384)]
BACKOFFS = (0, 64, 256, 1024)
EVENTS = 24


def with_options(p, options):
    return dataclasses.replace(p, kernel=dataclasses.replace(p.kernel, options=tuple(options)))


def events(p, x, w, b, options):
    """[cta][k][event] in us from the earliest event, -1 where none was written (rows_cluster.cu TRACE_EVENT)."""
    options = ("-DROWS_CLUSTER_TRACE", *options)
    q = with_options(p, options)
    plans.execute(q, x, w, b, 1e-5)
    torch.cuda.synchronize()
    module, _ = launch.load(probe.FILE, 0, options)
    size = 8 * 32 * EVENTS
    mem = cp.cuda.MemoryPointer(cp.cuda.UnownedMemory(module.get_global_var("rows_cluster_events"), 8 * size,
                                                      module), 0)
    arr = cp.ndarray((size,), dtype=np.uint64, memptr=mem)
    arr.fill(0)
    plans.execute(q, x, w, b, 1e-5)
    torch.cuda.synchronize()
    t = arr.get().astype(np.int64).reshape(8, 32, EVENTS)
    return np.where(t > 0, (t - t[t > 0].min()) / 1e3, -1.0).round(3).tolist()


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
        ps = {"staged": served}
        for c, g in ((2, None), (4, 30)):
            base = probe.cluster_plan(served, rows, n, c, dev, g)
            if base is not None:
                for ns in BACKOFFS:
                    ps[f"c{c}_b{ns}"] = with_options(base, (f"-DROWS_CLUSTER_BACKOFF={ns}",))
        if (rows, n) == (1024, 65536):
            out["events"]["1024x65536_c4_g30_b256"] = events(probe.cluster_plan(served, rows, n, 4, dev, 30),
                                                             x, w, b, ("-DROWS_CLUSTER_BACKOFF=256",))
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
        Path(os.environ.get("OUT", "."), "backoff.json").write_text(json.dumps({"meta": meta, **out}))


if __name__ == "__main__":
    main()
