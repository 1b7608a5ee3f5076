"""Per-input-signature plans of the drop-in: which path serves an input (labkit.ops.dispatch.rule), with that
path's launches (labkit.ops.paths) bound to the device once, and the backward's choice.

"plan" means this and only this: the drop-in's decision for one input signature. A path's launch list for one
shape is its "launches" (labkit.ops.launches), and a `Program` (labkit.core.program) is launches bound as data for
a runner (Python's BoundProgram or the host extension's C++).

A plan is made once per (shape, strides, dtype, device, normalized_shape, eps, weight/bias signatures, grad need)
and cached; a call then costs a dictionary lookup, the outputs' allocation and the launches. Whether our kernels
may take an input is labkit.ops.eligibility's predicate (policy DROP_IN), which never raises here: an input they
cannot take goes to torch's kernel, which gives torch's bits by definition. Addresses are not part of the
signature, so alignment (torch's own vectorized-path condition on X, gamma, beta) is checked per call.
"""
from __future__ import annotations

import contextvars
import math
import os

import numpy as np

from labkit.core.device import device_info
from labkit.core.launch import device_scope, stream
from labkit.ops import backward as grad
from labkit.ops import dtypes, eligibility, paths, trust
from labkit.ops.dispatch import rule
from labkit.ops.dropin import host
from labkit.ops.launches import bound

MAX_PLANS = 4096
_plans: dict[tuple, "Plan"] = {}


def signature(x, normalized_shape: tuple, weight, bias, eps: float, needs_grad: bool) -> tuple:
    # built on every eager call: inline, no helper call per tensor
    return (x.shape, x.stride(), x.dtype, x.get_device(), x.is_neg(), x._is_zerotensor(), normalized_shape, eps,
            None if weight is None else (weight.shape, weight.stride(), weight.dtype, weight.get_device(),
                                         weight.requires_grad, weight.is_neg(), weight._is_zerotensor()),
            None if bias is None else (bias.shape, bias.stride(), bias.dtype, bias.get_device(), bias.requires_grad,
                                       bias.is_neg(), bias._is_zerotensor()),
            needs_grad)


def refusal(x, normalized_shape: tuple, weight, bias, eps) -> str | None:
    """Why our kernels may not take this input (None: they may, if its buffers are aligned). Never raises."""
    why = eligibility.refusal(x, weight, bias, eps, normalized_shape, policy=eligibility.DROP_IN)
    return None if why is None else str(why)


_torch_module = []


def _torch():
    """torch, imported at first use (this module is imported where torch may not be wanted yet) and then held."""
    if not _torch_module:
        import torch

        _torch_module.append(torch)
    return _torch_module[0]


class Plan:
    """How one input signature is served. `forward(x, w, b, stats)` returns y, or (y, mean, rstd) with mean and
    rstd shaped as torch.native_layer_norm's."""

    path = paths.NATIVE
    NO_TABLE = "no table consulted: torch's kernel serves every input our kernels do not take"
    # True where torch serves the forward and will serve the backward too: the drop-in then hands the call to
    # torch's own autograd (its C++ node), as cheap on the host as nn.LayerNorm. Set by get_plan for grad plans.
    torch_trains = False
    # the signature as the host extension's LayerNormPlan (labkit.ops.dropin.host), where that serves: set by
    # get_plan (`attach_host`), None where the Python runner serves or torch's kernels serve both ways
    host = None
    # made in the default context (no dispatch protocol, forced backward or host.off): the fast path may remember it
    rememberable = False

    def __init__(self, reason: str, normalized_shape: tuple, eps: float, rule_source: str = NO_TABLE):
        self.reason, self.normalized_shape, self.eps = reason, normalized_shape, eps
        self.rule_source = rule_source  # which dispatch table decided (labkit.explain shows it)

    def forward(self, x, weight, bias, stats: bool):
        torch = _torch()
        if stats:
            return torch.native_layer_norm(x, self.normalized_shape, weight, bias, self.eps)
        return torch.layer_norm(x, self.normalized_shape, weight, bias, self.eps)


