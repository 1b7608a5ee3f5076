"""The drop-in on the GPU: forward/backward bits against nn.LayerNorm at many inputs (our paths and torch's other-path
inputs), every forced path, torch.compile(fullgraph=True), CUDA graph capture, streams, state_dict. ~40 s on an H200."""
import io
import re

import pytest

import labkit
from bits import assert_bits_equal
from labkit.ops.dropin import layer_norm_with, plan
from labkit.ops.paths import PATHS
from labkit.studies import dropin_bits, dropin_sweep

pytestmark = pytest.mark.gpu


def _xwb(shape, seed=0):
    import torch

    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(shape, generator=g) * 3 + 1000).cuda()
    return x, torch.randn(shape[1:], generator=g).cuda(), torch.randn(shape[1:], generator=g).cuda()


@pytest.mark.sm90
def test_identity_cases_forward_and_backward():
    rec = dropin_bits.identity("cuda", compiled=False)
    bad = [(c["case"], c.get("error", "")) for c in rec["cases"] if not (c["forward"] and c["backward"])]
    assert bad == []
    paths = {c["case"]: c["path"] for c in rec["cases"]}
    assert paths["L1/40 row length 2x4194304"] == "chain"
    assert paths["N % 4 != 0 (5x1001)"] == paths["misaligned view"] == paths["bias only"] == "native"


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("shape", [(2, 1 << 18), (3, 512 * 33 + 4), (8, 4096), (1000, 256), (5, 516), (33, 768)])
def test_every_forced_path_keeps_the_bits(path, shape):
    """Where the path's plan takes the shape, its bits; where it does not, forcing it raises that plan's ValueError
    (rows_counted takes rows of at most 1,024 floats)."""
    import torch

    from labkit.core.device import device_info
    from labkit.ops import paths

    x, w, b = _xwb(shape)
    ns = shape[1:]
    try:
        paths.launches(path, shape[0], shape[1], device_info(0))
    except ValueError as exc:
        with pytest.raises(ValueError, match=re.escape(str(exc))):
            layer_norm_with(path, x, ns, w, b)
        return
    y, mean, rstd = torch.native_layer_norm(x, ns, w, b, 1e-5)
    with torch.no_grad():
        assert_bits_equal(layer_norm_with(path, x, ns, w, b), y, what=f"y {shape}", path=path)
        p = plan.get_plan(x, ns, w, b, 1e-5, force=path)
        y2, m2, r2 = p.forward(x, w, b, True)
    assert_bits_equal(y2, y, what=f"plan y {shape}", path=path)
    assert_bits_equal(m2, mean, what=f"plan mean {shape}", path=path)
    assert_bits_equal(r2, rstd, what=f"plan rstd {shape}", path=path)
    assert m2.shape == mean.shape


@pytest.mark.sm90
def test_compiled_fullgraph_forward_and_backward_bits():
    import torch

    shape = (2, 1 << 21)
    x, w, b = _xwb(shape, 1)
    ref = torch.nn.LayerNorm(shape[1:]).cuda()
    with torch.no_grad():
        ref.weight.copy_(w)
        ref.bias.copy_(b)
    ours = torch.compile(labkit.LayerNorm.from_layer_norm(ref), fullgraph=True)
    assert labkit.explain(x, shape[1:], w, b)["path"] == "chain"
    outs = []
    for model in (ref, ours):
        xi = x.clone().requires_grad_()
        y = model(xi)
        y.backward(torch.full_like(y, 0.25) + x / 7)
        outs.append([y.detach(), xi.grad, ref.weight.grad.clone(), ref.bias.grad.clone()])
        ref.zero_grad()
    for name, a, c in zip(("y", "dx", "dweight", "dbias"), *outs):
        assert_bits_equal(c, a, what=f"compiled {name}", path="chain")


def test_reduce_overhead_records_our_kernels():
    """torch.compile(mode="reduce-overhead") records its CUDA graph on static copies of the inputs (which do not
    require grad, where the warm-up's did): the recording must find the plans made at warm-up, so the replayed
    graph runs our kernels both ways, not torch's (at cdb52c9 it captured torch's, 17 ms a step at L1/40)."""
    import torch

    shape = (4, 1 << 20)
    x, w, b = _xwb(shape, 3)
    if labkit.explain(x, shape[1:], w, b)["path"] == "native" or \
            labkit.explain(x, shape[1:], w, b)["backward"] == "native":
        pytest.skip("this GPU's tables give this shape to torch's kernels")
    for t in (x, w, b):
        t.requires_grad_()
    dy = torch.randn_like(x)
    torch._dynamo.reset()
    fn = torch.compile(lambda x, w, b: labkit.layer_norm(x, shape[1:], w, b), fullgraph=True,
                       mode="reduce-overhead")
    want = [torch.nn.functional.layer_norm(x, shape[1:], w, b)]
    want += torch.autograd.grad(want[0], (x, w, b), dy)
    for _ in range(4):
        y = fn(x, w, b)
        got = [y.detach().clone(), *(g.clone() for g in torch.autograd.grad(y, (x, w, b), dy))]
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        y = fn(x, w, b)
        torch.autograd.grad(y, (x, w, b), dy)
        torch.cuda.synchronize()
    names = {e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA}
    assert not any("layer_norm" in n for n in names), sorted(names)
    for name, a, e in zip(("y", "dx", "dweight", "dbias"), got, want):
        assert_bits_equal(a, e, what=f"reduce-overhead {name}")


