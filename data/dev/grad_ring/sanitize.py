"""Dev check, run under compute-sanitizer (racecheck, memcheck): the backward at shapes whose column pass is
grad_columns_tiled (its double-buffered shared-memory tiles; chains ending mid-tile; a column tile past N; one group
and 32), with its bits against torch.ops.aten.native_layer_norm_backward. Prints one line per shape."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import torch  # noqa: E402

from labkit.core.device import device_info  # noqa: E402
from labkit.ops import backward as grad  # noqa: E402

for rows, n in ((2048, 256), (4096, 1000), (2100, 200), (40, 64), (4096, 768)):
    x = torch.randn(rows, n, device="cuda")
    w, b, dy = torch.randn(n, device="cuda"), torch.randn(n, device="cuda"), torch.randn(rows, n, device="cuda")
    _, mean, rstd = torch.native_layer_norm(x, (n,), w, b, 1e-5)
    ref = torch.ops.aten.native_layer_norm_backward(dy, x, [n], mean, rstd, w, b, [True, True, True])
    for sch in ("rows", "split"):
        p = grad.plan(rows, n, device_info(0), sch, "tiled")
        out = grad.run(p, dy, x, (n,), mean, rstd, w, b, (True, True, True), 0)
        same = all(torch.equal(a.view(torch.int32), r.view(torch.int32)) for a, r in zip(out, ref))
        print(f"{rows}x{n} {sch} {p.columns.function} identical={same}", flush=True)
