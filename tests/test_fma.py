"""fma32 against an exact rational reference, plus constructed hard cases.

The reference here deliberately rounds differently from
``labkit.exact.fma.round_fraction_to_float32``: it takes a float32 guess and picks
the nearest of the guess and its two float32 neighbours by exact rational
distance, so a bug in one rounding is unlikely to be mirrored in the other.
"""

from fractions import Fraction

import numpy as np
import pytest

from bits import assert_bits_equal
from labkit.exact.fma import fma32, fma32_scalar

F32 = np.float32
F32_MAX = np.finfo(np.float32).max
# Exact sums at or above this magnitude round to inf (ties go to the even 2**128).
OVERFLOW_THRESHOLD = Fraction(2**128) - Fraction(2**103)


def _bits(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float32).view(np.uint32)


def _ref_round(x: Fraction, zero_is_negative: bool) -> np.float32:
    if x == 0:
        return F32(-0.0) if zero_is_negative else F32(0.0)
    if abs(x) >= OVERFLOW_THRESHOLD:
        return F32(np.inf) if x > 0 else F32(-np.inf)
    with np.errstate(over="ignore"):
        guess = F32(float(x))
        candidates = [np.nextafter(guess, F32(-np.inf)), guess, np.nextafter(guess, F32(np.inf))]
    candidates = [c for c in candidates if np.isfinite(c)]

    def key(c):
        # Distance first, then prefer the even bit pattern on ties.
        return (abs(Fraction(float(c)) - x), int(_bits(c)) & 1)

    best = min(candidates, key=key)
    if best == 0:
        best = F32(-0.0) if x < 0 else F32(0.0)
    return F32(best)


def ref_fma(a: np.float32, b: np.float32, c: np.float32) -> np.float32:
    fa, fb, fc = float(a), float(b), float(c)
    if not all(np.isfinite([fa, fb, fc])):
        # The float64 product of float32 values is exact, so the IEEE
        # special-value rules are the ones double arithmetic applies.
        return F32(fa * fb + fc)
    exact = Fraction(fa) * Fraction(fb) + Fraction(fc)
    product_negative = np.signbit(fa) != np.signbit(fb)
    return _ref_round(exact, zero_is_negative=product_negative and np.signbit(fc))


def naive_fma(a, b, c) -> np.ndarray:
    """The double-rounding route that fma32 exists to replace."""
    with np.errstate(over="ignore"):
        return (np.float64(a) * np.float64(b) + np.float64(c)).astype(np.float32)


def _same(x, y) -> bool:
    x, y = np.float32(x), np.float32(y)
    if np.isnan(x) or np.isnan(y):
        return bool(np.isnan(x) and np.isnan(y))
    return bool(_bits(x) == _bits(y))


def _assert_matches_reference(a, b, c):
    got = fma32(a, b, c)
    bad = []
    for i, (x, y, z) in enumerate(zip(a, b, c)):
        want = ref_fma(x, y, z)
        if not _same(got[i], want):
            bad.append((x, y, z, got[i], want))
    assert not bad, f"{len(bad)} mismatches, first: {bad[:3]}"


def _random_finite(rng, n, exp_lo, exp_hi):
    mant = rng.integers(0, 2**23, size=n, dtype=np.uint32)
    biased = rng.integers(exp_lo + 127, exp_hi + 128, size=n).astype(np.uint32)
    sign = rng.integers(0, 2, size=n, dtype=np.uint32) << 31
    return (sign | (biased << 23) | mant).view(np.float32)


# ---------------------------------------------------------------- random ---


def test_random_bit_patterns_all_classes():
    # Raw bit patterns: hits nan, inf, subnormals, zeros and wild exponent gaps.
    rng = np.random.default_rng(1)
    a, b, c = (rng.integers(0, 2**32, size=3000, dtype=np.uint32).view(np.float32) for _ in range(3))
    _assert_matches_reference(a, b, c)


