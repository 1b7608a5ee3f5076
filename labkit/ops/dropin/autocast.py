"""The drop-in under CUDA autocast with a bfloat16/float16 x: the autocast builds (labkit.ops.dtypes.AUTOCAST), with
no casts.

Autocast runs layer_norm in float32: it hands torch's kernel x.to(float32) (and weight, bias cast likewise), and
its cast's backward rounds the float32 dX to x's type. Converting T to float is exact and the arithmetic of the
float32 kernels is the same on those values, so reading x as T and rounding dX once at its store gives torch's
tensors bit for bit, without reading and writing x twice (the cast) or dX twice (the cast back). y, mean, rstd,
dgamma and dbeta are float32, as autocast's are. Weight and bias still go through autocast's cast (the same
`.to(float32)`, so their gradients flow back through it as through torch's); only x's cast is skipped.

Served where the float32 drop-in would serve x.to(float32) with the chain (its forward, and its backward where a
gradient is recorded): the autocast builds are the chain's files (docs/decisions.md#autocast_build). Elsewhere,
and for any call our kernels cannot take, `layer_norm` returns None and the caller makes autocast's casts and
serves float32 (labkit.ops.dropin.op, exit 1). Calls whose buffers are misaligned for the chain's tensor maps take
torch's kernel on the cast tensors, with the same bits.

One difference from autocast's own call: the backward keeps x itself (autocast's keeps its cast), so x modified in
place between the forward and the backward raises autograd's "modified by an inplace operation" error, as it does
for the float32 drop-in and for torch's own layer_norm of a float32 x.
"""
from __future__ import annotations

import math
import threading

import numpy as np
import torch

from labkit.core.device import device_info
from labkit.core.launch import device_scope, stream
from labkit.ops import backward as grad
from labkit.ops import chain, dtypes, eligibility, paths, trust
from labkit.ops.dispatch import rule
from labkit.ops.dropin import host
from labkit.ops.dropin import plan as plans
from labkit.ops.launches import bound

BUILDS = {torch.bfloat16: "autocast_bfloat16", torch.float16: "autocast_float16"}
_F32 = torch.float32
MAX_PLANS = 1024


class AutocastPlan:
    """One signature served by the autocast builds: the chain's forward launches and (for a recorded gradient) its
    backward's, bound, with the float32 ones and -0.0 an absent weight and bias stand for."""

    def __init__(self, build: str, x, ns: tuple, weight, bias, eps: float, forward, backward, reason: str):
        self.build, self.ns, self.eps, self.reason = build, ns, eps, reason
        self.forward_launches, self.backward_launches = forward, backward
        self.index, self.rows, self.shape = x.get_device(), forward.rows, tuple(x.shape)
        self.stat_shape = self.shape[:x.dim() - len(ns)] + (1,) * len(ns)
        self.eps_arg = np.float32(eps)
        self.ones = torch.ones(ns, dtype=_F32, device=x.device) if weight is None else None
        self.neg_zeros = torch.full(ns, -0.0, dtype=_F32, device=x.device) if bias is None else None
        self.launch = bound(forward, self.index)
        self.grad_launch = bound(backward, self.index) if backward is not None else None
        # the host extension's plan where it serves this device: both directions from C++, the backward a C++
        # autograd node (a Python node's backward waits for the GIL on autograd's device thread); None: Python
        self.host = None
        if host.unavailable(self.index) is None:
            self.host = plans.host_plan(self.index, host.program(self.launch), forward.scratch.nbytes, backward, ns,
                                        eps, self.stat_shape, self.rows, self.ones, self.neg_zeros, 16, True)

    def aligned(self, *tensors) -> bool:
        # the tensor maps read x at 16 bytes, the float32 arrays are read 16 bytes a vector
        return not eligibility.misaligned(*(t.data_ptr() for t in tensors if t is not None), align=16)

    def forward(self, x, weight, bias):
        """(y, mean, rstd): y float32 shaped like x, mean and rstd flat. The caller checked `aligned`."""
        w = weight if weight is not None else self.ones
        b = bias if bias is not None else self.neg_zeros
        dev = x.device
        y = torch.empty(self.shape, dtype=_F32, device=dev)
        mean = torch.empty(self.rows, dtype=_F32, device=dev)
        rstd = torch.empty(self.rows, dtype=_F32, device=dev)
        nbytes = self.forward_launches.scratch.nbytes
        scratch = torch.empty(nbytes, dtype=torch.uint8, device=dev) if nbytes else None
        with device_scope(self.index):
            self.launch((x.data_ptr(), w.data_ptr(), b.data_ptr(), y.data_ptr(), mean.data_ptr(), rstd.data_ptr(),
                         scratch.data_ptr() if scratch is not None else 0), self.eps_arg, stream(self.index))
        return y, mean, rstd

    def backward(self, dy, x, mean, rstd, weight, bias, mask):
        """(dx of x's dtype, dweight, dbias float32): our kernels, or torch's float32 backward on x.to(float32)
        with dX cast back (autocast's own tensors) where dy is not a contiguous, aligned float32 tensor (a lazily
        negated or zero tensor's memory is not its values: torch's backward, as the C++ route does)."""
        if dy.dtype == _F32 and dy.shape == x.shape and not dy.is_neg() and not dy._is_zerotensor():
            dy = dy.contiguous()  # what torch's backward does first
            if self.grad_launch is not None and self.aligned(x, dy, weight):
                return grad.run(self.backward_launches, dy, x, self.ns, mean, rstd, weight, bias, mask,
                                self.index, self.ones, self.grad_launch)
        gx, gw, gb = torch.ops.aten.native_layer_norm_backward.default(
            dy, x.to(_F32), list(self.ns), mean.view(self.stat_shape), rstd.view(self.stat_shape), weight, bias,
            list(mask))
        return (gx.to(x.dtype) if gx is not None else None), gw, gb


