"""The bit-identity matrix and fast-statistics plumbing on the CPU, the summary block, and both notebooks in CPU
mode: without a committed run (they must say so and finish) and replaying a synthetic committed run."""
import json

import nbformat
import pytest

from labkit import book, tasks

from labkit.records import check

from labkit.studies import fast_stats as ce

from labkit.studies import bit_identity as matrix
from labkit.records import session

from labkit.records import run as results

from labkit.records import summary
from labkit.ops.reference import native_layer_norm
from labkit.ops.split_stats import scripted_pointwise

TINY = (2, 8, 16)


def test_matrix_has_30_named_cases_in_input_order():
    cases = matrix.matrix_cases([0, 1, 2])
    assert len(cases) == 30 and len({c["name"] for c in cases}) == 30
    assert cases[0] == {"name": "s0-uniform-default", "seed": 0, "affine": "default", "distribution": "uniform"}
    assert cases[1]["name"] == "s0-uniform-random_normal"  # one input serves both affines
    assert {c["distribution"] for c in cases} == {"uniform", "normal", "normal_x100", "normal_plus_1000",
                                                  "constant_1e4"}
    with pytest.raises(ValueError):
        matrix.matrix_cases([0], distributions=["cauchy"])
    with pytest.raises(ValueError):
        matrix.matrix_cases([0], affines=["zeros"])


def test_shape_for_modes():
    assert matrix.shape_for("full") == tasks.L1_40 == (16, 64, 256, 256)
    assert matrix.shape_for("quick") == tasks.config("quick").matrix_shape
    assert matrix.shape_for("quick", [3, 64, 17, 19]) == (3, 64, 17, 19)
    with pytest.raises(ValueError):
        matrix.shape_for("huge")


def test_edge_inputs():
    import torch

    sub = matrix.edge_input("subnormal")
    nz = sub[sub != 0].abs()
    assert (nz < torch.finfo(torch.float32).tiny).all() and nz.numel() > 0
    x = matrix.edge_input("nonfinite").reshape(4, -1)
    assert torch.isnan(x[0]).sum() == 1 and torch.isinf(x[1]).sum() == 1 and torch.isinf(x[2]).sum() == 2
    assert torch.isfinite(x[3]).all()
    assert (matrix.edge_input("zero") == 0).all()
    with pytest.raises(ValueError):
        matrix.edge_input("huge")


def test_run_matrix_plumbing_on_cpu_and_a_perturbed_candidate_is_named():
    lines = []
    rec = matrix.run_matrix(TINY, [0], device="cpu", log=lines.append)
    assert len(rec["cases"]) == 10 and all(c["identical"] for c in rec["cases"])
    assert lines[0] == "s0-uniform-default: identical" and len(lines) == 10
    c = rec["cases"][0]
    assert {"seed", "affine", "distribution", "shape", "output", "mean", "rstd", "identical"} <= set(c)

    def perturbed(x, w, b, eps):
        y, m, r = native_layer_norm(x, w, b, eps)
        return y.nextafter(y + 1), m, r

    bad = matrix.run_matrix(TINY, [0], distributions=["normal"], device="cpu", candidate=perturbed)
    assert not any(c["identical"] for c in bad["cases"])
    line = matrix.verdict(bad, {"torch": "T", "gpu": "G"}, "test")
    assert line.startswith("0/2 cases") and "NOT identical: s0-normal-default, s0-normal-random_normal" in line


def test_record_line_describes_the_record_not_the_parameters():
    # A replayed run keeps its own shape: the line must say what the record holds.
    rec = matrix.run_matrix(TINY, [0, 1], distributions=["normal", "uniform"], device="cpu")
    line = matrix.record_line(rec, "REPLAYED committed GPU run R")
    assert line.startswith("record: 8 cases at shape (2, 8, 16) (seeds [0, 1], 2 affines, 2 distributions")
    assert line.endswith("— REPLAYED committed GPU run R")
    assert matrix.record_line(None, "no committed GPU run yet") == "No bit-identity matrix record: no committed GPU run yet."


