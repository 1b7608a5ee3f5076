"""labkit.fused_layer_norm: LayerNorm and the elementwise ops after it in one output pass, with the bits of torch's
eager chain `F.layer_norm -> activation -> * scale -> + residual` (labkit.ops.epilogue, kernels/epilogue.cuh).

One call: `fused_layer_norm` validates (ValueError before any launch), finds the signature's `FusedPlan` (made once:
our fused launches where the drop-in's predicate takes the input, the trust gate allows our kernels and a path with
an epilogue takes the shape; else the chain in torch, with the reason), then runs it: the plan's launches bound to
the device, or `compose(labkit.layer_norm(...))`. `explain_fused` says which and why.

Autograd (`_FusedLayerNorm` in eager calls; the registered ops labkit::fused_layer_norm(_backward) under
torch.compile, modes and subclasses): the fused forward keeps x, mean and rstd; the backward is a composition of
pieces that each have torch's bits (`_grads`): LayerNorm's output recomputed by the drop-in (torch's bits, as the
forward's own pass computes it), the epilogue's backward by torch's own ops
(labkit.ops.epilogue.grad_of_layer_norm_output), then the drop-in's LayerNorm backward (labkit.ops.dropin.plan.backward).
The residual's gradient is the incoming one, as torch's AddBackward0 passes it. A backward that records a graph
(create_graph=True) goes through torch's chain.
"""
from __future__ import annotations

import math
import warnings
from typing import List, Optional, Sequence

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
    # the epilogue builds are float32's (labkit.ops.epilogue): torch's chain serves a 2-byte x
    why = f"the fused epilogues are built for float32 x, got {x.dtype}" if isinstance(x, torch.Tensor) and \
        x.dtype in (torch.bfloat16, torch.float16) else None
    why = why or plans.refusal(x, ns, weight, bias, eps) or _residual_refusal(x, residual)
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
plans.dependent_caches.append(_checked)  # cleared with the plans (labkit verify, a new LABKIT_TRUST)
STRICT = ("LABKIT_TRUST=strict serves verified keys only, and a verified key covers the LayerNorm's kernels, not an "
          "epilogue's ops (their check runs on this machine): torch's chain serves")


def epilogue_refusal(index: int, epilogue: Epilogue) -> Optional[str]:
    """None where every path carrying `epilogue`'s ops gives torch's chain's bits on device `index` (checked once
    per process, device and option set), else the first mismatch."""
    if trust.mode() == "off":
        return None
    if trust.mode() == "strict" and epilogue.options:
        return STRICT
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
    if residual.device != x.device:
        raise ValueError(f"residual.device must equal x.device {x.device}, got {residual.device}")


def _chain(x, ns, weight, bias, eps, epilogue, residual):
    """torch's eager chain, its LayerNorm the drop-in's (torch's bits, our kernels where they serve)."""
    return compose(op.layer_norm(x, ns, weight, bias, eps), epilogue, residual)


# --- the backward, shared by the eager node and the registered op ----------------------------------------------------

def _grads(grad_out, x, ns: tuple, mean, rstd, weight, bias, eps: float, epilogue: Epilogue, need) -> tuple:
    """(dx, dweight, dbias), None where not in `need`: LayerNorm's output recomputed by the drop-in (torch's bits,
    what the fused pass computed before its epilogue), the epilogue's backward by torch's own ops, then the drop-in's
    LayerNorm backward. `epilogue` without its residual: the residual adds nothing to d out / d y."""
    y = op.layer_norm(x, ns, weight, bias, eps)
    grad_y = grad_of_layer_norm_output(grad_out, y, epilogue)
    return plans.backward(grad_y, x, ns, mean, rstd, weight, bias, tuple(need))


def _grads_through_torch(grad_out, x, ns, weight, bias, eps: float, epilogue: Epilogue, need) -> tuple:
    """The same grads with their graph (create_graph=True): through torch's chain, whose backward is differentiable
    (ours is not), as the drop-in's grads_through_torch does for the LayerNorm alone."""
    wanted = [t for t, n in zip((x, weight, bias), need) if n]
    out = compose(torch.nn.functional.layer_norm(x, ns, weight, bias, eps), epilogue)
    grads = iter(torch.autograd.grad(out, wanted, grad_out, create_graph=True))
    return tuple(next(grads) if n else None for n in need)


