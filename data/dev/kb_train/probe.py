"""Dev probe (not a committed run): L1/40 forward + backward (labkit.studies.training.methods) timed two ways in one
process: KernelBench's cuda_event method (labkit.studies.kernelbench_timing.cuda_event_times: each program's trials
back to back, a fresh 256 MiB thrash before each, first trial dropped, mean) and notebook 10's protocol B (methods
interleaved per round in a seeded order, one persistent buffer zeroed, median). Writes probe.json under $OUT."""
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.getcwd())

import torch  # noqa: E402

from dataclasses import replace  # noqa: E402

from labkit.studies import kernelbench_timing as kb, training  # noqa: E402
from labkit.studies.bench import PROTOCOL_B, time_methods  # noqa: E402

NAMES = ("native", "dropin", "native_compiled")
x, w, b, dy = training._tensors(training.L1_40, 0, "cuda")
fns = training.methods(x, w, b, dy, 1e-5, compiled=True)
fns = {n: fns[n] for n in NAMES}
for fn in fns.values():  # compile before timing
    fn()
torch.cuda.synchronize()
out = {"kernelbench": {n: [] for n in NAMES}, "torch": torch.__version__, "gpu": torch.cuda.get_device_name()}
t0 = time.perf_counter()
for block in range(3):
    order = NAMES[block:] + NAMES[:block]
    for n in order:
        out["kernelbench"][n].append(kb.stats(kb.cuda_event_times(fns[n], 3, 100)))
rec = time_methods(fns, replace(PROTOCOL_B, rounds=60))
out["interleaved_b"] = rec.stats
for n in NAMES:
    print(n, "kb means", [round(s["mean_ms"], 4) for s in out["kernelbench"][n]],
          "kb medians", [round(s["median_ms"], 4) for s in out["kernelbench"][n]],
          "interleaved median", round(rec.stats[n]["median_ms"], 4))
out["seconds"] = time.perf_counter() - t0
os.makedirs(os.environ.get("OUT", "."), exist_ok=True)
json.dump(out, open(os.path.join(os.environ.get("OUT", "."), "kb_train.json"), "w"), indent=1)
