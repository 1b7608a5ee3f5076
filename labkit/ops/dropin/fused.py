"""labkit.fused_layer_norm: LayerNorm and the elementwise ops after it in one output pass, with the bits of torch's
eager chain `F.layer_norm -> activation -> * scale -> + residual` (labkit.ops.epilogue, kernels/epilogue.cuh).

One call: `fused_layer_norm` validates (ValueError before any launch), finds the signature's `FusedPlan` (made once:
our fused launches where the drop-in's predicate takes the input, the trust gate allows our kernels and a path with
an epilogue takes the shape; else the chain in torch, with the reason), then runs it: the plan's launches bound to
the device, or `compose(labkit.layer_norm(...))`. `explain_fused` says which and why.

Autograd (`_FusedLayerNorm`): the fused forward keeps x, mean and rstd; the backward is a composition of pieces
that each have torch's bits: LayerNorm's output recomputed by the drop-in (torch's bits, as the forward's own pass
computes it), the epilogue's backward by torch's own ops (labkit.ops.epilogue.grad_of_layer_norm_output), then the
drop-in's LayerNorm backward (labkit.ops.dropin.plan.backward). The residual's gradient is the incoming one, as
torch's AddBackward0 passes it. A backward that records a graph (create_graph=True) goes through torch's chain.
"""
from __future__ import annotations

import math
import warnings
from typing import Optional, Sequence

import numpy as np
import torch
from torch import Tensor

from labkit.core.launch import device_scope, stream
from labkit.ops import eligibility, paths, trust
from labkit.ops.dropin import op
from labkit.ops.dropin import plan as plans
from labkit.ops.epilogue import Epilogue, compose, grad_of_layer_norm_output
from labkit.ops.epilogue import launches as epilogue_launches
from labkit.ops.launches import bound

_plans: dict[tuple, "FusedPlan"] = {}
plans.dependent_caches.append(_plans)  # made from the trust verdict and the table, as the drop-in's plans are


class FusedPlan:
    """How one signature is served: `launch` (our fused launches, bound) or None (torch's chain, for `reason`)."""

    launch = None
    path = paths.NATIVE

    def __init__(self, reason: str):
        self.reason = reason


class FusedKernelPlan(FusedPlan):
    """Our fused launches for an eligible signature, bound to its device; torch's chain for a misaligned call."""

    def __init__(self, launches, x, ns: tuple, weight, bias, eps: float):
        super().__init__(f"fused: {launches.path} with the epilogue in its output pass")
        self.path, self.index, self.device = launches.path, x.get_device(), x.device
        self.shape = tuple(x.shape)
        self.stat_shape = self.shape[:x.dim() - len(ns)] + (1,) * len(ns)
        self.eps_arg = np.float32(eps)
        self.scratch_bytes, self.rows = launches.scratch.nbytes, launches.rows
        # absent affine as the drop-in's KernelPlan serves it: gamma 1 and beta -0.0 give torch's bits
        self.ones = torch.ones(ns, device=x.device) if weight is None else None
        self.neg_zeros = torch.full(ns, -0.0, device=x.device) if bias is None else None
        self.launch = bound(launches, self.index)

    def misaligned(self, x, weight, bias, residual) -> bool:
        """A buffer off float4 alignment: torch's own LayerNorm would leave its vectorized path, so the chain in
        torch serves this call."""
        ptrs = [x.data_ptr(), (weight if weight is not None else self.ones).data_ptr(),
                (bias if bias is not None else self.neg_zeros).data_ptr()]
        if residual is not None:
            ptrs.append(residual.data_ptr())
        return eligibility.misaligned(*ptrs)

    def forward(self, x, weight, bias, residual, stats: bool):
        """out, or with `stats` (out, mean, rstd), on aligned buffers (`misaligned` is the caller's check). Without
        stats, mean and rstd live behind the scratch in one allocation, as the drop-in's KernelPlan keeps them."""
        device = self.device
        out = torch.empty(self.shape, dtype=torch.float32, device=device)
        if stats:
            mean = torch.empty(self.stat_shape, dtype=torch.float32, device=device)
            rstd = torch.empty(self.stat_shape, dtype=torch.float32, device=device)
            scratch = torch.empty(self.scratch_bytes, dtype=torch.uint8, device=device) if self.scratch_bytes \
                else None
            mp, rp = mean.data_ptr(), rstd.data_ptr()
        else:
            scratch = torch.empty(self.scratch_bytes + 8 * self.rows, dtype=torch.uint8, device=device)
            mp = scratch.data_ptr() + self.scratch_bytes
            rp = mp + 4 * self.rows
        w = weight if weight is not None else self.ones
        b = bias if bias is not None else self.neg_zeros
        with device_scope(self.index):
            self.launch((x.data_ptr(), w.data_ptr(), b.data_ptr(), out.data_ptr(), mp, rp,
                         scratch.data_ptr() if scratch is not None else 0,
                         residual.data_ptr() if residual is not None else 0), self.eps_arg, stream(self.index))
        return (out, mean, rstd) if stats else out


