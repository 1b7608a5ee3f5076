"""Golden-fixture format: a round trip with FAKE data made by torch on the CPU (a format test, not GPU bits)."""
import hashlib
import json

import numpy as np
import pytest

from labkit import tasks
from labkit.studies import fast_stats as ce

from labkit.records import fixtures

SMALL_SPECS = (((3, 64, 17, 19), "normal_plus_1000", 0, "random_normal"),
               ((3, 64, 17, 19), "constant_1e4", 0, "random_normal"),
               ((2, fixtures.RAGGED_N), "normal", 1, "default"))


@pytest.fixture
def cpu_fixtures(tmp_path):
    paths = fixtures.record_fixtures(tmp_path, device="cpu", specs=SMALL_SPECS, format_test=True)
    return tmp_path, paths


def test_cpu_recording_needs_format_test_flag_and_a_scratch_dir(tmp_path):
    with pytest.raises(ValueError, match="format_test"):
        fixtures.record_fixtures(tmp_path, device="cpu", specs=SMALL_SPECS[:1])
    with pytest.raises(ValueError, match="refusing"):
        fixtures.record_fixtures(fixtures.FIXTURE_DIR, device="cpu", specs=SMALL_SPECS[:1], format_test=True)
    with pytest.raises(ValueError, match="device"):
        fixtures.record_fixtures(tmp_path, device="tpu", specs=SMALL_SPECS[:1])


def test_round_trip_has_the_emulator_test_format(cpu_fixtures):
    root, paths = cpu_fixtures
    assert [p.name for p in paths] == [f"{fixtures.fixture_name(*s)}.npz" for s in SMALL_SPECS]
    loaded = fixtures.load_fixtures(root)
    assert [f["name"] for f in loaded] == sorted(p.stem for p in paths)
    for f in loaded:
        rows, n = f["x"].shape
        assert rows * n == np.prod(f["shape"]) and n == np.prod(f["shape"][1:])
        for key, shape in (("x", (rows, n)), ("y", (rows, n)), ("mean", (rows,)), ("rstd", (rows,)),
                           ("gamma", (n,)), ("beta", (n,)), ("fast_mean", (rows,)), ("fast_var", (rows,)),
                           ("fast_rstd", (rows,)), ("fast_y", (rows, n))):
            assert f[key].dtype == np.float32 and f[key].shape == shape, key
        assert isinstance(f["eps"], float) and isinstance(f["seed"], int)
        assert f["gpu"] == fixtures.CPU_FORMAT_TEST and not fixtures.is_gpu_fixture(f)
        assert "FORMAT TEST" in f["source"] and f["torch_version"]
    # the raw npz reads like tests/test_emulator.py reads it
    with np.load(paths[0]) as data:
        assert float(data["eps"]) == pytest.approx(1e-5) and data["x"].ndim == 2
    manifest = json.loads((root / "manifest.json").read_text())
    assert manifest["format_test"] is True
    assert manifest["files"] == {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in paths}


def test_find_and_describe(cpu_fixtures):
    root, _ = cpu_fixtures
    fix = fixtures.load_fixtures(root)
    assert fixtures.find_fixture(fix, (3, 64, 17, 19), "constant_1e4", 0, "random_normal")["name"].startswith("constant")
    assert fixtures.find_fixture(fix, (3, 64, 17, 19), "uniform") is None
    rows = fixtures.describe(fix)
    assert all(r["GPU bits"] is False for r in rows)
    assert fixtures.load_fixtures(root / "missing") == []


def test_cpu_format_fixtures_are_never_used_as_gpu_bits(cpu_fixtures):
    root, _ = cpu_fixtures
    fix = fixtures.load_fixtures(root)
    assert ce.cpu_counterexamples(fix)["source"].startswith("no GPU fixtures yet")
    cands, _, label = ce.oracle_candidates_cpu(fix[0], fix[0]["distribution"])
    assert "CPU torch only" in label and not any("fixture" in k for k in cands)


def test_gpu_fixture_paths_on_a_pretend_gpu_fixture(cpu_fixtures):
    # Relabel a CPU fixture as if recorded on a GPU, to exercise the code path the real fixtures will take.
    root, _ = cpu_fixtures
    fix = fixtures.load_fixtures(root)
    for f in fix:
        f["gpu"] = "PRETEND GPU (test)"
    res = ce.cpu_counterexamples(fix)
    assert res["source"].startswith("GPU golden fixtures")
    assert {r["candidate"] for r in res["rows"]} == {"split formula, torch on CPU",
                                                      "split formula, torch on GPU (fixture bits)"}
    orc = ce.cpu_oracle(fix)
    assert [(c["distribution"], tuple(c["shape"])) for c in orc["cases"]] == [
        ("constant_1e4", tasks.UNEVEN_SHAPE), ("normal_plus_1000", tasks.UNEVEN_SHAPE)]
    for case in orc["cases"]:
        assert set(case["candidates"]) == {"native (GPU fixture)", "fast stats (GPU fixture)", "fast stats (CPU torch)"}
        assert "GPU bits from fixture" in case["source"]
    const = orc["cases"][0]
    assert const["truth"]["var"] == [0.0, 0.0, 0.0]


def test_emulator_check_reports_rows(cpu_fixtures):
    root, _ = cpu_fixtures
    row = fixtures.emulator_check(fixtures.load_fixtures(root)[0])
    assert row["GPU bits"] is False and ("error" in row or "mean bits equal (rows)" in row)


def test_full_fixture_set_stays_under_20_mib(tmp_path):
    paths = fixtures.record_fixtures(tmp_path, device="cpu", format_test=True)
    assert len(paths) == len(fixtures.FIXTURE_SPECS)
    assert sum(p.stat().st_size for p in paths) < 20 * 2**20


def test_recording_golden_fixtures_needs_a_gpu(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(ValueError, match="CUDA"):
        fixtures.record_fixtures(tmp_path)
