"""A drop-in LayerNorm: torch.nn.functional.layer_norm's signature and torch's eager bits on every input, our
kernels where the dispatch rule (labkit.ops.dispatch) says they are faster, registered as the custom op
labkit::layer_norm (op.py) with autograd through our backward kernels where the rule picks them (torch's
elsewhere), and per-signature plans (plan.py) that hold each path's launches (labkit.ops.launches) bound to the
device. `enable()` (aten.py) serves torch's own F.layer_norm and nn.LayerNorm with the same plans, as torch's CUDA
kernel for aten::native_layer_norm(_backward).
`fused_layer_norm` (fused.py) runs the elementwise ops after it in the same output pass, with the eager chain's bits.
"""
from labkit.ops.dropin.aten import disable, enable, enabled
from labkit.ops.dropin.fused import explain_fused, fused_layer_norm
from labkit.ops.dropin.module import LayerNorm, swap_layer_norms
from labkit.ops.dropin.op import explain, layer_norm, layer_norm_with
from labkit.ops.dropin.plan import dispatch_protocol

__all__ = ["LayerNorm", "disable", "dispatch_protocol", "enable", "enabled", "explain", "explain_fused",
           "fused_layer_norm", "layer_norm", "layer_norm_with", "swap_layer_norms"]
