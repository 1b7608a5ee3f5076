"""Dev probe: is part of the replay gap at 8192 x 1024 outside the kernel? ncu puts rows_counted 1.3-3.4% behind
Liger in kernel duration (README), graph replay (protocol A: one call per graph, graphs replayed back to back) 5-7%.
This captures K = 1 and K = 20 calls in one graph for each method and replays it, so the per-call time of K = 20
carries one graph launch per 20 kernels; and it dumps each K = 1 graph (torch's CUDAGraph debug dump, DOT) to show
what nodes a call adds. Per call: median over 30 rounds of (20 replays between CUDA events) / (20 K).
Writes replay_k.json and graph_*.dot into $OUT. Run: python3 data/dev/rows_ncu/replay_k.py"""
import json
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import torch  # noqa: E402

from labkit.core.device import device_info  # noqa: E402
from labkit.ops import plans, rows_counted, rows_fused  # noqa: E402

OUT = Path(os.environ.get("OUT", "."))


def per_call(fn, k: int, name: str) -> float:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    if k == 1:
        g.enable_debug_mode()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s), torch.cuda.graph(g):
        for _ in range(k):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    if k == 1:
        g.debug_dump(str(OUT / f"graph_{name}.dot"))
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(30):
        torch.cuda.synchronize()
        a.record()
        for _ in range(20):
            g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3 / (20 * k))
    return statistics.median(times)


def main():
    from labkit.studies import methods as registry
    rows, n = 8192, 1024
    torch.manual_seed(rows * 7 + n)
    x = torch.randn(rows, n, device="cuda") * 2 + 50
    w, b = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    dev = device_info(0)
    y = torch.empty_like(x)
    fns = {"rows_counted": lambda: plans.execute(rows_counted.plan(rows, n, dev), x, w, b, 1e-5),
           "rows_fused": lambda: plans.execute(rows_fused.plan(rows, n, dev), x, w, b, 1e-5),
           "copy": lambda: y.copy_(x),
           "native": lambda: torch.nn.functional.layer_norm(x, (n,), w, b, 1e-5)}
    with torch.no_grad():
        fns["liger"] = registry.build(registry.get("liger"), x, w, b, 1e-5)["fn"]
    out = {}
    for rep in range(2):  # twice, in opposite orders
        for name in (list(fns) if rep == 0 else list(fns)[::-1]):
            for k in (1, 20):
                out.setdefault(name, {}).setdefault(f"k{k}", []).append(per_call(fns[name], k, name))
    for name, r in out.items():
        print(name, {k: [round(v, 2) for v in vs] for k, vs in r.items()}, flush=True)
    meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "shape": [rows, n],
            "commit": os.environ.get("LABKIT_GIT_COMMIT")}
    (OUT / "replay_k.json").write_text(json.dumps({"meta": meta, "per_call_us": out}, indent=1))


if __name__ == "__main__":
    main()
