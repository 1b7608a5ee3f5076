"""The host extension on the GPU (marker gpu): it serves here, its C++ autograd node records the drop-in's training
calls, and what it computes is torch's, bit for bit (int32 views of y and of dx, dweight, dbias) against
F.layer_norm and against the same plans run from Python — every forward path and backward schedule forced, affine
present or absent, eps 0 and 0.1, a misaligned view (torch's other path), double backward, a side stream, many
threads, and a training step captured in a CUDA graph and replayed."""
import threading

import pytest

from bits import assert_bits_equal

pytestmark = pytest.mark.gpu
STEP = ("y", "dx", "dweight", "dbias")  # what _step returns, as far as the affine goes


def _assert_same(a, b, what="", path=None):
    """Both None, or one dtype, one shape and the same bits (tests/bits.py)."""
    __tracebackhide__ = True
    if a is None or b is None:
        assert a is None and b is None, f"{what}: one is None, the other {a if b is None else b}"
    else:
        assert_bits_equal(a, b, what=what, path=path)


def _step(fn, x, ns, w, b, dy, eps):
    import torch

    xs = x.detach().requires_grad_()
    wanted = [t for t in (xs, w, b) if t is not None]
    y = fn(xs, ns, w, b, eps)
    grads = torch.autograd.grad(y, wanted, dy)
    # y kept without its graph: a live graph keeps the leaves' AccumulateGrad nodes, and their streams, alive
    return (y.detach(), *grads)


def _node(fn, x, ns, w, b, eps) -> str:
    """The autograd node a call of `fn` records."""
    return type(fn(x.detach().requires_grad_(), ns, w, b, eps).grad_fn).__name__


def _inputs(shape, seed=0, affine=True):
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)
    ns = tuple(shape[1:])
    x = torch.randn(shape, device="cuda", generator=g) * 2 + 0.5
    dy = torch.randn(shape, device="cuda", generator=g)
    w = (torch.randn(ns, device="cuda", generator=g) + 1).requires_grad_() if affine else None
    b = torch.randn(ns, device="cuda", generator=g).requires_grad_() if affine else None
    return x, ns, w, b, dy


@pytest.fixture
def fresh_plans():
    from labkit.ops.dropin import plan

    plan.clear()
    yield
    plan.clear()


def test_the_host_extension_serves_on_this_gpu():
    from labkit.ops.dropin import host

    assert host.unavailable(0) is None


@pytest.mark.parametrize("forward", ["reference_order", "chain", "rows_fused", None])
@pytest.mark.parametrize("backward", ["chain", "rows", "split", "native"])
@pytest.mark.parametrize("shape,affine,eps", [((16, 1 << 20), True, 1e-5), ((64, 4096), False, 0.0),
                                              ((3, 17 * 512), True, 0.1), ((300, 1028), True, 1e-5)])
def test_training_calls_keep_torchs_bits_through_the_cpp_node(fresh_plans, forward, backward, shape, affine, eps):
    import torch

    from labkit.ops.dropin import host
    from labkit.ops.dropin import plan as plans

    x, ns, w, b, dy = _inputs(shape, affine=affine)
    ref = _step(torch.nn.functional.layer_norm, x, ns, w, b, dy, eps)
    with plans.forced_backward(backward):
        try:
            p = plans.get_plan(x, ns, w, b, eps, True, force=forward)
        except ValueError:
            pytest.skip(f"{forward} cannot take {shape}")
        if p.host is None:
            assert p.torch_trains, (forward, backward, shape)  # torch both ways: nothing for the node to do
            return
        train = lambda xs, ns_, w_, b_, e: host.module().train(p.host, xs, w_, b_)  # noqa: E731
        got = _step(train, x, ns, w, b, dy, eps)
        assert _node(train, x, ns, w, b, eps) == "CppFunction"
    for name, a, c in zip(STEP, got, ref):
        _assert_same(a, c, what=f"{name}: backward {backward}, {shape}, eps {eps}", path=forward)


def test_the_python_runner_and_the_cpp_node_agree(fresh_plans):
    import torch

    import labkit
    from labkit.ops.dropin import host, plan

    x, ns, w, b, dy = _inputs((8, 1 << 18))
    with plan.forced_backward("rows"):  # ours on every arch, whatever the device's table says
        fast = _step(labkit.layer_norm, x, ns, w, b, dy, 1e-5)
        assert _node(labkit.layer_norm, x, ns, w, b, 1e-5) == "CppFunction"
        plan.clear()
        with host.off():
            slow = _step(labkit.layer_norm, x, ns, w, b, dy, 1e-5)
            assert _node(labkit.layer_norm, x, ns, w, b, 1e-5) == "_LayerNormBackward"
    plan.clear()
    ref = _step(torch.nn.functional.layer_norm, x, ns, w, b, dy, 1e-5)
    for name, a, c, r in zip(STEP, fast, slow, ref):
        _assert_same(a, c, what=f"{name}: C++ node vs Python runner")
        _assert_same(a, r, what=f"{name}: C++ node vs torch")


