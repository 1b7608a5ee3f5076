"""The elementwise ops that follow LayerNorm, fused into its output pass: out = act(layer_norm(x)) * scale + residual,
with the bits of torch's eager chain (kernels/epilogue.cuh says how each op keeps them).

- `Epilogue`: which ops, as data (its compile options; the scale travels as a kernel argument);
- `compose`: the eager chain in torch, the reference the kernels are tested against and what serves an input our
  kernels cannot take;
- `launches(rows, n, device, epilogue)`: a path's launches with the epilogue in the kernel that writes y, on the
  paths whose output kernel carries it (PATHS);
- `grad_of_layer_norm_output`: the epilogue's backward as torch's autograd computes it, from torch's own ops, to
  feed the LayerNorm backward (labkit.ops.dropin.fused).
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, replace

from labkit.core.device import Device
from labkit.core.program import F32, FORWARD_SLOTS, BoundProgram, Launch, Program, Ptr
from labkit.ops import paths

# activation name -> kernels/epilogue.cuh's EPILOGUE_ACT; names as torch spells them (F.gelu's approximate="tanh")
ACTIVATIONS = {None: 0, "gelu": 1, "gelu_tanh": 2, "relu": 3, "silu": 4}

# The kernel files whose output pass takes -DEPILOGUE, and the paths whose launch writing y is one of them:
# the chain's output pass (affine_columns.cu) and every entry point of rows_fused.cu. The others (rows_staged,
# rows_cluster, reference_order) do not carry it; `launches` offers only these (tests/test_epilogue.py checks
# the two lists agree with what each path launches).
KERNELS = ("affine_columns", "rows_fused")
PATHS = ("chain", "rows_fused", "rows_counted", "rows_counted_block")

SLOTS = FORWARD_SLOTS + ("residual",)  # the fused call's pointers: the residual after the forward's own


@dataclass(frozen=True)
class Epilogue:
    """out = activation(y) * scale + residual, each op present or not: `activation` one of ACTIVATIONS (None:
    none), `scale` a real number or None (the scalar is rounded to float32 once, as torch's mul rounds a Python
    scalar), `residual` whether a tensor shaped as x is added. ValueError naming the value for anything else."""

    activation: str | None = None
    scale: float | None = None
    residual: bool = False

    def __post_init__(self):
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {tuple(ACTIVATIONS)}, got {self.activation!r}")
        s = self.scale
        if s is not None and (isinstance(s, bool) or not isinstance(s, numbers.Real)):
            raise ValueError(f"scale must be a real number (a Python scalar, as torch's mul takes it) or None, got "
                             f"{s!r} of type {type(s).__name__}")
        if s is not None:
            try:
                f = float(s)
            except OverflowError:
                f = math.inf
            if not math.isfinite(f):  # a NaN key would also miss every plan cache (NaN != NaN)
                raise ValueError(f"scale must be a finite number, got {repr(s)[:40]}")
            object.__setattr__(self, "scale", f)  # one hashable kind: 2 and 2.0 are one plan

    @property
    def empty(self) -> bool:
        return self.activation is None and self.scale is None and not self.residual

    @property
    def options(self) -> tuple[str, ...]:
        """The -D flags of kernels/epilogue.cuh for these ops (the scale's value is an argument, not an option)."""
        out = ("-DEPILOGUE", f"-DEPILOGUE_ACT={ACTIVATIONS[self.activation]}")
        if self.scale is not None:
            out += ("-DEPILOGUE_SCALE",)
        if self.residual:
            out += ("-DEPILOGUE_RESIDUAL",)
        return out

    @property
    def scale_f32(self) -> float:
        """The scale as the kernel argument (any value where the epilogue has none: the kernel does not read it)."""
        return 0.0 if self.scale is None else self.scale


def compose(y, epilogue: Epilogue, residual=None):
    """torch's eager chain on LayerNorm's output y: activation, then * scale, then + residual."""
    import torch.nn.functional as F

    a = epilogue.activation
    if a == "gelu":
        y = F.gelu(y)
    elif a == "gelu_tanh":
        y = F.gelu(y, approximate="tanh")
    elif a == "relu":
        y = F.relu(y)
    elif a == "silu":
        y = F.silu(y)
    if epilogue.scale is not None:
        y = y * epilogue.scale
    if epilogue.residual:
        y = y + residual
    return y


def grad_of_layer_norm_output(grad_out, y, epilogue: Epilogue):
    """d(sum(out * grad_out)) / dy as torch's autograd computes it through the eager chain, node by node in reverse
    with torch's own backward ops (so with their bits): AddBackward0 passes the gradient on unchanged, MulBackward0
    multiplies it by the scalar (grad * other), then GeluBackward0 (gelu_backward with its approximate),
    ReluBackward0 (threshold_backward on relu's result, at 0) or SiluBackward0 (silu_backward)."""
    import torch

    g = grad_out
    if epilogue.scale is not None:
        g = g * epilogue.scale
    a = epilogue.activation
    if a in ("gelu", "gelu_tanh"):
        g = torch.ops.aten.gelu_backward(g, y, approximate="none" if a == "gelu" else "tanh")
    elif a == "relu":
        g = torch.ops.aten.threshold_backward(g, torch.relu(y), 0)
    elif a == "silu":
        g = torch.ops.aten.silu_backward(g, y)
    return g


@dataclass(frozen=True)
class EpilogueLaunches:
    """A path's launches (`base`) with `epilogue` in the launch that writes y: that kernel compiled with the
    epilogue's options and given two more arguments, the residual slot's address and the scale. The program's
    slots are SLOTS; a bound call takes (x, weight, bias, y, mean, rstd, scratch, residual)."""

    base: object
    epilogue: Epilogue

    @property
    def rows(self) -> int:
        return self.base.rows

    @property
    def n(self) -> int:
        return self.base.n

    @property
    def scratch(self):
        return self.base.scratch

    @property
    def path(self) -> str:
        return self.base.path

    def program(self, device_index: int) -> Program:
        p = self.base.program(device_index)
        return Program(SLOTS, tuple(self._fused(step) for step in p.steps))

    def _fused(self, step):
        if not (isinstance(step, Launch) and Ptr("y") in step.args):
            return step
        if step.kernel.kernel not in KERNELS:
            raise ValueError(f"path {self.path!r} writes y with kernels/{step.kernel.kernel}.cu, which has no "
                             f"epilogue (those that do: {KERNELS})")
        kernel = replace(step.kernel, options=step.kernel.options + self.epilogue.options)
        return Launch(kernel, step.args + (Ptr("residual"), F32(self.epilogue.scale_f32)), step.stage)

    def bind(self, device_index: int) -> BoundProgram:
        return BoundProgram(self.program(device_index), device_index)


def candidates(rows: int, n: int, device: Device) -> dict:
    """{path: launches} for every path of PATHS that can take rows x N on `device`."""
    out = {}
    for name in PATHS:
        try:
            out[name] = paths.launches(name, rows, n, device)
        except ValueError:
            continue
    return out


def launches(rows: int, n: int, device: Device, epilogue: Epilogue) -> EpilogueLaunches:
    """The fused launches for rows x N on `device`: the fastest of PATHS that can take the shape by the device's
    table (labkit.ops.dispatch.rule.schedule: torch's own kernel is no candidate, it has no epilogue to fuse);
    ValueError where none can."""
    from labkit.ops.dispatch import rule

    available = candidates(rows, n, device)
    if not available:
        raise ValueError(f"no path with an epilogue ({', '.join(PATHS)}) takes {rows} x {n} on {device.arch_name}")
    return EpilogueLaunches(available[rule.schedule(rows, n, device, tuple(available))], epilogue)
