"""labkit.fused_layer_norm on the GPU: the fused output (int32 views) equal to torch's eager chain
F.layer_norm -> activation -> * scale -> + residual on a matrix of shapes (few wide rows, many rows of 64 to 16384
floats, ragged N), distributions, eps and affine or not; gradients through autograd equal to the chain's; and the
inputs our kernels do not take (misaligned, non-contiguous) served by torch's chain with its bits."""
import pytest
import torch

from bits import assert_bits_equal
from chains import eager_chain
from labkit.ops import epilogue as ep
from labkit.ops import paths
from labkit.ops.dropin.fused import explain_fused, fused_layer_norm

pytestmark = pytest.mark.gpu

SHAPES = {  # name: (x's shape, normalized_shape)
    "L1/40 16x4194304": ((16, 64, 256, 256), (64, 256, 256)),  # the chain's shape: few wide rows
    "4x1048576": ((4, 1 << 20), (1 << 20,)),
    "2x512000": ((2, 512 * 1000), (512 * 1000,)),
    "4096x64": ((4096, 64), (64,)),  # many short rows: rows_fused's warp layout
    "8192x768": ((8192, 768), (768,)),
    "1024x4096": ((1024, 4096), (4096,)),  # rows_fused's block layout
    "512x16384": ((512, 16384), (16384,)),  # the largest row its registers hold
    "3000x1000": ((3000, 1000), (1000,)),  # ragged N: not a multiple of 128 floats
    "1000x3000": ((1000, 3000), (3000,)),
}

EPILOGUES = {  # what the issue names (task 34's GELU + scale first) and each op alone
    "gelu*scale": ep.Epilogue("gelu", 2.0),
    "gelu_tanh": ep.Epilogue("gelu_tanh"),
    "relu": ep.Epilogue("relu"),
    "silu*0.5": ep.Epilogue("silu", 0.5),
    "*-3": ep.Epilogue(scale=-3),
    "+residual": ep.Epilogue(residual=True),
    "gelu*0.75+residual": ep.Epilogue("gelu", 0.75, True),
}

DISTRIBUTIONS = {  # name: x from a generator
    "randn": lambda shape, g: torch.randn(shape, device="cuda", generator=g),
    "rand": lambda shape, g: torch.rand(shape, device="cuda", generator=g),
    "randn*100+5": lambda shape, g: torch.randn(shape, device="cuda", generator=g) * 100 + 5,
}


def _inputs(shape, ns, dist: str, seed: int):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = DISTRIBUTIONS[dist](shape, g)
    w = torch.randn(ns, device="cuda", generator=g)
    b = torch.randn(ns, device="cuda", generator=g)
    r = torch.randn(shape, device="cuda", generator=g)
    return x, w, b, r


def _call(x, ns, w, b, eps, e: ep.Epilogue, r):
    return fused_layer_norm(x, ns, w, b, eps, activation=e.activation, scale=e.scale,
                            residual=r if e.residual else None)


def _path(x, ns, w, b, eps, e: ep.Epilogue, r):
    return explain_fused(x, ns, w, b, eps, activation=e.activation, scale=e.scale,
                         residual=r if e.residual else None)


@pytest.mark.parametrize("epilogue", list(EPILOGUES))
@pytest.mark.parametrize("shape", list(SHAPES))
def test_forward_bits_equal_the_eager_chain(shape, epilogue):
    xs, ns = SHAPES[shape]
    e = EPILOGUES[epilogue]
    for seed, dist in enumerate(DISTRIBUTIONS):
        x, w, b, r = _inputs(xs, ns, dist, seed)
        for eps in (1e-5, 1e-3):
            for affine in (True, False):
                wa, ba = (w, b) if affine else (None, None)
                where = _path(x, ns, wa, ba, eps, e, r)
                assert where["path"] in ep.PATHS, where  # our fused kernels, not torch's chain
                with torch.no_grad():
                    out = _call(x, ns, wa, ba, eps, e, r)
                assert_bits_equal(out, eager_chain(x, ns, wa, ba, eps, e, r), path=where["path"],
                                  what=f"{shape} {epilogue} {dist} eps={eps} affine={affine}")
        del x, w, b, r


@pytest.mark.parametrize("epilogue", list(EPILOGUES))
@pytest.mark.parametrize("shape", ["L1/40 16x4194304", "2x512000", "4096x64", "8192x768", "512x16384", "3000x1000"])
@pytest.mark.parametrize("affine", [True, False])
def test_gradients_equal_the_eager_chains(shape, epilogue, affine):
    """d sum(out * g) / d (x, weight, bias, residual) for a random g, through autograd."""
    xs, ns = SHAPES[shape]
    e = EPILOGUES[epilogue]
    x, w, b, r = _inputs(xs, ns, "randn", 7)
    g = torch.randn(xs, device="cuda", generator=torch.Generator(device="cuda").manual_seed(8))
    wanted = [x, w, b, r] if affine else [x, r]

    def grads(fn):
        leaves = [t.clone().requires_grad_() for t in wanted]
        xa, ra = leaves[0], leaves[-1]
        wa, ba = (leaves[1], leaves[2]) if affine else (None, None)
        out = fn(xa, ns, wa, ba, 1e-5, e, ra)
        used = leaves if e.residual else leaves[:-1]
        return torch.autograd.grad((out * g).sum(), used)

    where = _path(x, ns, w if affine else None, b if affine else None, 1e-5, e, r)
    assert where["path"] in ep.PATHS, where
    names = (["dx", "dweight", "dbias"] if affine else ["dx"]) + (["dresidual"] if e.residual else [])
    for name, got, want in zip(names, grads(_call), grads(eager_chain)):
        assert_bits_equal(got, want, path=where["path"], what=f"{name} {shape} {epilogue} affine={affine}")


