"""Post-vs-here rows, the new controls' rows, the summary's post block and the notebooks' verdicts, rendered from
committed runs and checked against the records' own numbers."""
import re

import pytest

from labkit.records import post_compare as pc
from labkit.records.run import committed_runs, load_run
from labkit.studies.catalog import summarize_run
from labkit.studies import bit_identity, post_controls, timing


def _run(name):
    paths = committed_runs(name)
    if not paths:
        pytest.skip(f"no committed {name} run")
    return load_run(paths[-1])


def test_timing_rows_reversals_come_from_the_record():
    run = _run("timing")
    rec, prov = run["records"]["timing"], run["records"]["run"]["provenance"]
    rows = pc.timing_rows(rec, prov)
    by = {r["id"]: r for r in rows}
    r = by["timing.reference_order.3x64x17x19.ratio"]
    case = next(c for c in rec["cases"] if c["key"] == "3x64x17x19/random_normal")
    a = case["timing"]["A"]["ratio_vs_baseline"]["reference_order"]["median"]
    b = case["timing"]["B"]["ratio_vs_baseline"]["reference_order"]["median"]
    assert r["ours"] == a and r["ours/post"] == pytest.approx(a / 0.841216, rel=1e-3)
    assert r["note"].startswith("REVERSAL") and f"{b:.3g}x" in r["note"] and "copy ceiling" in r["note"]
    # a ratio on the post's side of 1 is not called a reversal
    assert not by["timing.reference_order.8x32x128x256.ratio"]["note"].startswith("REVERSAL")
    v = pc.verdict(rows)
    assert f"{pc.block(rows)['compared']}/{len(rows)}" in v
    assert all(rv["shape"] in v for rv in pc.reversals(rows))


def test_reversal_rule_on_a_record_built_here():
    case = {"key": "3x64x17x19/random_normal", "bytes": 1000, "methods": {},
            "timing": {"A": {"ratio_vs_baseline": {"m": {"median": 1.5}}},
                       "B": {"ratio_vs_baseline": {"m": {"median": 0.3}}}},
            "bandwidth": {"A": {"m": {"median_gbps": 10.0, "fraction_of_copy_ceiling": 0.01}}}}
    note = pc.explain(case, "m", 0.84, l2_bytes=4096)
    assert note.startswith("REVERSAL") and "flips with the protocol" in note and "L2" in note
    assert not pc.explain(case, "m", 1.2).startswith("REVERSAL")
    assert pc.explain(None, "m", 1.2) == pc.NOT_IN_RUN


def test_missing_records_are_not_compared():
    rows = pc.timing_rows(None) + pc.fast_stats_rows(None) + pc.bit_identity_rows(None, None, None)
    assert rows and all(r["ours"] is None and r["ours/post"] is None for r in rows)
    assert pc.block(rows) == {"figures": len(rows), "compared": 0, "ids": []}


def test_fast_stats_rows_match_the_record():
    run = _run("fast_stats_counterexamples")
    rec = run["records"]["fast_stats"]
    rows = {r["id"]: r for r in pc.fast_stats_rows(rec)}
    ex = next(c for c in rec["cases"] if c["method"] == "interleaved" and c["category"] == "offset"
              and c["seed"] == 0 and c["affine"] == "default")
    assert rows["fast_stats.offset.failing_elements"]["ours"] == ex["output"]["bad_finite_candidate_scale"]
    assert rows["fast_stats.offset.budget_ratio"]["ours"] == ex["output"]["max_ratio_candidate_scale"]


def test_summary_post_block():
    for name in ("bit_identity", "fast_stats_counterexamples", "timing", "parallel_stats"):
        paths = committed_runs(name)
        assert paths, f"no committed {name!r} run: the post comparison has nothing to read"
        block = summarize_run(paths[-1])["post"]
        assert 0 < block["compared"] <= block["figures"]
    env = committed_runs("environment")
    assert env, "no committed environment run"
    assert "post" not in summarize_run(env[-1])


def test_bit_identity_verdict_from_the_committed_run():
    run = _run("bit_identity")
    rec = run["records"]["bit_identity"]
    prov = run["records"]["run"]["provenance"]
    v = bit_identity.verdict(rec, prov, "src")
    n = len(rec["cases"])
    ok = sum(c["identical"] for c in rec["cases"])
    assert f"{ok}/{n} cases bit-identical" in v and str(tuple(rec["cases"][0]["shape"])) in v
    assert prov["torch"] in v and prov["gpu"] in v
    # the graph table labels its rows with the record's shape
    g = run["records"]["graph_replay"]
    assert {r["shape"] for r in bit_identity.graph_table(g)} == {"x".join(map(str, g["shape"]))}


def test_timing_verdict_from_the_committed_run():
    run = _run("timing")
    rec, prov = run["records"]["timing"], run["records"]["run"]["provenance"]
    v = timing.verdict(rec, prov, "src")
    for case in rec["cases"]:
        native = case["timing"]["A"]["stats"]["native"]["median_ms"]
        assert f"{case['key']} (protocol A): native {native:.4g} ms" in v
    # the (3, 64, 17, 19) sentence follows the record: slower methods named only if q75 < 1
    case = next(c for c in rec["cases"] if c["key"].startswith("3x64x17x19"))
    slower_a = [n for n, r in case["timing"]["A"]["ratio_vs_baseline"].items() if n != "native" and r["q75"] < 1]
    line = next(ln for ln in v.splitlines() if ln.startswith("At (3, 64, 17, 19)") and "protocol A" in ln)
    assert ("no method slower" in line) == (not slower_a)
    assert all(re.search(rf"\b{m}\b", line) for m in slower_a)


