"""The vectorized LayerNorm-statistics emulator against a plain scalar model."""

from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from bits import assert_bits_equal
from labkit.exact.emulator import (
    CONTRACTIONS,
    reciprocal_table,
    reference_output,
    reference_stats,
    ulp_distance,
    welford_rows,
)
from labkit.exact.fma import fma32, fma32_scalar

F32 = np.float32
FIXTURES = Path(__file__).resolve().parent.parent / "data" / "fixtures"
# 386 float4 vectors: threads 0 and 1 get 4 vectors, the rest 3, so both the
# push chains and the merged counts are uneven.
RAGGED_N = 4 * 128 * 3 + 8


def _bits(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float32).view(np.int32)


def _ragged_input(seed: int, rows: int = 2, n: int = RAGGED_N) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((rows, n)) + 3).astype(np.float32)


# ------------------------------------------------- scalar reference model ---


def _scalar_combine(b, a, contraction):
    # cuWelfordCombine(dataB=b, dataA=a), one operation per line.
    b_mean, b_m2, b_n = b
    a_mean, a_m2, a_n = a
    delta = b_mean - a_mean
    count = a_n + b_n
    if not count > 0:
        return F32(0), F32(0), count
    coef = F32(1) / count
    n_a = a_n * coef
    n_b = b_n * coef
    if contraction == "first_product":
        mean = fma32_scalar(n_a, a_mean, n_b * b_mean)
    else:
        mean = fma32_scalar(n_b, b_mean, n_a * a_mean)
    product = (delta * delta) * a_n
    m2 = fma32_scalar(product, n_b, a_m2 + b_m2)
    return mean, m2, count


def _scalar_row(row: np.ndarray, contraction: str):
    n_vec = len(row) // 4
    threads = []
    for t in range(128):
        mean, m2, n = F32(0), F32(0), F32(0)
        for j in range(t, n_vec, 128):
            for comp in range(4):
                v = row[4 * j + comp]
                delta = v - mean
                n = n + F32(1)
                recip = F32(1) / n
                mean = fma32_scalar(delta, recip, mean)
                m2 = fma32_scalar(delta, v - mean, m2)
        threads.append((mean, m2, n))
    warps = []
    for w in range(4):
        lanes = threads[32 * w : 32 * w + 32]
        for offset in (16, 8, 4, 2, 1):
            lanes = [
                _scalar_combine(lanes[l], lanes[l + offset] if l + offset < 32 else lanes[l], contraction)
                for l in range(32)
            ]
        warps.append(lanes[0])
    for offset in (2, 1):
        for w in range(offset):
            warps[w] = _scalar_combine(warps[w], warps[w + offset], contraction)
    return warps[0][0], warps[0][1]


def _scalar_welford(x2d: np.ndarray, contraction: str):
    results = [_scalar_row(row, contraction) for row in x2d]
    return np.array([r[0] for r in results], dtype=np.float32), np.array([r[1] for r in results], dtype=np.float32)


# ---------------------------------------------------------------- tests ---


@pytest.mark.parametrize("contraction", CONTRACTIONS)
def test_vectorized_matches_scalar_model_bit_for_bit(contraction):
    # Seed 2 is one where the contraction choice changes both mean and m2
    # (see test_contraction_choice_changes_bits), so each choice is pinned.
    x = _ragged_input(seed=2)
    mean, m2 = welford_rows(x, contraction=contraction)
    want_mean, want_m2 = _scalar_welford(x, contraction)
    assert_bits_equal(mean, want_mean, what=f"mean ({contraction})")
    assert_bits_equal(m2, want_m2, what=f"m2 ({contraction})")


def test_vectorized_matches_scalar_model_short_row():
    # Fewer vectors than threads: most threads never push and merge zeros.
    x = _ragged_input(seed=5, rows=3, n=4 * 37)
    for contraction in CONTRACTIONS:
        mean, m2 = welford_rows(x, contraction=contraction)
        want_mean, want_m2 = _scalar_welford(x, contraction)
        assert_bits_equal(mean, want_mean, what=f"mean ({contraction})")
        assert_bits_equal(m2, want_m2, what=f"m2 ({contraction})")


