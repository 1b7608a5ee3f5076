"""The drop-in LayerNorm on CPU: F.layer_norm's semantics (CPU tensors route to torch's kernel through the real
op), opcheck, fake tensors, compile tracing, autograd, the plan cache, the dispatch rule and its arch fallback
(every kernel it can pick compiling with NVRTC), and the readers of a dropin run built in the test."""
import math

import pytest
import torch

import labkit
from bits import assert_bits_equal
from labkit.core.device import Device
from labkit.ops import paths
from labkit.ops.dispatch import rule
from labkit.ops.dropin import op, plan
from labkit.studies import dropin as study
from labkit.studies import dropin_peers, dropin_sweep


def _device(arch=90, sm_count=132):
    return Device(f"sm_{arch}", arch, sm_count, 232448, 65535)


def _choose(rows, n, device):
    return rule.choose(rows, n, device, tuple(paths.candidates(rows, n, device)))

CASES = [((4, 8), (8,)), ((2, 3, 16), (16,)), ((2, 3, 16), (3, 16)), ((5, 1001), (1001,)), ((0, 12), (12,)),
         ((7, 4), 4)]


@pytest.mark.parametrize("shape,ns", CASES)
@pytest.mark.parametrize("affine", ["both", "weight", "none", "bias"])
def test_forward_and_backward_bits_equal_torch_on_cpu(shape, ns, affine):
    g = torch.Generator().manual_seed(0)
    nsh = (ns,) if isinstance(ns, int) else ns
    x = torch.randn(shape, generator=g) * 10 + 3
    w = torch.randn(nsh, generator=g) if affine in ("both", "weight") else None
    b = torch.randn(nsh, generator=g) if affine in ("both", "bias") else None
    with torch.no_grad():
        assert_bits_equal(labkit.layer_norm(x, ns, w, b, 1e-3), torch.nn.functional.layer_norm(x, nsh, w, b, 1e-3),
                          what="forward")
    grads = []
    for fn in (torch.nn.functional.layer_norm, labkit.layer_norm):
        ts = [t.clone().requires_grad_() if t is not None else None for t in (x, w, b)]
        y = fn(ts[0], nsh, ts[1], ts[2], 1e-3)
        assert y.requires_grad  # the gradient is never dropped
        if y.numel():
            y.backward(torch.ones_like(y) * 0.5 + x[..., :1].detach())
        grads.append([y.detach()] + [t.grad for t in ts if t is not None])
    names = ["y", "dx"] + [name for name, t in (("dweight", w), ("dbias", b)) if t is not None]
    for name, c, a in zip(names, *grads):  # grads: [torch's, ours]
        if x.numel() == 0 and a is None:
            assert a is None and c is None
        else:
            assert_bits_equal(a, c, what=name)


def test_errors_are_torchs_own():
    x = torch.randn(4, 8)
    with pytest.raises(RuntimeError) as ours:
        labkit.layer_norm(x, (7,))
    with pytest.raises(RuntimeError) as theirs:
        torch.nn.functional.layer_norm(x, (7,))
    assert str(ours.value) == str(theirs.value)


def test_double_backward_matches_eager():
    x = torch.randn(3, 16, dtype=torch.float64)
    w, b = torch.randn(16, dtype=torch.float64), torch.randn(16, dtype=torch.float64)
    out = []
    for fn in (torch.nn.functional.layer_norm, labkit.layer_norm):
        xs, ws = x.clone().requires_grad_(), w.clone().requires_grad_()
        (gx,) = torch.autograd.grad(fn(xs, (16,), ws, b).pow(2).sum(), xs, create_graph=True)
        out.append(torch.autograd.grad(gx.sum(), (xs, ws)))
    for name, c, a in zip(("d2x", "d2weight"), *out):  # out: [torch's, ours]
        assert_bits_equal(a, c, what=name)


@pytest.mark.parametrize("args", [
    lambda: (torch.randn(4, 8, requires_grad=True), [8], torch.randn(8, requires_grad=True), torch.randn(8), 1e-5),
    lambda: (torch.randn(2, 3, 8), [3, 8], None, None, 1e-5),
    lambda: (torch.randn(2, 6), [6], torch.randn(6), None, 0.0),
])
def test_opcheck_forward(args):
    result = torch.library.opcheck(op.layer_norm_op, args())
    assert set(result.values()) == {"SUCCESS"} and len(result) >= 4


