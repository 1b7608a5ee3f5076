"""ncu target for the rows_loop probe's follow-up: rows_fused's block-per-row kernel and torch.compile's (Inductor)
kernel at one many-row shape, two launches each after a warm-up, so that
`ncu -k regex:"rows_fused|triton" --clock-control none ...` reads both. Not a committed run."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import torch  # noqa: E402

from labkit.core.device import device_info  # noqa: E402
from labkit.ops import plans, rows_fused  # noqa: E402

rows, n = (int(a) for a in sys.argv[1:3]) if len(sys.argv) > 2 else (4096, 768)
x = torch.randn(rows, n, device="cuda") * 2 + 50
w, b = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
p = rows_fused.plan(rows, n, device_info(0))
compiled = torch.compile(lambda t: torch.nn.functional.layer_norm(t, (n,), w, b, 1e-5), dynamic=False)
for _ in range(3):
    plans.execute(p, x, w, b, 1e-5)
    compiled(x)
torch.cuda.synchronize()