def _residual_refusal(x, residual) -> Optional[str]:
    """Why our kernels do not take this residual (they read it as x's layout in float4s), or None."""
    if residual is None:
        return None
    if residual.device != x.device:
        return f"residual is on {residual.device}, x on {x.device}"
    if not residual.is_contiguous() or residual.is_neg() or residual._is_zerotensor():
        return "residual is not a plain contiguous tensor"
    return None


def make_plan(x, ns: tuple, weight, bias, eps: float, epilogue: Epilogue, residual) -> tuple[FusedPlan, bool]:
    """(plan, cacheable): our fused launches, or torch's chain with the reason."""
    capturing = x.device.type == "cuda" and torch.cuda.is_current_stream_capturing()
    why = plans.refusal(x, ns, weight, bias, eps) or _residual_refusal(x, residual)
    if why is not None:
        return FusedPlan(why), not capturing
    from labkit.core.device import device_info

    n = math.prod(ns)
    try:
        launches = epilogue_launches(x.numel() // n, n, device_info(x.get_device()), epilogue)
    except ValueError as exc:
        return FusedPlan(str(exc)), not capturing
    trusted = trust.verdict(x.get_device())
    if not trusted.allowed:
        return FusedPlan(f"trust: {trusted.source}"), trusted.final and not capturing
    if capturing:
        return FusedPlan("first call under CUDA graph capture: our kernels are prepared outside capture"), False
    why = epilogue_refusal(x.get_device(), epilogue)
    if why is not None:
        return FusedPlan(f"the epilogue's check on this install: {why}"), True
    return FusedKernelPlan(launches, x, ns, weight, bias, eps), True


# --- the epilogue's check: the trust gate's canary covers the LayerNorm, this covers the ops after it -----------------
# The epilogue's bits rest on NVRTC building torch's expressions as nvcc built them (erff, tanhf, expf from the same
# CUDA math library, the same contractions): the GPU tests check it where they run, no toolchain promises it. So
# before an epilogue's first plan on a device, each path that carries it runs it on a few rows against torch's
# chain; a mismatch leaves that epilogue to torch's chain on that device, with a warning. LABKIT_TRUST=off skips it.
CHECK_SHAPES = ((4, 1 << 15), (64, 1024), (33, 768))  # the chain's rows and rows_fused's two layouts
_checked: dict[tuple, Optional[str]] = {}  # (device index, the epilogue's options) -> None or the first mismatch


def epilogue_refusal(index: int, epilogue: Epilogue) -> Optional[str]:
    """None where every path carrying `epilogue`'s ops gives torch's chain's bits on device `index` (checked once
    per process, device and option set), else the first mismatch."""
    if trust.mode() == "off":
        return None
    key = (index, epilogue.options)
    if key not in _checked:
        with torch.no_grad():
            why = _check(index, epilogue)
        if why is not None:
            warnings.warn(f"labkit: fused_layer_norm's {epilogue} does not give torch's bits on device {index}: "
                          f"{why}; torch's chain serves it", RuntimeWarning, stacklevel=4)
        _checked[key] = why
    return _checked[key]


def _check(index: int, epilogue: Epilogue) -> Optional[str]:
    """The first mismatch of any path carrying `epilogue` against torch's chain on CHECK_SHAPES, or None."""
    from labkit.core.device import device_info
    from labkit.ops import epilogue as ep

    device, where = device_info(index), f"cuda:{index}"
    g = torch.Generator(device=where).manual_seed(56)
    for rows, n in CHECK_SHAPES:
        # LayerNorm outputs spread over GELU's and SiLU's curved range and their tails (gamma to about 4, beta 2)
        x = torch.randn(rows, n, device=where, generator=g) * 3 + 1
        w, b = (torch.randn(n, device=where, generator=g) * 2 for _ in range(2))
        res = torch.randn(rows, n, device=where, generator=g) if epilogue.residual else None
        want = compose(torch.nn.functional.layer_norm(x, (n,), w, b, 1e-5), epilogue, res).view(torch.int32)
        for path, base in ep.candidates(rows, n, device).items():
            plan = FusedKernelPlan(ep.EpilogueLaunches(base, epilogue), x, (n,), w, b, 1e-5)
            got = plan.forward(x, w, b, res, False).view(torch.int32)
            if not torch.equal(got, want):
                at = tuple((got != want).nonzero()[0].tolist())
                return (f"{path} at {rows} x {n}: first difference at {at}, bits {got[at].item() & 0xffffffff:#010x} "
                        f"against torch's {want[at].item() & 0xffffffff:#010x}")
    return None


def get_plan(x, ns: tuple, weight, bias, eps: float, epilogue: Epilogue, residual) -> FusedPlan:
    key = plans.signature(x, ns, weight, bias, eps, False) + (epilogue, None if residual is None else (
        residual.stride(), residual.get_device(), residual.is_neg(), residual._is_zerotensor()))
    p = _plans.get(key)
    if p is None:
        p, cacheable = make_plan(x, ns, weight, bias, eps, epilogue, residual)
        if cacheable:
            if len(_plans) >= plans.MAX_PLANS:
                _plans.clear()
            _plans[key] = p
    return p


_EPILOGUES: dict[tuple, Epilogue] = {}  # (activation, scale, residual?) -> Epilogue: a model repeats a few


def _epilogue(activation, scale, residual: bool) -> Epilogue:
    """Epilogue(activation, scale, residual), its checks made once per distinct hashable argument triple."""
    key = (activation, type(scale), scale, residual)
    try:
        e = _EPILOGUES.get(key)
    except TypeError:  # an unhashable argument: Epilogue names what is wrong with it
        return Epilogue(activation, scale, residual)
    if e is None:
        e = Epilogue(activation, scale, residual)
        if len(_EPILOGUES) < 1024:
            _EPILOGUES[key] = e
    return e


def _validate(x, epilogue: Epilogue, residual) -> None:
    """ValueError for what the API does not take, before any launch (what our kernels do not take is served by
    torch's chain instead)."""
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if residual is None:
        return
    if not isinstance(residual, torch.Tensor):
        raise ValueError(f"residual must be a torch.Tensor or None, got {type(residual).__name__}")
    if residual.shape != x.shape:
        raise ValueError(f"residual.shape must equal x.shape {tuple(x.shape)} (no broadcasting), got "
                         f"{tuple(residual.shape)}")
    if residual.dtype != x.dtype:
        raise ValueError(f"residual.dtype must equal x.dtype {x.dtype}, got {residual.dtype}")


def _chain(x, ns, weight, bias, eps, epilogue, residual):
    """torch's eager chain, its LayerNorm the drop-in's (torch's bits, our kernels where they serve)."""
    return compose(op.layer_norm(x, ns, weight, bias, eps), epilogue, residual)


def fused_layer_norm(x: Tensor, normalized_shape: Sequence[int] | int, weight: Optional[Tensor] = None,
                     bias: Optional[Tensor] = None, eps: float = 1e-5, *, activation: Optional[str] = None,
                     scale: Optional[float] = None, residual: Optional[Tensor] = None) -> Tensor:
    """act(F.layer_norm(x, normalized_shape, weight, bias, eps)) * scale + residual, with the bits of that eager
    chain in torch, in one output pass where our kernels take the input.

    Args:
        x, normalized_shape, weight, bias, eps: as torch.nn.functional.layer_norm.
        activation: None, "gelu" (F.gelu), "gelu_tanh" (F.gelu(approximate="tanh")), "relu" or "silu".
        scale: a Python scalar multiplying the activation's output (torch's `* scale`), or None.
        residual: a tensor of x's shape and dtype added last (torch's `+ residual`), or None.
    Returns:
        out, shaped as x; differentiable in x, weight, bias and residual.
    Raises:
        ValueError naming the value: an activation not in labkit.ops.epilogue.ACTIVATIONS, a scale that is not a
        real number, a residual not shaped or typed as x. Inputs our kernels do not take (CPU tensors, a layout
        torch's vectorized kernel leaves, misaligned buffers, an untrusted install, autocast, modes and transforms)
        are served by torch's chain, with its bits by definition. Under torch.compile the chain is traced: its
        LayerNorm stays the drop-in's opaque op, but Inductor compiles the ops after it, with its own bits.
    """
    epilogue = _epilogue(activation, scale, residual is not None)
    _validate(x, epilogue, residual)
    ns = op._normalized_cached(normalized_shape)
    if epilogue.empty:
        return op.layer_norm(x, ns, weight, bias, eps)
    if not op.plain_eager(x, weight, bias, residual):
        return _chain(x, ns, weight, bias, eps, epilogue, residual)
    p = get_plan(x, ns, weight, bias, eps, epilogue, residual)
    if p.launch is None or p.misaligned(x, weight, bias, residual):
        return _chain(x, ns, weight, bias, eps, epilogue, residual)
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, weight, bias, residual)):
        return _FusedLayerNorm.apply(x, weight, bias, residual, ns, eps, epilogue, p)
    return p.forward(x, weight, bias, residual, False)