def test_edge_controls_keep_equal_nan_apart_from_the_official_verdict():
    rec = matrix.edge_controls(device="cpu")
    assert len(rec["cases"]) == len(matrix.EDGE_KINDS) * len(matrix.EDGE_EPS)
    assert "NOT the official predicate" in rec["convention"]
    zero_eps0 = next(c for c in rec["cases"] if c["kind"] == "zero" and c["eps"] == 0.0)
    assert zero_eps0["reference_nan_outputs"] > 0
    assert zero_eps0["identical"] and zero_eps0["equal_nan_pass"] and not zero_eps0["official_pass"]
    row = next(r for r in matrix.edge_table(rec) if r["kind"] == "zero" and r["eps"] == 0.0)
    assert row["OFFICIAL allclose (equal_nan=False)"] == "fail"
    assert row["equal-NaN convention (NOT official)"] == "pass"


def test_fast_stats_case_enumeration():
    cases = ce.fast_stats_cases([0, 1, 2])
    cats = [c["category"] for c in cases]
    assert cats.count("ordinary") == 18 and cats.count("offset") == 6 and cats.count("constant_control") == 3
    assert {c["distribution"] for c in cases if c["category"] == "ordinary"} == {"uniform", "normal", "normal_x100"}
    assert all(c["shape"] == [3, 64, 17, 19] and c["affine"] == "random_normal"
               for c in cases if c["category"] == "constant_control")


def test_run_fast_stats_on_cpu_records_every_method_including_errors():
    lines = []
    rec = ce.run_fast_stats(TINY, [0], ("eager", "torchscript", "flat"), "cpu", log=lines.append)
    n_cases = len(ce.fast_stats_cases([0]))
    assert len(rec["cases"]) == 3 * n_cases
    flat = [c for c in rec["cases"] if c["method"] == "flat"]
    assert all(c["output"] is None and "CUDA" in c["error"] for c in flat)  # the kernel needs a GPU: kept, not dropped
    eager = [c for c in rec["cases"] if c["method"] == "eager"]
    assert all(c["output"]["official_pass"] is not None for c in eager)
    assert rec["torchscript"]["available"] is scripted_pointwise().available  # as on this machine, not a guess
    ts = [c for c in rec["cases"] if c["method"] == "torchscript"]
    assert all((c["output"] is not None) == scripted_pointwise().available for c in ts)
    assert len(lines) == len(rec["cases"]) and "flat" in lines[2]
    rows = ce.method_summary(rec)
    assert any(r["method"] == "flat" and r["errors"] == r["cases"] for r in rows)


def _synthetic_fast_stats():
    def case(cat, method, ok, dist="uniform"):
        out = None if ok is None else {"official_pass": ok, "bad_finite_candidate_scale": 0 if ok else 5,
                                       "bad_special": 0, "elements": 100, "max_ratio_candidate_scale": 0.5 if ok else 3}
        return {"category": cat, "method": method, "distribution": dist, "seed": 0, "affine": "default",
                "output": out, "error": None if out else "RuntimeError: no"}
    return {"cases": [case("ordinary", "eager", True), case("ordinary", "eager", False), case("ordinary", "flat", True),
                      case("offset", "eager", False, "normal_plus_1000"), case("offset", "flat", True, "normal_plus_1000"),
                      case("constant_control", "eager", False, "constant_1e4"),
                      case("ordinary", "torchscript", None), case("offset", "torchscript", None)]}


def test_fast_stats_block_counts_method_case_combinations():
    blk = summary.fast_stats_block({"fast_stats": _synthetic_fast_stats()})
    assert {k: blk[k] for k in ("ordinary_pass", "ordinary_cases", "offset_fail", "offset_cases")} == \
        {"ordinary_pass": 2, "ordinary_cases": 3, "offset_fail": 1, "offset_cases": 2}
    assert blk["constant_control_fail"] == 1 and blk["errors"] == 2
    assert blk["per_method"]["eager"]["ordinary_pass"] == 1 and blk["per_method"]["torchscript"]["errors"] == 2
    assert summary.fast_stats_block({}) is None


