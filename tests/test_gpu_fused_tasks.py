"""KernelBench's level-2 tasks with a fused consumer, and L1/40 with one (labkit.tasks.FUSED_TASKS), on the GPU at
their own shapes: ModelNew's output and gradients bit-identical to the task's Model. cuDNN is held to deterministic
algorithms so that the two models' convolutions (torch's in both) give one result."""
import pytest
import torch

from bits import assert_bits_equal
from labkit import tasks
from labkit.ops import epilogue as ep
from labkit.ops.dropin.fused import explain_fused

pytestmark = pytest.mark.gpu


def _models(key):
    t = tasks.FUSED_TASKS[key]
    torch.manual_seed(42)
    model = t.make_model("cuda")
    torch.manual_seed(42)
    return t, model, t.make_model_new("cuda")


@pytest.mark.parametrize("key", list(tasks.FUSED_TASKS))
def test_model_new_gives_the_models_bits(key):
    t, model, new = _models(key)
    with torch.backends.cudnn.flags(enabled=True, benchmark=False, deterministic=True), torch.no_grad():
        for seed in range(3):
            (x,) = t.make_inputs("cuda", seed=seed)
            assert_bits_equal(new(x), model(x), what=f"{key} seed {seed}")


def test_l2_34_takes_the_fused_path():
    """Its LayerNorm (4,194,304 rows of 64 after the convolution) with GELU and the scale in one output pass."""
    t, model, _ = _models("L2/34")
    (x,) = t.make_inputs("cuda", seed=0)
    with torch.no_grad():
        c = model.conv_transpose(x)
    ln = model.layer_norm
    where = explain_fused(c, ln.normalized_shape, ln.weight, ln.bias, ln.eps, activation="gelu",
                          scale=model.scaling_factor)
    assert where["path"] in ep.PATHS, where


@pytest.mark.parametrize("key", list(tasks.FUSED_TASKS))
def test_model_new_gradients_are_the_models(key):
    t, model, new = _models(key)
    (x,) = t.make_inputs("cuda", seed=5)
    with torch.backends.cudnn.flags(enabled=True, benchmark=False, deterministic=True):
        out = model(x)
        g = torch.randn(out.shape, device="cuda", generator=torch.Generator(device="cuda").manual_seed(6))
        want = torch.autograd.grad((out * g).sum(), list(model.parameters()))
        del out
        got = torch.autograd.grad((new(x) * g).sum(), list(new.parameters()))
    for (name, _), a, b in zip(model.named_parameters(), got, want):
        assert_bits_equal(a, b, what=f"{key} d{name}")
