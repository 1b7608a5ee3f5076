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
from hypothesis import given, settings, strategies as st

import labkit
from bits import assert_bits_equal
from labkit.ops.dropin import host, plan


@pytest.fixture
def fast():
    m = host.module()
    assert m is not None, host.unavailable()  # CI builds it: a failure here is a broken build, not a skip
    plan.clear()
    real = host.fast[0]
    assert real is not None
    yield real
    host.fast[0] = real  # a test may have put a spy there
    plan.clear()


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
    assert_bits_equal(first, ref, what="first call")
    assert_bits_equal(again, ref, what="served from C++")


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
    lambda x, w, b: (torch._efficientzerotensor(x.shape), w, b, 1e-5),  # no memory behind it
], ids=["dtype", "rows", "strides", "no weight", "no bias", "weight requires grad", "eps", "negated x",
        "negated bias", "ZeroTensor x"])
def test_a_changed_signature_is_decided_by_python(fast, change):
    x, w, b = _inputs()
    with torch.no_grad():
        labkit.layer_norm(x, (255,), w, b, 1e-5)
        assert fast(x, (255,), w, b, 1e-5) is not None
        x2, w2, b2, eps = change(x, w, b)
        assert fast(x2, (255,), w2, b2, eps) is None
        got = labkit.layer_norm(x2, (255,), w2, b2, eps)
        assert_bits_equal(got, F.layer_norm(x2, (255,), w2, b2, eps), what="changed signature")
        # then remembered, but for a ZeroTensor, which the C++ key never describes (Python's path, every call)
        assert (fast(x2, (255,), w2, b2, eps) is None) == x2._is_zerotensor()


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
        assert_bits_equal(y, ref, what="y")
        assert_bits_equal(gx, torch.autograd.grad(ref, x, dy)[0], what="dx")
    with torch.inference_mode():
        assert_bits_equal(labkit.layer_norm(x, (255,), w, b), F.layer_norm(x, (255,), w, b), what="inference mode")


@pytest.mark.parametrize("context", [lambda: plan.forced_backward("native"), host.off],
                         ids=["forced_backward", "host.off"])
def test_a_process_wide_context_suspends_it(fast, context):
    x, w, b = _inputs()
    with torch.no_grad():
        labkit.layer_norm(x, (255,), w, b)
        with context():
            assert host.fast[0] is None
            inside = labkit.layer_norm(x[:3], (255,), w, b)  # decided in Python, under the context
        assert host.fast[0] is fast
        assert fast(x[:3], (255,), w, b, 1e-5) is None  # what was decided inside is not remembered
        assert_bits_equal(inside, F.layer_norm(x[:3], (255,), w, b), what="inside the context")


class _Spy:
    def __init__(self, fn):
        self.fn, self.calls = fn, 0

    def __call__(self, *a):
        self.calls += 1
        return self.fn(*a)


def test_a_dispatch_protocol_takes_the_python_path_in_its_context_only(fast):
    """The protocol is a context variable: calls inside its `with` (and in a task or context copied from it, after
    the `with` ends) are planned in Python for that protocol and never remembered; other contexts keep the fast
    path."""
    import asyncio

    spy = host.fast[0] = _Spy(fast)  # the fixture puts the real one back
    x, w, b = _inputs()
    with torch.no_grad():
        with labkit.dispatch_protocol("graph"):
            labkit.layer_norm(x, (255,), w, b)
            assert spy.calls == 0

        async def main():
            with labkit.dispatch_protocol("graph"):
                task = asyncio.get_running_loop().create_task(asyncio.sleep(0))
                later = asyncio.get_running_loop().create_task(_call_later(x[:5], w, b))
            await task
            return await later
        y = asyncio.run(main())  # the task runs after the `with` has ended, in the context copied inside it
        assert spy.calls == 0 and host.module().remembered() == 0
        assert_bits_equal(y, F.layer_norm(x[:5], (255,), w, b), what="task after the with")
        labkit.layer_norm(x, (255,), w, b)  # the default context: the fast path, which then remembers
        assert spy.calls == 1 and host.module().remembered() == 1


async def _call_later(x, w, b):
    import asyncio

    await asyncio.sleep(0)
    return labkit.layer_norm(x, (255,), w, b)