@pytest.mark.parametrize("mask", [[True, True, True], [True, False, False], [False, True, True]])
def test_opcheck_backward(mask):
    x, w, b = torch.randn(4, 8), torch.randn(8), torch.randn(8)
    _, mean, rstd = torch.native_layer_norm(x, [8], w, b, 1e-5)
    result = torch.library.opcheck(op.layer_norm_backward_op, (torch.randn(4, 8), x, [8], mean, rstd, w, b, mask))
    assert set(result.values()) == {"SUCCESS"}


@pytest.mark.parametrize("shape,ns", [((2, 3, 16), [16]), ((2, 3, 16), [3, 16]), ((5, 4), [4])])
def test_fake_shapes_are_native_layer_norms(shape, ns):
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x, w = torch.empty(shape), torch.empty(ns)
        ours = op.layer_norm_op(x, ns, w, None, 1e-5)
        theirs = torch.native_layer_norm(x, ns, w, None, 1e-5)
    for a, c in zip(ours, theirs):
        assert a.shape == c.shape and a.dtype == c.dtype and a.stride() == c.stride()
    k = len(ns)
    assert tuple(ours[1].shape) == tuple(shape[:len(shape) - k]) + (1,) * k


def test_meta_tensors_go_through_the_op():
    x = torch.empty(3, 64, device="meta")
    y = labkit.layer_norm(x, (64,), torch.empty(64, device="meta"), None)
    assert y.shape == x.shape and y.device.type == "meta"


def test_compile_fullgraph_traces_a_swapped_model():
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.LayerNorm(16), torch.nn.GELU(),
                                torch.nn.LayerNorm(16, bias=False))
    assert labkit.swap_layer_norms(model) == 2
    explained = torch._dynamo.explain(model)(torch.randn(4, 16))
    assert explained.graph_break_count == 0 and explained.graph_count == 1
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    x = torch.randn(4, 16, requires_grad=True)
    compiled(x).sum().backward()
    assert x.grad is not None and all(p.grad is not None for p in model.parameters())


def test_module_state_dict_is_nn_layer_norms():
    ref = torch.nn.LayerNorm((3, 8), eps=1e-6)
    with torch.no_grad():
        ref.weight.normal_()
        ref.bias.normal_()
    ours = labkit.LayerNorm((3, 8), eps=1e-6)
    ours.load_state_dict(ref.state_dict())
    assert list(ours.state_dict()) == list(ref.state_dict())
    for (name, a), b in zip(ours.state_dict().items(), ref.state_dict().values()):
        assert_bits_equal(a, b, what=f"state_dict {name}")
    x = torch.randn(2, 3, 8)
    assert_bits_equal(ours(x), ref(x), what="module output")
    shared = labkit.LayerNorm.from_layer_norm(ref)
    assert shared.weight is ref.weight and shared.bias is ref.bias and shared.eps == 1e-6


def test_swap_keeps_parameters_and_leaves_subclasses():
    class Mine(torch.nn.LayerNorm):
        pass

    model = torch.nn.Sequential(torch.nn.LayerNorm(8), Mine(8), torch.nn.Sequential(torch.nn.LayerNorm(8)))
    before = [id(p) for p in model.parameters()]
    assert labkit.swap_layer_norms(model) == 2
    assert [id(p) for p in model.parameters()] == before
    assert type(model[0]) is labkit.LayerNorm and type(model[1]) is Mine and type(model[2][0]) is labkit.LayerNorm


def test_plan_is_cached_per_signature(monkeypatch):
    plan.clear()
    made = []
    real = plan.make_plan
    monkeypatch.setattr(plan, "make_plan", lambda *a, **k: made.append(a[1]) or real(*a, **k))
    x, w, b = torch.randn(4, 32), torch.randn(32), torch.randn(32)
    with torch.no_grad():
        for _ in range(5):
            labkit.layer_norm(x, (32,), w, b)
        assert len(made) == 1
        labkit.layer_norm(x, (32,), w, b, eps=1e-3)          # eps is in the signature
        labkit.layer_norm(torch.randn(2, 4, 32), (32,), w, b)  # shape
        labkit.layer_norm(x, (32,), w, None)                   # affine presence
    assert len(made) == 4 and plan.cached_plans() == 4


