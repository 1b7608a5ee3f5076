"""scripts/check_installed.py (.ci/run's install test): its golden digests are data/fixtures' file, and its
emulator and drop-in checks pass on this checkout (the installed-package check runs in CI's fresh venv)."""
import importlib.util
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parent.parent
FIXTURE = REPO / "data" / "fixtures" / "normal_plus_1000_2x1544_s0_random_normal.npz"


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("check_installed", REPO / "scripts" / "check_installed.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_golden_digests_are_the_committed_fixtures(script):
    g = script.GOLDEN
    with np.load(FIXTURE) as f:
        assert (str(f["distribution"]), str(f["shape"]), int(f["seed"]), str(f["affine"])) == \
            (g["distribution"], ",".join(map(str, g["shape"])), g["seed"], g["affine"])
        assert np.float32(f["eps"]) == np.float32(g["eps"])
        for name in ("x", "gamma", "beta", "y"):
            assert script.bits_sha256(f[name]) == g[f"{name}_sha256"], name
        assert tuple(f["mean"].view(np.int32).tolist()) == g["mean_bits"]
        assert tuple(f["rstd"].view(np.int32).tolist()) == g["rstd_bits"]


def test_the_emulator_and_dropin_checks_pass_here(script):
    assert "equal torch's on the H200" in script.check_emulator()
    assert "bit for bit" in script.check_dropin()


def test_a_failed_check_fails_loudly(script, monkeypatch, capsys):
    assert script.run_checks(None) == 1  # from a checkout the first check fails, and nothing after it runs
    assert capsys.readouterr().err.startswith("FAILED: labkit reads its sources from ")
    monkeypatch.setitem(script.GOLDEN, "y_sha256", "0" * 64)
    with pytest.raises(script.CheckFailed, match="output bits differ"):
        script.check_emulator()
