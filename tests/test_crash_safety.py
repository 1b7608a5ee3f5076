"""Crash safety with real processes: a writer killed by SIGKILL mid-write, two compilers racing on one cache entry."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

WRITER = r"""
import json, sys
from pathlib import Path
from labkit.records.run import Run
run = Run.create(Path(sys.argv[1]), "victim", {}, device="cpu")
print(run.path, flush=True)
i = 0
while True:  # rewrite a large record until killed, alternating its content
    run.write("big", {"version": i % 2, "payload": [i % 2] * 400_000})
    if i == 2:
        print("writing", flush=True)
    i += 1
"""


def _env(**extra):
    return {**os.environ, "PYTHONPATH": str(REPO), **extra}


@pytest.mark.parametrize("delay", [0.0, pytest.param(0.05, marks=pytest.mark.slow),  # a process each: the default
                                   pytest.param(0.2, marks=pytest.mark.slow)])       # tier kills one
def test_killed_writer_leaves_previous_run_intact_and_no_torn_record(tmp_path, delay):
    from labkit.records.run import Run, load_run

    before = Run.create(tmp_path, "previous", {"k": 1}, device="cpu")
    before.write("result", {"value": 42})
    before.close()
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path)], stdout=subprocess.PIPE, text=True,
                            env=_env())
    victim = Path(proc.stdout.readline().strip())
    assert proc.stdout.readline().strip() == "writing"
    time.sleep(delay)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    prev = load_run(before.path)
    assert prev["complete"] and prev["records"]["result"] == {"value": 42}
    got = load_run(victim)  # every record parses: the killed rewrite left the old or the new file, never half
    assert got["complete"] is False
    assert got["records"]["big"]["version"] in (0, 1) and len(got["records"]["big"]["payload"]) == 400_000
    assert not (victim / "manifest.json").exists()


COMPILER = r"""
import sys, time
from pathlib import Path
start = Path(sys.argv[1])
while not start.exists():
    time.sleep(0.005)
from labkit.core.compile import compile_kernel
print(compile_kernel("affine_rows", "sm_90").record.cubin_sha256, flush=True)
"""


@pytest.mark.slow
def test_two_processes_compiling_one_kernel_share_one_valid_entry(tmp_path):
    from labkit.core import compile as c

    cache = tmp_path / "cache"
    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", COMPILER, str(go)], stdout=subprocess.PIPE, text=True,
                              env=_env(LABKIT_CACHE_DIR=str(cache))) for _ in range(2)]
    time.sleep(1.0)  # both have imported and wait for the start signal
    go.touch()
    outs = [p.communicate(timeout=240)[0].strip() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert outs[0] and outs[0] == outs[1]
    entries = sorted(cache.iterdir())
    assert [e.name for e in entries if e.name.startswith("affine_rows-")] == [e.name for e in entries]
    assert len(entries) == 1 and c._read_entry(entries[0]) is not None


def test_a_corrupt_entry_written_by_a_killed_process_is_rebuilt(tmp_path, monkeypatch):
    from labkit.core import compile as c

    monkeypatch.setenv("LABKIT_CACHE_DIR", str(tmp_path))
    first = c.compile_kernel("affine_rows", "sm_90")
    path = c.cache_path(first.record)
    path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])  # what a non-atomic writer would leave
    again = c.compile_kernel("affine_rows", "sm_90")
    assert again.record.cache_hit is False and again.record.cubin_sha256 == first.record.cubin_sha256
    assert c._read_entry(path) is not None
