"""labkit::layer_norm as a PyTorch custom operator, its autograd, and the functional entry point.

- forward op `labkit::layer_norm(x, normalized_shape, weight?, bias?, eps) -> (y, mean, rstd)`: the plan's path
  (ours or torch's); its fake implementation is torch's own native_layer_norm on fake tensors, so shapes, dtypes
  and strides agree with the real op by construction;
- backward op `labkit::layer_norm_backward`: our backward kernels (labkit.ops.backward, torch's bits) where the
  backward plan takes the input and the rule says they are faster, else torch.ops.aten.native_layer_norm_backward
  fed with our mean and rstd; opaque, so that under torch.compile Inductor cannot re-derive the backward with its
  own reduction order;
- where the host extension loads, both ops' CUDA kernels and their autograd are its C++ (registered in front of the
  Python implementations and register_autograd below, which stay the CPU's and the fallback): a compiled graph's
  call of either op passes no Python;
- layer_norm(): F.layer_norm's signature, and the one entry every eager call takes; its docstring is the table of
  its exits (who serves which call). In plain eager use it skips the dispatcher (a call through torch.ops costs
  more host time than the fast path), so the op serves only what needs it (compile, modes, subclasses, vmap).
"""
from __future__ import annotations

import operator
from typing import List, Optional, Sequence

import torch
from torch import Tensor

from labkit.ops.dropin import autocast as autocast_builds
from labkit.ops.dropin import host
from labkit.ops.dropin import plan as plans


def _forward_impl(x: Tensor, normalized_shape: List[int], weight: Optional[Tensor], bias: Optional[Tensor],
                  eps: float) -> tuple[Tensor, Tensor, Tensor]:
    """labkit::layer_norm's Python implementation: every device's where the host extension does not serve, the
    CPU's, and the CUDA kernel's for calls the Python runner serves (host.off)."""
    ns = tuple(normalized_shape)
    p = plans.get_plan(x, ns, weight, bias, eps, True)
    return p.forward(x, weight, bias, True)


layer_norm_op = torch.library.custom_op("labkit::layer_norm", mutates_args=())(_forward_impl)


@layer_norm_op.register_fake
def _layer_norm_fake(x, normalized_shape, weight, bias, eps):
    return torch.ops.aten.native_layer_norm.default(x, normalized_shape, weight, bias, eps)


def _empty_grad(like: Tensor) -> Tensor:
    return like.new_empty((0,))


def _backward_impl(grad_y: Tensor, x: Tensor, normalized_shape: List[int], mean: Tensor, rstd: Tensor,
                   weight: Optional[Tensor], bias: Optional[Tensor],
                   output_mask: List[bool]) -> tuple[Tensor, Tensor, Tensor]:
    """(grad_x, grad_weight, grad_bias); an output not asked for (or without its parameter) is an empty tensor.
    labkit::layer_norm_backward's Python implementation, where _forward_impl is the forward's."""
    gx, gw, gb = plans.backward(grad_y, x, tuple(normalized_shape), mean, rstd, weight, bias, tuple(output_mask))
    # a custom op returns defined tensors: an output not asked for is an empty one (aten's never alias inputs)
    return (gx if gx is not None else _empty_grad(x), gw if gw is not None else _empty_grad(x),
            gb if gb is not None else _empty_grad(x))


layer_norm_backward_op = torch.library.custom_op("labkit::layer_norm_backward", mutates_args=())(_backward_impl)


def serve_ops(key: str = "CUDA") -> None:
    """Register the host extension's kernels for both ops at `key` (CUDA when it loads; CPU in the tests) in front
    of the Python implementations: a call of the op (a compiled graph's) then reaches our launches with no Python,
    planned as the Python implementation plans (host/layer_norm.cpp, "the registered ops")."""
    _serve(host.module(), key)


def _serve(m, key: str) -> None:
    m.serve_ops(plans.host_forward_plan, plans.host_backward_plan, _forward_impl, _backward_impl, key)


def unserve_ops() -> None:
    """The Python implementations serve again on the key serve_ops registered at."""
    m = host.loaded()
    if m is not None:
        m.unserve_ops()


def _serve_when_loaded(m) -> None:
    if torch.version.cuda is not None:  # a CPU build of torch has no CUDA key to serve
        _serve(m, "CUDA")


