"""Dev probe: what makes Liger's kernel cheaper back to back at 8192 x 1024 (clocks.py: 18.05 us per call against
its 18.78 under ncu; rows_counted 19.34 against 19.20)? Per call in graphs of 20 calls, replayed 20 times between
events (median of 20 rounds), for:
- `ours`, `liger`: 20 calls of one method (as replay_k.py);
- `pairs`: 10 pairs alternating ours and Liger (per call: half a pair's time), against the mean of the two;
- `ours_y2`: 20 calls writing y into two buffers in turn (out=), so that no call writes where the previous one just
  did; `copy` and `copy_y2` the same for y.copy_(x).
Writes pairs.json into $OUT. Run: python3 data/dev/rows_ncu/pairs.py"""
import json
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import torch  # noqa: E402

from labkit.core.device import device_info  # noqa: E402
from labkit.ops import plans, rows_counted  # noqa: E402


def per_call(calls) -> float:
    for f in calls[:4]:
        f()
    torch.cuda.synchronize()
    g, s = torch.cuda.CUDAGraph(), torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s), torch.cuda.graph(g):
        for f in calls:
            f()
    torch.cuda.current_stream().wait_stream(s)
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(20):
        torch.cuda.synchronize()
        a.record()
        for _ in range(20):
            g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3 / (20 * len(calls)))
    return statistics.median(times)


def main():
    from labkit.studies import methods as registry
    rows, n = 8192, 1024
    torch.manual_seed(rows * 7 + n)
    x = torch.randn(rows, n, device="cuda") * 2 + 50
    w, b = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    p = rows_counted.plan(rows, n, device_info(0))
    ys = [torch.empty_like(x), torch.empty_like(x)]
    ours = lambda: plans.execute(p, x, w, b, 1e-5)  # noqa: E731
    with torch.no_grad():
        liger = registry.build(registry.get("liger"), x, w, b, 1e-5)["fn"]
    ours_to = [lambda i=i: plans.execute(p, x, w, b, 1e-5, out=ys[i]) for i in (0, 1)]
    copy_to = [lambda i=i: ys[i].copy_(x) for i in (0, 1)]
    cases = {"ours": [ours] * 20, "liger": [liger] * 20, "pairs": [ours, liger] * 10,
             "ours_y2": ours_to * 10, "copy": [copy_to[0]] * 20, "copy_y2": copy_to * 10}
    out = {}
    for rep in range(2):
        for name in (list(cases) if rep == 0 else list(cases)[::-1]):
            out.setdefault(name, []).append(per_call(cases[name]))
    for name, v in out.items():
        print(name, [round(t, 2) for t in v], flush=True)
    meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "shape": [rows, n],
            "commit": os.environ.get("LABKIT_GIT_COMMIT"),
            "note": "per call, us; `pairs` is per call of an alternating ours/Liger graph (half a pair)"}
    Path(os.environ.get("OUT", "."), "pairs.json").write_text(json.dumps({"meta": meta, "per_call_us": out}, indent=1))


if __name__ == "__main__":
    main()
