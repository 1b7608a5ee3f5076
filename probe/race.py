import sys, torch
from labkit.ops.chain import chain_layer_norm, ChainSettings
shape = tuple(int(s) for s in sys.argv[1].split(","))
sched = sys.argv[2]
x = torch.randn(shape, device="cuda"); w = torch.randn(shape[1:], device="cuda"); b = torch.randn(shape[1:], device="cuda")
y = chain_layer_norm(x, w, b, 1e-5, settings=ChainSettings(schedule=sched)) if sched != "none" else None
torch.cuda.synchronize(); print("ok", shape, sched)
