"""Input distributions and affine initializations of the study, drawn on the CPU so a seed means the same
values on every machine, then copied to the device."""
from __future__ import annotations

DISTRIBUTIONS = ("uniform", "normal", "normal_x100", "normal_plus_1000", "constant_1e4")
AFFINES = ("default", "random_normal")


def make_input(distribution: str, shape, seed: int, device="cpu"):
    """uniform is KernelBench's torch.rand; the others are the post's controls."""
    import torch

    if distribution not in DISTRIBUTIONS:
        raise ValueError(f"distribution must be one of {DISTRIBUTIONS}, got {distribution!r}")
    gen = torch.Generator().manual_seed(seed)
    if distribution == "uniform":
        x = torch.rand(shape, generator=gen)
    elif distribution == "constant_1e4":
        x = torch.full(shape, 1e4)
    else:
        x = torch.randn(shape, generator=gen)
        if distribution == "normal_x100":
            x = x * 100
        elif distribution == "normal_plus_1000":
            x = x + 1000
    return x.to(device)


def make_affine(kind: str, normalized_shape, seed: int, device="cpu"):
    """(weight, bias): nn.LayerNorm's default (ones, zeros) or standard-normal draws."""
    import torch

    if kind not in AFFINES:
        raise ValueError(f"affine must be one of {AFFINES}, got {kind!r}")
    if kind == "default":
        return torch.ones(normalized_shape, device=device), torch.zeros(normalized_shape, device=device)
    gen = torch.Generator().manual_seed(10_000 + seed)
    weight = torch.randn(normalized_shape, generator=gen)
    bias = torch.randn(normalized_shape, generator=gen)
    return weight.to(device), bias.to(device)
