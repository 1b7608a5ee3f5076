"""Notebook 04's study (labkit.studies.protocol_correction) on the CPU."""
import pytest
import torch

from labkit.records import audit, check
from labkit.records import run as results
from labkit.studies import protocol_correction as pc


@pytest.mark.parametrize("direction", list(pc.DIRECTIONS))
def test_witnesses_classify_as_claimed(direction):
    ws = [w for w in pc.direction_witnesses(per_direction=4, seed=3) if w.direction == direction]
    assert len(ws) == 4
    for w in ws:
        ref, cand = w.tensors()
        official = torch.allclose(ref, cand, atol=1e-4, rtol=1e-4)
        historical = check.historical_reference_scaled_pass(ref, cand)
        assert (official, historical) == ((True, False) if direction == "official_only" else (False, True))
        rec = check.compare(ref, cand)
        assert rec.official_pass == official and rec.reference_scaled_pass == historical
        assert (rec.max_ratio_candidate_scale <= 1) == official and (rec.max_ratio_reference_scale <= 1) == historical
        # exact float32 values, reproducible from the printed Python floats
        assert torch.tensor([w.reference], dtype=torch.float32).item() == w.reference


def test_witnesses_are_deterministic_and_start_at_zero():
    a = pc.direction_witnesses(per_direction=2, seed=7)
    assert a == pc.direction_witnesses(per_direction=2, seed=7)
    assert a[0].reference == 0.0 and a[0].direction == "official_only"
    assert a[2].candidate == 0.0 and a[2].direction == "historical_only"  # the swap of the first
    assert pc.construct_witness(1.0) is None  # the float32 grid near 1 is coarser than the rtol*atol window
    with pytest.raises(ValueError, match="direction"):
        pc.construct_witness(0.0, "sideways")
    with pytest.raises(AssertionError):
        pc.verify_witness(0.0, 1.00005e-4, "historical_only")


def test_official_predicate_agrees_with_allclose_and_with_saved_figures():
    res = pc.allclose_agreement(trials=150, seed=5)
    total = res["total"]
    assert res["disagreements"] == [] and total["agree_compare"] == total["agree_figures"] == total["trials"] == 150
    assert 0 < total["allclose_pass"] < total["trials"]  # verdicts go both ways
    assert total["max ratio exactly 1.0"] > 0  # some rows sit exactly on the boundary


def test_equal_nan_stress_stays_out_of_the_official_verdict():
    rows = {r["case"]: r for r in pc.equal_nan_stress()}
    same_nan = rows["NaN at the same position"]
    assert same_nan["equal-NaN stress"] == "pass" and same_nan["stored official_pass"] == "FAIL"
    assert all(r["official == allclose"] for r in rows.values())


def test_synthetic_demo_run_is_labelled_and_flips_both_ways(tmp_path):
    path = pc.synthetic_demo_run(tmp_path)
    loaded = results.load_run(path)
    assert loaded["complete"] and loaded["records"]["run"]["name"] == pc.SYNTHETIC_NAME
    assert "synthetic" in path.name.lower()
    report = audit.audit_runs([path])
    assert report.ok and report.summary()["flips"] == 2


def _report_of(tmp_path, cases):
    run = results.Run.create(tmp_path / "runs", "pc-test", device="cpu")
    run.write("checks", [check.compare(torch.tensor(r), torch.tensor(c)).to_json() for r, c in cases])
    run.close()
    return audit.audit_runs([run.path])


def test_nearest_to_flip_is_the_smallest_margins_first(tmp_path):
    x = [0.5, 1.0]
    cases = [(x, x), ([0.0], [1.00005e-4]), (x, [0.5, 1.00005])] * 5
    report = _report_of(tmp_path, cases)
    rows = pc.nearest_to_flip(report, 10)
    assert len(rows) == 10 and len(report.rows) == 15
    margins = [r["margin"] for r in rows]
    assert margins == sorted(margins)
    assert sorted(r.margin for r in report.rows)[:10] == margins  # no unlisted record is nearer a flip
    assert rows[0]["flip"] == "FLIP"
    with pytest.raises(ValueError, match="n must be at least 1, got 0"):
        pc.nearest_to_flip(report, 0)


def test_verdict_is_computed_from_the_records(tmp_path):
    ws = pc.direction_witnesses(per_direction=1, seed=0)
    agreement = [pc.allclose_agreement(trials=30, seed=0)]
    report = _report_of(tmp_path, [([1.0], [1.0])])
    demo = audit.audit_runs([pc.synthetic_demo_run(tmp_path / "synthetic")])
    v = pc.verdict(ws, agreement, report, demo)
    assert v["problems"] == []
    assert v["lines"][0].startswith("Audit of committed runs") and "30/30 identical verdicts" in v["lines"][2] \
        and "2 flips detected" in v["lines"][3]
    # a demonstration run without flips is a problem, not a pass
    v = pc.verdict(ws, agreement, report, report)
    assert any("synthetic" in p for p in v["problems"])
    v = pc.verdict(ws[:1], agreement, report, demo)
    assert any("witnesses cover only" in p for p in v["problems"])


def test_agreement_runs_per_seed_and_mode():
    with pytest.raises(ValueError, match="mode must be one of"):
        pc.agreement_runs("fast", [0])
    from labkit import tasks

    assert tasks.config("quick").allclose_trials < tasks.config("full").allclose_trials
    assert pc.devices_for("cpu") == ("cpu",) and pc.devices_for("cuda") == ("cpu", "cuda")
    with pytest.raises(ValueError, match="'auto'"):
        pc.devices_for("auto")


def test_witness_lines_paste_into_python():
    ws = pc.direction_witnesses(per_direction=2, seed=0)
    lines = pc.witness_lines(ws)
    assert len(lines) == 2
    for line, w in zip(lines, [ws[0], ws[2]]):
        code, comment = line.split("  # ")
        assert eval(code, {"torch": torch}) == w.torch_allclose and w.direction in comment
