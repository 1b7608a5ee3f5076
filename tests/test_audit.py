"""`labkit audit`: saved check records reclassified under both scalings, on synthetic run directories."""
import json
import math

import pytest
import torch

from labkit.records import audit

from labkit.records import check

from labkit import cli

from labkit.records import run as results

from labkit.studies import catalog as summary


def _record(ref, cand) -> dict:
    return check.compare(torch.tensor(ref, dtype=torch.float32), torch.tensor(cand, dtype=torch.float32)).to_json()


def _run(tmp_path, records: dict, name="audit-test"):
    run = results.Run.create(tmp_path / "runs", name, device="cpu")
    for key, value in records.items():
        run.write(key, value)
    run.close()
    return run.path


IDENTICAL = _record([1.0, 2.0, -3.0], [1.0, 2.0, -3.0])
# the direction witness pair from tests/test_check.py: candidate scale passes, reference scale fails
FLIP = _record([0.0], [1.00005e-4])


def test_consistent_records_nested_anywhere_exit_zero(tmp_path, capsys):
    path = _run(tmp_path, {"bit_identity": {"cases": [{"shape": [3], "output": IDENTICAL, "mean": IDENTICAL}]},
                           "fast_stats": {"cases": [{"output": _record([1.0, 2.0], [1.0, 2.5])}]},
                           "other": {"official_pass": True, "note": "no ratios: not a check record"}})
    report = audit.audit_runs([path])
    assert [r.record for r in report.rows] == ["bit_identity.cases[0].output", "bit_identity.cases[0].mean",
                                               "fast_stats.cases[0].output"]
    assert report.ok and report.summary()["inconsistent"] == 0
    ident = report.rows[0]
    assert ident.ratio_c == 0 and ident.ratio_r == 0 and ident.margin == 1.0 and not ident.flip
    assert ident.official and ident.historical
    failing = report.rows[2]
    assert not failing.official and not failing.historical and not failing.flip and failing.consistent
    assert cli.main(["audit", str(path)]) == 0
    out = capsys.readouterr().out
    assert "3 check record(s), 0 flip(s)" in out and "OK" in out


def test_stored_verdict_contradicting_its_ratios_fails(tmp_path, capsys):
    lie = dict(_record([1.0, 2.0], [1.0, 2.5]), official_pass=True)  # ratio far above 1, stored as a pass
    path = _run(tmp_path, {"checks": {"cases": [{"output": IDENTICAL}, {"output": lie}]}})
    report = audit.audit_runs([path])
    assert not report.ok
    [bad] = report.inconsistent
    assert bad.record == "checks.cases[1].output" and bad.stored_official and not bad.official
    assert any("official_pass" in issue for issue in bad.issues)
    assert cli.main(["audit", str(path)]) == 1
    captured = capsys.readouterr()
    assert "FAILED" in captured.out and "checks.cases[1].output" in captured.err
    # --json says the same, as one line
    assert cli.main(["audit", "--json", str(path)]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] is False and data["summary"]["inconsistent"] == 1


def test_other_contradictions_fail_too(tmp_path):
    counts = dict(IDENTICAL, bad_finite_candidate_scale=2)  # bad count with ratio 0
    historical = dict(IDENTICAL, reference_scaled_pass=False)
    partial = {k: v for k, v in IDENTICAL.items() if k != audit.RATIO_R}  # one ratio missing: not auditable
    path = _run(tmp_path, {"a": counts, "b": historical, "c": partial})
    report = audit.audit_runs([path])
    assert [r.record for r in report.inconsistent] == ["a", "b", "c"]
    assert "missing max_ratio_reference_scale" in report.rows[2].issues[0]


def test_flip_reported_with_its_margin(tmp_path):
    rc, rr = FLIP[audit.RATIO_C], FLIP[audit.RATIO_R]
    assert rc <= 1 < rr
    path = _run(tmp_path, {"checks": [IDENTICAL, FLIP]})
    report = audit.audit_runs([path])
    assert report.ok
    row = report.rows[1]
    assert row.record == "checks[1]" and row.flip and row.official and not row.historical
    assert row.margin == pytest.approx(min(abs(rc - 1), abs(rr - 1)), rel=0, abs=0)
    assert report.summary()["flips"] == 1 and report.summary()["min_margin"] == row.margin
    assert report.record_table()[0]["flip"] == "FLIP"  # nearest to a flip listed first
    # the reverse direction flips the other way
    rev = audit.audit_record("r", "x", _record([1.00005e-4], [0.0]))
    assert rev.flip and not rev.official and rev.historical and rev.consistent


