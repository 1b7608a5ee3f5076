"""Probe (one process, graph replay, protocol A): does rows_fused_reg32's 2-byte build run faster at 5 blocks per
SM (96 registers, no spill at sm_90: cuobjdump) than at the float32 build's 3 (127 registers, 4 blocks fit)? The
float32 build keeps 128 registers of vectors and cannot go there; the 2-byte one keeps 64. Each variant is a copy of
kernels/rows_fused.cu with reg32's __launch_bounds__ changed (made here, on the GPU copy of the tree, and removed
after); same arithmetic, so each output is compared with torch's (int16 views) too. Beside them at two shapes:
torch.compile and Liger (labkit.studies.methods). Output: $OUT/reg32_blocks.json; the finding goes to
docs/decisions.md."""
import json, os
from dataclasses import replace
from pathlib import Path

import torch
from labkit.core.compile import kernel_dir
from labkit.core.launch import Kernel
from labkit.ops import dtypes, rows_fused
from labkit.ops.launches import execute
from labkit.studies.bench import PROTOCOL_A, time_methods
from labkit.studies import methods as registry

SRC = kernel_dir() / "rows_fused.cu"
BLOCKS = (3, 5)
variants = {}
for b in BLOCKS:
    name = f"rows_fused_probe{b}"
    (kernel_dir() / f"{name}.cu").write_text(SRC.read_text().replace("ROWS_FUSED(32, 3, true)", f"ROWS_FUSED(32, {b}, true)"))
    variants[b] = name
protocol = replace(PROTOCOL_A, rounds=20)
shapes = ((1024, 16384), (2048, 16384), (4096, 16384), (8192, 16384), (2048, 12288),
          (4096, 10240))
peers_at = {(2048, 16384)}
out = []
try:
    for dtype in ("bfloat16", "float16"):
        for rows, n in shapes:
            if dtype == "float16" and (rows, n) not in peers_at:
                continue
            g = torch.Generator(device="cuda").manual_seed(rows + n)
            t = getattr(torch, dtype)
            x = torch.rand(rows, n, device="cuda", generator=g).to(t)
            w = (1 + 0.2 * torch.randn(n, device="cuda", generator=g)).to(t)
            bb = (0.2 * torch.randn(n, device="cuda", generator=g)).to(t)
            want = torch.ops.aten.native_layer_norm(x, (n,), w, bb, 1e-5)
            fns = {"torch": lambda: torch.ops.aten.native_layer_norm(x, (n,), w, bb, 1e-5)[0]}
            bits = {}
            for b, name in variants.items():
                p = rows_fused.entry_launches(rows, n, "rows_fused_reg32", dtype)
                p = replace(p, kernel=Kernel(name, "rows_fused_reg32", (rows,), (32, 4), options=dtypes.options(dtype)))
                fn = (lambda p=p: execute(p, x, w, bb, 1e-5)[0])
                got = execute(p, x, w, bb, 1e-5)
                bits[f"blocks{b}"] = all(torch.equal(a.contiguous().view(torch.int16 if a.element_size() == 2 else torch.int32),
                                                     e.contiguous().view(torch.int16 if e.element_size() == 2 else torch.int32))
                                         for a, e in zip(got, want))
                fns[f"blocks{b}"] = fn
            if (rows, n) in peers_at:
                with torch.no_grad():
                    for peer in ("inductor", "liger"):
                        built = registry.build(registry.get(peer), x, w, bb, 1e-5)
                        if built["fn"] is not None:
                            fns[peer] = built["fn"]
            with torch.no_grad():
                rec = time_methods(fns, protocol, "blocks3")
            row = {"dtype": dtype, "shape": [rows, n], "bits": bits,
                   "median_us": {k: round(s["median_ms"] * 1000, 2) for k, s in rec.stats.items()},
                   "q25_us": {k: round(s["q25_ms"] * 1000, 2) for k, s in rec.stats.items()},
                   "q75_us": {k: round(s["q75_ms"] * 1000, 2) for k, s in rec.stats.items()},
                   "ratio_vs_blocks3": {k: round(v["median"], 4) for k, v in rec.ratio_vs_baseline.items()}}
            out.append(row)
            print(dtype, rows, n, bits, row["median_us"], flush=True)
finally:
    for name in variants.values():
        (kernel_dir() / f"{name}.cu").unlink(missing_ok=True)
json.dump({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": out},
          open(f"{os.environ.get('OUT', '/tmp')}/reg32_blocks.json", "w"), indent=1, default=str)