def test_eager_skips_the_dispatcher_with_and_without_autograd(monkeypatch):
    """Eager calls never pay the registered op's dispatch: without autograd the plan runs directly; with autograd
    torch's own autograd node where torch serves both directions (here: a CPU tensor), else the _LayerNorm
    autograd.Function (the host extension's node serves GPU tensors only: tests/test_gpu_host.py); a dispatch mode (here FakeTensorMode's stand-in: a functorch transform) still takes the op."""
    calls = []
    real = op.layer_norm_op
    monkeypatch.setattr(op, "layer_norm_op", lambda *a: calls.append(1) or real(*a))
    x, w = torch.randn(4, 8), torch.randn(8, requires_grad=True)
    with torch.no_grad():
        labkit.layer_norm(x, (8,), w)
    y = labkit.layer_norm(x, (8,), w)  # grad mode and a parameter that requires grad
    assert calls == [] and type(y.grad_fn).__name__ == "NativeLayerNormBackward0"
    y.sum().backward()
    ref = torch.randn(8).copy_(w.detach()).requires_grad_()
    torch.nn.functional.layer_norm(x, (8,), ref).sum().backward()
    assert_bits_equal(w.grad, ref.grad, what="dweight (torch's node)")
    assert calls == []
    w.grad = None
    plan.clear()
    monkeypatch.setattr(plan, "backward_plan", lambda *a: object())  # as where our backward would serve
    y = labkit.layer_norm(x, (8,), w)
    assert calls == [] and type(y.grad_fn).__name__ == "_LayerNormBackward"
    y.sum().backward()
    assert_bits_equal(w.grad, ref.grad, what="dweight (_LayerNorm)")
    assert calls == []
    plan.clear()
    torch.func.vmap(lambda r: labkit.layer_norm(r, (8,), w.detach()))(x.unsqueeze(1))
    assert calls  # a functorch transform takes the registered op (and its batching rule)


def test_vmap_has_a_batching_rule_and_torchs_bits(capfd):
    """vmap over inputs, and over per-sample affines (torch's rule: no-affine LayerNorm, then * weight + bias),
    without torch's batched fallback (which warns "There is a performance drop" on stderr)."""
    x, w, b = torch.randn(3, 4, 8), torch.randn(8), torch.randn(3, 8)
    ours = torch.func.vmap(lambda r, bb: labkit.layer_norm(r, (8,), w, bb))(x, b)
    ref = torch.func.vmap(lambda r, bb: torch.nn.functional.layer_norm(r, (8,), w, bb))(x, b)
    assert_bits_equal(ours, ref, what="vmap, per-sample bias")
    ours = torch.func.vmap(lambda r: labkit.layer_norm(r, (8,), w))(x)
    assert_bits_equal(ours, torch.func.vmap(lambda r: torch.nn.functional.layer_norm(r, (8,), w))(x), what="vmap")
    assert "performance drop" not in capfd.readouterr().err


def test_functorch_grad_and_jvp_take_torchs_layer_norm(monkeypatch):
    """torch.func.grad, vmap(grad) and jvp work (a custom op's registered autograd has no functorch support, so the
    drop-in hands those transforms to F.layer_norm) and give F.layer_norm's bits."""
    x, w, b = torch.randn(3, 4, 8), torch.randn(8), torch.randn(8)
    from labkit.ops.dropin import op

    def registered(*a, **k):
        raise AssertionError("a differentiating transform reached the registered op")
    monkeypatch.setattr(op, "layer_norm_op", registered)  # the routing, not only the result, is what is tested
    grads = [torch.func.vmap(torch.func.grad(lambda r, f=f: f(r, (8,), w, b).square().sum()))(x)
             for f in (labkit.layer_norm, torch.nn.functional.layer_norm)]
    assert_bits_equal(grads[0], grads[1], what="vmap(grad) dx")
    dw = [torch.func.grad(lambda ww, f=f: f(x, (8,), ww, b).square().sum())(w)
          for f in (labkit.layer_norm, torch.nn.functional.layer_norm)]
    assert_bits_equal(dw[0], dw[1], what="grad dweight")
    t = torch.randn_like(x)
    jv = [torch.func.jvp(lambda r, f=f: f(r, (8,), w, b), (x,), (t,))[1]
          for f in (labkit.layer_norm, torch.nn.functional.layer_norm)]
    assert_bits_equal(jv[0], jv[1], what="jvp tangent")


