"""Notebook 10's goals from its records (labkit.studies.training): shape by shape where issue 22 says so."""
from labkit.studies import training as study


def _row(key, eager=None, graph=None):
    return {"key": key, "eager": eager or {}, "graph": graph or {}}


def test_sweep_goals_name_each_shape_that_falls_short():
    sweep = {"shapes": [
        _row("4x4194304", eager={"native": 16.0, "dropin": 0.5, "native_compiled": 1.0}),
        _row("1x8x1024x1024", eager={"native": 33.0, "dropin": 0.8, "native_compiled": 0.6}),
        _row("4096x768", eager={"native": 0.150, "dropin": 0.165}, graph={"native": 44.0, "dropin": 39.0}),
        _row("8192x4096", eager={"native": 0.4, "dropin": 0.3}, graph={"native": 323.0, "dropin": 234.0}),
    ]}
    wide, ordinary, below = study._sweep_goals(sweep)
    assert wide["met"] is False and "1x8x1024x1024 0.75x" in wide["measured"]
    assert ordinary["met"] is False and "short of 1.3x: 4096x768 1.13x" in ordinary["measured"]
    assert "8192x4096 1.38x" in ordinary["measured"] and "8192x4096" not in ordinary["short"]
    assert below["met"] is False and "+15.0 us" in below["measured"] and "4096x768" in below["measured"]
    sweep["shapes"][1]["eager"]["native_compiled"] = 0.9
    sweep["shapes"][2]["eager"]["dropin"] = 0.155
    wide, _, below = study._sweep_goals(sweep)
    assert wide["met"] is True and below["met"] is True
    assert study._sweep_goals(None) == []


def test_the_committed_run_judges_every_goal_of_issue_22():
    from labkit.records.session import newest_complete_run

    run = newest_complete_run("training")
    goals = study.goals(run["records"])
    names = [g["goal"] for g in goals]
    for want in ("L1/40 forward + backward", "L1/40 vs torch.compile", "few wide rows vs torch.compile",
                 "ordinary shapes, each x native", "where native takes < 200 us", "bits and fuzz"):
        assert want in names
    block = study.training_block(run["records"])
    ordinary = goals[names.index("ordinary shapes, each x native")]
    assert (ordinary["met"] is True) == (block["ordinary_fwdbwd_worst_vs_native_graph"] >= study.ORDINARY_GRAPH_GOAL)


def test_ratios_are_medians_of_per_round_ratios_where_the_row_kept_its_samples():
    """Rounds that drift together (both methods slow in the same round) move the ratio of the medians, not the
    median of the rounds' ratios: here 1.0 each round, against 2.0 for the medians."""
    row = _row("4096x768", eager={"native": 2.0, "dropin": 1.0})
    row["eager_samples"] = {"native": [1.0, 2.0, 3.0], "dropin": [1.0, 1.0, 10.0]}
    assert study.paired(row, "eager", "native", "dropin") == 1.0
    assert study.paired_difference_ms(row, "eager", "dropin", "native") == 0.0
    assert study.speed_rows({"shapes": [row]})[0]["eager x torch"] == 1.0
    del row["eager_samples"]  # an older record: the ratio of its medians
    assert study.paired(row, "eager", "native", "dropin") == 2.0
    assert study.paired_difference_ms(row, "eager", "dropin", "native") == -1.0
    assert study.paired(row, "graph", "native", "dropin") is None


def test_the_sweep_keeps_each_protocols_samples_and_its_rows_judge_by_them(monkeypatch):
    """training.sweep end to end with host timing standing in for CUDA events (no GPU here): each row keeps both
    protocols' per-round samples, eager with EAGER_ROUND_FACTOR times the rounds, and no error."""
    import torch

    from labkit.studies import bench

    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda *a, **k: None)
    monkeypatch.setattr(study, "_tensors", lambda shape, seed, device: tuple(torch.ones(shape) for _ in range(4)))
    monkeypatch.setattr(study, "methods", lambda *a, **k: {"native": lambda: None, "dropin": lambda: None})
    real = bench.time_methods
    monkeypatch.setattr(bench, "time_methods", lambda fns, protocol, baseline=None, timer=None: real(
        fns, protocol.__class__(**{**protocol.__dict__, "graph": False}), baseline, bench.HostTimer()))
    rec = study.sweep([(4, 8)], rounds=4, device="cpu", compiled=False)
    row = rec["shapes"][0]
    assert row["errors"] == {}
    assert len(row["eager_samples"]["native"]) == study.EAGER_ROUND_FACTOR * 4
    assert len(row["graph_samples"]["dropin"]) == 4
    assert study.speed_rows(rec)[0]["eager x torch"] == study.paired(row, "eager", "native", "dropin")
