"""labkit::layer_norm as a PyTorch custom operator, its autograd, and the functional entry point.

- forward op `labkit::layer_norm(x, normalized_shape, weight?, bias?, eps) -> (y, mean, rstd)`: the plan's path
  (ours or torch's); its fake implementation is torch's own native_layer_norm on fake tensors, so shapes, dtypes
  and strides agree with the real op by construction;
- backward op `labkit::layer_norm_backward`: torch.ops.aten.native_layer_norm_backward fed with our mean and rstd
  (bit-identical to torch's), wrapped as an opaque op so that under torch.compile Inductor cannot re-derive the
  backward with its own reduction order;
- layer_norm(): F.layer_norm's signature; in plain eager use with nothing to record (no autograd, no compile, no
  dispatch mode, plain tensors) it calls the plan directly, skipping the dispatcher.
"""
from __future__ import annotations

from typing import List, Optional, Sequence

import torch
from torch import Tensor

from labkit.ops.dropin import plan as plans


@torch.library.custom_op("labkit::layer_norm", mutates_args=())
def layer_norm_op(x: Tensor, normalized_shape: List[int], weight: Optional[Tensor], bias: Optional[Tensor],
                  eps: float) -> tuple[Tensor, Tensor, Tensor]:
    ns = tuple(normalized_shape)
    p = plans.get_plan(x, ns, weight, bias, eps, True)
    return p.forward(x, weight, bias, True)


@layer_norm_op.register_fake
def _layer_norm_fake(x, normalized_shape, weight, bias, eps):
    return torch.ops.aten.native_layer_norm.default(x, normalized_shape, weight, bias, eps)


def _empty_grad(like: Tensor) -> Tensor:
    return like.new_empty((0,))


@torch.library.custom_op("labkit::layer_norm_backward", mutates_args=())
def layer_norm_backward_op(grad_y: Tensor, x: Tensor, normalized_shape: List[int], mean: Tensor, rstd: Tensor,
                           weight: Optional[Tensor], bias: Optional[Tensor],
                           output_mask: List[bool]) -> tuple[Tensor, Tensor, Tensor]:
    """(grad_x, grad_weight, grad_bias); an output not asked for (or without its parameter) is an empty tensor."""
    gx, gw, gb = torch.ops.aten.native_layer_norm_backward.default(grad_y, x, normalized_shape, mean, rstd, weight,
                                                                   bias, output_mask)
    # a custom op returns defined tensors: an output not asked for is an empty one (aten's never alias inputs)
    return (gx if gx is not None else _empty_grad(x), gw if gw is not None else _empty_grad(x),
            gb if gb is not None else _empty_grad(x))


@layer_norm_backward_op.register_fake
def _layer_norm_backward_fake(grad_y, x, normalized_shape, mean, rstd, weight, bias, output_mask):
    gx, gw, gb = torch.ops.aten.native_layer_norm_backward.default(grad_y, x, normalized_shape, mean, rstd, weight,
                                                                   bias, output_mask)
    return (gx if gx is not None else _empty_grad(x), gw if gw is not None else _empty_grad(x),
            gb if gb is not None else _empty_grad(x))


def _setup_context(ctx, inputs, output):
    x, normalized_shape, weight, bias, eps = inputs
    _, mean, rstd = output
    ctx.save_for_backward(x, mean, rstd, weight, bias)
    ctx.normalized_shape, ctx.eps = list(normalized_shape), eps
    ctx.mark_non_differentiable(mean, rstd)


def _backward(ctx, grad_y, _grad_mean, _grad_rstd):
    x, mean, rstd, weight, bias = ctx.saved_tensors
    need_x, need_w, need_b = ctx.needs_input_grad[0], ctx.needs_input_grad[2], ctx.needs_input_grad[3]
    if grad_y is None:
        return None, None, None, None, None
    if torch.is_grad_enabled():
        # create_graph=True: eager autograd differentiates torch's layer_norm twice (its infinitely
        # differentiable backward); recomputing through it gives those grads and their graph.
        wanted = [t for t, need in ((x, need_x), (weight, need_w), (bias, need_b)) if need]
        y = torch.nn.functional.layer_norm(x, ctx.normalized_shape, weight, bias, ctx.eps)
        grads = iter(torch.autograd.grad(y, wanted, grad_y, create_graph=True))
        return (next(grads) if need_x else None, None, next(grads) if need_w else None,
                next(grads) if need_b else None, None)
    gx, gw, gb = layer_norm_backward_op(grad_y, x, ctx.normalized_shape, mean, rstd, weight, bias,
                                        [need_x, need_w and weight is not None, need_b and bias is not None])
    return (gx if need_x else None, None, gw if need_w else None, gb if need_b else None, None)


