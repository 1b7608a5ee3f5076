"""Per-input-signature plans: which path serves an input (labkit.ops.dropin.rule), with its launches prepared.

A plan is made once per (shape, strides, dtype, device, normalized_shape, eps, weight/bias signatures, grad need)
and cached; a call then costs a dictionary lookup, the outputs' allocation and the launches. The predicate that
decides whether our kernels may take an input never raises: an input they cannot take goes to torch's kernel,
which gives torch's bits by definition. Addresses are not part of the signature, so alignment (torch's own
vectorized-path condition on X, gamma, beta) is checked per call.
"""
from __future__ import annotations

import math

import numpy as np

from labkit.core.validate import MAX_NORMALIZED, MAX_NUMEL
from labkit.ops.dropin import launcher, rule

MAX_PLANS = 4096
_plans: dict[tuple, "Plan"] = {}
_devices: dict[int, rule.Device] = {}


def device_info(index: int) -> rule.Device:
    d = _devices.get(index)
    if d is None:
        import torch

        p = torch.cuda.get_device_properties(index)
        d = _devices[index] = rule.Device(p.major * 10 + p.minor, p.multi_processor_count)
    return d


def _tensor_sig(t):
    return None if t is None else (t.shape, t.stride(), t.dtype, t.get_device(), t.requires_grad)


def signature(x, normalized_shape: tuple, weight, bias, eps: float, needs_grad: bool) -> tuple:
    return (x.shape, x.stride(), x.dtype, x.get_device(), normalized_shape, eps, _tensor_sig(weight),
            _tensor_sig(bias), needs_grad)


def refusal(x, normalized_shape: tuple, weight, bias, eps) -> str | None:
    """Why our kernels may not take this input (None: they may, if aligned). Never raises."""
    import torch

    if not isinstance(x, torch.Tensor) or x.device.type != "cuda":
        return f"x is on {getattr(x, 'device', type(x).__name__)}: torch's own kernel for that device"
    if x.dtype != torch.float32:
        return f"dtype {x.dtype}: our kernels are float32 only"
    k = len(normalized_shape)
    if k == 0 or x.dim() < k or tuple(x.shape[x.dim() - k:]) != normalized_shape:
        return f"x's trailing dims {tuple(x.shape)} do not end in normalized_shape {normalized_shape}"
    for name, t in (("weight", weight), ("bias", bias)):
        if t is None:
            continue
        if not isinstance(t, torch.Tensor) or t.dtype != torch.float32 or t.device != x.device:
            return f"{name} is not a float32 tensor on {x.device}"
        if tuple(t.shape) != normalized_shape or not t.is_contiguous():
            return f"{name} is not contiguous with shape {normalized_shape}"
    if weight is None and bias is not None:
        # torch computes (rstd * (x - mean)) + beta, which its compiler contracts into one fma; our output
        # expression is gamma * (rstd * (x - mean)) + beta, which with gamma = 1 rounds the product first.
        return "bias without weight: torch's output expression contracts differently from ours"
    n = math.prod(normalized_shape)
    if n <= 0 or x.numel() == 0:
        return "empty input"
    if n % 4:
        return f"N = {n} is not a multiple of 4: torch takes its other path (RowwiseMomentsCUDAKernel)"
    if n > MAX_NORMALIZED:
        return f"N = {n} > 2**24: torch takes its other path (RowwiseMomentsCUDAKernel)"
    if x.numel() > MAX_NUMEL:
        return "x.numel() >= 2**31: our kernels index with 32 bits"
    if not x.is_contiguous():
        return "x is not contiguous: torch copies it first; its kernel then serves"
    if not (isinstance(eps, (int, float)) and math.isfinite(eps) and eps >= 0):
        return f"eps = {eps!r} is not a finite float >= 0"
    return None


class Plan:
    """How one input signature is served. `forward(x, w, b, stats)` returns y, or (y, mean, rstd) with mean and
    rstd shaped as torch.native_layer_norm's."""

    path = "native"

    def __init__(self, reason: str, normalized_shape: tuple, eps: float):
        self.reason, self.normalized_shape, self.eps = reason, normalized_shape, eps

    def forward(self, x, weight, bias, stats: bool):
        import torch

        if stats:
            return torch.native_layer_norm(x, self.normalized_shape, weight, bias, self.eps)
        return torch.layer_norm(x, self.normalized_shape, weight, bias, self.eps)