class _FusedLayerNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, residual, ns, eps, epilogue, plan):
        out, mean, rstd = plan.forward(x, weight, bias, residual, True)
        ctx.save_for_backward(x, mean, rstd, weight, bias)
        # the backward plans by the protocol the forward was called under (autograd's worker thread has none)
        ctx.ns, ctx.eps, ctx.epilogue, ctx.protocol = ns, eps, epilogue, plans.current_protocol()
        return out

    @staticmethod
    def backward(ctx, grad_out):
        x, mean, rstd, weight, bias = ctx.saved_tensors
        need_x, need_w, need_b, need_r = ctx.needs_input_grad[:4]
        grad_residual = grad_out if need_r else None
        if not (need_x or need_w or need_b):  # the residual's alone: nothing to recompute
            return None, None, None, grad_residual, None, None, None, None
        ep = Epilogue(ctx.epilogue.activation, ctx.epilogue.scale)  # the residual adds nothing to d out / d y
        if torch.is_grad_enabled():  # create_graph: torch's chain, whose backward is differentiable
            wanted = [t for t, n in zip((x, weight, bias), (need_x, need_w, need_b)) if n]
            out = compose(torch.nn.functional.layer_norm(x, ctx.ns, weight, bias, ctx.eps), ep)
            grads = iter(torch.autograd.grad(out, wanted, grad_out, create_graph=True))
            gx, gw, gb = (next(grads) if n else None for n in (need_x, need_w, need_b))
            return gx, gw, gb, grad_residual, None, None, None, None
        y = op.layer_norm(x, ctx.ns, weight, bias, ctx.eps)  # torch's bits: what the fused pass computed y as
        grad_y = grad_of_layer_norm_output(grad_out, y, ep)
        with plans.dispatch_protocol(ctx.protocol):
            gx, gw, gb = plans.backward(grad_y, x, ctx.ns, mean, rstd, weight, bias, (need_x, need_w, need_b))
        return gx, gw, gb, grad_residual, None, None, None, None


def explain_fused(x: Tensor, normalized_shape, weight: Optional[Tensor] = None, bias: Optional[Tensor] = None,
                  eps: float = 1e-5, *, activation: Optional[str] = None, scale: Optional[float] = None,
                  residual: Optional[Tensor] = None) -> dict:
    """{"path", "reason"}: which path's fused launches serve this call, or "native" (torch's chain) and why."""
    epilogue = Epilogue(activation, scale, residual is not None)
    _validate(x, epilogue, residual)
    ns = op._normalized(normalized_shape)
    if epilogue.empty:
        return {"path": paths.NATIVE, "reason": "no epilogue: labkit.layer_norm serves (labkit.explain says how)"}
    if not op.plain_eager(x, weight, bias, residual):
        return {"path": paths.NATIVE, "reason": "not a plain eager call (autocast, compile, a mode, a transform or "
                                                "a subclass): torch's chain"}
    p = get_plan(x, ns, weight, bias, eps, epilogue, residual)
    if p.launch is not None and p.misaligned(x, weight, bias, residual):
        return {"path": paths.NATIVE, "reason": "a buffer is not 16-byte aligned: torch's chain serves this call"}
    return {"path": p.path, "reason": p.reason}
