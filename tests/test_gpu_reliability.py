"""Issue 15 on the GPU (about 20 s on an H200): the refused-inputs matrix through every public function, the
minimal TMA rings' checksums, and smoke runs of the fuzzer and the soak."""
import pytest

from labkit.lab import refusals
from labkit.studies import reliability as rel

pytestmark = pytest.mark.gpu


def test_every_public_function_refuses_every_case_naming_it():
    rows = refusals.refusal_rows("cuda")
    bad = [r for r in rows if not r["names_condition"]]
    assert not bad, bad
    for case in refusals._cases():
        if "2**" in case.case:
            continue
        want = set(refusals.WITH_OUT if case.needs_out else refusals.PUBLIC_FUNCTIONS)
        assert {r["function"] for r in rows if r["case"] == case.case} == want, case.case


@pytest.mark.sm90
@pytest.mark.parametrize("variant", [v for v in rel.RING_VARIANTS if v not in rel.RING_DELIBERATE_RACES])
@pytest.mark.parametrize("shape", [(2, 64, 64, 64), (3, 512 * 17), (2, 512 * (64 * 6 * 2 + 3)), (2, 512)])
def test_race_free_rings_compute_their_exact_checksum(variant, shape):
    rec = rel.run_targets([{"target": variant, "shape": list(shape)}])[0]
    assert "error" not in rec and rec["exact"], rec


def test_sanitizer_targets_are_bit_identical():
    specs = [{"target": t, "shape": [3, 64, 17, 19]} for t in rel.targets_for((3, 64, 17, 19))]
    specs += [{"target": t, "shape": [2, 64, 64, 64]} for t in rel.targets_for((2, 64, 64, 64))]
    for rec in rel.run_targets(specs):
        assert "error" not in rec and all((rec.get("bits") or rec["checks"]).values()), rec


def test_fuzz_smoke():
    rec = rel.fuzz(24, seed=2, time_budget_s=20, max_random_numel=1 << 22,
                   edge_shapes=((1, 4), (70000, 4), (3, 64, 17, 19), (2, 516)))
    counts = rel.fuzz_counts(rec)
    assert counts["cases"] >= 10 and counts["mismatches"] == 0, [c for c in rec["cases"] if "skipped" not in c
                                                                 and not all("error" not in m and all(m.values())
                                                                             for m in c["methods"].values())]


def test_soak_smoke():
    rec = rel.soak(400, seed=3, warmup=50, pool=8, sample_every=10)
    assert rec["errors"] == 0 and rec["sampled_mismatches"] == 0 and rec["sampled"] >= 40, rec["first_errors"]
    assert rec["growth_bytes"] == 0
