"""CPU tests of the layout-boundary pieces: validation, NVRTC builds, references vs the task formulas, torch's
reduction plan, the tree emulator, and the study's rows/verdict on records built here."""
import numpy as np
import pytest
import torch

from bits import assert_bits_equal

from labkit import tasks
from labkit.lab import channel_norm as cn
from labkit.studies.layout_boundary import layout_block
from labkit.studies import layout_boundary as lb


@pytest.mark.parametrize("x, family, eps, match", [
    (torch.rand(2, 8, 4, 4), "rmsx", 1e-5, "family must be one of"),
    ([1.0], "rms", 1e-5, "x must be a torch.Tensor"),
    (torch.rand(2, 8, 4, 4, dtype=torch.float64), "rms", 1e-5, "x must be float32"),
    (torch.rand(2, 4, 4, 8).permute(0, 3, 1, 2), "rms", 1e-5, "x must be contiguous"),
    (torch.rand(0, 8, 4, 4), "l2", 0.0, "x must not be empty"),
    (torch.rand(2, 8, 4, 4), "rms", float("nan"), "eps must be a finite float >= 0"),
    (torch.rand(2, 8, 4, 4), "rms", -1.0, r"eps must be a finite float >= 0 \(got -1.0\)"),
    (torch.rand(2, 8), "rms", 1e-5, "at least one spatial dim"),
    (torch.rand(2, 1, 4, 4), "rms", 1e-5, r"C \(dim 1\) must be >= 2 \(got 1\)"),
    (torch.rand(2, 8, 1, 1), "rms", 1e-5, r"inner \(H\*W\) must be >= 2"),
    (torch.rand(2, 8, 4, 4), "mean_abs", 0.0, "x must be a CUDA tensor"),
])
def test_direct_validation_names_condition_and_value(x, family, eps, match):
    with pytest.raises(ValueError, match=match):
        cn.direct_nchw(family, x, eps)


def test_validation_refuses_grad_and_splits_outside_the_instantiated_kernels():
    x = torch.rand(2, 8, 4, 4, requires_grad=True)
    with pytest.raises(ValueError, match="requires_grad=True"):
        cn.direct_nchw("rms", x)
    # two outputs: torch gives all 256 threads of a block to one output's channels -> no kernel for that tree
    with pytest.raises(ValueError, match=r"warp split must be one of .* \(got 256\)"):
        cn.nchw_layout(torch.rand(1, 256, 2, 1))
    with pytest.raises(ValueError, match="x must be a CUDA tensor"):
        cn.conversion("rms", torch.rand(2, 8, 4, 4))
    with pytest.raises(ValueError, match="at least two dims"):
        cn.rows("rms", torch.rand(8))


def test_reduction_plan_follows_setreduceconfig():
    # vec 4: 128 threads, 32 x 4; 64 channels >= 4*16 -> 4 warps share an output; 32 channels do not
    assert cn.reduction_plan(64, 4, 512 * 512)["split"] == 4
    assert cn.reduction_plan(32, 4, 512 * 512)["split"] == 1
    assert cn.reduction_plan(128, 112, 512 * 512) == {"output_vec": 4, "block": [32, 4], "split": 4,
                                                       "values_per_thread": 32, "global_split_possible": False}
    # odd H*W: vec 1, 512 threads as 32 x 16; 64 < min(16*16, 256) -> one thread per output
    p = cn.reduction_plan(64, 3, 17 * 19)
    assert (p["output_vec"], p["block"], p["split"]) == (1, [32, 16], 1)
    assert cn.reduction_plan(256, 3, 17 * 19)["split"] == 16
    assert cn.reduction_plan(64, 4, 2 * 3)["output_vec"] == 2
    assert cn.reduction_plan(1 << 15, 1, 8)["global_split_possible"]
    assert not cn.reduction_plan(4096, 1, 8)["global_split_possible"]


def test_tree_sum_split1_folds_four_accumulators():
    # one thread: value m goes to accumulator m % 4; acc0 = 2^24, acc1 = 1 + 1, acc2 = 1 -> (2^24 + 2) + 1 rounds
    # to even 2^24 + 4; a left-to-right sum gives 2^24, float64 2^24 + 3
    v = np.array([2**24, 1, 1, 0, 0, 1, 0, 0], np.float32)
    assert float(cn.tree_sum(v, 1, "abs")) == 2**24 + 4


