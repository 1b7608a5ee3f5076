"""Print the chain-parallel kernel's tables from a `parallel_stats` run (notebook 07) as Markdown; not a test.

    python benchmarks/chain_table.py                      # the newest complete committed run under data/runs
    python benchmarks/chain_table.py data/runs/<run-id>   # a given run directory

Goals (issue 6), floors, stage breakdown and the timing table against native, the post's design, split statistics
and Inductor; every number is read from the run's records.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# the layered package, importable without an install when run as `python benchmarks/chain_table.py`
from labkit.display import markdown_table  # noqa: E402
from labkit.records.check import identical_count  # noqa: E402
from labkit.records.session import RunSession  # noqa: E402
from labkit.studies import parallel_stats as chain_study  # noqa: E402
from labkit.studies import timing  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dir", nargs="?", help="a run directory (default: newest committed 'parallel_stats' run)")
    args = ap.parse_args(argv)
    session = RunSession.replaying("parallel_stats", args.run_dir)
    if session.replay is None:
        print(f"{session.source}; pass a run directory")
        return 1
    run_dir, rec = session.replay_path, session.replay["records"]
    needed = {"run", "timing", "stage_breakdown", "chain_floor", "copy_ceiling", "bit_identity"}
    if not needed <= set(rec):
        print(f"{run_dir} lacks records {sorted(needed - set(rec))}")
        return 1
    meta = rec["run"]
    prov = meta["provenance"]
    print(f"# chain-parallel reference order — {meta['run_id']}: {prov.get('gpu')}, torch {prov.get('torch')}\n")
    print(f"{session.source} ({run_dir}): nothing is measured here\n")
    bits = rec["bit_identity"]
    identical, n = identical_count(bits["cases"])
    print(f"bit identity: {identical}/{n} cases identical "
          f"(output, mean, rstd as int32 views) at {bits['shape']}\n")
    print("## goals\n")
    print(markdown_table(chain_study.goal_rows(rec["timing"])), "\n")
    print("## floors\n")
    print(markdown_table(chain_study.floors(rec["stage_breakdown"], rec["chain_floor"], rec["copy_ceiling"])), "\n")
    print("## stage breakdown\n")
    print(markdown_table(chain_study.breakdown_rows(rec["stage_breakdown"])), "\n")
    print("## timing, protocol A\n")
    print(markdown_table(timing.shape_rows(rec["timing"], "A")), "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
