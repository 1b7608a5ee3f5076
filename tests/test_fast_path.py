"""The eager fast path on the CPU (the host extension builds here): a signature get_plan has decided is served from
C++ (labkit.ops.dropin.host.fast) with torch's bits; anything that could change the decision (shape, strides, dtype,
affine, requires_grad, grad mode, eps, a context that changes what get_plan decides, plan.clear) is a miss that
Python decides; odd arguments and inputs torch refuses take the Python path and get torch's own answer or error.
Our kernels through the same path: tests/test_gpu_host.py."""
import threading

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import labkit
from labkit.ops.dropin import host, plan


@pytest.fixture
def fast():
    m = host.module()
    assert m is not None, host.unavailable()  # CI builds it: a failure here is a broken build, not a skip
    plan.clear()
    assert host.fast[0] is not None
    yield host.fast[0]
    plan.clear()


def _bits(t):
    return t.contiguous().view(torch.int32)


def _inputs(shape=(8, 255), seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g), torch.randn(shape[-1:], generator=g), torch.randn(shape[-1:], generator=g)


def test_a_decided_signature_is_served_from_cpp(fast, monkeypatch):
    x, w, b = _inputs()
    with torch.no_grad():
        assert fast(x, (255,), w, b, 1e-5) is None  # not decided yet
        first = labkit.layer_norm(x, (255,), w, b, 1e-5)
        assert host.module().remembered() == 1

        def planned(*a, **k):
            raise AssertionError("a decided signature was planned again in Python")
        monkeypatch.setattr(plan, "get_plan", planned)
        again = labkit.layer_norm(x, 255, w, b, 1e-5)  # an int normalized_shape is the same signature
    ref = F.layer_norm(x, (255,), w, b, 1e-5)
    assert torch.equal(_bits(first), _bits(ref)) and torch.equal(_bits(again), _bits(ref))


@pytest.mark.parametrize("change", [
    lambda x, w, b: (x.double(), w.double(), b.double(), 1e-5),
    lambda x, w, b: (x[:4], w, b, 1e-5),
    lambda x, w, b: (torch.randn(255, 8).t(), w, b, 1e-5),  # same shape, other strides
    lambda x, w, b: (x, None, b, 1e-5),
    lambda x, w, b: (x, w, None, 1e-5),
    lambda x, w, b: (x, w.clone().requires_grad_(), b, 1e-5),
    lambda x, w, b: (x, w, b, 1e-6),
    lambda x, w, b: (torch._neg_view(x), w, b, 1e-5),  # the same memory read as -x
    lambda x, w, b: (x, w, torch._neg_view(b), 1e-5),
], ids=["dtype", "rows", "strides", "no weight", "no bias", "weight requires grad", "eps", "negated x",
        "negated bias"])
def test_a_changed_signature_is_decided_by_python(fast, change):
    x, w, b = _inputs()
    with torch.no_grad():
        labkit.layer_norm(x, (255,), w, b, 1e-5)
        assert fast(x, (255,), w, b, 1e-5) is not None
        x2, w2, b2, eps = change(x, w, b)
        assert fast(x2, (255,), w2, b2, eps) is None
        got = labkit.layer_norm(x2, (255,), w2, b2, eps)
        assert torch.equal(_bits(got), _bits(F.layer_norm(x2, (255,), w2, b2, eps)))
        assert fast(x2, (255,), w2, b2, eps) is not None


def test_grad_mode_is_part_of_the_signature(fast):
    x, w, b = _inputs(seed=3)
    x = x.requires_grad_()
    with torch.no_grad():
        labkit.layer_norm(x, (255,), w, b)
    assert fast(x, (255,), w, b, 1e-5) is None  # recording autograd: another decision
    dy = torch.randn_like(x)
    for _ in range(2):  # decided, then served from C++: torch's own node either way (the CPU's kernels)
        y = labkit.layer_norm(x, (255,), w, b)
        assert type(y.grad_fn).__name__ == "NativeLayerNormBackward0"
        gx, = torch.autograd.grad(y, x, dy)
        ref = F.layer_norm(x, (255,), w, b)
        assert torch.equal(_bits(y), _bits(ref))
        assert torch.equal(_bits(gx), _bits(torch.autograd.grad(ref, x, dy)[0]))
    with torch.inference_mode():
        assert torch.equal(_bits(labkit.layer_norm(x, (255,), w, b)), _bits(F.layer_norm(x, (255,), w, b)))


@pytest.mark.parametrize("context", [lambda: labkit.dispatch_protocol("graph"),
                                     lambda: plan.forced_backward("native"), host.off],
                         ids=["dispatch_protocol", "forced_backward", "host.off"])
def test_a_context_that_changes_the_decision_suspends_it(fast, context):
    x, w, b = _inputs()
    with torch.no_grad():
        labkit.layer_norm(x, (255,), w, b)
        with context():
            assert host.fast[0] is None
            inside = labkit.layer_norm(x[:3], (255,), w, b)  # decided in Python, under the context
        assert host.fast[0] is fast
        assert fast(x[:3], (255,), w, b, 1e-5) is None  # what was decided inside is not remembered
        assert torch.equal(_bits(inside), _bits(F.layer_norm(x[:3], (255,), w, b)))


def test_clearing_the_plans_forgets_every_decision(fast):
    x, w, b = _inputs()
    with torch.no_grad():
        labkit.layer_norm(x, (255,), w, b)
        assert host.module().remembered() == 1
        plan.clear()
        assert host.module().remembered() == 0 and fast(x, (255,), w, b, 1e-5) is None


@pytest.mark.parametrize("ns, eps", [((255,), 0), ((255,), np.float32(1e-5)), ((255.0,), 1e-5), ([True], 1e-5)],
                         ids=["int eps", "numpy eps", "float dim", "bool dim"])
def test_odd_arguments_take_the_python_path(fast, ns, eps):
    x, w, b = _inputs()
    with torch.no_grad():
        assert fast(x, ns, w, b, eps) is None
        try:
            ref = F.layer_norm(x, ns, w, b, eps)
        except (RuntimeError, TypeError, ValueError) as exc:
            with pytest.raises(type(exc)):
                labkit.layer_norm(x, ns, w, b, eps)
            return
        assert torch.equal(_bits(labkit.layer_norm(x, ns, w, b, eps)), _bits(ref))


def test_an_input_torch_refuses_gets_torchs_error_on_every_call(fast):
    x, _, b = _inputs()
    w = torch.randn(254)
    with pytest.raises(RuntimeError) as ref:
        F.layer_norm(x, (255,), w, b)
    for _ in range(3):  # planned, then (remembered or not) the same error from torch
        with pytest.raises(RuntimeError) as got:
            labkit.layer_norm(x, (255,), w, b)
        assert str(got.value).splitlines()[0] == str(ref.value).splitlines()[0]


def test_threads_share_the_decisions_and_keep_torchs_bits(fast):
    shapes = [(4, 64), (3, 7, 32), (16, 100), (2, 255)]
    data = [_inputs(s, seed=i) for i, s in enumerate(shapes)]
    refs = [F.layer_norm(x, x.shape[-1:], w, b) for x, w, b in data]
    bad = []

    def work(k):
        for i in range(200):
            j = (i + k) % len(data)
            x, w, b = data[j]
            with torch.no_grad():
                y = labkit.layer_norm(x, x.shape[-1:], w, b)
            if not torch.equal(_bits(y), _bits(refs[j])):
                bad.append((k, i))
    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad and host.module().remembered() == len(shapes)