@pytest.mark.parametrize("rows,n,arch,expect", [
    # (32768, 2048): issue 24's case of a win the dispatch left unused (torch 168.8 us, rows_fused forced 135.6,
    # eager per call); the table of run dispatch-table-6d407c takes it (as did those before it). (1024, 65536): issue
    # 24's long-row miss (rows_staged 1.19x torch under graph replay), now a row across a cluster of 2 (rows_cluster)
    (1, 1 << 24, 90, "chain"), (16, 1 << 22, 90, "chain"), (64, 1 << 20, 90, "chain"), (32768, 2048, 90, "rows_fused"),
    (2048, 16384, 90, "rows_staged"), (1024, 65536, 90, "rows_cluster"),
    (1, 1 << 24, 89, "native"), (1, 1 << 24, 86, "native"), (1, 1 << 24, 80, "native")])
def test_rule(rows, n, arch, expect):
    path, why = _choose(rows, n, _device(arch))
    assert path == expect and why


def test_rows_cluster_is_served_only_from_a_table_measured_at_the_device_s_sm_count():
    """How many clusters a GPU holds at once depends on its GPCs, which the H200 table's wave axis does not carry:
    on another sm_90 SM count the rule leaves rows_cluster out (the next fastest serves), on the H200 it picks it."""
    assert _choose(1024, 65536, _device(90, 132))[0] == "rows_cluster"
    for sms in (114, 78, 144):
        other = _device(90, sms)
        assert "rows_cluster" not in rule.pickable_paths(90, sms)
        for rows, n in ((64, 65536), (256, 65536), (1024, 65536), (1, 32768), (512, 32768), (2048, 32768)):
            path, why = _choose(rows, n, other)
            assert path != "rows_cluster" and "carried" in why


def test_rule_never_picks_sm90_kernels_elsewhere():
    for arch in (80, 86, 89):
        assert "chain" not in rule.pickable_paths(arch, 132)
        assert not {"chain_stats", "chain_stats_tma"} & set(rule.pickable_kernels(arch, 132))
    assert "chain_stats_tma" in rule.pickable_kernels(90, 132)
    for shape in dropin_sweep.SWEEP:
        assert _choose(shape[0], shape[1], _device(86, 82))[0] in rule.pickable_paths(86, 82)


@pytest.mark.parametrize("arch", ["sm_80", "sm_86", "sm_89"])
@pytest.mark.slow
def test_every_kernel_the_rule_can_pick_compiles_for_the_arch(arch, cache_dir):
    from labkit.core.compile import compile_kernel

    a = int(arch[3:])
    kernels = set(rule.pickable_kernels(a, 132)) | set(paths.candidate_kernels(a))
    assert kernels == {"rows_fused", "reference_stats", "affine_rows", "chain_stats_tma", "affine_columns"}
    for k in sorted(kernels):
        assert compile_kernel(k, arch).record.arch == arch
    with pytest.raises(Exception, match="NVRTC"):  # why the chain's w1/w4 blockings refuse this arch
        compile_kernel("chain_stats", arch)


@pytest.mark.slow
def test_sm90_kernels_compile(cache_dir):
    from labkit.core.compile import compile_kernel

    kernels = paths.candidate_kernels(90)
    assert set(kernels) == {k for m in paths.PATHS.values() for k in m.KERNELS} and "chain_stats_tma" in kernels
    for k in kernels:
        assert compile_kernel(k, "sm_90").cubin.startswith(b"\x7fELF")


