"""The drop-in under CUDA autocast: the autocast builds (x of T read as it is, dX rounded to T once:
labkit.ops.dropin.autocast) where the float32 rule picks the chain, else autocast's own float32 cast and our
float32 kernels; forward and backward bits equal to F.layer_norm under the same autocast (bf16 and fp16), eager and
compiled, with the inputs' dtypes torch allows (bf16/fp16 x with float32 parameters, as in an autocast model;
parameters in the low type too; no affine), views off the tensor maps' 16 bytes, and the builds' launches alone
against torch's float32 kernels on x.to(float32) at many shapes, every mask."""
import pytest

import labkit
from bits import assert_bits_equal
from served import skip_unless_ours_serve

pytestmark = pytest.mark.gpu

SHAPES = [(16, 1 << 20), (4, 1 << 22), (2, 64, 4096), (1000, 768), (3, 5 * 1024 + 4), (7, 1001), (1, 256)]


def _inputs(shape, low, params, seed):
    import torch

    g = torch.Generator().manual_seed(seed)
    ns = shape[-1:]
    x = (torch.randn(shape, generator=g) * 2 + 3).to(low).cuda()
    w = b = None
    if params != "none":
        pt = torch.float32 if params == "float32" else low
        w = torch.randn(ns, generator=g).to(pt).cuda()
        b = torch.randn(ns, generator=g).to(pt).cuda()
    dy = torch.randn(shape, generator=g).cuda()
    return x, ns, w, b, dy


def _step(fn, x, ns, w, b, dy, low):
    import torch

    leaves = [t.detach().requires_grad_() if t is not None else None for t in (x, w, b)]
    with torch.autocast("cuda", dtype=low):
        y = fn(leaves[0], ns, leaves[1], leaves[2])
    wanted = [t for t in leaves if t is not None]
    grads = torch.autograd.grad(y, wanted, dy.to(y.dtype))
    return [y.detach(), *grads]


@pytest.mark.parametrize("low", ["bfloat16", "float16"])
@pytest.mark.parametrize("params", ["float32", "low", "none"])
@pytest.mark.parametrize("shape", SHAPES)
def test_autocast_eager_forward_and_backward_bits(shape, params, low):
    import torch

    low = getattr(torch, low)
    args = _inputs(shape, low, params, seed=len(shape) + shape[-1])
    want = _step(torch.nn.functional.layer_norm, *args, low)
    got = _step(labkit.layer_norm, *args, low)
    assert got[0].dtype == want[0].dtype == torch.float32
    for i, (a, e) in enumerate(zip(got, want)):
        assert_bits_equal(a, e, what=f"autocast {low} {shape} {params} output {i}")


@pytest.mark.parametrize("route", ["host", "python"])
def test_autocast_serves_the_autocast_build_at_the_wide_shape(route, monkeypatch):
    """At the L1/40 shape the call under autocast is served by the autocast build (a plan of it, made by this call,
    and no float32 plan: x was not cast), forward and backward: from C++ (the host extension's plan and autograd
    node) where the extension serves, and from Python (the autograd.Function) where it does not."""
    import torch

    from labkit.ops.dropin import autocast, host, plan

    skip_unless_ours_serve(16, 1 << 22)
    if route == "python":
        monkeypatch.setattr(host, "unavailable", lambda index: "turned off by the test")
    elif host.unavailable(torch.cuda.current_device()) is not None:
        pytest.skip(f"the host extension does not serve: {host.unavailable(torch.cuda.current_device())}")
    x, ns, w, b, dy = _inputs((16, 1 << 22), torch.bfloat16, "float32", seed=3)
    plan.clear()
    autocast.clear()
    got = _step(labkit.layer_norm, x, ns, w, b, dy, torch.bfloat16)
    made = [p for p, _ in autocast._plans.values() if p is not None]
    assert got[0].dtype == torch.float32 and got[1].dtype == torch.bfloat16
    assert made and made[0].build == "autocast_bfloat16" and made[0].backward_launches.schedule == "chain"
    assert (made[0].host is not None) == (route == "host")
    assert not [p for p in plan._plans.values() if isinstance(p, plan.KernelPlan)]
    want = _step(torch.nn.functional.layer_norm, x, ns, w, b, dy, torch.bfloat16)
    for i, (a, e) in enumerate(zip(got, want)):
        assert_bits_equal(a, e, what=f"autocast build at L1/40, output {i}")


BUILD_SHAPES = [(1, 512), (3, 1536), (5, 512 * 33), (16, 1 << 20), (2, 1 << 22), (64, 4096), (130, 1024),
                (1, 1 << 24)]


