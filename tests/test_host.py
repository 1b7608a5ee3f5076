"""The host extension on the CPU: it builds here (a C++ compiler and ninja are all it needs), its autograd node
gives torch's values and gradients bit for bit where torch's kernels serve (CPU tensors: no program), including
absent weight or bias, a gradient asked for only some inputs and double backward; and every kernel path's Program
converts into the extension's form (the launches themselves need a GPU: tests/test_gpu_host.py)."""
import pytest
import torch
import torch.nn.functional as F

from bits import assert_bits_equal
from labkit.core import launch, program
from labkit.core.device import Device
from labkit.ops import backward, chain, reference_order, rows_fused
from labkit.ops.dropin import host

H200 = Device("NVIDIA H200", 90, 132, 232448, 65535)
A100 = Device("NVIDIA A100", 80, 108, 166912, 65535)  # no tensor maps


@pytest.fixture(scope="module")
def ext():
    m = host.module()
    assert m is not None, host.unavailable()  # CI builds it: a failure here is a broken build, not a skip
    return m


def _plan(ext, ns, rows):
    stat = [rows] + [1] * len(ns)
    return ext.LayerNormPlan(None, None, list(ns), 1e-5, stat, rows, int(torch.tensor(ns).prod()), 0, 0, 1,
                             torch.ones(ns), torch.full(ns, -0.0))


@pytest.mark.parametrize("affine", ["both", "weight", "bias", "none"])
def test_the_node_gives_torchs_values_and_gradients(ext, affine):
    g = torch.Generator().manual_seed(1)
    x = (torch.randn(6, 5, 8, generator=g) * 3).requires_grad_()
    w = torch.randn(5, 8, generator=g).requires_grad_() if affine in ("both", "weight") else None
    b = torch.randn(5, 8, generator=g).requires_grad_() if affine in ("both", "bias") else None
    dy = torch.randn(6, 5, 8, generator=g)
    wanted = [t for t in (x, w, b) if t is not None]
    y = ext.train(_plan(ext, (5, 8), 6), x, w, b)
    ref = F.layer_norm(x, (5, 8), w, b, 1e-5)
    assert type(y.grad_fn).__name__ == "CppFunction"
    assert_bits_equal(y, ref, what="y")
    for i, (a, c) in enumerate(zip(torch.autograd.grad(y, wanted, dy), torch.autograd.grad(ref, wanted, dy))):
        assert_bits_equal(a, c, what=f"gradient {i} of {affine!r}")


def test_a_gradient_for_some_inputs_only(ext):
    x = torch.randn(4, 16)
    w = torch.randn(16, requires_grad=True)
    b = torch.randn(16)  # no grad wanted
    dy = torch.randn(4, 16)
    y = ext.train(_plan(ext, (16,), 4), x, w, b)
    gw, = torch.autograd.grad(y, w, dy)
    assert_bits_equal(gw, torch.autograd.grad(F.layer_norm(x, (16,), w, b), w, dy)[0], what="dweight")


def test_double_backward_recomputes_through_torch(ext):
    g = torch.Generator().manual_seed(2)
    x0, w = torch.randn(3, 32, generator=g), torch.randn(32, generator=g).requires_grad_()
    dy = torch.randn(3, 32, generator=g)
    out = []
    for fn in (lambda x: ext.train(_plan(ext, (32,), 3), x, w, None), lambda x: F.layer_norm(x, (32,), w)):
        x = x0.clone().requires_grad_()
        gx, = torch.autograd.grad(fn(x), x, dy, create_graph=True)
        out.append((gx, *torch.autograd.grad((gx ** 2).sum(), (x, w))))
    for name, a, c in zip(("dx", "d2x", "d2weight"), *out):
        assert_bits_equal(a, c, what=name)


def test_the_forward_and_backward_entry_points_fall_back_to_torch_without_programs(ext):
    x, w = torch.randn(5, 12), torch.randn(12)
    p = _plan(ext, (12,), 5)
    y, mean, rstd = ext.forward_stats(p, x, w, None)
    ry, rm, rr = torch.native_layer_norm(x, (12,), w, None, 1e-5)
    for name, a, c in (("y", y, ry), ("mean", mean, rm), ("rstd", rstd, rr)):
        assert_bits_equal(a, c, what=f"forward_stats {name}")
    assert_bits_equal(ext.forward(p, x, w, None), ry, what="forward y")
    dy = torch.randn(5, 12)
    got = ext.backward(p, dy, x, mean, rstd, w, None, [True, True, False])
    ref = torch.ops.aten.native_layer_norm_backward(dy, x, [12], rm, rr, w, None, [True, True, False])
    assert_bits_equal(got[0], ref[0], what="backward dx")
    assert_bits_equal(got[1], ref[1], what="backward dweight")
    assert got[2] is None and ref[2] is None


def test_a_plan_without_placeholders_refuses_a_call_without_affine(ext):
    p = ext.LayerNormPlan(None, None, [8], 1e-5, [2, 1], 2, 8, 0, 0, 1, None, None)
    with pytest.raises(RuntimeError, match="placeholders"):
        ext.train(p, torch.randn(2, 8, requires_grad=True), None, None)


