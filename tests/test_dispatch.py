"""The drop-in's dispatch table (issue 16 item 4): shape classes, derivation from a sweep, the generated module, and
the committed module against the committed run it cites."""
import json

import pytest

from labkit.ops.dropin import measured, rule
from labkit.records.run import DATA_RUNS, load_run
from labkit.studies import dispatch


def test_row_axis_counts_waves_of_the_chain_schedule():
    # 4 blocks per row: 33 rows fill one wave of 132 SMs, 66 two
    assert [rule.row_coord(r, 132) for r in (1, 33, 66, 132)] == [0.0, 0.0, 1.0, 2.0]
    assert rule.row_coord(33, 66) == 1.0  # half the SMs: one level up


def test_grid_stays_inside_its_budget():
    shapes = dispatch.grid_shapes()
    assert (1, 1 << 24) in shapes and (65536, 256) in shapes and (4, 1 << 24) not in shapes
    assert all(r * n <= dispatch.GRID_MAX_NUMEL for r, n in shapes)
    assert len(set(shapes)) == len(shapes) > 90


def _sweep(cells):
    return {"device": {"arch": 90, "sm_count": 132, "name": "test"},
            "shapes": [{"rows": r, "n": n, "eager": e} for r, n, e in cells]}


def _t(native, chain, rows_fused, ref):
    return {"native": native, "chain": chain, "rows_fused": rows_fused, "reference_order": ref, "dropin": 99.0}


def test_derive_scores_per_point_geometric_mean_and_failures_left_out():
    scores = dispatch.derive_scores(_sweep([
        (1, 1 << 20, _t(1.0, 0.1, 0.9, 0.5)),
        (8, 4096, _t(1.0, 2.0, 0.9, 1.1)),      # same point (one wave, 2^12) as ...
        (16, 4096, _t(1.0, 2.0, 1.6, 1.1)),     # ... this one: geometric mean
        (16384, 1024, _t(1.0, None, 0.5, 1.2)),  # chain failed: not at this point
    ]))
    assert scores[0.0][20] == {"native": 1.0, "chain": 0.1, "rows_fused": 0.9, "reference_order": 0.5}
    assert scores[0.0][12]["rows_fused"] == pytest.approx(1.2)
    x = round(rule.row_coord(16384, 132), 4)
    assert "chain" not in scores[x][10] and scores[x][10]["rows_fused"] == 0.5


def test_generated_module_round_trips():
    scores = {0.0: {10: {"native": 1.0, "chain": 2.0}, 20: {"native": 1.0, "chain": 0.1}}, 3.5: {12: {"native": 1.0}}}
    ns = {}
    exec(dispatch.module_source(scores, "RUN", {"device": {"name": "X", "arch": 90, "sm_count": 132}}), ns)
    assert ns["SCORES"] == scores and ns["RUN_ID"] == "RUN" and ns["DEVICE"]["sm_count"] == 132


def test_interpolation_is_exact_at_measured_points_and_between_them(monkeypatch):
    from labkit.ops.dropin import measured as m

    monkeypatch.setattr(m, "SCORES", {
        0.0: {10: {"native": 1.0, "chain": 4.0, "rows_fused": 0.5}, 12: {"native": 1.0, "chain": 0.25,
                                                                         "rows_fused": 0.5}},
        2.0: {10: {"native": 1.0, "chain": 16.0}, 12: {"native": 1.0, "chain": 0.25}}})
    assert rule.scores(1, 1 << 10, 132)["chain"] == pytest.approx(4.0)
    assert rule.scores(1, 1 << 11, 132)["chain"] == pytest.approx(1.0)  # geometric: halfway in log2 N
    assert rule.scores(66, 1 << 10, 132)["chain"] == pytest.approx(8.0)  # halfway between row levels too
    assert "rows_fused" not in rule.scores(66, 1 << 10, 132)  # missing at one level: not a candidate between
    assert rule.scores(1, 1 << 20, 132) == {"native": 1.0, "chain": pytest.approx(0.25)}  # beyond: chain carried on
    assert rule.scores(1, 1 << 8, 132)["rows_fused"] == pytest.approx(0.5)  # below the grid: clamped
    assert rule.choose(1, 1 << 12, rule.Device(90, 132))[0] == "chain"
    assert rule.choose(1, 1 << 11, rule.Device(90, 132))[0] == "rows_fused"  # chain 1.0, rows_fused 0.5
    assert rule.choose(132, 1 << 12, rule.Device(90, 132))[0] == "chain"
    assert rule.choose(65536, 1 << 12, rule.Device(90, 132))[0] == "native"  # chain 0.25, but beyond grid.y


def test_committed_table_is_what_its_committed_run_derives():
    run_dir = DATA_RUNS / measured.RUN_ID
    assert run_dir.is_dir(), f"labkit/ops/dropin/measured.py cites {measured.RUN_ID}, which is not under data/runs"
    run = load_run(run_dir)
    assert run["complete"] and run["records"]["run"]["name"] == "dispatch_table"
    sweep = run["records"]["dropin_sweep"]
    assert dispatch.derive_scores(sweep) == measured.SCORES
    assert measured.DEVICE == {k: sweep["device"][k] for k in ("name", "arch", "sm_count")}
    assert measured.RUN_ID in rule.RULE_SOURCE


def test_rule_takes_the_fastest_path_at_every_measured_point():
    sweep = load_run(DATA_RUNS / measured.RUN_ID)["records"]["dropin_sweep"]
    dev = rule.Device(90, sweep["device"]["sm_count"])
    for r in sweep["shapes"]:
        path, why = rule.choose(r["rows"], r["n"], dev)
        sc = measured.SCORES[round(rule.row_coord(r["rows"], dev.sm_count), 4)][r["n"].bit_length() - 1]
        best = min(sc, key=sc.get)
        assert path == (best if sc[best] < 1 - rule.MARGIN else "native") and measured.RUN_ID in why


def test_rule_agrees_with_what_the_committed_dropin_run_recorded():
    """Notebook 08's run recorded the rule's pick per shape; the code must still pick the same (else that run timed
    another rule than the one committed)."""
    from labkit.records.session import newest_complete_run

    run = newest_complete_run("dropin")
    sweep = run["records"]["dropin_sweep"]
    dev = rule.Device(sweep["device"]["arch"], sweep["device"]["sm_count"])
    assert [(r["key"], rule.choose(r["rows"], r["n"], dev)[0]) for r in sweep["shapes"]] == \
        [(r["key"], r["rule"]) for r in sweep["shapes"]]


def test_rule_off_the_measured_arch_is_torch():
    for arch in (80, 86, 89, 100, 120):
        path, why = rule.choose(1, 1 << 24, rule.Device(arch, 132))
        assert path == "native" and "unmeasured" in why


def test_table_grid_for_display():
    rows = dispatch.table_rows(measured.SCORES, 132)
    assert len(rows) == len(measured.SCORES) and rows[0]["rows (on this GPU)"] == "<= 33"
    json.dumps(rows)


@pytest.mark.parametrize("arch", [80, 86, 89, 90, 100, 120])
def test_pickable_paths_follow_the_table(arch):
    paths = rule.pickable_paths(arch)
    assert paths[0] == "native"
    if arch != 90:
        assert paths == ("native",)
    else:
        assert "chain" in paths
