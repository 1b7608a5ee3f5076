"""The backward kernels on the GPU (marker gpu): dx, dweight and dbias bit-identical (int32 views) to
torch.ops.aten.native_layer_norm_backward on the installed torch at shapes that take every GammaBeta template
(M < 64, < 128, < 256, >= 256, and M > 64K with small N: the partial sums), both row-sum schedules, ragged and
tiny N, no affine, eps 0 and 0.1, non-finite inputs, zero dy and zero gamma; streams, graph capture; the drop-in's
backward through autograd with our kernels forced."""
import pytest

from bits import assert_bits_equal

pytestmark = pytest.mark.gpu


def _inputs(shape, seed=0, kind="normal", affine="both", eps=1e-5):
    import torch

    g = torch.Generator().manual_seed(seed)
    n = shape[1:]
    x = torch.randn(shape, generator=g) * 3 + 1
    dy = torch.randn(shape, generator=g)
    w = torch.randn(n, generator=g) if affine in ("both", "weight") else None
    b = torch.randn(n, generator=g) if affine == "both" else None
    if kind == "nonfinite":
        flat = x.view(-1)
        flat[::97] = float("inf")
        flat[5::101] = float("nan")
    if kind == "zero_dy":
        dy.zero_()
    if kind == "zero_gamma" and w is not None:
        w.zero_()
    cuda = lambda t: None if t is None else t.cuda()  # noqa: E731
    return cuda(x), cuda(dy), cuda(w), cuda(b), eps


def _compare(shape, schedule="auto", **kw):
    import torch

    from labkit.ops import backward

    x, dy, w, b, eps = _inputs(shape, **kw)
    ns = tuple(shape[1:])
    _, mean, rstd = torch.native_layer_norm(x, ns, w, b, eps)
    mask = [True, w is not None, b is not None]
    ref = torch.ops.aten.native_layer_norm_backward(dy, x, list(ns), mean, rstd, w, b, mask)
    got = backward.backward(dy, x, ns, mean, rstd, w, b, tuple(mask), schedule=schedule)
    for name, a, c in zip(("dx", "dweight", "dbias"), got, ref):
        if c is None:
            assert a is None, name
            continue
        assert_bits_equal(a, c, what=f"{name} at {shape} {kw}", path=f"backward schedule {schedule}")


@pytest.mark.parametrize("shape", [
    (1, 1 << 24),          # one row at torch's vectorized limit: chain schedule, G = 1
    (16, 64 * 256 * 256),  # L1/40
    (2, 1 << 20), (3, 512 * 33),
    (5, 1000), (1, 4), (7, 516),                       # ragged N: the rows schedule
    (64, 256), (100, 768), (130, 1000), (255, 512),    # the 8- and 16-group templates
    (300, 4096), (4096, 768), (8192, 1024), (1024, 16384),  # 32 groups
    (70000, 64), (65537, 512), (100000, 256),         # M > 64K: partial sums for small N, 32 groups otherwise
])
def test_backward_bits_equal_torchs(shape):
    _compare(shape)


@pytest.mark.parametrize("shape", [(2, 1 << 20), (4, 512 * 7), (32, 4096)])
@pytest.mark.parametrize("schedule", ["rows", "chain", "split"])
def test_both_row_sum_schedules_keep_the_bits(shape, schedule):
    _compare(shape, schedule)


@pytest.mark.parametrize("shape,schedule", [(s, sch) for s in ((64, 256), (300, 1024), (4096, 768), (1000, 2052))
                                            for sch in ("rows", "split")] + [((64, 4096), "chain")])
def test_the_column_fold_keeps_the_bits(shape, schedule):
    """Shapes whose column pass spreads the template's groups over blocks and folds them (grad_columns_fold),
    after each row-sum schedule (the chain's at 64 rows: its scratch and the blocks' values side by side)."""
    from labkit.core.device import device_info
    from labkit.ops import backward

    import torch

    assert backward.launches(*shape, device_info(torch.cuda.current_device()), schedule).fold is not None
    _compare(shape, schedule)


