"""The registered ops' CUDA kernels (host/layer_norm.cpp, "the registered ops"), registered when the host extension
loads: labkit::layer_norm and labkit::layer_norm_backward called as a compiled graph calls them give the bits of
torch's native_layer_norm(_backward) (int32 views; empty tensors for gradients not asked for) at the chain, a rows
layout, N over two dims, no affine and a misaligned view; each signature is planned once; the Python runner
serves under host.off."""
import pytest

from bits import assert_bits_equal

pytestmark = pytest.mark.gpu

SHAPES = [((16, 1 << 20), 1), ((4096, 768), 1), ((33, 4, 4096), 2), ((7, 2048), 1), ((5, 1001), 1)]


def _inputs(shape, dims, seed, affine=True):
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)
    ns = list(shape[-dims:])
    x = torch.randn(shape, device="cuda", generator=g) * 3 + 100
    dy = torch.randn(shape, device="cuda", generator=g)
    w = torch.randn(ns, device="cuda", generator=g) if affine else None
    b = torch.randn(ns, device="cuda", generator=g) if affine else None
    return x, ns, w, b, dy


def _both(x, ns, w, b, dy):
    import torch

    y, mean, rstd = torch.ops.labkit.layer_norm(x, ns, w, b, 1e-5)
    mask = [True, w is not None, b is not None]
    grads = torch.ops.labkit.layer_norm_backward(dy, x, ns, mean, rstd, w, b, mask)
    ref = torch.ops.aten.native_layer_norm(x, ns, w, b, 1e-5)
    ref_grads = torch.ops.aten.native_layer_norm_backward(dy, x, ns, ref[1], ref[2], w, b, mask)
    return (y, mean, rstd, *grads), (*ref, *ref_grads)


def _check(got, want, what):
    for name, a, e in zip(("y", "mean", "rstd", "dx", "dw", "db"), got, want):
        if e is None:
            assert a.numel() == 0, f"{what} {name}: not asked for, so empty"
        else:
            assert_bits_equal(a, e, what=f"{what} {name}")


def test_served_when_the_extension_loads():
    from labkit.ops.dropin import host

    m = host.module()
    assert m is not None and m.ops_served()


@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("shape,dims", SHAPES)
def test_op_kernels_keep_torchs_bits(shape, dims, affine):
    x, ns, w, b, dy = _inputs(shape, dims, seed=sum(shape), affine=affine)
    got, want = _both(x, ns, w, b, dy)
    _check(got, want, f"{shape} affine={affine}")


def test_misaligned_view_and_planned_once():
    import torch

    from labkit.ops.dropin import host, plan

    plan.clear()
    x, ns, w, b, dy = _inputs((16, (1 << 20) + 1), 1, seed=5)
    xv, dyv = x[:, 1:], dy[:, 1:]
    wv, bv = w[1:], b[1:]
    got, want = _both(xv, [1 << 20], wv, bv, dyv)
    _check(got, want, "misaligned view")
    before = host.module().ops_planned()
    x2, ns2, w2, b2, dy2 = _inputs((16, 1 << 20), 1, seed=6)
    _both(x2, ns2, w2, b2, dy2)
    after_first = host.module().ops_planned()
    _both(x2, ns2, w2, b2, dy2)
    assert host.module().ops_planned() == after_first and after_first[0] == before[0] + 1
    torch.cuda.synchronize()


def test_python_runner_serves_under_host_off():
    from labkit.ops.dropin import host, plan

    plan.clear()
    x, ns, w, b, dy = _inputs((16, 1 << 20), 1, seed=8)
    with host.off():
        got, want = _both(x, ns, w, b, dy)
        assert host.module().ops_planned() == (0, 0)  # Python's runner: asked each call, never kept
    _check(got, want, "host.off")
    plan.clear()