@pytest.fixture
def fake_functions(monkeypatch):
    class FakeFunction:
        ptr = 0x1234

        def __call__(self, *a, **k):
            raise AssertionError("no launch on the CPU")

    monkeypatch.setattr(launch, "function", lambda *a, **k: FakeFunction())
    table = torch.empty(1)
    monkeypatch.setattr(chain, "reciprocal_table", lambda index: table)
    monkeypatch.setattr(program, "TensorMapEncoder", lambda geometry: (lambda address: None))  # needs the driver


@pytest.mark.parametrize("make", [
    lambda: chain.launches(16, 1 << 22, H200),             # tensor map, memset
    lambda: chain.launches(3, 1000, H200),                 # w4 blocking: the reciprocal table's address
    lambda: reference_order.launches(8, 1024, H200),
    lambda: rows_fused.launches(4096, 768, H200),
    lambda: backward.launches(16, 1 << 22, H200, "chain"),  # three tensor maps, a memset
    lambda: backward.launches(16, 1 << 22, A100, "chain"),  # the cp.async ring: three pointers, a memset
    lambda: backward.launches(64, 8192, H200, "rows"),
    lambda: backward.launches(100000, 256, H200, "split"),  # partial GammaBeta groups
])
def test_every_paths_program_converts_to_the_extensions_form(ext, fake_functions, make):
    p = make()
    bp = program.BoundProgram(p.program(0), 0)
    steps = program.native_steps(bp)
    assert len(steps) == len(p.program(0).steps)
    assert ext.Program(len(bp.program.slots), steps).steps == len(steps)
    slots = {name: i for i, name in enumerate(bp.program.slots)}

    def expected(a):
        if isinstance(a, program.Ptr):
            return (0, slots[a.slot], a.offset)
        if isinstance(a, program.Map):
            return (1, slots[a.slot], (a.geometry.dims, a.geometry.strides_bytes, a.geometry.box,
                                          a.geometry.data_type))
        if isinstance(a, program.I32):
            return (2, 0, a.value)
        if isinstance(a, program.U64):
            return (3, 0, a.value)
        assert a is program.EPS
        return (4, 0, 0)

    for step, described in zip(steps, p.program(0).steps):
        if isinstance(described, program.Memset):
            assert step == ("memset", slots[described.slot], described.offset, described.nbytes)
            continue
        k = described.kernel
        assert step[:5] == ("launch", 0x1234, tuple(k.grid) + (1,) * (3 - len(k.grid)),
                            tuple(k.block) + (1,) * (3 - len(k.block)), k.shared_mem)
        assert [tuple(a) for a in step[5]] == [expected(a) for a in described.args]


def _touches(step) -> set:
    """The slots a described step reads or writes."""
    if isinstance(step, program.Memset):
        return {step.slot}
    return {a.slot for a in step.args if isinstance(a, (program.Ptr, program.Map))}


@pytest.mark.parametrize("make,outputs,split", [
    (lambda: chain.launches(16, 1 << 22, H200), ("y",), 2),           # memset and statistics before the output pass
    (lambda: chain.launches(3, 1000, H200), ("y",), 2),
    (lambda: rows_fused.launches(4096, 768, H200), ("y",), 0),        # one launch, which writes y
    (lambda: backward.launches(16, 1 << 22, H200, "chain"), ("dx", "dgamma", "dbeta"), 2),  # memset and row sums
    (lambda: backward.launches(64, 8192, H200, "rows"), ("dx", "dgamma", "dbeta"), 1),
    (lambda: backward.launches(100000, 256, H200, "split"), ("dx", "dgamma", "dbeta"), 0),  # sums write dx
])
def test_the_steps_before_an_outputs_first_use_are_what_runs_before_it_is_allocated(ext, fake_functions, make,
                                                                                       outputs, split):
    """The forward (launch_forward) and run_backward launch the steps before the first one touching y (dx, dgamma,
    dbeta) and allocate those outputs after: the split the extension computes is the described program's, and the output
    slots are untouched before it."""
    described = make().program(0)
    ext_program = ext.Program(len(described.slots), program.native_steps(program.BoundProgram(described, 0)))
    slots = {name: i for i, name in enumerate(described.slots)}
    assert ext_program.first_use([slots[o] for o in outputs]) == split
    assert all(not (_touches(s) & set(outputs)) for s in described.steps[:split])
    assert split == len(described.steps) or _touches(described.steps[split]) & set(outputs)
    forward = outputs == ("y",)
    ns, rows = [8], 2
    plan = ext.LayerNormPlan(ext_program if forward else None, None if forward else ext_program, ns, 1e-5,
                             [rows, 1], rows, 8, 0, 0, 1, None, None)
    assert (plan.forward_split if forward else plan.backward_split) == split


def test_a_program_naming_a_slot_it_lacks_is_refused(ext):
    with pytest.raises(RuntimeError, match="slot"):
        ext.Program(2, [("launch", 0, (1, 1, 1), (1, 1, 1), 0, [(0, 5, 0)])])
    with pytest.raises(ValueError, match="names slot"):
        program.Program(("x",), (program.Memset("y", 0, 4),))


