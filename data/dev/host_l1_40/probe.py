"""Dev probe (not a committed run): the host's time in one L1/40 training call, unprofiled. Per call, as protocol B
starts it (the L2 flushed, the device synchronized): perf_counter around the forward with grad on (entry to return;
the GPU runs on), around torch.autograd.grad (its launches), and to the end of the GPU's work; an event pair around
the whole call as protocol B reads it. The drop-in against torch's F.layer_norm, and the drop-in's forward alone
with grad off. Writes probe.json into $OUT."""
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import torch  # noqa: E402

import labkit  # noqa: E402
from labkit.studies import training  # noqa: E402

CALLS = 30


def main():
    shape = (16, 64, 256, 256)
    x, w, b, dy = training._tensors(shape, 0, "cuda")
    w, b = w.detach().requires_grad_(), b.detach().requires_grad_()
    ns = tuple(w.shape)
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    fns = {"dropin": labkit.layer_norm, "native": torch.nn.functional.layer_norm}
    out = {}
    for name, fn in fns.items():
        for _ in range(3):
            xs = x.detach().requires_grad_()
            torch.autograd.grad(fn(xs, ns, w, b, 1e-5), (xs, w, b), dy)
        rows = []
        for _ in range(CALLS):
            flush.zero_()
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            t0 = time.perf_counter()
            xs = x.detach().requires_grad_()
            y = fn(xs, ns, w, b, 1e-5)
            t1 = time.perf_counter()
            g = torch.autograd.grad(y, (xs, w, b), dy)
            t2 = time.perf_counter()
            end.record()
            end.synchronize()
            t3 = time.perf_counter()
            rows.append({"fwd_host_us": (t1 - t0) * 1e6, "bwd_host_us": (t2 - t1) * 1e6,
                         "wall_us": (t3 - t0) * 1e6, "event_ms": start.elapsed_time(end)})
            del y, g
        nograd = []
        with torch.no_grad():
            for _ in range(CALLS):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                fn(x, ns, w, b, 1e-5)
                nograd.append((time.perf_counter() - t0) * 1e6)
        med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
        out[name] = {"calls": rows, "median": med, "nograd_fwd_host_us": nograd,
                     "nograd_median_us": statistics.median(nograd)}
        print(name, {k: round(v, 4) for k, v in med.items()}, "no-grad forward host us",
              round(statistics.median(nograd), 1), flush=True)
    meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
            "commit": os.environ.get("LABKIT_GIT_COMMIT"), "explain": labkit.explain(x, ns, w, b, 1e-5)}
    Path(os.environ.get("OUT", "."), "probe.json").write_text(json.dumps({"meta": meta, "methods": out}, indent=1,
                                                                         default=str))


if __name__ == "__main__":
    main()
