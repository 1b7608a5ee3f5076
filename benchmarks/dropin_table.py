"""Print the drop-in LayerNorm's tables from a `dropin` run (notebook 08) as Markdown; not a test.

    python benchmarks/dropin_table.py                      # the newest complete committed run under data/runs
    python benchmarks/dropin_table.py data/runs/<run-id>   # a given run directory

The issue-16 summary block, the speed table (eager per call, graph replay, compiled), the dispatch table with the
rule's agreement, host cost per call beside torch's, and bit identity; every number is read from the run's records.
Without any committed run it says so and prints the committed dispatch tables.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# the layered package, importable without an install when run as `python benchmarks/dropin_table.py`
from labkit.display import markdown_table  # noqa: E402
from labkit.records.session import RunSession  # noqa: E402
from labkit.studies import dropin, dropin_bits, dropin_sweep  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dir", nargs="?", help="a run directory (default: newest committed 'dropin' run)")
    args = ap.parse_args(argv)
    session = RunSession.replaying("dropin", args.run_dir)
    if session.replay is None:
        print(f"{session.source}\n\n## the committed dispatch tables (the path the rule takes at each point)\n")
        print(markdown_table(dropin_sweep.rule_grid_rows()))
        return 0
    rec = session.replay["records"]
    meta = rec["run"]
    prov = meta["provenance"]
    print(f"# drop-in LayerNorm — {meta['run_id']}: {prov.get('gpu')}, torch {prov.get('torch')}\n")
    print(f"{session.source} ({session.replay_path}): nothing is measured here\n")
    print("## summary\n\n```json\n" + json.dumps(dropin.dropin_block(rec), indent=1) + "\n```\n")
    print("## speed (native / drop-in)\n")
    print(markdown_table(dropin_sweep.speed_rows(rec.get("dropin_sweep"))), "\n")
    print("## dispatch\n")
    print(markdown_table(dropin_sweep.dispatch_rows(rec.get("dropin_sweep"))), "\n")
    print("## the rule's measured table (first path per shape class)\n")
    print(markdown_table(dropin_sweep.rule_grid_rows()), "\n")
    print("## against the floor (1-4 rows of 4M-8M)\n")
    print(markdown_table(dropin_sweep.floor_rows(rec.get("dropin_floor"))), "\n")
    print("## host cost per call\n")
    print(markdown_table(dropin_sweep.host_rows(rec.get("dropin_host"))), "\n")
    print("## bit identity\n")
    print(markdown_table(dropin_bits.identity_rows(rec.get("dropin_identity"))), "\n")
    print("\n".join(dropin.verdict_lines(rec, session.source)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
