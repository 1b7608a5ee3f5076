"""Notebook 10's goals from its records (labkit.studies.training): shape by shape where issue 22 says so."""
from labkit.studies import training as study
from labkit.studies import training_backward, training_kernelbench, training_sweep, training_timeline


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
    assert training_sweep.paired(row, "eager", "native", "dropin") == 1.0
    assert training_sweep.paired_difference_ms(row, "eager", "dropin", "native") == 0.0
    assert training_sweep.speed_rows({"shapes": [row]})[0]["eager x torch"] == 1.0
    del row["eager_samples"]  # an older record: the ratio of its medians
    assert training_sweep.paired(row, "eager", "native", "dropin") == 2.0
    assert training_sweep.paired_difference_ms(row, "eager", "dropin", "native") == -1.0
    assert training_sweep.paired(row, "graph", "native", "dropin") is None


def test_the_sweep_keeps_each_protocols_samples_and_its_rows_judge_by_them(monkeypatch):
    """training_sweep.sweep end to end with host timing standing in for CUDA events (no GPU here): each row keeps both
    protocols' per-round samples, eager with EAGER_ROUND_FACTOR times the rounds, and no error."""
    import torch

    from labkit.studies import bench

    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda *a, **k: None)
    monkeypatch.setattr(training_sweep, "_tensors", lambda shape, seed, device: tuple(torch.ones(shape) for _ in range(4)))
    monkeypatch.setattr(training_sweep, "methods", lambda *a, **k: {"native": lambda: None, "dropin": lambda: None})
    real = bench.time_methods
    monkeypatch.setattr(bench, "time_methods", lambda fns, protocol, baseline=None, timer=None: real(
        fns, protocol.__class__(**{**protocol.__dict__, "graph": False}), baseline, bench.HostTimer()))
    rec = training_sweep.sweep([(4, 8)], rounds=4, device="cpu", compiled=False)
    row = rec["shapes"][0]
    assert row["errors"] == {}
    assert len(row["eager_samples"]["native"]) == training_sweep.EAGER_ROUND_FACTOR * 4
    assert len(row["graph_samples"]["dropin"]) == 4
    assert training_sweep.speed_rows(rec)[0]["eager x torch"] == training_sweep.paired(row, "eager", "native", "dropin")


def _trace(calls):
    """A CudaEventTimer trace: per call (start record end, [(kernel ts, end)], sync end), host events first."""
    ev = []
    for i, (start, kernels, sync_end) in enumerate(calls):
        ev.append({"gpu": True, "name": "flush", "ts": start - 100.0, "end": start - 20.0})  # waited for before
        ev.append({"gpu": False, "name": "cudaEventRecordWithFlags", "ts": start - 2.0, "end": start})
        ev.append({"gpu": False, "name": "entry", "ts": start + 5.0, "end": start + 8.0})
        ev.append({"gpu": False, "name": "launch", "ts": start + 9.0, "end": start + 40.0})
        ev += [{"gpu": True, "name": f"k{j}", "ts": a, "end": b} for j, (a, b) in enumerate(kernels)]
        ev.append({"gpu": False, "name": "cudaEventRecordWithFlags", "ts": kernels[0][0] + 1.0,
                   "end": kernels[0][0] + 2.0})
        ev.append({"gpu": False, "name": "cudaEventSynchronize", "ts": kernels[0][0] + 3.0, "end": sync_end})
    return ev


def test_call_timelines_split_a_trace_into_busy_wait_and_idle():
    ev = _trace([(1000.0, [(1050.0, 1150.0), (1140.0, 1200.0), (1300.0, 1400.0)], 1410.0),
                 (2000.0, [(2010.0, 2100.0)], 2105.0)])
    got = training_timeline.call_timelines(ev, 2)
    first, second = got["timelines"]
    # the overlapping kernels count once; the flush before the start record is not the call's
    host_ops = first.pop("host_before_first")
    assert first == {"kernels": 3, "busy_us": 250.0, "wait_first_us": 50.0, "idle_between_us": 100.0,
                     "span_us": 400.0}
    # the host's events while the GPU waited for the first kernel, longest first
    assert host_ops == [{"name": "launch", "at_us": 9.0, "us": 31.0}, {"name": "entry", "at_us": 5.0, "us": 3.0}]
    assert second["busy_us"] == 90.0 and second["wait_first_us"] == 10.0 and second["idle_between_us"] == 0.0
    assert "expected 6" in training_timeline.call_timelines(ev, 3)["error"]


