"""Dev probe: why rows_cluster runs slower than rows_staged (probe.json: 220 vs 205 us at 1024 x 65536, 225 vs 148 at
4096 x 16384, clusters of 4 far slower still) although every CTA moves fewer bytes. Are all clusters resident at
once? (1) cuOccupancyMaxActiveClusters for each launch; (2) a trace build (-DROWS_CLUSTER_TRACE: each CTA's SM and
global-timer start and end) of one launch per cluster count; (3) graph replay (protocol A, 15 rounds of 5) over the
number of clusters G. Bits: int32 views against torch.native_layer_norm for every launch timed.
Run: timeout 200 python3 data/dev/rows_cluster/waves.py (writes waves.json into $OUT)."""
import ctypes
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
SWEEP = {2: (8, 16, 32, 48, 56, 60, 62, 64, 66), 4: (4, 8, 16, 24, 28, 30, 32, 33)}


class LaunchConfig(ctypes.Structure):
    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("smem", ctypes.c_uint),
                ("stream", ctypes.c_void_p), ("attrs", ctypes.c_void_p), ("num_attrs", ctypes.c_uint)]


def max_active_clusters(fn, grid: int, block: int, smem: int) -> int:
    cuda = ctypes.CDLL("libcuda.so.1")
    out = ctypes.c_int(-1)
    cfg = LaunchConfig((grid, 1, 1), (block, 1, 1), smem, None, None, 0)
    rc = cuda.cuOccupancyMaxActiveClusters(ctypes.byref(out), ctypes.c_void_p(fn.ptr), ctypes.byref(cfg))
    return out.value if rc == 0 else -1000 - rc


def trace(p, x, w, b):
    """Per CTA (sm, start us, end us) of one launch of the trace build, times from the launch's first start."""
    q = dataclasses.replace(p, kernel=dataclasses.replace(p.kernel, options=TRACE))
    plans.execute(q, x, w, b, 1e-5)
    torch.cuda.synchronize()
    module, _ = launch.load(probe.FILE, 0, TRACE)
    n = q.kernel.grid[0]
    ptr = module.get_global_var("rows_cluster_trace")
    mem = cp.cuda.MemoryPointer(cp.cuda.UnownedMemory(ptr, 8 * 3 * 1024, module), 0)
    raw = cp.ndarray((3 * 1024,), dtype=np.uint64, memptr=mem).get()[: 3 * n]
    t = raw.reshape(n, 3).astype(np.int64)
    t0 = t[:, 1].min()
    return [[int(s), (a - t0) / 1e3, (e - t0) / 1e3] for s, a, e in t]


def main():
    shutil.copyfile(HERE / f"{probe.FILE}.cu", ROOT / "kernels" / f"{probe.FILE}.cu")
    try:
        run()
    finally:
        (ROOT / "kernels" / f"{probe.FILE}.cu").unlink(missing_ok=True)


def run():
    dev, out = device_info(0), []
    for rows, n in ((4096, 16384), (1024, 65536)):
        torch.manual_seed(rows + n)
        x = torch.randn(rows, n, device="cuda") * 2 + 50
        w, b = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
        ref = torch.native_layer_norm(x, (n,), w, b, 1e-5)
        served = rows_staged.plan(rows, n, dev)
        ps = {"staged": served}
        for c, gs in SWEEP.items():
            for g in gs:
                p = probe.cluster_plan(served, rows, n, c, dev, g)
                if p is not None:
                    ps[f"c{c}_g{g}"] = p
        row = {"rows": rows, "n": n, "occupancy": {}, "trace": {}, "identical": {}}
        for k, p in ps.items():
            got = plans.execute(p, x, w, b, 1e-5)
            row["identical"][k] = all(bit_identical(a.view(r.shape), r) for a, r in zip(got, ref))
            if k != "staged":
                fn = launch.function(probe.FILE, p.kernel.function, 0,
                                     (), p.kernel.shared_mem)
                row["occupancy"][k] = max_active_clusters(fn, p.kernel.grid[0], p.kernel.block[0],
                                                          p.kernel.shared_mem)
                row["trace"][k] = trace(p, x, w, b)
        torch.cuda.synchronize()
        fns = {"native": lambda: torch.nn.functional.layer_norm(x, (n,), w, b, 1e-5),
               **{k: (lambda p: lambda: plans.execute(p, x, w, b, 1e-5))(p) for k, p in ps.items()}}
        rec = bench.time_methods(fns, dataclasses.replace(bench.PROTOCOL_A, rounds=15), "native")
        row["graph"] = {m: s["median_ms"] * 1e3 for m, s in rec.stats.items()}
        row["graph_iqr"] = {m: (s["q25_ms"] * 1e3, s["q75_ms"] * 1e3) for m, s in rec.stats.items()}
        for k in ps:
            tr = row["trace"].get(k)
            span = f" trace end max {max(e for _, _, e in tr):.1f} start max {max(a for _, a, _ in tr):.1f}" if tr else ""
            print(f"{rows}x{n} {k} ident={row['identical'][k]} occ={row['occupancy'].get(k)} "
                  f"graph={row['graph'][k]:.1f}{span}", flush=True)
        out.append(row)
        Path(os.environ.get("OUT", "."), "waves.json").write_text(json.dumps(
            {"meta": {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "sms": dev.sm_count,
                      "commit": os.environ.get("LABKIT_GIT_COMMIT")}, "rows": out}))


if __name__ == "__main__":
    main()