class KernelPlan(Plan):
    """Our kernels for an eligible signature; torch's for a call whose buffers are misaligned."""

    def __init__(self, path_launches, reason: str, x, normalized_shape: tuple, weight, bias, eps: float,
                 rule_source: str = Plan.NO_TABLE):
        import torch

        super().__init__(reason, normalized_shape, eps, rule_source)
        self.path_launches, self.path = path_launches, path_launches.path
        self.torch, self.index, self.device, self.dtype = torch, x.get_device(), x.device, x.dtype
        # the buffers' alignment our kernels need: torch's vector (4 elements of x's dtype: what its can_vectorize
        # asks, so a call off it is torch's other path anyway), and for x 16 bytes where a tensor map reads it (the
        # chain's tma blocking, whose 2-byte x torch would take 8 bytes off 16: torch's vectorized kernel serves that
        # call); weight and bias are read by pointer everywhere
        self.param_align = eligibility.CONDITIONS.alignment_bytes(x.element_size())
        self.align = 16 if getattr(path_launches, "tensor_map", None) is not None else self.param_align
        self.shape = tuple(x.shape)
        self.rows = path_launches.rows
        self.stat_shape = self.shape[:x.dim() - len(normalized_shape)] + (1,) * len(normalized_shape)
        self.eps_arg = np.float32(eps)
        # scratch and, when the caller wants no statistics, mean and rstd behind it: one allocation per call
        self.scratch_bytes = path_launches.scratch.nbytes
        # absent affine: gamma 1 (gamma * t rounds as t alone, or as the product torch takes) and beta -0.0
        # (fma(g, t, -0.0) == g * t rounded, signed zeros included), so the one output expression serves all.
        self.ones = torch.ones(normalized_shape, dtype=x.dtype, device=x.device) if weight is None else None
        self.neg_zeros = torch.full(normalized_shape, -0.0, dtype=x.dtype, device=x.device) if bias is None else None
        self.launch = bound(path_launches, self.index)

    def misaligned(self, x_address: int, *param_addresses: int) -> bool:
        """Whether this call's x (at `align`) or weight/bias (at `param_align`) are off what our kernels need."""
        return eligibility.misaligned(x_address, align=self.align) or \
            eligibility.misaligned(*param_addresses, align=self.param_align)

    def forward(self, x, weight, bias, stats: bool):
        h = self.host
        if h is not None:  # the same program from C++, with the same alignment check and fallback
            m = host.module()
            return m.forward_stats(h, x, weight, bias) if stats else m.forward(h, x, weight, bias)
        xp = x.data_ptr()
        wp = (weight if weight is not None else self.ones).data_ptr()
        bp = (bias if bias is not None else self.neg_zeros).data_ptr()
        if self.misaligned(xp, wp, bp):  # torch's can_vectorize fails too (or a tensor map's 16): torch serves
            return Plan.forward(self, x, weight, bias, stats)
        torch, rows, device = self.torch, self.rows, self.device
        y = torch.empty(self.shape, dtype=self.dtype, device=device)
        if stats:
            mean = torch.empty(self.stat_shape, dtype=torch.float32, device=device)
            rstd = torch.empty(self.stat_shape, dtype=torch.float32, device=device)
            scratch = torch.empty(self.scratch_bytes, dtype=torch.uint8, device=device) if self.scratch_bytes else None
            mp, rp = mean.data_ptr(), rstd.data_ptr()
        else:
            scratch = torch.empty(self.scratch_bytes + 8 * rows, dtype=torch.uint8, device=device)
            mp = scratch.data_ptr() + self.scratch_bytes
            rp = mp + 4 * rows
        sp = scratch.data_ptr() if scratch is not None else 0
        with device_scope(self.index):
            self.launch((xp, wp, bp, y.data_ptr(), mp, rp, sp), self.eps_arg, stream(self.index))
        return (y, mean, rstd) if stats else y


