"""labkit.enable(): the host extension's kernels registered for aten::native_layer_norm(_backward) in front of
torch's. On the CPU the mechanism is tested at the CPU key, where every plan is torch's kernel (called directly from
ours): bits, autograd through torch's node, the planner asked once per signature, and torch's kernels back after
disable. The CUDA key, with our kernels serving, is tests/test_gpu_aten_override.py."""
import pytest
import torch

import labkit
from labkit.ops.dropin import aten, host

from bits import assert_bits_equal

pytestmark = pytest.mark.skipif(host.module() is None, reason="the host extension does not build here")


def _grads(x, w, b, dy):
    y = torch.nn.functional.layer_norm(x, x.shape[-1:], w, b, 1e-5)
    return (y, *torch.autograd.grad(y, (x, w, b), dy))


def _inputs(shape=(6, 40), seed=0):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(shape, generator=g) * 3 + 1).requires_grad_()
    w = torch.randn(shape[-1:], generator=g).requires_grad_()
    b = torch.randn(shape[-1:], generator=g).requires_grad_()
    return x, w, b, torch.randn(shape, generator=g)


def test_cpu_key_keeps_torchs_bits_and_autograd():
    x, w, b, dy = _inputs()
    want = _grads(x, w, b, dy)
    with labkit.enabled("CPU"):
        assert aten.is_enabled()
        got = _grads(x, w, b, dy)
        got_again = _grads(x, w, b, dy)
        planned = host.module().aten_planned()
    assert not aten.is_enabled()
    for name, a, e in zip(("y", "dx", "dw", "db"), got, want):
        assert_bits_equal(a, e, what=name)
    for a, e in zip(got_again, want):
        assert_bits_equal(a, e, what="second call")
    # one forward and one backward signature, each planned once (the second call is a lookup)
    assert planned == (1, 1)


def test_disable_gives_torchs_kernels_back(monkeypatch):
    asked = []

    def counting(*args):
        asked.append(args[1])
        return None, False, False  # torch's kernel, not kept: every call asks again while ours is registered

    monkeypatch.setattr(aten.plans, "host_forward_plan", counting)
    x, w, b, dy = _inputs(seed=1)
    labkit.enable("CPU")
    torch.nn.functional.layer_norm(x, x.shape[-1:], w, b)
    torch.nn.functional.layer_norm(x, x.shape[-1:], w, b)
    assert len(asked) == 2  # our kernel ran, and asked the planner
    labkit.disable()
    assert not aten.is_enabled()
    labkit.disable()  # a second disable is a no-op
    torch.nn.functional.layer_norm(x, x.shape[-1:], w, b)
    assert len(asked) == 2 and host.module().aten_planned() == (0, 0)  # torch's kernel again: ours is not called


def test_enable_twice_and_bad_key_refused():
    with pytest.raises(ValueError, match="key must be one of"):
        labkit.enable("XLA")
    with labkit.enabled("CPU"):
        with pytest.raises(RuntimeError, match="on already"):
            labkit.enable("CPU")
    assert not aten.is_enabled()


@pytest.mark.skipif(torch.version.cuda is not None, reason="a CUDA build of torch has CUDA kernels to stand in front of")
def test_cuda_key_refused_on_a_cpu_build():
    with pytest.raises(RuntimeError, match="no CUDA kernels"):
        labkit.enable()
    assert not aten.is_enabled()


def test_no_affine_and_double_backward_under_enable():
    x, _, _, dy = _inputs(seed=2)
    y = torch.nn.functional.layer_norm(x, x.shape[-1:])
    (gx,) = torch.autograd.grad(y, x, dy, create_graph=True)
    want = torch.autograd.grad(gx.sum(), x)[0]
    with labkit.enabled("CPU"):
        y2 = torch.nn.functional.layer_norm(x, x.shape[-1:])
        (gx2,) = torch.autograd.grad(y2, x, dy, create_graph=True)
        got = torch.autograd.grad(gx2.sum(), x)[0]
    assert_bits_equal(y2, y, what="y")
    assert_bits_equal(gx2, gx, what="dx")
    assert_bits_equal(got, want, what="second derivative")
