"""labkit.fused_layer_norm on a CPU: the Epilogue's options and refusals, the paths that carry the epilogue and the
program rewrite that puts it in the launch writing y, the API's ValueErrors, and torch's chain served on CPU tensors
with its bits (forward and autograd). The kernels' bits are tests/test_gpu_epilogue.py's."""
import contextlib

import pytest
import torch
import torch.nn.functional as F

from bits import assert_bits_equal
from chains import eager_chain
from labkit.core import compile as kc
from labkit.core.device import Device
from labkit.core.program import F32, Ptr
from labkit.ops import epilogue as ep
from labkit.ops import paths
from labkit.ops.dropin.fused import explain_fused, fused_layer_norm

H200 = Device("NVIDIA H200", 90, 132, 227 * 1024, 65535)
A100 = Device("NVIDIA A100", 80, 108, 163 * 1024, 65535)

EPILOGUES = [ep.Epilogue("gelu", 2.0), ep.Epilogue("gelu_tanh"), ep.Epilogue("relu"), ep.Epilogue("silu", 0.5),
             ep.Epilogue(scale=3.0), ep.Epilogue(residual=True), ep.Epilogue("gelu", 0.75, True)]


def test_options_name_each_op_and_leave_the_scale_an_argument():
    assert ep.Epilogue("gelu", 2.0).options == ("-DEPILOGUE", "-DEPILOGUE_ACT=1", "-DEPILOGUE_SCALE")
    assert ep.Epilogue("silu", residual=True).options == ("-DEPILOGUE", "-DEPILOGUE_ACT=4", "-DEPILOGUE_RESIDUAL")
    assert ep.Epilogue(scale=2).options == ep.Epilogue(scale=3.5).options  # one cubin for every scale
    assert ep.Epilogue(scale=2) == ep.Epilogue(scale=2.0)  # one plan for 2 and 2.0
    assert ep.Epilogue().empty and not ep.Epilogue(residual=True).empty


@pytest.mark.parametrize("bad, match", [
    (dict(activation="tanh"), "activation must be one of"),
    (dict(activation="GELU"), "activation must be one of"),
    (dict(scale="2"), "scale must be a real number"),
    (dict(scale=True), "scale must be a real number"),  # a bool is an int to Python, not a scale to a reader
    (dict(scale=torch.tensor(2.0)), "scale must be a real number"),  # a tensor scale is another mul kernel
])
def test_epilogue_refuses_what_it_cannot_fuse(bad, match):
    with pytest.raises(ValueError, match=match):
        ep.Epilogue(**bad)


@pytest.mark.parametrize("device", [H200, A100], ids=["sm_90", "sm_80"])  # the chain's tma and ring blockings
@pytest.mark.parametrize("path", ep.PATHS)
@pytest.mark.parametrize("rows, n", [(16, 1 << 22), (4096, 768), (1000, 1000), (8, 16384)])
def test_the_epilogue_goes_into_the_launch_writing_y(path, rows, n, device):
    """Only the launch that writes y changes: its kernel gets the epilogue's options, its arguments the residual's
    address and the scale; the statistics launch (the chain's) is left as it was."""
    try:
        base = paths.launches(path, rows, n, device)
    except ValueError:
        return  # a counted path's row limit
    if getattr(base, "reciprocals", False):
        return  # the w4 blocking's program reads the device's reciprocal table: a GPU's (tests/test_gpu_epilogue.py)
    e = ep.Epilogue("gelu", 2.0, True)
    before, after = base.program(0), ep.EpilogueLaunches(base, e).program(0)
    assert after.slots == ep.SLOTS
    changed = [(a, b) for a, b in zip(before.steps, after.steps) if a != b]
    assert len(changed) == 1
    old, new = changed[0]
    assert Ptr("y") in old.args and old.kernel.kernel in ep.KERNELS
    assert new.kernel.options == old.kernel.options + e.options
    assert new.args == old.args + (Ptr("residual"), F32(2.0))


