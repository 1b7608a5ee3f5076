"""Dev check, run under compute-sanitizer (memcheck, racecheck): the backward's chain schedule at shapes taking each
warp-per-sum entry point (grad_chain_sums_split2, 4, 8: ragged last stages, the 4-slot ring wrapping), with its bits
against torch.ops.aten.native_layer_norm_backward. Prints one line per shape."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import torch  # noqa: E402

from labkit.core.device import device_info  # noqa: E402
from labkit.ops import backward as grad  # noqa: E402

for rows, n in ((3, 512 * 17), (2, 512 * 771), (1, 512 * 1027)):
    x = torch.randn(rows, n, device="cuda")
    w, b, dy = torch.randn(n, device="cuda"), torch.randn(n, device="cuda"), torch.randn(rows, n, device="cuda")
    _, mean, rstd = torch.native_layer_norm(x, (n,), w, b, 1e-5)
    ref = torch.ops.aten.native_layer_norm_backward(dy, x, [n], mean, rstd, w, b, [True, True, True])
    p = grad.plan(rows, n, device_info(0), "chain")
    out = grad.run(p, dy, x, (n,), mean, rstd, w, b, (True, True, True), 0)
    same = all(torch.equal(a.view(torch.int32), r.view(torch.int32)) for a, r in zip(out, ref))
    print(f"{rows}x{n} {p.sums.function} identical={same}", flush=True)
