import torch

from bits import assert_bits_equal
from labkit import inputs

from labkit import tasks


def test_l1_40_definition_and_pinned_commit():
    t = tasks.get_task("L1/40")
    assert t.input_shape == (16, 64, 256, 256) and t.init_args == ((64, 256, 256),)
    assert tasks.KERNELBENCH_COMMIT == "423217d9fda91e0c2d67e4a43bf62f96f6d104f1"
    m = t.make_model()
    assert tuple(m.ln.normalized_shape) == (64, 256, 256) and m.ln.eps == 1e-5
    assert_bits_equal(m.ln.weight, torch.ones(64, 256, 256), what="weight")
    assert_bits_equal(m.ln.bias, torch.zeros(64, 256, 256), what="bias")


def test_inputs_are_cpu_rand_seeded_like_the_global_generator():
    t = tasks.get_task("L1/40")
    (x,) = t.make_inputs(seed=3, shape=(2, 8))
    torch.manual_seed(3)
    assert_bits_equal(x, torch.rand(2, 8), what="input")  # same values as KernelBench's get_inputs after manual_seed


def test_unknown_task():
    import pytest

    with pytest.raises(ValueError, match="unknown task"):
        tasks.get_task("L1/99")


def test_distributions_are_what_they_say():
    shape = (2, 1000)
    assert inputs.make_input("uniform", shape, 0).min() >= 0
    assert abs(inputs.make_input("normal_plus_1000", shape, 0).mean().item() - 1000) < 1
    assert inputs.make_input("normal_x100", shape, 0).std().item() > 50
    assert torch.all(inputs.make_input("constant_1e4", shape, 0) == 1e4)
    w, b = inputs.make_affine("random_normal", (8,), 1)
    assert not torch.equal(w, torch.ones(8)) and not torch.equal(b, torch.zeros(8))