@pytest.mark.parametrize("path", [p for p in paths.PATHS if p not in ep.PATHS])
def test_paths_outside_the_list_write_y_with_a_kernel_without_epilogue(path):
    """ep.PATHS is every path whose y-writing kernel carries the epilogue: each other path's refuses it."""
    try:
        base = paths.launches(path, 4096, 1024, H200)
    except ValueError:
        base = paths.launches(path, 16, 1 << 20, H200)
    with pytest.raises(ValueError, match="has no epilogue"):
        ep.EpilogueLaunches(base, ep.Epilogue("relu")).program(0)


def test_the_plan_offers_only_paths_with_the_epilogue():
    for device in (H200, A100):
        for rows, n in [(16, 1 << 22), (4096, 64), (8192, 768), (512, 16384), (1000, 3000)]:
            chosen = ep.launches(rows, n, device, ep.Epilogue("gelu"))
            assert chosen.path in ep.PATHS
            assert set(ep.candidates(rows, n, device)) <= set(ep.PATHS)
    # below sm_90 the chain's ring blocking feeds the same output pass
    assert ep.launches(16, 1 << 22, A100, ep.Epilogue("gelu")).base.blocking == "ring"


def test_the_host_extension_is_never_given_a_float_constant():
    from labkit.core.program import native_steps

    class _Bound:  # what native_steps reads of a BoundProgram, for one launch with a float constant
        program = ep.EpilogueLaunches(paths.launches("rows_fused", 64, 256, H200), ep.Epilogue(scale=2.0)).program(0)
        _steps = [(type("F", (), {"function_handle": 0})(), "fused",
                   tuple((0, i, 0) for i in range(len(program.steps[0].args))))]

    with pytest.raises(ValueError, match="no float constant"):
        native_steps(_Bound())


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120"])
@pytest.mark.parametrize("kernel", ep.KERNELS)
def test_every_epilogue_compiles_for_every_arch(kernel, arch, cache_dir):
    for act in ep.ACTIVATIONS:
        for e in (ep.Epilogue(act), ep.Epilogue(act, 2.0, True)):
            if not e.empty:
                assert kc.compile_kernel(kernel, arch, e.options).cubin.startswith(b"\x7fELF")


@pytest.mark.slow
@pytest.mark.parametrize("kernel", ep.KERNELS)
def test_the_default_build_is_not_the_epilogue_build(kernel, cache_dir):
    """-DEPILOGUE changes the kernel (its parameters and output), and options without it change nothing."""
    default = kc.compile_kernel(kernel, "sm_90").cubin
    assert kc.compile_kernel(kernel, "sm_90", ("-DEPILOGUE_ACT=1", "-DEPILOGUE_SCALE")).cubin == default
    assert kc.compile_kernel(kernel, "sm_90", ep.Epilogue("gelu").options).cubin != default


def _inputs(shape, ns, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g) * 3 + 1
    return x, torch.randn(ns, generator=g), torch.randn(ns, generator=g), torch.randn(shape, generator=g)


@pytest.mark.parametrize("e", EPILOGUES, ids=str)
@pytest.mark.parametrize("affine", [True, False])
def test_cpu_tensors_get_torchs_chain_with_its_bits(e, affine):
    x, w, b, r = _inputs((6, 4, 20), (4, 20))
    w, b = (w, b) if affine else (None, None)
    out = fused_layer_norm(x, (4, 20), w, b, 1e-3, activation=e.activation, scale=e.scale,
                           residual=r if e.residual else None)
    assert_bits_equal(out, eager_chain(x, (4, 20), w, b, 1e-3, e, r), what=str(e))
    assert explain_fused(x, (4, 20), w, b, activation=e.activation, scale=e.scale,
                         residual=r if e.residual else None)["path"] == paths.NATIVE


@pytest.mark.parametrize("e", EPILOGUES, ids=str)
def test_cpu_gradients_are_the_chains(e):
    x, w, b, r = _inputs((5, 64), (64,), seed=1)
    g = torch.randn(5, 64, generator=torch.Generator().manual_seed(2))
    leaves = [t.clone().requires_grad_() for t in (x, w, b, r)]
    out = fused_layer_norm(leaves[0], (64,), leaves[1], leaves[2], activation=e.activation, scale=e.scale,
                           residual=leaves[3] if e.residual else None)
    got = torch.autograd.grad((out * g).sum(), leaves[:3 + e.residual])
    ref_leaves = [t.clone().requires_grad_() for t in (x, w, b, r)]
    ref = eager_chain(ref_leaves[0], (64,), ref_leaves[1], ref_leaves[2], 1e-5, e, ref_leaves[3])
    want = torch.autograd.grad((ref * g).sum(), ref_leaves[:3 + e.residual])
    for name, a, w_ in zip(("dx", "dweight", "dbias", "dresidual"), got, want):
        assert_bits_equal(a, w_, what=f"{name} {e}")