def test_explain_on_cpu_and_meta():
    e = labkit.explain(torch.randn(2, 8), (8,), torch.ones(8), torch.zeros(8))
    assert e["path"] == "native" and "x must be a CUDA tensor (got cpu)" in e["reason"]
    assert e["torch_path"] == "vectorized"
    assert e["backward"] == "native" and e["backward_reason"] == "not a GPU tensor"
    e = labkit.explain(torch.empty(1, (1 << 24) + 4, device="meta"), ((1 << 24) + 4,))
    assert e["path"] == "native" and e["torch_path"] == "rowwise_moments"


def _fake_sweep():
    # the rule's picks are part of the record (what the run's table said), fixed here so that the fixture does not
    # change meaning when the committed table is re-measured
    def row(key, rows, n, native, dropin, chain=None, l1=False):
        e = {"native": native, "dropin": dropin, "chain": chain, "rows_fused": native * 1.1,
             "reference_order": native * 1.5}
        return {"key": key, "rows": rows, "n": n, "l1_40": l1, "rule": "chain" if chain == dropin else "native",
                "eager": e, "graph": {"native": native, "dropin": dropin / 2},
                "compiled": {"native_compiled": native, "dropin_compiled": dropin}}
    return {"device": {"arch": 90, "sm_count": 132, "name": "test"}, "shapes": [
        row("1x16777216", 1, 1 << 24, 4.0, 0.2, 0.2),
        row("16x4194304", 16, 1 << 22, 8.0, 0.3, 0.3, l1=True),
        row("4096x256", 4096, 256, 0.010, 0.012, 0.050),
        row("1024x16384", 1024, 1 << 14, 0.050, 0.050, 0.200)]}


def test_summary_block_from_a_record_built_here():
    records = {"dropin_sweep": _fake_sweep(), "dropin_host": {"dropin_us": 7.5, "torch_us": 5.0},
               "dropin_identity": {"cases": [{"forward": True, "backward": True}, {"forward": True, "backward": False}],
                                   "compiled": [{"identical": True}]},
               "dropin_floor": {"shapes": [
                   {"key": "1x4194304", "chain_ms": 0.10, "floor_ms": 0.11, "eager": {"median_ms": 0.121},
                    "graph": {"median_ms": 0.099}},
                   {"key": "4x8388608", "chain_ms": 0.20, "floor_ms": 0.25, "eager": {"median_ms": 0.30},
                    "graph": {"median_ms": 0.26}}]}}
    s = study.dropin_block(records)
    assert set(s) == {"eager_worst_ratio", "eager_worst_shape", "small_shape_gap_us", "l1_40_eager_ratio",
                      "host_us_per_call", "torch_host_us_per_call", "forward_identical", "backward_identical",
                      "compiled_identical", "floor_eager_worst_ratio", "floor_graph_worst_ratio"}
    assert s["floor_eager_worst_ratio"] == pytest.approx(1.2) and s["floor_graph_worst_ratio"] == pytest.approx(1.04)
    assert study.floor_worst(records["dropin_floor"]) == (pytest.approx(1.2), "4x8388608")
    rows = {r["shape"]: r for r in dropin_sweep.floor_rows(records["dropin_floor"])}
    assert rows["1x4194304"]["output at ceiling us"] == pytest.approx(10.0)
    assert rows["1x4194304"]["eager / floor"] == pytest.approx(1.1)
    assert s["eager_worst_ratio"] == pytest.approx(1.0) and s["eager_worst_shape"] == "1024x16384"
    assert s["small_shape_gap_us"] == pytest.approx(2.0) and s["l1_40_eager_ratio"] == pytest.approx(8 / 0.3)
    assert (s["forward_identical"], s["backward_identical"], s["compiled_identical"]) == ("2/2", "1/2", "1/1")
    lines = "\n".join(study.verdict_lines(records, "test"))
    assert "1.00x at 1024x16384" in lines and "agrees at all 4 shapes" in lines
    assert "(goal >= 24x: met)" in lines and "torch + 5 us: met)" in lines
    assert "L2 flushed (protocol B): worst 1.20x the floor at 4x8388608 (goal <= 1.15x: missed)" in lines
    assert "graph replay (protocol A): worst 1.04x the floor at 4x8388608 (goal <= 1.15x: met)" in lines