@pytest.mark.parametrize("path", ["chain"])  # skipped where this GPU is not offered the chain (conftest)
def test_the_l1_40_shape_takes_the_chain(path):
    """Sixteen rows of 4,194,304 floats: the chain's statistics and its output pass with the epilogue."""
    xs, ns = SHAPES["L1/40 16x4194304"]
    x, w, b, r = _inputs(xs, ns, "randn", 0)
    assert _path(x, ns, w, b, 1e-5, EPILOGUES["gelu*scale"], r)["path"] == path


def test_misaligned_and_strided_inputs_get_torchs_chain_with_its_bits():
    rows, n = 64, 4096
    e = ep.Epilogue("gelu", 2.0, True)
    base = torch.randn(rows * n + 8, device="cuda")
    w, b = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    r = torch.randn(rows, n, device="cuda")
    offset = base[1:1 + rows * n].view(rows, n)  # contiguous, 4 bytes off float4 alignment
    wide = torch.randn(rows, n + 4, device="cuda")
    sliced = wide[:, 1:n + 1]  # a strided view: torch's kernel copies it first, ours refuse it
    cases = {
        "storage offset view": (offset, r, paths.NATIVE),
        "sliced view": (sliced, r, paths.NATIVE),
        "sliced then contiguous": (sliced.contiguous(), r, "ours"),  # a fresh, aligned buffer: fused
        "misaligned residual": (torch.randn(rows, n, device="cuda"), base[1:1 + rows * n].view(rows, n),
                                paths.NATIVE),
        "transposed residual": (torch.randn(rows, n, device="cuda"), torch.randn(n, rows, device="cuda").t(),
                                paths.NATIVE),
    }
    for name, (x, res, expected) in cases.items():
        where = _path(x, (n,), w, b, 1e-5, e, res)["path"]
        assert (where in ep.PATHS) if expected == "ours" else where == expected, (name, where)
        with torch.no_grad():
            assert_bits_equal(_call(x, (n,), w, b, 1e-5, e, res), eager_chain(x, (n,), w, b, 1e-5, e, res),
                              what=name, path=where)


def test_n_not_a_multiple_of_four_gets_torchs_chain():
    x = torch.randn(33, 1001, device="cuda")
    e = ep.Epilogue("silu", 1.5)
    assert _path(x, (1001,), None, None, 1e-5, e, None)["path"] == paths.NATIVE
    with torch.no_grad():
        assert_bits_equal(_call(x, (1001,), None, None, 1e-5, e, None), eager_chain(x, (1001,), None, None, 1e-5, e))


def test_a_captured_graph_replays_the_fused_bits():
    """A plan made outside capture launches inside it: replay gives the eager chain's bits on new data."""
    xs, ns = SHAPES["8192x768"]
    x, w, b, r = _inputs(xs, ns, "randn", 11)
    e = ep.Epilogue("gelu", 2.0, True)
    with torch.no_grad():
        _call(x, ns, w, b, 1e-5, e, r)  # the plan, the module load and the shared-memory opt-in, outside capture
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = _call(x, ns, w, b, 1e-5, e, r)
        x.copy_(torch.rand_like(x))
        graph.replay()
        torch.cuda.synchronize()
        assert_bits_equal(out, eager_chain(x, ns, w, b, 1e-5, e, r), what="graph replay")


@pytest.mark.parametrize("epilogue", list(EPILOGUES))
def test_the_epilogue_check_passes_on_this_install(epilogue):
    """The check every fused plan's first use runs (fused._check, called here directly, not from its cache): each
    path carrying the epilogue against torch's chain. Its message names the first mismatch where there is one."""
    from labkit.ops.dropin import fused

    assert fused._check(torch.cuda.current_device(), EPILOGUES[epilogue]) is None


def test_torch_compile_keeps_the_eager_chains_bits():
    """Compiled (Inductor), the call is the opaque op labkit::fused_layer_norm, served by the same fused plans:
    forward and gradients keep the eager chain's bits, where Inductor's own code for the chain would not promise to."""
    xs, ns = SHAPES["8192x768"]
    e = EPILOGUES["gelu*0.75+residual"]
    x, w, b, r = _inputs(xs, ns, "randn", 21)
    g = torch.randn(xs, device="cuda", generator=torch.Generator(device="cuda").manual_seed(22))
    torch._dynamo.reset()
    compiled = torch.compile(lambda *t: _call(t[0], ns, t[1], t[2], 1e-5, e, t[3]), fullgraph=True)
    leaves = [t.clone().requires_grad_() for t in (x, w, b, r)]
    out = compiled(*leaves)
    got = torch.autograd.grad((out * g).sum(), leaves)
    ref_leaves = [t.clone().requires_grad_() for t in (x, w, b, r)]
    ref = eager_chain(ref_leaves[0], ns, ref_leaves[1], ref_leaves[2], 1e-5, e, ref_leaves[3])
    assert_bits_equal(out, ref, what="compiled forward")
    for name, a, want in zip(("dx", "dweight", "dbias", "dresidual"), got,
                             torch.autograd.grad((ref * g).sum(), ref_leaves)):
        assert_bits_equal(a, want, what=f"compiled {name}")
    torch._dynamo.reset()