@pytest.mark.parametrize("e", EPILOGUES, ids=str)
def test_the_epilogue_backward_is_autograds(e):
    """grad_of_layer_norm_output (torch's backward ops, node by node) gives what autograd gives through the chain:
    the piece the fused backward feeds to the LayerNorm backward."""
    g = torch.Generator().manual_seed(3)
    y = (torch.randn(7, 96, generator=g) * 2).requires_grad_()
    grad_out = torch.randn(7, 96, generator=g)
    r = torch.randn(7, 96, generator=g)
    (want,) = torch.autograd.grad(ep.compose(y, e, r), y, grad_out)
    assert_bits_equal(ep.grad_of_layer_norm_output(grad_out, y.detach(), e), want, what=str(e))


@pytest.mark.parametrize("bad, match", [
    (dict(activation="swish"), "activation must be one of"),
    (dict(scale=[2.0]), "scale must be a real number"),
    (dict(residual=torch.randn(3, 8)), r"residual.shape must equal x.shape \(3, 4, 8\)"),  # no broadcasting
    (dict(residual=torch.randn(3, 4, 8, dtype=torch.float64)), "residual.dtype must equal x.dtype"),
    (dict(residual=[[0.0]]), "residual must be a torch.Tensor"),
])
def test_the_api_names_what_it_does_not_take(bad, match):
    x = torch.randn(3, 4, 8)
    with pytest.raises(ValueError, match=match):
        fused_layer_norm(x, (4, 8), **bad)
    with pytest.raises(ValueError, match=match):
        explain_fused(x, (4, 8), **bad)


def test_no_epilogue_is_the_drop_in():
    x, w, b, _ = _inputs((3, 32), (32,))
    assert_bits_equal(fused_layer_norm(x, 32, w, b), F.layer_norm(x, (32,), w, b))


def test_clearing_the_drop_ins_plans_clears_the_fused_ones():
    """A new trust verdict or dispatch table (plan.clear) must reach the fused plans, made from the same decisions."""
    from labkit.ops.dropin import fused, plan

    x, w, b, _ = _inputs((3, 32), (32,))
    fused_layer_norm(x, 32, w, b, activation="relu")
    assert fused._plans
    plan.clear()
    assert not fused._plans


class _StandIn:
    """A stand-in for the fused launches on a CPU: it reads the slots' tensors by address and writes what the
    kernels are meant to write (torch's chain, and native_layer_norm's mean and rstd) to the out, mean and rstd
    addresses, so that the plan's forward and the autograd node around it run as they do on a GPU."""

    path = "chain"

    class scratch:  # noqa: N801 (the launches' attribute)
        nbytes = 0

    def __init__(self, ns, e, rows):
        self.ns, self.e, self.rows, self.known = ns, e, rows, {}

    def tensors(self, *ts):
        self.known.update({t.data_ptr(): t for t in ts if t is not None})

    def __call__(self, ptrs, eps, stream):
        import ctypes

        import numpy as np

        x, w, b, out_p, mean_p, rstd_p, _, res_p = ptrs
        # an address it was not given is the plan's own gamma 1 or beta -0.0: an absent affine to torch
        y, mean, rstd = torch.native_layer_norm(self.known[x], self.ns, self.known.get(w), self.known.get(b),
                                                float(eps))
        res = self.known.get(res_p)
        for p, t in ((out_p, ep.compose(y, self.e, res)), (mean_p, mean), (rstd_p, rstd)):
            a = t.detach().contiguous().numpy().ravel()
            np.ctypeslib.as_array((ctypes.c_float * a.size).from_address(p))[:] = a