def test_tree_sum_split4_meets_warps_in_a_tree():
    # warps 0..3 hold 1, 2^24, 1, 0: (W0 + W2) + (W1 + W3) = 2 + 2^24 exactly; in order it would be 2^24
    v = np.zeros(16, np.float32)
    v[0], v[1], v[2] = 1, 2**24, 1
    assert float(cn.tree_sum(v, 4, "abs")) == 2**24 + 2
    # inside warp 0 (values 0, 4, 8, 12 in accumulators 0..3): ((2^24 + 1) + 1) + 0 stays 2^24
    w = np.zeros(16, np.float32)
    w[0], w[4], w[8] = 2**24, 1, 1
    assert float(cn.tree_sum(w, 4, "abs")) == 2**24


def test_tree_sum_fma_differs_from_rounded_squares():
    # acc0 = (2^-12)^2 = 2^-24, then x = 1 + 2^-12: fma keeps x*x's 2^-24, the rounded square drops it (tie to even)
    v = np.array([2.0**-12, 0, 0, 0, 1 + 2.0**-12], np.float32)
    assert float(cn.tree_sum(v, 1, "fma")) == 1 + 2.0**-11 + 2.0**-23
    assert float(cn.tree_sum(v, 1, "square")) == 1 + 2.0**-11
    x = np.array([3.0, 4.0], np.float32)
    with pytest.raises(ValueError, match=r"split must be one of .* \(got 3\)"):
        cn.tree_sum(x, 3)
    with pytest.raises(ValueError, match="terms must be"):
        cn.tree_sum(x, 1, "cube")


def test_references_match_the_task_formulas():
    x = torch.randn(2, 16, 3, 5, generator=torch.Generator().manual_seed(0))
    for family, task in tasks.LAYOUT_TASKS.items():
        model = task.make_model()
        assert_bits_equal(model(x), cn.reference(family, x, task.init_args[1]), what=f"{family} task model")
    assert_bits_equal(cn.rms_reference(x), x / torch.sqrt(torch.mean(x ** 2, dim=1, keepdim=True) + 1e-5), what="rms")
    assert_bits_equal(cn.mean_abs_reference(x), x / torch.mean(torch.abs(x), dim=1, keepdim=True), what="mean_abs")
    assert_bits_equal(cn.l2_reference(x), x / torch.norm(x, p=2, dim=1, keepdim=True), what="l2")
    for family in cn.FAMILIES:
        assert torch.allclose(cn.builtin(family, x, 1e-5), cn.reference(family, x, 1e-5), atol=1e-4, rtol=1e-4)
    assert all(r["official pass"] for r in lb.reference_rows())
    assert tasks.get_task("L1/36").input_shape == (112, 64, 512, 512)
    assert tasks.get_task("L1/38").input_shape == tasks.get_task("L1/39").input_shape == (32768, 65535)
    assert tasks.layout_shape(128) == (4, 128, 512, 512)
    with pytest.raises(ValueError, match="channels must be an int >= 2"):
        tasks.layout_shape(1)


def test_conversion_helpers_round_trip():
    x = torch.randn(2, 8, 3, 5)
    r = cn.to_rows(x)
    assert r.shape == (2, 3, 5, 8) and r.is_contiguous()
    assert_bits_equal(cn.from_rows(r), x, what="from_rows(to_rows(x))")


@pytest.mark.slow
def test_kernels_compile_with_nvrtc(cache_dir):
    rows = lb.kernel_builds("sm_90")
    assert [r["kernel"] for r in rows] == ["channel_norm_nchw", "channel_norm_rows"]
    assert all(r["arch"] == "sm_90" and not r["cache hit"] for r in rows)


def test_mean_factor_is_float32_division():
    assert cn.mean_factor(64, 1 << 20) == np.float32(1 / 64)
    assert cn.mean_factor(48, 3) == np.float32(np.float32(3) / np.float32(144))


# --- the study's rows and verdict on records built here ---------------------------------------------------------

