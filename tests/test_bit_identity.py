"""The bit-identity study (labkit.studies.bit_identity) on the CPU: the case matrix, shapes per mode, edge inputs,
the matrix run with torch as its own candidate and a perturbed one, record lines and the edge controls."""
import pytest

from labkit import tasks
from labkit.ops.reference import native_layer_norm
from labkit.studies import bit_identity as matrix

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
    assert line.startswith("record: 8 cases at shape (2, 8, 16) (seeds 0, 1, 2 affines, 2 distributions")
    assert line.endswith("— REPLAYED committed GPU run R")
    assert matrix.record_line(None, "no committed GPU run yet") == "No bit-identity matrix record: no committed GPU run yet."


def test_edge_controls_keep_equal_nan_apart_from_the_official_verdict():
    rec = matrix.edge_controls(device="cpu")
    assert len(rec["cases"]) == len(matrix.EDGE_KINDS) * len(matrix.EDGE_EPS)
    zero_eps0 = next(c for c in rec["cases"] if c["kind"] == "zero" and c["eps"] == 0.0)
    assert zero_eps0["reference_nan_outputs"] > 0
    assert zero_eps0["identical"] and zero_eps0["equal_nan_pass"] and not zero_eps0["official_pass"]
    row = next(r for r in matrix.edge_table(rec) if r["kind"] == "zero" and r["eps"] == 0.0)
    assert row["OFFICIAL allclose (equal_nan=False)"] == "fail"
    assert row["equal-NaN convention (NOT official)"] == "pass"
