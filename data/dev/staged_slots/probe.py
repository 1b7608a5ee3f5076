"""Dev probe: rows_staged's ring depth at rows longer than the ring. At 1024 x 65536 (256 KiB rows, a ring of 13
16-KiB slots on the H200) run dropin-050e54 has rows_staged at 200.8 us under graph replay, 1.19x torch's kernel,
where the copy of the same bytes takes about 125. A row longer than the ring keeps its last chunks in it and
re-reads the first ones, and the next row's first chunk can only load once the output group has freed a slot, so
the ring's depth sets both how much is re-read and how far the next row's loads run ahead. This sweeps the depth
(the plan's `slots`, every other argument as served) at rows longer than the ring and at rows that fit.
Bits: int32 views of y, mean, rstd against torch.native_layer_norm, 2 calls per depth. Time: graph replay
(protocol A, 15 rounds of 5 replays), beside torch's kernel and a copy of x. Writes probe.json into $OUT.
Run: python3 data/dev/staged_slots/probe.py"""
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

SHAPES = [(1024, 65536), (512, 65536), (2048, 32768), (256, 131072), (2048, 16384), (4096, 8192)]
DEPTHS = (2, 3, 4, 6, 8, 10, 12)


def main():
    dev, out = device_info(0), []
    for rows, n in SHAPES:
        torch.manual_seed(rows * 7 + n)
        x = torch.randn(rows, n, device="cuda") * 2 + 50
        w, b = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
        ref = torch.native_layer_norm(x, (n,), w, b, 1e-5)
        served = rows_staged.plan(rows, n, dev)
        ps = {f"s{served.slots}": served}
        for d in DEPTHS:
            if d < served.slots:
                ps[f"s{d}"] = dataclasses.replace(served, slots=d, kernel=dataclasses.replace(
                    served.kernel, shared_mem=rows_staged.smem_bytes(n, d)))
        ident = {k: all(torch.equal(a.reshape(-1).view(torch.int32), c.reshape(-1).view(torch.int32))
                        for _ in range(2) for a, c in zip(plans.execute(p, x, w, b, 1e-5), ref))
                 for k, p in ps.items()}
        y = torch.empty_like(x)
        fns = {"native": lambda: torch.nn.functional.layer_norm(x, (n,), w, b, 1e-5), "copy": lambda: y.copy_(x),
               **{k: (lambda p: lambda: plans.execute(p, x, w, b, 1e-5))(p) for k, p in ps.items()}}
        rec = bench.time_methods(fns, dataclasses.replace(bench.PROTOCOL_A, rounds=15), "native")
        row = {"rows": rows, "n": n, "served_slots": served.slots, "identical": ident,
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
