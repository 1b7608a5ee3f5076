"""Dev driver for ncu (data/dev/rows_ncu): two forwards of one path at one shape (the second is the one profiled),
bits checked against torch's for our paths. Paths: rows_fused, rows_counted, rows_staged (labkit.ops), liger (the
peer, through labkit.studies.methods), native (torch's kernel).
Run: python3 data/dev/rows_ncu/one_call.py PATH ROWS N"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import torch  # noqa: E402

from labkit.core.device import device_info  # noqa: E402
from labkit.ops import plans, rows_counted, rows_fused, rows_staged  # noqa: E402

path, rows, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
g = torch.Generator(device="cuda").manual_seed(rows * 7 + n)
x = torch.randn(rows, n, device="cuda", generator=g) * 2 + 50
w, b = torch.randn(n, device="cuda", generator=g), torch.randn(n, device="cuda", generator=g)
ref = torch.native_layer_norm(x, (n,), w, b, 1e-5)
ours = {"rows_fused": rows_fused, "rows_counted": rows_counted, "rows_staged": rows_staged}
if path in ours:
    p = ours[path].plan(rows, n, device_info(0))
    for _ in range(2):
        out = plans.execute(p, x, w, b, 1e-5)
    torch.cuda.synchronize()
    print("identical", all(torch.equal(a.reshape(-1).view(torch.int32), r.reshape(-1).view(torch.int32))
                           for a, r in zip(out, ref)))
elif path == "liger":
    from labkit.studies import methods as registry
    with torch.no_grad():
        fn = registry.build(registry.get("liger"), x, w, b, 1e-5)["fn"]
        for _ in range(2):
            fn()
elif path == "native":
    for _ in range(2):
        torch.nn.functional.layer_norm(x, (n,), w, b, 1e-5)
else:
    raise ValueError(f"path must be one of {sorted(ours) + ['liger', 'native']}, got {path!r}")
torch.cuda.synchronize()
