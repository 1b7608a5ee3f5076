"""Dev probe, written and not yet run: rows_fused_count_exact.cu's count-pass variants (`c`, and `c7` / `c8` at other
launch bounds), whose merge is written in torch's contraction (README: "Why `c` most likely lost the bits"), against
the served kernels at probe.py's shapes. Bits: int32 views of y, mean, rstd against torch.native_layer_norm, 3 calls.
Time: graph replay (protocol A, 25 rounds of 5 replays), with torch.compile and Liger at probe.py's peer shapes.
The variant file is copied into kernels/ for the run (under its own name, so the committed kernels and their cubins
are untouched) and removed after. Writes probe_exact.json into $OUT. Run: python3 data/dev/rows_coef/probe_exact.py"""
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

import torch  # noqa: E402

import probe  # noqa: E402  (its SHAPES and PEER_SHAPES)
from labkit.core.device import device_info  # noqa: E402
from labkit.core.launch import Kernel  # noqa: E402
from labkit.ops import plans, rows_fused  # noqa: E402
from labkit.studies import bench  # noqa: E402

KERNEL = "rows_fused_count_exact"
VARIANTS = {1: ("c", "c8"), 2: ("c", "c7")}


def main():
    from labkit.studies import methods as registry
    target = ROOT / "kernels" / f"{KERNEL}.cu"
    shutil.copyfile(HERE / f"{KERNEL}.cu", target)
    dev, out = device_info(0), []
    try:
        for rows, n in dict.fromkeys(probe.SHAPES):
            x = torch.randn(rows, n, device="cuda") * 2 + 50
            w, b = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
            ref = torch.native_layer_norm(x, (n,), w, b, 1e-5)
            base = rows_fused.plan(rows, n, dev)
            ps = {"base": base}
            f = base.kernel.function
            for v in VARIANTS[int(f[len("rows_fused_warp"):])] if rows_fused.is_warp(f) else ():
                ps[v] = dataclasses.replace(base, kernel=Kernel(KERNEL, f"{f}_{v}", base.kernel.grid, (32, 4)))
            row = {"rows": rows, "n": n, "served": f, "identical": {}}
            for k, p in ps.items():
                row["identical"][k] = all(
                    torch.equal(a.reshape(-1).view(torch.int32), c.reshape(-1).view(torch.int32))
                    for _ in range(3) for a, c in zip(plans.execute(p, x, w, b, 1e-5), ref))
            fns = {"native": lambda: torch.nn.functional.layer_norm(x, (n,), w, b, 1e-5),
                   **{k: (lambda p: lambda: plans.execute(p, x, w, b, 1e-5))(p) for k, p in ps.items()}}
            if (rows, n) in probe.PEER_SHAPES:
                with torch.no_grad():
                    for name in ("inductor", "liger"):
                        built = registry.build(registry.get(name), x, w, b, 1e-5)
                        if built["fn"] is not None:
                            fns[name] = built["fn"]
            rec = bench.time_methods(fns, dataclasses.replace(bench.PROTOCOL_A, rounds=25), "native")
            row["graph"] = {m: s["median_ms"] * 1e3 for m, s in rec.stats.items()}
            row["graph_iqr"] = {m: (s["q25_ms"] * 1e3, s["q75_ms"] * 1e3) for m, s in rec.stats.items()}
            print(f"{rows}x{n} {f} bad={[k for k, v in row['identical'].items() if not v]} "
                  + " ".join(f"{k}={v:.2f}" for k, v in row["graph"].items()), flush=True)
            out.append(row)
    finally:
        target.unlink(missing_ok=True)
    meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
            "commit": os.environ.get("LABKIT_GIT_COMMIT")}
    Path(os.environ.get("OUT", "."), "probe_exact.json").write_text(json.dumps({"meta": meta, "rows": out}, indent=1))


if __name__ == "__main__":
    main()
