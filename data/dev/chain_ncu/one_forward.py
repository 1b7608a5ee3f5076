"""Dev driver for ncu (data/dev/chain_ncu): one warm-up and one measured forward at L1/40 through the chain
schedule (chain_stats_tma, then affine_columns), bits checked against torch's.
Run: ncu --clock-control none --kernel-name regex:chain_stats --launch-skip 1 --launch-count 1 ... python3 this"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import torch  # noqa: E402

from labkit.ops import chain  # noqa: E402

shape = (16, 64 * 256 * 256)
g = torch.Generator(device="cuda").manual_seed(7)
x = torch.rand(shape, device="cuda", generator=g)
w, b = torch.randn(shape[1], device="cuda", generator=g), torch.randn(shape[1], device="cuda", generator=g)
ref = torch.native_layer_norm(x, (shape[1],), w, b, 1e-5)
settings = chain.ChainSettings(schedule="chain")
for _ in range(2):
    out = chain.chain_layer_norm(x, w, b, 1e-5, return_stats=True, settings=settings)
torch.cuda.synchronize()
same = all(torch.equal(a.reshape(-1).view(torch.int32), r.reshape(-1).view(torch.int32)) for a, r in zip(out, ref))
print("identical", same)