@pytest.mark.parametrize("build", ["autocast_bfloat16", "autocast_float16"])
@pytest.mark.parametrize("affine", ["both", "weight", "none"])
@pytest.mark.parametrize("shape", BUILD_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_autocast_build_keeps_torchs_float32_bits(shape, affine, build):
    """The builds' chain launches alone (whatever the rule would pick): y, mean and rstd against
    torch.native_layer_norm on x.to(float32); dX, dgamma, dbeta against native_layer_norm_backward there, dX cast
    to x's dtype, for every mask."""
    import torch

    from labkit.core.device import current_index, device_info
    from labkit.ops import backward as grad
    from labkit.ops import chain, dtypes
    from labkit.ops.dropin.autocast import AutocastPlan

    rows, n = shape
    low = getattr(torch, dtypes.x_dtype(build))
    g = torch.Generator().manual_seed(rows + n)
    x = (torch.randn(shape, generator=g) * 3 + 40).to(low).cuda()
    w = torch.randn(n, generator=g).cuda() if affine != "none" else None
    b = torch.randn(n, generator=g).cuda() if affine == "both" else None
    dy = torch.randn(shape, generator=g).cuda()
    dev = device_info(current_index(x.device))
    p = AutocastPlan(build, x, (n,), w, b, 1e-5, chain.launches(rows, n, dev, dtype=build),
                     grad.launches(rows, n, dev, "chain", dtype=build), "test")
    xf = x.float()
    want = torch.native_layer_norm(xf, (n,), w, b, 1e-5)
    got = p.forward(x, w, b)
    for name, a, e in zip(("y", "mean", "rstd"), got, want):
        assert_bits_equal(a, e.reshape(a.shape), what=f"{name} {build} {shape} {affine}")
    for mask in ((True, w is not None, b is not None), (True, False, False), (False, w is not None, b is not None)):
        gx, gw, gb = torch.ops.aten.native_layer_norm_backward.default(dy, xf, [n], want[1], want[2], w, b,
                                                                       list(mask))
        out = p.backward(dy, x, want[1].reshape(-1), want[2].reshape(-1), w, b, mask)
        for name, a, e in zip(("dx", "dweight", "dbias"), out, (gx.to(low) if gx is not None else None, gw, gb)):
            assert (a is None) == (e is None), (name, mask)
            if e is not None:
                assert a.dtype == e.dtype
                assert_bits_equal(a, e, what=f"{name} {build} {shape} {affine} mask {mask}")


@pytest.mark.parametrize("low", ["bfloat16", "float16"])
def test_autocast_views_off_16_bytes_and_double_backward(low):
    """x 8 bytes off 16 (the tensor maps' alignment) takes the cast path and keeps the bits; create_graph=True
    differentiates torch's layer_norm of autocast's cast, as eager does."""
    import torch

    low = getattr(torch, low)
    shape = (4, 1 << 20)
    x, ns, w, b, dy = _inputs(shape, low, "float32", seed=5)
    off = torch.cat([x.new_zeros(4), x.reshape(-1)])[4:].view(shape)
    want = _step(torch.nn.functional.layer_norm, off, ns, w, b, dy, low)
    got = _step(labkit.layer_norm, off, ns, w, b, dy, low)
    for i, (a, e) in enumerate(zip(got, want)):
        assert_bits_equal(a, e, what=f"offset view {low} output {i}")

    def twice(fn):
        xl, wl = x.detach().requires_grad_(), w.detach().requires_grad_()
        with torch.autocast("cuda", dtype=low):
            y = fn(xl, ns, wl, b)
        gx, = torch.autograd.grad(y, xl, dy, create_graph=True)
        return [gx.detach(), *torch.autograd.grad(gx.float().square().sum(), (xl, wl))]

    for i, (a, e) in enumerate(zip(twice(labkit.layer_norm), twice(torch.nn.functional.layer_norm))):
        assert_bits_equal(a, e, what=f"double backward {low} output {i}")


@pytest.mark.parametrize("low", ["bfloat16", "float16"])
@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
def test_autocast_compiled_bits(low, mode):
    import torch

    low = getattr(torch, low)
    shape = (4, 1 << 20)
    x, ns, w, b, dy = _inputs(shape, low, "float32", seed=11)
    want = _step(torch.nn.functional.layer_norm, x, ns, w, b, dy, low)
    torch._dynamo.reset()  # each case compiles labkit.layer_norm afresh: no recompile limit across cases
    compiled = torch.compile(labkit.layer_norm, fullgraph=True, mode=mode)
    for _ in range(3):  # reduce-overhead records its graph after warm-up calls
        got = _step(compiled, x, ns, w, b, dy, low)
    for i, (a, e) in enumerate(zip(got, want)):
        assert_bits_equal(a, e, what=f"compiled {mode} autocast {low} output {i}")