layer_norm_op.register_autograd(_backward, setup_context=_setup_context)


def _normalized(normalized_shape) -> tuple:
    if isinstance(normalized_shape, int):
        return (normalized_shape,)
    return tuple(int(d) for d in normalized_shape)


_is_compiling = torch.compiler.is_compiling
_is_grad_enabled = torch.is_grad_enabled
_functorch_active = getattr(torch._C, "_are_functorch_transforms_active", lambda: False)


# One C call each: these run on every eager call, where a microsecond is a fifth of the host-cost budget.
_autocast_any = getattr(torch._C, "_is_any_autocast_enabled", None)
_dispatch_depth = getattr(torch._C, "_len_torch_dispatch_stack", None)


def _autocast(x) -> bool:
    """Autocast enabled (for any device type when torch can say so in one call; else for x's)."""
    if _autocast_any is not None:
        return _autocast_any()
    return isinstance(x, torch.Tensor) and x.device.type in _AUTOCAST_DEVICES and torch.is_autocast_enabled(
        x.device.type)


_AUTOCAST_DEVICES = ("cuda", "cpu", "xpu", "mps", "hpu")


def _dispatch_mode_active() -> bool:
    if _dispatch_depth is None:  # an older torch: its Python-level query
        from torch.utils._python_dispatch import _get_current_dispatch_mode

        return _get_current_dispatch_mode() is not None
    return _dispatch_depth() > 0


_PLAIN = (torch.Tensor, torch.nn.Parameter)  # a module's weight is a Parameter: still a plain tensor


def _plain(t) -> bool:
    return t is None or type(t) in _PLAIN


def needs_dispatcher(x, weight, bias) -> bool:
    """True when the call must go through the registered op: compiling, recording autograd, a dispatch mode or
    functorch transform is active, or a tensor is a subclass (fake, functional, DTensor ...)."""
    if _is_compiling():
        return True
    if not (type(x) in _PLAIN and _plain(weight) and _plain(bias)):
        return True
    if _is_grad_enabled() and (x.requires_grad or (weight is not None and weight.requires_grad)
                               or (bias is not None and bias.requires_grad)):
        return True
    return _functorch_active() or _dispatch_mode_active()


def layer_norm(x: Tensor, normalized_shape: Sequence[int] | int, weight: Optional[Tensor] = None,
               bias: Optional[Tensor] = None, eps: float = 1e-5) -> Tensor:
    """torch.nn.functional.layer_norm with torch's eager bits on every input it accepts: our kernels where the
    dispatch rule (labkit.ops.dispatch.rule) says they are faster, torch's own kernel elsewhere.
    `explain(x, normalized_shape, weight, bias, eps)` says which path an input takes and why."""
    if _autocast(x):
        # autocast runs layer_norm in float32 (its cast policy); torch's own call keeps that policy exactly
        return torch.nn.functional.layer_norm(x, _normalized(normalized_shape), weight, bias, eps)
    ns = _normalized(normalized_shape)
    if needs_dispatcher(x, weight, bias):  # compiling, autograd to record, a mode, a transform or a subclass
        return layer_norm_op(x, list(ns), weight, bias, eps)[0]
    return plans.get_plan(x, ns, weight, bias, eps, False).forward(x, weight, bias, False)


def layer_norm_with(path: str, x: Tensor, normalized_shape, weight=None, bias=None, eps: float = 1e-5) -> Tensor:
    """One candidate path forced, through the same plan machinery (for measuring candidates against each other);
    ValueError where that path cannot take the input."""
    ns = _normalized(normalized_shape)
    return plans.get_plan(x, ns, weight, bias, eps, False, force=path).forward(x, weight, bias, False)


def explain(x: Tensor, normalized_shape, weight: Optional[Tensor] = None, bias: Optional[Tensor] = None,
            eps: float = 1e-5) -> dict:
    """Which path serves this input and why: {"path", "reason", "torch_path", "rule_source"}: the plan the call
    would get (labkit.ops.dropin.plan.make_plan), with the per-call alignment check applied to these tensors'
    addresses."""
    from labkit.ops import eligibility, paths

    ns = _normalized(normalized_shape)
    p, _ = plans.make_plan(x, ns, weight, bias, eps)
    path, reason = p.path, p.reason
    if path != paths.NATIVE and eligibility.misaligned(*(t.data_ptr() for t in (x, weight, bias) if t is not None)):
        path, reason = paths.NATIVE, "a buffer is not 16-byte aligned: torch takes its other path for this call"
    try:
        tp = eligibility.torch_path(x, weight, bias, normalized_shape=ns)[0]
    except ValueError as exc:
        tp = f"undetermined: {exc}"
    return {"path": path, "reason": reason, "torch_path": tp, "rule_source": p.rule_source}