class KernelPlan(Plan):
    """Our kernels for an eligible signature; falls back to torch for a call whose buffers are misaligned."""

    def __init__(self, path: str, reason: str, x, normalized_shape: tuple, weight, bias, eps: float):
        import torch

        super().__init__(reason, normalized_shape, eps)
        self.path = path
        self.torch = torch
        self.index = x.get_device()
        self.device = x.device
        self.shape = tuple(x.shape)
        self.n = n = math.prod(normalized_shape)
        self.rows = rows = x.numel() // n
        self.stat_shape = self.shape[:x.dim() - len(normalized_shape)] + (1,) * len(normalized_shape)
        self.n_arg, self.eps_arg, self.rows_arg = np.int32(n), np.float32(eps), np.int32(rows)
        self.n4_arg = np.int32(n // 4)
        # absent affine: gamma 1 (gamma * t rounds as t alone, or as the product torch takes) and beta -0.0
        # (fma(g, t, -0.0) == g * t rounded, signed zeros included), so the one output expression serves all.
        self.ones = torch.ones(normalized_shape, device=x.device) if weight is None else None
        self.neg_zeros = torch.full(normalized_shape, -0.0, device=x.device) if bias is None else None
        self._prepare()

    def _prepare(self):  # pragma: no cover - GPU only
        from labkit.ops import chain, reference_order

        rows, n, i = self.rows, self.n, self.index
        n4 = n // 4
        if self.path == "chain":
            self.blocking = chain.choose_blocking(n)
            self.aff = launcher.function("affine_columns", "affine_columns", i)
            self.aff_grid, self.aff_block = (-(-n4 // chain.AFFINE_THREADS),), (chain.AFFINE_THREADS,)
            if self.blocking == "tma":
                tma = chain.TmaConfig()
                self.smem = chain.tma_smem_bytes(tma)
                self.stats_fn = launcher.function("chain_stats_tma", "chain_stats_tma", i, self.smem)
                self.grid, self.block = (4, rows), (64,)
                self.tmap = launcher.TensorMapEncoder((128, 4, n // 512, rows), (512, 2048, 4 * n),
                                                      (128, 1, tma.steps, 1))
            else:
                b = chain.BLOCKINGS[self.blocking]
                self.smem = b.smem_bytes
                self.stats_fn = launcher.function("chain_stats", b.function, i, self.smem)
                self.grid, self.block = (4 // b.warps, rows), (b.threads,)
                self.recip = np.uint64(chain._recip_table(self.device).data_ptr())
        elif self.path == "rows_fused":
            self.fn = launcher.function("rows_fused", chain.rows_fused_function(n), i)
        elif self.path == "reference_order":
            self.stats_fn = launcher.function("reference_stats", "reference_order_stats", i)
            self.aff = launcher.function("affine_rows", "affine_rows_interleaved", i)
            self.aff_grid = (rows, -(-n4 // reference_order.THREADS_AFFINE))
        else:
            raise ValueError(f"unknown kernel path {self.path!r}")

    def forward(self, x, weight, bias, stats: bool):
        xp = x.data_ptr()
        wp = (weight if weight is not None else self.ones).data_ptr()
        bp = (bias if bias is not None else self.neg_zeros).data_ptr()
        if (xp | wp | bp) & 15:  # torch's can_vectorize fails too: its other path serves this call
            return Plan.forward(self, x, weight, bias, stats)
        torch, rows = self.torch, self.rows
        y = torch.empty(self.shape, dtype=torch.float32, device=self.device)
        scratch_floats = 13 * rows if self.path == "chain" else 0
        if stats:
            mean = torch.empty(self.stat_shape, dtype=torch.float32, device=self.device)
            rstd = torch.empty(self.stat_shape, dtype=torch.float32, device=self.device)
            scratch = torch.empty(scratch_floats, dtype=torch.float32, device=self.device) if scratch_floats else None
            mp, rp = mean.data_ptr(), rstd.data_ptr()
        else:
            scratch = torch.empty(scratch_floats + 2 * rows, dtype=torch.float32, device=self.device)
            mp = scratch.data_ptr() + 4 * scratch_floats
            rp = mp + 4 * rows
        sp = scratch.data_ptr() if scratch is not None else 0
        sc = launcher.scope()
        if sc.current(self.index):
            self._launch(xp, wp, bp, y.data_ptr(), mp, rp, sp)
        else:
            with sc.enter(self.index):
                self._launch(xp, wp, bp, y.data_ptr(), mp, rp, sp)
        return (y, mean, rstd) if stats else y

    def _launch(self, xp, wp, bp, yp, mp, rp, sp):  # pragma: no cover - GPU only
        s, s_ptr = launcher.stream(self.index)
        u = np.uint64
        x, w, b, y, mean, rstd = u(xp), u(wp), u(bp), u(yp), u(mp), u(rp)
        if self.path == "chain":
            warp_state, row_done = u(sp), sp + 48 * self.rows
            launcher.memset_async(row_done, 4 * self.rows, s_ptr)
            if self.blocking == "tma":
                args = (self.tmap(xp), warp_state, u(row_done), mean, rstd, self.n_arg, self.eps_arg)
            else:
                args = (x, self.recip, warp_state, u(row_done), mean, rstd, self.n_arg, self.eps_arg)
            self.stats_fn(self.grid, self.block, args, shared_mem=self.smem, stream=s)
            self.aff(self.aff_grid, self.aff_block, (x, mean, rstd, w, b, y, self.rows_arg, self.n4_arg),
                     stream=s)
        elif self.path == "rows_fused":
            self.fn((self.rows,), (32, 4), (x, w, b, y, mean, rstd, self.n_arg, self.eps_arg), stream=s)
        else:
            self.stats_fn((self.rows,), (32, 4), (x, mean, rstd, self.n_arg, self.eps_arg), stream=s)
            self.aff(self.aff_grid, (256,), (x, mean, rstd, w, b, y, self.n4_arg), stream=s)


def _capturing(index: int) -> bool:
    import torch

    return torch.cuda.is_current_stream_capturing()


def make_plan(x, normalized_shape: tuple, weight, bias, eps, force: str | None = None) -> tuple[Plan, bool]:
    """(plan, cacheable). `force` names a path to use where eligible (the measurement's candidates);
    an ineligible forced path raises ValueError, an ineligible chosen one serves through torch."""
    why_not = refusal(x, normalized_shape, weight, bias, eps)
    if why_not is not None:
        if force not in (None, "native"):
            raise ValueError(f"path {force!r} cannot take this input: {why_not}")
        return Plan(why_not, normalized_shape, eps), True
    index = x.get_device()
    dev = device_info(index)
    n = math.prod(normalized_shape)
    rows = x.numel() // n
    if force is None:
        path, reason = rule.choose(rows, n, dev)
    else:
        path, reason = force, "forced (measurement)"
        if force not in rule.PATHS:
            raise ValueError(f"path must be one of {rule.PATHS}, got {force!r}")
        if dev.arch < rule.PATH_MIN_ARCH[force]:
            raise ValueError(f"path {force!r} needs sm_{rule.PATH_MIN_ARCH[force]}, device is sm_{dev.arch}")
        if force == "chain" and rows > 65535:
            raise ValueError(f"the chain schedule holds at most 65535 rows (got rows={rows})")
    if path == "native":
        return Plan(reason, normalized_shape, eps), True
    if _capturing(index):
        # loading modules, opting in to shared memory and building constants are not capturable: this call
        # serves through torch, and the plan is made at the first call outside capture
        return Plan("first call under CUDA graph capture: our kernels are prepared outside capture",
                    normalized_shape, eps), False
    return KernelPlan(path, reason, x, normalized_shape, weight, bias, eps), True


def get_plan(x, normalized_shape: tuple, weight, bias, eps, needs_grad: bool = False,
             force: str | None = None) -> Plan:
    key = signature(x, normalized_shape, weight, bias, eps, needs_grad)
    if force is not None:
        key = key + (force,)
    plan = _plans.get(key)
    if plan is None:
        plan, cacheable = make_plan(x, normalized_shape, weight, bias, eps, force)
        if cacheable:
            if len(_plans) >= MAX_PLANS:
                _plans.clear()
            _plans[key] = plan
    return plan


def clear() -> None:
    _plans.clear()


def cached_plans() -> int:
    return len(_plans)
