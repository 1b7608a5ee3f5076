"""Dev probe (not a committed run): can dgamma and dbeta's bytes run beside the few-row chain sums without slowing
them? Stand-ins, not our kernels: "side" is two torch column reductions (torch.sum over rows of dy and of x into two
[N] outputs), which read x and dy once and write 2N floats, the bytes a dgamma/dbeta pass moves. Per shape, under
CUDA events (median of 30, after 5 warm-ups): our whole backward alone (labkit.ops.backward.backward), the side
work alone, the two in sequence on one stream, and the two at once (the backward on one stream, launched first,
the side work on another, both waited for), each captured in a CUDA graph and replayed (GRAPH=0: eager calls). Writes
overlap.json under $OUT (default .)."""
import json
import os
import statistics
import sys

sys.path.insert(0, os.getcwd())

import torch  # noqa: E402

from labkit.ops import backward as grad  # noqa: E402
from labkit.studies import training  # noqa: E402

SHAPES = ((1, 1 << 24), (2, 1 << 23), (4, 1 << 22), (16, 1 << 22))
GRAPH = os.environ.get("GRAPH", "1") == "1"  # 0: eager calls, host launch time in the figures


def timed(fn, n=30, warm=5):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    if GRAPH:  # the call captured once, its replays timed: no host time in the figures
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
        fn = g.replay
        for _ in range(warm):
            fn()
        torch.cuda.synchronize()
    out = []
    for _ in range(n):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b) * 1e3)
    q = statistics.quantiles(out, n=4)
    return {"median_us": q[1], "q1_us": q[0], "q3_us": q[2]}


def main():
    sa, sb = torch.cuda.Stream(), torch.cuda.Stream()
    res = {"graph": GRAPH, "torch": torch.__version__, "gpu": torch.cuda.get_device_name(), "shapes": []}
    for rows, n in SHAPES:
        x, w, b, dy = training._tensors((rows, n), 0, "cuda")
        _, mean, rstd = torch.native_layer_norm(x, (n,), w, b, 1e-5)
        dg, db = torch.empty(n, device="cuda"), torch.empty(n, device="cuda")

        def bwd():
            return grad.backward(dy, x, (n,), mean, rstd, w, b)

        def side():
            torch.sum(dy, 0, out=db)
            torch.sum(x, 0, out=dg)

        def seq():
            bwd()
            side()

        def both():
            cur = torch.cuda.current_stream()
            sa.wait_stream(cur)
            sb.wait_stream(cur)
            with torch.cuda.stream(sa):
                bwd()
            with torch.cuda.stream(sb):
                side()
            cur.wait_stream(sa)
            cur.wait_stream(sb)

        row = {"rows": rows, "n": n, "schedule": grad.plan(rows, n, training._device(x)).schedule}
        for name, fn in (("backward", bwd), ("side", side), ("sequence", seq), ("concurrent", both)):
            row[name] = timed(fn)
        res["shapes"].append(row)
        print(rows, n, {k: round(v["median_us"], 1) for k, v in row.items() if isinstance(v, dict)}, flush=True)
        x = dy = w = b = None
        torch.cuda.empty_cache()
    os.makedirs(os.environ.get("OUT", "."), exist_ok=True)
    json.dump(res, open(os.path.join(os.environ.get("OUT", "."), f"overlap_{'graph' if GRAPH else 'eager'}.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