# How the drop-in's calls will be made, for the forward rule (labkit.ops.dispatch.rule.PROTOCOLS): "eager" by
# default, "graph" for a model run under CUDA graphs (LABKIT_PROTOCOL=graph, or `with dispatch_protocol("graph")`).
# A context variable: each thread (and asyncio task) sees its own `with` block; a new thread starts from
# LABKIT_PROTOCOL. A plan is cached per signature and protocol.
_protocol: contextvars.ContextVar[str | None] = contextvars.ContextVar("labkit_dispatch_protocol", default=None)
_ENV_PROTOCOL = os.environ.get("LABKIT_PROTOCOL", "eager")


def current_protocol() -> str:
    """The protocol the next plan is made for: the innermost dispatch_protocol, else LABKIT_PROTOCOL."""
    p = _protocol.get()
    if p is not None:
        return p
    if _ENV_PROTOCOL not in rule.PROTOCOLS:
        raise ValueError(f"LABKIT_PROTOCOL must be one of {rule.PROTOCOLS}, got {_ENV_PROTOCOL!r}")
    return _ENV_PROTOCOL


class dispatch_protocol:
    """`with labkit.dispatch_protocol("graph"):` plans the calls made inside (capture warm-up included) by the
    table's graph-replay scores instead of its eager ones; where the two measurements pick differently, this is
    the one the model will pay. Outside it, LABKIT_PROTOCOL (default "eager") decides. An eager call's backward is
    planned with its forward (the host extension's node) or by the forward's protocol (the Python node); the
    registered op's backward (torch.compile, modes, subclasses) plans in autograd's worker thread, by
    LABKIT_PROTOCOL: set that for a compiled model under CUDA graphs."""

    def __init__(self, protocol: str):
        if protocol not in rule.PROTOCOLS:
            raise ValueError(f"protocol must be one of {rule.PROTOCOLS}, got {protocol!r}")
        self.protocol = protocol

    def __enter__(self):
        self._token = _protocol.set(self.protocol)
        return self

    def __exit__(self, *exc):
        _protocol.reset(self._token)


def _float32_scores_note(dtype: str, available: dict, what: str) -> str:
    """What a reason adds for a 2-byte x: the dispatch tables time float32, and a 2-byte row moves half the bytes
    through the same arithmetic, so the float32 scores of the `what` (paths, schedules) built for it decide (no table
    of its own measured yet); nothing for float32."""
    if dtype == dtypes.FLOAT32:
        return ""
    return f" [{dtype}: the float32 scores of the {what} built for it ({', '.join(available) or 'none'})]"


def make_plan(x, normalized_shape: tuple, weight, bias, eps, force: str | None = None,
              protocol: str | None = None) -> tuple[Plan, bool]:
    """(plan, cacheable). `force` names a path to use where eligible (the measurement's candidates); an ineligible
    forced path raises ValueError, an ineligible chosen one serves through torch. `protocol`: the rule's
    (default: current_protocol())."""
    import torch

    # a plan made under CUDA graph capture is never cached: it has no host plan (programs are prepared outside
    # capture), and caching it would keep the Python path for that signature after capture ends
    cacheable = not (x.device.type == "cuda" and torch.cuda.is_current_stream_capturing())
    why_not = refusal(x, normalized_shape, weight, bias, eps)
    if why_not is not None:
        if force not in (None, paths.NATIVE):
            raise ValueError(f"path {force!r} cannot take this input: {why_not}")
        return Plan(why_not, normalized_shape, eps), cacheable
    dev = device_info(x.get_device())
    n = math.prod(normalized_shape)
    rows = x.numel() // n
    dtype = eligibility._dtype_name(x)
    source = rule.table_source(dev)
    if force is None:
        available = paths.candidates(rows, n, dev, dtype)
        path, reason = rule.choose(rows, n, dev, tuple(available), protocol or current_protocol())
        path_launches = available.get(path)
        reason += _float32_scores_note(dtype, available, "paths")
    elif force == paths.NATIVE:
        return Plan("forced (measurement)", normalized_shape, eps, source), cacheable
    else:
        # ValueError where it cannot
        path_launches, reason = paths.launches(force, rows, n, dev, dtype), "forced (measurement)"
    if path_launches is None:
        return Plan(reason, normalized_shape, eps, source), cacheable
    if force is None:
        trusted = trust.verdict(x.get_device())
        if not trusted.allowed:
            return Plan(f"trust: {trusted.source}", normalized_shape, eps, source), cacheable and trusted.final
    if not cacheable:
        # loading modules, opting in to shared memory and building constants are not capturable: this call
        # serves through torch, and the plan is made at the first call outside capture
        return Plan("first call under CUDA graph capture: our kernels are prepared outside capture",
                    normalized_shape, eps, source), False
    return KernelPlan(path_launches, reason, x, normalized_shape, weight, bias, eps, source), True


