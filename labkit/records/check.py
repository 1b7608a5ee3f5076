"""Correctness predicates and comparison records.

The official predicate is the pinned KernelBench evaluator's: `torch.allclose(reference, candidate, atol=1e-4,
rtol=1e-4)`, i.e. |reference - candidate| <= atol + rtol * |candidate| — the relative scale is the *candidate*
(the second argument), and NaN never equals NaN. The post's historical helper scaled by the reference; it is
kept, under a name that says so, only to measure how far the two scalings are from disagreeing.
Equal-NaN is a separate convention with its own name; it never enters the official verdict.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

ATOL = 1e-4
RTOL = 1e-4
KERNELBENCH_PREDICATE = "torch.allclose(reference, candidate, atol=1e-4, rtol=1e-4)"


def official_allclose(reference, candidate) -> bool:
    """The pinned evaluator's verdict, by calling torch.allclose itself."""
    import torch

    return bool(torch.allclose(reference, candidate, atol=ATOL, rtol=RTOL))


def _budget(reference, candidate, scale):
    """Elementwise |ref - cand| and atol + rtol*|scale|, both in the inputs' float32, as allclose computes them."""
    diff = (reference - candidate).abs()
    limit = ATOL + RTOL * scale.abs()
    return diff, limit


def bits_equal_count(a, b) -> int:
    """Elements whose float32 bit patterns are identical (compared as int32 views, so -0 != +0, NaN payloads count)."""
    import torch

    if a.shape != b.shape or a.dtype != torch.float32 or b.dtype != torch.float32:
        raise ValueError(f"bit comparison needs two float32 tensors of one shape, got {a.dtype}{tuple(a.shape)} "
                         f"and {b.dtype}{tuple(b.shape)}")
    return int((a.contiguous().view(torch.int32) == b.contiguous().view(torch.int32)).sum().item())


def bit_identical(a, b) -> bool:
    return a.shape == b.shape and bits_equal_count(a, b) == a.numel()


@dataclass(frozen=True)
class CheckRecord:
    """One comparison of a candidate against a reference. Ratios are max |diff| / limit over finite pairs:
    <= 1 passes. Both scalings are kept so an audit can reclassify without rerunning."""

    shape: tuple
    elements: int
    official_pass: bool                # torch.allclose itself
    bit_equal: int
    bit_equal_fraction: float
    bad_finite_candidate_scale: int    # finite pairs over the official budget
    bad_finite_reference_scale: int    # the same under the historical reference scaling
    bad_special: int                   # pairs with a NaN/inf that allclose does not accept (equal_nan=False)
    max_abs_error: float | None
    max_ratio_candidate_scale: float | None
    max_ratio_reference_scale: float | None
    reference_scaled_pass: bool        # the post's historical helper: finite under reference scale, specials equal

    def to_json(self) -> dict:
        d = asdict(self)
        d["shape"] = list(self.shape)
        return d

    @property
    def identical(self) -> bool:
        return self.bit_equal == self.elements


def identical_count(cases) -> tuple[int, int]:
    """(k, n): how many of n case records say they are bit-identical (their "identical" field)."""
    cases = list(cases)
    return sum(bool(c["identical"]) for c in cases), len(cases)


def _max_or_none(t):
    return float(t.max().item()) if t.numel() else None


def compare(reference, candidate) -> CheckRecord:
    """Full comparison record of `candidate` against `reference` (same shape, float32)."""
    import torch

    if reference.shape != candidate.shape:
        raise ValueError(f"shapes differ: reference {tuple(reference.shape)} vs candidate {tuple(candidate.shape)}")
    ref, cand = reference.detach(), candidate.detach()
    finite = torch.isfinite(ref) & torch.isfinite(cand)
    diff, lim_c = _budget(ref, cand, cand)
    _, lim_r = _budget(ref, cand, ref)
    # allclose accepts a non-finite pair only when both are the same infinity.
    same_inf = torch.isinf(ref) & (ref == cand)
    bad_special = int((~finite & ~same_inf).sum().item())
    d, lc, lr = diff[finite].double(), lim_c[finite].double(), lim_r[finite].double()
    bad_c = int((diff[finite] > lim_c[finite]).sum().item())
    bad_r = int((diff[finite] > lim_r[finite]).sum().item())
    equal = bits_equal_count(ref, cand)
    official = official_allclose(ref, cand)
    if official != (bad_c == 0 and bad_special == 0):
        raise RuntimeError("torch.allclose disagrees with the elementwise candidate-scale budget: "
                           f"allclose={official}, bad_finite={bad_c}, bad_special={bad_special}")
    return CheckRecord(
        shape=tuple(ref.shape), elements=ref.numel(), official_pass=official, bit_equal=equal,
        bit_equal_fraction=equal / ref.numel() if ref.numel() else 1.0,
        bad_finite_candidate_scale=bad_c, bad_finite_reference_scale=bad_r, bad_special=bad_special,
        max_abs_error=_max_or_none(d), max_ratio_candidate_scale=_max_or_none(d / lc),
        max_ratio_reference_scale=_max_or_none(d / lr),
        reference_scaled_pass=bad_r == 0 and bad_special == 0,
    )


def historical_reference_scaled_pass(reference, candidate) -> bool:
    """The post's original helper (superseded): |ref - cand| <= atol + rtol*|ref| on finite pairs, and the
    non-finite pairs equal (NaN matching NaN). Kept only to show where it and the official predicate differ."""
    import torch

    finite = torch.isfinite(reference) & torch.isfinite(candidate)
    diff, lim = _budget(reference, candidate, reference)
    special_ok = (reference == candidate) | (torch.isnan(reference) & torch.isnan(candidate))
    return bool((diff[finite] <= lim[finite]).all().item() and special_ok[~finite].all().item())


def equal_nan_allclose(reference, candidate) -> bool:
    """Stress-check convention, never the official verdict: allclose with equal_nan=True."""
    import torch

    return bool(torch.allclose(reference, candidate, atol=ATOL, rtol=RTOL, equal_nan=True))
