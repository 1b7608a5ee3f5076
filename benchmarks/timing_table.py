"""Print the timing tables of a `timing` run (notebook 03) as Markdown; not a test.

    python benchmarks/timing_table.py                      # the newest complete committed run under data/runs
    python benchmarks/timing_table.py data/runs/<run-id>   # a given run directory
    python benchmarks/timing_table.py --live --mode quick  # run the study now (needs a GPU), print, write nothing

Every number printed is read from the run's `timing` record (or, with --live, from the record just measured).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# the layered package, importable without an install when run as `python benchmarks/timing_table.py`
from labkit.display import markdown_table  # noqa: E402
from labkit.records.run import provenance  # noqa: E402
from labkit.records.session import RunSession, resolve  # noqa: E402
from labkit.studies import timing  # noqa: E402


def _print_record(record: dict, prov: dict, run_id: str, protocols: list[str]) -> None:
    print(f"# timing — {run_id}: {prov.get('gpu')}, torch {prov.get('torch')}\n")
    print(markdown_table(timing.ceiling_rows(record)), "\n")
    for key in timing.case_keys(record):
        for proto in protocols:
            if proto in record["protocols"]:
                print(f"## {key}, protocol {proto}\n")
                print(markdown_table(timing.timing_rows(record, key, proto)), "\n")
        untimed = timing.untimed_rows(record, key)
        if untimed:
            print(f"not timed on {key}:\n")
            print(markdown_table(untimed), "\n")
    for proto in protocols:
        if proto in record["protocols"]:
            print(f"## across shapes, protocol {proto}\n")
            print(markdown_table(timing.shape_rows(record, proto)), "\n")
    for line in timing.verdict_lines(record, prov, run_id, protocols[0]):
        print("-", line)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dir", nargs="?", help="a run directory (default: newest committed 'timing' run)")
    ap.add_argument("--protocol", nargs="+", default=["A", "B"], choices=["A", "B"])
    ap.add_argument("--live", action="store_true", help="run the study on this machine's GPU instead")
    ap.add_argument("--mode", default="quick", choices=["quick", "full"])
    args = ap.parse_args(argv)
    if args.live:
        if resolve("auto") != "cuda":
            print("--live measures on a CUDA GPU and this machine has none; without --live the newest committed "
                  "'timing' run is replayed", file=sys.stderr)
            return 2
        record = timing.run(mode=args.mode, device="cuda", protocols=args.protocol, log=print)
        _print_record(record, provenance("cuda"), "live (not written)", args.protocol)
        return 0
    session = RunSession.replaying("timing", args.run_dir)
    if session.replay is None:
        print(f"{session.source}; pass a run directory or --live")
        return 1
    run_dir, record = session.replay_path, session.record("timing")
    if record is None:
        print(f"{run_dir} has no timing record")
        return 1
    print(f"{session.source} ({run_dir}): nothing is measured here\n")
    _print_record(record, session.provenance, session.run_id, args.protocol)
    return 0


if __name__ == "__main__":
    sys.exit(main())
