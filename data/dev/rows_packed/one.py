"""Runs one rows_fused entry point once at (rows, n) and checks its bits (for running each alone under
compute-sanitizer). Not a committed run."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import torch  # noqa: E402

from labkit.core.launch import Kernel  # noqa: E402
from labkit.ops import plans, rows_fused  # noqa: E402

fn, rows, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
x = torch.randn(rows, n, device="cuda") * 2 + 50
w, b = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
grid = (rows,) if fn.startswith("rows_fused_reg") else (-(-rows // 4),)
p = rows_fused.RowsFusedPlan(rows, n, Kernel("rows_fused", fn, grid, (32, 4)))
got = plans.execute(p, x, w, b, 1e-5)
torch.cuda.synchronize()
ref = torch.native_layer_norm(x, (n,), w, b, 1e-5)
print(fn, rows, n, [torch.equal(a.reshape(-1).view(torch.int32), c.reshape(-1).view(torch.int32))
                    for a, c in zip(got, ref)])