host.when_loaded(_serve_when_loaded)


@layer_norm_backward_op.register_fake
def _layer_norm_backward_fake(grad_y, x, normalized_shape, mean, rstd, weight, bias, output_mask):
    gx, gw, gb = torch.ops.aten.native_layer_norm_backward.default(grad_y, x, normalized_shape, mean, rstd, weight,
                                                                   bias, output_mask)
    return (gx if gx is not None else _empty_grad(x), gw if gw is not None else _empty_grad(x),
            gb if gb is not None else _empty_grad(x))


# --- vmap: torch's own batching rules for native_layer_norm(_backward) (functorch BatchRulesNorm.cpp), written
# with the same tensor ops on the physical tensors, so vmap gives the bits eager vmap of nn.LayerNorm gives.

def _front(t, dim):
    return t if t is None or dim is None else t.movedim(dim, 0)


def _pad(t, batched: bool, logical_rank: int):
    """functorch's maybePadToLogicalRank: singleton dims after the batch dim up to the logical rank."""
    have = t.dim() - (1 if batched else 0)
    if have >= logical_rank:
        return t
    shape = list(t.shape)
    at = 1 if batched else 0
    return t.reshape(shape[:at] + [1] * (logical_rank - have) + shape[at:])


@torch.library.register_vmap("labkit::layer_norm")
def _layer_norm_vmap(info, in_dims, x, normalized_shape, weight, bias, eps):
    x_dim, _, w_dim, b_dim, _ = in_dims
    x_ = _front(x, x_dim)
    if w_dim is None and b_dim is None:
        return layer_norm_op(x_, normalized_shape, weight, bias, eps), (0, 0, 0)
    rank = x.dim() - (1 if x_dim is not None else 0)
    y, mean, rstd = layer_norm_op(x_, normalized_shape, None, None, eps)
    if weight is not None:
        y = y * _pad(_front(weight, w_dim), w_dim is not None, rank)
    if bias is not None:
        y = y + _pad(_front(bias, b_dim), b_dim is not None, rank)
    stats = 0 if x_dim is not None else None
    return (y, mean, rstd), (0, stats, stats)


@torch.library.register_vmap("labkit::layer_norm_backward")
def _layer_norm_backward_vmap(info, in_dims, grad_y, x, normalized_shape, mean, rstd, weight, bias, output_mask):
    gy_d, x_d, _, m_d, r_d, w_d, b_d, _ = in_dims
    ns, size = list(normalized_shape), info.batch_size
    gy, x_, m_, r_ = _front(grad_y, gy_d), _front(x, x_d), _front(mean, m_d), _front(rstd, r_d)
    batched_out = gy_d is not None
    rank = grad_y.dim() - (1 if batched_out else 0)
    front = list(range(1 if batched_out else 0, (1 if batched_out else 0) + rank - len(ns)))
    gx = gw = gb = None
    if output_mask[2] and bias is not None:
        gb = gy.sum(front) if front else gy
    if output_mask[1] and weight is not None:
        def lift(t, d):
            return t.unsqueeze(0) if d is None and (x_d is not None or m_d is not None) else t
        normalized = (lift(x_, x_d) - lift(m_, m_d)) * lift(r_, r_d)
        expanded = normalized * gy
        gw = expanded.sum(list(range(expanded.dim() - len(ns)))[1 if expanded.dim() - len(ns) > rank - len(ns) else 0:]) \
            if expanded.dim() > len(ns) else expanded
    if output_mask[0]:
        gni = gy * _pad(_front(weight, w_d), w_d is not None, rank) if weight is not None else gy
        def ensure(t, d):
            return t if d is not None else t.unsqueeze(0).expand(size, *t.shape)
        gni_b = gni if (batched_out or w_d is not None) else gni.unsqueeze(0).expand(size, *gni.shape)
        gx = plans.backward(gni_b.contiguous(), ensure(x_, x_d).contiguous(), tuple(ns), ensure(m_, m_d).contiguous(),
                            ensure(r_, r_d).contiguous(), None, None, (True, False, False))[0]
    outs = (gx if gx is not None else _empty_grad(x), gw if gw is not None else _empty_grad(x),
            gb if gb is not None else _empty_grad(x))
    dims = (0 if gx is not None else None, 0 if gw is not None and gw.dim() > len(ns) else None,
            0 if gb is not None and batched_out else None)
    return outs, dims