def _serve_with_stand_in(monkeypatch, ns, e, rows) -> _StandIn:
    """The fused plans of this test made as kernel plans around a _StandIn for their launches."""
    from labkit.ops.dropin import fused, plan

    stand_in = _StandIn(ns, e, rows)
    monkeypatch.setattr(fused, "make_plan", lambda x, ns, w, b, eps, e, r: (fused.FusedKernelPlan(stand_in, x, ns, w, b,
                                                                                                 eps), True))
    monkeypatch.setattr(fused, "bound", lambda launches, index: launches)
    monkeypatch.setattr(fused, "device_scope", lambda index: contextlib.nullcontext())
    monkeypatch.setattr(fused, "stream", lambda index: None)
    plan.clear()
    return stand_in



@pytest.mark.parametrize("e", EPILOGUES, ids=str)
@pytest.mark.parametrize("affine", [True, False])
def test_the_fused_node_passes_the_slots_and_composes_the_backward(monkeypatch, e, affine):
    """The kernel plan's forward hands the launch the slots in SLOTS order, and the autograd node's backward (the
    LayerNorm output recomputed, the epilogue's backward by torch's ops, the LayerNorm backward) gives eager
    autograd's gradients through the chain, bit for bit, for x, weight, bias and the residual."""
    from labkit.ops.dropin import fused, plan

    ns = (40,)
    stand_in = _serve_with_stand_in(monkeypatch, ns, e, 6)
    x, w, b, r = _inputs((6, 40), ns, seed=4)
    w, b = (w, b) if affine else (None, None)
    g = torch.randn(6, 40, generator=torch.Generator().manual_seed(5))
    leaves = [t.clone().requires_grad_() if t is not None else None for t in (x, w, b, r)]
    kw = dict(activation=e.activation, scale=e.scale, residual=leaves[3] if e.residual else None)
    p = fused.get_plan(leaves[0], ns, leaves[1], leaves[2], 1e-5, e, kw["residual"])
    assert isinstance(p, fused.FusedKernelPlan) and explain_fused(x, ns, w, b, **{**kw, "residual": r if e.residual
                                                                                  else None})["path"] == "chain"
    stand_in.tensors(*leaves)
    out = fused_layer_norm(leaves[0], ns, leaves[1], leaves[2], **kw)
    assert out.grad_fn is not None and "FusedLayerNorm" in type(out.grad_fn).__name__
    wanted = [t for t in leaves[:3] if t is not None] + ([leaves[3]] if e.residual else [])
    got = torch.autograd.grad((out * g).sum(), wanted)
    ref_leaves = [t.clone().requires_grad_() if t is not None else None for t in (x, w, b, r)]
    ref = eager_chain(ref_leaves[0], ns, ref_leaves[1], ref_leaves[2], 1e-5, e, ref_leaves[3])
    assert_bits_equal(out, ref, what=f"forward {e}")
    ref_wanted = [t for t in ref_leaves[:3] if t is not None] + ([ref_leaves[3]] if e.residual else [])
    for a, b_ in zip(got, torch.autograd.grad((ref * g).sum(), ref_wanted)):
        assert_bits_equal(a, b_, what=f"gradient {e}")
    with torch.no_grad():  # the plan's forward without statistics: mean and rstd behind the scratch
        stand_in.tensors(x, w, b, r)
        out = fused_layer_norm(x, ns, w, b, activation=e.activation, scale=e.scale, residual=r if e.residual else None)
    assert out.grad_fn is None
    assert_bits_equal(out, eager_chain(x, ns, w, b, 1e-5, e, r), what=f"no-grad forward {e}")
    plan.clear()


