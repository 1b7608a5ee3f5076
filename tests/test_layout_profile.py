"""Notebook 09's per-op profile (the post's norm_baselines step): the table and sentence made from a record, the
one-line message when the run has no such record, the route that fails or fails the check as a row with its
reason, and (on a GPU) one profiled call per route with aten ops recorded."""
import json
import math

import pytest

from labkit.studies import layout_boundary as lb
from labkit.studies import layout_profile


def _route(ops, device_us, launches=2, bit_equal=1.0, kernels=()):
    return {"profiled": True, "error": None, "check": {"official_pass": True, "bit_equal_fraction": bit_equal},
            "ops": [{"name": n, "count": c, "device_us": t, "self_device_us": t} for n, c, t in ops],
            "kernels": [{"name": n, "count": 1, "device_us": t} for n, t in kernels], "device_us": device_us,
            "kernel_launches": launches, "outside_aten_us": max(0.0, device_us - sum(t for _, _, t in ops))}


def _fake_record():
    """A hand-made fixture in op_profile's shape (not a measurement): ops deliberately out of order."""
    eager = _route([("aten::pow", 1, 98.76), ("aten::view", 2, 0.0), ("aten::div", 1, 412.37),
                    ("aten::mean", 1, 1234.5), ("aten::sqrt", 1, 3.2109)], 1748.8, launches=4)
    return {"schema": 1, "mode": "full", "shape": [4, 64, 512, 512], "seed": 42, "warmups": 3,
            "activities": ["CPU", "CUDA"], "tasks": [
                {"family": "rms", "task": "L1/36", "eps": 1e-5, "warnings": [], "routes": {
                    "eager": eager,
                    "torchscript": {"profiled": False, "check": None,
                                    "error": "RuntimeError: torch.jit.script is unavailable"},
                    # a TorchScript fusion: its kernel has no aten op, so most device time is outside them
                    "torchscript_trace": _route([("aten::pow", 1, 124.0), ("aten::mean", 1, 72.7)], 439.0, 3,
                                                kernels=[("fused_add_sqrt_div", 242.3)]),
                    "builtin": {"profiled": False, "error": None,
                                "check": {"official_pass": False, "bit_equal_fraction": 0.5},
                                "skipped": "fails the official predicate against eager: not profiled"}}},
                {"family": "l2", "task": "L1/39", "eps": 0.0, "warnings": [], "routes": {
                    "eager": _route([("aten::expand", 1, 0.0), ("aten::linalg_vector_norm", 1, 700.0),
                                     ("aten::div", 1, 300.0)], 1000.0)}}]}


def test_rows_sort_ops_by_self_device_time_with_units_and_3_significant_figures():
    rows = layout_profile.op_profile_rows(_fake_record())
    eager = rows[0]
    assert (eager["task"], eager["route"]) == ("L1/36 (rms)", "eager")
    top = eager["top aten ops: self device us (calls)"]
    # largest self time first, only PROFILE_TOP of them, each rounded to 3 significant figures
    assert top == "aten::mean 1,230 (1); aten::div 412 (1); aten::pow 98.8 (1)"
    assert "aten::sqrt" not in top
    # an op that launched nothing (a view, an expand) is never a top op
    assert rows[-1]["top aten ops: self device us (calls)"] == "aten::linalg_vector_norm 700 (1); aten::div 300 (1)"
    assert eager["device us (whole call)"] == 1750.0
    assert eager["kernel launches"] == 4 and eager["aten ops"] == 5
    # times carry their unit in the header; every other column is a name, a count or a fraction
    assert set(eager) == {"task", "route", "device us (whole call)", "kernel launches", "aten ops",
                          "outside aten ops: device us", "top aten ops: self device us (calls)",
                          "bit-equal fraction vs eager"}
    assert eager["outside aten ops: device us"] == 0.0


def test_a_route_not_profiled_is_a_row_with_its_reason():
    rows = {r["route"]: r for r in layout_profile.op_profile_rows(_fake_record()) if r["task"].startswith("L1/36")}
    assert rows["torchscript"]["note"] == "RuntimeError: torch.jit.script is unavailable"
    assert rows["torchscript_trace"]["outside aten ops: device us"] == 242.0
    assert rows["builtin"]["note"].startswith("fails the official predicate")


