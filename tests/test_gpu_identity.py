"""Reference-order bit identity on the GPU (output, mean, rstd as int32 views) against the installed torch.
Skipped without a CUDA device; run on the H200 with `python -m pytest -m gpu`."""
import pytest

from bits import assert_bits_equal
from labkit.records import check

from labkit.studies import identity

from labkit import inputs
from labkit.tasks import L1_40, UNEVEN_SHAPE
from labkit.ops.reference_order import reference_order_layer_norm
from labkit.lab.split_stats import split_stats_layer_norm

pytestmark = pytest.mark.gpu


def _ref_order(x, w, b, eps):
    return reference_order_layer_norm(x, w, b, eps, return_stats=True)


@pytest.mark.parametrize("dist", ["uniform", "normal", "normal_plus_1000"])
@pytest.mark.parametrize("affine", ["default", "random_normal"])
def test_full_l1_40_bit_identical(dist, affine):
    import torch

    x = inputs.make_input(dist, L1_40, seed=0, device="cuda")
    w, b = inputs.make_affine(affine, L1_40[1:], seed=0, device="cuda")
    rec = identity.compare_to_native(_ref_order, x, w, b, 1e-5)
    assert rec["identical"], {k: rec[k]["bit_equal_fraction"] for k in ("output", "mean", "rstd")}
    torch.cuda.empty_cache()


@pytest.mark.parametrize("shape", [UNEVEN_SHAPE, (7, 4), (5, 516), (1, 1 << 24)])
def test_small_and_ragged_shapes_bit_identical(shape):
    # (7,4): one vector per row; (5,516): 129 vectors, so one thread of 128 pushes twice; (1, 2**24): the limit.
    x = inputs.make_input("normal_plus_1000", shape, seed=1, device="cuda")
    w, b = inputs.make_affine("random_normal", shape[1:], seed=1, device="cuda")
    assert identity.compare_to_native(_ref_order, x, w, b, 1e-5)["identical"]


def test_graph_replay_after_mutating_input_gamma_beta_stays_identical():
    import torch

    x = inputs.make_input("uniform", L1_40, seed=2, device="cuda")
    w, b = inputs.make_affine("random_normal", L1_40[1:], seed=2, device="cuda")
    for _ in range(3):
        reference_order_layer_norm(x, w, b, 1e-5, return_stats=True)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y, mean, rstd = reference_order_layer_norm(x, w, b, 1e-5, return_stats=True)
    x.mul_(0.8)
    w.mul_(0.9)
    b.add_(0.01)
    g.replay()
    torch.cuda.synchronize()
    ref = identity.native_layer_norm(x, w, b, 1e-5)
    for name, r, got in zip(("output", "mean", "rstd"), ref, (y, mean, rstd)):
        assert_bits_equal(got, r, what=f"{name} after graph replay", path="reference_order")


def test_split_stats_runs_and_is_close_on_uniform_but_not_reference_order():
    x = inputs.make_input("uniform", (8, 4096), seed=0, device="cuda")
    w, b = inputs.make_affine("random_normal", (4096,), seed=0, device="cuda")
    ref = identity.native_layer_norm(x, w, b, 1e-5)[0]
    for geometry in ("eager", "flat", "interleaved"):
        assert check.official_allclose(ref, split_stats_layer_norm(x, w, b, 1e-5, geometry=geometry))


def test_wrong_device_index_or_cpu_mix_raises_valueerror():
    import torch

    x = torch.rand(2, 8, device="cuda")
    with pytest.raises(ValueError, match="one device|CUDA tensor"):
        reference_order_layer_norm(x, torch.ones(8), torch.zeros(8, device="cuda"))
