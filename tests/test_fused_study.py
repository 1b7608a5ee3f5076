"""The fused-consumer study's readers on a CPU (labkit.studies.fused): the traffic counted from the shapes, the rows
and the `fused` summary block read from records, the goals paired per round. The records here are made with the
study's own timing machinery on CPU callables (bench.HostTimer), so the readers meet the record layout a GPU run
writes."""
from dataclasses import replace

import pytest

from labkit.studies import bench, fused, measure
from labkit.tasks import L1_40

MIB = 1 << 20


def test_l1_40_traffic_is_the_issues_count():
    """The drop-in's chain moves 3 x 256 MiB at L1/40 (x read twice, y written), the GELU and scale another
    4 x 256 MiB; fused on the chain, the LayerNorm's three passes alone (gamma, beta, mean and rstd beside)."""
    t = fused.traffic(L1_40, L1_40[1:], "chain", "chain")
    big = t["tensor_bytes"]
    assert big == 256 * MIB and t["rows"] == 16
    small = 2 * 4 * t["n"] + 2 * 2 * 4 * t["rows"]  # gamma and beta read, mean and rstd written then read
    m = t["methods"]
    assert m[fused.LAYER_NORM]["bytes"] == 3 * big + small
    assert m[fused.UNFUSED]["bytes"] == 7 * big + small
    assert m[fused.FUSED]["bytes"] == m[fused.LAYER_NORM]["bytes"]
    assert m[fused.COMPILED]["bytes"] == 2 * big
    rows_fused = fused.traffic((8192, 768), (768,), "rows_fused", "rows_fused")["methods"]
    assert [k["kernel"] for k in rows_fused[fused.FUSED]["kernels"]] == ["rows_fused"]  # x read once


def _record():
    """A `timing` record as fused.timing writes it, from CPU callables whose times differ by design."""
    import time

    def sleeper(ms):
        return lambda: time.sleep(ms / 1e3)

    fns = {fused.EAGER: sleeper(4), fused.LAYER_NORM: sleeper(1), fused.UNFUSED: sleeper(3), fused.FUSED: sleeper(1),
           fused.COMPILED: sleeper(2)}
    protocols = {"A": replace(bench.PROTOCOL_A, graph=False, rounds=3, warmups=0, repeats=1),
                 "B": replace(bench.PROTOCOL_B, rounds=3, warmups=0, flush_l2_bytes=0)}
    timing = {k: bench.time_methods(fns, p, baseline=fused.FUSED, timer=bench.HostTimer()).to_json()
              for k, p in protocols.items()}
    ceiling = measure.copy_ceiling(protocols, nbytes=1 << 16, device="cpu", timer_factory=lambda p: bench.HostTimer())
    return {"shape": list(L1_40), "activation": fused.ACTIVATION, "scale": fused.SCALE,
            "traffic": fused.traffic(L1_40, L1_40[1:], "chain", "chain"), "timing": timing, "copy_ceiling": ceiling}


@pytest.fixture(scope="module")
def records():
    bits = {"cases": [{"case": "a", "path": "chain", "forward": True, "backward": True},
                      {"case": "b", "path": "rows_fused", "forward": True, "backward": False}]}
    kb = {"tasks": [{"task": "L2/34", "correct": "5/5", "bits_identical": "5/5",
                     "times_ms": {"reference": {"mean_ms": 3.0}, "torch.compile": {"mean_ms": 2.0},
                                  "ModelNew (labkit)": {"mean_ms": 1.5}}},
                    {"task": "L2/3", "correct": "4/5", "error": "RuntimeError: x"}]}
    return {"timing": _record(), "bits": bits, "kernelbench": kb}


def test_the_summary_block_has_the_issues_keys(records):
    block = fused.summary(records, {})["fused"]
    assert {"l1_40_fused_ms", "l1_40_layer_norm_ms", "l1_40_unfused_ms", "l1_40_compile_ms", "l1_40_compile_b_ms",
            "l1_40_fused_b_ms", "bits_identical", "kernelbench_correct"} <= set(block)
    assert block["bits_identical"] == "1/2" and block["kernelbench_correct"] == "9/10"
    assert block["l1_40_fused_ms"] < block["l1_40_unfused_ms"] < block["l1_40_eager_ms"]
    assert fused.summary({}, {}) == {} and fused.summary_lines({}) == []
    assert "fused consumer" in fused.summary_lines({"fused": block})[0]


def test_rows_goals_and_verdict_read_the_records(records):
    t = records["timing"]
    rows = fused.timing_rows(t)
    assert len(rows) == 2 * (len(fused.METHODS) + 1)
    assert all(r["gbps"] > 0 for r in rows)
    goals = {(g["goal"], g["protocol"]): g for g in fused.goals(t)}
    assert len(goals) == 2 * len(fused.GOALS)
    faster = goals[(fused.GOALS[1][0], "A")]
    assert faster["ratio"] > 2 and faster["met"]  # 3 ms against 1 ms, paired per round
    assert fused.traffic_rows(t)[-1]["kernel"] == "total"
    kb = fused.kernelbench_rows(records["kernelbench"])
    assert kb[0]["vs torch.compile"] == "1.33x faster" and kb[1]["error"]
    lines = fused.verdict_lines(records, "test")
    assert f"{fused.GOALS[1][0]} (protocol A): " in lines[2] and lines[2].endswith("— met.")
    assert "1/2 cases identical, 0 served by torch's chain" in lines[len(fused.GOALS) * 2]
    assert lines[-1].startswith(kb[0]["task"]) and "1.33x faster than its torch.compile" in lines[-1]
    native = {**records, "bits": {"cases": [{"case": "c", "path": "native", "forward": True, "backward": True}]}}
    assert fused.fused_block(native)["bits_identical"] == "0/1"  # torch's chain serving proves nothing
    assert fused.plain_verdict({}) == ["No fused-consumer run yet."]
    assert fused.traffic_rows(None) == fused.timing_rows(None) == fused.bits_rows(None) == []


def test_the_figure_draws_both_protocols(records):
    import matplotlib

    matplotlib.use("Agg")
    fig = fused.figure(records["timing"], "test")
    assert len(fig.axes[0].patches) == 2 * len(fused.METHODS)
    assert fused.figure(None, "test") is None


def test_labkit_summary_of_a_run_has_the_fused_block(tmp_path, records):
    """What `labkit summary RUN --json` prints for a fused_consumer run, from records as the notebook writes them."""
    from labkit.records.run import Run
    from labkit.studies.catalog import summarize_run, summary_text

    run = Run.create(tmp_path, fused.RUN_NAME, {"mode": "quick"}, device="cpu")
    for name, rec in records.items():
        run.write(name, rec)
    run.close()
    s = summarize_run(run.path)
    assert s["fused"]["bits_identical"] == "1/2" and s["fused"]["l1_40_fused_ms"] > 0
    assert "fused consumer" in summary_text(s)
