import math

import pytest
import torch

from labkit.records import check


def test_direction_witness_candidate_scale_passes_reference_scale_fails():
    # ref = 0 gives the reference scale its smallest budget (atol alone); the candidate scale adds rtol*|cand|.
    ref = torch.tensor([0.0], dtype=torch.float32)
    cand = torch.tensor([1.00005e-4], dtype=torch.float32)
    rec = check.compare(ref, cand)
    # diff = 1.00005e-4 > atol (reference scale, |ref| = 0) but <= atol + rtol*1.00005e-4 (candidate scale)
    assert rec.official_pass and not rec.reference_scaled_pass
    assert rec.max_ratio_candidate_scale <= 1 < rec.max_ratio_reference_scale
    assert check.official_allclose(ref, cand)
    assert not check.historical_reference_scaled_pass(ref, cand)


def test_direction_witness_reference_scale_passes_candidate_scale_fails():
    ref = torch.tensor([1.00005e-4], dtype=torch.float32)
    cand = torch.tensor([0.0], dtype=torch.float32)
    rec = check.compare(ref, cand)
    assert not rec.official_pass and rec.reference_scaled_pass
    assert not torch.allclose(ref, cand, atol=1e-4, rtol=1e-4)
    assert check.historical_reference_scaled_pass(ref, cand)


def test_compare_agrees_with_allclose_on_random_and_adversarial_inputs():
    gen = torch.Generator().manual_seed(0)
    for trial in range(200):
        n = 64
        ref = (torch.randn(n, generator=gen) * 10 ** torch.randint(-6, 4, (n,), generator=gen)).float()
        # Perturb by amounts straddling the budget, so verdicts go both ways.
        scale = (1e-4 + 1e-4 * ref.abs()) * (torch.rand(n, generator=gen) * 2.2 if trial % 2 else 1.0)
        cand = ref + scale * torch.sign(torch.randn(n, generator=gen))
        rec = check.compare(ref, cand)
        assert rec.official_pass == torch.allclose(ref, cand, atol=1e-4, rtol=1e-4)


def test_special_values_counted_and_nan_never_equal_officially():
    ref = torch.tensor([float("nan"), float("inf"), -float("inf"), 1.0])
    cand = torch.tensor([float("nan"), float("inf"), float("inf"), 1.0])
    rec = check.compare(ref, cand)
    assert rec.bad_special == 2  # NaN vs NaN and -inf vs +inf; +inf vs +inf is accepted by allclose
    assert not rec.official_pass
    assert not check.equal_nan_allclose(ref, cand)  # -inf vs +inf still fails under equal-NaN
    ref2, cand2 = ref[:2], cand[:2]
    assert check.equal_nan_allclose(ref2, cand2) and not check.official_allclose(ref2, cand2)


def test_bit_equality_is_exact_on_int32_views():
    a = torch.tensor([0.0, 1.0, float("nan")])
    b = torch.tensor([-0.0, 1.0, float("nan")])
    assert check.bits_equal_count(a, b) == 2  # -0 differs from +0 in bits; equal NaN payloads match
    assert not check.bit_identical(a, b)
    assert check.bit_identical(a, a.clone())
    c = torch.tensor([1.0, float(torch.nextafter(torch.tensor(1.0), torch.tensor(2.0)))])
    assert check.bits_equal_count(c[:1], c[1:]) == 0  # one ulp apart


def test_bit_equality_rejects_other_dtypes():
    with pytest.raises(ValueError, match="float32"):
        check.bits_equal_count(torch.zeros(2, dtype=torch.float64), torch.zeros(2, dtype=torch.float64))


def test_record_max_error_and_json_roundtrip():
    ref = torch.tensor([1.0, 2.0, 3.0])
    cand = torch.tensor([1.0, 2.5, 3.0])
    rec = check.compare(ref, cand)
    assert math.isclose(rec.max_abs_error, 0.5)
    assert rec.bad_finite_candidate_scale == 1 and rec.bit_equal == 2
    assert rec.to_json()["shape"] == [3]


def test_identical_count_counts_identical_cases_of_all():
    assert check.identical_count([{"identical": True}, {"identical": False}, {"identical": True}]) == (2, 3)
    assert check.identical_count(iter([])) == (0, 0)
    with pytest.raises(KeyError):
        check.identical_count([{"name": "a case without a verdict"}])