def test_a_torch_function_mode_sees_every_call_it_would_see_from_torch(fast):
    from torch.overrides import TorchFunctionMode

    class Log(TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.seen = []

        def __torch_function__(self, func, types, args=(), kwargs=None):
            self.seen.append(getattr(func, "__name__", str(func)))
            return func(*args, **(kwargs or {}))
    x, w, b = _inputs()
    with torch.no_grad():
        labkit.layer_norm(x, (255,), w, b)  # decided and remembered outside the mode
        with Log() as ours:
            for _ in range(3):
                labkit.layer_norm(x, (255,), w, b)
        with Log() as theirs:
            for _ in range(3):
                F.layer_norm(x, (255,), w, b)
    assert ours.seen.count("layer_norm") == 3 and theirs.seen.count("layer_norm") == 3


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")  # torch's forward AD
def test_forward_mode_ad_keeps_its_tangent(fast):
    import torch.autograd.forward_ad as fwAD

    x, w, b = _inputs()
    t = torch.randn_like(x)
    labkit.layer_norm(x, (255,), w, b)
    with fwAD.dual_level():
        ours = fwAD.unpack_dual(labkit.layer_norm(fwAD.make_dual(x, t), (255,), w, b))
        ref = fwAD.unpack_dual(F.layer_norm(fwAD.make_dual(x, t), (255,), w, b))
    assert ours.tangent is not None
    assert_bits_equal(ours.tangent, ref.tangent, what="tangent")
    assert_bits_equal(ours.primal, ref.primal, what="primal")


def test_clearing_the_plans_forgets_every_decision(fast):
    x, w, b = _inputs()
    with torch.no_grad():
        labkit.layer_norm(x, (255,), w, b)
        assert host.module().remembered() == 1
        plan.clear()
        assert host.module().remembered() == 0 and fast(x, (255,), w, b, 1e-5) is None


@pytest.mark.parametrize("ns, eps", [((255,), 0), ((255,), np.float32(1e-5)), ((255.0,), 1e-5), ([True], 1e-5),
                                     ((np.int64(255),), 1e-5), ((torch.tensor(255),), 1e-5), (np.array([255]), 1e-5),
                                     (range(255, 256), 1e-5), ((2 ** 70,), 1e-5), (2 ** 70, 1e-5)],
                         ids=["int eps", "numpy eps", "float dim", "bool dim", "numpy int dim", "tensor dim",
                              "numpy array", "range", "huge dim", "huge int"])
def test_odd_arguments_take_the_python_path(fast, ns, eps):
    """Decided for (255,) and 1e-5 first: each odd spelling is still a miss, and gets torch's answer or torch's
    kind of error (an int normalized_shape, which nn.LayerNorm's constructor takes, is accepted as (int,)). An int
    eps is a signature of its own, remembered like a float's."""
    x, w, b = _inputs()
    with torch.no_grad():
        labkit.layer_norm(x, (255,), w, b, 1e-5)
        assert fast(x, (255,), w, b, 1e-5) is not None
        assert fast(x, ns, w, b, eps) is None
        if isinstance(ns, int):
            ns = (ns,)
        try:
            ref = F.layer_norm(x, ns, w, b, eps)
        except (RuntimeError, TypeError, ValueError) as exc:
            with pytest.raises(type(exc)):
                labkit.layer_norm(x, ns, w, b, eps)
            return
        assert_bits_equal(labkit.layer_norm(x, ns, w, b, eps), ref, what=f"ns={ns!r} eps={eps!r}")


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
            try:
                assert_bits_equal(y, refs[j], what=f"thread {k} call {i} shape {shapes[j]}")
            except AssertionError as exc:
                bad.append(str(exc))
    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad and host.module().remembered() == len(shapes)


def test_a_signature_python_had_cached_is_remembered_on_its_next_call(fast):
    """The C++ key holds x.requires_grad, Python's does not: a call that Python's cache answers is still remembered
    (on the fast path's miss), and a C++ table cleared on its own comes back the same way."""
    x, w, b = _inputs()
    w, b = w.requires_grad_(), b.requires_grad_()
    labkit.layer_norm(x, (255,), w, b)                    # x without grad: planned, remembered
    xg = x.clone().requires_grad_()
    labkit.layer_norm(xg, (255,), w, b)                   # Python's plan for the signature, another C++ key
    assert fast(xg, (255,), w, b, 1e-5) is not None
    host.forget()                                         # as when the C++ table fills up
    labkit.layer_norm(xg, (255,), w, b)
    assert fast(xg, (255,), w, b, 1e-5) is not None


_SHAPES = [(4, 64), (3, 7, 32), (2, 255), (5, 16)]


@pytest.mark.slow  # hypothesis, 60 sequences of up to 25 calls
@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(range(len(_SHAPES))), st.sampled_from(["no_grad", "grad", "inference"]),
                          st.booleans(), st.booleans(), st.sampled_from([None, "weight", "bias", "both"]),
                          st.sampled_from([1e-5, 1e-6, 0.1])), min_size=1, max_size=25))
def test_any_sequence_of_calls_keeps_torchs_outputs_and_gradients(calls):
    """Whatever was decided and remembered before, each call's output has torch's bits and records autograd exactly
    where F.layer_norm's does, with torch's gradients (grad mode, inference mode, requires_grad on x or the affine
    are all in the key). On the CPU every decision is torch's own call; tests/test_gpu_host.py runs the same
    sequences where our kernels and the C++ node serve."""
    host.module()
    plan.clear()
    for which, mode, x_grad, w_grad, affine, eps in calls:
        shape = _SHAPES[which]
        x, w, b = _inputs(shape, seed=which)
        w = w if affine in ("weight", "both") else None
        b = b if affine in ("bias", "both") else None
        x.requires_grad_(x_grad)
        if w is not None:
            w.requires_grad_(w_grad)
        ctx = {"no_grad": torch.no_grad, "grad": torch.enable_grad, "inference": torch.inference_mode}[mode]
        with ctx():
            y = labkit.layer_norm(x, shape[-1:], w, b, eps)
            ref = F.layer_norm(x, shape[-1:], w, b, eps)
        assert_bits_equal(y, ref, what=f"y ({mode}, {affine}, eps {eps})")
        assert y.requires_grad == ref.requires_grad
        if ref.requires_grad:
            wanted = [t for t in (x, w) if t is not None and t.requires_grad]
            dy = torch.randn_like(ref)
            for i, (a, c) in enumerate(zip(torch.autograd.grad(y, wanted, dy), torch.autograd.grad(ref, wanted, dy))):
                assert_bits_equal(a, c, what=f"gradient {i}")
    plan.clear()


def test_an_int_eps_is_remembered_as_the_float_it_equals(fast):
    x, w, b = _inputs()
    with torch.no_grad():
        labkit.layer_norm(x, (255,), w, b, 0)
        assert fast(x, (255,), w, b, 0) is not None and fast(x, (255,), w, b, 0.0) is not None
        assert fast(x, (255,), w, b, True) is None  # a bool: its own spelling, left to the Python path and torch
        assert_bits_equal(labkit.layer_norm(x, (255,), w, b, 0), F.layer_norm(x, (255,), w, b, 0), what="int eps")
