"""The bit-identity matrix pieces and the fast-statistics record on the GPU, at small shapes.
Skipped without a CUDA device; run on the H200 with `python -m pytest -m gpu`."""
import pytest

from labkit.studies import fast_stats as ce

from labkit.records import fixtures

from labkit.studies import bit_identity as matrix

from labkit.exact import oracle

from labkit.studies import fast_stats as summary

pytestmark = pytest.mark.gpu
SMALL = (2, 64, 32, 32)


def test_matrix_small_shape_all_identical():
    rec = matrix.run_matrix(SMALL, [0], device="cuda")
    assert len(rec["cases"]) == 10
    bad = [c["name"] for c in rec["cases"] if not c["identical"]]
    assert not bad, bad


def test_graph_replay_small_shape_identical_and_mutation_reaches_the_graph():
    rec = matrix.graph_replay(SMALL, seed=2)
    assert rec["before_mutation"]["identical"] and rec["after_mutation"]["identical"]
    assert rec["output_elements_changed_by_mutation"] > 0


def test_uneven_width_identical_including_offset_controls():
    rec = matrix.uneven_width([0], "cuda")
    assert rec["n"] == 20672 and len(rec["cases"]) == 10
    bad = [c["name"] for c in rec["cases"] if not c["identical"]]
    assert not bad, bad


def test_edge_controls_bits_and_conventions():
    rec = matrix.edge_controls("cuda")
    finite = [c for c in rec["cases"] if c["kind"] != "nonfinite"]
    bad = [(c["kind"], c["eps"]) for c in finite if not c["identical"]]
    assert not bad, bad
    for c in rec["cases"]:
        if c["reference_nan_outputs"]:
            assert not c["official_pass"]  # NaN never passes the official predicate, whatever the bits


def test_fast_stats_record_and_block_on_gpu():
    rec = ce.run_fast_stats(SMALL, [0], ce.METHODS, "cuda")
    assert {c["method"] for c in rec["cases"]} == set(ce.METHODS)
    for c in rec["cases"]:
        if c["method"] != "torchscript":
            assert c["output"] is not None, c["error"]
    uniform = [c for c in rec["cases"] if c["distribution"] == "uniform" and c["output"]]
    assert all(c["output"]["official_pass"] for c in uniform)
    blk = summary.fast_stats_block({"fast_stats": rec})
    assert blk["ordinary_cases"] + blk["per_method"].get("torchscript", {}).get("errors", 0) >= 3 * 6


def test_oracle_on_gpu_data_constant_control():
    rec = ce.run_oracle(SMALL, ["constant_1e4"], 0, device="cuda")
    case = rec["cases"][0]
    assert case["truth"]["var"] == [0.0, 0.0, 0.0]
    assert set(case["candidates"]) == {"native (GPU)", "fast stats eager (GPU)", "fast stats interleaved kernel (GPU)"}


def test_record_fixtures_small(tmp_path):
    paths = fixtures.record_fixtures(tmp_path, specs=fixtures.FIXTURE_SPECS[:2])
    fix = fixtures.load_fixtures(tmp_path)
    assert len(paths) == 2 and all(fixtures.is_gpu_fixture(f) for f in fix)
    assert all(bool(f["reference_order_identical"]) for f in fix)
    exact = oracle.exact_stats(fix[0]["x"])
    assert len(exact) == fix[0]["x"].shape[0]
