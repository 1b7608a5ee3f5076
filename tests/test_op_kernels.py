"""The registered ops' C++ kernels (host/layer_norm.cpp, "the registered ops"): labkit::layer_norm and
labkit::layer_norm_backward served from C++ at a dispatch key in front of their Python implementations. On the CPU
the mechanism is tested at the CPU key, where every plan is torch's kernel: the outputs the Python implementations
give, bit for bit (empty tensors for gradients not asked for), each signature planned once, autograd through the op,
the Python implementation called where the planner says its runner serves, and the Python implementations back
after unserve. The CUDA key, where it is registered when the extension loads, is tests/test_gpu_op_kernels.py."""
import pytest
import torch

from bits import assert_bits_equal
from labkit.ops.dropin import host, op, plan

pytestmark = pytest.mark.skipif(host.module() is None, reason="the host extension does not build here")


@pytest.fixture
def cpu_key():
    if host.module().ops_served():
        pytest.skip("the ops are served at the CUDA key in this process")
    op.serve_ops("CPU")
    try:
        yield host.module()
    finally:
        op.unserve_ops()


def _inputs(seed=0, shape=(5, 3, 24)):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g) * 2 + 1
    w, b = torch.randn(shape[-1:], generator=g), torch.randn(shape[-1:], generator=g)
    return x, [shape[-1]], w, b, torch.randn(shape, generator=g)


def test_cpu_key_serves_both_ops_with_the_python_implementations_bits(cpu_key):
    x, ns, w, b, dy = _inputs()
    want = op._forward_impl(x, ns, w, b, 1e-5)
    got = torch.ops.labkit.layer_norm(x, ns, w, b, 1e-5)
    for name, a, e in zip(("y", "mean", "rstd"), got, want):
        assert_bits_equal(a, e, what=name)
    for mask in ([True, True, True], [True, False, False], [False, True, False]):
        want_b = op._backward_impl(dy, x, ns, want[1], want[2], w, b, mask)
        got_b = torch.ops.labkit.layer_norm_backward(dy, x, ns, got[1], got[2], w, b, mask)
        for name, a, e in zip(("dx", "dw", "db"), got_b, want_b):
            assert a.shape == e.shape, (mask, name)  # an output not asked for is an empty tensor in both
            assert_bits_equal(a, e, what=f"{name} {mask}")
    torch.ops.labkit.layer_norm(x, ns, w, b, 1e-5)
    assert cpu_key.ops_planned() == (1, 1)  # each signature planned once, then looked up


def test_autograd_through_the_served_op(cpu_key):
    x, ns, w, b, dy = _inputs(seed=1)
    leaves = [t.clone().requires_grad_() for t in (x, w, b)]
    y = op.layer_norm_op(leaves[0], ns, leaves[1], leaves[2], 1e-5)[0]
    assert "OpFunction" in y.grad_fn.name()  # the C++ node, not torch.library's Python one
    got = (y, *torch.autograd.grad(y, leaves, dy))
    leaves_ref = [t.clone().requires_grad_() for t in (x, w, b)]
    y_ref = torch.nn.functional.layer_norm(leaves_ref[0], ns, leaves_ref[1], leaves_ref[2])
    want = (y_ref, *torch.autograd.grad(y_ref, leaves_ref, dy))
    for name, a, e in zip(("y", "dx", "dw", "db"), got, want):
        assert_bits_equal(a, e, what=name)
    assert cpu_key.ops_planned()[0] == 1


def test_python_runner_serves_where_the_planner_says(monkeypatch):
    if host.module().ops_served():
        pytest.skip("the ops are served at the CUDA key in this process")
    called = []
    monkeypatch.setattr(plan, "host_forward_plan", lambda *a: (None, True, True))  # keep=True is ignored for it
    real = op._forward_impl

    def python(*args):
        called.append(1)
        return real(*args)

    host.module().serve_ops(plan.host_forward_plan, plan.host_backward_plan, python, op._backward_impl, "CPU")
    try:
        x, ns, w, b, _ = _inputs(seed=2)
        got = torch.ops.labkit.layer_norm(x, ns, w, b, 1e-5)
        torch.ops.labkit.layer_norm(x, ns, w, b, 1e-5)
        assert called == [1, 1] and host.module().ops_planned() == (0, 0)  # asked each time, never kept
        assert_bits_equal(got[0], real(x, ns, w, b, 1e-5)[0], what="y")
    finally:
        op.unserve_ops()