def test_random_interacting_exponents():
    # c within a few binades of a*b so the addition really rounds and cancels.
    rng = np.random.default_rng(2)
    n = 4000
    a = _random_finite(rng, n, -60, 60)
    b = _random_finite(rng, n, -60, 60)
    with np.errstate(over="ignore", under="ignore"):
        prod = (a.astype(np.float64) * b.astype(np.float64)).astype(np.float32)
    shift = rng.integers(-30, 30, size=n)
    with np.errstate(over="ignore"):
        c = np.ldexp(prod, shift).astype(np.float32)
    flip = rng.random(n) < 0.5
    c = np.where(flip, -c, c).astype(np.float32)
    _assert_matches_reference(a, b, c)


def test_random_near_cancellation():
    # c is -round(a*b) nudged by a few ulps: massive cancellation, tiny results.
    rng = np.random.default_rng(3)
    n = 2000
    a = _random_finite(rng, n, -40, 40)
    b = _random_finite(rng, n, -40, 40)
    c = -(a * b)
    steps = rng.integers(-3, 4, size=n)
    c = (c.view(np.int32) + steps.astype(np.int32)).view(np.float32)
    _assert_matches_reference(a, b, c)


def test_random_subnormal_results():
    # Products and addends around the float32 subnormal range.
    rng = np.random.default_rng(4)
    n = 3000
    a = _random_finite(rng, n, -100, -40)
    b = _random_finite(rng, n, -110, -20)
    c = _random_finite(rng, n, -126, -100)
    tiny = (rng.integers(0, 2**23, size=n, dtype=np.uint32)).view(np.float32)  # subnormals
    c = np.where(rng.random(n) < 0.5, c, tiny).astype(np.float32)
    c = np.where(rng.random(n) < 0.5, -c, c).astype(np.float32)
    _assert_matches_reference(a, b, c)


def test_random_near_overflow():
    # Sums that straddle FLT_MAX and the round-to-inf threshold.
    rng = np.random.default_rng(5)
    n = 2000
    a = _random_finite(rng, n, 60, 64)
    b = _random_finite(rng, n, 60, 64)
    c = _random_finite(rng, n, 125, 127)
    _assert_matches_reference(a, b, c)


# ----------------------------------------------------------- adversarial ---

ONE_PLUS = 1 + 2.0**-23  # odd last bit
JUST_BELOW_ONE = 1 - 2.0**-23  # (1+2**-23)*(1-2**-23) = 1 - 2**-46 exactly
LARGEST_SUBNORMAL = (2**23 - 1) * 2.0**-149  # odd last bit


def _case(a, b, c):
    return F32(a), F32(b), F32(c)


# Cases where the float64 sum rounds onto a float32 midpoint the exact sum was
# not on; naive double rounding gets every one of these wrong.
DOUBLE_ROUNDING_CASES = {
    # exact = 1+2**-23 + 2**-24 - 2**-70: just below the midpoint, float64
    # rounds up onto it and ties-to-even then goes up to 1+2**-22.
    "below_midpoint_at_one": _case(2.0**-24 * ONE_PLUS, JUST_BELOW_ONE, ONE_PLUS),
    # exact = 1 + 2**-24 + 2**-70: just above the midpoint between 1 and
    # 1+2**-23, float64 rounds down onto it and ties-to-even goes down to 1.
    "above_midpoint_at_one": _case(2.0**-24 * ONE_PLUS, -JUST_BELOW_ONE, ONE_PLUS),
    # Same two shapes in other binades (the product scales with a, c with 2**k).
    "below_midpoint_2^40": _case(2.0**16 * ONE_PLUS, JUST_BELOW_ONE, 2.0**40 * ONE_PLUS),
    "above_midpoint_2^-90": _case(2.0**-114 * ONE_PLUS, -JUST_BELOW_ONE, 2.0**-90 * ONE_PLUS),
    "below_midpoint_negative": _case(-(2.0**-24) * ONE_PLUS, JUST_BELOW_ONE, -ONE_PLUS),
    # Subnormal result: largest subnormal plus 2**-150*(1-2**-46).  The sum is
    # ~2**-127 so float64 keeps bits only down to 2**-179 and loses the
    # 2**-196 tail, landing on the midpoint below 2**-126.
    "below_midpoint_subnormal": _case(2.0**-75 * ONE_PLUS, 2.0**-75 * JUST_BELOW_ONE, LARGEST_SUBNORMAL),
    # Largest subnormal minus 2**-150*(1-2**-46): just above the midpoint
    # between two subnormals; ties-to-even would pick the lower (even) one.
    "above_midpoint_subnormal": _case(2.0**-75 * ONE_PLUS, -(2.0**-75) * JUST_BELOW_ONE, LARGEST_SUBNORMAL),
    # FLT_MAX + 2**103*(1-2**-46): just below the round-to-inf threshold;
    # float64 rounds onto the threshold and the cast then overflows.
    "below_overflow_threshold": _case(2.0**52 * ONE_PLUS, 2.0**51 * JUST_BELOW_ONE, F32_MAX),
}

