"""The timing study on the CPU: cases, bytes, protocols, eligibility, the whole study with a host timer and a few
methods (one that raises, one that fails the check), tables, plots and the summary block."""
import dataclasses
import json

import matplotlib
import pytest

from labkit.studies import bench

from labkit import tasks

from labkit.records import run as results

from labkit.studies import catalog
from labkit.studies.timing import timing_block as timing_study_block

from labkit.studies import timing
from labkit.studies import methods as M

matplotlib.use("Agg")

HOST_A = bench.Protocol(name="A-host", graph=False, warmups=1, rounds=4, repeats=2)
HOST_B = bench.Protocol(name="B-host", graph=False, warmups=1, rounds=6, repeats=1)


def test_byte_count_formula():
    # read x + write y (rows*N each) + read gamma and beta (N each), float32
    assert timing.byte_count((16, 64, 256, 256)) == 4 * (2 * 16 * 4194304 + 2 * 4194304) == 570_425_344
    assert timing.byte_count((4096, 1, 1, 1024), (1, 1, 1024)) == 4 * (2 * 4096 * 1024 + 2 * 1024)
    assert timing.byte_count((3, 64, 17, 19)) == 4 * (2 * 3 * 20672 + 2 * 20672)
    assert timing.gbps(2_000_000_000, 1000.0) == pytest.approx(2.0)


def test_cases_and_protocols():
    cases = timing.cases_for(tasks.config("full").timing_shapes)
    assert [c["key"] for c in cases] == ["16x64x256x256/default", "16x64x256x256/random_normal",
                                         "8x32x128x256/random_normal", "4096x1x1x1024/random_normal",
                                         "3x64x17x19/random_normal"]
    assert cases[0]["normalized_shape"] == [64, 256, 256]
    assert all(c["shape"] != list(tasks.L1_40) for c in timing.cases_for(tasks.config("quick").timing_shapes))
    with pytest.raises(ValueError):
        timing.cases_for([(5,)])
    full = timing.protocols_for("full")
    assert full["A"] == bench.PROTOCOL_A and full["B"] == bench.PROTOCOL_B
    quick = timing.protocols_for("quick", ["A"], rounds=35, repeats=3)
    assert list(quick) == ["A"] and quick["A"].repeats == 3 and quick["A"].graph
    assert quick["A"].rounds == tasks.config("quick").max_rounds_a == 5  # quick mode caps the rounds
    assert timing.protocols_for("quick", ["A"], rounds=2)["A"].rounds == 2  # a cap, not a floor
    assert timing.protocols_for("quick", ["B"], rounds_b=100)["B"].rounds == tasks.config("quick").max_rounds_b
    with pytest.raises(ValueError):
        timing.protocols_for("full", ["C"])
    with pytest.raises(ValueError):
        timing.protocols_for("huge")
    assert timing.estimate_calls(3, full) == {"A": 8 + 1 + 35 * 5, "B": 3 + 100, "methods": 3}
    recorded = {k: dataclasses.asdict(p) for k, p in full.items()}  # as a run's record holds them
    assert timing.estimate_calls(3, recorded) == timing.estimate_calls(3, full)


def test_eligibility_filters_a_fake_record():
    rows = {
        "native": {"error": None, "check": {"official_pass": True}},
        "fast_wrong": {"error": None, "check": {"official_pass": False, "bad_finite_candidate_scale": 7,
                                                "max_ratio_candidate_scale": 3.5, "bad_special": 0}},
        "broken": {"error": "RuntimeError: exceeds 65536", "check": None},
        "unchecked": {"error": None, "check": None},
        "ok": {"error": None, "check": {"official_pass": True}},
    }
    assert timing.eligible_names(rows) == ["native", "ok"]
    assert "7 finite elements over the budget" in timing.failure_text(rows["fast_wrong"])
    assert timing.failure_text(rows["broken"]) == "RuntimeError: exceeds 65536"
    assert "not timed" in timing.failure_text({"error": None, "status": "eligible", "check": {"official_pass": True}})


def _at_build(x, w, b, eps):
    raise RuntimeError("no kernel for this shape")


def _wrong(x, w, b, eps):
    return lambda: x + 1


