"""Bit-exact CPU emulator of PyTorch's vectorized FP32 LayerNorm statistics.

Models ``compute_stats`` in ``aten/src/ATen/native/cuda/layer_norm_kernel.cu``
(the float4 path): one block of 128 threads (blockDim = (32, 4)) per row,
thread ``t = lane + 32*warp`` reads float4 vectors ``t, t+128, ...`` and
pushes their components x, y, z, w into a float32 Welford state; then a
shuffle-down tree inside each warp and a shared-memory tree over the four
warps, all with ``cuWelfordCombine``.  Every rounding is reproduced:
float32 numpy arithmetic for plain operations (IEEE round to nearest), the
exact :func:`labkit.exact.fma.fma32` wherever nvcc's ``--fmad=true`` contracts a
multiply-add, and correctly rounded ``1.0f/n`` (IEEE division; nvcc does not
use the approximate reciprocal without ``--use_fast_math``).

What is *not* reproduced is ``rsqrtf``: on the GPU it is MUFU.RSQ, a
hardware approximation.  :func:`reference_stats` therefore reports the
correctly rounded value as a comparison point and :func:`ulp_distance`
measures how far torch's rstd is from it; :func:`reference_output` takes
whatever rstd the caller supplies (torch's, to reproduce its output).

Arrays are vectorized over (rows, 128 threads); the only Python loop that
scales with N is the one over push steps, ``ceil(N/4/128)`` of them.
"""

from __future__ import annotations

from fractions import Fraction
from typing import NamedTuple

import numpy as np

from labkit.exact.fma import fma32

__all__ = [
    "CONTRACTIONS",
    "welford_rows",
    "reference_stats",
    "reference_output",
    "ulp_distance",
    "reciprocal_table",
]

THREADS = 128
WARP_SIZE = 32
WARPS = THREADS // WARP_SIZE
VEC = 4
# Which product of ``nA*A.mean + nB*B.mean`` nvcc fuses into the FFMA.
CONTRACTIONS = ("first_product", "second_product")

_F32 = np.float32


class _Welford(NamedTuple):
    mean: np.ndarray
    m2: np.ndarray
    count: np.ndarray


# ------------------------------------------------------------- validation ---


def _require_float32(name: str, x, ndim: int) -> np.ndarray:
    if not isinstance(x, np.ndarray) or x.dtype != np.float32:
        raise ValueError(f"{name} must be a float32 numpy array")
    if x.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimension(s), got shape {x.shape}")
    return x


def _require_rows(x2d) -> np.ndarray:
    x2d = _require_float32("x2d", x2d, 2)
    if x2d.shape[0] == 0 or x2d.shape[1] == 0:
        raise ValueError(f"x2d must be non-empty, got shape {x2d.shape}")
    if x2d.shape[1] % VEC:
        raise ValueError(f"row length must be a multiple of {VEC} (float4 path), got {x2d.shape[1]}")
    return x2d


def _require_contraction(contraction: str) -> None:
    if contraction not in CONTRACTIONS:
        raise ValueError(f"contraction must be one of {CONTRACTIONS}, got {contraction!r}")


# ------------------------------------------------------------ reciprocals ---

_recip_cache = np.empty(0, dtype=np.float32)


def reciprocal_table(max_count: int) -> np.ndarray:
    """Return float32 ``1.0f/k`` for k = 0..max_count (entry 0 is inf).

    Each entry is the IEEE correctly rounded quotient, i.e. the same bits as
    CUDA's ``1.f/k`` without fast-math; a table just avoids redoing the
    division on every push.  The returned array is shared: do not modify it.
    """
    global _recip_cache
    if not isinstance(max_count, (int, np.integer)) or max_count < 0:
        raise ValueError(f"max_count must be a non-negative integer, got {max_count!r}")
    if len(_recip_cache) <= max_count:
        k = np.arange(max(max_count + 1, 2 * len(_recip_cache)), dtype=np.float32)
        with np.errstate(divide="ignore"):
            _recip_cache = _F32(1.0) / k
        _recip_cache.setflags(write=False)
    return _recip_cache[: max_count + 1]


# ------------------------------------------------------------ Welford ops ---


def _push(mean: np.ndarray, m2: np.ndarray, v: np.ndarray, recip: np.float32):
    # cuWelfordOnlineSum; count is uniform over the pushing threads, so the
    # caller passes the reciprocal of the new count as a scalar.
    delta = v - mean
    new_mean = fma32(delta, recip, mean)
    new_m2 = fma32(delta, v - new_mean, m2)
    return new_mean, new_m2


