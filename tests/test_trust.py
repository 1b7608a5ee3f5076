"""The trust gate (labkit.ops.trust) on the CPU: the policy, the key's matching, the kernel digest, the committed
table regenerated from the runs, and the verdict's sources with a stand-in canary (verified key, canary passed and
kept on disk, a planted mismatch failing and warning once, strict, off, a check that cannot run yet). The canary
itself runs on a GPU (tests/test_gpu_trust.py)."""
import dataclasses
import importlib.util
import warnings
from pathlib import Path

import pytest

from labkit.ops import trust
from labkit.ops.dropin import canary

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    monkeypatch.setenv("LABKIT_TRUST_DIR", str(tmp_path))
    monkeypatch.delenv("LABKIT_TRUST", raising=False)
    trust.forget()
    trust._warned.clear()
    yield
    trust.forget()


ROW = {"torch": "2.11.0+cu130", "torch_git": "abc123", "torch_cuda": "13.0", "gpu": "NVIDIA H200", "target": "sm_90",
       "sms": 132, "nvrtc": "13.0", "code": "c0de", "torch_kernels": True, "run": "r-dropin", "cases": 99}


def _key(**change):
    base = trust.Key(**{f.name: ROW[f.name] for f in dataclasses.fields(trust.Key)})
    return dataclasses.replace(base, **change)


def _canary(result, calls):
    def run(index=0):
        calls.append(index)
        return {"identical": result is None, "cases": 7, "first_mismatch": result, "error": None, "seconds": 0.1,
                "date_utc": "2026-12-06T00:00:00+00:00"}
    return run


def _setup(monkeypatch, k, result=None, verified=()):
    calls = []
    monkeypatch.setattr(trust, "key", lambda index: k)
    monkeypatch.setattr(trust, "verified", lambda key: next((r for r in verified if key.matches(r)), None))
    monkeypatch.setattr(trust, "_cannot_run_canary", lambda index: None)
    monkeypatch.setattr(canary, "run", _canary(result, calls))
    return calls


def test_mode_names_a_bad_value(monkeypatch):
    monkeypatch.setenv("LABKIT_TRUST", "lenient")
    with pytest.raises(ValueError, match="LABKIT_TRUST must be one of .* got 'lenient'"):
        trust.mode()
    monkeypatch.delenv("LABKIT_TRUST")
    assert trust.mode() == "check"


def test_a_row_matches_every_field_of_the_key():
    assert _key().matches(ROW)
    for field, other in (("torch_git", "def456"), ("sms", 114), ("target", "compute_90"), ("code", "edited"),
                         ("torch_kernels", False)):
        assert not _key(**{field: other}).matches(ROW), field


def test_the_code_digest_covers_kernels_options_and_launch_modules(monkeypatch):
    from labkit.core import compile as nvrtc

    before = trust.code_digest()
    assert "welford_ln.cuh" in trust.dropin_kernel_files() and "chain_stats_tma.cu" in trust.dropin_kernel_files()
    monkeypatch.setattr(nvrtc, "BASE_OPTIONS", nvrtc.BASE_OPTIONS + ("--use_fast_math",))
    assert trust.code_digest() != before
    monkeypatch.undo()
    real = trust.hashlib.sha256

    def edited(data=b""):  # as if labkit/ops/backward.py had one byte more
        return real(data + b" " if b"def gamma_beta_template" in data else data)

    monkeypatch.setattr(trust.hashlib, "sha256", edited)
    assert trust.code_digest() != before


def test_the_committed_table_is_the_runs(tmp_path):
    spec = importlib.util.spec_from_file_location("trust_table", ROOT / "scripts" / "trust_table.py")
    table = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(table)
    assert (ROOT / "labkit" / "ops" / "trust_verified.py").read_text() == table.text()
    # a run verifies the key its recorded check passed on, and nothing else does
    import json

    for name, rec in (("a", {"key": {"torch": "t"}, "identical": True, "error": None, "cases": 5}),
                      ("b", {"key": {"torch": "u"}, "identical": False, "error": None, "cases": 5}),
                      ("c", {"key": {"torch": "v"}, "identical": True, "error": "OOM", "cases": 5}),
                      ("d", None)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "run.json").write_text("{}")
        if rec:
            (tmp_path / name / "trust_canary.json").write_text(json.dumps(rec))
    assert table.rows(tmp_path) == [{"torch": "t", "run": "a", "cases": 5}]


