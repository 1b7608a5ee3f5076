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

# --- shapes every study, notebook, benchmark and test reads (rows first; LayerNorm over all but the first dim) ---
L1_40 = LAYER_NORM_L1_40.input_shape                                  # 16 rows of 4,194,304
EXTRA_SHAPES = ((8, 32, 128, 256), (4096, 1, 1, 1024), (3, 64, 17, 19))  # the post's other timing shapes
UNEVEN_SHAPE = (3, 64, 17, 19)  # N = 20,672: N/4 = 5,168 = 40*128 + 48, so threads push unequal counts
EDGE_SHAPE = (4, 8, 16)         # 4 rows of 128: zero/tiny/subnormal/non-finite controls


@dataclass(frozen=True)
class StudyConfig:
    """What a notebook runs in one mode: "quick" (minutes on a GPU, small shapes) or "full" (the L1/40 shape)."""

    mode: str
    matrix_shape: tuple[int, ...]                 # bit-identity and fast-statistics matrices (01, 02, 07)
    smoke_shapes: tuple[tuple[int, ...], ...]     # environment notebook's pipeline check (00)
    timing_shapes: tuple[tuple[int, ...], ...]    # timing study (03, 07)
    breakdown_shape: tuple[int, ...]              # stage breakdown of the chain kernel (07)
    max_rounds_a: int | None                      # protocol A rounds cap (None: as asked)
    max_rounds_b: int | None                      # protocol B rounds cap
    allclose_trials: int                          # random allclose-vs-predicate trials per seed and device (04)


CONFIGS = {  # mode -> what each notebook runs
    "quick": StudyConfig("quick", (4, 64, 32, 32), ((3, 64, 17, 19), (8, 4096)),
                         ((4096, 1, 1, 1024), (3, 64, 17, 19)), (4, 64, 64, 64), 5, 10, 600),
    "full": StudyConfig("full", L1_40, ((3, 64, 17, 19), (8, 4096), L1_40), (L1_40, *EXTRA_SHAPES), L1_40,
                        None, None, 5000),
}


MODES = ("quick", "full")


def config(mode: str) -> StudyConfig:
    if mode not in CONFIGS:
        raise ValueError(f"mode must be one of {tuple(CONFIGS)}, got {mode!r}")
    return CONFIGS[mode]


def shape_key(shape) -> str:
    """'16x64x256x256': how records name a shape."""
    return "x".join(str(int(d)) for d in shape)


def get_task(key: str) -> Task:
    if key not in TASKS:
        raise ValueError(f"unknown task {key!r}; known: {sorted(TASKS)}")
    return TASKS[key]


# --- the layout follow-up (notebook 09): small-channel normalization over dim 1 ----------------------------------
# Written from the pinned revision's definitions (facts, not code): L1/36 RMS norm x / sqrt(mean(x**2, dim=1) + eps)
# with eps 1e-5 and input (112, 64, 512, 512); L1/38 x / mean(abs(x), dim=1), input (32768, 65535); L1/39
# x / norm(x, p=2, dim=1), input (32768, 65535). Each keeps the reduced dim (keepdim=True).

def _channel_norm_model(family, eps=None):
    import torch

    from labkit.lab import channel_norm

    class Model(torch.nn.Module):
        """KernelBench L1/36, 38 or 39: normalization over dim 1, the task's forward expression."""

        def __init__(self):
            super().__init__()
            self.eps = channel_norm.EPS if eps is None else eps

        def forward(self, x):
            return channel_norm.reference(family, x, self.eps)

    return Model()


RMS_NORM_L1_36 = Task(1, 36, "RMSNorm", (112, 64, 512, 512), ("rms", 1e-5), _channel_norm_model)
L1_NORM_L1_38 = Task(1, 38, "L1Norm", (32768, 65535), ("mean_abs", 0.0), _channel_norm_model)
L2_NORM_L1_39 = Task(1, 39, "L2Norm", (32768, 65535), ("l2", 0.0), _channel_norm_model)
TASKS.update({t.key: t for t in (RMS_NORM_L1_36, L1_NORM_L1_38, L2_NORM_L1_39)})
LAYOUT_TASKS = {"rms": RMS_NORM_L1_36, "mean_abs": L1_NORM_L1_38, "l2": L2_NORM_L1_39}  # family -> task
# Not the tasks' default shapes: the post's small-channel evaluation form, (4, C, 512, 512) reduced over C, the
# regime where the NCHW-vs-rows layout question arises (L1/38 and L1/39's defaults reduce over a contiguous dim of
# 65,535 floats: already rows, no layout choice).
LAYOUT_SHAPE = (4, 64, 512, 512)
LAYOUT_CHANNELS = (32, 64, 128)
LAYOUT_QUICK_SHAPE = (2, 64, 64, 64)  # quick mode on a GPU: the same channels, a small spatial extent


def layout_shape(channels: int, mode: str = "full") -> tuple[int, ...]:
    """The evaluation shape with `channels` in dim 1 (quick mode: LAYOUT_QUICK_SHAPE's spatial extent)."""
    config(mode)
    if not isinstance(channels, int) or channels < 2:
        raise ValueError(f"channels must be an int >= 2, got {channels!r}")
    base = LAYOUT_SHAPE if mode == "full" else LAYOUT_QUICK_SHAPE
    return (base[0], channels, *base[2:])
