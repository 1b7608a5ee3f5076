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


def test_the_fused_consumer_tasks_and_their_model_new():
    """L2/34 and L2/3 as the pinned revision defines them; ModelNew holds the same parameters under one seed (the
    evaluator seeds each model before building it) and, on a CPU (torch's chain serves), gives the Model's bits."""
    for key, n_params in (("L2/34", 4), ("L2/3", 5)):
        t = tasks.get_task(key)
        assert t.input_shape == (32, 32, 16, 32, 32)
        torch.manual_seed(0)
        model = t.make_model()
        torch.manual_seed(0)
        new = t.make_model_new()
        assert type(model).__name__ == "Model" and type(new).__name__ == "ModelNew"
        assert len(model.state_dict()) == n_params
        for (name, a), b in zip(model.state_dict().items(), new.state_dict().values()):
            assert_bits_equal(b, a, what=f"{key} {name}")
        x = torch.rand(2, 32, 2, 4, 32)  # W = 32 -> W' = 64, the LayerNorm's out_channels
        with torch.no_grad():
            assert_bits_equal(new(x), model(x), what=f"{key} ModelNew")
    l34 = tasks.get_task("L2/34").make_model()
    assert l34.layer_norm.normalized_shape == (64,) and l34.layer_norm.eps == 1e-5 and l34.scaling_factor == 1.0
    l3 = tasks.get_task("L2/3").make_model()
    assert l3.norm.normalized_shape == (64,) and l3.avg_pool.kernel_size == (2, 2, 2)
    assert l3.sum_weight.item() == 1.0


def test_l1_40_with_a_consumer_is_not_the_task_itself():
    """The fused study's L1/40 + GELU * 2 sits under its own key: TASKS' L1/40 stays KernelBench's Model."""
    assert tasks.get_task("L1/40") is tasks.LAYER_NORM_L1_40
    t = tasks.FUSED_TASKS["L1/40+gelu*2"]
    assert t.input_shape == tasks.L1_40 and t.init_args == (tasks.L1_40[1:], 2.0)
    small = (2, 8, 4)
    model, new = t.build(small, 2.0), t.build_new(small, 2.0)
    x = torch.rand(3, *small)
    with torch.no_grad():
        assert_bits_equal(new(x), torch.nn.functional.gelu(model.ln(x)) * 2.0, what="ModelNew")
