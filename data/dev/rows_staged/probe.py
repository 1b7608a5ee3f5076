"""Dev probe: kernels/rows_staged.cu (rows staged in shared memory by bulk copies) beside rows_fused, the
reference-order path and torch's kernel, and the two peers at the ordinary shapes of issue 24. Bits of every
variant checked against torch.native_layer_norm (int32 views of y, mean, rstd) on shapes chosen to reach its
corners (ragged chains, a partial last chunk, rows longer than the ring, fewer rows than blocks, eps 0,
non-finite values); timings under graph replay (protocol A) and eager per call with the L2 flushed (protocol B;
from Python, so read it for the GPU only where the host is not the limit). Writes probe.json into $OUT (or the
current directory). Not a committed run: it informs where the dispatch table should look."""
import dataclasses
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import torch  # noqa: E402

from labkit.core.device import device_info  # noqa: E402
from labkit.ops import plans, reference_order, rows_fused, rows_staged  # noqa: E402
from labkit.studies import bench, methods  # noqa: E402


def identical(got, ref) -> bool:
    return all(torch.equal(a.reshape(-1).view(torch.int32), c.reshape(-1).view(torch.int32)) for a, c in zip(got, ref))


def variants(rows, n, dev):
    out = {"rows_fused": rows_fused.plan(rows, n, dev), "reference_order": reference_order.plan(rows, n, dev)}
    try:
        out["rows_staged"] = rows_staged.plan(rows, n, dev)
    except ValueError:
        pass
    return out


BIT_CASES = [  # (rows, n, distribution, eps)
    (3, 4, "normal", 1e-5), (5, 516, "normal", 1e-5), (300, 4100, "normal", 1e-5), (263, 16388, "shifted", 1e-5),
    (7, 65536, "normal", 0.0), (1, 262144, "shifted", 1e-5), (129, 131076, "normal", 0.1), (2048, 16384, "normal", 1e-5),
    (40, 32768, "nonfinite", 1e-5), (265, 8192, "constant", 1e-5), (1000, 1024, "normal", 1e-5),
]


def make(rows, n, dist, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(rows, n, device="cuda", generator=g)
    if dist == "shifted":
        x = x * 3 + 1000
    elif dist == "constant":
        x = torch.full_like(x, 1e4)
    elif dist == "nonfinite":
        x[::7, 5] = float("inf")
        x[3::11, 17] = float("nan")
    return x


TIMED = [(r, n) for n in (2048, 4096, 8192, 16384, 32768, 65536) for r in (512, 2048, 8192)
         if r * n <= 2 ** 27] + [(4096, 768), (8192, 1024), (16384, 4096), (32768, 2048), (4096, 8192),
                                  (1024, 65536), (256, 131072), (128, 262144)]
PEER_SHAPES = {(8192, 4096), (4096, 8192), (2048, 16384), (1024, 65536)}


def main():
    dev = device_info(0)
    bits = []
    for rows, n, dist, eps in BIT_CASES:
        x = make(rows, n, dist)
        w, b = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
        ref = torch.native_layer_norm(x, (n,), w, b, eps)
        row = {"rows": rows, "n": n, "dist": dist, "eps": eps}
        for k, p in variants(rows, n, dev).items():
            row[k] = identical(plans.execute(p, x, w, b, eps), ref)
        print("bits", row, flush=True)
        bits.append(row)
    timed = []
    for rows, n in TIMED:
        x = make(rows, n, "normal")
        w, b = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
        ref = torch.native_layer_norm(x, (n,), w, b, 1e-5)
        vs = variants(rows, n, dev)
        fns = {"native": lambda: torch.nn.functional.layer_norm(x, (n,), w, b, 1e-5),
               **{k: (lambda p: lambda: plans.execute(p, x, w, b, 1e-5))(p) for k, p in vs.items()}}
        row = {"rows": rows, "n": n, "identical": {k: identical(plans.execute(p, x, w, b, 1e-5), ref)
                                                    for k, p in vs.items()},
               "slots": {k: p.slots for k, p in vs.items() if hasattr(p, "slots")}}
        if (rows, n) in PEER_SHAPES:
            for name in ("inductor", "liger"):
                try:
                    fns[name] = methods.get(name).build(x, w, b, 1e-5)
                except Exception as exc:  # a peer that cannot take the shape is recorded, not fatal
                    row.setdefault("peer_errors", {})[name] = repr(exc)
        for name, proto in (("graph", dataclasses.replace(bench.PROTOCOL_A, rounds=25)),
                            ("eager", dataclasses.replace(bench.PROTOCOL_B, rounds=25))):
            rec = bench.time_methods(fns, proto, "native")
            row[name] = {m: s["median_ms"] * 1e3 for m, s in rec.stats.items()}
            row[name + "_iqr"] = {m: (s["q25_ms"] * 1e3, s["q75_ms"] * 1e3) for m, s in rec.stats.items()}
        print(rows, n, row["identical"], "graph us", {k: round(v, 1) for k, v in row["graph"].items()},
              "eager us", {k: round(v, 1) for k, v in row["eager"].items()}, flush=True)
        timed.append(row)
        del x, ref
    meta = {"gpu": torch.cuda.get_device_name(), "sm_count": dev.sm_count, "torch": torch.__version__,
            "commit": os.environ.get("LABKIT_GIT_COMMIT"),
            "protocols": {"graph": "A, 25 rounds x 5 replays", "eager": "B, 25 rounds, L2 flushed, Python launches"}}
    Path(os.environ.get("OUT", "."), "probe.json").write_text(json.dumps({"meta": meta, "bits": bits,
                                                                          "timed": timed}, indent=1))


if __name__ == "__main__":
    main()
