"""GPU checks of the channel-norm kernels (H200 pass; about 10 s): every route passes the official predicate
against eager on ordinary inputs, the direct NCHW kernel matches the CPU tree emulator bit for bit, and whether it
is bit-identical to eager torch is reported per family (asserted where the Reduce.cuh reading predicts it)."""
import numpy as np
import pytest
import torch

from bits import assert_bits_equal

from labkit.lab import channel_norm as cn
from labkit.studies import layout_routes

pytestmark = pytest.mark.gpu

SHAPES = [(2, 64, 32, 32), (2, 32, 16, 16), (2, 128, 8, 8), (3, 64, 17, 19)]


@pytest.mark.parametrize("family", cn.FAMILIES)
@pytest.mark.parametrize("shape", SHAPES)
def test_routes_pass_the_official_predicate(family, shape):
    x = layout_routes.make_case_input("normal", shape, 0, "cuda")
    with torch.no_grad():
        ref = cn.reference(family, x)
        for name, y in layout_routes.route_outputs(family, x, cn.EPS).items():
            assert torch.allclose(ref, y, atol=1e-4, rtol=1e-4), (family, shape, name)


@pytest.mark.parametrize("family", cn.FAMILIES)
@pytest.mark.parametrize("shape", [(2, 64, 32, 32), (3, 64, 17, 19)])
def test_direct_kernel_sums_in_the_emulated_tree(family, shape):
    # The kernel's output at a few positions equals x / scale with the scale from tree_sum (float32 on the CPU).
    x = layout_routes.make_case_input("normal", shape, 1, "cuda")
    y = cn.direct_nchw(family, x).cpu().numpy()
    xs = x.cpu().numpy()
    n, c, h, w = shape
    split = cn.reduction_plan(c, n, h * w)["split"]
    terms = {"rms": "square", "mean_abs": "abs", "l2": "fma"}[family]
    factor = cn.mean_factor(c, n * h * w)
    for (i, a, b) in [(0, 0, 0), (n - 1, h - 1, w - 1), (0, h // 2, w // 3)]:
        s = cn.tree_sum(xs[i, :, a, b], split, terms)
        if family == "rms":
            scale = np.float32(np.sqrt(np.float32(np.float32(s * factor) + np.float32(cn.EPS))))
        elif family == "mean_abs":
            scale = np.float32(s * factor)
        else:
            scale = np.float32(np.sqrt(s))
        expect = (xs[i, :, a, b] / scale).astype(np.float32)
        assert_bits_equal(y[i, :, a, b], expect, what=f"{family} {shape} at n={i}, h={a}, w={b} vs the tree emulator",
                          path="direct_nchw")


@pytest.mark.parametrize("family", ["rms", "mean_abs"])
def test_direct_kernel_bit_identical_to_eager(family):
    # The stretch goal where the source reading leaves no doubt (separately rounded ops, MeanOps' sum * factor).
    for shape in [(4, 64, 64, 64), (2, 32, 16, 16), (2, 128, 8, 8), (3, 64, 17, 19)]:
        x = layout_routes.make_case_input("normal", shape, 2, "cuda")
        ref = cn.reference(family, x)
        y = cn.direct_nchw(family, x)
        assert_bits_equal(y, ref, what=f"{family} {shape} vs eager", path="direct_nchw")


def test_l2_fma_or_rounded_squares_matches_eager():
    # Which L2 sum eager uses (NormTwoOps' acc + x*x contracted or not) is recorded, and one of them must match.
    x = layout_routes.make_case_input("normal", (4, 64, 64, 64), 3, "cuda")
    ref = cn.reference("l2", x).view(torch.int32)
    fma = torch.equal(ref, cn.direct_nchw("l2", x).view(torch.int32))
    mul = torch.equal(ref, cn.direct_nchw("l2", x, l2_fma=False).view(torch.int32))
    print(f"L2 bit-identical to eager: fma={fma} rounded-squares={mul}")
    assert fma or mul


def test_gpu_validation_before_launch():
    x = torch.rand(2, 8, 4, 4, device="cuda", dtype=torch.float64)
    with pytest.raises(ValueError, match="x must be float32"):
        cn.direct_nchw("rms", x)
    with pytest.raises(ValueError, match="16-byte aligned"):
        cn.rows("rms", torch.rand(65, device="cuda")[1:].view(8, 8))
