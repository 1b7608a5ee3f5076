"""The H200 as an sm_80 GPU (issue 25 item 4): run under LABKIT_ARCH=compute_80 on the GPU machine,

    LABKIT_ARCH=compute_80 LABKIT_TABLE_DIR=$OUT/tables LABKIT_RUNS_ROOT=$OUT/runs python scripts/arch_override.py \
        --attach $OUT/override_tests.log

into a run named "arch_override" (labkit.studies.arch_override: the device as the plans see it, what the drop-in
serves before and after `labkit tune`, the chain below sm_90 (bits, a drawn matrix, L1/40 timing), the forward and
backward fuzz against torch, the tune's table, which is also attached). A second process without the override times
the same GPU's own sm_90 chain into the same run (`chain_timing_native`). The GPU tests under the same override go first (their log is attached: `python -m pytest -m gpu`).
Curate the run into data/runs; notebook 08 shows it.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from labkit.records.run import Run  # noqa: E402
from labkit.studies import arch_override  # noqa: E402


def native_chain_timing() -> dict:
    """arch_override.chain_timing in a process without LABKIT_ARCH: the GPU's own sm_90 kernels (the override is
    read once per process)."""
    env = {k: v for k, v in os.environ.items() if k != "LABKIT_ARCH"}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "timing.json"
        code = ("import json, sys; from labkit.studies import arch_override as a; "
                "json.dump(a.chain_timing(), open(sys.argv[1], 'w'))")
        subprocess.run([sys.executable, "-c", code, str(out)], env=env, check=True,
                       cwd=Path(__file__).resolve().parent.parent)
        return json.loads(out.read_text())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fuzz-cases", type=int, default=2000)
    ap.add_argument("--training-cases", type=int, default=2000)
    ap.add_argument("--budget-s", type=float, default=90.0, help="time budget of each fuzz")
    ap.add_argument("--attach", nargs="*", default=[], help="files to add to the run (the override's test log)")
    args = ap.parse_args(argv)
    if not os.environ.get("LABKIT_ARCH"):
        raise SystemExit("set LABKIT_ARCH (e.g. compute_80): this script checks the override")
    run = Run.create(Path(os.environ.get("LABKIT_RUNS_ROOT", "build/runs")), "arch_override",
                     {k: v for k, v in vars(args).items() if k != "attach"} | {"LABKIT_ARCH": os.environ["LABKIT_ARCH"]},
                     device="cuda")
    done = arch_override.run(run, args.fuzz_cases, args.training_cases, args.budget_s, log=print)
    run.write("summary", done)
    run.write("chain_timing_native", native_chain_timing())
    tuned = run.path / "tuned_table.json"  # the table the rule read after the tune, as it was written
    shutil.copy(done["table"], tuned)
    run.add_file(tuned)
    for f in args.attach:
        if Path(f).is_file():
            shutil.copy(f, run.path / Path(f).name)
            run.add_file(run.path / Path(f).name)
    run.close()
    print(f"run {run.path}: {done}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
