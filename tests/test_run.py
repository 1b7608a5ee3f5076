import json
import os

import pytest

from labkit.records import run as results


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


def test_a_runs_short_id_is_its_name_and_random_suffix(tmp_path):
    """What the front page cites: the id less its date and GPU, whatever the GPU's or the name's slug holds."""
    run = results.Run.create(tmp_path, "bit identity", device="cpu")
    rid = run.meta["run_id"]
    assert results.short_id(run.meta) == f"bit-identity-{rid[-6:]}" and rid.endswith(results.short_id(run.meta))
    meta = {"run_id": "20261202T011216Z-nvidia-h200-dropin-273b32", "name": "dropin"}
    assert results.short_id(meta) == "dropin-273b32"


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


def test_book_notebooks_for_run_finds_the_notebook_that_names_the_run(tmp_path):
    """Curating attaches the notebook whose outputs name the run, whatever its file name (07_parallel_statistics
    writes runs named parallel_stats)."""
    from labkit.records.run import book_notebooks_for_run

    (tmp_path / "07_parallel_statistics.ipynb").write_text('{"outputs": "run written to runs/20261129T0Z-gpu-parallel-stats-abc123"}')
    (tmp_path / "07_parallel_statistics.html").write_text("<html></html>")
    (tmp_path / "03_timing.ipynb").write_text('{"outputs": "run written to runs/20261129T0Z-gpu-timing-def456"}')
    got = book_notebooks_for_run(tmp_path, "20261129T0Z-gpu-parallel-stats-abc123")
    assert [p.name for p in got] == ["07_parallel_statistics.ipynb"]  # its HTML is regenerated, not committed
    assert [p.name for p in book_notebooks_for_run(tmp_path, "20261129T0Z-gpu-timing-def456")] == ["03_timing.ipynb"]
    assert book_notebooks_for_run(tmp_path, "no-such-run") == []


def test_launchers_commit_wins_over_a_stale_git(monkeypatch):
    """The GPU machine gets a copy of the tree whose .git may be stale: the launcher's commit must be recorded."""
    from labkit.records import run as results

    monkeypatch.setenv("LABKIT_GIT_COMMIT", "0123abc")
    monkeypatch.setenv("LABKIT_GIT_DIRTY", "false")
    assert results._git_state() == {"git_commit": "0123abc", "git_dirty": False, "git_source": "LABKIT_GIT_COMMIT"}
    monkeypatch.setenv("LABKIT_GIT_DIRTY", "true")
    assert results._git_state()["git_dirty"] is True
    monkeypatch.delenv("LABKIT_GIT_COMMIT")
    assert results._git_state()["git_source"] in ("git", None)


def test_curate_corrects_a_stale_commit_only_where_the_kernel_sources_prove_it(tmp_path):
    """A GPU copy whose .git is stale records the wrong commit; `labkit curate --commit` replaces it only when every
    kernel source hash the run recorded equals that commit's file, keeps the recorded one, and re-hashes run.json."""
    import subprocess

    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=results.REPO_ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()
    first = subprocess.run(["git", "rev-list", "--max-parents=0", "HEAD"], cwd=results.REPO_ROOT,
                           capture_output=True, text=True, check=True).stdout.split()[0]
    run = results.Run.create(tmp_path / "book", "stale", device="cpu")
    run.meta["provenance"].update(git_commit=first, git_source="LABKIT_GIT_COMMIT",
                                  kernel_sources_sha256=results.kernel_source_hashes())
    results.atomic_write_json(run.path / "run.json", run.meta)
    run.close()
    with pytest.raises(ValueError, match="kernel sources differ"):  # the first commit's kernels are not today's
        results.corrected_provenance(run.meta["provenance"], first)
    with pytest.raises(ValueError, match="not a commit"):
        results.corrected_provenance(run.meta["provenance"], "no-such-ref")
    if subprocess.run(["git", "diff", "--quiet", "HEAD", "--", "kernels"], cwd=results.REPO_ROOT).returncode:
        pytest.skip("kernels/ differs from HEAD here: HEAD cannot be proven")
    target = results.curate_run(run.path, tmp_path / "runs", commit="HEAD")
    loaded = results.load_run(target)
    assert loaded["complete"]
    prov = loaded["records"]["run"]["provenance"]
    assert (prov["git_commit"], prov["git_commit_recorded"]) == (head, first)
    assert prov["git_source"].startswith("labkit curate --commit")