def test_a_misaligned_view_takes_torchs_other_path_in_cpp(fresh_plans):
    import torch

    import labkit

    base, ns, w, b, _ = _inputs((16, 1 << 16))
    flat = base.reshape(-1)
    x = flat[1:1 + 16 * ((1 << 16) - 4)].view(16, (1 << 16) - 4)  # 4 bytes past an aligned address
    w2, b2 = w[:-4].detach().clone().requires_grad_(), b[:-4].detach().clone().requires_grad_()
    dy = torch.randn_like(x)
    got = _step(labkit.layer_norm, x, x.shape[1:], w2, b2, dy, 1e-5)
    ref = _step(torch.nn.functional.layer_norm, x, x.shape[1:], w2, b2, dy, 1e-5)
    for name, a, c in zip(STEP, got, ref):
        _assert_same(a, c, what=f"{name}, misaligned view")


@pytest.mark.parametrize("forward", ["chain", "rows_fused"])
def test_torchs_backward_reads_the_statistics_our_forward_packed(fresh_plans, forward):
    """Where our backward is planned, our training forward keeps mean and rstd in one buffer behind its scratch;
    where that backward refuses the call (dy 4 bytes past an aligned address) the node hands torch's backward views
    of that buffer. Where torch's backward is planned (forced here), mean and rstd are tensors of their own. Torch's
    bits every way, and ours again on the next, aligned call."""
    import torch

    from labkit.ops.dropin import host
    from labkit.ops.dropin import plan as plans

    x, ns, w, b, dy = _inputs((16, 1 << 16))
    base = torch.randn(x.numel() + 1, device="cuda")
    shifted = base[1:].view(x.shape)
    for backward, grad in (("rows", shifted), ("native", dy), ("rows", dy)):
        with plans.forced_backward(backward):
            try:
                p = plans.get_plan(x, ns, w, b, 1e-5, True, force=forward)
            except ValueError:
                pytest.skip(f"{forward} cannot take the shape here")
            assert p.host is not None and p.host.has_forward
            train = lambda xs, ns_, w_, b_, e: host.module().train(p.host, xs, w_, b_)  # noqa: E731
            got = _step(train, x, ns, w, b, grad, 1e-5)
        ref = _step(torch.nn.functional.layer_norm, x, ns, w, b, grad, 1e-5)
        for name, a, c in zip(STEP, got, ref):
            _assert_same(a, c, what=f"{name}: backward {backward}, dy at {grad.data_ptr() % 16} mod 16", path=forward)


def test_double_backward_through_the_cpp_node(fresh_plans):
    import torch

    import labkit

    x, ns, w, b, dy = _inputs((4, 1 << 16))
    out = []
    for fn in (labkit.layer_norm, torch.nn.functional.layer_norm):
        xs = x.detach().requires_grad_()
        gx, = torch.autograd.grad(fn(xs, ns, w, b, 1e-5), xs, dy, create_graph=True)
        out.append((gx, *torch.autograd.grad((gx * gx).sum(), (xs, w))))  # dx does not depend on the bias
    for name, a, c in zip(("dx", "d2x", "d2weight"), *out):
        _assert_same(a, c, what=name)


def test_side_streams_and_threads_get_their_own_bits(fresh_plans):
    import torch

    import labkit

    x, ns, w, b, dy = _inputs((16, 1 << 18))
    ref = _step(torch.nn.functional.layer_norm, x, ns, w, b, dy, 1e-5)
    torch.cuda.synchronize()
    results, errors = {}, []

    def work(i):
        try:
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.default_stream())
            with torch.cuda.stream(s):
                got = [_step(labkit.layer_norm, x, ns, w, b, dy, 1e-5) for _ in range(5)][-1]
            s.synchronize()
            results[i] = got
        except Exception as exc:  # reported below, with the thread's index
            errors.append((i, repr(exc)))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for i in range(4):
        for name, a, c in zip(STEP, results[i], ref):
            _assert_same(a, c, what=f"{name}, thread {i}")


def test_a_training_step_captured_in_a_graph_replays_torchs_bits(fresh_plans):
    import torch

    import labkit

    from labkit.ops.dropin import plan

    x, ns, w, b, dy = _inputs((16, 1 << 20))
    ref = _step(torch.nn.functional.layer_norm, x, ns, w, b, dy, 1e-5)
    xs = x.detach().clone().requires_grad_()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with plan.forced_backward("rows"):  # ours on every arch, whatever the device's table says
        with torch.cuda.stream(s):
            for _ in range(2):  # plans and programs are made outside capture
                torch.autograd.grad(labkit.layer_norm(xs, ns, w, b, 1e-5), (xs, w, b), dy)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            y = labkit.layer_norm(xs, ns, w, b, 1e-5)
            grads = torch.autograd.grad(y, (xs, w, b), dy)
    g.replay()
    torch.cuda.synchronize()
    assert type(y.grad_fn).__name__ == "CppFunction"
    y = y.detach()
    for name, a, c in zip(STEP, (y, *grads), ref):
        _assert_same(a, c, what=f"{name} after graph replay")