def _profiled_call(t0: float, gap_us: float, wait_us: float = 50.0) -> list[dict]:
    """One protocol-B call of the drop-in at L1/40 as torch.profiler traces it: the L2 flush kernel and the device
    synchronize before the start event's record, then the forward's memset and two kernels, the backward's memset
    and two kernels `gap_us` after the forward's last one ends, the end record issued while the last kernel still runs
    and the event synchronize returning after it."""
    ev = [{"gpu": False, "name": "cudaLaunchKernel", "ts": t0, "end": t0 + 60},
          {"gpu": True, "name": "void at::native::vectorized_elementwise_kernel<4>", "ts": t0 + 56, "end": t0 + 136},
          {"gpu": False, "name": "cudaDeviceSynchronize", "ts": t0 + 140, "end": t0 + 196},
          {"gpu": False, "name": "cudaEventRecordWithFlags", "ts": t0 + 200, "end": t0 + 207}]
    at = t0 + 207 + wait_us  # the host's entry into the call, the GPU idle
    ev.append({"gpu": False, "name": "aten::empty", "ts": t0 + 210, "end": t0 + 225})
    for i, (name, us) in enumerate((("Memset (Device)", 1), ("chain_stats_tma", 159), ("affine_columns", 136),
                                    ("Memset (Device)", 1), ("grad_chain_sums_s2", 147),
                                    ("grad_columns_streamed", 201))):
        if i == 3:
            at += gap_us  # the host had not launched the backward by the time the forward's kernels ended
        ev.append({"gpu": False, "name": "cuLaunchKernel", "ts": at - 6, "end": at - 1})
        ev.append({"gpu": True, "name": name, "ts": at, "end": at + us})
        at += us
    ev += [{"gpu": False, "name": "cudaEventRecordWithFlags", "ts": at - 40, "end": at - 36},  # before the last ends
           {"gpu": False, "name": "cudaEventSynchronize", "ts": at - 35, "end": at + 5}]
    return ev


def test_call_timelines_on_a_profiled_l1_40_trace():
    """call_timelines on a trace shaped as torch.profiler records three protocol-B calls of the drop-in at L1/40 (the
    shape a dev probe's profile had: docs/decisions.md#rows_coef): the flush before each start record is not the
    call's, a kernel still running at the end record is, and the wait between the forward and the backward counts as
    idle between kernels."""
    ev = _profiled_call(0.0, gap_us=3170.0, wait_us=190.0) + _profiled_call(5000.0, gap_us=104.0, wait_us=108.0) \
        + _profiled_call(7000.0, gap_us=0.0, wait_us=54.0)
    got = training_timeline.call_timelines(ev, 3)
    assert "error" not in got
    t = got["timelines"]
    assert [c["kernels"] for c in t] == [6, 6, 6]  # the flush kernels are not counted
    assert all(c["busy_us"] == 645.0 for c in t)  # 1 + 159 + 136 + 1 + 147 + 201, no overlap
    assert [c["idle_between_us"] for c in t] == [3170.0, 104.0, 0.0]
    assert [c["wait_first_us"] for c in t] == [190.0, 108.0, 54.0]
    assert t[2]["span_us"] == 54.0 + 645.0
    assert t[0]["host_before_first"][0] == {"name": "aten::empty", "at_us": 3.0, "us": 15.0}
    # a trace cut short (one synchronize missing) is refused, not split wrongly
    assert "expected 6 and 3" in training_timeline.call_timelines(ev[:-1], 3)["error"]


def test_the_l1_40_goal_says_where_protocol_b_time_goes():
    timeline = {"shape": [16, 64, 256, 256], "methods": {"dropin": {"event_ms": [0.72, 0.71, 0.73], "timelines": [
        {"kernels": 6, "busy_us": 650.0, "wait_first_us": 55.0, "idle_between_us": 4.0, "span_us": 709.0}] * 3}}}
    text = training_timeline.timeline_text(timeline)
    assert text == ("profiled as the eager rounds time a call (the GPU idle at the start event): kernels busy 0.65 "
                    "of 0.72 ms; host shares, with the profiler's cost in them: "
                    "55 us before the first kernel, 4 us idle between kernels")
    # the L1/40 goal of a run carries it
    run = newest_training_records()
    l1 = next(g for g in study.goals({**run, "training_b_timeline": timeline})
              if g["goal"] == "L1/40 forward + backward")
    assert text in l1["measured"]
    l1_without = next(g for g in study.goals({**run, "training_b_timeline": None})
                      if g["goal"] == "L1/40 forward + backward")
    assert "profiled" not in l1_without["measured"]
    assert training_timeline.timeline_text({**timeline, "shape": [16, 64, 32, 32]}) is None  # not L1/40: not the goal's
    rows = training_timeline.timeline_rows({"methods": {"dropin": {"event_ms": [1.0], "timelines": [], "error": "x"}}})
    assert rows[0]["trace"] == "x" and rows[0]["kernels busy ms"] is None


def newest_training_records() -> dict:
    from labkit.records.session import newest_complete_run

    return newest_complete_run("training")["records"]


def _kb(dropin_blocks, compiled_blocks, native_blocks):
    """A training_kernelbench record whose blocks each hold two trials averaging the given means."""
    def trials(means):
        return [[m - 0.01, m + 0.01] for m in means]
    return {"shape": [16, 64, 256, 256], "blocks": len(dropin_blocks), "num_trials": 2,
            "samples_ms": {"dropin": trials(dropin_blocks), "native_compiled": trials(compiled_blocks),
                           "native": trials(native_blocks)}}