def test_ordinary_shapes_are_judged_against_the_faster_peer_and_torch():
    def row(key, native, inductor, liger, ours):
        g = {"native": native, "dropin": ours, **({"inductor": inductor} if inductor else {}),
             **({"liger": liger} if liger else {})}
        return {"key": key, "graph": g, "path": "rows_fused", "identical": True}
    peers = {"shapes": [row("4096x768", 0.0129, 0.0063, 0.0066, 0.0085), row("8192x4096", 0.0939, 0.0663, 0.065, 0.065),
                        row("1024x65536", 0.236, 0.206, None, 0.200)]}
    rows = {r["shape"]: r for r in dropin_peers.peer_rows(peers)}
    assert rows["4096x768"]["faster peer"] == "torch.compile"
    assert rows["4096x768"]["x faster peer"] == pytest.approx(0.0063 / 0.0085)
    assert rows["1024x65536"]["faster peer"] == "torch.compile"  # Liger not timed there: the peer that was
    worst = dropin_peers.peers_worst(peers)
    assert (worst["vs_peer"], worst["vs_peer_shape"]) == (pytest.approx(0.0063 / 0.0085), "4096x768")
    assert (worst["vs_native"], worst["vs_native_shape"]) == (pytest.approx(0.236 / 0.200), "1024x65536")
    records = {"dropin_sweep": _fake_sweep(), "dropin_peers": peers}
    fwd = study.forward_block(records)
    assert fwd["ordinary_worst_vs_peer"] == pytest.approx(0.0063 / 0.0085) and fwd["ordinary_worst_shape"] == "4096x768"
    lines = "\n".join(study.verdict_lines(records, "test"))
    assert "worst 0.74x at 4096x768; short of the goal: 4096x768 0.74x" in lines and "(goal >= 0.95x: missed)" in lines
    assert "worst 1.18x at 1024x65536; short of the goal: " in lines and "(goal >= 1.25x: missed)" in lines
    assert study.forward_block({"dropin_sweep": _fake_sweep()})["ordinary_worst_vs_peer"] is None
    # a miss that two decimals would round onto the goal keeps the digits that show it (dropin-2b30f8: 0.9486)
    near = {"shapes": [row("4096x768", 0.0146, 0.007619, 0.007939, 0.008032)]}
    lines = "\n".join(study.verdict_lines({"dropin_sweep": _fake_sweep(), "dropin_peers": near}, "test"))
    assert "worst 0.949x at 4096x768; short of the goal: 4096x768 0.949x" in lines


def test_the_gap_to_the_faster_peer_reads_against_the_copy_timed_in_the_same_call():
    def row(key, copy, inductor, liger, ours):
        g = {"native": 0.02, "dropin": ours, "inductor": inductor, "liger": liger, **({"copy": copy} if copy else {})}
        return {"key": key, "graph": g, "path": "rows_fused", "identical": True}
    peers = {"shapes": [row("4096x768", 0.0065, 0.0076, 0.0079, 0.0080), row("8192x1024", 0.0198, 0.0208, 0.0204,
                                                                            0.0212)]}
    line = dropin_peers.peer_gap_line(peers)  # the worst shape against its faster peer: 0.0076 / 0.0080 < 0.0204 / 0.0212
    assert line == ("  at 4096x768, above the copy of x in the same call (6.50 us, the floor of every method there): "
                    "the drop-in 1.50 us, torch.compile 1.10 us")
    assert dropin_peers.peer_rows(peers)[0]["copy of x us"] == pytest.approx(6.5)
    assert line in study.verdict_lines({"dropin_sweep": _fake_sweep(), "dropin_peers": peers}, "test")
    old = {"shapes": [row("4096x768", None, 0.0076, 0.0079, 0.0080)]}  # runs before the copy was timed
    assert dropin_peers.peer_gap_line(old) is None and "copy of x us" not in dropin_peers.peer_rows(old)[0]
    assert dropin_peers.peer_gap_line(None) is None
    stats = {"dropin": {"q25_ms": 0.0078, "q75_ms": 0.0083}, "inductor": {"q25_ms": 0.0074, "q75_ms": 0.0079}}
    peers["shapes"][0]["graph_stats"] = stats
    assert dropin_peers.peer_gap_line(peers).endswith("; interquartile ranges 7.80-8.30 us and 7.40-7.90 us, which overlap")
    stats["inductor"]["q75_ms"] = 0.0077
    assert dropin_peers.peer_gap_line(peers).endswith("7.40-7.70 us, which do not overlap")