def get_plan(x, normalized_shape: tuple, weight, bias, eps, needs_grad: bool = False,
             force: str | None = None) -> Plan:
    protocol = current_protocol()  # read once: the key and the plan must agree
    key = signature(x, normalized_shape, weight, bias, eps, needs_grad) + (protocol,)
    if force is not None:
        key = key + (force,)
    if needs_grad:
        key = key + (_forced_backward[0],)  # the backward's choice is part of a grad plan (torch_trains)
    plan = _plans.get(key)
    if plan is None:
        default = force is None and _default_context()
        plan, cacheable = make_plan(x, normalized_shape, weight, bias, eps, force, protocol)
        if needs_grad and type(plan) is Plan:  # torch forward, and no backward plan of ours for it
            plan.torch_trains = backward_plan(x, normalized_shape, weight, bias) is None
        if cacheable:
            plan.host = attach_host(plan, x, normalized_shape, weight, bias, eps, needs_grad)
            # planned in the default context from start to end: what the fast path may serve for this signature
            plan.rememberable = default and _default_context()
            if len(_plans) >= MAX_PLANS:
                clear()
            _plans[key] = plan
    return plan


def _trust_settled(x) -> bool:
    """Whether the trust gate's answer for x's device is final (a check postponed by graph capture or
    labkit.enable() is asked again: a backward choice made meanwhile is not kept)."""
    return x.device.type != "cuda" or trust.verdict(x.get_device()).final


def _default_context() -> bool:
    """No dispatch protocol in this context, no forced backward, the host extension not turned off: what every
    decision the fast path remembers was made under."""
    return _protocol.get() is None and _forced_backward[0] is None and host.unavailable_reason_off() is None


def remember(plan: Plan, x, ns: tuple, weight, bias, eps, needs_grad: bool) -> None:
    """After layer_norm's fast path missed and get_plan answered: the host extension serves this signature from
    now on where it runs what layer_norm would run for it (torch's own call: a torch forward without grad, or
    torch's kernels both ways; or the host plan), and `plan` was made in the default context."""
    if not plan.rememberable:
        return
    if plan.host is not None:
        host.remember(x, ns, weight, bias, eps, needs_grad, plan.host)
    elif plan.torch_trains or (type(plan) is Plan and not needs_grad):
        host.remember(x, ns, weight, bias, eps, needs_grad, None)


