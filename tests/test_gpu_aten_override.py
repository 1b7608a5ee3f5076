"""labkit.enable() on the GPU (marker gpu): torch's own F.layer_norm, nn.LayerNorm and autograd node, with our
kernels registered in front of torch's CUDA kernels for aten::native_layer_norm(_backward), give torch's bits
(int32 views of y, mean, rstd, dx, dweight, dbias against the same calls with labkit.enable() off): the chain and the
rows layouts, N spread over two dims, no affine, eps 0, a misaligned view and a transposed one (torch serves there),
autocast in bfloat16 (autocast's float32 cast, then ours), vmap, and a CUDA graph captured after a warm-up call."""
import pytest

from bits import assert_bits_equal

pytestmark = pytest.mark.gpu

SHAPES = [  # (shape, normalized dims): each comment says which plan serves on the H200
    ((16, 1 << 20), 1),        # few wide rows: the chain
    ((4096, 768), 1),          # many short rows: a rows layout (or torch's, where the table says so)
    ((33, 4, 4096), 2),        # N over two dims
    ((7, 2048), 1),            # few short rows: torch's kernel by the table
]


def _run(x, ns, w, b, dy, eps):
    import torch

    xs = x.detach().requires_grad_()
    stats = torch.native_layer_norm(xs.detach(), ns, w.detach() if w is not None else None,
                                    b.detach() if b is not None else None, eps)
    y = torch.nn.functional.layer_norm(xs, ns, w, b, eps)
    wanted = [t for t in (xs, w, b) if t is not None]
    return (y.detach(), stats[1], stats[2], *torch.autograd.grad(y, wanted, dy))


def _inputs(shape, dims, seed, affine=True):
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)
    ns = tuple(shape[-dims:])
    x = torch.randn(shape, device="cuda", generator=g) * 3 + 100
    dy = torch.randn(shape, device="cuda", generator=g)
    w = torch.randn(ns, device="cuda", generator=g).requires_grad_() if affine else None
    b = torch.randn(ns, device="cuda", generator=g).requires_grad_() if affine else None
    return x, ns, w, b, dy


@pytest.fixture
def off_after():
    import labkit

    yield
    labkit.disable()


@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("eps", [1e-5, 0.0])
@pytest.mark.parametrize("shape,dims", SHAPES)
def test_enabled_gives_torchs_bits(shape, dims, eps, affine, off_after):
    import labkit

    x, ns, w, b, dy = _inputs(shape, dims, seed=len(shape) + dims, affine=affine)
    want = _run(x, ns, w, b, dy, eps)
    labkit.enable()
    got = _run(x, ns, w, b, dy, eps)
    again = _run(x, ns, w, b, dy, eps)  # the remembered plan
    labkit.disable()
    for name, a, e, a2 in zip(("y", "mean", "rstd", "dx", "dw", "db"), got, want, again):
        assert_bits_equal(a, e, what=name)
        assert_bits_equal(a2, e, what=name + " (second call)")


def test_enabled_serves_our_kernels_at_the_chain_shape(off_after):
    import torch

    import labkit
    from labkit.ops.dropin import host

    x, ns, w, b, dy = _inputs((16, 1 << 20), 1, seed=3)
    if labkit.explain(x, ns, w, b)["path"] == "native":
        pytest.skip("this GPU's table gives the chain shape to torch's kernel")
    labkit.enable()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA], acc_events=True) as prof:
        _run(x, ns, w, b, dy, 1e-5)
        torch.cuda.synchronize()
    names = " ".join(e.key for e in prof.key_averages())
    assert "chain" in names and "vectorized_layer_norm_kernel" not in names, names
    # two forward signatures (the statistics call on detached tensors, the recorded call), one backward
    assert host.module().aten_planned() == (2, 1)