def test_a_verified_key_serves_without_the_canary(fresh, monkeypatch):
    calls = _setup(monkeypatch, _key(), verified=(ROW,))
    v = trust.verdict(0)
    assert v.allowed and "r-dropin" in v.source and calls == []


def test_an_unverified_key_runs_the_canary_once_and_keeps_its_verdict(fresh, monkeypatch):
    calls = _setup(monkeypatch, _key(torch="2.99.0"))
    v = trust.verdict(0)
    assert v.allowed and "canary at first use passed" in v.source and calls == [0]
    trust.forget()  # a new process: the verdict is read from disk
    v = trust.verdict(0)
    assert v.allowed and "canary on this machine" in v.source and calls == [0]


def test_a_planted_mismatch_serves_torch_and_warns_once(fresh, monkeypatch):
    _setup(monkeypatch, _key(code="planted"), result="forward path chain at 2x262144: y")
    with pytest.warns(RuntimeWarning, match="first use failed .*forward path chain at 2x262144: y"):
        v = trust.verdict(0)
    assert not v.allowed and v.final
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not trust.verdict(0).allowed  # warned about once in a process
    trust.forget()  # a new process: the failed verdict is read from disk, the canary not run again
    with pytest.warns(RuntimeWarning, match="canary on this machine .* failed"):
        assert not trust.verdict(0).allowed


def test_strict_serves_verified_keys_only(fresh, monkeypatch):
    monkeypatch.setenv("LABKIT_TRUST", "strict")
    calls = _setup(monkeypatch, _key(torch="2.99.0"))
    with pytest.warns(RuntimeWarning, match="LABKIT_TRUST=strict"):
        assert not trust.verdict(0).allowed
    assert calls == []


def test_off_does_not_check(fresh, monkeypatch):
    monkeypatch.setenv("LABKIT_TRUST", "off")
    calls = _setup(monkeypatch, _key(torch="2.99.0"))
    assert trust.verdict(0).allowed and calls == []


def test_a_check_that_cannot_run_yet_is_asked_again(fresh, monkeypatch):
    calls = _setup(monkeypatch, _key(torch="2.99.0"))
    monkeypatch.setattr(trust, "_cannot_run_canary", lambda index: "the check runs outside CUDA graph capture")
    v = trust.verdict(0)
    assert not v.allowed and not v.final and "graph capture" in v.source and calls == []
    monkeypatch.setattr(trust, "_cannot_run_canary", lambda index: None)
    assert trust.verdict(0).allowed and calls == [0]


def test_backward_floor(monkeypatch):
    import torch

    monkeypatch.setattr(torch, "__version__", "2.7.1+cu126")
    assert "predates" in trust.backward_refusal() and "2.7.1" in trust.backward_refusal()
    monkeypatch.setattr(torch, "__version__", "2.8.0")
    assert trust.backward_refusal() is None


def test_whose_kernels_aten_runs(monkeypatch):
    import torch

    def dump(where):
        return lambda op: f"name: {op}\nCPU: registered at /x/RegisterCPU_0.cpp:1 :: ()\nCUDA: registered at {where} :: ()"

    for where, own in (("/__w/pytorch/pytorch/build/aten/src/ATen/RegisterCUDA_0.cpp:2833", True),
                       ("/home/u/checkout/host/layer_norm.cpp:812", True),  # labkit.enable(), built anywhere
                       ("/site-packages/fancy_norms/override.py:40", False),
                       ("/opt/cutedsl/layernorm.cpp:7", False)):
        monkeypatch.setattr(torch._C, "_dispatch_dump", dump(where))
        assert trust.torch_kernels_are_torchs() is own, where