def test_rows_hold_no_reprs():
    # every value is a number or plain text: no dict, list or tuple for the page to print as a repr
    for row in layout_profile.op_profile_rows(_fake_record()):
        for value in row.values():
            assert isinstance(value, (str, int, float)), value
            if isinstance(value, str):
                assert not any(ch in value for ch in "{}[]"), value


def test_summary_line_names_the_dominant_op_of_each_route():
    line = layout_profile.op_profile_line(_fake_record())
    assert "\n" not in line
    assert "L1/36: eager 1,750 us, 71% in aten::mean" in line  # 1234.5 / 1748.8
    assert "torchscript not profiled" in line and "builtin not profiled" in line
    assert "torchscript_trace 439 us, 55% outside aten ops (fused_add_sqrt_div)" in line  # 242.3 / 439
    assert "L1/39: eager 1,000 us, 70% in aten::linalg_vector_norm" in line
    assert "4x64x512x512" in line


def test_no_record_is_one_line_saying_so():
    rows = layout_profile.op_profile_rows(None, "REPLAYED committed GPU run r1")
    assert len(rows) == 1 and list(rows[0]) == ["op profile"]
    message = rows[0]["op profile"]
    assert "no committed run has this record yet" in message and "r1" in message and "\n" not in message
    assert layout_profile.op_profile_rows({}) == [{"op profile": layout_profile.op_profile_missing()}]
    assert "no committed run has this record yet" in layout_profile.op_profile_line(None)


def test_verdict_mentions_the_profile_only_when_there_is_one():
    with_profile = lb.verdict_lines({"families": []}, None, {}, "LIVE run x", profile_record=_fake_record())
    assert any(line.startswith("Where the time goes") for line in with_profile)
    without = lb.verdict_lines({"families": []}, None, {}, "LIVE run x")
    assert not any("profiled call" in line for line in without)


@pytest.mark.parametrize("v, want", [(1234.5, 1230.0), (412.37, 412.0), (0.0012345, 0.00123), (0.0, 0.0),
                                     (99.95, 100.0)])  # 99.95 rounds up across a decade
def test_three_significant_figures(v, want):
    assert math.isclose(layout_profile._sig3(v), want)


def test_the_profile_runs_on_the_cpu_and_a_failing_route_becomes_its_error():
    # the same code path as on the GPU, CPU activity only (no device time); "bogus" cannot be built
    record = layout_profile.op_profile("cpu", "quick", routes=(*layout_profile.PROFILE_ROUTES, "bogus"), warmups=1)
    json.dumps(record)
    for t in record["tasks"]:
        for name in layout_profile.PROFILE_ROUTES:
            route = t["routes"][name]
            assert route["profiled"] and route["check"]["official_pass"], (t["task"], name, route.get("error"))
            assert any(o["name"].startswith("aten::div") for o in route["ops"])
            assert route["device_us"] == 0 and route["kernel_launches"] == 0
        assert t["routes"]["bogus"] == {"profiled": False, "check": None, "error": "ValueError: unknown method 'bogus'"}


@pytest.mark.gpu
def test_quick_profile_records_aten_ops_for_every_task_on_the_gpu():
    record = layout_profile.op_profile("cuda", "quick")
    json.dumps(record)  # JSON-able, as session.record writes it
    assert record["shape"] == [2, 64, 64, 64] and record["activities"] == ["CPU", "CUDA"]
    assert [t["task"] for t in record["tasks"]] == ["L1/36", "L1/38", "L1/39"]
    for t in record["tasks"]:
        eager = t["routes"]["eager"]
        assert eager["profiled"], (t["task"], eager.get("error"))
        assert eager["ops"] and all(o["name"].startswith("aten::") and o["count"] >= 1 for o in eager["ops"])
        assert eager["device_us"] > 0 and eager["kernel_launches"] >= 1
        assert set(t["routes"]) == set(layout_profile.PROFILE_ROUTES)
    rows = layout_profile.op_profile_rows(record)
    assert len(rows) == 3 * len(layout_profile.PROFILE_ROUTES)