def test_dispatch_rows_flag_disagreement_and_propose_a_threshold():
    sw = _fake_sweep()
    sw["shapes"][0]["eager"]["chain"] = 5.0  # chain slower than native at the longest row
    rows = {r["shape"]: r for r in dropin_sweep.dispatch_rows(sw)}
    assert not rows["1x16777216"]["agrees"] and rows["16x4194304"]["agrees"] and rows["4096x256"]["agrees"]
    assert dropin_sweep.speed_rows(sw)[1]["graph x"] == pytest.approx(8 / 0.15)


def test_the_rule_agrees_with_the_committed_dropin_run():
    """Notebook 08's own sweep times the rule's picks again: where another path was faster there, by more than the
    agreement tolerance, the table (from the dispatch_table run) and this run disagree, and the test says where."""
    from labkit.records.session import newest_complete_run

    from labkit.ops.dispatch import tables

    run = newest_complete_run("dropin")
    assert run is not None, "no committed dropin run"
    sweep = run["records"]["dropin_sweep"]
    table, _ = tables.for_device(sweep["device"]["arch"], sweep["device"]["sm_count"])
    assert table.RUN_ID in sweep["rule_source"], "the committed dropin run timed another table than the code's"
    bad = [r["shape"] for r in dropin_sweep.dispatch_rows(sweep) if not r["agrees"]]
    # Known disagreements, by run: none in 9051a9 (nor in 273b32 and 2c5578 before it). bc03c9 (removed; git
    # history keeps it) had one at 3x64x17x19, a host-bound shape whose forced candidates' eager quartiles overlapped.
    # A new disagreement fails here; so does a listed one's disappearing (then delete it from the list).
    known: dict[str, list[str]] = {}
    assert bad == known.get(run["records"]["run"]["run_id"], [])


def test_summarize_run_includes_the_dropin_block(tmp_path):
    from labkit.records.run import Run
    from labkit.studies.catalog import summarize_run

    run = Run.create(tmp_path, "dropin", {"mode": "quick"}, device="cpu")
    run.write("dropin_sweep", _fake_sweep())
    run.close()
    s = summarize_run(run.path)
    assert s["dropin"]["eager_worst_shape"] == "1024x16384" and math.isclose(s["dropin"]["eager_worst_ratio"], 1.0)


def test_parameters_do_not_force_the_dispatcher(monkeypatch):
    calls = []
    real = op.layer_norm_op
    monkeypatch.setattr(op, "layer_norm_op", lambda *a: calls.append(1) or real(*a))
    ln = labkit.LayerNorm(8)
    with torch.no_grad():
        ln(torch.randn(2, 8))
    assert calls == []


def test_autocast_keeps_torchs_cast_policy():
    x, ln = torch.randn(4, 16, dtype=torch.bfloat16), torch.nn.LayerNorm(16)
    ours = labkit.LayerNorm.from_layer_norm(ln)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        a, b = ln(x), ours(x)
    assert_bits_equal(b, a, what="autocast output")  # dtype, shape and bits


def test_the_dispatch_protocol_is_one_of_the_rules_and_restores_itself():
    import labkit
    from labkit.ops.dropin import plan

    import threading

    before = plan.current_protocol()
    seen = []
    with labkit.dispatch_protocol("graph"):
        assert plan.current_protocol() == "graph"
        t = threading.Thread(target=lambda: seen.append(plan.current_protocol()))  # its own context: the default
        t.start()
        t.join()
    assert plan.current_protocol() == before and seen == [before]
    with pytest.raises(ValueError, match="protocol must be one of"):
        labkit.dispatch_protocol("replayed")
    monkey = pytest.MonkeyPatch()
    monkey.setattr(plan, "_ENV_PROTOCOL", "replay")
    with pytest.raises(ValueError, match="LABKIT_PROTOCOL must be one of .* got 'replay'"):
        plan.current_protocol()
    monkey.undo()


