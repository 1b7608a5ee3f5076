"""Dev probe (not a committed run): where the backward's time goes at few long rows, kernel by kernel.

For each shape, our backward (labkit.ops.backward.backward, as the drop-in's autograd node runs it) is called 3
times to warm up and 10 times under torch.profiler; each kernel's median device time over the 10 calls is kept,
beside the call's whole time under graph replay (protocol A). The bytes each kernel must move are computed here
(x, dy, gamma read; dx, dgamma, dbeta written) so that each kernel's time reads against the copy ceiling measured in
the same process. Writes stages.json under $OUT (default .)."""
import json
import os
import statistics
import sys
from dataclasses import replace

sys.path.insert(0, os.getcwd())

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

from labkit.ops import backward as grad  # noqa: E402
from labkit.studies import training  # noqa: E402
from labkit.studies.bench import PROTOCOL_A, time_methods  # noqa: E402
from labkit.studies.measure import copy_ceiling_a  # noqa: E402

SHAPES = ((1, 1 << 24), (2, 1 << 23), (4, 1 << 22), (16, 1 << 22), (64, 1 << 18))
out = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(), "ceiling": copy_ceiling_a(rounds=15),
       "shapes": []}
for rows, n in SHAPES:
    x, w, b, dy = training._tensors((rows, n), 0, "cuda")
    _, mean, rstd = torch.native_layer_norm(x, (n,), w, b, 1e-5)
    call = lambda: grad.backward(dy, x, (n,), mean, rstd, w, b)  # noqa: E731
    for _ in range(3):
        call()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(10):
            call()
        torch.cuda.synchronize()
    kernels = {}
    for e in prof.events():
        if str(e.device_type).endswith("CUDA"):
            kernels.setdefault(e.name, []).append(e.device_time_range.elapsed_us() if hasattr(e, "device_time_range")
                                                  else e.time_range.elapsed_us())
    whole = time_methods({"ours": call}, replace(PROTOCOL_A, rounds=15, repeats=3)).stats["ours"]
    p = grad.plan(rows, n, training._device(x))
    row = {"rows": rows, "n": n, "schedule": p.schedule, "whole_graph_ms": whole,
           "kernels_us": {k: {"median": statistics.median(v), "calls": len(v)} for k, v in kernels.items()}}
    out["shapes"].append(row)
    print(rows, n, p.schedule, f"whole {whole['median_ms'] * 1e3:.1f} us",
          {k[:40]: round(v["median"], 1) for k, v in row["kernels_us"].items()})
    x = dy = w = b = mean = rstd = None
    torch.cuda.empty_cache()
os.makedirs(os.environ.get("OUT", "."), exist_ok=True)
json.dump(out, open(os.path.join(os.environ.get("OUT", "."), "stages.json"), "w"), indent=1)
