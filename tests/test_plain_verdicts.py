"""The pages' short verdicts and their where-others-win sentences: a few sentences, every number from the committed
runs' records, every ratio with its protocol named."""
import re

import pytest

from labkit.records.session import RunSession
from labkit.studies import dropin, dropin_sweep, fast_stats, layout_boundary, parallel_stats, timing, training, training_sweep
from labkit.studies.bench import PROTOCOL_NAMES


def _sentences(lines: list[str]) -> int:
    return len(lines)


def _replay(name):
    s = RunSession.replaying(name)
    if not s.replay:
        pytest.skip(f"no committed {name} run")
    return s


def _plain(name):
    s = _replay(name)
    if name == "fast_stats_counterexamples":
        return fast_stats.plain_verdict(s.record("fast_stats"), s.record("oracle")), s
    if name == "timing":
        return timing.plain_verdict(s.record("timing")), s
    if name == "parallel_stats":
        return parallel_stats.plain_verdict(s.record("timing"), s.record("bit_identity")), s
    if name == "dropin":
        return dropin.plain_verdict(dropin.collect(s)), s
    if name == "layout_boundary":
        return layout_boundary.plain_verdict(s.record("timing"), s.record("correctness")), s
    return training.plain_verdict(training.collect(s)), s


@pytest.mark.parametrize("name", ["fast_stats_counterexamples", "timing", "parallel_stats", "training", "dropin",
                                  "layout_boundary"])
def test_plain_verdict_is_three_to_five_sentences_with_protocols(name):
    lines, _ = _plain(name)
    assert 3 <= _sentences(lines) <= 5, lines
    for line in lines:
        assert line.endswith("."), line
        if re.search(r"\d\.?\d*x\b", line) and name != "fast_stats_counterexamples":
            assert any(p in line for p in PROTOCOL_NAMES.values()) or "same protocol" in line, line


def test_fast_stats_plain_verdict_reads_the_counts():
    lines, s = _plain("fast_stats_counterexamples")
    blk = fast_stats.fast_stats_block({"fast_stats": s.record("fast_stats")})
    assert f"{blk['ordinary_pass']} of {blk['ordinary_cases']} ordinary" in lines[0]
    assert f"{blk['offset_fail']} of {blk['offset_cases']} cases offset" in lines[0]


def test_timing_plain_verdict_reads_the_l1_40_ratio():
    lines, s = _plain("timing")
    case = timing.l1_40_case(s.record("timing"))
    r = case["timing"]["A"]["ratio_vs_baseline"]["chain"]["median"]
    assert f"{r:.1f}x faster" in lines[0] and PROTOCOL_NAMES["A"] in lines[0]


def test_parallel_stats_plain_verdict_reads_goals_and_bits():
    lines, s = _plain("parallel_stats")
    n_ok, n = parallel_stats.identical_count(s.record("bit_identity")["cases"])
    assert f"identical in {n_ok} of {n} cases" in lines[0]
    count = parallel_stats.tally(parallel_stats.goals({"timing": s.record("timing")}))
    assert f"meets {count['met']} of its {count['judged']} goals" in lines[-1]


def test_training_plain_verdict_reads_the_goals():
    lines, s = _plain("training")
    from labkit.studies.goals import tally

    count = tally(training.goals(training.collect(s)))
    assert f"{count['met']} of its {count['judged']} training goals" in lines[0]


def test_layout_others_win_names_torch_compile_from_the_record():
    tim = _replay("layout_boundary").record("timing")
    text = layout_boundary.others_win(tim)
    rms = next(f for f in tim["families"] if f["family"] == "rms")
    for p in ("A", "B"):
        st = rms["timing"][p]["stats"]
        assert f"rms {st['compile']['median_ms']:.3g} ms" in text
        assert PROTOCOL_NAMES[p] in text


def test_dropin_others_win_counts_the_compiled_shapes_below_one():
    sweep = _replay("dropin").record("dropin_sweep")
    rows = [r for r in dropin_sweep.speed_rows(sweep) if r["compiled x (vs compiled nn.LayerNorm)"] is not None]
    below = sum(r["compiled x (vs compiled nn.LayerNorm)"] < 1 for r in rows)
    text = dropin_sweep.others_win(sweep)
    assert f"at {below} of {len(rows)} shapes" in text and PROTOCOL_NAMES["B"] in text


