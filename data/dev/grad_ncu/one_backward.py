"""Dev driver for ncu (data/dev/grad_ncu): one warm-up and one measured backward at 1 x 2^24 through the chain schedule
as planned (grad_chain_sums_split8, then grad_columns_streamed), bits checked against torch's. GRAD_VARIANT=prep runs
data/dev/grad_prep's sums instead (copied into kernels/ for the run).
Run: ncu --clock-control none --kernel-name regex:"grad_" --launch-skip 2 --launch-count 2 ... python3 this"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import torch  # noqa: E402

from labkit.ops import backward as grad  # noqa: E402

rows, n = 1, 1 << 24
g = torch.Generator(device="cuda").manual_seed(7)
x = torch.randn(rows, n, device="cuda", generator=g) * 3 + 1
w, b = torch.randn(n, device="cuda", generator=g), torch.randn(n, device="cuda", generator=g)
dy = torch.randn(rows, n, device="cuda", generator=g)
_, mean, rstd = torch.native_layer_norm(x, (n,), w, b, 1e-5)
ref = torch.ops.aten.native_layer_norm_backward(dy, x, [n], mean, rstd, w, b, [True, True, True])
import dataclasses  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402

from labkit.core.device import device_info  # noqa: E402
from labkit.core.launch import Kernel  # noqa: E402

root = Path(__file__).resolve().parents[3]
p = grad.plan(rows, n, device_info(0), "chain")
if os.environ.get("GRAD_VARIANT") == "prep":
    shutil.copy(root / "data/dev/grad_prep/grad_chain_sums_prep.cu", root / "kernels/grad_chain_sums_prep.cu")
    p = dataclasses.replace(p, sums=Kernel("grad_chain_sums_prep", "grad_chain_sums_prep8", p.sums.grid, (128,),
                                           p.sums.shared_mem))
try:
    for _ in range(2):
        out = grad.run(p, dy, x, (n,), mean, rstd, w, b, (True, True, True), 0)
finally:
    (root / "kernels/grad_chain_sums_prep.cu").unlink(missing_ok=True)
torch.cuda.synchronize()
print("identical", all(torch.equal(a.view(torch.int32), r.view(torch.int32)) for a, r in zip(out, ref)))