def test_a_backward_that_records_a_graph_goes_through_torchs_chain(monkeypatch):
    """create_graph=True: the node's backward recomputes through torch's chain, so a second derivative exists and
    the first one has eager's bits."""
    from labkit.ops.dropin import plan

    e = ep.Epilogue("gelu", 2.0)
    ns = (24,)
    stand_in = _serve_with_stand_in(monkeypatch, ns, e, 5)
    x, w, b, _ = _inputs((5, 24), ns, seed=9)
    xs = [x.clone().requires_grad_() for _ in range(2)]
    stand_in.tensors(xs[0], w, b)  # affine: the plan's ones and -0.0 are not used
    out = fused_layer_norm(xs[0], ns, w, b, activation="gelu", scale=2.0)
    assert "FusedLayerNorm" in type(out.grad_fn).__name__
    (gx,) = torch.autograd.grad(out.sum(), xs[0], create_graph=True)
    (want,) = torch.autograd.grad(eager_chain(xs[1], ns, w, b, 1e-5, e).sum(), xs[1], create_graph=True)
    assert_bits_equal(gx, want, what="dx with create_graph")
    (gxx,) = torch.autograd.grad(gx.sum(), xs[0])
    (want2,) = torch.autograd.grad(want.sum(), xs[1])
    assert_bits_equal(gxx, want2, what="second derivative")
    plan.clear()


def test_a_gradient_wanted_for_the_residual_alone_is_the_incoming_one(monkeypatch):
    from labkit.ops.dropin import plan

    e = ep.Epilogue("silu", 0.5, True)
    ns = (16,)
    stand_in = _serve_with_stand_in(monkeypatch, ns, e, 3)
    x, w, b, r = _inputs((3, 16), ns, seed=10)
    r = r.requires_grad_()
    stand_in.tensors(x, w, b, r)
    out = fused_layer_norm(x, ns, w, b, activation="silu", scale=0.5, residual=r)
    g = torch.randn(3, 16, generator=torch.Generator().manual_seed(11))
    (gr,) = torch.autograd.grad(out, r, g)
    assert_bits_equal(gr, g, what="d residual")
    plan.clear()


def test_the_epilogue_check_runs_once_per_device_and_option_set(monkeypatch):
    """The check's verdict is kept per (device, options): a mismatch warns once and keeps torch's chain serving that
    epilogue; LABKIT_TRUST=off skips the check."""
    from labkit.ops.dropin import fused

    calls = []
    monkeypatch.setattr(fused, "_checked", {})
    monkeypatch.setattr(fused, "_check", lambda index, e: calls.append(e) or "chain at 4 x 32768: differs")
    e = ep.Epilogue("gelu", 2.0)
    monkeypatch.setenv("LABKIT_TRUST", "off")
    assert fused.epilogue_refusal(0, e) is None and calls == []
    monkeypatch.setenv("LABKIT_TRUST", "check")
    with pytest.warns(RuntimeWarning, match="torch's chain serves it"):
        assert "differs" in fused.epilogue_refusal(0, e)
    assert "differs" in fused.epilogue_refusal(0, ep.Epilogue("gelu", 3.0))  # another scale: the same cubin
    assert len(calls) == 1
    with pytest.warns(RuntimeWarning):  # another activation: another cubin, checked
        fused.epilogue_refusal(0, ep.Epilogue("relu"))
    assert len(calls) == 2


def fused_op():
    from labkit.ops.dropin import fused

    return fused.fused_layer_norm_op


def _op_args(seed=12, residual=True):
    x, w, b, r = _inputs((4, 3, 16), (3, 16), seed=seed)
    return (x, [3, 16], w, b, 1e-5, "gelu", 2.0, r if residual else None)


@pytest.mark.parametrize("residual", [True, False])
def test_opcheck_fused_forward(residual):
    result = torch.library.opcheck(fused_op(), _op_args(residual=residual))
    assert all(v == "SUCCESS" for v in result.values()), result


@pytest.mark.parametrize("mask", [[True, True, True], [True, False, False], [False, True, True]])
def test_opcheck_fused_backward(mask):
    from labkit.ops.dropin import fused

    x, ns, w, b, eps, act, scale, _ = _op_args()
    y, mean, rstd = torch.native_layer_norm(x, ns, w, b, eps)
    result = torch.library.opcheck(fused.fused_layer_norm_backward_op,
                                   (torch.randn(x.shape), x, ns, mean, rstd, w, b, eps, act, scale, mask))
    assert all(v == "SUCCESS" for v in result.values()), result


