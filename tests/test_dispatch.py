"""The drop-in's dispatch tables (issue 16 item 4): shape classes, derivation from a sweep, the generated modules,
which table serves which device, and every committed module against the committed run it cites."""
import json

import pytest

from labkit.core.device import Device
from labkit.ops import paths
from labkit.ops.dispatch import rule, tables
from labkit.ops.dispatch.tables import nvidia_h200_sm90_132 as measured
from labkit.records.run import DATA_RUNS, load_run
from labkit.studies import dispatch

H200 = Device("NVIDIA H200", 90, 132, 232448, 65535)


def _choose(rows, n, device=H200):
    return rule.choose(rows, n, device, tuple(paths.candidates(rows, n, device)))


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
    m = measured
    monkeypatch.setattr(m, "SCORES", {
        0.0: {10: {"native": 1.0, "chain": 4.0, "rows_fused": 0.5}, 12: {"native": 1.0, "chain": 0.25,
                                                                         "rows_fused": 0.5}},
        2.0: {10: {"native": 1.0, "chain": 16.0}, 12: {"native": 1.0, "chain": 0.25}}})
    scores = lambda rows, n: rule.scores_in(m.SCORES, rows, n, 132)  # noqa: E731
    assert scores(1, 1 << 10)["chain"] == pytest.approx(4.0)
    assert scores(1, 1 << 11)["chain"] == pytest.approx(1.0)  # geometric: halfway in log2 N
    assert scores(66, 1 << 10)["chain"] == pytest.approx(8.0)  # halfway between row levels too
    assert "rows_fused" not in scores(66, 1 << 10)  # missing at one level: not a candidate between
    assert scores(1, 1 << 20) == {"native": 1.0, "chain": pytest.approx(0.25)}  # beyond: chain carried on
    assert scores(1, 1 << 8)["rows_fused"] == pytest.approx(0.5)  # below the grid: clamped
    assert _choose(1, 1 << 12)[0] == "chain"
    assert _choose(1, 1 << 11)[0] == "rows_fused"  # chain 1.0, rows_fused 0.5
    assert _choose(132, 1 << 12)[0] == "chain"
    assert _choose(65536, 1 << 12)[0] == "native"  # chain 0.25, but its plan cannot hold 65536 rows in grid.y


@pytest.mark.parametrize("table", tables.tables(), ids=lambda t: t.__name__.rsplit(".", 1)[-1])
def test_every_committed_table_is_what_its_committed_run_derives(table):
    run_dir = DATA_RUNS / table.RUN_ID
    assert run_dir.is_dir(), f"{table.__name__} cites {table.RUN_ID}, which is not under data/runs"
    run = load_run(run_dir)
    assert run["complete"] and run["records"]["run"]["name"] == "dispatch_table"
    sweep = run["records"]["dropin_sweep"]
    assert dispatch.derive_scores(sweep) == table.SCORES
    assert table.DEVICE == {k: sweep["device"][k] for k in ("name", "arch", "sm_count")}
    assert dispatch.module_path(sweep).stem == table.__name__.rsplit(".", 1)[-1]
    backward = backward_graph = None
    if hasattr(table, "BACKWARD"):
        from labkit.ops.dispatch.rule import BACKWARD_ORDER

        brun = load_run(DATA_RUNS / table.BACKWARD_RUN_ID)
        assert brun["complete"] and brun["records"]["run"]["name"] == "dispatch_table"
        backward, derived_graph = dispatch.derive_protocols(brun["records"]["backward_sweep"], BACKWARD_ORDER)
        assert backward == table.BACKWARD
        if hasattr(table, "BACKWARD_GRAPH"):  # the same backward run's graph-replay medians
            backward_graph = derived_graph
            assert backward_graph == table.BACKWARD_GRAPH
    eager, graph = dispatch.derive_protocols(sweep)
    assert eager == table.SCORES
    assert graph == table.GRAPH  # the same run's graph-replay medians
    assert dispatch.module_path(sweep).read_text() == dispatch.module_source(
        table.SCORES, table.RUN_ID, sweep, backward=backward,
        backward_run_id=getattr(table, "BACKWARD_RUN_ID", None), graph=graph, backward_graph=backward_graph)


def test_pick_takes_the_fastest_beyond_the_margin():
    assert rule.pick({"native": 1.0, "chain": 0.5, "rows_fused": 0.6}) == "chain"
    assert rule.pick({"native": 1.0, "rows_fused": 0.98}) == "native"          # 2% faster: noise, torch serves
    assert rule.pick({"native": 1.0, "rows_fused": 0.96}) == "rows_fused"
    assert rule.pick({"native": 1.0, "chain": 2.0}) == "native"
    assert rule.pick({"native": 1.0, "chain": 0.5, "rows_fused": 0.5}) == "chain"  # ties in ORDER
    assert rule.pick({"native": 1.0, "rows_fused": 0.5, "chain": 0.5}) == "chain"


