"""The post's controls on the GPU (run once, blind, on the H200: a few seconds). Small shapes only; the notebooks
record the full-shape versions."""
import pytest

from labkit.studies import post_controls
from labkit.tasks import UNEVEN_SHAPE


@pytest.mark.gpu
def test_fast_stats_specials_gpu():
    rec = post_controls.fast_stats_specials("cuda")
    rows = post_controls.specials_rows(rec, "live")
    assert all(r["error"] == "" for r in rows), rows
    zero = [r for r in rows if r["input"] == "zero"]
    assert zero and all(r["OFFICIAL allclose"] == "pass" for r in zero)
    assert all(r["OFFICIAL allclose"] == "FAIL" for r in rows if r["input"] == "nan_inf_mix")


@pytest.mark.gpu
def test_graph_mutations_gpu():
    fs = post_controls.fast_stats_graph_mutation(shapes=((4096, 1, 1, 1024), UNEVEN_SHAPE))
    assert all(c["error"] is None and c["changed"] > 0 and c["output"]["official_pass"] for c in fs["cases"]), fs
    ro = post_controls.graph_replay_affines(UNEVEN_SHAPE)
    assert [c["affine"] for c in ro["cases"]] == ["default", "random_normal"]
    assert all(c["identical"] and c["output_elements_changed_by_mutation"] > 0 for c in ro["cases"])


@pytest.mark.gpu
def test_torchscript_and_noaffine_gpu():
    ts = post_controls.torchscript_profiled(shapes=(UNEVEN_SHAPE,), device="cuda")
    by = {c["method"]: c for c in ts["cases"]}
    if by["native_torchscript"]["error"] is None:
        assert by["native_torchscript"]["after_profiling"]["bit_equal_fraction"] == 1.0
    na = post_controls.noaffine_controls(UNEVEN_SHAPE, "cuda")
    assert len(na["cases"]) == 8
    assert all(c.get("first_call") is None or c["first_call"]["official_pass"] for c in na["cases"]
               if c["distribution"] != "constant_1e4")