def test_an_unwritable_cache_keeps_the_verdict_for_the_process(fresh, monkeypatch, tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("LABKIT_TRUST_DIR", str(blocker / "trust"))  # a folder under a file: cannot be made
    calls = _setup(monkeypatch, _key(torch="2.99.0"))
    assert trust.verdict(0).allowed and trust.verdict(0).allowed and calls == [0]
    assert "kept for this process only" in caplog.text


def test_a_check_that_raised_is_not_kept_on_disk(fresh, monkeypatch):
    calls = _setup(monkeypatch, _key(torch="2.99.0"))
    monkeypatch.setattr(canary, "run", lambda index=0: calls.append(index) or {
        "identical": False, "cases": 3, "first_mismatch": None, "error": "OutOfMemoryError: CUDA out of memory",
        "seconds": 0.1, "date_utc": "2026-12-06T00:00:00+00:00"})
    with pytest.warns(RuntimeWarning, match="out of memory"):
        assert not trust.verdict(0).allowed
    assert trust.cached(_key(torch="2.99.0")) is None
    trust.forget()
    trust._warned.clear()  # a new process
    with pytest.warns(RuntimeWarning):
        trust.verdict(0)
    assert calls == [0, 0]  # asked again in a new process


def test_verify_without_a_gpu(capsys):
    import torch

    from labkit import cli

    if torch.cuda.is_available():
        pytest.skip("a GPU is here")
    assert cli.main(["verify"]) == 0
    assert "no CUDA GPU" in capsys.readouterr().out


def test_a_postponed_check_is_said_once(fresh, monkeypatch, caplog):
    import logging

    calls = _setup(monkeypatch, _key(torch="2.99.0"))
    monkeypatch.setattr(trust, "_cannot_run_canary", lambda index: "the check runs outside CUDA graph capture")
    with caplog.at_level(logging.INFO, logger="labkit"):
        trust.verdict(0)
        trust.verdict(0)
    assert caplog.text.count("is postponed") == 1 and calls == []


def test_the_gate_study_is_gpu_only_and_its_table_reads_each_situation():
    from labkit.studies import dropin_bits

    assert dropin_bits.trust_gate("cpu") is None and dropin_bits.trust_gate_rows(None) == []
    r = {"path": "chain", "trust": "the canary at first use passed: 9 cases identical", "seconds_to_first_plan": 1.5,
         "canary_cases": 9, "canary_seconds": 1.25, "warnings": []}
    rows = dropin_bits.trust_gate_rows({"unverified": r, "planted": {**r, "path": "native", "warnings": [
        "labkit: our kernels do not serve on this install: the canary at first use failed (forward path chain)"]}})
    assert rows[0]["served"] == "ours (chain)" and rows[0]["check"] == "9 cases in 1.25 s" and rows[0]["warned"] == "no"
    assert rows[1]["served"] == "torch's kernel" and rows[1]["warned"].startswith("the canary at first use failed")


@pytest.mark.parametrize("arch, smem, chain", [(90, 232448, True), (80, 166912, True), (86, 101376, True),
                                               (120, 101376, False)])
def test_the_canary_forces_the_backward_chain_wherever_it_is_planned(monkeypatch, arch, smem, chain):
    """The canary's backward cases are every schedule the launches take at its shapes on the device: the chain
    schedule wherever N is a multiple of 512, reaching all four of its entry points, on sm_90 (tensor maps) and
    below it (the cp.async ring); not on sm_120, whose 99 KiB hold no tensor-map ring."""
    from labkit.core import device
    from labkit.ops import backward

    dev = device.Device(f"sm_{arch}", arch, 132, smem, 65535)
    monkeypatch.setattr(device, "device_info", lambda index: dev)
    every = list(canary._backward_cases(0))
    assert {dtype for *_, dtype in every} == set(backward.DROP_IN_DTYPES)  # each schedule in each dtype served
    for want in backward.DROP_IN_DTYPES:
        cases = [(sch, rows, n) for sch, rows, n, dtype in every if dtype == want]
        assert {(rows, n) for sch, rows, n in cases if sch == "chain"} == \
            ({(rows, n) for rows, n in canary.SHAPES if n % 512 == 0} if chain else set())
        assert {backward.launches(rows, n, dev, sch, dtype=want).sums.function
                for sch, rows, n in cases if sch == "chain"} == \
            ({backward.chain_function(s, dev) for s in backward.CHAIN_SPLITS} if chain else set())
        assert {(rows, n) for sch, rows, n in cases if sch == "rows"} == {(rows, n) for rows, n in canary.SHAPES}
