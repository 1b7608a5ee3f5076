"""The scripts under benchmarks/ run as users run them (a subprocess, from any folder): --help, and the CPU mode that
replays the newest committed run and prints its tables."""
import json
import subprocess
import sys

import pytest

from labkit.core.compile import REPO_ROOT
from labkit.records.run import committed_runs

# script -> (run name it replays, headings its tables must carry)
SCRIPTS = {"chain_table.py": ("parallel_stats", ("## goals", "## floors", "## stage breakdown",
                                                 "## timing, protocol A", "bit identity: ")),
           "timing_table.py": ("timing", ("## across shapes, protocol A", "## across shapes, protocol B")),
           "dropin_table.py": ("dropin", ("## speed (native / drop-in)", "## dispatch", "## host cost per call"))}


def _committed_or_skip(name: str) -> list:
    runs = committed_runs(name)
    if not runs:
        pytest.skip(f"no committed {name!r} run yet")
    return runs


def _run(tmp_path, script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO_ROOT / "benchmarks" / script), *args], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)


def _run_id(path) -> str:
    return json.loads((path / "run.json").read_text())["run_id"]


def test_benchmarks_holds_only_the_scripts_tested_here():
    assert sorted(p.name for p in (REPO_ROOT / "benchmarks").iterdir() if p.name != "__pycache__") == sorted(SCRIPTS)


@pytest.mark.parametrize("script", SCRIPTS)
def test_help(tmp_path, script):
    done = _run(tmp_path, script, "--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage:") and "run_dir" in done.stdout


@pytest.mark.parametrize("script", SCRIPTS)
def test_replays_the_newest_committed_run(tmp_path, script):
    name, headings = SCRIPTS[script]
    newest = _committed_or_skip(name)[-1]
    done = _run(tmp_path, script)
    assert done.returncode == 0, done.stderr
    assert f"REPLAYED committed GPU run {_run_id(newest)}" in done.stdout
    assert "|---|" in done.stdout  # a Markdown table
    for heading in headings:
        assert heading in done.stdout


@pytest.mark.parametrize("script", SCRIPTS)
def test_replays_a_given_run_directory(tmp_path, script):
    name, _ = SCRIPTS[script]
    oldest = _committed_or_skip(name)[0]
    done = _run(tmp_path, script, str(oldest))
    assert done.returncode == 0, done.stderr
    assert f"REPLAYED committed GPU run {_run_id(oldest)}" in done.stdout and "|---|" in done.stdout


@pytest.mark.slow  # imports the whole measuring stack in a subprocess
def test_timing_table_live_refuses_without_a_gpu(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: --live would measure")
    done = _run(tmp_path, "timing_table.py", "--live")
    assert done.returncode == 2 and "no" in done.stderr and "CUDA GPU" in done.stderr


def test_dropin_table_without_a_committed_run_says_so(tmp_path):
    if committed_runs("dropin"):
        pytest.skip("a dropin run is committed: the replay tests cover it")
    done = _run(tmp_path, "dropin_table.py")
    assert done.returncode == 0, done.stderr
    assert "no committed GPU run yet" in done.stdout and "|---|" in done.stdout and "chain" in done.stdout