def test_fast_stats_record_line_and_headline_read_the_record():
    rec = {**_synthetic_fast_stats(), "shape": [2, 8, 16], "methods": ["eager", "flat", "torchscript"]}
    line = ce.record_line(rec, "src")
    assert line.startswith("record: 8 (case x method) entries at shape (2, 8, 16)")
    assert "ordinary 4, offset 3, constant_control 1" in line and line.endswith("— src")
    assert ce.headline(rec, "src").startswith("Ordinary cases passing the official check: 2/3; offset (+1000) "
                                              "cases failing it: 1/2; constant-control failing: 1/1")
    assert ce.record_line(None, "none") == "No fast-statistics record: none."


def test_summary_of_a_run_with_both_blocks(tmp_path):
    run = results.Run.create(tmp_path, "fast_stats_counterexamples", device="cpu")
    run.write("fast_stats", _synthetic_fast_stats())
    run.write("bit_identity", matrix.run_matrix(TINY, [0], device="cpu"))
    run.close()
    s = summary.summarize_run(run.path)
    assert s["fast_stats"]["offset_fail"] == 1 and s["bit_identity"]["identical"] == 10


def test_figure_from_a_record():
    fig = ce.figure(_synthetic_fast_stats(), "test")
    assert fig is not None and len(fig.axes) == 2
    assert ce.figure(None) is None


def test_run_session_replays_the_newest_complete_run(tmp_path):
    old = results.Run.create(tmp_path, "bit_identity", device="cpu")
    old.write("bit_identity", {"cases": []})
    old.close()
    results.Run.create(tmp_path, "bit_identity", device="cpu")  # newer but never closed: not complete
    s = session.RunSession.open("bit_identity", "cpu", tmp_path / "out", runs_root=tmp_path)
    assert not s.live and s.run_id == old.run_id and s.source == f"REPLAYED committed GPU run {old.run_id}"
    assert s.record("bit_identity", lambda: 1 / 0) == {"cases": []}  # never computes on replay
    assert s.record("graph_replay") is None
    assert "REPLAYED" in s.banner()
    none = session.RunSession.open("fast_stats_counterexamples", "cpu", tmp_path / "out", runs_root=tmp_path)
    assert none.replay is None and "no committed GPU run yet" in none.banner()
    assert not (tmp_path / "out").exists()


def _outputs_text(path) -> str:
    nb = nbformat.read(path, as_version=4)
    return json.dumps([c.get("outputs", []) for c in nb.cells])


def _synthetic_committed_runs(root):
    """Runs in the format the GPU writes, made on the CPU with torch as its own candidate (format only)."""
    a = results.Run.create(root, "bit_identity", device="cpu")
    a.write("bit_identity", matrix.run_matrix(TINY, [0], device="cpu"))
    x, w, b = matrix.edge_input("tiny"), *matrix.make_affine("random_normal", (8, 16), 0)
    same = {k: check.compare(t, t).to_json() for k, t in zip(("output", "mean", "rstd"), native_layer_norm(x, w, b, 1e-5))}
    a.write("graph_replay", {"mutation": matrix.MUTATION, "before_mutation": {**same, "identical": True},
                             "after_mutation": {**same, "identical": True}, "output_elements_changed_by_mutation": 7,
                             "identical": True})
    a.write("uneven_width", matrix.uneven_width([0], "cpu"))
    a.write("edge_controls", matrix.edge_controls("cpu"))
    a.close()
    f = results.Run.create(root, "fast_stats_counterexamples", device="cpu")
    f.write("fast_stats", ce.run_fast_stats(TINY, [0], ce.CPU_METHODS, "cpu"))
    f.write("oracle", ce.run_oracle(TINY, ["constant_1e4", "normal_plus_1000"], 0, device="cpu"))
    f.close()
    return a.run_id, f.run_id
