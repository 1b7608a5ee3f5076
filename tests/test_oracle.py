"""The exact oracle against brute-force rationals: exact sums, exact variance, correctly rounded float32 truth."""
import math
from fractions import Fraction

import numpy as np
import pytest

from labkit.exact import oracle
from labkit.exact.fma import round_fraction_to_float32

F32 = np.float32


def _brute(row):
    vals = [Fraction(float(v)) for v in row]
    mean = sum(vals) / len(vals)
    return mean, sum((v - mean) ** 2 for v in vals) / len(vals)


def _rows():
    rng = np.random.default_rng(0)
    yield (rng.standard_normal(64) + 1000).astype(F32)
    yield (rng.standard_normal(37) * 1e-41).astype(F32)  # all subnormal
    yield np.array([1e30, -1e30, 3.0, 1e-45, -2.5e-38, 7.0, 1e-20, 0.0], F32)  # mixed exponents, cancellation
    yield np.concatenate([rng.random(100), -rng.random(100) * 1e5]).astype(F32)
    yield np.array([np.finfo(F32).max, np.finfo(F32).max, -np.finfo(F32).tiny], F32)


@pytest.mark.parametrize("i", range(5))
def test_exact_stats_equal_brute_force_fractions(i):
    row = list(_rows())[i]
    mean, var = oracle.exact_row_stats(row)
    want_mean, want_var = _brute(row)
    assert mean == want_mean and var == want_var


@pytest.mark.parametrize("value", [1e4, 0.1, -3.5, 1e-41, 0.0, 3.4e38])
def test_constant_rows_have_variance_exactly_zero(value):
    mean, var = oracle.exact_row_stats(np.full(20672, value, F32))
    assert var == 0 and mean == Fraction(float(F32(value)))


def test_nonfinite_rows_give_nan():
    mean, var = oracle.exact_row_stats(np.array([1, np.nan, 2, 3], F32))
    assert math.isnan(mean) and math.isnan(var)
    mean, var = oracle.exact_row_stats(np.array([1, np.inf, 2, 3], F32))
    assert math.isnan(var)


def test_bad_rows_raise():
    with pytest.raises(ValueError):
        oracle.exact_row_stats(np.zeros(4, np.float64))
    with pytest.raises(ValueError):
        oracle.exact_row_stats(np.zeros((2, 4), F32))


def test_nearest_float32_matches_exact_rounding():
    rng = np.random.default_rng(1)
    for _ in range(300):
        q = Fraction(int(rng.integers(-10**12, 10**12)), int(rng.integers(1, 10**9)))
        assert oracle.nearest_float32(q) == round_fraction_to_float32(q)
    tie = Fraction(1) + Fraction(1, 2**24)  # exactly between 1 and its successor: ties to even (1.0)
    assert oracle.nearest_float32(tie) == F32(1)


def test_rstd_truth_is_correctly_rounded():
    rng = np.random.default_rng(2)
    for _ in range(50):
        var = Fraction(float(rng.random() * 10.0 ** int(rng.integers(-6, 6))))
        r, r32 = oracle.rstd_truth(var, 1e-5)
        t = var + Fraction(float(F32(1e-5)))
        lo = (Fraction(float(np.nextafter(r32, F32(0)))) + Fraction(float(r32))) / 2
        hi = (Fraction(float(np.nextafter(r32, F32(np.inf)))) + Fraction(float(r32))) / 2
        assert lo * lo * t < 1 < hi * hi * t
        assert abs(float(r) - 1 / math.sqrt(float(t))) <= 1e-15 * float(r)
    assert oracle.rstd_truth(Fraction(0), 0.0)[1] == F32(np.inf)


def test_compare_to_truth_prefers_the_correctly_rounded_candidate():
    import torch

    rng = np.random.default_rng(3)
    x = (rng.standard_normal((3, 256)) + 1000).astype(F32)
    w = rng.standard_normal(256).astype(F32)
    b = rng.standard_normal(256).astype(F32)
    stats = [oracle.exact_row_stats(r) for r in x]
    mean = np.array([oracle.nearest_float32(m) for m, _ in stats], F32)
    rstd = np.array([oracle.rstd_truth(v, 1e-5)[1] for _, v in stats], F32)
    y = np.stack([oracle.true_output(x[i], w, b, stats[i][0], oracle.rstd_truth(stats[i][1], 1e-5)[0])
                  for i in range(3)]).astype(F32)
    off_mean = np.nextafter(np.nextafter(mean, F32(np.inf)), F32(np.inf))
    off_rstd = np.nextafter(rstd, F32(0))
    res = oracle.compare_to_truth({"exact": (torch.from_numpy(y), mean, rstd),
                                   "off": (y + F32(1e-3), off_mean, off_rstd),
                                   "stats only": (None, mean, None)}, x, w, b, 1e-5)
    assert res["candidates"]["exact"]["mean_ulp"] == [0, 0, 0]
    assert res["candidates"]["off"]["mean_ulp"] == [2, 2, 2]
    assert res["candidates"]["off"]["rstd_ulp"] == [-1, -1, -1]
    assert res["candidates"]["exact"]["output"]["median_ulp"] == 0
    assert res["candidates"]["stats only"]["output"] is None
    assert res["verdict"]["rstd"]["closer"] == "exact"
    assert res["verdict"]["mean"]["by_row"] == ["tie(exact,stats only)"] * 3
    assert res["verdict"]["output"]["closer"] == "exact"


def test_exact_stats_of_an_l1_40_length_row():
    # A 64-value row tiled to 4,194,304 (one L1/40 row) has the short row's mean and variance exactly.
    short = (np.random.default_rng(1).standard_normal(64) * 3 + 1000).astype(F32)
    mean, var = oracle.exact_row_stats(np.tile(short, (1 << 22) // 64))
    assert (mean, var) == _brute(short)


def test_verdict_credits_every_candidate_sharing_the_smallest_error():
    # Two variants of one method that agree (a shared win) beat a third in most rows: they must be credited,
    # not reported as ties. Regression: the first version counted shared wins as ties and crowned the third.
    from labkit.exact.oracle import _verdict

    names = ["native", "fast a, eager (GPU)", "fast b"]  # names may hold commas and parentheses
    a, b = names[1], names[2]
    leads = [["native"], [a, b], [a, b], names, ["native"], [a, b], [a, b], None]
    v = _verdict(leads, names)
    assert v["rows_closer"] == {"native": 2, a: 4, b: 4}
    assert v["rows_tied"] == 1
    assert v["closer"] == f"tie({a},{b})" and v["by_row"][0] == "native" and v["by_row"][-1] == "n/a"