@pytest.fixture(scope="module")
def cpu_record():
    methods = [M.get("native"), M.get("noaffine_eager_affine"), M.get("reference_order"),
               M.Method("raises", "compiler", False, _at_build), M.Method("wrong", "compiler", False, _wrong)]
    cases = timing.cases_for([(4, 8, 16), (2, 3, 4, 4)])
    return timing.run_study(cases, {"A": HOST_A, "B": HOST_B}, device="cpu", methods=methods,
                            ceiling_bytes=1 << 20, timer_factory=lambda p: bench.HostTimer(), log=lambda *a: None)


def test_study_on_cpu_checks_times_and_lists_every_method(cpu_record):
    rec = cpu_record
    json.dumps(rec)  # a run record
    assert [c["key"] for c in rec["cases"]] == ["4x8x16/random_normal", "2x3x4x4/random_normal"]
    case = rec["cases"][0]
    assert case["eligible"] == ["native", "noaffine_eager_affine"]
    status = {n: r["status"] for n, r in case["methods"].items()}
    assert status == {"native": "timed", "noaffine_eager_affine": "timed", "reference_order": "unavailable",
                      "raises": "unavailable", "wrong": "failed_check"}
    for key, proto in (("A", HOST_A), ("B", HOST_B)):
        t = case["timing"][key]
        assert set(t["samples_ms"]) == {"native", "noaffine_eager_affine"}
        assert all(len(s) == proto.rounds for s in t["samples_ms"].values())
        assert len(t["ratio_vs_baseline"]["noaffine_eager_affine"]["per_round"]) == proto.rounds
        assert case["bandwidth"][key]["native"]["fraction_of_copy_ceiling"] > 0
    assert case["methods"]["native"]["check"]["bit_equal_fraction"] == 1.0
    assert case["bytes"] == timing.byte_count((4, 8, 16)) and case["rows"] == 4 and case["n"] == 128
    assert rec["copy_ceiling"]["A"]["bytes_moved"] == 2 << 20
    assert rec["protocols"]["A"]["rounds"] == 4 and rec["baseline"] == "native"


def test_tables_and_plots_from_a_record(cpu_record):
    key = "4x8x16/random_normal"
    rows = timing.timing_rows(cpu_record, key, "A")
    assert [r["method"] for r in rows] == sorted([r["method"] for r in rows], key=lambda m: next(
        x["median ms"] for x in rows if x["method"] == m))
    assert {r["method"] for r in rows} == {"native", "noaffine_eager_affine"}
    untimed = {r["method"]: r for r in timing.untimed_rows(cpu_record, key)}
    assert set(untimed) == {"reference_order", "raises", "wrong"}
    assert "no kernel for this shape" in untimed["raises"]["why not timed"]
    assert "over the budget" in untimed["wrong"]["why not timed"]
    assert len(timing.check_rows(cpu_record, key)) == 5
    shape_rows = timing.shape_rows(cpu_record, "B")
    assert shape_rows[0]["method"] == "native" and shape_rows[0][key].startswith("1x")
    assert len(timing.ceiling_rows(cpu_record)) == 2
    lines = timing.verdict_lines(cpu_record, {"gpu": "none", "torch": "x"}, "run-1")
    assert lines[0].startswith("Run run-1") and "not timed: reference_order (ValueError: x must be a CUDA tensor (got cpu))" in lines[1]
    for plot in (timing.plot_samples, timing.plot_speedups):
        assert plot(cpu_record, "A", "(test)") is not None
    assert timing.plot_samples({"cases": []}, "A") is None


def test_tables_and_verdict_from_no_record():
    # CPU mode without a committed run: every table is empty and the verdict claims nothing.
    for rows in (timing.method_rows(None), timing.protocol_rows(None), timing.byte_rows(None),
                 timing.ceiling_rows(None), timing.all_check_rows(None), timing.all_timing_rows(None, "A"),
                 timing.all_untimed_rows(None), timing.shape_rows(None, "B")):
        assert rows == []
    assert timing.plot_samples(None) is None and timing.plot_speedups(None, "B") is None
    assert "supports no speed claim" in timing.verdict(None, None, "no committed GPU run yet")
    assert timing.record_line(None, None, "none").startswith("No timing record: none.")