def attach_host(plan: Plan, x, ns: tuple, weight, bias, eps: float, needs_grad: bool):
    """`plan` as the host extension's LayerNormPlan: its forward program (where ours serve) and, for a grad plan,
    the backward program the rule picks (`backward_plan`); None where torch's kernels serve both ways, the input
    is not on a GPU, or the extension does not serve on this device (`host.unavailable` says why). get_plan
    attaches only plans it caches, which are never made under graph capture (programs are prepared outside it)."""
    import torch

    if x.device.type != "cuda" or plan.torch_trains:
        return None
    if not (isinstance(plan, KernelPlan) or needs_grad):  # torch's call, no backward to serve: nothing to build
        return None
    index = x.get_device()
    if host.unavailable(index) is not None:
        return None
    forward = host.program(plan.launch) if isinstance(plan, KernelPlan) else None
    gp = backward_plan(x, ns, weight, bias) if needs_grad else None
    if forward is None and gp is None:
        return None
    ones = getattr(plan, "ones", None)
    neg_zeros = getattr(plan, "neg_zeros", None)
    if weight is None and ones is None:
        ones = torch.ones(ns, dtype=x.dtype, device=x.device)
    if bias is None and neg_zeros is None:
        neg_zeros = torch.full(ns, -0.0, dtype=x.dtype, device=x.device)
    stat_shape = tuple(x.shape[:x.dim() - len(ns)]) + (1,) * len(ns)
    return host_plan(index, forward, plan.scratch_bytes if forward is not None else 0, gp, ns, eps, stat_shape,
                     x.numel() // math.prod(ns), ones, neg_zeros, getattr(plan, "align", 16))  # x's; params': T's


def host_plan(index: int, forward, forward_scratch: int, gp, ns: tuple, eps: float, stat_shape, rows: int, ones,
              neg_zeros, align: int = 16, autocast: bool = False):
    """The host extension's LayerNormPlan on device `index`: `forward` (an extension Program, or None for torch's
    forward) and GradLaunches `gp`'s backward program (None: torch's backward); `autocast`: an autocast build's
    (labkit.ops.dropin.autocast: y, grad_y and the parameter gradients float32). The one place that knows the
    constructor's arguments."""
    backward = host.program(bound(gp, index)) if gp is not None else None
    n = math.prod(ns)
    return host.module().LayerNormPlan(forward, backward, list(ns), float(eps), list(stat_shape), rows, n,
                                       forward_scratch, gp.scratch.nbytes if gp is not None else 0,
                                       gp.template.partial_groups if gp is not None else 1, ones, neg_zeros, align,
                                       gp.align if gp is not None else 16, autocast)


def backward_host_plan(x, ns: tuple, gp, ones):
    """The host extension's LayerNormPlan running GradPlan `gp`'s backward alone (no forward of ours), with `ones`
    standing in for an absent weight; None where the extension does not serve on x's device."""
    if host.unavailable(x.get_device()) is not None:
        return None
    return host_plan(x.get_device(), None, 0, gp, ns, 0.0, [gp.rows], gp.rows, ones, None)


def _detached(t):
    return None if t is None else t.detach()


def host_forward_plan(x, ns, weight, bias, eps):
    """For the host extension's kernels at a dispatch key (labkit.enable()'s aten kernels, the registered op's CUDA
    kernel), in their miss path: (its LayerNormPlan, or None where torch's kernel serves; whether to keep the
    answer; whether the Python runner serves instead, our kernels planned but the extension not serving them).

    Planned on detached tensors: these kernels run below autograd, so requires_grad decides nothing here, and CUDA
    graph trees (torch.compile's reduce-overhead) record a compiled graph on static copies of its inputs that do
    not require grad, where the warm-up ran on the caller's: the plan made at warm-up must be the one the recording
    finds (a plan is never made under capture)."""
    p = get_plan(x.detach(), tuple(ns), _detached(weight), _detached(bias), eps, True)
    if not isinstance(p, KernelPlan):
        return None, p.rememberable, False
    if p.host is None:
        return None, False, True
    return p.host, p.rememberable, False


# host_backward_plan's answers made outside capture, by what decides them (not requires_grad): what a recording
# under CUDA graph capture finds (nothing is planned under capture). Cleared with the plans.
_host_backward_plans: dict[tuple, tuple] = {}


def host_backward_plan(x, ns, weight, bias):
    """As host_forward_plan, for the backward of a forward on inputs like these (`backward_plan`); under capture,
    the answer made for the same signature outside capture, else torch's kernel."""
    import torch

    ns = tuple(ns)
    key = (x.shape, x.stride(), x.dtype, x.get_device(), x.is_neg(), ns,
           None if weight is None else (weight.shape, weight.stride(), weight.dtype, weight.get_device(),
                                        weight.is_neg()),
           None if bias is None else (bias.shape, bias.stride(), bias.dtype, bias.get_device()),
           _forced_backward[0], current_protocol())
    if x.device.type == "cuda" and torch.cuda.is_current_stream_capturing():
        # nothing prepared under capture: the answer made outside it, or torch's kernel (planned outside capture)
        hit = _host_backward_plans.get(key)
        return (hit[0], False, False) if hit is not None else (None, False, False)
    gp = backward_plan(x, ns, weight, bias)
    keep = _default_context() and _trust_settled(x)
    if gp is None:
        answer = (None, keep, False)
    else:
        ones = torch.ones(ns, dtype=x.dtype, device=x.device) if weight is None else None
        hp = backward_host_plan(x, ns, gp, ones)
        answer = (hp, keep, False) if hp is not None else (None, False, True)
    if answer[1] and answer[0] is not None:
        if len(_host_backward_plans) >= MAX_PLANS:
            _host_backward_plans.clear()
        _host_backward_plans[key] = answer
    return answer


# Other per-signature caches made from the same decisions (the trust verdict, the dispatch table): cleared with
# these plans. labkit.ops.dropin.fused registers its plans here.
dependent_caches: list[dict] = []


def clear() -> None:
    _plans.clear()
    _grad_plans.clear()
    _host_backward_plans.clear()
    for cache in dependent_caches:
        cache.clear()
    host.forget()


def cached_plans() -> int:
    return len(_plans)


# --- the backward --------------------------------------------------------------------------------------------------

_grad_plans: dict[tuple, tuple] = {}
_forced_backward: list[str | None] = [None]


class forced_backward:
    """`with forced_backward("split"):` (a schedule of labkit.ops.backward, "auto" for its own choice, or "native")
    overrides the backward rule, for measuring them against each other; our kernels still serve only inputs their
    predicate and plan take."""

    CHOICES = (paths.NATIVE, "auto", *rule.BACKWARD_PATHS)

    def __init__(self, path: str | None):
        if path is not None and path not in self.CHOICES:
            raise ValueError(f"path must be one of {self.CHOICES}, got {path!r}")
        self.path = path

    def __enter__(self):
        self.saved, _forced_backward[0] = _forced_backward[0], self.path
        host.suspend(+1)
        return self

    def __exit__(self, *exc):
        _forced_backward[0] = self.saved
        host.suspend(-1)


def backward_plan(x, ns: tuple, weight, bias):
    """The GradLaunches our backward runs for a forward on inputs like these, whatever grad_y comes, or None where
    torch's backward serves: forced to, not on a GPU, inputs our backward cannot take
    (labkit.ops.backward.input_refusal), the rule picking torch's for this shape
    (labkit.ops.dispatch.rule.choose_backward, by the current dispatch protocol's scores), or a forced schedule that
    cannot take the shape. Read when the autograd graph is recorded, so a `forced_backward` must be around the
    forward as well as the backward."""
    return backward_choice(x, ns, weight, bias)[0]


def backward_choice(x, ns: tuple, weight, bias) -> tuple:
    """(GradLaunches or None, the schedule's name or "native", why): `backward_plan` with its reason
    (labkit.explain)."""
    forced = _forced_backward[0]
    if forced == paths.NATIVE:
        return None, paths.NATIVE, "forced (measurement)"
    if x.device.type != "cuda":
        return None, paths.NATIVE, "not a GPU tensor"
    why = grad.input_refusal(x, ns, weight, bias, addresses=False) or trust.backward_refusal()
    if why is not None:
        return None, paths.NATIVE, why
    dev = device_info(x.get_device())
    n = math.prod(ns)
    rows = x.numel() // n
    dtype = eligibility._dtype_name(x)
    if forced is None:
        trusted = trust.verdict(x.get_device())
        if not trusted.allowed:
            return None, paths.NATIVE, f"trust: {trusted.source}"
        available = grad.candidates(rows, n, dev, dtype)
        path, why = rule.choose_backward(rows, n, dev, tuple(available), current_protocol())
        return available.get(path), path, why + _float32_scores_note(dtype, available, "schedules")
    try:
        gp = grad.launches(rows, n, dev, forced, dtype=dtype)
        return gp, gp.schedule, "forced (measurement)"
    except ValueError as exc:  # a forced schedule that cannot take this shape: torch's backward
        return None, paths.NATIVE, f"forced {forced!r} cannot take this shape: {exc}"


def backward_is_torchs(x, ns: tuple, weight, bias) -> bool:
    """Whether torch's backward will serve every backward of a forward on inputs like these (`backward_plan`)."""
    return backward_plan(x, ns, weight, bias) is None


def grad_plan(dy, x, ns: tuple, mean, rstd, weight, bias):
    """(GradLaunches, ones for an absent weight, its bound launches) where our backward serves this call, else None:
    the inputs pass its predicate (labkit.ops.backward.refusal) and the rule picks it
    (`backward_plan`). Cached per signature like the forward's plans; the per-call address checks run every time."""
    import torch

    forced = _forced_backward[0]
    # everything grad.refusal reads that is not checked per call (the registered op's backward may be called
    # directly, with any dtypes and devices)
    key = (x.shape, x.stride(), x.dtype, x.get_device(), x.is_neg(), x._is_zerotensor(), ns, dy.stride(), dy.dtype,
           dy.get_device(), dy.is_neg(), dy._is_zerotensor(), mean.dtype, rstd.dtype, mean.numel(),
           mean.is_contiguous(), rstd.is_contiguous(), mean.is_neg(), rstd.is_neg(), mean._is_zerotensor(),
           rstd._is_zerotensor(),
           None if weight is None else (weight.shape, weight.stride(), weight.dtype, weight.get_device(),
                                        weight.is_neg(), weight._is_zerotensor()),
           None if bias is None else (bias.shape, bias.stride(), bias.dtype, bias.get_device(), bias.is_neg(),
                                      bias._is_zerotensor()), forced, current_protocol())
    hit = _grad_plans.get(key)
    if hit is None:
        hit = (None, None)
        capturing = torch.cuda.is_current_stream_capturing()
        if not capturing and grad.refusal(dy, x, ns, mean, rstd, weight, bias, addresses=False) is None:
            gp = backward_plan(x, ns, weight, bias)
            if gp is not None:
                ones = torch.ones(ns, dtype=x.dtype, device=x.device) if weight is None else None
                hit = (gp, ones, bound(gp, x.get_device()), backward_host_plan(x, ns, gp, ones))
        if not capturing and _trust_settled(x):  # a refusal under capture is not the signature's answer
            if len(_grad_plans) >= MAX_PLANS:
                _grad_plans.clear()
            _grad_plans[key] = hit
    if hit[0] is None or hit[0].misaligned(x, dy, weight):
        return None
    return hit


def backward(dy, x, ns: tuple, mean, rstd, weight, bias, mask):
    """(dx, dweight, dbias) with torch's bits: our kernels where grad_plan says so, torch's backward elsewhere."""
    import torch

    if dy.device.type == "cuda" and not dy.is_contiguous():
        dy = dy.contiguous()  # what torch's backward does first (LayerNormBackwardKernelImpl)
    found = grad_plan(dy, x, ns, mean, rstd, weight, bias) if dy.device.type == "cuda" else None
    if found is None:
        return torch.ops.aten.native_layer_norm_backward.default(dy, x, list(ns), mean, rstd, weight, bias,
                                                                 list(mask))
    p, ones, launcher, hp = found
    # reshape: a view when mean/rstd are contiguous (the forward's), a contiguous copy when a caller's are not
    mean, rstd = mean.reshape(-1), rstd.reshape(-1)
    if hp is not None:  # the same program from C++ (the node's own backward entry point)
        return host.module().backward(hp, dy, x, mean, rstd, weight, bias, list(mask))
    return grad.run(p, dy, x, ns, mean, rstd, weight, bias, mask, x.get_device(), ones, launcher)