@pytest.mark.parametrize("shape,dims", [((16, 1 << 20), 1), ((4096, 768), 1)])
def test_views_torch_takes_another_path_for(shape, dims, off_after):
    import labkit

    x, ns, w, b, dy = _inputs((shape[0] * 2 + 1,) + shape[1:], dims, seed=5)
    rows, n = shape
    for view in (x.flatten()[1:1 + rows * n].view(shape),  # a 4-byte offset: not 16-byte aligned
                 x[:rows].t().contiguous().t()):  # column-major: not contiguous
        d = dy[: view.shape[0]]
        want = _run(view, ns, w, b, d, 1e-5)
        with labkit.enabled():
            got = _run(view, ns, w, b, d, 1e-5)
        for name, a, e in zip(("y", "mean", "rstd", "dx", "dw", "db"), got, want):
            assert_bits_equal(a, e, what=name)


def test_autocast_bf16(off_after):
    import torch

    import labkit

    x, ns, w, b, dy = _inputs((16, 1 << 20), 1, seed=7)
    xb = x.to(torch.bfloat16)

    def step():
        xs = xb.detach().requires_grad_()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            y = torch.nn.functional.layer_norm(xs, ns, w, b)
        return (y.detach(), *torch.autograd.grad(y, (xs, w, b), dy))

    want = step()
    with labkit.enabled():
        got = step()
    for name, a, e in zip(("y", "dx", "dw", "db"), got, want):
        assert_bits_equal(a, e, what=name)


def test_vmap(off_after):
    import torch

    import labkit

    x, ns, w, b, _ = _inputs((4, 8, 4096), 1, seed=9)
    f = torch.func.vmap(lambda t: torch.nn.functional.layer_norm(t, ns, w, b))
    want = f(x)
    with labkit.enabled():
        got = f(x)
    assert_bits_equal(got, want, what="vmap")


def test_graph_capture_after_warm_up(off_after):
    import torch

    import labkit

    x, ns, w, b, _ = _inputs((16, 1 << 20), 1, seed=11)
    want = torch.nn.functional.layer_norm(x, ns, w, b).detach()
    labkit.enable()
    side = torch.cuda.Stream()
    with torch.no_grad(), torch.cuda.stream(side):
        torch.nn.functional.layer_norm(x, ns, w, b)  # planned outside capture
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=side):
            y = torch.nn.functional.layer_norm(x, ns, w, b)
    g.replay()
    torch.cuda.synchronize()
    assert_bits_equal(y, want, what="replayed y")


def test_a_weight_on_another_device_is_torchs_error(off_after):
    import torch

    import labkit

    x = torch.randn(8, 1024, device="cuda")
    w, b = torch.randn(1024), torch.randn(1024)  # a LayerNorm left on the CPU

    def message():
        with pytest.raises(RuntimeError) as info:
            torch.nn.functional.layer_norm(x, (1024,), w, b)
        return str(info.value).splitlines()[0]

    want = message()
    with labkit.enabled():
        assert message() == want
    torch.cuda.synchronize()  # the context is still usable: nothing launched on a host pointer


def test_a_first_call_under_capture_is_torchs_and_planned_after(off_after):
    import torch

    import labkit
    from labkit.ops.dropin import host

    from labkit.ops.dropin import plan

    x, ns, w, b, dy = _inputs((16, 1 << 20), 1, seed=13)
    want = _run(x, ns, w, b, dy, 1e-5)
    labkit.enable()
    plan.clear()  # a first call: no plan of this signature made by an earlier test (one made outside capture serves)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        xs = x.detach().requires_grad_()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=side):
            y = torch.nn.functional.layer_norm(xs, ns, w, b)
            grads = torch.autograd.grad(y, (xs, w, b), dy)
    g.replay()
    torch.cuda.synchronize()
    assert host.module().aten_planned() == (0, 0)  # nothing kept from inside the capture
    for name, a, e in zip(("y", "dx", "dw", "db"), (y, *grads), (want[0], *want[3:])):
        assert_bits_equal(a, e, what=name)
    got = _run(x, ns, w, b, dy, 1e-5)  # outside capture: planned and kept now
    for name, a, e in zip(("y", "mean", "rstd", "dx", "dw", "db"), got, want):
        assert_bits_equal(a, e, what=name)
    assert host.module().aten_planned()[1] == 1
