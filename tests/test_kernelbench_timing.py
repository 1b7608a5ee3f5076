"""KernelBench's timing as labkit.studies.kernelbench_timing reproduces it, on the CPU: the constants read from the
pinned evaluator, the statistics, the refusals, and the tables and verdict from a hand-made record (a fixture of this
test, not data). The timing itself runs on the GPU (scripts/kernelbench_timing.py)."""
import pytest

from labkit.studies import kernelbench_timing as kb


def test_the_constants_are_the_evaluators():
    assert (kb.EVAL_WARMUP, kb.REF_PROGRAM_WARMUP, kb.NUM_TRIALS, kb.DISCARD_FIRST, kb.SEED) == (3, 5, 100, 1, 42)
    assert 8 * kb.THRASH_SHAPE[0] * kb.THRASH_SHAPE[1] * kb.THRASH_SHAPE[2] == 256 << 20


def test_stats_are_kernelbenchs_and_the_quartiles():
    s = kb.stats([1.0, 2.0, 3.0, 4.0])
    assert s["mean_ms"] == 2.5 and s["min_ms"] == 1.0 and s["max_ms"] == 4.0 and s["trials"] == 4
    assert s["std_ms"] == pytest.approx(1.118033988749895)  # numpy's np.std: the population deviation
    assert s["median_ms"] == 2.5


def test_bad_arguments_are_refused_before_any_launch():
    with pytest.raises(ValueError, match="num_trials >= 1"):
        kb.cuda_event_times(lambda: None, num_trials=0)
    with pytest.raises(ValueError, match="blocks must be at least 1"):
        kb.run(blocks=0)


def _record(ours=0.30, compiled=0.32, ref=8.0):
    per = {"reference": ref, "torch.compile": compiled, "ModelNew (labkit)": ours}
    return {"blocks": 2, "num_trials": 3, "path": "chain",
            "samples_ms": {n: [[v, v, v], [v * 1.01, v, v]] for n, v in per.items()},
            "bits_equal_reference": {"reference": True, "torch.compile": False, "ModelNew (labkit)": True},
            "graph": {"stats": {n: {"median_ms": v * 0.9} for n, v in per.items()}}}


def test_rows_and_verdict_from_a_record():
    rows = kb.rows(_record())
    assert [r["program"] for r in rows] == list(kb.METHODS)
    assert rows[2]["bits = reference"] == "✓" and rows[1]["bits = reference"] == "✗"
    lines = kb.verdict_lines(_record(), "run X")
    assert "KernelBench's cuda_event timing" in lines[0] and "run X" in lines[0]
    assert "x torch.compile per block 1.07, 1.07" in lines[1]
    # the goals as goal lines (labkit.studies.goals), under protocol B, the same list the front page counts
    assert "(goal <= 0.29 ms: missed)" in lines[3] and "(goal >= 1.1x: missed)" in lines[4]
    assert all("(protocol B)" in ln for ln in lines[3:6])
    assert [g["met"] for g in kb.goals({"kernelbench_timing": _record()})][:3] == [False, False, False]
    assert kb.goals({"kernelbench_timing": _record(ours=0.2)})[0]["met"] is True
    # graph replay in the same run: 0.27 ms against ModelNew's 0.9 * 0.30, torch.compile's 0.9 * 0.32 over it
    graph_ms, graph_compile = kb.goals({"kernelbench_timing": _record()})[3:]
    assert graph_ms["met"] is True and "0.270 ms" in graph_ms["measured"]  # <= 0.27: met, just
    from labkit.studies.goals import goal_line

    assert "(protocol A)" in goal_line(graph_ms)
    assert graph_compile["met"] is False and graph_compile["measured"].startswith("1.07x")
    assert [g["met"] for g in kb.goals({"kernelbench_timing": _record(ours=0.31, compiled=0.36)})[3:]] == [False, True]
    # one slow block of torch.compile does not make the goal: every block must meet it
    rec = _record(ours=0.30, compiled=0.32)
    rec["samples_ms"]["torch.compile"][1] = [0.6, 0.6, 0.6]
    assert kb.goals({"kernelbench_timing": rec})[1]["met"] is False and "missed" in kb.verdict_lines(rec, "run X")[4]
    assert kb.goals({}) == []
    assert kb.rows(None) == [] and "no run" in kb.verdict_lines(None, "no run")[0]


def test_the_verdict_says_under_which_grad_mode_the_run_timed():
    old = kb.verdict_lines(_record(), "run X")[0]
    assert "predates the grad-mode fix" in old  # the committed run timed everything under no_grad
    new = _record()
    new["grad_enabled"] = dict(kb.GRAD_ENABLED)
    assert "grad mode as the evaluator" in kb.verdict_lines(new, "run X")[0]
    assert kb.GRAD_ENABLED == {"reference": True, "torch.compile": False, "ModelNew (labkit)": True}