def test_unserve_gives_the_python_implementations_back(cpu_key):
    x, ns, w, b, _ = _inputs(seed=3)
    torch.ops.labkit.layer_norm(x, ns, w, b, 1e-5)
    assert cpu_key.ops_planned() == (1, 0)
    op.unserve_ops()
    assert not cpu_key.ops_served() and cpu_key.ops_planned() == (0, 0)
    torch.ops.labkit.layer_norm(x, ns, w, b, 1e-5)
    assert cpu_key.ops_planned() == (0, 0)  # the Python implementation served
    op.unserve_ops()  # a second unserve is a no-op
    op.serve_ops("CPU")  # the fixture's unserve after it
    with pytest.raises(RuntimeError, match="registered already"):
        op.serve_ops("CPU")


def test_autograd_node_in_cpp_without_affine_and_create_graph(cpu_key):
    """The C++ node (OpFunction) at the backend's autograd key: no affine, and create_graph=True recomputing through
    torch's layer_norm (second derivatives equal F.layer_norm's)."""
    x, ns, w, b, dy = _inputs(seed=4)

    def grads(fn, affine):
        leaves = [x.clone().requires_grad_()] + ([w.clone().requires_grad_(), b.clone().requires_grad_()]
                                                 if affine else [])
        y = fn(leaves[0], ns, *(leaves[1:] if affine else (None, None)))
        first = torch.autograd.grad(y, leaves, dy, create_graph=True)
        second = torch.autograd.grad(sum((g * g).sum() for g in first), leaves, allow_unused=True)
        return (y, *first, *(torch.zeros(0) if g is None else g for g in second))

    def ours(x_, ns_, w_, b_):
        return op.layer_norm_op(x_, ns_, w_, b_, 1e-5)[0]

    def theirs(x_, ns_, w_, b_):
        return torch.nn.functional.layer_norm(x_, ns_, w_, b_, 1e-5)

    for affine in (True, False):
        for i, (a, e) in enumerate(zip(grads(ours, affine), grads(theirs, affine))):
            assert_bits_equal(a, e, what=f"affine={affine} output {i}")


def test_backward_op_has_no_derivative(cpu_key):
    x, ns, w, b, dy = _inputs(seed=5)
    y, mean, rstd = torch.ops.labkit.layer_norm(x, ns, w, b, 1e-5)
    gx = torch.ops.labkit.layer_norm_backward(dy.requires_grad_(), x, ns, mean, rstd, w, b, [True, False, False])[0]
    with pytest.raises(RuntimeError, match="(?i)not implemented"):
        gx.sum().backward()


@pytest.mark.slow
def test_compiled_call_through_the_cpu_key(cpu_key):
    """torch.compile(fullgraph=True) of labkit.layer_norm reaches the C++ kernels (planned once each), outputs and
    gradients equal to eager's."""
    import labkit

    x, ns, w, b, dy = _inputs(seed=6)
    compiled = torch.compile(labkit.layer_norm, fullgraph=True, dynamic=False)
    got, want = [], []
    for fn, out in ((compiled, got), (torch.nn.functional.layer_norm, want)):
        leaves = [t.clone().requires_grad_() for t in (x, w, b)]
        y = fn(leaves[0], ns, leaves[1], leaves[2])
        out.extend((y, *torch.autograd.grad(y, leaves, dy)))
    for i, (a, e) in enumerate(zip(got, want)):
        assert_bits_equal(a, e, what=f"compiled output {i}")
    assert cpu_key.ops_planned() == (1, 1)
