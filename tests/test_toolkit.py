"""The install rule: which CUDA extra a torch build takes, the check that the installed one fits, and pyproject.toml's
extras holding exactly the packages the rule names."""
import re
from pathlib import Path

import pytest

from labkit.core import toolkit

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


@pytest.mark.parametrize("version, extra", [
    ("12.4", "cuda12"),  # torch's cu124 builds (torch 2.5's default wheel)
    ("12.8", "cuda12"),
    ("13.0", "cuda13"),  # the H200's torch 2.11.0+cu130
    (None, "cuda13"),    # a CPU build: NVRTC only compiles, and 13.0 gives the H200's cache keys
])
def test_the_rule_follows_torchs_cuda_major(version, extra):
    assert toolkit.cuda_extra(version) == extra


@pytest.mark.parametrize("bad", ["11.8", "14.0", "cu124", "", "12"])  # no extra for 11 or 14; not a version
def test_the_rule_refuses_what_it_has_no_extra_for_naming_the_value(bad):
    with pytest.raises(ValueError, match=re.escape(repr(bad))):
        toolkit.cuda_extra(bad)


def _installed(monkeypatch, torch_cuda, runtime, nvrtc):
    monkeypatch.setattr(toolkit, "installed_versions", lambda: (torch_cuda, runtime, nvrtc))
    monkeypatch.setattr(toolkit, "_checked", [])  # the process's one check, made again for this case


def test_check_match_names_both_versions_and_the_install_line(monkeypatch):
    _installed(monkeypatch, "12.4", "13.2", "13.0")  # the cuda13 extra under a CUDA 12 torch
    with pytest.raises(RuntimeError) as err:
        toolkit.check_match()
    msg = str(err.value)
    assert "CUDA 12.4" in msg and "13.2" in msg and "13.0" in msg
    assert 'pip install -e ".[cuda12]"' in msg and "pip uninstall -y cupy-cuda13x nvidia-cuda-nvrtc" in msg


def test_check_match_sees_nvrtc_of_the_other_major_alone(monkeypatch):
    """CuPy for CUDA 12 loads libnvrtc.so.13 when it finds one: the runtime fits, NVRTC does not."""
    _installed(monkeypatch, "12.8", "12.9", "13.0")
    with pytest.raises(RuntimeError, match=re.escape('pip install -e ".[cuda12]"')):
        toolkit.check_match()


def test_check_match_names_the_extra_when_cupy_is_missing(monkeypatch):
    _installed(monkeypatch, "13.0", None, None)
    with pytest.raises(RuntimeError, match=r"CuPy is not installed.*\.\[cuda13\]"):
        toolkit.check_match()


@pytest.mark.parametrize("versions", [
    ("12.8", "12.9", "12.4"),  # minors may differ: one major is what must hold
    ("13.0", "13.2", "13.0"),
    (None, None, "13.0"),      # a CPU build of torch: nothing launches; NVRTC of any major compiles
])
def test_check_match_passes_when_the_majors_agree(monkeypatch, versions):
    _installed(monkeypatch, *versions)
    toolkit.check_match()


def test_installed_versions_on_a_cpu_torch_asks_nvrtc_only(monkeypatch):
    import torch

    monkeypatch.setattr(torch.version, "cuda", None)
    got = toolkit.installed_versions()
    assert got[:2] == (None, None) and got[2] is not None  # this machine has NVRTC 13.0


def test_a_cpu_torch_without_nvrtc_is_told_the_install_line(monkeypatch):
    _installed(monkeypatch, None, None, None)
    with pytest.raises(RuntimeError, match=r'CPU mode compiles every kernel with it; run pip install -e "\.\[cuda13\]"'):
        toolkit.check_match()


def test_the_check_runs_before_the_first_cupy_call_on_a_gpu(monkeypatch):
    """labkit.core.device.device_info asks check_match before it imports CuPy's runtime."""
    import sys

    from labkit.core import device

    calls = []
    monkeypatch.setattr(toolkit, "check_match", lambda: calls.append("check") or (_ for _ in ()).throw(
        RuntimeError("wrong extra")))
    monkeypatch.setitem(sys.modules, "cupy.cuda", None)  # importing CuPy's runtime would fail: it must not be reached
    monkeypatch.setattr(device, "_devices", {})
    with pytest.raises(RuntimeError, match="wrong extra"):
        device.device_info(0)
    assert calls == ["check"]


def _names(requirements) -> set[str]:
    return {re.match(r"[A-Za-z0-9_.\-]+", r).group(0).lower() for r in requirements}


def test_pyproject_extras_hold_exactly_the_packages_the_rule_names():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+; the package allows 3.10
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    extras = project["optional-dependencies"]
    for extra, packages in toolkit.EXTRA_PACKAGES.items():
        assert _names(extras[extra]) == set(packages), extra
    # the base install and the other extras leave the CUDA major to the user's pick
    cuda = {p for packages in toolkit.EXTRA_PACKAGES.values() for p in packages}
    assert not any(n.startswith("cupy") for n in _names(project["dependencies"]))
    assert not _names(project["dependencies"]) & cuda
    for extra in set(extras) - set(toolkit.EXTRA_PACKAGES):
        assert not _names(extras[extra]) & cuda and not any("labkit[" in r for r in extras[extra]), extra


def test_labkit_env_prints_the_rules_answer_for_this_torch(capsys):
    import json

    import torch

    from labkit.cli import main

    assert main(["env"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["cuda_extra"] == toolkit.cuda_extra(torch.version.cuda)
    assert info["cuda_extra_mismatch"] == toolkit.mismatch(*toolkit.installed_versions())
