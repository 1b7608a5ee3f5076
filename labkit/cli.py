"""`labkit` console script: build the book, compile kernels, print provenance, summarize a run."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from labkit.tasks import MODES


def _cmd_book(args) -> int:
    from labkit.book import build

    results = build(args.out, args.device, args.mode, args.seeds, args.rounds, args.only)
    failed = [r.notebook for r in results if r.status != "ok"]
    print(f"[book] {len(results) - len(failed)}/{len(results)} notebooks ok; index: {Path(args.out) / 'index.html'}")
    return 1 if failed else 0


def _cmd_compile(args) -> int:
    from labkit.core.compile import available_kernels, compile_kernel

    for kernel in available_kernels():
        print(json.dumps(compile_kernel(kernel, args.arch).record.to_json()))
    return 0


def _cmd_env(args) -> int:
    from labkit.records.run import provenance

    print(json.dumps(provenance(), indent=1))
    return 0


def _cmd_summary(args) -> int:
    from labkit.records.summary import summarize_runs

    summary = summarize_runs([Path(p) for p in args.run_dirs])
    print(json.dumps(summary, indent=None if args.json else 1))
    return 0


def _cmd_curate(args) -> int:
    from labkit.records.run import book_notebooks_for_run, curate_run

    for run_dir in sorted(Path(args.book_dir, "runs").iterdir()):
        attached = book_notebooks_for_run(Path(args.book_dir), run_dir.name) + [Path(a) for a in args.attach]
        print(curate_run(run_dir, Path(args.to), attached))
    return 0


def _cmd_audit(args) -> int:
    from labkit.records.audit import audit_runs

    report = audit_runs(args.run_dirs)
    if args.json:
        print(json.dumps(report.to_json()))
    else:
        from labkit.display import markdown_table

        print("\n\n".join([report.headline(), markdown_table(report.run_table()),
                             markdown_table(report.record_table())]))
    for row in report.inconsistent:
        print(f"labkit audit: {row.run_id} {row.record}: {'; '.join(row.issues)}", file=sys.stderr)
    return 0 if report.ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="labkit", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    book = sub.add_parser("book", help="execute every notebook with papermill and export HTML")
    book.add_argument("--out", default="build/book", help="output directory (executed notebooks, HTML, index)")
    book.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"])
    book.add_argument("--mode", default="quick", choices=list(MODES), help="quick: small sizes; full: L1/40")
    book.add_argument("--seeds", type=int, nargs="+", default=None, help="input seeds (notebook default if omitted)")
    book.add_argument("--rounds", type=int, default=None, help="timing rounds (notebook default if omitted)")
    book.add_argument("--only", nargs="+", default=None, help="notebook name prefixes, e.g. 00 01")
    book.set_defaults(fn=_cmd_book)

    comp = sub.add_parser("compile", help="compile every kernels/*.cu and print the compile records")
    comp.add_argument("--arch", default="sm_90", help="target, e.g. sm_90 (no GPU needed)")
    comp.set_defaults(fn=_cmd_compile)

    env = sub.add_parser("env", help="print this machine's provenance record")
    env.set_defaults(fn=_cmd_env)

    summ = sub.add_parser("summary", help="summarize committed runs")
    summ.add_argument("run_dirs", nargs="+")
    summ.add_argument("--json", action="store_true", help="one line of JSON")
    summ.set_defaults(fn=_cmd_summary)

    cur = sub.add_parser("curate", help="copy a book build's runs (with their executed notebooks and logs) into data/runs")
    cur.add_argument("book_dir", help="a `labkit book --out` directory")
    cur.add_argument("--to", default="data/runs")
    cur.add_argument("--attach", nargs="*", default=[], help="extra files (logs) to add to every curated run")
    cur.set_defaults(fn=_cmd_curate)

    aud = sub.add_parser("audit", help="reclassify every saved check record under both scalings; non-zero exit "
                                       "if a stored verdict contradicts its figures")
    aud.add_argument("run_dirs", nargs="*", help="run directories or folders holding runs (default: data/runs)")
    aud.add_argument("--json", action="store_true", help="one line of JSON")
    aud.set_defaults(fn=_cmd_audit)

    args = parser.parse_args(argv)
    try:
        return args.fn(args)
    except ValueError as exc:
        print(f"labkit: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
