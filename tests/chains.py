"""`eager_chain(x, ns, w, b, eps, epilogue, residual)`: torch's eager LayerNorm-then-ops chain written with torch's
functions alone, independently of labkit.ops.epilogue.compose: what the fused consumer's bits are compared with
(CPU and GPU tests). Import it as `from chains import eager_chain`."""
import torch.nn.functional as F

ACTIVATIONS = {None: lambda t: t, "gelu": F.gelu, "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"),
               "relu": F.relu, "silu": F.silu}


def eager_chain(x, ns, w, b, eps, e, r=None):
    y = ACTIVATIONS[e.activation](F.layer_norm(x, ns, w, b, eps))
    if e.scale is not None:
        y = y * e.scale
    return y + r if e.residual else y