def test_record_tables_have_a_readers_headers():
    """The near-max, model and wide-model records as tables: words for headers, not record keys; nothing without a
    record."""
    from labkit.studies import dropin_bits, training_models

    near = {"shape": [4, 768], "elements": 3072, "eager_nan": 0, "eager_finite": True, "compiled_native_nan": 3072,
            "compiled_dropin_nan": 0, "compiled_dropin_identical": True, "compiled_native_identical": False}
    model = {"vocab": 512, "d_model": 256, "heads": 4, "layers": 2, "batch": 8, "seq": 64, "steps": 3, "swapped": 5,
             "ln_path": "rows_fused", "losses_identical": "3/3", "grads_identical": "87/87", "weights_identical": "29/29"}
    wide = {"channels": 64, "height": 256, "width": 256, "batch": 16, "steps": 5, "native_step_ms": 20.0,
            "dropin_step_ms": 4.0, "first_step_grads_identical": "6/6"}
    for rows in (dropin_bits.near_max_rows(near), training_models.model_rows(model), training_models.wide_rows(wide)):
        assert len(rows) == 1 and all("_" not in k for k in rows[0])
    assert training_models.wide_rows(wide)[0]["x torch"] == 5.0 and dropin_bits.near_max_rows(near)[0]["shape"] == "4x768"
    assert dropin_bits.near_max_rows(None) == training_models.model_rows(None) == training_models.wide_rows({}) == []


def test_listed_ratios_keep_the_digits_their_goal_needs():
    from labkit.studies.goals import listed

    pairs = [("a", 0.9486), ("b", 0.8123), ("c", 1.1504)]
    assert listed(pairs) == "a 0.95x, b 0.81x, c 1.15x"
    assert listed(pairs[:2], limit=0.95) == "a 0.949x, b 0.81x"  # only the one that would read as the goal grows
    assert listed(pairs[2:], limit=1.15) == "c 1.1504x"  # over the goal by less than 2 decimals show
    assert listed([], empty="") == "" and listed([]) == "none"


def test_low_precision_dispatch_reads_each_dtypes_sweep_with_only_the_paths_built_for_it():
    """Notebook 08's 2-byte dispatch data: one row per dtype and grid point, columns for torch and the paths built
    for 2-byte inputs only, the rule's pick against the fastest; a line per dtype names the worst point."""
    from labkit.ops.paths import DTYPES

    def sweep(dtype, chain_us):
        return {"dtype": dtype, "device": {"name": "GPU", "arch": 90, "sm_count": 132},
                "shapes": [{"key": "16x4194304", "rule": "chain", "eager": {"native": 8.0, "dropin": 0.3,
                                                                            "chain": chain_us, "rows_fused": 2.0}},
                           {"key": "4096x768", "rule": "rows_fused", "eager": {"native": 0.02, "dropin": 0.012,
                                                                               "rows_fused": 0.011}}]}

    class Replay:
        recs = {"dropin_sweep_bfloat16": sweep("bfloat16", 0.3), "dropin_sweep_float16": sweep("float16", 3.0)}

        def record(self, name):
            return self.recs.get(name)

        def absent(self, name):
            return "nothing"

    line, rows = dropin_sweep.low_precision_dispatch(Replay())
    built = {p for p, d in DTYPES.items() if "bfloat16" in d}
    assert {k.removesuffix(" us") for k in rows[0] if k.endswith(" us")} == built | {"native"}
    assert [(r["dtype"], r["agrees"]) for r in rows] == [("bfloat16", True), ("bfloat16", True),
                                                         ("float16", False), ("float16", True)]
    bf16, fp16 = line.splitlines()
    assert bf16 == "bfloat16: the rule's pick is within 5% (or 2 us) of the fastest path at 2 of 2 grid points " \
                   "(eager per call, GPU)."  # no "worst" where the pick agrees everywhere
    assert "1 of 2" in fp16 and "worst at 16x4194304: chain takes 1.50x rows_fused's time" in fp16
    Replay.recs = {}
    assert dropin_sweep.low_precision_dispatch(Replay()) == ("2-byte dispatch data: nothing.", [])
