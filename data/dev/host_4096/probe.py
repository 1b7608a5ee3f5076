"""Dev probe (not a committed run): where the drop-in's eager training call loses to torch's at a host-bound
ordinary shape, in interleaved rounds as notebook 10's sweep times them. Per round, torch eager, the drop-in and
torch.compile(F.layer_norm) each make one forward with grad on + torch.autograd.grad (labkit.studies.training's
tensors and step), in a seeded shuffled order, each started as the sweep starts a call (a 256 MiB buffer zeroed
and waited for, then the start event); perf_counter splits the host's time into the forward and autograd.grad.
Medians over 60 rounds per shape. Writes host.json under $OUT. Run: python3 data/dev/host_4096/probe.py"""
import json
import os
import random
import statistics
import sys
import time

sys.path.insert(0, os.getcwd())

import torch  # noqa: E402

import labkit  # noqa: E402
from labkit.studies import training  # noqa: E402
from labkit.studies.measure import compile_static  # noqa: E402

SHAPES = ((4096, 768), (8192, 1024), (8192, 4096))
ROUNDS = 60
flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
out = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(), "rounds": ROUNDS, "shapes": []}
for shape in SHAPES:
    x, w, b, dy = training._tensors(shape, 0, "cuda")
    ns = tuple(w.shape)
    w, b = w.detach().requires_grad_(), b.detach().requires_grad_()
    cn, _ = compile_static(lambda xx, n_, ww, bb, e: torch.nn.functional.layer_norm(xx, n_, ww, bb, e),
                           lambda xx, n_, ww, bb, e: labkit.layer_norm(xx, n_, ww, bb, e), fullgraph=True)
    fns = {"native": torch.nn.functional.layer_norm, "dropin": labkit.layer_norm, "compiled": cn}
    rec = {k: {"event_us": [], "fwd_us": [], "grad_us": []} for k in fns}

    def call(fn, r):
        flush.zero_()
        torch.cuda.synchronize()
        a, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        t0 = time.perf_counter()
        xx = x.detach().requires_grad_()
        y = fn(xx, ns, w, b, 1e-5)
        t1 = time.perf_counter()
        torch.autograd.grad(y, (xx, w, b), dy)
        t2 = time.perf_counter()
        e.record()
        e.synchronize()
        if r is not None:
            r["event_us"].append(a.elapsed_time(e) * 1e3)
            r["fwd_us"].append((t1 - t0) * 1e6)
            r["grad_us"].append((t2 - t1) * 1e6)

    for fn in fns.values():
        for _ in range(5):
            call(fn, None)
    rng = random.Random(913)
    for _ in range(ROUNDS):
        names = list(fns)
        rng.shuffle(names)
        for n in names:
            call(fns[n], rec[n])
    row = {"shape": list(shape), **{k: {m: statistics.median(v) for m, v in r.items()} for k, r in rec.items()}}
    out["shapes"].append(row)
    print(shape, {k: {m: round(v, 1) for m, v in row[k].items()} for k in fns}, flush=True)
    x = dy = w = b = None
    torch.cuda.empty_cache()
os.makedirs(os.environ.get("OUT", "."), exist_ok=True)
json.dump(out, open(os.path.join(os.environ.get("OUT", "."), "host.json"), "w"), indent=1)
