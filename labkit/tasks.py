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
    build_new: Callable[..., object] | None = None  # init_args -> its ModelNew, where labkit has one (issue 56)

    @property
    def key(self) -> str:
        return f"L{self.level}/{self.number}"

    def make_model(self, device="cpu"):
        return self.build(*self.init_args).to(device).eval()

    def make_model_new(self, device="cpu"):
        if self.build_new is None:
            raise ValueError(f"task {self.key} has no ModelNew here")
        return self.build_new(*self.init_args).to(device).eval()

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


# --- the fused consumer (issue 56): two level-2 tasks whose LayerNorm output is read once by the next op ---------
# Written from the pinned revision's definitions (facts, not code):
# L2/34 ConvTranspose3d(32 -> 64, kernel 4, stride 2, padding 1, bias) -> LayerNorm(64, eps 1e-5) -> F.gelu ->
#   * scaling_factor (1.0); input rand(32, 32, 16, 32, 32), so the convolution gives (32, 64, 32, 64, 64) and the
#   LayerNorm, over out_channels = 64, normalizes the last dim (W' = 64): 4,194,304 rows of 64.
# L2/3 ConvTranspose3d(32 -> 64, kernel 3, stride 2, padding 1, output_padding 1) -> + sum_weight (a Parameter,
#   1.0) -> LayerNorm((64,)) -> AvgPool3d(2) -> nn.GELU(); input rand(32, 32, 16, 32, 32), the same (32, 64, 32, 64,
#   64) after the convolution.
# Each task's ModelNew (`Task.build_new`) holds the same modules, made in the same order (so a seed gives both the
# same parameters, as KernelBench's evaluator seeds each before building it) and keeps the convolution, torch's;
# after it, labkit:
# - L2/34: labkit.fused_layer_norm with GELU and the scale in the LayerNorm's output pass;
# - L2/3: labkit.layer_norm alone. The op after its LayerNorm is AvgPool3d, a mean over 2x2x2 windows that cross
#   rows, which an output pass writing one row at a time cannot hold, and the GELU after the pool reads an eighth of
#   the data. The Sum before it could be fused into the statistics pass's reads (x + sum_weight rounded per element
#   as torch's add rounds it) but our kernels have no input-side option yet.

def _conv_ln_gelu_scale_model(fused: bool):
    import torch

    class Model(torch.nn.Module):
        """KernelBench L2/34: ConvTranspose3d -> LayerNorm(out_channels) -> GELU -> * scaling_factor (ModelNew:
        the last three as labkit.fused_layer_norm)."""

        def __init__(self, in_channels, out_channels, kernel_size, stride, padding, bias=True, eps=1e-5,
                     scaling_factor=1.0):
            super().__init__()
            self.conv_transpose = torch.nn.ConvTranspose3d(in_channels, out_channels, kernel_size, stride=stride,
                                                           padding=padding, bias=bias)
            self.layer_norm = torch.nn.LayerNorm(out_channels, eps=eps)
            self.scaling_factor = scaling_factor

        def forward(self, x):
            return _layer_norm_gelu_scale(self.layer_norm, self.conv_transpose(x), self.scaling_factor, fused)

    return Model


def _layer_norm_gelu_scale(ln, x, scale: float, fused: bool):
    """LayerNorm -> GELU -> * scale as L2/34 writes it (Model), or one labkit.fused_layer_norm (ModelNew)."""
    import torch

    if fused:
        from labkit.ops.dropin import fused_layer_norm

        return fused_layer_norm(x, ln.normalized_shape, ln.weight, ln.bias, ln.eps, activation="gelu", scale=scale)
    return torch.nn.functional.gelu(ln(x)) * scale