def grads_through_torch(grad_y, x, ns, weight, bias, eps: float, need) -> tuple:
    """(dx, dweight, dbias) with their graph, for a backward run with create_graph=True: eager autograd
    differentiates torch's layer_norm twice (its backward is differentiable; ours is not), so recomputing through
    it gives those grads and that graph. `need`: which of the three are wanted; the others are None. The host
    extension's C++ node does the same (host/layer_norm.cpp, LayerNormFunction::backward)."""
    wanted = [t for t, n in zip((x, weight, bias), need) if n]
    y = torch.nn.functional.layer_norm(x, ns, weight, bias, eps)
    grads = iter(torch.autograd.grad(y, wanted, grad_y, create_graph=True))
    return tuple(next(grads) if n else None for n in need)


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
        gx, gw, gb = grads_through_torch(grad_y, x, ctx.normalized_shape, weight, bias, ctx.eps,
                                         (need_x, need_w, need_b))
        return gx, None, gw, gb, None
    gx, gw, gb = layer_norm_backward_op(grad_y, x, ctx.normalized_shape, mean, rstd, weight, bias,
                                        [need_x, need_w and weight is not None, need_b and bias is not None])
    return (gx if need_x else None, None, gw if need_w else None, gb if need_b else None, None)


layer_norm_op.register_autograd(_backward, setup_context=_setup_context)


class _LayerNorm(torch.autograd.Function):
    """The eager autograd path: the plan's forward and `plans.backward`, with no dispatcher in between."""

    @staticmethod
    def forward(ctx, x, weight, bias, ns, eps, plan):
        y, mean, rstd = plan.forward(x, weight, bias, True)
        ctx.save_for_backward(x, mean, rstd, weight, bias)
        # autograd runs a CUDA backward on its own worker thread, whose context has no dispatch_protocol: the
        # backward plans by the protocol the forward was called under
        ctx.ns, ctx.eps, ctx.protocol = ns, eps, plans.current_protocol()
        ctx.mark_non_differentiable(mean, rstd)
        return y

    @staticmethod
    def backward(ctx, grad_y):
        x, mean, rstd, weight, bias = ctx.saved_tensors
        need_x, need_w, need_b = ctx.needs_input_grad[:3]
        if torch.is_grad_enabled():
            return (*grads_through_torch(grad_y, x, ctx.ns, weight, bias, ctx.eps, (need_x, need_w, need_b)),
                    None, None, None)
        with plans.dispatch_protocol(ctx.protocol):
            gx, gw, gb = plans.backward(grad_y, x, ctx.ns, mean, rstd, weight, bias, (need_x, need_w, need_b))
        return gx, gw, gb, None, None, None


# autograd.Function.apply's Python wrapper checks for functorch transforms and unwraps dead functorch wrappers on
# every call (~1.9 us of 5.3 on this CPU for a six-argument Function). layer_norm reaches _LayerNorm only with no
# transform active, where that is a no-op for live tensors; a dead functorch wrapper (a tensor kept from a finished
# transform) is the one input it would change, and this path does not unwrap it.
_apply_layer_norm = torch._C._FunctionBase.__dict__["apply"].__get__(None, _LayerNorm)


def _normalized(normalized_shape) -> tuple:
    """normalized_shape as a tuple of ints, refusing with TypeError what torch's argument parser refuses: a container
    other than a tuple, list or torch.Size, and elements that are bools or have no __index__ (floats, float
    tensors). Elements with __index__ (numpy integers, one-element integer tensors) are taken, as torch takes them;
    so is a bare int, as nn.LayerNorm's constructor takes it."""
    if isinstance(normalized_shape, int) and not isinstance(normalized_shape, bool):
        return (normalized_shape,)
    if not isinstance(normalized_shape, (tuple, list)):  # torch.Size is a tuple
        raise TypeError(f"layer_norm(): normalized_shape must be a tuple of ints, not "
                        f"{type(normalized_shape).__name__}")
    out = []
    for i, d in enumerate(normalized_shape):
        try:
            if isinstance(d, bool):
                raise TypeError
            out.append(operator.index(d))
        except TypeError:
            raise TypeError(f"layer_norm(): normalized_shape must be a tuple of ints, but found element of type "
                            f"{type(d).__name__} at position {i}") from None
    return tuple(out)