def test_record_tables_and_verdict_read_the_record(cpu_record):
    keys = timing.case_keys(cpu_record)
    methods = {r["method"]: r for r in timing.method_rows(cpu_record)}
    assert methods["native"]["registered in this checkout"] and not methods["raises"]["registered in this checkout"]
    proto = {r["key"]: r for r in timing.protocol_rows(cpu_record)}
    assert proto["A"]["calls per method per case"] == HOST_A.warmups + HOST_A.rounds * HOST_A.repeats
    assert [r["bytes"] for r in timing.byte_rows(cpu_record)] == [timing.byte_count(c["shape"]) for c in
                                                                   cpu_record["cases"]]
    rows = timing.all_timing_rows(cpu_record, "B")
    assert [r["case"] for r in rows] == [k for k in keys for _ in range(2)]
    assert len(timing.all_check_rows(cpu_record)) == 5 * len(keys)
    assert {r["method"] for r in timing.all_untimed_rows(cpu_record)} == {"reference_order", "raises", "wrong"}
    text = timing.verdict(cpu_record, {"gpu": "G", "torch": "T"}, "REPLAYED committed GPU run R")
    assert text.startswith("REPLAYED committed GPU run R: G") and "Eager per call, L2 flushed (protocol B):" in text
    assert text.count("slower than native in at least 3/4 of rounds:") == 2 * len(keys)
    assert "where the post saw a regression" not in text  # no (3, 64, 17, 19) case in this record
    line = timing.record_line(cpu_record, {"gpu": "G", "torch": "T"}, "LIVE run R")
    assert line.startswith("LIVE run R: G, torch T; 2 cases") and "A (4 rounds x 2), B (6 rounds x 1)" in line


def test_verdict_states_the_regression_at_the_uneven_shape_from_the_record(cpu_record):
    import copy

    rec = copy.deepcopy(cpu_record)
    case = rec["cases"][0]
    case["shape"] = list(tasks.UNEVEN_SHAPE)
    ratios = case["timing"]["A"]["ratio_vs_baseline"]["noaffine_eager_affine"]
    ratios.update(median=0.5, q25=0.4, q75=0.6)
    text = timing.verdict(rec, {}, "src")
    assert (f"At {tasks.UNEVEN_SHAPE}, where the post saw a regression, protocol A of this run shows slower than "
            f"native in at least 3/4 of rounds: noaffine_eager_affine 0.5x.") in text
    ratios.update(median=1.5, q25=1.2, q75=1.8)
    assert "protocol A of this run shows no method slower than native" in timing.verdict(rec, {}, "src")


def test_run_uses_the_mode_shapes_and_round_caps():
    lines = []
    rec = timing.run("quick", "cpu", shapes=[(2, 8)], protocols=["B"], rounds_b=100, log=lines.append,
                     methods=[M.get("native")], ceiling_bytes=1 << 16, timer_factory=lambda p: bench.HostTimer())
    assert [c["key"] for c in rec["cases"]] == ["2x8/random_normal"]
    assert rec["protocols"]["B"]["rounds"] == tasks.config("quick").max_rounds_b
    assert lines[-1].startswith("[timing] 2x8/random_normal: timed ['native']")
    with pytest.raises(ValueError, match="mode"):
        timing.run("huge", "cpu")


def test_graph_protocols_need_cuda():
    with pytest.raises(ValueError, match="CUDA"):
        timing.run_case(timing.cases_for([(2, 4)])[0], [M.get("native")], {"A": bench.PROTOCOL_A}, device="cpu")


def test_timing_block_on_a_synthetic_run(tmp_path, cpu_record):
    block = timing_study_block({"timing": cpu_record})
    native = block["4x8x16/random_normal"]["native"]
    assert set(native) >= {"median_ms", "q25_ms", "q75_ms", "bit_equal_fraction"}
    assert native["median_ms"] == cpu_record["cases"][0]["timing"]["A"]["stats"]["native"]["median_ms"]
    assert block["4x8x16/random_normal"]["wrong"] == {"median_ms": None, "q25_ms": None, "q75_ms": None,
                                                      "bit_equal_fraction": 0.0, "status": "failed_check"}
    assert timing_study_block({}) is None
    run = results.Run.create(tmp_path, "timing", {"mode": "quick"}, device="cpu")
    run.write("timing", cpu_record)
    run.close()
    out = catalog.summarize_run(run.path)
    assert out["timing"]["2x3x4x4/random_normal"]["noaffine_eager_affine"]["status"] == "timed"

