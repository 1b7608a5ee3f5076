"""L1/40 under KernelBench's own cuda_event timing and under graph replay, in one run (labkit.studies.kernelbench_timing):

    LABKIT_RUNS_ROOT=$OUT/runs python scripts/kernelbench_timing.py [--blocks 3] [--trials 100]

writes a run named "kernelbench_timing" (about a minute on an H200); curate it into data/runs. Notebook 08's run records the same measurement; notebook 07 shows the newer of them.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from labkit.records.run import Run  # noqa: E402
from labkit.studies import kernelbench_timing as kb  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--blocks", type=int, default=3, help="repeats of the whole sequence, the order rotated")
    ap.add_argument("--trials", type=int, default=kb.NUM_TRIALS, help="KernelBench trials per program and block")
    args = ap.parse_args(argv)
    run = Run.create(Path(os.environ.get("LABKIT_RUNS_ROOT", "build/runs")), "kernelbench_timing", vars(args),
                     device="cuda")
    rec = kb.run(args.blocks, args.trials, log=print)
    run.write("kernelbench_timing", rec)
    from labkit.studies.timing import compile_records

    run.write("compile", compile_records())
    run.close()
    print("\n".join(kb.verdict_lines(rec, f"run {run.run_id}")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