def test_the_forward_summary_block_has_every_key_from_the_committed_runs_that_measure_it():
    """Issue 24's `forward` keys: L1/40 under graph replay and KernelBench's timing from the newest run holding a
    kernelbench_timing record (notebook 08's or the script's), the dispatch's worst ratios from notebook 08's;
    summarizing them fills every key, and each value is the one its record gives."""
    import statistics

    from pathlib import Path

    from labkit.records.run import load_run
    from labkit.records.session import newest_complete_run
    from labkit.studies.catalog import summarize_runs

    timing, dropin = kb.newest_run(), Path(newest_complete_run("dropin")["path"])
    s = summarize_runs([timing] + ([dropin] if dropin != timing else []))  # the first run's values come first
    f = s["forward"]
    assert set(f) == set(kb.FORWARD_KEYS) and None not in f.values()
    rec = load_run(timing)["records"]["kernelbench_timing"]
    ours = [t for b in rec["samples_ms"]["ModelNew (labkit)"] for t in b]
    assert f["l1_40_b_ms"] == statistics.fmean(ours)
    assert f["l1_40_graph_ms"] == rec["graph"]["stats"]["ModelNew (labkit)"]["median_ms"]
    sweep = load_run(dropin)["records"]["dropin_sweep"]
    assert f["dispatch_worst_vs_native_eager"] == min(r["eager"]["native"] / r["eager"]["dropin"]
                                                      for r in sweep["shapes"] if r["eager"].get("dropin"))


def _run(root, run_id, name, records):
    from labkit.records.run import Run

    run = Run.create(root / "tmp", name, device="cpu")
    for rec_name, rec in records.items():
        run.write(rec_name, rec)
    run.close()
    run.path.rename(root / run_id)
    return root / run_id


def test_newest_run_is_the_newest_of_either_name_that_holds_the_record(tmp_path):
    """notebook 08's dropin run holds KernelBench's timing from 2026-12-05 on: the newest run of either name that
    has the record serves it (notebook 07, the front page); a newer dropin run without it does not, nor does an
    incomplete run."""
    old = _run(tmp_path, "20200101T000000Z-cpu-kernelbench-timing-aaaaaa", "kernelbench_timing",
               {"kernelbench_timing": _record()})
    assert kb.newest_run(runs_root=tmp_path) == old
    with_it = _run(tmp_path, "20200102T000000Z-cpu-dropin-bbbbbb", "dropin", {"kernelbench_timing": _record()})
    _run(tmp_path, "20200103T000000Z-cpu-dropin-cccccc", "dropin", {"dropin_sweep": {"shapes": []}})
    assert kb.newest_run(runs_root=tmp_path) == with_it
    broken = _run(tmp_path, "20200104T000000Z-cpu-kernelbench-timing-dddddd", "kernelbench_timing",
                  {"kernelbench_timing": _record()})
    (broken / "kernelbench_timing.json").write_text("{}")  # its hash no longer matches: not complete
    assert kb.newest_run(runs_root=tmp_path) == with_it
    assert kb.newest_run(runs_root=tmp_path / "none") is None


def test_a_dropin_run_with_kernelbench_timing_fills_every_forward_key():
    from labkit.studies import dropin

    rec = _record()
    sweep = {"shapes": [{"key": "8x1024", "eager": {"native": 2.0, "dropin": 1.0}, "graph": {"native": 1.5,
                                                                                             "dropin": 1.0}}]}
    f = dropin.forward_block({"dropin_sweep": sweep, "kernelbench_timing": rec})
    assert f["l1_40_graph_ms"] == kb.forward_block(rec)["l1_40_graph_ms"] == 0.27
    assert f["l1_40_compile_b_ms"] == pytest.approx(0.32 * (6.01 / 6))
    assert (f["dispatch_worst_vs_native_eager"], f["dispatch_worst_vs_native_graph"]) == (2.0, 1.5)
    assert dropin.forward_block({"dropin_sweep": sweep})["l1_40_b_ms"] is None


def test_rotated_blocks_times_each_program_back_to_back_in_a_rotated_order(monkeypatch):
    calls = []

    def fake(fn, num_warmup, num_trials):
        calls.append((fn(), num_warmup))
        return [float(len(calls))] * num_trials

    monkeypatch.setattr(kb, "cuda_event_times", fake)
    samples, orders = kb.rotated_blocks({"a": (lambda: "a", 3), "b": (lambda: "b", 5), "c": (lambda: "c", 3)},
                                        blocks=4, num_trials=2)
    assert orders == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"], ["a", "b", "c"]]
    assert calls[:4] == [("a", 3), ("b", 5), ("c", 3), ("b", 5)]
    assert samples["a"] == [[1.0, 1.0], [6.0, 6.0], [8.0, 8.0], [10.0, 10.0]]
    assert kb.block_means(samples)["b"] == [2.0, 4.0, 9.0, 11.0]
    assert kb.pooled_means({"x": [[1.0, 2.0], [6.0]]}) == {"x": 3.0}


def test_the_front_page_lists_a_run_that_is_the_source_of_two_names_once(tmp_path):
    from labkit.studies import front

    run = _run(tmp_path, "20200102T000000Z-cpu-dropin-bbbbbb", "dropin", {"kernelbench_timing": _record()})
    ids = front.run_ids({"dropin": run, "kernelbench_timing": run})
    assert len(ids) == 1 and "-dropin-" in ids[0][0]
