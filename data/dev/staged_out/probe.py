"""Dev probe: rows_staged's output group at rows longer than the ring. data/dev/staged_slots/ found the ring's depth
moves 1024 x 65536 by at most 3% (195-207 us against the copy's 128), so the output group is the suspect: its 16
warps hold one chunk's global operands (gamma, beta, and x where re-read) in flight ahead of the chunk they write,
and each chunk waits about one L2 (or, for a re-read chunk, DRAM) round trip. This times the compile-time variants
of that group (kernels/rows_staged.cu STAGED_OUT_WARPS x STAGED_OUT_AHEAD: 16 x 1 served, 16 x 2, 8 x 1, 8 x 2)
at the served ring depth. Bits: int32 views of y, mean, rstd against torch.native_layer_norm, 2 calls per variant.
Time: graph replay (protocol A, 15 rounds of 5 replays), beside torch's kernel and a copy of x.
Writes probe.json into $OUT. Run: python3 data/dev/staged_out/probe.py"""
import dataclasses
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from labkit.core.device import device_info  # noqa: E402
from labkit.ops import plans, rows_staged  # noqa: E402
from labkit.studies import bench  # noqa: E402

SHAPES = [(1024, 65536), (512, 65536), (2048, 32768), (2048, 16384), (4096, 8192)]
VARIANTS = [(16, 2), (8, 1), (8, 2)]  # (output warps, chunks ahead); (16, 1) is the served build


def main():
    dev, out = device_info(0), []
    for rows, n in SHAPES:
        torch.manual_seed(rows * 7 + n)
        x = torch.randn(rows, n, device="cuda") * 2 + 50
        w, b = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
        ref = torch.native_layer_norm(x, (n,), w, b, 1e-5)
        served = rows_staged.plan(rows, n, dev)
        ps = {"w16a1": served}
        for warps, ahead in VARIANTS:
            ps[f"w{warps}a{ahead}"] = dataclasses.replace(served, kernel=dataclasses.replace(
                served.kernel, block=(rows_staged.THREADS + 32 * warps + 32,),
                options=(f"-DSTAGED_OUT_WARPS={warps}", f"-DSTAGED_OUT_AHEAD={ahead}")))
        ident = {k: all(torch.equal(a.reshape(-1).view(torch.int32), c.reshape(-1).view(torch.int32))
                        for _ in range(2) for a, c in zip(plans.execute(p, x, w, b, 1e-5), ref))
                 for k, p in ps.items()}
        y = torch.empty_like(x)
        fns = {"native": lambda: torch.nn.functional.layer_norm(x, (n,), w, b, 1e-5), "copy": lambda: y.copy_(x),
               **{k: (lambda p: lambda: plans.execute(p, x, w, b, 1e-5))(p) for k, p in ps.items()}}
        rec = bench.time_methods(fns, dataclasses.replace(bench.PROTOCOL_A, rounds=15), "native")
        row = {"rows": rows, "n": n, "slots": served.slots, "identical": ident,
               "graph": {m: s["median_ms"] * 1e3 for m, s in rec.stats.items()},
               "graph_iqr": {m: (s["q25_ms"] * 1e3, s["q75_ms"] * 1e3) for m, s in rec.stats.items()}}
        print(f"{rows}x{n} bad={[k for k, v in ident.items() if not v]} "
              + " ".join(f"{k}={v:.1f}" for k, v in row["graph"].items()), flush=True)
        out.append(row)
    meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "sms": dev.sm_count,
            "commit": os.environ.get("LABKIT_GIT_COMMIT")}
    Path(os.environ.get("OUT", "."), "probe.json").write_text(json.dumps({"meta": meta, "rows": out}, indent=1))


if __name__ == "__main__":
    main()