@pytest.mark.parametrize("split", [1, 2, 4, 8])
def test_every_chain_split_keeps_the_bits(split):
    """Each grad_chain_sums entry point (32 / S chains per block), at the most rows that take it on this GPU and
    a step count that leaves every split a ragged last stage (4,133 steps of 512: 37 past a whole number of 64-,
    128- and 256-step stages, 5 past 32-step ones) and gives S = 4 and 8 their minimum stages."""
    from labkit.core.device import device_info
    from labkit.ops import backward

    dev = device_info(0)
    n = 512 * 4133
    rows = max((r for r in range(1, dev.sm_count + 1) if backward.chain_split(r, n, dev) == split), default=None)
    if rows is None:
        pytest.skip(f"no row count takes split {split} on {dev.sm_count} SMs")
    assert backward.launches(rows, n, dev, "chain").sums.function == backward.chain_function(split, dev)
    _compare((rows, n), "chain")
    _compare((rows, n), "chain", affine="none", seed=1)


@pytest.mark.parametrize("shape", [
    (16, 1 << 22),         # S = 2
    (4, 64 * 256 * 256),   # S = 8, L1/40's row length
    (2, 1 << 20),          # S = 8
    (3, 512 * 33),         # S = 2, one partial stage
    (1, 512 * 1027),       # S = 8: a ring that wraps, then a last stage of 3 steps
    (60, 512 * 37),        # S = 1, a partial last stage
])
def test_the_chain_sums_keep_the_bits_on_either_feed(shape):
    """The chain schedule's row sums as this device plans them: fed by tensor maps on sm_90, by the cp.async ring
    below (grad_chain_sums_ring_*, as many stages as the shared memory holds). On an sm_90 GPU run this file under
    LABKIT_ARCH=compute_80 (a 3-stage ring) and compute_86 (2 stages) to check the ring's bits against torch's."""
    import torch

    from labkit.core.device import device_info
    from labkit.ops import backward

    dev = device_info(torch.cuda.current_device())
    p = backward.launches(*shape, dev, "chain")
    assert p.sums.function == backward.chain_function(backward.chain_split(*shape, dev), dev)
    assert (p.tensor_map is None) == (not dev.tensor_maps) == p.sums.function.startswith("grad_chain_sums_ring_")
    assert p.sums.shared_mem == backward.chain_stages(dev) * backward.CHAIN_STAGE_BYTES
    _compare(shape, "chain")
    _compare(shape, "chain", affine="none", seed=1)


@pytest.mark.parametrize("kind", ["nonfinite", "zero_dy", "zero_gamma"])
@pytest.mark.parametrize("affine", ["both", "weight", "none"])
def test_edge_values_and_affines(kind, affine):
    _compare((300, 1024), kind=kind, affine=affine)
    _compare((2, 1 << 18), kind=kind, affine=affine)


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_other_eps(eps):
    _compare((130, 2048), eps=eps)
    _compare((3, 1 << 19), eps=eps)


def test_refusals_name_the_condition():
    import torch

    from labkit.ops import backward

    x, dy, w, b, eps = _inputs((4, 1024))
    _, mean, rstd = torch.native_layer_norm(x, (1024,), w, b, eps)
    with pytest.raises(ValueError, match="grad_y must be contiguous"):
        backward.backward(dy.t().contiguous().t(), x, (1024,), mean, rstd, w, b)
    with pytest.raises(ValueError, match="multiple of 4"):
        backward.backward(dy[:, :1022], x[:, :1022].contiguous(), (1022,), mean, rstd, None, None)


def test_streams_and_graph_capture():
    import torch

    from labkit.ops import backward

    x, dy, w, b, eps = _inputs((4, 1 << 20))
    ns = (1 << 20,)
    _, mean, rstd = torch.native_layer_norm(x, ns, w, b, eps)
    ref = torch.ops.aten.native_layer_norm_backward(dy, x, list(ns), mean, rstd, w, b, [True, True, True])
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())  # the inputs were made on the default stream
    with torch.cuda.stream(s):
        got = backward.backward(dy, x, ns, mean, rstd, w, b)
    s.synchronize()
    for name, a, c in zip(("dx", "dweight", "dbias"), got, ref):
        assert_bits_equal(a, c, what=f"{name} on a side stream")
    backward.backward(dy, x, ns, mean, rstd, w, b)  # bind outside capture first
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = backward.backward(dy, x, ns, mean, rstd, w, b)
    dy.mul_(0.5)
    g.replay()
    torch.cuda.synchronize()
    ref = torch.ops.aten.native_layer_norm_backward(dy, x, list(ns), mean, rstd, w, b, [True, True, True])
    for name, a, c in zip(("dx", "dweight", "dbias"), out, ref):
        assert_bits_equal(a, c, what=f"{name} after graph replay")


