"""Dev probe (not a committed run), two parts.

1. kernels/rows_fused.cu's warp layout, variants of one arithmetic: `c` makes the merge tree's divisions in a count
   pass while x is in flight (welford_merge_given then takes them), `p` prefetches gamma and beta to L1 before the
   reduction, `n` loads x without L1 allocation; `7`/`8` are other launch bounds. Bits (int32 views of y, mean, rstd
   against torch.native_layer_norm, 3 calls) and graph replay (protocol A, 25 rounds of 5 replays) against the
   served entry point, with torch.compile and Liger at the ordinary shapes.
2. L1/40 forward + backward under protocol B, profiled: where the GPU waits between the start event and the last
   kernel (host gaps), for the drop-in and torch.compile.
Writes probe.json into $OUT."""
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import torch  # noqa: E402

from labkit.core.launch import Kernel  # noqa: E402
from labkit.core.device import device_info  # noqa: E402
from labkit.ops import plans, rows_fused  # noqa: E402
from labkit.studies import bench  # noqa: E402

VARIANTS = {1: ("c", "p", "cp", "cpn", "b8", "c8", "cp8"), 2: ("c", "p", "cp", "cpn", "c7", "b7", "cp7")}
SHAPES = [(r, n) for n in (256, 512, 768, 1024, 1000, 200) for r in (4096, 8192, 32768)] + [
    (4096, 768), (8192, 1024), (65536, 256), (16384, 1024), (3, 768), (1024, 768), (65536, 768)]
PEER_SHAPES = {(4096, 768), (8192, 1024), (32768, 1024), (4096, 1024), (65536, 256), (32768, 768)}


def candidates(rows, n, dev):
    base = rows_fused.plan(rows, n, dev)
    out = {"base": base}
    f = base.kernel.function
    if rows_fused.is_warp(f):
        k = int(f[len("rows_fused_warp"):])
        for v in VARIANTS[k]:
            out[v] = dataclasses.replace(base, kernel=Kernel("rows_fused", f"{f}_{v}", base.kernel.grid, (32, 4)))
    return out


def part1(log):
    from labkit.studies import methods as registry
    dev = device_info(0)
    out = []
    for rows, n in dict.fromkeys(SHAPES):
        x = torch.randn(rows, n, device="cuda") * 2 + 50
        w, b = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
        ref = torch.native_layer_norm(x, (n,), w, b, 1e-5)
        ps = candidates(rows, n, dev)
        row = {"rows": rows, "n": n, "served": ps["base"].kernel.function, "identical": {}}
        for k, p in ps.items():
            ok = True
            for _ in range(3):
                got = plans.execute(p, x, w, b, 1e-5)
                ok &= all(torch.equal(a.reshape(-1).view(torch.int32), c.reshape(-1).view(torch.int32))
                          for a, c in zip(got, ref))
            row["identical"][k] = bool(ok)
        fns = {"native": lambda: torch.nn.functional.layer_norm(x, (n,), w, b, 1e-5),
               **{k: (lambda p: lambda: plans.execute(p, x, w, b, 1e-5))(p) for k, p in ps.items()}}
        if (rows, n) in PEER_SHAPES:
            with torch.no_grad():
                for name in ("inductor", "liger"):
                    built = registry.build(registry.get(name), x, w, b, 1e-5)
                    if built["fn"] is not None:
                        fns[name] = built["fn"]
        rec = bench.time_methods(fns, dataclasses.replace(bench.PROTOCOL_A, rounds=25), "native")
        row["graph"] = {m: s["median_ms"] * 1e3 for m, s in rec.stats.items()}
        row["graph_iqr"] = {m: (s["q25_ms"] * 1e3, s["q75_ms"] * 1e3) for m, s in rec.stats.items()}
        log(f"{rows}x{n} {row['served']} bad={[k for k, v in row['identical'].items() if not v]} "
            + " ".join(f"{k}={v:.2f}" for k, v in row["graph"].items()))
        out.append(row)
    return out


def part2(log):
    from torch.profiler import ProfilerActivity, profile

    from labkit.studies import training
    shape = (16, 64, 256, 256)
    x, w, b, dy = training._tensors(shape, 0, "cuda")
    ms = training.methods(x, w, b, dy, 1e-5, compiled=True)
    timer = bench.CudaEventTimer(256 << 20)
    res = {}
    for name in ("dropin", "native_compiled"):
        fn = ms[name]
        for _ in range(3):
            fn()
        times = [timer(fn, 1) for _ in range(10)]
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(3):
                timer(fn, 1)
        kern, api = [], []
        for e in prof.events():
            d = {"name": e.name[:80], "ts": e.time_range.start, "dur": e.time_range.end - e.time_range.start}
            if str(e.device_type).endswith("CUDA"):
                kern.append(d)
            elif e.name.startswith("cuda") or e.name.startswith("cu"):
                api.append(d)
        kern.sort(key=lambda d: d["ts"])
        api.sort(key=lambda d: d["ts"])
        res[name] = {"b_ms": times, "kernels": kern, "api": [a for a in api if a["dur"] > 5 or "Record" in a["name"]
                                                            or "Launch" in a["name"]][:400]}
        log(f"{name}: B median {sorted(times)[5]:.4f} ms; kernels {len(kern)}")
        for k in kern[:60]:
            log(f"  K {k['ts']:.1f} +{k['dur']:.1f} {k['name']}")
    return res


def main():
    lines = []

    def log(s):
        print(s, flush=True)
        lines.append(s)
    t0 = time.time()
    p1 = part1(log)
    log(f"part1 {time.time() - t0:.0f} s")
    Path(os.environ.get("OUT", "."), "probe_part1.json").write_text(json.dumps(p1, indent=1))
    p2 = part2(log)
    log(f"part2 {time.time() - t0:.0f} s")
    meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
            "commit": os.environ.get("LABKIT_GIT_COMMIT")}
    Path(os.environ.get("OUT", "."), "probe.json").write_text(json.dumps({"meta": meta, "rows": p1, "l1_40_b": p2},
                                                                         indent=1))


if __name__ == "__main__":
    main()
