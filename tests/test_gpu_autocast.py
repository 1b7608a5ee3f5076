"""The drop-in under CUDA autocast: autocast's own float32 cast, then our kernels; forward and backward bits equal
to F.layer_norm under the same autocast (bf16 and fp16), eager and compiled, with the inputs' dtypes torch allows
(bf16/fp16 x with float32 parameters, as in an autocast model; parameters in the low type too; no affine)."""
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


def test_autocast_serves_our_kernels_at_the_wide_shape():
    """At the L1/40 row length the call under autocast is planned for the float32 tensors autocast's cast gives, and
    our kernels serve them (a plan of ours, made by this call: torch's F.layer_norm would make none)."""
    import torch

    from labkit.ops.dropin import plan

    skip_unless_ours_serve(16, 1 << 22)
    x, ns, w, b, _ = _inputs((16, 1 << 22), torch.bfloat16, "float32", seed=3)
    plan.clear()
    with torch.autocast("cuda", dtype=torch.bfloat16), torch.no_grad():
        y = labkit.layer_norm(x, ns, w, b)
    made = [p for p in plan._plans.values() if isinstance(p, plan.KernelPlan)]
    assert y.dtype == torch.float32 and made and made[0].shape == tuple(x.shape)


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