@pytest.mark.parametrize("n", [4, 4 * 128, 4 * 128 * 2 + 4, RAGGED_N])
def test_mean_and_variance_are_close_to_float64(n):
    x = _ragged_input(seed=11, rows=4, n=n)
    stats = reference_stats(x, eps=1e-5)
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(stats["mean"], x64.mean(axis=1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(stats["var"], x64.var(axis=1), rtol=1e-4, atol=1e-6)


def test_contraction_choice_changes_bits():
    # With uneven merged counts, nA and nB are rounded and so are their
    # products; fusing the other product gives different bits on some rows.
    differing = []
    for seed in range(10):
        x = _ragged_input(seed)
        first, _ = welford_rows(x, contraction="first_product")
        second, _ = welford_rows(x, contraction="second_product")
        if np.any(_bits(first) != _bits(second)):
            differing.append(seed)
    assert 2 in differing, differing


def test_contraction_choice_is_irrelevant_for_power_of_two_counts():
    # 16 elements per thread: every merge joins equal powers of two, so
    # nA = nB = 0.5 exactly and both products are exact.
    x = _ragged_input(seed=3, rows=4, n=4 * 128 * 4)
    first, _ = welford_rows(x, contraction="first_product")
    second, _ = welford_rows(x, contraction="second_product")
    assert_bits_equal(first, second, what="mean, first vs second product")


def test_reciprocal_table_is_correctly_rounded():
    table = reciprocal_table(5000)
    assert np.isinf(table[0])
    k = np.arange(1, 5001, dtype=np.float32)
    assert_bits_equal(table[1:], F32(1) / k, what="reciprocal table")
    for i in (3, 7, 11, 4095, 4097, 4999):
        exact = Fraction(1, i)
        got = Fraction(float(table[i]))
        below = Fraction(float(np.nextafter(table[i], F32(0))))
        above = Fraction(float(np.nextafter(table[i], F32(1))))
        assert abs(got - exact) < abs(below - exact) and abs(got - exact) < abs(above - exact)


def test_rstd_cr_is_correctly_rounded():
    x = _ragged_input(seed=4, rows=6, n=64)
    stats = reference_stats(x, eps=1e-5)
    t = stats["var"] + F32(1e-5)
    for ti, y in zip(t, stats["rstd_cr"]):
        # y is correct iff 1/sqrt(t) lies between y's float32 midpoints.
        lo = (Fraction(float(np.nextafter(y, F32(0)))) + Fraction(float(y))) / 2
        hi = (Fraction(float(np.nextafter(y, F32(np.inf)))) + Fraction(float(y))) / 2
        assert lo * lo * Fraction(float(ti)) < 1 < hi * hi * Fraction(float(ti))


def test_ulp_distance():
    one = F32(1)
    assert ulp_distance(one, np.nextafter(one, F32(2))) == 1
    assert ulp_distance(one, np.nextafter(one, F32(0))) == 1
    assert ulp_distance(F32(0.0), F32(-0.0)) == 0
    tiny = np.nextafter(F32(0), F32(1))
    assert ulp_distance(tiny, -tiny) == 2
    assert ulp_distance(-tiny, F32(0.0)) == 1
    assert ulp_distance(F32(-1), F32(1)) == 2 * int(_bits(one))
    fmax = np.finfo(np.float32).max
    assert ulp_distance(fmax, F32(np.inf)) == 1
    arr = np.array([1, 2, 3], dtype=np.float32)
    np.testing.assert_array_equal(ulp_distance(arr, arr), [0, 0, 0])
    with pytest.raises(ValueError):
        ulp_distance(F32(np.nan), one)
    with pytest.raises(ValueError):
        ulp_distance(1.0, one)


def test_reference_output_uses_fma():
    rng = np.random.default_rng(8)
    x = (rng.standard_normal((2, 4096)) * 3).astype(np.float32)
    gamma = rng.standard_normal(4096).astype(np.float32)
    beta = rng.standard_normal(4096).astype(np.float32)
    stats = reference_stats(x, eps=1e-5)
    mean, rstd = stats["mean"], stats["rstd_cr"]
    y = reference_output(x, mean, rstd, gamma, beta)
    normalized = rstd[:, None] * (x - mean[:, None])
    unfused = gamma * normalized + beta
    assert np.any(_bits(y) != _bits(unfused)), "fused and unfused outputs never differ"
    for r, j in [(0, 0), (1, 17), (1, 4095)]:
        assert_bits_equal(y[r, j], fma32_scalar(gamma[j], normalized[r, j], beta[j]), what=f"y[{r}, {j}]")
    assert_bits_equal(y, fma32(gamma, normalized, beta), what="y")


def test_bad_arguments_raise_value_error():
    x = _ragged_input(seed=0, rows=1, n=8)
    with pytest.raises(ValueError):
        welford_rows(x.astype(np.float64))
    with pytest.raises(ValueError):
        welford_rows(np.zeros((1, 6), dtype=np.float32))
    with pytest.raises(ValueError):
        welford_rows(x[0])
    with pytest.raises(ValueError):
        welford_rows(x, contraction="both")
    with pytest.raises(ValueError):
        reference_stats(x, eps=-1.0)
    with pytest.raises(ValueError):
        reference_output(x, np.zeros(2, np.float32), np.ones(1, np.float32), np.ones(8, np.float32), np.zeros(8, np.float32))
    with pytest.raises(ValueError):
        reciprocal_table(-1)


# ------------------------------------------------------- GPU fixtures ---

_FIXTURE_FILES = sorted(FIXTURES.glob("*.npz")) if FIXTURES.is_dir() else []


def _check_fixture(path: Path) -> None:
    # Fixture: x (rows, N), mean/rstd (rows,), y (rows, N), gamma/beta (N,), eps.
    with np.load(path) as data:
        x, mean, rstd, y = data["x"], data["mean"], data["rstd"], data["y"]
        gamma, beta, eps = data["gamma"], data["beta"], float(data["eps"])
    stats = reference_stats(x, eps)
    assert_bits_equal(stats["mean"], mean, what=f"mean of {path.name} (emulator vs torch)")
    # rsqrtf is approximate; the CUDA programming guide bounds it at 2 ulp.
    assert ulp_distance(rstd, stats["rstd_cr"]).max() <= 2
    assert_bits_equal(reference_output(x, mean, rstd, gamma, beta), y,
                      what=f"output of {path.name} (emulator vs torch)")


@pytest.mark.skipif(not _FIXTURE_FILES, reason=f"no GPU golden fixtures (*.npz) under {FIXTURES} yet")
@pytest.mark.parametrize("path", _FIXTURE_FILES, ids=lambda p: p.name)
def test_matches_gpu_fixture(path):
    _check_fixture(path)


def test_fixture_checker_on_synthetic_fixture(tmp_path):
    # Exercises the loader and comparisons before real GPU fixtures exist.
    x = _ragged_input(seed=9, rows=2, n=4 * 130)
    rng = np.random.default_rng(9)
    gamma = rng.standard_normal(x.shape[1]).astype(np.float32)
    beta = rng.standard_normal(x.shape[1]).astype(np.float32)
    stats = reference_stats(x, 1e-5)
    rstd = np.nextafter(stats["rstd_cr"], F32(np.inf))  # as if rsqrtf were 1 ulp high
    y = reference_output(x, stats["mean"], rstd, gamma, beta)
    path = tmp_path / "synthetic.npz"
    np.savez(path, x=x, mean=stats["mean"], rstd=rstd, y=y, gamma=gamma, beta=beta, eps=np.float32(1e-5))
    _check_fixture(path)
    bad_mean = np.nextafter(stats["mean"], F32(np.inf))
    np.savez(path, x=x, mean=bad_mean, rstd=rstd, y=y, gamma=gamma, beta=beta, eps=np.float32(1e-5))
    with pytest.raises(AssertionError):
        _check_fixture(path)