class _FusedLayerNorm(torch.autograd.Function):
    """The eager autograd path: the plan's fused forward, then `_grads`, with no dispatcher in between."""

    @staticmethod
    def forward(ctx, x, weight, bias, residual, ns, eps, epilogue, plan):
        out, mean, rstd = plan.forward(x, weight, bias, residual, True)
        ctx.save_for_backward(x, mean, rstd, weight, bias)
        # the backward plans by the protocol the forward was called under (autograd's worker thread has none)
        ctx.ns, ctx.eps, ctx.protocol = ns, eps, plans.current_protocol()
        ctx.epilogue = Epilogue(epilogue.activation, epilogue.scale)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        x, mean, rstd, weight, bias = ctx.saved_tensors
        need = ctx.needs_input_grad[:3]
        grad_residual = grad_out if ctx.needs_input_grad[3] else None
        if not any(need):  # the residual's alone: nothing to recompute
            gx = gw = gb = None
        elif torch.is_grad_enabled():
            gx, gw, gb = _grads_through_torch(grad_out, x, ctx.ns, weight, bias, ctx.eps, ctx.epilogue, need)
        else:
            with plans.dispatch_protocol(ctx.protocol):
                gx, gw, gb = _grads(grad_out, x, ctx.ns, mean, rstd, weight, bias, ctx.eps, ctx.epilogue, need)
        return gx, gw, gb, grad_residual, None, None, None, None


# --- labkit::fused_layer_norm and its backward: the call as opaque ops, for torch.compile, modes and subclasses ---------
# Traced, torch's chain would be compiled by Inductor with its own arithmetic for the ops after the LayerNorm; as
# opaque ops (their fake implementations torch's own native_layer_norm) a compiled graph runs the eager call, and its
# backward the same composition as the eager node's.

def _forward_impl(x: Tensor, normalized_shape: List[int], weight: Optional[Tensor], bias: Optional[Tensor],
                  eps: float, activation: Optional[str], scale: Optional[float],
                  residual: Optional[Tensor]) -> tuple[Tensor, Tensor, Tensor]:
    """(out, mean, rstd): our fused launches where the plan has them, else torch's chain on the drop-in's forward."""
    ns, epilogue = tuple(normalized_shape), _epilogue(activation, scale, residual is not None)
    p = get_plan(x, ns, weight, bias, eps, epilogue, residual)
    if p.launch is not None and not p.misaligned(x, weight, bias, residual):
        return p.forward(x, weight, bias, residual, True)
    y, mean, rstd = plans.get_plan(x, ns, weight, bias, eps, True).forward(x, weight, bias, True)
    return compose(y, epilogue, residual), mean, rstd


fused_layer_norm_op = torch.library.custom_op("labkit::fused_layer_norm", mutates_args=())(_forward_impl)


@fused_layer_norm_op.register_fake
def _forward_fake(x, normalized_shape, weight, bias, eps, activation, scale, residual):
    y, mean, rstd = torch.ops.aten.native_layer_norm.default(x, normalized_shape, weight, bias, eps)
    return torch.empty_like(y), mean, rstd


def _backward_impl(grad_out: Tensor, x: Tensor, normalized_shape: List[int], mean: Tensor, rstd: Tensor,
                   weight: Optional[Tensor], bias: Optional[Tensor], eps: float, activation: Optional[str],
                   scale: Optional[float], output_mask: List[bool]) -> tuple[Tensor, Tensor, Tensor]:
    """(grad_x, grad_weight, grad_bias) by `_grads`; an output not asked for (or without its parameter) is an empty
    tensor (a custom op returns defined tensors)."""
    need = (output_mask[0], output_mask[1] and weight is not None, output_mask[2] and bias is not None)
    grads = _grads(grad_out, x, tuple(normalized_shape), mean, rstd, weight, bias, eps, Epilogue(activation, scale),
                   need)
    return tuple(g if g is not None else x.new_empty((0,)) for g in grads)


fused_layer_norm_backward_op = torch.library.custom_op("labkit::fused_layer_norm_backward",
                                                       mutates_args=())(_backward_impl)


@fused_layer_norm_backward_op.register_fake
def _backward_fake(grad_out, x, normalized_shape, mean, rstd, weight, bias, eps, activation, scale, output_mask):
    return tuple(torch.empty_like(t) if t is not None and n else x.new_empty((0,))
                 for t, n in zip((x, weight, bias), output_mask))