@pytest.mark.parametrize("shape", [(16, 1 << 16), (4096, 768), (3, 512 * 33 + 4), (8, 255)])
def test_decided_signatures_are_served_from_cpp_with_torchs_bits(fresh_plans, shape):
    """The fast path (labkit.ops.dropin.host.fast): once get_plan has decided a signature, the next calls, with and
    without grad, come from C++ (our forward, the C++ node, or torch's own call) with torch's bits; a misaligned
    view of a remembered signature takes torch's other path there too."""
    import torch

    import labkit
    from labkit.ops.dropin import host, plan

    host.module()
    x, ns, w, b, dy = _inputs(shape, seed=5)
    fast = host.fast[0]
    assert fast is not None
    with torch.no_grad():
        labkit.layer_norm(x, ns, w, b)
        y = fast(x, ns, w, b, 1e-5)
    assert y is not None
    _assert_same(y, torch.nn.functional.layer_norm(x, ns, w, b), what=f"fast no-grad y, {shape}")
    _step(labkit.layer_norm, x, ns, w, b, dy, 1e-5)  # decides the grad signature
    xs = x.detach().requires_grad_()
    y = fast(xs, ns, w, b, 1e-5)
    torchs = plan.get_plan(xs, ns, w, b, 1e-5, True).torch_trains
    assert y is not None and type(y.grad_fn).__name__ == ("NativeLayerNormBackward0" if torchs else "CppFunction")
    got = (y.detach(), *torch.autograd.grad(y, (xs, w, b), dy))
    for name, a, c in zip(STEP, got, _step(torch.nn.functional.layer_norm, x, ns, w, b, dy, 1e-5)):
        _assert_same(a, c, what=f"fast {name} with grad, {shape}")
    flat = torch.empty(x.numel() + 1, device="cuda")
    shifted = flat[1:].view(x.shape).copy_(x)  # same signature, 4 bytes past an aligned address
    with torch.no_grad():
        _assert_same(fast(shifted, ns, w, b, 1e-5), torch.nn.functional.layer_norm(shifted, ns, w, b),
                     what=f"misaligned y, {shape}")
        neg = torch._neg_view(x)  # memory holding -x: another signature, which torch's kernel serves
        _assert_same(labkit.layer_norm(neg, ns, w, b), torch.nn.functional.layer_norm(neg, ns, w, b),
                     what=f"negated view y, {shape}")
    ours = labkit.layer_norm(xs, ns, w, b)
    ref = torch.nn.functional.layer_norm(xs, ns, w, b)
    got = torch.autograd.grad(ours, (xs, w, b), torch._neg_view(dy))  # a negated grad_y goes to torch's backward
    for name, a, c in zip(STEP[1:], got, torch.autograd.grad(ref, (xs, w, b), torch._neg_view(dy))):
        _assert_same(a, c, what=f"{name} for a negated dy, {shape}")


def test_any_sequence_of_calls_keeps_torchs_outputs_and_gradients_on_the_gpu():
    """tests/test_fast_path.py's sequences on CUDA tensors, where the fast path serves our forward and the C++ node
    (shapes our kernels take) beside torch's call: torch's bits, and autograd recorded exactly where F.layer_norm
    records it, with torch's gradients."""
    import torch
    from hypothesis import given, settings, strategies as st

    import labkit
    from labkit.ops.dropin import host, plan

    shapes = [(16, 1 << 16), (4096, 768), (3, 512 * 33 + 4), (64, 4096), (8, 255)]

    @settings(max_examples=40, deadline=None)
    @given(st.lists(st.tuples(st.sampled_from(range(len(shapes))), st.sampled_from(["no_grad", "grad", "inference"]),
                              st.booleans(), st.booleans(), st.sampled_from([None, "weight", "bias", "both"])),
                    min_size=1, max_size=12))
    def run(calls):
        host.module()
        plan.clear()
        for which, mode, x_grad, w_grad, affine in calls:
            x, ns, w, b, dy = _inputs(shapes[which], seed=which)
            w = w.detach().requires_grad_(w_grad) if affine in ("weight", "both") else None
            b = b if affine in ("bias", "both") else None
            x.requires_grad_(x_grad)
            ctx = {"no_grad": torch.no_grad, "grad": torch.enable_grad, "inference": torch.inference_mode}[mode]
            with ctx():
                y = labkit.layer_norm(x, ns, w, b)
                ref = torch.nn.functional.layer_norm(x, ns, w, b)
            _assert_same(y, ref, what=f"y, {mode}, affine {affine}, shape {shapes[which]}")
            assert y.requires_grad == ref.requires_grad
            if ref.requires_grad:
                wanted = [t for t in (x, w, b) if t is not None and t.requires_grad]
                for i, (a, c) in enumerate(zip(torch.autograd.grad(y, wanted, dy),
                                               torch.autograd.grad(ref, wanted, dy))):
                    _assert_same(a, c, what=f"gradient {i}, affine {affine}, shape {shapes[which]}")
        plan.clear()
    run()
