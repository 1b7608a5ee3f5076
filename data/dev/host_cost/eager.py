"""Dev probe: why the drop-in's forward+backward loses to torch's under the training sweep's eager protocol (B:
L2 flushed, synchronize, CUDA events around one call) at shapes where graph replay says its kernels are faster.
Per shape and method: event time with and without the flush, the host wall time of the call inside the events,
and the forward alone / autograd.grad alone; then a torch.profiler table of 5 calls each. Writes eager.json into
$OUT. Not a committed run."""
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import labkit  # noqa: E402

SHAPES = [(4096, 768), (8192, 1024), (16384, 1024)]
ROUNDS = 25
flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")


def timed(fn, do_flush: bool, rounds: int = ROUNDS):
    ev, wall = [], []
    for _ in range(rounds):
        if do_flush:
            flush.zero_()
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0 = time.perf_counter()
        s.record()
        fn()
        e.record()
        t1 = time.perf_counter()
        e.synchronize()
        ev.append(s.elapsed_time(e) * 1e3)
        wall.append((t1 - t0) * 1e6)
    return {"event_us": statistics.median(ev), "host_us": statistics.median(wall)}


def main():
    out = []
    for shape in SHAPES:
        ns = shape[1:]
        x = torch.randn(shape, device="cuda")
        w = torch.randn(ns, device="cuda").requires_grad_()
        b = torch.randn(ns, device="cuda").requires_grad_()
        dy = torch.randn(shape, device="cuda")
        row = {"shape": list(shape)}
        for name, ln in (("native", F.layer_norm), ("dropin", labkit.layer_norm)):
            def step():
                xs = x.detach().requires_grad_()
                return torch.autograd.grad(ln(xs, ns, w, b, 1e-5), (xs, w, b), dy)

            def fwd():
                xs = x.detach().requires_grad_()
                return ln(xs, ns, w, b, 1e-5)

            for _ in range(5):
                step()
            held = {}

            def prep_bwd():
                xs = x.detach().requires_grad_()
                held["y"], held["xs"] = ln(xs, ns, w, b, 1e-5), xs

            def bwd():
                return torch.autograd.grad(held["y"], (held["xs"], w, b), dy)

            r = {"step_flush": timed(step, True), "step_noflush": timed(step, False),
                 "fwd_flush": timed(fwd, True)}
            bw = []
            for _ in range(ROUNDS):
                prep_bwd()
                bw.append(timed(bwd, True, 1)["event_us"])
            r["bwd_flush_event_us"] = statistics.median(bw)
            from torch.profiler import ProfilerActivity, profile
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                for _ in range(5):
                    flush.zero_()
                    torch.cuda.synchronize()
                    step()
                    torch.cuda.synchronize()
            r["profile"] = prof.key_averages().table(sort_by="cpu_time_total", row_limit=25, max_name_column_width=60)
            row[name] = r
            print(shape, name, {k: v for k, v in r.items() if k != "profile"}, flush=True)
            print(r["profile"], flush=True)
        out.append(row)
    meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
            "commit": os.environ.get("LABKIT_GIT_COMMIT")}
    Path(os.environ.get("OUT", "."), "eager.json").write_text(json.dumps({"meta": meta, "shapes": out}, indent=1))


if __name__ == "__main__":
    main()