def test_rule_at_every_measured_point_serves_no_slower_path():
    """At each point of the committed table: torch's kernel exactly where no candidate beats it by more than the
    margin; elsewhere, of our paths within TIE of the fastest by the eager scores, the fastest by graph replay's
    (the fastest by eager where no other is that close)."""
    sweep = load_run(DATA_RUNS / measured.RUN_ID)["records"]["dropin_sweep"]
    ties = 0
    for r in sweep["shapes"]:
        path, why = _choose(r["rows"], r["n"])
        level, y = rule.row_coord(r["rows"], H200.sm_count), r["n"].bit_length() - 1
        sc, graph = measured.SCORES[level][y], measured.GRAPH[level][y]
        available = {p: v for p, v in sc.items() if p == "native" or p in paths.candidates(r["rows"], r["n"], H200)}
        assert (path == "native") == all(v >= 1 - rule.MARGIN for p, v in available.items() if p != "native")
        assert measured.RUN_ID in why
        if path == "native":
            continue
        fastest = min(available.values())
        near = [p for p, v in available.items() if p != "native" and v <= fastest * (1 + rule.TIE)
                and v < 1 - rule.MARGIN]
        assert path in near and all(graph[path] <= graph[p] for p in near), (r["key"], available, graph)
        ties += available[path] > fastest
    assert ties >= 1  # the table has points where the graph scores decide (4096 x 1024)


def test_rule_agrees_with_what_the_committed_dropin_run_recorded():
    """Notebook 08's run recorded the rule's pick per shape; the code must still pick the same (else that run timed
    another rule than the one committed)."""
    from labkit.records.session import newest_complete_run

    run = newest_complete_run("dropin")
    assert run is not None, "no committed dropin run"
    sweep = run["records"]["dropin_sweep"]
    assert sweep["device"]["arch"] == H200.arch and sweep["device"]["sm_count"] == H200.sm_count
    assert [(r["key"], _choose(r["rows"], r["n"])[0]) for r in sweep["shapes"]] == \
        [(r["key"], r["rule"]) for r in sweep["shapes"]]


@pytest.mark.parametrize("arch", [80, 86, 89, 100, 120])
def test_rule_without_a_table_for_the_arch_is_torch(arch):
    dev = Device(f"sm_{arch}", arch, 132, 232448, 65535)
    path, why = _choose(1, 1 << 24, dev)
    assert path == "native" and f"no dispatch table measured on sm_{arch}" in why


def test_which_table_serves_a_device():
    table, why = tables.for_device(90, 132)
    assert table is measured and "measured on NVIDIA H200 (132 SMs)" in why
    table, why = tables.for_device(90, 114)  # an H100 PCIe: same arch, another SM count
    assert table is measured and "carried to 114 SMs" in why and "not measured on this GPU" in why
    assert tables.for_device(80, 108) == (None, "no dispatch table measured on sm_80")
    assert tables.module_name("NVIDIA H200", 90, 132) == "nvidia_h200_sm90_132"


def test_table_grid_for_display():
    rows = dispatch.table_rows(measured.SCORES, 132)
    assert len(rows) == len(measured.SCORES) and rows[0]["rows (on this GPU)"] == "<= 33"
    json.dumps(rows)


@pytest.mark.parametrize("arch", [80, 86, 89, 90, 100, 120])
def test_pickable_paths_follow_the_table(arch):
    picked = rule.pickable_paths(arch, 132)
    assert picked[0] == "native"
    if arch != 90:
        assert picked == ("native",)
    else:
        assert {"chain", "rows_fused", "reference_order"} <= set(picked)


def test_every_study_in_the_catalog_has_its_readers():
    from labkit.studies.catalog import STUDIES

    for name, study in STUDIES.items():
        assert study.RUN_NAME == name
        for reader in ("summary", "summary_lines", "page_headline"):
            assert callable(getattr(study, reader, None)), f"{study.__name__} has no {reader}"


def test_the_rule_picks_per_protocol_from_the_same_run():
    """Under "graph" the rule reads the table's graph-replay scores (GRAPH, from the same committed run): at every
    measured point it serves torch's kernel exactly where no path beats it there by the margin, and the two
    protocols pick differently where host time decides (they do at some points of the H200's table)."""
    differ = 0
    for x, level in measured.GRAPH.items():
        for y, sc in level.items():
            rows = max(1, round(H200.sm_count * 2 ** x / 4))
            n = 1 << y
            available = tuple(p for p in paths.candidates(rows, n, H200))
            g, why = rule.choose(rows, n, H200, available, "graph")
            e, _ = rule.choose(rows, n, H200, available, "eager")
            assert "graph replay scores" in why
            here = {p: v for p, v in sc.items() if p == "native" or p in available}
            assert (g == "native") == all(v >= 1 - rule.MARGIN for p, v in here.items() if p != "native"), (x, y)
            assert g == "native" or here[g] == min(here.values()), (x, y, here)
            differ += g != e
    assert differ > 0
    with pytest.raises(ValueError, match="protocol must be one of"):
        rule.choose(4, 4096, H200, ("rows_fused",), "replay")


def test_pick_breaks_an_eager_near_tie_by_graph_replay():
    sc = {"native": 1.0, "reference_order": 0.83, "rows_fused": 0.85}
    graph = {"native": 1.0, "reference_order": 1.02, "rows_fused": 0.66}
    assert rule.pick(sc) == "reference_order"
    assert rule.pick(sc, tie=graph) == "rows_fused"
    # further apart than TIE the eager scores decide; a close path not MARGIN faster than torch's is not taken
    assert rule.pick({"native": 1.0, "reference_order": 0.70, "rows_fused": 0.85}, tie=graph) == "reference_order"
    assert rule.pick({"native": 1.0, "reference_order": 0.95, "rows_fused": 0.975}, tie=graph) == "reference_order"
    assert rule.pick({"native": 1.0, "reference_order": 0.99, "rows_fused": 0.995}, tie=graph) == "native"
    # the fastest has no graph score: nothing to overrule it with
    assert rule.pick(sc, tie={"native": 1.0, "rows_fused": 0.66}) == "reference_order"