class _AutocastLayerNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, plan):
        y, mean, rstd = plan.forward(x, weight, bias)
        ctx.save_for_backward(x, weight, bias)
        ctx.plan, ctx.mean, ctx.rstd = plan, mean, rstd
        return y

    @staticmethod
    def backward(ctx, grad_y):
        x, weight, bias = ctx.saved_tensors
        p, mean, rstd = ctx.plan, ctx.mean, ctx.rstd
        need = ctx.needs_input_grad[:3]
        if torch.is_grad_enabled():  # create_graph: differentiate torch's layer_norm of autocast's cast, as eager does
            from labkit.ops.dropin.op import grads_through_torch

            gx, gw, gb = grads_through_torch(grad_y, x.to(_F32), p.ns, weight, bias, p.eps, need)
            return (gx.to(x.dtype) if gx is not None else None), gw, gb, None
        gx, gw, gb = p.backward(grad_y, x, mean, rstd, weight, bias,
                                (need[0], need[1] and weight is not None, need[2] and bias is not None))
        return (gx if need[0] else None), (gw if need[1] else None), (gb if need[2] else None), None


_lock = threading.Lock()
_plans: dict[tuple, tuple] = {}
plans.dependent_caches.append(_plans)  # made from the trust verdict and the table: cleared with the drop-in's plans


def _signature(x, ns, weight, bias, eps, needs_grad) -> tuple:
    return (x.shape, x.stride(), x.dtype, x.get_device(), x.is_neg(), x._is_zerotensor(), ns, eps,
            None if weight is None else (weight.shape, weight.stride(), weight.dtype, weight.get_device(),
                                         weight.is_neg(), weight._is_zerotensor()),
            None if bias is None else (bias.shape, bias.stride(), bias.dtype, bias.get_device(), bias.is_neg(),
                                       bias._is_zerotensor()), needs_grad, plans.current_protocol(),
            plans._forced_backward[0])


def refusal(x, ns: tuple, weight, bias, eps: float = 1e-5) -> str | None:
    """Why the autocast builds may not take these tensors (weight and bias as autocast hands them on: float32),
    whatever the rule says; None where they may: the conditions of labkit.ops.eligibility that do not depend on
    x's dtype (torch's vectorized path for N, 32-bit indices, eps), and the chain's N % 512. Never raises."""
    if x.dtype not in BUILDS:
        return f"x is {x.dtype}: autocast's cast of a {x.dtype} x is float32's own input"
    if x.dim() < len(ns) or tuple(x.shape[x.dim() - len(ns):]) != ns or x.numel() == 0:
        return f"x's trailing dimensions {tuple(x.shape)} must equal normalized_shape {ns}, with rows"
    if weight is None and bias is not None:
        return "bias without weight is not taken (torch's output expression contracts differently)"
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and (type(t) not in (torch.Tensor, torch.nn.Parameter) or t.dtype != _F32
                              or tuple(t.shape) != ns or not t.is_contiguous() or t.device != x.device
                              or t.is_neg() or t._is_zerotensor()):
            return f"{name} must be a contiguous float32 tensor of shape {ns} on x's device"
    n = math.prod(ns)
    why = eligibility._torch_n(n, eligibility.CONDITIONS)
    if why is not None:  # beyond 2**24 torch's float32 kernel takes its other path
        return str(why)
    if x.numel() > eligibility.MAX_NUMEL:
        return f"x.numel() must be < 2**31 (32-bit indices), got {x.numel()}"
    if isinstance(eps, bool) or not (isinstance(eps, (int, float)) and math.isfinite(eps) and eps >= 0):
        return f"eps must be a finite float >= 0, got {eps!r}"
    if n % 512:
        return f"the chain's autocast build needs N % 512 == 0, got N={n}"
    # the device last: the shape conditions above hold on any device (a meta tensor's too)
    if not x.is_cuda or not x.is_contiguous() or x.is_neg() or x._is_zerotensor():
        return "x must be a contiguous CUDA tensor (not a lazily negated view or a ZeroTensor)"
    return None