OTHER_CASES = {
    # Exact midpoints (no tail): ties to even, up and down.
    "exact_midpoint_ties_up": _case(2.0**-24, 1.0, ONE_PLUS),
    "exact_midpoint_ties_down": _case(2.0**-24, 1.0, 1.0),
    # Exactly on the overflow threshold: ties to even means inf.
    "exact_overflow_threshold": _case(2.0**52, 2.0**51, F32_MAX),
    # Product overflows float32 on its own but the fused sum is FLT_MAX.
    "product_overflow_sum_finite": _case(F32_MAX, 2.0, -F32_MAX),
    # Plain overflow of the sum.
    "sum_overflow": _case(F32_MAX, 1.0, F32_MAX),
    "sum_overflow_negative": _case(-F32_MAX, 2.0, 0.0),
    # Cancellation to exact zero: +0 under round to nearest, either sign order.
    "cancel_to_zero_pos_product": _case(3.0, 5.0, -15.0),
    "cancel_to_zero_neg_product": _case(-3.0, 5.0, 15.0),
    "cancel_to_zero_tiny": _case(2.0**-75, 2.0**-74, -(2.0**-149)),
    # Signed zeros: the sum is -0 only when product and c are both -0.
    "zero_pos_product_plus_neg_zero": _case(0.0, 2.0, -0.0),
    "zero_neg_product_plus_neg_zero": _case(-0.0, 2.0, -0.0),
    "zero_neg_product_via_b_plus_neg_zero": _case(0.0, -2.0, -0.0),
    "zero_product_both_neg_plus_neg_zero": _case(-0.0, -2.0, -0.0),
    "zero_neg_product_plus_pos_zero": _case(-0.0, 2.0, 0.0),
    "nonzero_product_plus_neg_zero": _case(-3.0, 2.0, -0.0),
    # Nonzero results that underflow keep their sign.
    "underflow_to_neg_zero": _case(2.0**-100, -(2.0**-100), -0.0),
    "underflow_to_pos_zero": _case(2.0**-100, 2.0**-100, 0.0),
    # 2**-150 exactly: tie between 0 and the smallest subnormal, goes to 0.
    "half_min_subnormal_ties_to_zero": _case(2.0**-75, 2.0**-75, 0.0),
    # 2**-150 * (1+2**-23): just above that tie, rounds up to 2**-149.
    "just_above_half_min_subnormal": _case(2.0**-75 * ONE_PLUS, 2.0**-75, 0.0),
    # 3 * 2**-150: tie between 2**-149 and 2**-148, goes to the even 2**-148.
    "subnormal_tie_to_even": _case(3 * 2.0**-76, 2.0**-74, 0.0),
    # Subnormal inputs on every operand.
    "subnormal_operands": _case(2.0**-140, 2.0**100, 2.0**-145),
    # Specials.
    "inf_times_zero": _case(np.inf, 0.0, 1.0),
    "inf_minus_inf": _case(np.inf, 1.0, -np.inf),
    "inf_product": _case(np.inf, -2.0, 1.0),
    "inf_addend": _case(F32_MAX, F32_MAX, -np.inf),
    "nan_addend": _case(1.0, 1.0, np.nan),
    "nan_factor": _case(np.nan, 0.0, 0.0),
}


