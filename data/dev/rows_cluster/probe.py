"""Dev probe: rows_cluster.cu (a row across a cluster of 2 or 4 CTAs, read once) against the served rows_staged at rows
longer than one SM's ring, and at rows that fit it as a control. Bits: int32 views of y, mean, rstd against
torch.native_layer_norm, 2 calls per path. Time: graph replay (protocol A, 15 rounds of 5 replays), beside torch's
kernel and a copy of x; 66 clusters of 2, 30 of 4 (as many as are resident at once: waves.json). The variant
file is copied into kernels/ for the run and removed after. Run it under `timeout` (its barrier waits trap after
about 2^24 polls, but a first run is best bounded twice). Writes probe.json into $OUT.
Run: timeout 120 python3 data/dev/rows_cluster/probe.py"""
import dataclasses
import json
import os
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from labkit.core.device import device_info  # noqa: E402
from labkit.core.launch import Kernel  # noqa: E402
from labkit.ops import plans, rows_staged  # noqa: E402
from labkit.records.check import bit_identical  # noqa: E402
from labkit.studies import bench  # noqa: E402

FILE = "rows_cluster"
SHAPES = [(1024, 65536), (512, 65536), (256, 131072), (1024, 57344), (2048, 32768), (4096, 16384)]
CHUNK_BYTES, BLOCK, RESERVED = 16384, 128 + 512 + 32, 1024
STATS_RING, RELAY_RING = 4, 2
FIXED = 8 * (2 * STATS_RING + 2 * RELAY_RING) + 8 * STATS_RING + 8 * RELAY_RING * 128 + 96


def smem_bytes(n: int, slots: int) -> int:
    return slots * (CHUNK_BYTES + 16) + 16 * rows_staged.steps(n) + FIXED


def cluster_plan(served, rows: int, n: int, c: int, dev, clusters: int | None = None):
    """rows_cluster{c} with the deepest ring shared memory holds, or None where a CTA's part of a row does not fit.
    `clusters`: how many (default: as many as the SMs make); a GPC whose SM count is not a multiple of c cannot hold
    its last SMs' cluster, so the probe also times a few fewer, all resident at once (not queried)."""
    slots = (dev.smem_optin_bytes - RESERVED - 16 * rows_staged.steps(n) - FIXED) // (CHUNK_BYTES + 16)
    chunks = -(-(n // 4) // 1024)
    if -(-chunks // c) > slots - 1:
        return None
    grid = (min(rows, clusters or dev.sm_count // c) * c,)
    return dataclasses.replace(served, slots=slots, kernel=Kernel(FILE, f"rows_cluster{c}", grid, (BLOCK,),
                                                                  smem_bytes(n, slots)))


def main():
    shutil.copyfile(HERE / f"{FILE}.cu", ROOT / "kernels" / f"{FILE}.cu")
    try:
        run()
    finally:
        (ROOT / "kernels" / f"{FILE}.cu").unlink(missing_ok=True)


def run():
    dev, out = device_info(0), []
    for rows, n in SHAPES:
        torch.manual_seed(rows * 7 + n)
        x = torch.randn(rows, n, device="cuda") * 2 + 50
        w, b = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
        ref = torch.native_layer_norm(x, (n,), w, b, 1e-5)
        served = rows_staged.plan(rows, n, dev)
        ps = {"staged": served}
        # clusters of 4: 30 resident at once (waves.json), not the 33 the SMs make
        for name, (c, clusters) in {"cluster2": (2, None), "cluster4_g30": (4, 30)}.items():
            p = cluster_plan(served, rows, n, c, dev, clusters)
            if p is not None:
                ps[name] = p
        ident = {}
        for k, p in ps.items():
            ident[k] = all(bit_identical(a.view(r.shape), r) for _ in range(2)
                           for a, r in zip(plans.execute(p, x, w, b, 1e-5), ref))
            torch.cuda.synchronize()
            print(f"  {rows}x{n} {k} identical={ident[k]}", flush=True)
        y = torch.empty_like(x)
        fns = {"native": lambda: torch.nn.functional.layer_norm(x, (n,), w, b, 1e-5), "copy": lambda: y.copy_(x),
               **{k: (lambda p: lambda: plans.execute(p, x, w, b, 1e-5))(p) for k, p in ps.items()}}
        rec = bench.time_methods(fns, dataclasses.replace(bench.PROTOCOL_A, rounds=15), "native")
        row = {"rows": rows, "n": n, "identical": ident,
               "plans": {k: {"slots": p.slots, "grid": list(p.kernel.grid), "smem": p.kernel.shared_mem}
                         for k, p in ps.items()},
               "graph": {m: s["median_ms"] * 1e3 for m, s in rec.stats.items()},
               "graph_iqr": {m: (s["q25_ms"] * 1e3, s["q75_ms"] * 1e3) for m, s in rec.stats.items()}}
        print(f"{rows}x{n} bad={[k for k, v in ident.items() if not v]} "
              + " ".join(f"{k}={v:.1f}" for k, v in row["graph"].items()), flush=True)
        out.append(row)
        Path(os.environ.get("OUT", "."), "probe.json").write_text(json.dumps(
            {"meta": {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "sms": dev.sm_count,
                      "commit": os.environ.get("LABKIT_GIT_COMMIT")}, "rows": out}, indent=1))


if __name__ == "__main__":
    main()