def test_on_the_cpu_the_dropin_never_asks_for_the_extension(monkeypatch):
    from labkit.ops.dropin import plan

    def asked(*a, **k):
        raise AssertionError("the host extension was asked for on the CPU")
    monkeypatch.setattr(host, "module", asked)
    monkeypatch.setattr(host, "unavailable", asked)
    plan.clear()
    x = torch.randn(4, 64, requires_grad=True)
    import labkit
    with torch.no_grad():
        labkit.layer_norm(x, (64,))
    labkit.layer_norm(x, (64,)).sum().backward()
    p = plan.get_plan(x, (64,), None, None, 1e-5, True)
    assert p.host is None and p.torch_trains


def test_a_plan_whose_programs_have_other_slots_is_refused(ext):
    three = ext.Program(3, [])
    with pytest.raises(RuntimeError, match="forward program has 7 slots, got 3"):
        ext.LayerNormPlan(three, None, [8], 1e-5, [2, 1], 2, 8, 0, 0, 1, None, None)
    with pytest.raises(RuntimeError, match="backward program has 9 slots, got 3"):
        ext.LayerNormPlan(None, three, [8], 1e-5, [2, 1], 2, 8, 0, 0, 1, None, None)


def test_a_backward_pass_asking_for_dx_alone_gets_dx_alone(ext):
    """Weight and bias require grad, but autograd.grad(y, x) wants dx only: the node asks for dx alone (at backward
    time, needs_input_grad), and gives torch's dx."""
    x = torch.randn(4, 16, requires_grad=True)
    w = torch.randn(16, requires_grad=True)
    b = torch.randn(16, requires_grad=True)
    dy = torch.randn(4, 16)
    from torch.utils._python_dispatch import TorchDispatchMode

    class Masks(TorchDispatchMode):  # the output_mask the node hands torch's backward (no programs: torch serves)
        seen = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is torch.ops.aten.native_layer_norm_backward.default:
                self.seen.append(list(args[-1]))
            return func(*args, **(kwargs or {}))

    y = ext.train(_plan(ext, (16,), 4), x, w, b)
    with Masks():
        gx, = torch.autograd.grad(y, x, dy)
    ref, = torch.autograd.grad(F.layer_norm(x, (16,), w, b), x, dy)
    assert_bits_equal(gx, ref, what="dx")
    assert Masks.seen == [[True, False, False]]  # at backward time, not the [True, True, True] the forward saw


@pytest.mark.parametrize("low", [torch.bfloat16, torch.float16])
def test_an_autocast_plan_gives_autocasts_tensors(ext, low):
    """A plan of the autocast builds (labkit.ops.dropin.autocast) where no program serves: its node and entry points
    give what F.layer_norm gives under autocast, torch's float32 kernels on x.to(float32) with dX cast back: y,
    dweight, dbias float32, dx of x's dtype, bit for bit; double backward differentiates through that cast."""
    g = torch.Generator().manual_seed(3)
    x0 = (torch.randn(4, 64, generator=g) * 3 + 1).to(low)
    w0, b0, dy = torch.randn(64, generator=g), torch.randn(64, generator=g), torch.randn(4, 64, generator=g)
    p = ext.LayerNormPlan(None, None, [64], 1e-5, [4, 1], 4, 64, 0, 0, 1, torch.ones(64), torch.full((64,), -0.0),
                          autocast=True)
    out = []
    for fn in (lambda x, w, b: ext.train(p, x, w, b), lambda x, w, b: F.layer_norm(x.float(), (64,), w, b)):
        x, w, b = x0.clone().requires_grad_(), w0.clone().requires_grad_(), b0.clone().requires_grad_()
        y = fn(x, w, b)
        gx, gw, gb = torch.autograd.grad(y, (x, w, b), dy, create_graph=True)
        out.append((y, gx, gw, gb, *torch.autograd.grad(gx.float().square().sum(), (x, w))))
    for name, a, c in zip(("y", "dx", "dweight", "dbias", "d2x", "d2weight"), *out):
        assert a.dtype == c.dtype, name
        assert_bits_equal(a, c, what=f"autocast plan {name}")
    y, mean, rstd = ext.forward_stats(p, x0, w0, b0)
    ry, rm, rr = torch.native_layer_norm(x0.float(), (64,), w0, b0, 1e-5)
    for name, a, c in zip(("y", "mean", "rstd"), (y, mean, rstd), (ry, rm, rr)):
        assert a.dtype == torch.float32, name
        assert_bits_equal(a, c.reshape(a.shape), what=f"forward_stats {name}")
    got = ext.backward(p, dy, x0, mean, rstd, w0, b0, [True, True, True])
    ref = torch.ops.aten.native_layer_norm_backward(dy, x0.float(), [64], rm, rr, w0, b0, [True, True, True])
    assert got[0].dtype == low and got[1].dtype == torch.float32 and got[2].dtype == torch.float32
    assert_bits_equal(got[0], ref[0].to(low), what="backward dx")
    assert_bits_equal(got[1], ref[1], what="backward dweight")
    assert_bits_equal(got[2], ref[2], what="backward dbias")