def _conv_sum_ln_pool_gelu_model(fused: bool):
    import torch

    class Model(torch.nn.Module):
        """KernelBench L2/3: ConvTranspose3d -> + sum_weight -> LayerNorm(norm_shape) -> AvgPool3d -> GELU
        (ModelNew: the LayerNorm as labkit.layer_norm)."""

        def __init__(self, in_channels, out_channels, kernel_size, stride, padding, output_padding, sum_weight,
                     norm_shape, pool_kernel_size):
            super().__init__()
            self.conv_transpose = torch.nn.ConvTranspose3d(in_channels, out_channels, kernel_size, stride=stride,
                                                           padding=padding, output_padding=output_padding)
            self.sum_weight = torch.nn.Parameter(torch.tensor(sum_weight))
            self.norm = torch.nn.LayerNorm(norm_shape)
            self.avg_pool = torch.nn.AvgPool3d(kernel_size=pool_kernel_size)
            self.gelu = torch.nn.GELU()

        def forward(self, x):
            x = self.conv_transpose(x) + self.sum_weight
            n = self.norm
            if fused:
                from labkit.ops.dropin import layer_norm

                x = layer_norm(x, n.normalized_shape, n.weight, n.bias, n.eps)
            else:
                x = n(x)
            return self.gelu(self.avg_pool(x))

    return Model


def _ln_gelu_scale_model(fused: bool):
    import torch

    class Model(torch.nn.Module):
        """L1/40's Model with L2/34's consumer after its LayerNorm: LayerNorm -> GELU -> * scaling_factor (ModelNew:
        one labkit.fused_layer_norm). Not a KernelBench task: the issue's L1/40 with a GELU + scale consumer."""

        def __init__(self, normalized_shape, scaling_factor):
            super().__init__()
            self.ln = torch.nn.LayerNorm(normalized_shape=normalized_shape)
            self.scaling_factor = scaling_factor

        def forward(self, x):
            return _layer_norm_gelu_scale(self.ln, x, self.scaling_factor, fused)

    return Model


def _class(model_class, fused: bool):
    """init_args -> the task's Model (fused False) or its ModelNew, named as KernelBench names them."""
    def build(*init_args):
        cls = model_class(fused)
        cls.__name__ = cls.__qualname__ = "ModelNew" if fused else "Model"
        return cls(*init_args)

    return build


CONV_LN_GELU_SCALE_L2_34 = Task(2, 34, "ConvTranspose3d_LayerNorm_GELU_Scaling", (32, 32, 16, 32, 32),
                                (32, 64, 4, 2, 1, True, 1e-5, 1.0), _class(_conv_ln_gelu_scale_model, False),
                                build_new=_class(_conv_ln_gelu_scale_model, True))
CONV_SUM_LN_POOL_GELU_L2_3 = Task(2, 3, "ConvTranspose3d_Sum_LayerNorm_AvgPool_GELU", (32, 32, 16, 32, 32),
                                  (32, 64, (3, 3, 3), (2, 2, 2), (1, 1, 1), (1, 1, 1), 1.0, (64,), (2, 2, 2)),
                                  _class(_conv_sum_ln_pool_gelu_model, False),
                                  build_new=_class(_conv_sum_ln_pool_gelu_model, True))
TASKS.update({t.key: t for t in (CONV_LN_GELU_SCALE_L2_34, CONV_SUM_LN_POOL_GELU_L2_3)})
L1_40_GELU_SCALE = Task(1, 40, "LayerNorm_GELU_Scaling", L1_40, (L1_40[1:], 2.0), _class(_ln_gelu_scale_model, False),
                        source="L1/40 with L2/34's consumer (issue 56), not a KernelBench task",
                        build_new=_class(_ln_gelu_scale_model, True))
# What the fused study evaluates as KernelBench's evaluator would: the two level-2 tasks, and L1/40 with a consumer
# (under its own name: TASKS' "L1/40" is the task itself)
FUSED_TASKS = {"L2/34": CONV_LN_GELU_SCALE_L2_34, "L2/3": CONV_SUM_LN_POOL_GELU_L2_3,
               "L1/40+gelu*2": L1_40_GELU_SCALE}