def test_l1_40_goals_under_kernelbench_timing_judge_every_block():
    """One slow block misses the time goal even where the mean of all trials meets it; the ratios are judged on the
    worst block (each block's torch time over the drop-in's in the same block), with the interleaved rounds beside."""
    run = newest_training_records()
    record = _kb([0.65, 0.66, 0.72], [0.90, 0.85, 0.95], [16.7, 16.7, 16.7])
    block = study.training_block({**run, "training_kernelbench": record})
    assert abs(block["l1_40_fwdbwd_ms"] - (0.65 + 0.66 + 0.72) / 3) < 1e-9 and block["l1_40_fwdbwd_ms"] < 0.70
    assert abs(block["l1_40_slowest_block_ms"] - 0.72) < 1e-9
    assert abs(block["l1_40_vs_compiled_worst_block"] - 0.85 / 0.66) < 1e-9
    assert block["l1_40_interleaved_fwdbwd_ms"] == study.training_block({**run, "training_kernelbench": None})[
        "l1_40_fwdbwd_ms"]
    goals = {g["goal"]: g for g in study.goals({**run, "training_kernelbench": record})}
    assert goals["L1/40 forward + backward"]["met"] is False and "slowest block 0.720 ms" in \
        goals["L1/40 forward + backward"]["measured"]
    assert goals["L1/40 vs torch.compile"]["met"] is True  # 1.29x in the worst block
    assert goals["L1/40 vs eager native"]["met"] is True and "interleaved rounds" in \
        goals["L1/40 vs eager native"]["measured"]
    record = _kb([0.65, 0.66, 0.68], [0.70, 0.85, 0.95], [16.7, 16.7, 16.7])
    goals = {g["goal"]: g for g in study.goals({**run, "training_kernelbench": record})}
    assert goals["L1/40 forward + backward"]["met"] is True
    assert goals["L1/40 vs torch.compile"]["met"] is False  # 0.70 / 0.65 in the first block


def test_kernelbench_fwdbwd_refuses_empty_blocks_before_any_work():
    import pytest

    with pytest.raises(ValueError, match="blocks and num_trials"):
        training_kernelbench.kernelbench_fwdbwd(blocks=0)


def test_a_kernelbench_record_at_another_shape_judges_no_l1_40_goal():
    """Quick mode records KernelBench's timing at a small wide shape: the L1/40 goals must not read it."""
    run = newest_training_records()
    quick = {**_kb([0.20, 0.20, 0.20], [0.30, 0.30, 0.30], [0.30, 0.30, 0.30]), "shape": [16, 64, 32, 32]}
    assert training_kernelbench.kernelbench_figures(quick) is None
    block = study.training_block({**run, "training_kernelbench": quick})
    assert "l1_40_slowest_block_ms" not in block
    assert block["l1_40_fwdbwd_ms"] == block["l1_40_interleaved_fwdbwd_ms"]
    l1 = next(g for g in study.goals({**run, "training_kernelbench": quick})
              if g["goal"] == "L1/40 forward + backward")
    assert "KernelBench" not in l1["measured"]


def test_the_l1_40_goal_says_how_the_interleaved_rounds_would_judge():
    run = newest_training_records()
    record = _kb([0.65, 0.66, 0.68], [0.90, 0.85, 0.95], [16.7, 16.7, 16.7])
    t = study.training_block({**run, "training_kernelbench": record})
    l1 = next(g for g in study.goals({**run, "training_kernelbench": record})
              if g["goal"] == "L1/40 forward + backward")
    word = "would meet" if t["l1_40_interleaved_fwdbwd_ms"] <= study.L1_40_FWDBWD_GOAL_MS else "would miss"
    assert "interleaved eager rounds, where the host's entry counts, " in l1["measured"]
    assert f"({word})" in l1["measured"]


def test_the_complete_floor_counts_gamma_dgamma_and_dbeta():
    """At one row the output pass moves twice the issue floor's bytes (x, dy, gamma read; dx, dgamma, dbeta
    written against x, dy read and dx written); at many rows the two floors meet."""
    gbps = 4000.0
    floor = {"ceiling": {"read_plus_write_gbps": gbps}, "shapes": []}
    for rows, n in ((1, 1 << 24), (64, 1 << 16)):
        elems = rows * n
        floor["shapes"].append({"key": f"{rows}x{n}", "rows": rows, "n": n, "schedule": "chain", "chain_ms": 0.05,
                                "sums_bytes_ms": 8 * elems / (gbps * 1e6), "output_bytes_ms": 12 * elems / (gbps * 1e6),
                                "floor_ms": 0.0, "ours": {"median_ms": 1.0}})
        floor["shapes"][-1]["floor_ms"] = max(0.05, floor["shapes"][-1]["sums_bytes_ms"]) + \
            floor["shapes"][-1]["output_bytes_ms"]
    one, many = training_backward.floor_rows(floor)
    sums, output = training_backward.complete_floor_ms(floor["shapes"][0], gbps)
    assert abs(output / floor["shapes"][0]["output_bytes_ms"] - 2.0) < 1e-6
    assert abs(one["complete floor us"] - (max(0.05, sums) + output) * 1e3) < 1e-6
    assert 1.0 < many["floor us"] and many["complete floor us"] / many["floor us"] < 1.02
    assert "complete floor us" not in training_backward.floor_rows({**floor, "ceiling": {}})[0]
