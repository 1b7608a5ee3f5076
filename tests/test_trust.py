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
from labkit.ops.trust_verified import VERIFIED

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    monkeypatch.setenv("LABKIT_TRUST_DIR", str(tmp_path))
    monkeypatch.delenv("LABKIT_TRUST", raising=False)
    trust.forget()
    trust._warned.clear()
    yield
    trust.forget()


def _key(**change):
    row = VERIFIED[0]
    base = trust.Key(**{f.name: row[f.name] for f in dataclasses.fields(trust.Key)})
    return dataclasses.replace(base, **change)


def _canary(result, calls):
    def run(index=0):
        calls.append(index)
        return {"identical": result is None, "cases": 7, "first_mismatch": result, "error": None, "seconds": 0.1,
                "date_utc": "2026-12-06T00:00:00+00:00"}
    return run


def _setup(monkeypatch, k, result=None):
    calls = []
    monkeypatch.setattr(trust, "key", lambda index: k)
    monkeypatch.setattr(trust, "_cannot_run_canary", lambda index: None)
    monkeypatch.setattr(canary, "run", _canary(result, calls))
    return calls


def test_mode_names_a_bad_value(monkeypatch):
    monkeypatch.setenv("LABKIT_TRUST", "lenient")
    with pytest.raises(ValueError, match="LABKIT_TRUST must be one of .* got 'lenient'"):
        trust.mode()
    monkeypatch.delenv("LABKIT_TRUST")
    assert trust.mode() == "check"


def test_a_row_without_torchs_git_version_matches_any_build_of_that_version():
    assert _key(torch_git="abc").matches({**VERIFIED[0], "torch_git": None})
    assert not _key(torch_git="abc").matches({**VERIFIED[0], "torch_git": "def"})
    assert not _key(sms=114).matches(VERIFIED[0])


def test_kernel_digest_from_a_runs_hashes():
    from labkit.records.run import kernel_source_hashes

    hashes = kernel_source_hashes()
    assert trust.kernels_digest(hashes) == trust.kernels_digest()
    first = trust.dropin_kernel_files()[0]
    assert trust.kernels_digest({k: v for k, v in hashes.items() if k != first}) is None
    assert trust.kernels_digest({**hashes, first: "0" * 64}) != trust.kernels_digest()


def test_the_committed_table_is_the_runs():
    spec = importlib.util.spec_from_file_location("trust_table", ROOT / "scripts" / "trust_table.py")
    table = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(table)
    assert (ROOT / "labkit" / "ops" / "trust_verified.py").read_text() == table.text()
    assert VERIFIED and all(row["kernels"] == trust.kernels_digest() for row in VERIFIED[-1:])


def test_a_verified_key_serves_without_the_canary(fresh, monkeypatch):
    calls = _setup(monkeypatch, _key())
    v = trust.verdict(0)
    assert v.allowed and VERIFIED[0]["run"] in v.source and calls == []


def test_an_unverified_key_runs_the_canary_once_and_keeps_its_verdict(fresh, monkeypatch):
    calls = _setup(monkeypatch, _key(torch="2.99.0"))
    v = trust.verdict(0)
    assert v.allowed and "canary at first use passed" in v.source and calls == [0]
    trust.forget()  # a new process: the verdict is read from disk
    v = trust.verdict(0)
    assert v.allowed and "canary on this machine" in v.source and calls == [0]


def test_a_planted_mismatch_serves_torch_and_warns_once(fresh, monkeypatch):
    _setup(monkeypatch, _key(kernels="planted"), result="forward path chain at 2x262144: y")
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


def test_torchs_own_kernels_on_this_install():
    assert trust.torch_kernels_are_torchs()


def test_verify_without_a_gpu(capsys):
    import torch

    from labkit import cli

    if torch.cuda.is_available():
        pytest.skip("a GPU is here")
    assert cli.main(["verify"]) == 0
    assert "no CUDA GPU" in capsys.readouterr().out