@pytest.mark.parametrize("shape", [(2, 1 << 22), (3, 512 * 33 + 4), (64, 1024)])
def test_graph_capture_and_replay_after_mutation(shape):
    import torch

    x, w, b = _xwb(shape, 2)
    with torch.no_grad():
        labkit.layer_norm(x, shape[1:], w, b)  # plan made outside capture
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            y = labkit.layer_norm(x, shape[1:], w, b)
        x.copy_(_xwb(shape, 3)[0])
        graph.replay()
        torch.cuda.synchronize()
        assert_bits_equal(y, torch.nn.functional.layer_norm(x, shape[1:], w, b), what=f"graph replay {shape}")


@pytest.mark.sm90
def test_first_call_under_capture_serves_through_torch():
    import torch

    shape = (3, (1 << 22) + 512)  # a signature no other test uses
    x, w, b = _xwb(shape, 4)
    ns = shape[1:]
    with torch.no_grad():
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            y = labkit.layer_norm(x, ns, w, b)
        graph.replay()
        torch.cuda.synchronize()
        assert_bits_equal(y, torch.nn.functional.layer_norm(x, ns, w, b), what="first call under capture")
        assert labkit.explain(x, ns, w, b)["path"] == "chain"  # later calls outside capture use the kernels
        assert_bits_equal(labkit.layer_norm(x, ns, w, b), y, what="later call", path="chain")


@pytest.mark.sm90
@pytest.mark.parametrize("affine", ["weight", "none"])
@pytest.mark.parametrize("n", [1 << 18, 512 * 33 + 4])
def test_chain_without_affine_keeps_the_bits(affine, n):
    import torch

    x, w, _ = _xwb((2, n), 6)
    w = w if affine == "weight" else None
    with torch.no_grad():
        assert_bits_equal(layer_norm_with("chain", x, (n,), w, None), torch.nn.functional.layer_norm(x, (n,), w, None),
                          what=f"y, affine {affine}, n {n}", path="chain")


def test_two_streams_keep_the_bits():
    import torch

    xs = [_xwb((2, 1 << 20), s) for s in range(2)]
    streams = [torch.cuda.Stream() for _ in xs]
    torch.cuda.synchronize()
    outs = []
    with torch.no_grad():
        for (x, w, b), s in zip(xs, streams):
            with torch.cuda.stream(s):
                outs.append([labkit.layer_norm(x, (1 << 20,), w, b) for _ in range(3)])
    torch.cuda.synchronize()
    for (x, w, b), ys in zip(xs, outs):
        ref = torch.nn.functional.layer_norm(x, (1 << 20,), w, b)
        for i, y in enumerate(ys):
            assert_bits_equal(y, ref, what=f"stream call {i}")


def test_state_dict_round_trip():
    import torch

    ours = labkit.LayerNorm(1 << 18).cuda()
    with torch.no_grad():
        ours.weight.normal_()
        ours.bias.normal_()
    buf = io.BytesIO()
    torch.save(ours.state_dict(), buf)
    buf.seek(0)
    ref = torch.nn.LayerNorm(1 << 18).cuda()
    ref.load_state_dict(torch.load(buf))
    x = _xwb((2, 1 << 18), 5)[0]
    with torch.no_grad():
        assert_bits_equal(ours(x), ref(x), what="after a state_dict round trip")


@pytest.mark.sm90
def test_block_swap_and_host_cost_records():
    blk = dropin_bits.block_swap("cuda", compiled=False)
    assert blk["forward_identical"] and blk["grads_identical"] == "13/13" and blk["swapped"] == 2
    assert blk["control_original_twice"] == "13/13" and blk["ln_path"]["path"] != "native"  # ours, on the H200
    host = dropin_sweep.host_cost(calls=200)
    assert host["torch_us"] > 0 and host["dropin_us"] > 0 and host["chain_us"] is not None


def test_the_graph_protocol_plans_by_the_graph_scores_and_keeps_the_bits():
    import torch

    from labkit.ops.dropin import plan

    plan.clear()
    try:
        x, w, b = _xwb((64, 4096), 3)
        with torch.no_grad():
            eager = labkit.explain(x, (4096,), w, b)
            with labkit.dispatch_protocol("graph"):
                graph = labkit.explain(x, (4096,), w, b)
                y = labkit.layer_norm(x, (4096,), w, b)
        measured = not graph["rule_source"].startswith("no dispatch table")  # a GPU without one: torch serves both
        assert not measured or ("graph replay scores" in graph["reason"] and "eager scores" in eager["reason"])
        assert_bits_equal(y, torch.nn.functional.layer_norm(x, (4096,), w, b), what="graph protocol")
    finally:
        plan.clear()
