"""Probe (to git history once measured): bf16 forward per path under graph replay at ordinary shapes, each of the
paths built for 2-byte rows forced, beside torch eager and the rule's pick: what a 2-byte dispatch table would say.
Prints JSON lines; run on a GPU: python scripts/probe_bf16_paths.py"""
import json
from dataclasses import replace

import torch

from labkit import dispatch_protocol, explain
from labkit.ops import paths
from labkit.ops.dropin import layer_norm_with
from labkit.studies.bench import PROTOCOL_A, time_methods

SHAPES = ((4096, 768), (8192, 768), (4096, 1024), (8192, 1024), (16384, 1024), (8192, 2048), (32768, 2048),
          (8192, 4096), (16384, 4096), (4096, 8192), (2048, 16384), (1024, 65536), (64, 1 << 17), (16, 1 << 20))
graph = replace(PROTOCOL_A, rounds=15)
print(json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__}))
for shape in SHAPES:
    for dtype in (torch.bfloat16,):
        x = torch.randn(shape, device="cuda").mul(3).add(1).to(dtype)
        w = torch.randn(shape[1:], device="cuda").to(dtype)
        b = torch.randn(shape[1:], device="cuda").to(dtype)
        ns = tuple(shape[1:])
        fns = {"native": lambda: torch.nn.functional.layer_norm(x, ns, w, b)}
        with torch.no_grad():
            for p in paths.DTYPES:
                if "bfloat16" not in paths.DTYPES[p]:
                    continue
                try:
                    layer_norm_with(p, x, ns, w, b)
                    fns[p] = (lambda p: lambda: layer_norm_with(p, x, ns, w, b))(p)
                except ValueError:
                    pass
            rec = time_methods(fns, graph, "native")
            with dispatch_protocol("graph"):
                pick = explain(x, ns, w, b)["path"]
        us = {k: round(1e3 * v["median_ms"], 2) for k, v in rec.stats.items()}
        print(json.dumps({"shape": shape, "dtype": str(dtype), "pick": pick, "us": us,
                          "fastest": min(us, key=us.get)}))