def test_training_others_win_says_compiled_dropin_time_and_why():
    sweep = _replay("training").record("training_sweep")
    text = training_sweep.others_win(sweep)
    row = next(r for r in training_sweep.speed_rows(sweep) if r["shape"] == "16x64x256x256")
    assert f"{row['compiled drop-in eager us'] / row['drop-in eager us']:.2f}x the uncompiled" in text
    assert "host time" in text and "same kernels" in text and PROTOCOL_NAMES["B"] in text


def test_training_plain_verdict_says_l1_40_and_each_missed_goal_plainly():
    lines, s = _plain("training")
    from labkit.records.text import ratio

    t = training.training_block(training.collect(s))
    assert (f"takes {t['l1_40_slowest_block_ms']:.3g} ms timed as KernelBench does, {PROTOCOL_NAMES['B']}: "
            f"{ratio(t['l1_40_vs_compiled_worst_block'])} faster than torch.compile") in lines[1]
    missed = [g for g in training.goals(training.collect(s)) if g["met"] is False]
    assert f"It misses {len(missed)} of the" in lines[2]
    text = " ".join(lines)
    # the worst shape against torch eager is said, first of the misses, where its goal is missed (and only there)
    worst_missed = any(g["goal"].startswith("worst x native") for g in missed)
    assert (f"At {t['fwdbwd_worst_shape']} forward plus backward runs at {ratio(t['fwdbwd_worst_ratio_vs_native'])} "
            f"torch eager's speed under {PROTOCOL_NAMES['B']}" in text) == worst_missed
    assert "Missed:" not in text and "worst block" not in text and "; all trials" not in text  # no fragments
    for line in lines:
        assert len(line) < 330, line


def test_dropin_plain_verdict_reads_bits_goals_and_ratios():
    from labkit.records.text import ratio
    from labkit.studies.dropin_peers import peers_worst
    from labkit.studies.goals import tally

    lines, s = _plain("dropin")
    records = dropin.collect(s)
    b = dropin.dropin_block(records)
    count = tally(dropin.goals(records))
    assert f"forward {b['forward_identical']}, backward {b['backward_identical']}" in lines[0]
    assert f"meets {count['met']} of its {count['judged']} goals" in lines[0]
    assert f"L1/40 runs {ratio(b['l1_40_eager_ratio'])} faster than torch eager under {PROTOCOL_NAMES['B']}" in lines[1]
    text = " ".join(lines)
    pw = peers_worst(records["dropin_peers"])
    if pw["vs_peer"] < dropin.PEER_GOAL:
        assert f"{pw['vs_peer']:.3g}x the speed of the faster of torch.compile and Liger under " \
               f"{PROTOCOL_NAMES['A']}" in text
    r, at = dropin.floor_worst(records["dropin_floor"], "eager")
    if r > 1 + dropin.FLOOR_SLACK:
        assert f"At {at} it takes {ratio(r)} the time its bytes need (its floor) under {PROTOCOL_NAMES['B']}" in text


def test_layout_plain_verdict_answers_first_and_reads_the_records():
    from labkit.records.text import ratio

    lines, s = _plain("layout_boundary")
    tim, cor = s.record("timing"), s.record("correctness")
    assert lines[0].startswith("Of our three routes") and PROTOCOL_NAMES["A"] in lines[0]
    direct = [r for r in layout_boundary.correctness_rows(cor) if r["kernel"] == "direct_nchw"]
    assert (f"bits in {sum(r['bit-identical'] for r in direct)} of {sum(r['cases'] for r in direct)} ordinary "
            "cases") in lines[1]
    text = " ".join(lines)
    for fam in tim["families"]:
        for p in ("A", "B"):
            r = fam["timing"][p]["ratio_vs_baseline"]["direct_nchw"]["median"]
            assert f"{ratio(r)} ({fam['family']})" in text
    assert PROTOCOL_NAMES["B"] in text and "eager torch's speed (paired median" in text