def _setup_context(ctx, inputs, output):
    x, normalized_shape, weight, bias, eps, activation, scale, _ = inputs
    _, mean, rstd = output
    ctx.save_for_backward(x, mean, rstd, weight, bias)
    ctx.ns, ctx.eps, ctx.epilogue = list(normalized_shape), eps, Epilogue(activation, scale)
    ctx.mark_non_differentiable(mean, rstd)


def _op_backward(ctx, grad_out, _grad_mean, _grad_rstd):
    x, mean, rstd, weight, bias = ctx.saved_tensors
    need = (ctx.needs_input_grad[0], ctx.needs_input_grad[2], ctx.needs_input_grad[3])
    grad_residual = grad_out if ctx.needs_input_grad[7] else None
    gx = gw = gb = None
    if any(need) and torch.is_grad_enabled():
        gx, gw, gb = _grads_through_torch(grad_out, x, ctx.ns, weight, bias, ctx.eps, ctx.epilogue, need)
    elif any(need):
        e = ctx.epilogue
        gx, gw, gb = fused_layer_norm_backward_op(grad_out, x, ctx.ns, mean, rstd, weight, bias, ctx.eps,
                                                  e.activation, e.scale, list(need))
    return (gx if need[0] else None, None, gw if need[1] else None, gb if need[2] else None, None, None, None,
            grad_residual)


fused_layer_norm_op.register_autograd(_op_backward, setup_context=_setup_context)


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
        torch's vectorized kernel leaves, misaligned buffers, an untrusted install, autocast, functorch transforms,
        forward-mode AD) are served by torch's chain, with its bits by definition. Under torch.compile, a dispatch
        mode or a tensor subclass the call is the opaque op labkit::fused_layer_norm (the same plans).
    """
    epilogue = _epilogue(activation, scale, residual is not None)
    _validate(x, epilogue, residual)
    ns = op._normalized_cached(normalized_shape)
    if epilogue.empty:
        return op.layer_norm(x, ns, weight, bias, eps)
    if not op.plain_eager(x, weight, bias, residual):
        if op.traced_or_wrapped(x, weight, bias, residual):  # compiling, a dispatch mode, a subclass: the op
            return fused_layer_norm_op(x, list(ns), weight, bias, eps, epilogue.activation, epilogue.scale,
                                       residual)[0]
        return _chain(x, ns, weight, bias, eps, epilogue, residual)  # autocast, functorch, forward-mode AD
    p = get_plan(x, ns, weight, bias, eps, epilogue, residual)
    if p.launch is None or p.misaligned(x, weight, bias, residual):
        return _chain(x, ns, weight, bias, eps, epilogue, residual)
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, weight, bias, residual)):
        return _FusedLayerNorm.apply(x, weight, bias, residual, ns, eps, epilogue, p)
    return p.forward(x, weight, bias, residual, False)


def explain_fused(x: Tensor, normalized_shape, weight: Optional[Tensor] = None, bias: Optional[Tensor] = None,
                  eps: float = 1e-5, *, activation: Optional[str] = None, scale: Optional[float] = None,
                  residual: Optional[Tensor] = None) -> dict:
    """{"path", "reason"}: which path's fused launches serve this call, or "native" (torch's chain) and why. Under
    torch.compile, a dispatch mode or a subclass the call is labkit::fused_layer_norm, planned the same way."""
    epilogue = Epilogue(activation, scale, residual is not None)
    _validate(x, epilogue, residual)
    ns = op._normalized(normalized_shape)
    if epilogue.empty:
        return {"path": paths.NATIVE, "reason": "no epilogue: labkit.layer_norm serves (labkit.explain says how)"}
    if not op.plain_eager(x, weight, bias, residual) and not op.traced_or_wrapped(x, weight, bias, residual):
        return {"path": paths.NATIVE, "reason": "autocast, a functorch transform or forward-mode AD: torch's chain"}
    p = get_plan(x, ns, weight, bias, eps, epilogue, residual)
    if p.launch is not None and p.misaligned(x, weight, bias, residual):
        return {"path": paths.NATIVE, "reason": "a buffer is not 16-byte aligned: torch's chain serves this call"}
    return {"path": p.path, "reason": p.reason}