_NORMALIZED: dict = {}  # int / tuple / torch.Size -> tuple of ints: one lookup a call where a model repeats it


def _normalized_cached(normalized_shape) -> tuple:
    """_normalized, looked up for an int, a torch.Size or a tuple of ints (their equality is exact: a float or bool
    that compares equal to an int is left to _normalized and torch, as F.layer_norm leaves it)."""
    t = type(normalized_shape)
    if not (t is int or t is torch.Size or (t is tuple and all(type(d) is int for d in normalized_shape))):
        return _normalized(normalized_shape)
    ns = _NORMALIZED.get(normalized_shape)
    if ns is None:
        ns = _normalized(normalized_shape)
        if len(_NORMALIZED) < 1024:
            _NORMALIZED[normalized_shape] = ns
    return ns


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


try:
    torch.is_autocast_enabled("cuda")

    def _autocast_cuda_enabled() -> bool:
        return torch.is_autocast_enabled("cuda")
except TypeError:  # an older torch: its no-argument form is CUDA's
    _autocast_cuda_enabled = torch.is_autocast_enabled


def _autocast_float32(t):
    """What autocast's float32 policy hands torch's kernel for one argument (ATen's cached_cast to float: a defined
    CUDA floating tensor other than float64 is cast with .to(float32); anything else passes as it is). The cast is
    recorded by autograd as autocast's is, so gradients flow back through it as they do through torch's."""
    if t is None or t.dtype is torch.float32 or t.dtype is torch.float64 or not t.is_floating_point() \
            or t.device.type != "cuda":
        return t
    return t.to(torch.float32)


def _dispatch_mode_active() -> bool:
    if _dispatch_depth is None:  # an older torch: its Python-level query
        from torch.utils._python_dispatch import _get_current_dispatch_mode

        return _get_current_dispatch_mode() is not None
    return _dispatch_depth() > 0


_interpreters = getattr(torch._C._functorch, "get_interpreter_stack", lambda: None)
_VMAP = getattr(getattr(torch._C._functorch, "TransformType", None), "Vmap", None)


def _functorch_differentiates() -> bool:
    """A functorch transform other than vmap is active (torch.func.grad, jvp, jacrev, functionalize ...). A custom
    op's registered autograd has no functorch support ("must override the setup_context staticmethod"), so these
    take torch's own F.layer_norm, whose transforms give torch's bits; vmap alone keeps our op and its batching
    rule."""
    stack = _interpreters()
    return bool(stack) and any(i.key() != _VMAP for i in stack)


_fast = host.fast  # [the extension's `call`, or None]: one list read per call
_protocol_in_context = plans._protocol.get  # None: no dispatch_protocol in this context
_torch_function_mode = getattr(torch._C, "_is_torch_function_mode_enabled", lambda: False)
_forward_ad = torch.autograd.forward_ad  # its _current_level >= 0 inside a dual_level

_PLAIN = (torch.Tensor, torch.nn.Parameter)  # a module's weight is a Parameter: still a plain tensor


def plain_eager(x, *others) -> bool:
    """Whether layer_norm would take one of its plain eager exits (4 to 8) for x and the other tensors (weight,
    bias, ...; None for an absent one): no autocast, plain tensors, not compiling, no functorch transform, no
    dispatch mode, no forward-mode AD. labkit.fused_layer_norm fuses only such calls and gives the others to torch's
    chain."""
    return not _autocast(x) and _untransformed(x, *others)


def _untransformed(x, *others) -> bool:
    """Plain tensors, not compiling, no functorch transform, no dispatch mode, no forward-mode AD: plain_eager's
    conditions but autocast's (the autocast builds' autograd.Function asks these, and no torch-function mode)."""
    return type(x) in _PLAIN and all(t is None or type(t) in _PLAIN for t in others) and \
        not (_is_compiling() or _functorch_active() or _dispatch_mode_active()) and _forward_ad._current_level < 0


