"""The layering holds at run time too: importing the kernel path reads nothing under data/."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

PROBE = r"""
import json, os, sys
data = os.path.join(sys.argv[1], "data")
opened = []

def hook(event, args):
    if event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
        path = os.path.abspath(os.fsdecode(args[0]))
        if path.startswith(data + os.sep):
            opened.append(path)

sys.addaudithook(hook)
import importlib
for name in sys.argv[2:]:
    importlib.import_module(name)
print(json.dumps(opened))
"""

def _kernel_path() -> list[str]:
    """Every module of labkit.core and labkit.ops, found by walking the packages (a new module is covered)."""
    import pkgutil

    import labkit.core
    import labkit.ops

    return sorted(m.name for pkg in (labkit.core, labkit.ops)
                  for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."))


def _opened_under_data(modules) -> list[str]:
    out = subprocess.run([sys.executable, "-c", PROBE, str(REPO), *modules], capture_output=True, text=True,
                         check=True, cwd=REPO)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_importing_the_kernel_path_opens_nothing_under_data():
    modules = _kernel_path()
    assert len(modules) >= 14 and "labkit.ops.eligibility" in modules
    assert _opened_under_data(modules) == []


def test_importing_the_kernel_path_loads_no_study_code():
    """labkit.lab (the routes the studies measure beside the operator), studies and records stay out of a process
    that imports only core and ops (lint-imports checks the import statements; this checks what actually loads)."""
    probe = ("import importlib, json, sys\nfor n in sys.argv[1:]: importlib.import_module(n)\n"
             "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[:2] in "
             "(['labkit', 'lab'], ['labkit', 'studies'], ['labkit', 'records']))))")
    out = subprocess.run([sys.executable, "-c", probe, *_kernel_path()], capture_output=True, text=True, check=True,
                         cwd=REPO)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_the_probe_sees_a_module_that_reads_data(tmp_path):
    """The hook is live: a study that reads committed runs when asked is seen doing so."""
    probe = PROBE.replace("print(json.dumps(opened))",
                          "from labkit.studies import source_reading as s; s.verified_on(); print(json.dumps(opened))")
    out = subprocess.run([sys.executable, "-c", probe, str(REPO)], capture_output=True, text=True, check=True,
                         cwd=REPO)
    opened = json.loads(out.stdout.strip().splitlines()[-1])
    if not any((REPO / "data" / "runs").glob("*/run.json")):
        pytest.skip("no committed runs to read")
    assert any("/data/runs/" in p for p in opened)