def test_control_rows_say_not_in_run():
    for rows in (post_controls.specials_rows(None, "SRC"), post_controls.graph_mutation_rows(None, "SRC"),
                 post_controls.profiled_rows(None, "SRC", "ts")):
        assert len(rows) == 1 and "not in this run (SRC)" in rows[0]["status"]
    assert post_controls.counts(None) is None


def test_specials_on_cpu_official_and_bits():
    rec = post_controls.fast_stats_specials("cpu", methods=("eager",))
    rows = {r["input"]: r for r in post_controls.specials_rows(rec, "cpu")}
    assert rows["zero"]["OFFICIAL allclose"] == "pass" and rows["zero"]["bits equal"] == 1.0
    # NaN never equals NaN under the official predicate, whatever the bits
    assert rows["nan_inf_mix"]["OFFICIAL allclose"] == "FAIL" and rows["nan_inf_mix"]["bad NaN/inf"] > 0
    with pytest.raises(ValueError, match="special kind"):
        post_controls.special_input("inf")


def test_profiled_rows_on_cpu():
    rec = post_controls.noaffine_controls((2, 4, 8), "cpu")
    rows = post_controls.profiled_rows(rec, "cpu", "noaffine")
    assert len(rows) == len(post_controls.NOAFFINE_DISTRIBUTIONS) * len(post_controls.NOAFFINE_METHODS)
    assert all(r["first_call: official"] == "pass" for r in rows)
    c = post_controls.counts(rec, "after_profiling")
    assert c["cases"] == len(rows) and c["official_pass"] == len(rows)


def test_front_page_post_summary():
    from types import SimpleNamespace as NS

    from labkit import site

    run = _run("timing")
    block = summarize_run(committed_runs("timing")[-1])["post"]
    res = [NS(html="/x/03_timing.html"), NS(html=None)]
    infos = [NS(title="03 — timing", run=NS(path=run["path"])), None]
    text = site.post_summary_html(res, infos)
    assert f"{block['compared']} of its {block['figures']} post figures" in text and "03_timing.html#" in text
    assert f"{len(block['ids'])} distinct figures of the" in text
    assert site.post_summary_html(res[1:], infos[1:]) == ""


def test_fast_stats_verdict_from_the_committed_run():
    from labkit.studies import fast_stats

    run = _run("fast_stats_counterexamples")
    rec = run["records"]["fast_stats"]
    v = fast_stats.headline(rec, "src")
    ran = [c for c in rec["cases"] if c.get("output")]

    def count(category, passing):
        cs = [c for c in ran if c["category"] == category]
        return sum(bool(c["output"]["official_pass"]) == passing for c in cs), len(cs)

    assert "passing the official check: {}/{}".format(*count("ordinary", True)) in v
    assert "offset (+1000) cases failing it: {}/{}".format(*count("offset", False)) in v
    assert "constant-control failing: {}/{}".format(*count("constant_control", False)) in v
    assert f"{len(rec['cases']) - len(ran)} combinations could not run" in v


def test_parallel_stats_verdict_from_the_committed_run():
    from labkit.records.check import identical_count
    from labkit.studies import parallel_stats

    run = _run("parallel_stats")
    recs, prov = run["records"], run["records"]["run"]["provenance"]
    lines = parallel_stats.verdict_lines(recs["timing"], recs["stage_breakdown"], prov, "src", recs["bit_identity"])
    assert lines[0] == (f"src: {prov['gpu']} with torch {prov['torch']}; clocks left alone; every time and ratio below "
                        "is graph replay (protocol A).")
    for case in recs["timing"]["cases"]:
        a = case["timing"]["A"]
        line = next(ln for ln in lines if ln.startswith(f"{case['key']}: "))
        assert f"chain {a['stats']['chain']['median_ms']:#.3g} ms" in line
        assert f"{a['ratio_vs_baseline']['chain']['median']:.3g}x native" in line
        ind = a["stats"]["inductor"]["median_ms"] / a["stats"]["chain"]["median_ms"]
        assert f"{ind:.2f}x Inductor's speed" in line
    ok, n = identical_count(recs["bit_identity"]["cases"])
    assert f"bit identity: {ok}/{n} cases identical" in lines[-2]


def test_predicate_and_source_post_rows(tmp_path):
    from labkit.records import audit, check
    from labkit.studies import protocol_correction, source_reading

    report = audit.audit_runs()
    rows = {r["id"]: r for r in protocol_correction.post_rows(report)}
    assert rows["protocol.atol"]["ours"] == check.ATOL and rows["protocol.atol"]["ours/post"] == 1.0
    assert rows["protocol.audit.error_ratios"]["ours"] == report.summary()["records"]
    tc = {"num_threads": 128, "torch": "x"}
    (row,) = source_reading.post_rows(tc)
    assert row["ours"] == 128 and row["ours/post"] == 1.0
    assert source_reading.post_rows({"num_threads": None})[0]["ours/post"] is None