def traced_or_wrapped(x, *others) -> bool:
    """A tensor subclass among x and the others, torch.compile tracing, or a dispatch mode: the calls layer_norm's
    exit 2 gives its registered op (functorch transforms aside)."""
    return type(x) not in _PLAIN or any(t is not None and type(t) not in _PLAIN for t in others) or \
        _is_compiling() or _dispatch_mode_active()


_layer_norm = torch.layer_norm  # F.layer_norm's own call, past its torch-function checks (done here)


def layer_norm(x: Tensor, normalized_shape: Sequence[int] | int, weight: Optional[Tensor] = None,
               bias: Optional[Tensor] = None, eps: float = 1e-5) -> Tensor:
    """torch.nn.functional.layer_norm with torch's eager bits on every input it accepts: our kernels where the
    dispatch rule (labkit.ops.dispatch.rule) says they are faster, torch's own kernel elsewhere.
    `explain(x, normalized_shape, weight, bias, eps)` says which path an input takes and why.

    The exits, in the order the code tests them (tests/test_dropin.py, test_fast_path.py, test_host.py and
    test_gpu_host.py take each):

    ==  =========================================================  =================================================
    #   when                                                       who serves
    ==  =========================================================  =================================================
    1   autocast is enabled                                        CUDA autocast, a bfloat16/float16 x in plain
                                                                   eager use: the autocast builds where they serve
                                                                   (labkit.ops.dropin.autocast: no cast of x);
                                                                   else its float32 cast done here, then the exits
                                                                   below; other devices: torch's F.layer_norm
    2   a tensor subclass, torch.compile, a dispatch mode or a     the registered op labkit::layer_norm (vmap: its
        functorch transform                                        batching rule); functorch's differentiating
                                                                   transforms (grad, jvp, ...): torch's F.layer_norm
    3   forward-mode AD (a dual_level is open)                     torch's F.layer_norm
    4   the signature was planned before, in the default context   the host extension's `call` (C++, no Python)
    5   autograd records, torch's kernels serve both directions    torch's own layer_norm and autograd node
    6   autograd records, the host extension serves                its C++ autograd node (host/layer_norm.cpp)
    7   autograd records, no host extension                        `_LayerNorm`, the Python autograd.Function
    8   nothing to record                                          the plan's forward (ours, or torch's kernel)
    ==  =========================================================  =================================================
    """
    # Every eager call runs this far, so it is written for the host's microseconds: one C call per condition,
    # the common case (plain tensors, no mode, no transform, not compiling) first.
    if _autocast(x):
        # autocast runs layer_norm in float32 (its cast policy). On CUDA we make the same cast autocast would and
        # serve the float32 tensors torch's kernel would have received; the exits below then run on them with
        # autocast still on, which casts nothing more (they are float32 already). Elsewhere torch's own call
        # keeps the policy.
        if not (isinstance(x, torch.Tensor) and x.device.type == "cuda" and _autocast_cuda_enabled()):
            return torch.nn.functional.layer_norm(x, _normalized(normalized_shape), weight, bias, eps)
        if x.dtype in autocast_builds.BUILDS and _untransformed(x, weight, bias) and not _torch_function_mode():
            # weight and bias come back cast to float32: the cast below leaves them as they are
            y, weight, bias = autocast_builds.layer_norm(x, _normalized_cached(normalized_shape), weight, bias, eps)
            if y is not None:
                return y
        x, weight, bias = _autocast_float32(x), _autocast_float32(weight), _autocast_float32(bias)
    plain = type(x) in _PLAIN and (weight is None or type(weight) in _PLAIN) and \
        (bias is None or type(bias) in _PLAIN)
    if not plain or _is_compiling() or _functorch_active() or _dispatch_mode_active():
        # compiling, a mode, a transform or a subclass: the registered op (functorch's differentiating
        # transforms: torch's F.layer_norm)
        ns = _normalized_cached(normalized_shape)
        if _functorch_active() and _functorch_differentiates():
            return torch.nn.functional.layer_norm(x, ns, weight, bias, eps)
        return layer_norm_op(x, list(ns), weight, bias, eps)[0]
    if _forward_ad._current_level >= 0:
        # forward-mode AD (dual tensors): torch's F.layer_norm, whose tangent formula our launches do not have
        return torch.nn.functional.layer_norm(x, _normalized_cached(normalized_shape), weight, bias, eps)
    fast = _fast[0]
    if fast is not None and _protocol_in_context() is None and not _torch_function_mode():
        # a signature decided before in this (default) context: served from C++ (labkit.ops.dropin.host). A
        # torch-function mode takes the Python path, whose torch calls it sees, as it did before the fast path.
        y = fast(x, normalized_shape, weight, bias, eps)
        if y is not None:
            return y
    else:
        fast = None
    ns = _normalized_cached(normalized_shape)
    if _is_grad_enabled() and (x.requires_grad or (weight is not None and weight.requires_grad)
                               or (bias is not None and bias.requires_grad)):
        plan = plans.get_plan(x, ns, weight, bias, eps, True)
        if fast is not None:
            plans.remember(plan, x, ns, weight, bias, eps, True)
        if plan.torch_trains:  # torch's kernels both ways: its own autograd node, with no Python on the way back
            return _layer_norm(x, ns, weight, bias, eps)
        if plan.host is not None:  # the host extension's C++ node: no Python after this call, none on the way back
            return host.module().train(plan.host, x, weight, bias)
        return _apply_layer_norm(x, weight, bias, ns, eps, plan)
    plan = plans.get_plan(x, ns, weight, bias, eps, False)
    if fast is not None:
        plans.remember(plan, x, ns, weight, bias, eps, False)
    return plan.forward(x, weight, bias, False)


