"""The drop-in's dispatch table (issue 16 item 4): shape classes, derivation from a sweep, the generated module, and
the committed module against the committed run it cites."""
import json

import pytest

from labkit.ops.dropin import measured, rule
from labkit.records.run import DATA_RUNS, load_run
from labkit.studies import dispatch


def test_row_classes_count_waves_of_the_chain_schedule():
    # 4 blocks per row: 33 rows fill one wave of 132 SMs, 34 need two
    assert [rule.row_class(r, 132) for r in (1, 33, 34, 66, 67, 132, 133, 65535)] == [0, 0, 1, 1, 2, 2, 3, 11]
    assert rule.row_class(33, 66) == 1 and rule.row_class(16, 66) == 0  # half the SMs: a class up
    assert [rule.n_class(n) for n in (256, 511, 512, 1 << 24)] == [8, 8, 9, 24]


def test_grid_stays_inside_its_budget():
    shapes = dispatch.grid_shapes()
    assert (1, 1 << 24) in shapes and (65536, 256) in shapes and (4, 1 << 24) not in shapes
    assert all(r * n <= dispatch.GRID_MAX_NUMEL for r, n in shapes)
    assert len(set(shapes)) == len(shapes) > 90


def _sweep(cells):
    return {"device": {"arch": 90, "sm_count": 132, "name": "test"},
            "shapes": [{"rows": r, "n": n, "eager": e} for r, n, e in cells]}


def test_derive_table_orders_paths_and_keeps_native_first_within_the_margin():
    t = lambda native, chain, rows_fused, ref: {"native": native, "chain": chain, "rows_fused": rows_fused,  # noqa
                                               "reference_order": ref, "dropin": 99.0}
    table = dispatch.derive_table(_sweep([
        (1, 1 << 20, t(1.0, 0.1, 0.9, 0.5)),     # chain by far
        (4096, 1024, t(1.0, 9.0, 0.98, 1.2)),    # rows_fused 2% faster: inside the margin, native stays first
        (16384, 1024, t(1.0, None, 0.5, 1.2)),   # chain failed here: not a candidate of the class
        (8, 4096, t(1.0, 2.0, 0.9, 1.1)),        # same class as ...
        (16, 4096, t(1.0, 2.0, 1.2, 1.1)),       # ... this one: geometric means decide
    ]))
    assert table[0][20][0] == "chain" and table[0][20][-1] == "native"
    assert table[rule.row_class(4096, 132)][10][0] == "native"
    assert "chain" not in table[rule.row_class(16384, 132)][10]
    assert table[0][12][0] == "native"  # rows_fused: sqrt(0.9 * 1.2) = 1.04 > 1


def test_generated_module_round_trips():
    table = {0: {10: ("native", "chain"), 20: ("chain", "native")}, 3: {12: ("rows_fused", "native")}}
    ns = {}
    exec(dispatch.module_source(table, "RUN", {"device": {"name": "X", "arch": 90, "sm_count": 132}}), ns)
    assert ns["TABLE"] == table and ns["RUN_ID"] == "RUN" and ns["DEVICE"]["sm_count"] == 132


def test_committed_table_is_what_its_committed_run_derives():
    run_dir = DATA_RUNS / measured.RUN_ID
    assert run_dir.is_dir(), f"labkit/ops/dropin/measured.py cites {measured.RUN_ID}, which is not under data/runs"
    run = load_run(run_dir)
    assert run["complete"] and run["records"]["run"]["name"] == "dispatch_table"
    sweep = run["records"]["dropin_sweep"]
    assert dispatch.derive_table(sweep) == measured.TABLE
    assert measured.DEVICE == {k: sweep["device"][k] for k in ("name", "arch", "sm_count")}
    recorded = run["records"]["dispatch_table"]["table"]
    assert {int(rc): {int(nc): tuple(p) for nc, p in row.items()} for rc, row in recorded.items()} == measured.TABLE
    assert measured.RUN_ID in rule.RULE_SOURCE


def test_rule_takes_the_measured_fastest_path_at_every_grid_shape():
    sweep = load_run(DATA_RUNS / measured.RUN_ID)["records"]["dropin_sweep"]
    dev = rule.Device(90, sweep["device"]["sm_count"])
    for r in sweep["shapes"]:
        path, why = rule.choose(r["rows"], r["n"], dev)
        first = measured.TABLE[rule.row_class(r["rows"], dev.sm_count)][rule.n_class(r["n"])][0]
        expect = first if not (first == "chain" and r["rows"] > rule.CHAIN_MAX_ROWS) else path
        assert path == expect and measured.RUN_ID in why


def test_rule_looks_up_unmeasured_classes_conservatively():
    dev = rule.Device(90, 132)
    assert rule.choose(1, 1 << 19, dev)[0] == rule.choose(1, 1 << 18, dev)[0]  # 2^19 unmeasured: 2^18's answer
    assert rule.choose(1, 12, dev)[0] == measured.TABLE[0][min(measured.TABLE[0])][0]  # below the grid: smallest
    assert rule.choose(65536, 1 << 24, dev)[0] != "chain"  # beyond grid.y
    for arch in (80, 86, 89):
        path, why = rule.choose(1, 1 << 24, rule.Device(arch, 132))
        assert path == "native" and "unmeasured" in why


def test_table_grid_for_display():
    rows = dispatch.table_rows(measured.TABLE)
    assert len(rows) == len(measured.TABLE)
    assert rows[0]["2^24"] == {"chain": "chain", "native": "torch"}.get(measured.TABLE[0][24][0], rows[0]["2^24"])
    json.dumps(rows)


@pytest.mark.parametrize("arch", [80, 86, 89, 90])
def test_pickable_paths_follow_the_table(arch):
    paths = rule.pickable_paths(arch)
    assert paths[0] == "native"
    if arch < 90:
        assert paths == ("native",)
    else:
        assert set(paths) == {p for row in measured.TABLE.values() for ps in row.values() for p in ps} | {"native"}
