"""labkit.LayerNorm: nn.LayerNorm with the drop-in's forward (same parameters, same state_dict), and a swap."""
from __future__ import annotations

import torch

from labkit.ops.dropin.op import layer_norm


class LayerNorm(torch.nn.LayerNorm):
    """nn.LayerNorm whose forward is labkit.layer_norm: state_dict, init and repr are nn.LayerNorm's."""

    def forward(self, input):
        return layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    @classmethod
    def from_layer_norm(cls, ln: torch.nn.LayerNorm) -> "LayerNorm":
        """A drop-in holding `ln`'s own Parameter objects (no copy: training one trains the other)."""
        new = cls(ln.normalized_shape, ln.eps, ln.elementwise_affine, bias=ln.bias is not None, device="meta")
        if ln.elementwise_affine:
            new.weight = ln.weight
            if ln.bias is not None:
                new.bias = ln.bias
        return new.train(ln.training)


def swap_layer_norms(model: torch.nn.Module) -> int:
    """Replace every nn.LayerNorm in `model` (in place) by a labkit.LayerNorm holding the same Parameters; returns
    how many were swapped. Subclasses of nn.LayerNorm (their own forward) are left alone."""
    swapped = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is torch.nn.LayerNorm:
                setattr(parent, name, LayerNorm.from_layer_norm(child))
                swapped += 1
    return swapped
