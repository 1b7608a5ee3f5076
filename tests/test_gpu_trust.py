"""The trust gate on the GPU (labkit.ops.trust): the canary passes on this install (every pickable path and schedule
bit-identical to torch's kernels), the verdict names its source, a planted one-ulp difference in the reference makes
the gate serve torch and warn, and a first plan under CUDA graph capture with an unverified key serves torch without
running or keeping the check."""
import dataclasses

import pytest

from served import skip_unless_ours_serve

pytestmark = pytest.mark.gpu


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    from labkit.ops import trust
    from labkit.ops.dropin import plan

    monkeypatch.setenv("LABKIT_TRUST_DIR", str(tmp_path))
    trust.forget()
    trust._warned.clear()
    plan.clear()
    yield trust
    trust.forget()
    plan.clear()


def test_the_canary_passes_here(fresh):
    from labkit.ops.dropin import canary

    rec = canary.run(0)
    assert rec["error"] is None and rec["first_mismatch"] is None and rec["identical"], rec
    assert rec["cases"] >= 20


def test_the_canary_passes_inside_autocast(fresh):
    """A first plan made inside torch.autocast runs the check there: autocast's policy must not cast the reference
    (torch.native_layer_norm of a bf16 x would give float32 y and fail every 2-byte case)."""
    import torch

    from labkit.ops.dropin import canary

    with torch.autocast("cuda", dtype=torch.bfloat16):
        result = canary.run(torch.cuda.current_device())
        assert torch.is_autocast_enabled("cuda")  # the caller's autocast is back after the check
    assert result["identical"], result


def test_the_verdict_names_its_source(fresh):
    import torch

    import labkit

    x = torch.randn(16, 1 << 20, device="cuda")
    src = labkit.explain(x, (1 << 20,))["trust"]
    assert src.startswith("verified by committed run") or "canary at first use passed" in src, src


def test_a_planted_ulp_serves_torch_and_warns(fresh, monkeypatch):
    import torch

    import labkit

    skip_unless_ours_serve(16, 1 << 20)

    real = torch.native_layer_norm

    def planted(x, ns, w, b, eps):  # torch's kernel as a release one ulp away would give it
        y, mean, rstd = real(x, ns, w, b, eps)
        return y.view(torch.int32).add(1).view(torch.float32), mean, rstd

    k = fresh.key(0)
    monkeypatch.setattr(fresh, "key", lambda index: dataclasses.replace(k, torch=k.torch + "+planted"))
    monkeypatch.setattr(torch, "native_layer_norm", planted)
    x = torch.randn(16, 1 << 20, device="cuda")
    with pytest.warns(RuntimeWarning, match="failed \\(forward path"):
        explained = labkit.explain(x, (1 << 20,))
    monkeypatch.setattr(torch, "native_layer_norm", real)
    assert explained["path"] == "native" and explained["reason"].startswith("trust:")
    y = labkit.layer_norm(x, (1 << 20,))
    assert torch.equal(y.view(torch.int32), torch.nn.functional.layer_norm(x, (1 << 20,)).view(torch.int32))


def test_a_first_plan_under_capture_serves_torch_and_checks_later(fresh, monkeypatch):
    import torch

    import labkit

    skip_unless_ours_serve(16, 1 << 20)

    k = fresh.key(0)
    monkeypatch.setattr(fresh, "key", lambda index: dataclasses.replace(k, torch=k.torch + "+unverified"))
    x = torch.randn(16, 1 << 20, device="cuda")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        y = labkit.layer_norm(x, (1 << 20,))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(y.view(torch.int32), torch.nn.functional.layer_norm(x, (1 << 20,)).view(torch.int32))
    assert fresh.cached(fresh.key(0)) is None  # not run under capture
    assert labkit.explain(x, (1 << 20,))["path"] != "native"  # outside capture: checked, passed, ours
    assert fresh.cached(fresh.key(0))["identical"]


def test_enable_settles_the_gate_before_standing_in_front_of_torch(fresh, monkeypatch):
    """labkit.enable() runs the check first (once its kernels replace torch's, the check would have no reference and
    be postponed): under enable, an unverified key's first call is served by our kernels."""
    import torch

    import labkit
    from labkit.ops.dropin import aten

    k = fresh.key(0)
    monkeypatch.setattr(fresh, "key", lambda index: dataclasses.replace(k, torch=k.torch + "+unverified-enable"))
    x = torch.randn(16, 1 << 20, device="cuda")
    try:
        labkit.enable()
        assert fresh.cached(fresh.key(0))["identical"]
        if labkit.explain(x, (1 << 20,))["path"] == "native":
            pytest.skip("this GPU's table gives the chain shape to torch's kernel")
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            torch.nn.functional.layer_norm(x, (1 << 20,))
            torch.cuda.synchronize()
        names = " ".join(e.key for e in prof.key_averages())
        assert "chain" in names and "vectorized_layer_norm_kernel" not in names, names
    finally:
        aten.disable()


def test_the_gate_study_records_each_situation(fresh):
    """Notebook 08's record of the gate (labkit.studies.dropin_bits.trust_gate): what each situation served."""
    from labkit.studies import dropin_bits

    skip_unless_ours_serve(16, 1 << 20)
    rec = dropin_bits.trust_gate("cuda")
    assert rec["verified"]["trust"].startswith("verified by committed run") and rec["verified"]["canary_cases"] is None
    assert rec["unverified"]["canary_cases"] >= 20 and "canary at first use passed" in rec["unverified"]["trust"]
    assert rec["planted"]["path"] == "native" and len(rec["planted"]["warnings"]) == 1
    assert "failed (forward path" in rec["planted"]["warnings"][0]
    assert rec["capture"]["captured"] == "torch's kernel" and not rec["capture"]["checked_under_capture"]
    assert rec["capture"]["canary_cases"] >= 20 and rec["capture"]["path"] != "native"
    assert len(dropin_bits.trust_gate_rows(rec)) == 4