def test_synthetic_hand_written_flip_margin():
    rec = {"official_pass": True, "reference_scaled_pass": False, "bad_special": 0,
           "bad_finite_candidate_scale": 0, "bad_finite_reference_scale": 1,
           audit.RATIO_C: 0.75, audit.RATIO_R: 1.01}
    row = audit.audit_record("r", "x", rec)
    assert row.flip and row.consistent and row.margin == pytest.approx(0.01)


def test_none_ratios_mean_no_finite_pairs():
    nan_pair = _record([math.nan], [math.nan])  # no finite pair; NaN is never close officially
    assert nan_pair[audit.RATIO_C] is None and nan_pair[audit.RATIO_R] is None
    row = audit.audit_record("r", "x", nan_pair)
    assert row.consistent and not row.official and not row.historical and not row.flip and row.margin is None
    inf_pair = _record([math.inf], [math.inf])  # the same infinity: accepted, still no finite pair
    row = audit.audit_record("r", "y", inf_pair)
    assert row.consistent and row.official and row.historical and row.margin is None
    assert audit.summarize_rows([row]) == {"records": 1, "flips": 0, "min_margin": None}
    # one ratio None, the other present: the margin uses the present one
    assert audit.margin_to_flip(None, 0.5) == 0.5


def test_discovery_defaults_and_errors(tmp_path, monkeypatch):
    a = _run(tmp_path, {"c": IDENTICAL})
    b = _run(tmp_path, {"c": FLIP})
    assert audit.discover_runs([tmp_path]) == sorted([a, b])  # a folder holding runs
    assert audit.discover_runs([a]) == [a]
    with pytest.raises(ValueError, match="not a run directory"):
        audit.discover_runs([tmp_path / "nothing"])
    monkeypatch.setattr(audit, "DATA_RUNS", tmp_path / "runs")
    assert audit.discover_runs() == sorted([a, b])
    assert cli.main(["audit"]) == 0
    monkeypatch.setattr(audit, "DATA_RUNS", tmp_path / "absent")
    assert audit.discover_runs() == [] and cli.main(["audit"]) == 0  # no runs: nothing contradicts


def test_committed_runs_pass_the_audit():
    """What CI runs: every committed run under data/runs is consistent."""
    report = audit.audit_runs()
    assert report.ok, [(r.run_id, r.record, r.issues) for r in report.inconsistent]


def test_summary_gains_an_audit_block(tmp_path):
    a = _run(tmp_path, {"checks": [IDENTICAL, FLIP]})
    b = _run(tmp_path, {"checks": {"x": IDENTICAL}})
    one = summary.summarize_runs([a])
    assert one["audit"]["records"] == 2 and one["audit"]["flips"] == 1
    assert one["audit"]["min_margin"] == audit.audit_runs([a]).summary()["min_margin"]
    both = summary.summarize_runs([a, b])
    assert both["audit"]["records"] == 3 and both["audit"]["flips"] == 1
    empty = _run(tmp_path, {"numbers": {"x": 1}})
    assert "audit" not in summary.summarize_runs([empty])


def test_a_run_without_check_records_says_why_from_its_records(tmp_path):
    """The run table's reason is read from the run's name and its records' keys, never typed per run."""
    import json

    from labkit.records import audit

    def run(name, **records):
        d = tmp_path / name
        d.mkdir()
        (d / "run.json").write_text(json.dumps({"run_id": name, "name": name, "provenance": {}}))
        for k, v in records.items():
            (d / f"{k}.json").write_text(json.dumps(v))
        return d

    timed = run("timing_only", sweep={"rows": [{"median_ms": 0.3, "q25_ms": 0.29}]})
    bits = run("bits_and_times", ident={"cases": [{"forward_identical": True}]}, host={"torch_us": 3.0})
    other = run("reads", compile=[{"kernel": "k", "cubin_sha256": "ab"}])
    report = audit.audit_runs([timed, bits, other])
    why = {r["run"]: r["why no check records"] for r in report.run_table()}
    assert why["timing_only"] == "the timing_only study records timings; none keeps both ratios"
    assert why["bits_and_times"].startswith("the bits_and_times study records bit comparisons (equal or not) and "
                                            "timings")
    assert "other than checks" in why["reads"]