def _check(ok=True, bits=1.0, ulp=0):
    return {"official_pass": ok, "bit_equal_fraction": bits, "max_abs_error": 0.0, "max_ratio": 0.0,
            "bad_finite": 0 if ok else 5, "bad_special": 0, "max_ulp": ulp, "equal_nan_pass": ok}


def _correctness():
    cases = []
    for family in cn.FAMILIES:
        for dist in ("uniform", "offset"):
            routes = {"direct_nchw": _check(), "rows": _check(bits=0.9, ulp=2),
                      "conversion": _check(ok=dist != "offset", bits=0.9, ulp=3)}
            cases.append({"family": family, "channels": 64, "shape": [2, 64, 8, 8], "seed": 0, "distribution": dist,
                          "eps": 1e-5, "routes": routes})
    cases.append({"family": "l2", "channels": 64, "shape": [2, 64, 8, 8], "seed": 0, "distribution": "zeros",
                  "eps": 0.0, "routes": {"direct_nchw": _check(ok=False)}})
    return {"cases": cases}


def _stats(ms):
    return {"median_ms": ms, "q25_ms": ms * 0.9, "q75_ms": ms * 1.1, "min_ms": ms, "max_ms": ms, "n": 3}


def _timing(conversion_ms=5.0):
    fams = []
    for family in cn.FAMILIES:
        ms = {"eager": 1.0, "direct_nchw": 0.5, "rows": 0.45, "conversion": conversion_ms}
        fams.append({"family": family, "task": tasks.LAYOUT_TASKS[family].key, "shape": [4, 64, 512, 512],
                     "bytes": 8 * 4 * 64 * 512 * 512, "timing_errors": {},
                     "methods": {m: {"status": "timed", "check": _check(), "excluded": {}, "error": None} for m in ms},
                     "timing": {"A": {"stats": {m: _stats(v) for m, v in ms.items()},
                                      "ratio_vs_baseline": {m: {"median": 1 / v, "q25": 1 / v, "q75": 1 / v}
                                                            for m, v in ms.items()}}}})
    return {"families": fams, "copy_ceiling": {"A": {"median_gbps": 3000.0}}}


def test_rows_and_summary_from_records():
    cor, tim = _correctness(), _timing()
    rows = {(r["family"], r["kernel"]): r for r in lb.correctness_rows(cor)}
    assert rows[("rms", "conversion")]["cases"] == 2 and rows[("rms", "conversion")]["official pass"] == 1
    assert rows[("l2", "rows")]["max ulp"] == 2 and rows[("l2", "direct_nchw")]["bit-identical"] == 2
    assert len(lb.control_rows(cor)) == 1  # the zeros case is apart, not among the ordinary counts
    t = [r for r in lb.timing_rows(tim) if r["method"] == "direct_nchw"][0]
    assert t["GB/s"] == round(8 * 4 * 64 * 512 * 512 / 0.5e-3 / 1e9, 1)
    assert t["% copy ceiling"] == round(100 * t["GB/s"] / 3000.0, 1)
    block = layout_block({"timing": tim, "correctness": cor})
    assert block["rms"] == {"direct_nchw_ms": 0.5, "rows_ms": 0.45, "conversion_ms": 5.0, "cases": 6, "passed": 5}
    assert layout_block({"timing": {"cases": []}}) is None
    post = lb.post_rows(tim, cor)
    assert [r for r in post if r["id"] == "layout.cases"][0]["ours"] == 3
    assert lb.route_figure(tim) is not None and lb.route_figure(None) is None


def test_verdict_from_records():
    prov = {"gpu": "NVIDIA H200", "torch": "2.11.0"}
    lines = lb.verdict_lines(_timing(), _correctness(), prov, "LIVE run x")
    text = "\n".join(lines)
    assert "rms / conversion: 1/2 ordinary cases pass" in text
    assert "in 2/2 ordinary cases" not in text  # stretch counts all 6 direct cases
    assert "bit-identical to eager (int32 views) in 6/6 ordinary cases (max 0 ulp): reached" in text
    assert "conversion route is slower than the direct NCHW kernel" in text
    fast = "\n".join(lb.verdict_lines(_timing(conversion_ms=0.1), _correctness(), prov, "LIVE run x"))
    assert "does not reproduce" in fast
    assert "no speed or correctness claim" in lb.verdict_lines(None, None, None, "no run")[0]
