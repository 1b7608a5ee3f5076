"""KernelBench tasks, written here from the pinned revision's definitions (MIT, licenses/KERNELBENCH_LICENSE.txt).

A task is its model, its shapes and its input recipe. Inputs are drawn with CPU `torch.rand` and then copied to
the device, as the evaluator and the post did, so a seed gives the same values on every machine.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

KERNELBENCH_COMMIT = "423217d9fda91e0c2d67e4a43bf62f96f6d104f1"


@dataclass(frozen=True)
class Task:
    level: int
    number: int
    name: str
    input_shape: tuple[int, ...]
    init_args: tuple
    build: Callable[..., object]  # init_args -> torch.nn.Module
    source: str = f"KernelBench@{KERNELBENCH_COMMIT}"

    @property
    def key(self) -> str:
        return f"L{self.level}/{self.number}"

    def make_model(self, device="cpu"):
        return self.build(*self.init_args).to(device).eval()

    def make_inputs(self, device="cpu", seed: int | None = None, shape: tuple[int, ...] | None = None):
        """[x]: CPU torch.rand (seeded when `seed` is given) copied to `device`."""
        import torch

        gen = torch.Generator().manual_seed(seed) if seed is not None else None
        x = torch.rand(shape or self.input_shape, generator=gen)
        return [x.to(device)]


def _layer_norm_model(normalized_shape):
    import torch

    class Model(torch.nn.Module):
        """KernelBench L1/40: nn.LayerNorm over the trailing dims, default affine init (gamma=1, beta=0)."""

        def __init__(self, normalized_shape):
            super().__init__()
            self.ln = torch.nn.LayerNorm(normalized_shape=normalized_shape)

        def forward(self, x):
            return self.ln(x)

    return Model(normalized_shape)


LAYER_NORM_L1_40 = Task(1, 40, "LayerNorm", (16, 64, 256, 256), ((64, 256, 256),), _layer_norm_model)

# L1/36 (RMSNorm), 38 (L1Norm) and 39 (L2Norm) join here for the layout follow-up.
TASKS = {t.key: t for t in (LAYER_NORM_L1_40,)}


def get_task(key: str) -> Task:
    if key not in TASKS:
        raise ValueError(f"unknown task {key!r}; known: {sorted(TASKS)}")
    return TASKS[key]