def _combine(b: _Welford, a: _Welford, contraction: str) -> _Welford:
    # cuWelfordCombine(dataB=b, dataA=a).
    delta = b.mean - a.mean
    count = a.count + b.count
    with np.errstate(divide="ignore", invalid="ignore"):
        coef = _F32(1.0) / count
        n_a = a.count * coef
        n_b = b.count * coef
        if contraction == "first_product":
            mean = fma32(n_a, a.mean, n_b * b.mean)
        else:
            mean = fma32(n_b, b.mean, n_a * a.mean)
        m2 = fma32((delta * delta) * a.count, n_b, a.m2 + b.m2)
    nonempty = count > 0
    zero = _F32(0.0)
    return _Welford(np.where(nonempty, mean, zero), np.where(nonempty, m2, zero), count)


def _thread_counts(n_vec: int) -> np.ndarray:
    t = np.arange(THREADS)
    vectors = np.where(t < n_vec, (n_vec - 1 - t) // THREADS + 1, 0)
    return (VEC * vectors).astype(np.float32)


def _thread_states(x2d: np.ndarray) -> _Welford:
    rows, n = x2d.shape
    n_vec = n // VEC
    x3 = x2d.reshape(rows, n_vec, VEC)
    mean = np.zeros((rows, THREADS), dtype=np.float32)
    m2 = np.zeros((rows, THREADS), dtype=np.float32)
    steps = -(-n_vec // THREADS)
    recip = reciprocal_table(VEC * steps)
    for step in range(steps):
        first = step * THREADS
        # Threads whose vector index t + first is past the row end do not
        # push; they are exactly the suffix t >= active, so a slice is the mask.
        active = min(THREADS, n_vec - first)
        # One contiguous (component, row, thread) copy per step keeps the
        # four pushes below on unit-stride arrays.
        chunk = np.ascontiguousarray(x3[:, first : first + active, :].transpose(2, 0, 1))
        mu, sq = mean[:, :active], m2[:, :active]
        for comp in range(VEC):
            mu, sq = _push(mu, sq, chunk[comp], recip[VEC * step + comp + 1])
        mean[:, :active], m2[:, :active] = mu, sq
    count = np.broadcast_to(_thread_counts(n_vec), (rows, THREADS)).copy()
    return _Welford(mean, m2, count)


def _shfl_down(x: np.ndarray, offset: int) -> np.ndarray:
    # Lanes whose source lane is out of range get their own value back.
    out = x.copy()
    out[..., : WARP_SIZE - offset] = x[..., offset:]
    return out


def _block_reduce(state: _Welford, contraction: str) -> _Welford:
    rows = state.mean.shape[0]
    lanes = _Welford(*(f.reshape(rows, WARPS, WARP_SIZE) for f in state))
    offset = WARP_SIZE // 2
    while offset > 0:
        other = _Welford(*(_shfl_down(f, offset) for f in lanes))
        lanes = _combine(lanes, other, contraction)
        offset //= 2
    # Only lane 0 of each warp is meaningful from here on.
    warps = _Welford(*(f[:, :, 0].copy() for f in lanes))
    offset = WARPS // 2
    while offset > 0:
        own = _Welford(*(f[:, :offset] for f in warps))
        upper = _Welford(*(f[:, offset : 2 * offset] for f in warps))
        merged = _combine(own, upper, contraction)
        for field, value in zip(warps, merged):
            field[:, :offset] = value
        offset //= 2
    return _Welford(*(f[:, 0].copy() for f in warps))


def welford_rows(x2d: np.ndarray, *, contraction: str = "first_product"):
    """Emulate the block's Welford statistics for each row of ``x2d``.

    Returns ``(mean, m2)``, float32 arrays of length rows: warp 0's mean and
    sigma2 after the inter-warp tree, i.e. before the division by N.

    ``contraction`` says how ``mean = nA*A.mean + nB*B.mean`` in
    ``cuWelfordCombine`` is fused: ``"first_product"`` is
    ``fma(nA, A.mean, round(nB*B.mean))``, ``"second_product"`` is
    ``fma(nB, B.mean, round(nA*A.mean))``.  Which one nvcc emits must be
    confirmed against the kernel's SASS.  When every merge joins two equal
    power-of-two counts (N/4 a multiple of 128 with N/512 a power of two,
    e.g. N = 4,194,304: 32,768 elements per thread), nA = nB = 0.5 exactly,
    both products are exact halvings (barring subnormal means) and the
    choice cannot change any bit.  Equal counts alone are not enough:
    ``41 * (1.0f/82)`` is not 0.5 in float32.
    """
    x2d = _require_rows(x2d)
    _require_contraction(contraction)
    block = _block_reduce(_thread_states(x2d), contraction)
    return block.mean, block.m2


# ------------------------------------------------------------------ rstd ---


def _rsqrt_correctly_rounded(t: np.float32) -> np.float32:
    # float64 gives a guess within a float32 ulp; the exact test
    # lo_mid**2 * t < 1 < hi_mid**2 * t then picks the right neighbour
    # (ties are impossible: a midpoint squared times a float32 is never 1).
    if not (np.isfinite(t) and t > 0):
        with np.errstate(divide="ignore", invalid="ignore"):
            return _F32(1.0 / np.sqrt(np.float64(t)))
    exact_t = Fraction(float(t))
    guess = _F32(1.0 / np.sqrt(np.float64(t)))
    for y in (np.nextafter(guess, _F32(0)), guess, np.nextafter(guess, _F32(np.inf))):
        lo = (Fraction(float(np.nextafter(y, _F32(0)))) + Fraction(float(y))) / 2
        hi = (Fraction(float(np.nextafter(y, _F32(np.inf)))) + Fraction(float(y))) / 2
        if lo * lo * exact_t < 1 < hi * hi * exact_t:
            return _F32(y)
    raise ArithmeticError(f"no correctly rounded rsqrt found for {t!r}")  # unreachable


def reference_stats(x2d: np.ndarray, eps: float, *, contraction: str = "first_product") -> dict:
    """Statistics as the kernel computes them, plus a correctly rounded rstd.

    Returns a dict of float32 arrays (length rows):

    - ``mean``: the kernel's mean, bit-exact (given the contraction choice),
    - ``m2``: the block's sigma2 before the division,
    - ``var``: ``m2 / float(N)`` as float32 division, as in the kernel,
    - ``rstd_cr``: ``1/sqrt(var + eps)`` correctly rounded to float32, with
      ``var + eps`` a float32 addition and ``eps`` rounded to float32 as torch
      does.  This is NOT torch's rstd: the kernel calls ``rsqrtf``, a
      hardware approximation (MUFU.RSQ) that can differ by an ulp or more;
      use :func:`ulp_distance` to compare.
    """
    x2d = _require_rows(x2d)
    eps32 = _F32(eps)
    if not np.isfinite(eps32) or eps32 < 0:
        raise ValueError(f"eps must be finite and non-negative, got {eps!r}")
    mean, m2 = welford_rows(x2d, contraction=contraction)
    var = m2 / _F32(x2d.shape[1])
    rstd = np.array([_rsqrt_correctly_rounded(t) for t in var + eps32], dtype=np.float32)
    return {"mean": mean, "m2": m2, "var": var, "rstd_cr": rstd}


# ---------------------------------------------------------------- output ---


def reference_output(x2d, mean, rstd, gamma, beta) -> np.ndarray:
    """``y = gamma * (rstd * (x - mean)) + beta`` with the kernel's roundings.

    ``x - mean`` and ``rstd * (...)`` are rounded float32 operations and the
    outer multiply-add is one fused FMA.  Given torch's own ``mean`` and
    ``rstd`` this reproduces its output bit for bit.
    """
    x2d = _require_rows(x2d)
    rows, n = x2d.shape
    mean = _require_float32("mean", mean, 1)
    rstd = _require_float32("rstd", rstd, 1)
    gamma = _require_float32("gamma", gamma, 1)
    beta = _require_float32("beta", beta, 1)
    if mean.shape != (rows,) or rstd.shape != (rows,):
        raise ValueError(f"mean and rstd must have shape ({rows},)")
    if gamma.shape != (n,) or beta.shape != (n,):
        raise ValueError(f"gamma and beta must have shape ({n},)")
    y = np.empty_like(x2d)
    # Row at a time bounds the float64 temporaries inside fma32.
    for r in range(rows):
        y[r] = fma32(gamma, rstd[r] * (x2d[r] - mean[r]), beta)
    return y


# ------------------------------------------------------------------ ulps ---


def _ordered(x: np.ndarray) -> np.ndarray:
    # Map float32 bit patterns to integers that increase with the value;
    # +0 and -0 both map to 0.
    bits = x.view(np.int32).astype(np.int64)
    return np.where(bits < 0, -(bits & 0x7FFFFFFF), bits)


def ulp_distance(a, b) -> np.ndarray:
    """Number of float32 values between ``a`` and ``b`` (int64, broadcasting).

    Neighbours are 1 apart, +0 and -0 are 0 apart, the smallest positive and
    negative subnormals are 2 apart, FLT_MAX and inf are 1 apart.  NaNs have
    no place in the ordering and raise ValueError.
    """
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != np.float32 or b.dtype != np.float32:
        raise ValueError("ulp_distance needs float32 inputs")
    if np.isnan(a).any() or np.isnan(b).any():
        raise ValueError("ulp_distance is undefined for NaN")
    return np.abs(_ordered(a) - _ordered(b))
