"""Which forward path torch's CUDA LayerNorm takes for given tensors, decided as its host code decides.

Read from `aten/src/ATen/native/cuda/layer_norm_kernel.cu` (LayerNormKernelImplInternal): the vectorized kernel
runs only for float32/16/bf16, N <= 2**24, N % 4 == 0 and X, Y, gamma, beta aligned to the vector width. Every
wrapper that promises torch's bits asks here first, because on the other path torch reduces in another order.
The full description of the arithmetic (and what it was checked against) is labkit.studies.source_reading.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from labkit.core.validate import MAX_NORMALIZED

VECTORIZED = "vectorized"
ROWWISE = "rowwise_moments"
UNSUPPORTED = "unsupported"


@dataclass(frozen=True)
class PathConditions:
    """When LayerNormKernelImplInternal launches vectorized_layer_norm_kernel (all must hold)."""

    dtypes: tuple[str, ...] = ("float32", "float16", "bfloat16")  # double always takes the other path
    max_n: int = MAX_NORMALIZED  # `1ULL << std::numeric_limits<float>::digits`: counts are floats
    n_multiple: int = 4  # vec_size: every row starts aligned when the tensor does
    alignment: str = "vec_size * sizeof(T) bytes (16 for float32, 8 for float16/bfloat16)"
    aligned_buffers: tuple[str, ...] = ("X", "Y", "gamma", "beta")
    may_be_null: tuple[str, ...] = ("gamma", "beta")  # an undefined gamma/beta counts as aligned
    note: str = ("torch makes X, gamma and beta contiguous first (expect_contiguous): a non-contiguous input is "
                 "copied to a fresh, aligned buffer, so only contiguous misaligned views reach the other path")

    def alignment_bytes(self, itemsize: int) -> int:
        return 4 * itemsize


CONDITIONS = PathConditions()


def _dtype_name(t) -> str:
    return str(t.dtype).replace("torch.", "")


def torch_path(x, weight, bias, y=None, normalized_shape=None,
               conditions: PathConditions = CONDITIONS) -> tuple[str, str]:
    """Which forward path torch's CUDA LayerNorm takes for these tensors: ("vectorized" | "rowwise_moments" |
    "unsupported", reason).

    Decided as LayerNormKernelImplInternal does, from dtype, N (the product of normalized_shape, default
    weight's or bias's shape), N % 4, and the addresses of X, Y, gamma and beta (`y` is the output buffer if
    the caller has one; torch's own fresh output is always aligned). Tensors may live on any device: only
    their dtype, shape and data_ptr are read, so the decision can be shown on a CPU-only machine.
    """
    cond = conditions
    if normalized_shape is None:
        ref = weight if weight is not None else bias
        if ref is None:
            raise ValueError("pass normalized_shape when both weight and bias are None")
        normalized_shape = tuple(ref.shape)
    n = math.prod(int(d) for d in normalized_shape)
    dtype = _dtype_name(x)
    if dtype == "float64":
        return ROWWISE, "dtype float64: torch's vectorized kernel handles float32/float16/bfloat16 only"
    if dtype not in cond.dtypes:
        return UNSUPPORTED, f"dtype {dtype}: torch's CUDA LayerNorm is for floating types"
    if n > cond.max_n:
        return ROWWISE, (f"N = {n} > 2**24 = {cond.max_n}: float counts would lose integers, torch uses "
                         f"RowwiseMomentsCUDAKernel")
    if n % cond.n_multiple:
        return ROWWISE, f"N = {n} is not a multiple of {cond.n_multiple}: rows would not start float4-aligned"
    align = cond.alignment_bytes(x.element_size())
    buffers = {"X": x, "Y": y, "gamma": weight, "beta": bias}
    for name in cond.aligned_buffers:
        t = buffers[name]
        if t is None:
            continue  # undefined gamma/beta count as aligned; Y defaults to torch's own aligned allocation
        if name == "X" and not t.is_contiguous():
            continue  # torch copies a non-contiguous input to a fresh (aligned) buffer first
        if t.numel() and t.data_ptr() % align:
            return ROWWISE, (f"{name} is {t.data_ptr() % align} bytes off {align}-byte alignment "
                             f"(can_vectorize fails)")
    return VECTORIZED, (f"{dtype}, N = {n} <= 2**24, N % 4 == 0, X/Y/gamma/beta {align}-byte aligned "
                        f"(absent gamma/beta count as aligned)")


def require_vectorized(x, weight, bias, y=None, normalized_shape=None) -> None:
    """Raise ValueError when torch itself would not take the vectorized path for these tensors: its order is
    then RowwiseMomentsCUDAKernel's block reduction over WelfordOps, and torch's bits cannot be promised."""
    path, reason = torch_path(x, weight, bias, y, normalized_shape)
    if path != VECTORIZED:
        raise ValueError(f"torch itself would take its other path ({path}: RowwiseMomentsCUDAKernel + "
                         f"LayerNormForwardCUDAKernel, a different reduction order) because {reason}; "
                         f"this reference-order kernel reproduces only the vectorized path")