@pytest.mark.parametrize("shape", [(16, 64, 256, 256), (4096, 768), (3, 64, 17, 19), (70000, 64)])
def test_drop_in_training_step_with_our_backward_forced(shape):
    """labkit.layer_norm forward + backward (our kernels forced) against F.layer_norm's, all three gradients."""
    import torch

    import labkit
    from labkit.ops.dropin.plan import forced_backward

    x, dy, w, b, eps = _inputs(shape)
    ns = tuple(shape[1:])
    grads = []
    for fn, path in ((torch.nn.functional.layer_norm, None), (labkit.layer_norm, "auto")):
        xs, ws, bs = (t.clone().requires_grad_() for t in (x, w, b))
        with forced_backward(path):
            y = fn(xs, ns, ws, bs, eps)
            y.backward(dy)
        grads.append([y.detach(), xs.grad, ws.grad, bs.grad])
    for name, c, a in zip(("y", "dx", "dweight", "dbias"), *grads):  # grads: [torch's, ours]
        assert_bits_equal(a, c, what=f"{name} at {shape}, our backward forced")


@pytest.mark.parametrize("shape", [(16, 64, 256, 256), (4096, 768), (8192, 4096), (256, 65536), (3, 64, 17, 19)])
def test_drop_in_hands_training_to_torch_only_where_torch_serves_both_ways(shape):
    """Unforced, the drop-in records torch's own autograd node exactly where the rule gives torch both the forward
    and the backward, and the host extension's C++ node elsewhere (the _LayerNorm node where that does not serve); torch's bits, all three gradients, either way."""
    import torch

    import labkit
    from labkit.ops.dropin import plan

    x, dy, w, b, eps = _inputs(shape)
    ns = tuple(shape[1:])
    grads, nodes = [], []
    for fn in (torch.nn.functional.layer_norm, labkit.layer_norm):
        xs, ws, bs = (t.clone().requires_grad_() for t in (x, w, b))
        y = fn(xs, ns, ws, bs, eps)
        nodes.append(type(y.grad_fn).__name__)
        y.backward(dy)
        grads.append([y.detach(), xs.grad, ws.grad, bs.grad])
    for name, c, a in zip(("y", "dx", "dweight", "dbias"), *grads):  # grads: [torch's, ours]
        assert_bits_equal(a, c, what=f"{name} at {shape}")
    served = plan.get_plan(x, ns, w.requires_grad_(), b.requires_grad_(), eps, True)
    torch_both = served.path == "native" and plan.backward_plan(x, ns, w, b) is None
    ours = "CppFunction" if served.host is not None else "_LayerNormBackward"  # the host extension's node, or Python's
    assert nodes[1] == (nodes[0] if torch_both else ours), (shape, served.reason)


@pytest.mark.parametrize("shape", [(4096, 768), (8192, 1024), (65536, 256), (70000, 64), (300, 70000)])
def test_split_schedule_keeps_the_bits(shape):
    _compare(shape, "split")


def _split_entry_cases():
    """Per grad_rows_fused entry point: the longest row it holds, a ragged one, and for the largest a longer row
    (its tail re-reads the rest); row counts 1 and 3."""
    from labkit.ops import backward

    cases = []
    for k in backward.FUSED_VECTORS:
        full = 4 * backward.SUMS_THREADS * k
        cases += [(1, full), (3, full - 12)]
    return cases + [(3, 4 * backward.SUMS_THREADS * backward.FUSED_VECTORS[-1] + 20), (2, 1 << 17)]


@pytest.mark.parametrize("shape", _split_entry_cases(), ids=lambda s: "x".join(map(str, s)))
def test_every_split_entry_point_keeps_the_bits(shape):
    _compare(shape, "split")


def test_the_split_cases_reach_every_entry_point():
    from labkit.ops import backward

    reached = {backward.fused_function(n) for _, n in _split_entry_cases()}
    assert reached == {f"grad_rows_fused_reg{k}" for k in backward.FUSED_VECTORS}
