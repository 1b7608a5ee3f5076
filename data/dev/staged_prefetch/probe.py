"""Dev probe: rows_staged with the early chunks of a row longer than the ring prefetched into L2 before the output
group re-reads them (rows_staged_prefetch.cu, STAGED_PREFETCH_LEAD chunks ahead: 2, 4, 8), against the served build.
Bits: int32 views of y, mean, rstd against torch.native_layer_norm, 2 calls per variant. Time: graph replay
(protocol A, 15 rounds of 5 replays), beside torch's kernel and a copy of x. The variant file is copied into kernels/
for the run and removed after. Writes probe.json into $OUT. Run: python3 data/dev/staged_prefetch/probe.py"""
import dataclasses
import shutil
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

SHAPES = [(1024, 65536), (512, 65536), (2048, 65536), (256, 131072), (1024, 57344), (2048, 32768), (4096, 8192)]
FILE = "rows_staged_prefetch"
LEADS = (2, 4, 8)  # chunks before the early ones that their prefetch is issued


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
        ps = {"served": served}
        for lead in LEADS:
            ps[f"lead{lead}"] = dataclasses.replace(served, kernel=dataclasses.replace(
                served.kernel, kernel=FILE, function="rows_staged", options=(f"-DSTAGED_PREFETCH_LEAD={lead}",)))
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