def _random_midpoint_traps(rng, n):
    # a*b = +-h*(1 - 2**-2k) with h half an ulp of c: the exact sum sits
    # 2**-2k*h off a float32 midpoint, and for k >= 15 that offset is below
    # float64 resolution at c, so float64 rounds onto the midpoint.
    c = _random_finite(rng, n, -100, 100)
    k = rng.integers(15, 24, size=n)
    half_ulp = (np.spacing(np.abs(c)) / 2).astype(np.float64)
    a = (half_ulp * (1 + np.ldexp(1.0, -k))).astype(np.float32)
    b_sign = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    b = (b_sign * (1 - np.ldexp(1.0, -k))).astype(np.float32)
    return a, b, c


def test_random_midpoint_traps():
    rng = np.random.default_rng(7)
    a, b, c = _random_midpoint_traps(rng, 1500)
    _assert_matches_reference(a, b, c)
    # Uniform random inputs almost never hit double rounding, so this is the
    # random test with teeth: the naive route must fail on many of these.
    naive_wrong = sum(not _same(naive_fma(x, y, z), ref_fma(x, y, z)) for x, y, z in zip(a, b, c))
    assert naive_wrong > 300


@pytest.mark.parametrize("name", sorted({**DOUBLE_ROUNDING_CASES, **OTHER_CASES}))
def test_adversarial_case(name):
    a, b, c = {**DOUBLE_ROUNDING_CASES, **OTHER_CASES}[name]
    want = ref_fma(a, b, c)
    assert _same(fma32(a, b, c), want)
    assert _same(fma32_scalar(a, b, c), want)


def test_adversarial_construction_is_what_the_comments_say():
    a, b, c = DOUBLE_ROUNDING_CASES["below_midpoint_at_one"]
    exact = Fraction(float(a)) * Fraction(float(b)) + Fraction(float(c))
    assert exact == 1 + Fraction(1, 2**23) + Fraction(1, 2**24) - Fraction(1, 2**70)
    assert fma32(a, b, c) == F32(ONE_PLUS)


@pytest.mark.parametrize("name", sorted(DOUBLE_ROUNDING_CASES))
def test_naive_float64_route_is_wrong(name):
    a, b, c = DOUBLE_ROUNDING_CASES[name]
    want = ref_fma(a, b, c)
    assert not _same(naive_fma(a, b, c), want)
    assert _same(fma32(a, b, c), want)


def test_adversarial_cases_vectorized_together():
    cases = list({**DOUBLE_ROUNDING_CASES, **OTHER_CASES}.values())
    a, b, c = (np.array(col, dtype=np.float32) for col in zip(*cases))
    _assert_matches_reference(a, b, c)


def test_fma32_scalar_random():
    rng = np.random.default_rng(6)
    a = _random_finite(rng, 300, -60, 60)
    b = _random_finite(rng, 300, -60, 60)
    c = -(a * b) * F32(1.0001)
    for x, y, z in zip(a, b, c):
        assert _same(fma32_scalar(x, y, z), ref_fma(x, y, z))


# ------------------------------------------------------------------- API ---


def test_broadcasting_and_shapes():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    out = fma32(a, F32(2.0), np.ones(3, dtype=np.float32))
    assert out.dtype == np.float32 and out.shape == (2, 3)
    assert_bits_equal(out, a * 2 + 1, what="broadcast fma32")
    scalar = fma32(F32(2.0), F32(3.0), F32(1.0))
    assert scalar.shape == () and scalar == 7


def test_rejects_non_float32():
    with pytest.raises(ValueError):
        fma32(np.ones(2), np.ones(2, dtype=np.float32), np.ones(2, dtype=np.float32))
    with pytest.raises(ValueError):
        fma32(np.float32(1), 2.0, np.float32(1))
    with pytest.raises(ValueError):
        fma32_scalar(np.ones(2, dtype=np.float32), F32(1), F32(1))
