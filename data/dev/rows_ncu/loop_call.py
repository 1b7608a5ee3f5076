"""Dev driver for ncu (data/dev/rows_ncu/sustained.sh): CALLS forwards of one path at 8192 x 1024 back to back, with no
synchronization between them, so a profiled late call meets the L2 its predecessor of the same kernel left, as in
a graph of many calls. Paths: rows_counted (labkit.ops), liger (through labkit.studies.methods). The reference is
computed with torch's kernel before the loop (ncu's filter must not match it: sustained.sh names the kernels).
Run: python3 data/dev/rows_ncu/loop_call.py PATH CALLS"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import torch  # noqa: E402

from labkit.core.device import device_info  # noqa: E402
from labkit.ops import plans, rows_counted  # noqa: E402

path, calls = sys.argv[1], int(sys.argv[2])
rows, n = 8192, 1024
g = torch.Generator(device="cuda").manual_seed(rows * 7 + n)
x = torch.randn(rows, n, device="cuda", generator=g) * 2 + 50
w, b = torch.randn(n, device="cuda", generator=g), torch.randn(n, device="cuda", generator=g)
if path == "rows_counted":
    p = rows_counted.plan(rows, n, device_info(0))
    fn = lambda: plans.execute(p, x, w, b, 1e-5)  # noqa: E731
elif path == "liger":
    from labkit.studies import methods as registry
    with torch.no_grad():
        fn = registry.build(registry.get("liger"), x, w, b, 1e-5)["fn"]
else:
    raise ValueError(f"path must be rows_counted or liger, got {path!r}")
torch.cuda.synchronize()
for _ in range(calls):
    fn()
torch.cuda.synchronize()
