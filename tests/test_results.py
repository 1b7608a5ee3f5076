import json
import os

import pytest

from labkit import results


def test_run_directory_records_provenance_and_manifest(tmp_path):
    run = results.Run.create(tmp_path, "unit test", {"a": 1}, device="cpu")
    run.write("numbers", {"x": [1, 2, 3]})
    run.close()
    loaded = results.load_run(run.path)
    assert loaded["complete"]
    prov = loaded["records"]["run"]["provenance"]
    for key in ("date_utc", "git_commit", "python", "torch", "kernel_sources_sha256", "nvrtc", "cupy"):
        assert key in prov, key
    assert loaded["records"]["numbers"] == {"x": [1, 2, 3]}


def test_run_ids_never_collide_and_dirs_are_never_reused(tmp_path):
    a = results.Run.create(tmp_path, "same", device="cpu")
    b = results.Run.create(tmp_path, "same", device="cpu")
    assert a.path != b.path


def test_unclosed_run_is_not_complete_and_tampering_is_detected(tmp_path):
    run = results.Run.create(tmp_path, "partial", device="cpu")
    run.write("r", {"v": 1})
    assert not results.load_run(run.path)["complete"]  # no manifest: interrupted
    run.close()
    (run.path / "r.json").write_text(json.dumps({"v": 2}))
    assert not results.load_run(run.path)["complete"]  # hash no longer matches


def test_interrupted_write_keeps_the_previous_file(tmp_path, monkeypatch):
    target = tmp_path / "rec.json"
    results.atomic_write_json(target, {"v": "old"})

    def boom(fd):
        raise KeyboardInterrupt("interrupted mid-write")

    monkeypatch.setattr(os, "fsync", boom)
    with pytest.raises(KeyboardInterrupt):
        results.atomic_write_json(target, {"v": "new"})
    assert json.loads(target.read_text()) == {"v": "old"}
    assert [p.name for p in tmp_path.iterdir()] == ["rec.json"]  # no temporary left behind


def test_bad_record_name(tmp_path):
    run = results.Run.create(tmp_path, "x", device="cpu")
    with pytest.raises(ValueError, match="record names"):
        run.write("../escape", {})
