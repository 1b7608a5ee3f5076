"""Exactly rounded float32 fused multiply-add for numpy.

numpy has no fma, and the obvious float64 route ``np.float32(a*b + c)`` rounds
twice (once to float64, once to float32), which is wrong whenever the float64
sum lands exactly on a float32 rounding midpoint that the exact sum was not on.
GPU kernels compiled with ``--fmad=true`` contract ``a*b + c`` into one FFMA,
so bit-exact emulation needs the single rounding.

Method (:func:`fma32`):

1. Widen a, b, c to float64.  The product of two float32 values has at most
   48 significant bits and an exponent well inside float64's range, so
   ``p = a*b`` is exact, including for float32 subnormals.
2. ``s = p + c`` in float64 (round to nearest), and Knuth's TwoSum gives the
   exact error ``e`` with ``p + c == s + e`` (no overflow is possible because
   |p| < 2**256 and |c| < 2**128).
3. Turn ``s`` into the round-to-odd result at 53 bits: if ``e != 0`` (the
   sum was inexact), truncate toward zero (``s`` itself when ``e`` has the
   sign of ``s``, else the float64 neighbour of ``s`` toward zero) and set
   the last significand bit.  Both are integer operations on the bit
   pattern.  The effect is that an inexact sum never sits on a value with
   an even last bit, and every float32 rounding midpoint (and the float32
   overflow threshold) has an even last bit as a float64.
4. Round that float64 to float32 (hardware round to nearest even).  Round to
   odd at precision q followed by round to nearest at precision k is a single
   correct rounding whenever q >= k + 2 (Boldo & Melquiond, "Emulation of FMA
   and correctly rounded sums: proved algorithms using rounding to odd",
   IEEE TC 2008).  Here q = 53 and k <= 24.  For float32 subnormal results
   the effective k is smaller and the float64 value is still a normal
   float64 (|s| >= 2**-298), so the guard bits are still there; overflow to
   inf happens in the final cast, whose threshold 2**128 - 2**103 is itself a
   float64 value that round-to-odd never lands on unless the sum is exact.

Specials: if the float64 sum is not finite (an input is inf or nan), the
float64 result is already the IEEE answer and is cast unchanged.  Zero
signs come out of float64 arithmetic as IEEE requires: an exact zero sum is
+0 unless both the product and c are -0, and a nonzero sum that rounds to
zero keeps its sign.  NaN payloads are whatever the float64 arithmetic
produced; GPUs return a canonical NaN, so compare NaNs with ``isnan``.

:func:`fma32_scalar` is an independent, slow, exact scalar version built on
:class:`fractions.Fraction`; it is meant as a reference for tests and for
brute-force emulators.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

__all__ = ["fma32", "fma32_scalar", "round_fraction_to_float32"]

_F32_MIN_EXP = -126  # exponent of the smallest normal float32
_F32_MANT_BITS = 23
_F32_OVERFLOW = Fraction(2**128)


def _check_float32(name: str, x: np.ndarray) -> None:
    if x.dtype != np.float32:
        raise ValueError(f"{name} must be float32, got {x.dtype}")


def _round_to_odd(s: np.ndarray, e: np.ndarray) -> np.ndarray:
    # Round to odd = truncate toward zero, then set the last bit if inexact.
    # On sign-magnitude bit patterns, truncation is "bits - 1" exactly when s
    # was rounded away from zero, i.e. when e and s differ in sign; the xor of
    # the sign bits shifted arithmetically gives that -1 or 0.
    # abs(e) > 0 is False for nan, so inf/nan sums (nan error) stay as they are.
    bits = s.view(np.int64)
    away = (bits ^ e.view(np.int64)) >> 63
    odd = (bits + away) | 1
    return np.where(np.abs(e) > 0, odd, bits).view(np.float64)


def fma32(a, b, c) -> np.ndarray:
    """Return ``a*b + c`` rounded once to float32 (round to nearest even).

    Inputs broadcast like numpy arithmetic and must be float32 (arrays or
    numpy float32 scalars); Python floats are rejected because silently
    rounding them to float32 would hide a bug in the caller.  Always returns
    a float32 ndarray (0-d for scalar inputs).
    """
    a, b, c = (np.asarray(v) for v in (a, b, c))
    for name, v in (("a", a), ("b", b), ("c", c)):
        _check_float32(name, v)
    with np.errstate(invalid="ignore", over="ignore"):
        p = a.astype(np.float64) * b.astype(np.float64)
        c64 = c.astype(np.float64)
        s = p + c64
        bp = s - c64
        e = (p - bp) + (c64 - (s - bp))
        s = _round_to_odd(np.asarray(s), np.asarray(e))
        return s.astype(np.float32)


def round_fraction_to_float32(x: Fraction, negative_zero: bool = False) -> np.float32:
    """Round an exact rational to float32, round to nearest, ties to even.

    ``negative_zero`` picks the sign of the result when ``x`` is exactly zero
    (the rational itself cannot carry it).  Results at or past the overflow
    threshold become infinities with the sign of ``x``.
    """
    if x == 0:
        return np.float32(-0.0 if negative_zero else 0.0)
    sign = -1 if x < 0 else 1
    ax = abs(x)
    # floor(log2(ax)) from bit lengths, then one correction step.
    e = ax.numerator.bit_length() - ax.denominator.bit_length()
    if ax < Fraction(2) ** e:
        e -= 1
    quantum_exp = max(e, _F32_MIN_EXP) - _F32_MANT_BITS
    scaled = ax / Fraction(2) ** quantum_exp
    n, rem = divmod(scaled.numerator, scaled.denominator)
    twice_rem = 2 * rem
    if twice_rem > scaled.denominator or (twice_rem == scaled.denominator and n % 2 == 1):
        n += 1
    if n * Fraction(2) ** quantum_exp >= _F32_OVERFLOW:
        return np.float32(sign * math.inf)
    # n has at most 25 bits, so ldexp is exact in float64 and again in float32.
    return np.float32(sign * math.ldexp(n, quantum_exp))


def fma32_scalar(a, b, c) -> np.float32:
    """Exact scalar reference for :func:`fma32` using rational arithmetic.

    Slow (microseconds to milliseconds per call) but independent of the
    float64 trick in :func:`fma32`.  Arguments must be numpy float32 scalars
    or 0-d float32 arrays.
    """
    a, b, c = (np.asarray(v) for v in (a, b, c))
    for name, v in (("a", a), ("b", b), ("c", c)):
        _check_float32(name, v)
        if v.ndim != 0:
            raise ValueError(f"{name} must be a scalar, got shape {v.shape}")
    fa, fb, fc = float(a), float(b), float(c)
    if not (math.isfinite(fa) and math.isfinite(fb) and math.isfinite(fc)):
        # float64 product of float32 values is exact, so IEEE special-case
        # rules (inf*0 = nan, inf-inf = nan, ...) come out right in doubles.
        return np.float32(fa * fb + fc)
    exact = Fraction(fa) * Fraction(fb) + Fraction(fc)
    product_negative = math.copysign(1.0, fa) * math.copysign(1.0, fb) < 0
    both_negative_zero = product_negative and math.copysign(1.0, fc) < 0
    return round_fraction_to_float32(exact, negative_zero=both_negative_zero)