@pytest.mark.parametrize("backend", ["aot_eager", pytest.param("inductor", marks=pytest.mark.slow)])
def test_compiled_calls_run_the_opaque_op_with_the_chains_bits(backend):
    """Under torch.compile the call is labkit::fused_layer_norm (one graph, no break), whose forward and backward
    keep the eager chain's bits: Inductor does not recompile the ops after the LayerNorm."""
    e = ep.Epilogue("gelu", 2.0, True)
    x, w, b, r = _inputs((6, 2, 32), (2, 32), seed=13)
    g = torch.randn(6, 2, 32, generator=torch.Generator().manual_seed(14))

    def fn(x, w, b, r):
        return fused_layer_norm(x, (2, 32), w, b, activation="gelu", scale=2.0, residual=r)

    explained = torch._dynamo.explain(fn)(x, w, b, r)
    assert explained.graph_break_count == 0 and explained.graph_count == 1
    compiled = torch.compile(fn, backend=backend, fullgraph=True)
    leaves = [t.clone().requires_grad_() for t in (x, w, b, r)]
    out = compiled(*leaves)
    got = torch.autograd.grad((out * g).sum(), leaves)
    ref_leaves = [t.clone().requires_grad_() for t in (x, w, b, r)]
    ref = eager_chain(ref_leaves[0], (2, 32), ref_leaves[1], ref_leaves[2], 1e-5, e, ref_leaves[3])
    assert_bits_equal(out, ref, what=f"compiled ({backend}) forward")
    for name, a, want in zip(("dx", "dweight", "dbias", "dresidual"), got,
                             torch.autograd.grad((ref * g).sum(), ref_leaves)):
        assert_bits_equal(a, want, what=f"compiled ({backend}) {name}")
    torch._dynamo.reset()


def test_a_dispatch_mode_sees_the_op():
    from torch.utils._python_dispatch import TorchDispatchMode

    seen = []

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(str(func))
            return func(*args, **(kwargs or {}))

    x, w, b, _ = _inputs((3, 16), (16,))
    with Record():
        out = fused_layer_norm(x, 16, w, b, activation="relu")
    assert any("labkit.fused_layer_norm" in s for s in seen), seen
    assert_bits_equal(out, F.relu(F.layer_norm(x, (16,), w, b)))


def test_strict_trust_leaves_an_epilogue_to_torchs_chain(monkeypatch):
    """A verified key covers the LayerNorm's kernels, not an epilogue's ops: under LABKIT_TRUST=strict the fused op
    is torch's chain (no check on this machine stands in for a committed one)."""
    from labkit.ops.dropin import fused, plan

    monkeypatch.setenv("LABKIT_TRUST", "strict")
    assert fused.epilogue_refusal(0, ep.Epilogue("gelu", 2.0)) == fused.STRICT
    fused._checked[(0, ("-DX",))] = None
    plan.clear()
    assert fused._checked == {}  # cleared with the plans


@pytest.mark.parametrize("scale", [float("nan"), float("inf"), 10 ** 400])
def test_a_scale_that_is_not_finite_is_refused(scale):
    with pytest.raises(ValueError, match="scale must be a finite number"):
        ep.Epilogue("gelu", scale)


def test_a_residual_on_another_device_is_refused_before_launch():
    x = torch.randn(2, 8)
    with pytest.raises(ValueError, match="residual.device must equal x.device"):
        fused_layer_norm(x, (8,), residual=torch.randn(2, 8, device="meta"))


def test_the_routing_predicates_name_layer_norms_exits():
    """labkit.ops.dropin.op.plain_eager / traced_or_wrapped restate layer_norm's exit conditions for the fused op
    (its docstring's table): each context lands on the side the table says."""
    from labkit.ops.dropin.op import plain_eager, traced_or_wrapped

    class Sub(torch.Tensor):
        pass

    x = torch.randn(2, 8)
    assert plain_eager(x, None, None) and not traced_or_wrapped(x, None, None)  # exits 4-8
    s = x.as_subclass(Sub)
    assert not plain_eager(s) and traced_or_wrapped(s) and traced_or_wrapped(x, s)  # exit 2
    with torch.autograd.forward_ad.dual_level():  # exit 3
        assert not plain_eager(x) and not traced_or_wrapped(x)
    with torch.autocast("cpu"):  # exit 1
        assert not plain_eager(x)
    assert torch.func.vmap(lambda t: torch.tensor(plain_eager(t)))(torch.randn(3, 2, 8)).eq(0).all()