def _decide(x, ns: tuple, weight, bias, eps: float, needs_grad: bool) -> tuple:
    """(AutocastPlan or None, why)."""
    why = refusal(x, ns, weight, bias, eps)
    if why is not None:
        return None, why
    if needs_grad and (plans._forced_backward[0] is not None or trust.backward_refusal() is not None):
        # a forced backward (a measurement) or a torch whose dgamma/dbeta order predates ours: torch's backward
        return None, plans._forced_backward[0] or trust.backward_refusal()
    index = x.get_device()
    verdict = trust.verdict(index)
    if not verdict.allowed:
        return None, f"trust: {verdict.source}"
    dev = device_info(index)
    n = math.prod(ns)
    rows = x.numel() // n
    protocol = plans.current_protocol()
    # the float32 drop-in's own choice for x.to(float32): the autocast builds are its chain's
    path, why = rule.choose(rows, n, dev, tuple(paths.candidates(rows, n, dev, dtypes.FLOAT32)), protocol)
    if path != chain.PATH:
        return None, f"the float32 rule picks {path} for x.to(float32) ({why})"
    build = BUILDS[x.dtype]
    try:
        forward = chain.launches(rows, n, dev, dtype=build)
        backward = None
        if needs_grad:
            schedule, bwhy = rule.choose_backward(rows, n, dev, tuple(grad.candidates(rows, n, dev)), protocol)
            if schedule != "chain":
                return None, f"the float32 backward rule picks {schedule} ({bwhy})"
            backward = grad.launches(rows, n, dev, "chain", dtype=build)
    except ValueError as exc:
        return None, str(exc)
    if torch.cuda.is_current_stream_capturing():  # programs are prepared outside capture
        return None, "first call under CUDA graph capture: our kernels are prepared outside capture"
    return AutocastPlan(build, x, ns, weight, bias, eps, forward, backward,
                        f"{build}: the float32 rule picks the chain ({why})"), None


def plan_for(x, ns: tuple, weight, bias, eps: float, needs_grad: bool) -> tuple:
    """(AutocastPlan or None, why not), cached per signature (a refusal under graph capture is not cached)."""
    key = _signature(x, ns, weight, bias, eps, needs_grad)
    hit = _plans.get(key)
    if hit is None:
        hit = _decide(x, ns, weight, bias, eps, needs_grad)
        if not torch.cuda.is_current_stream_capturing() and trust.verdict(x.get_device()).final:
            with _lock:
                if len(_plans) >= MAX_PLANS:
                    _plans.clear()
                _plans[key] = hit
    return hit


def clear() -> None:
    _plans.clear()


def layer_norm(x, ns: tuple, weight, bias, eps: float) -> tuple:
    """F.layer_norm(x, ns, weight, bias, eps) under CUDA autocast for a bfloat16/float16 x, with autocast's bits:
    (y float32, or None where the autocast builds do not serve this call; weight; bias). Weight and bias come back
    cast to float32 as autocast casts them (recorded by autograd), so a caller serving the call itself, as autocast
    does, casts only x."""
    # autocast's rule for a parameter: a CUDA bfloat16/float16 tensor is cast, anything else passes as it is
    weight = weight.to(_F32) if weight is not None and weight.dtype in BUILDS and weight.is_cuda else weight
    bias = bias.to(_F32) if bias is not None and bias.dtype in BUILDS and bias.is_cuda else bias
    needs_grad = torch.is_grad_enabled() and (x.requires_grad or (weight is not None and weight.requires_grad)
                                               or (bias is not None and bias.requires_grad))
    p, _ = plan_for(x, ns, weight, bias, eps, needs_grad)
    if p is None or not p.aligned(x, weight if weight is not None else p.ones,
                                  bias if bias is not None else p.neg_zeros):
        return None, weight, bias
    if p.host is not None:  # the extension's C++: its autograd node, or its forward
        m = host.module()
        y = m.train(p.host, x, weight, bias) if needs_grad else m.forward(p.host, x, weight, bias)
        return y, weight, bias
    if not needs_grad:
        return p.forward(x, weight, bias)[0], weight, bias
    return _AutocastLayerNorm.apply(x, weight, bias, p), weight, bias
