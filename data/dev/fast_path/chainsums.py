"""Dev probe: one backward at 1 x 2^24 (our chain schedule) for ncu."""
import os, sys
sys.path.insert(0, os.getcwd())
import torch
from labkit.ops import backward as grad
x = torch.randn(1, 1 << 24, device="cuda"); dy = torch.randn_like(x)
w = torch.randn(1 << 24, device="cuda"); b = torch.randn(1 << 24, device="cuda")
y, mean, rstd = torch.native_layer_norm(x, (1 << 24,), w, b, 1e-5)
for _ in range(2):
    grad.backward(dy, x, (1 << 24,), mean, rstd, w, b, schedule="chain")
torch.cuda.synchronize()
