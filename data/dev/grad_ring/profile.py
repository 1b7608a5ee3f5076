"""Dev probe: per-kernel times (torch.profiler) of the backward at a few shapes, for each column-pass entry point,
in the split schedule, and torch's aten backward; run under ncu too (see README). Writes profile.json into $OUT."""
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

from labkit.core.device import device_info  # noqa: E402
from labkit.ops import backward as grad  # noqa: E402

SHAPES = [(4096, 768), (8192, 1024), (8192, 4096)]


def main():
    dev = device_info(0)
    only = os.environ.get("PROBE_ONLY")
    out = []
    for rows, n in SHAPES + [(16384, 1024), (32768, 2048), (100, 768)]:
        if only and f"{rows}x{n}" != only:
            continue
        x = torch.randn(rows, n, device="cuda") * 3 + 1
        w, b = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
        dy = torch.randn(rows, n, device="cuda")
        _, mean, rstd = torch.native_layer_norm(x, (n,), w, b, 1e-5)
        mask = [True, True, True]
        fns = {"native": lambda: torch.ops.aten.native_layer_norm_backward(dy, x, [n], mean, rstd, w, b, mask)}
        for loads in grad.LOADS:
            try:
                p = grad.plan(rows, n, dev, "split", loads)
            except ValueError:
                continue
            fns[loads] = (lambda p: lambda: grad.run(p, dy, x, (n,), mean, rstd, w, b, mask, 0))(p)
        for name, fn in fns.items():
            try:
                for _ in range(5):
                    fn()
                torch.cuda.synchronize()
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    for _ in range(10):
                        fn()
                    torch.cuda.synchronize()
            except Exception as e:  # noqa: BLE001  (a probe: say what failed and go on)
                print(f"{rows}x{n} {name}: {type(e).__name__}: {e}", flush=True)
                continue
            k = {}
            for e in prof.events():
                if e.device_type == torch.autograd.DeviceType.CUDA:
                    us = e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total
                    k.setdefault(e.name[:60], []).append(us)
            per = {name_: sum(v) / 10 for name_, v in k.items()}
            print(f"{rows}x{n} {name}: " + ", ".join(f"{a} {v:.1f}" for a, v in per.items()), flush=True)
            out.append({"rows": rows, "n": n, "method": name, "kernel_us_per_call": per})
    Path(os.environ.get("OUT", "."), "profile.json").write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