def layer_norm_with(path: str, x: Tensor, normalized_shape, weight=None, bias=None, eps: float = 1e-5) -> Tensor:
    """One candidate path forced, through the same plan machinery (for measuring candidates against each other);
    ValueError where that path cannot take the input."""
    ns = _normalized(normalized_shape)
    return plans.get_plan(x, ns, weight, bias, eps, False, force=path).forward(x, weight, bias, False)


def explain(x: Tensor, normalized_shape, weight: Optional[Tensor] = None, bias: Optional[Tensor] = None,
            eps: float = 1e-5) -> dict:
    """Which path serves this input and why: {"path", "reason", "torch_path", "rule_source", "launches"} (which
    runner launches our kernels: the host extension's C++ or Python), "trust" (labkit.ops.trust: why our kernels
    may serve on this install, or why not), "backward" and "backward_reason" (the
    schedule a backward of this forward runs, or "native" for torch's): the plan the call would get
    (labkit.ops.dropin.plan.make_plan and backward_choice, under the current dispatch protocol), with the per-call
    alignment check applied to these tensors' addresses."""
    from labkit.ops import eligibility, paths

    ns = _normalized(normalized_shape)
    p, _ = plans.make_plan(x, ns, weight, bias, eps)
    path, reason = p.path, p.reason
    params = (t.data_ptr() for t in (weight, bias) if t is not None)
    if path != paths.NATIVE and p.misaligned(x.data_ptr(), *params):
        path, reason = paths.NATIVE, (f"a buffer is not aligned as our kernels need (x {p.align} bytes, weight and "
                                      f"bias {p.param_align}): torch's kernel serves this call (its other path, or "
                                      "its vectorized one where only a tensor map needs 16)")
    try:
        tp = eligibility.torch_path(x, weight, bias, normalized_shape=ns)[0]
    except ValueError as exc:
        tp = f"undetermined: {exc}"
    if path == paths.NATIVE:
        runner = "torch's own call"
    else:
        why = host.unavailable(x.get_device()) if x.device.type == "cuda" else "not a GPU tensor"
        runner = "C++ (labkit host extension)" if why is None else f"Python (CuPy): the host extension {why}"
    _, backward, backward_reason = plans.backward_choice(x, ns, weight, bias)
    if x.device.type == "cuda":
        from labkit.ops import trust

        trusted = trust.verdict(x.get_device()).source
    else:
        trusted = "not a GPU tensor: torch's kernels serve, nothing to trust"
    return {"path": path, "reason": reason, "torch_path": tp, "rule_source": p.rule_source, "launches": runner,
            "backward": backward, "backward_reason": backward_reason, "trust": trusted}
