"""`labkit` console script: build the book, compile kernels, print provenance, summarize, audit, curate and bundle runs."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from labkit.core.compile import REPO_ROOT
from labkit.tasks import MODES

NOTEBOOK_DIR = REPO_ROOT / "notebooks"


def _no_cuda_line() -> str | None:
    """Why `--device cuda` cannot run here, or None when torch sees a GPU."""
    import torch

    if torch.cuda.is_available():
        return None
    return (f"labkit book: --device cuda, but torch {torch.__version__} sees no CUDA device; nothing was run. "
            f"Use --device cpu (replays the committed GPU runs) or --device auto.")


def _cmd_book(args) -> int:
    from labkit.book import BuildFailed, build

    out = Path(args.out)
    if args.device == "cuda" and (line := _no_cuda_line()):
        print(line, file=sys.stderr)
        return 2
    existed = (out / "book.json").is_file()
    try:
        results = build(out, args.device, args.mode, args.seeds, args.rounds, args.only,
                        notebook_dir=Path(args.notebooks), keep_going=args.keep_going)
    except BuildFailed as exc:
        lines = []
        for r in exc.failed:
            where = f" at {r.failed_cell_label}" if r.failed_cell_label else ""
            lines.append(f"labkit book: {r.notebook} failed{where}: {r.error}")
            if r.failed_cell:
                lines += ["  the failing cell:"] + [f"    {x}" for x in r.failed_cell.splitlines()]
            lines.append(f"  partial executed notebook kept: {r.executed}")
        published = f"the published book {out} is unchanged" if existed else f"nothing was published at {out}"
        lines.append(f"labkit book: build failed; {published}; this build is kept in {exc.kept}")
        print("\n".join(lines), file=sys.stderr)
        return 1
    print(f"[book] {len(results)}/{len(results)} notebooks ok; published {out / 'index.html'}")
    return 0


def _cmd_compile(args) -> int:
    from labkit.core.compile import compile_buildable

    records, refused = compile_buildable(args.arch)
    for r in records:
        print(json.dumps(r.to_json()))
    for kernel, why in refused.items():
        print(f"labkit compile: {kernel} does not compile for {args.arch} ({why}); no path offers it there",
              file=sys.stderr)
    return 0


def _cmd_env(args) -> int:
    from labkit.core import toolkit
    from labkit.records.run import provenance

    info = provenance()
    # the install rule's answer for this torch (README "The two commands"), and why the installed extra is not it (or null)
    try:
        info["cuda_extra"] = toolkit.cuda_extra(info["torch_cuda"])
        info["cuda_extra_mismatch"] = toolkit.mismatch(*toolkit.installed_versions())
    except ValueError as exc:  # a torch for a CUDA major without an extra: still print the record
        info["cuda_extra"], info["cuda_extra_mismatch"] = None, str(exc)
    print(json.dumps(info, indent=1))
    return 0


def _cmd_tune(args) -> int:
    from labkit.studies.tune import tune

    done = tune(full=args.full, rounds=args.rounds, backward=not args.forward_only, progress=not args.quiet)
    print(f"labkit tune: {done['shapes']} shapes x {done['rounds']} rounds on {done['device']} in "
          f"{done['seconds']} s; table written to {done['path']}")
    print(f"the rule now reads: {done['rule_source']}")
    if args.json:
        print(json.dumps(done))
    return 0


def _cmd_warmup(args) -> int:
    from labkit.ops.warmup import warmup

    shapes = [_rows_n(s) for s in args.shape] if args.shape else None
    done = warmup(device=args.device, shapes=shapes, arch=args.arch, progress=not args.quiet,
                  dtypes=("float32",) + tuple(args.dtype or ()))
    print(done.line())
    if args.json:
        print(json.dumps(done.to_json()))
    return 0


def _cmd_verify(args) -> int:
    import torch

    from labkit.ops import trust

    if not torch.cuda.is_available():
        print("labkit verify: no CUDA GPU here; our kernels serve only on a GPU, so there is nothing to verify")
        return 0
    from labkit.core.device import current_index

    index = current_index(torch.device(args.device or "cuda"))
    rec = trust.verify(index, again=args.again)
    row = rec["verified_row"]
    print(f"key {rec['key_digest']} (torch {rec['key']['torch']}, {rec['key']['gpu']}, NVRTC {rec['key']['nvrtc']}): "
          + (f"verified by committed run {row['run']}; " if row else "not in the verified table; ")
          + (f"canary {'passed' if rec['identical'] else 'FAILED'}: {rec['cases']} cases in {rec['seconds']} s"
             + ("" if rec["identical"] else f", first mismatch: {rec['first_mismatch'] or rec['error']}")))
    if args.json:
        print(json.dumps(rec))
    return 0 if rec["identical"] else 1


def _rows_n(text: str) -> tuple[int, int]:
    try:
        rows, n = (int(v) for v in text.split(","))
    except ValueError:
        raise ValueError(f"--shape takes ROWS,N (two integers), got {text!r}") from None
    return rows, n


def _cmd_explain(args) -> int:
    import torch

    import labkit

    if not torch.cuda.is_available():
        raise ValueError("labkit explain asks the rule for an input on the GPU, and torch sees no CUDA device")
    shape = tuple(int(v) for v in args.shape.split(","))
    if len(shape) < 2:
        raise ValueError(f"--shape needs rows and at least one normalized dimension, e.g. 16,4194304; got {args.shape!r}")
    if not 1 <= args.dims < len(shape):
        raise ValueError(f"--dims must be between 1 and {len(shape) - 1} for shape {args.shape}, got {args.dims}")
    ns = shape[-args.dims:]
    x = torch.empty(shape, device="cuda")
    w = None if args.no_affine else torch.ones(ns, device="cuda")
    b = None if args.no_affine else torch.zeros(ns, device="cuda")
    print(json.dumps(labkit.explain(x, ns, w, b, args.eps), indent=1))
    return 0


def _cmd_summary(args) -> int:
    from labkit.studies.catalog import summarize_runs, summary_text

    summary = summarize_runs([Path(p) for p in args.run_dirs])
    print(json.dumps(summary) if args.json else summary_text(summary))
    return 0


def _cmd_curate(args) -> int:
    from labkit.records.run import book_notebooks_for_run, curate_run, load_run

    book_dir = Path(args.book_dir)
    runs_dir = book_dir / "runs"
    runs = sorted(p for p in runs_dir.iterdir() if (p / "run.json").is_file()) if runs_dir.is_dir() else []
    complete = [p for p in runs if load_run(p)["complete"]]
    if not complete:
        why = (f"{runs_dir} holds no complete run" if runs else
               f"no {runs_dir} (a CPU build replays committed runs and writes none)")
        print(f"labkit curate: {book_dir} has no GPU runs to curate: {why}", file=sys.stderr)
        return 2
    for run_dir in complete:
        attached = book_notebooks_for_run(book_dir, run_dir.name) + [Path(a) for a in args.attach]
        print(curate_run(run_dir, Path(args.to), attached, commit=args.commit))
    for run_dir in runs:
        if run_dir not in complete:
            print(f"labkit curate: skipped {run_dir}: not a complete run (no manifest, or a file changed since)",
                  file=sys.stderr)
    return 0 if len(complete) == len(runs) else 1


def _cmd_audit(args) -> int:
    from labkit.records.audit import audit_runs

    report = audit_runs(args.run_dirs)
    print(json.dumps(report.to_json()) if args.json else report.text(details=args.details))
    for row in report.inconsistent:
        print(f"labkit audit: {row.run_id} {row.record}: {'; '.join(row.issues)}", file=sys.stderr)
    return 0 if report.ok else 1


def _cmd_bundle(args) -> int:
    from labkit.records import bundle

    if args.verify:
        if args.run_dirs:
            raise ValueError(f"--verify takes only the archive; got run directories too: {args.run_dirs}")
        problems, count = bundle.verify_bundle(Path(args.verify))
        for p in problems:
            print(f"labkit bundle: {args.verify}: {p}", file=sys.stderr)
        if problems:
            print(f"labkit bundle: {args.verify}: FAILED, {len(problems)} mismatch(es)", file=sys.stderr)
            return 1
        print(f"bundle OK: {args.verify}: {count} files match MANIFEST.sha256")
        return 0
    if not args.run_dirs:
        raise ValueError("bundle needs at least one run directory (or --verify ARCHIVE)")
    out = bundle.write_bundle([Path(p) for p in args.run_dirs], Path(args.out),
                              Path(args.book) if args.book else None, render_page=_page_html)
    print(f"bundle written: {out} ({out.stat().st_size:,} bytes); check it with `labkit bundle --verify {out}`")
    return 0


def _page_html(executed: Path) -> bytes:
    """An executed notebook's page, made as `labkit book` makes pages (nbconvert's HTML exporter)."""
    import nbformat
    from nbconvert import HTMLExporter

    body, _ = HTMLExporter().from_notebook_node(nbformat.read(executed, as_version=4))
    return body.encode()


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
    book.add_argument("--keep-going", action="store_true",
                      help="run every notebook even after one fails (the book is still not published)")
    book.add_argument("--notebooks", default=str(NOTEBOOK_DIR), help="folder of numbered notebooks to build")
    book.set_defaults(fn=_cmd_book)

    comp = sub.add_parser("compile", help="compile every kernels/*.cu and print the compile records")
    comp.add_argument("--arch", default="sm_90", help="target, e.g. sm_90 (no GPU needed)")
    comp.set_defaults(fn=_cmd_compile)

    env = sub.add_parser("env", help="print this machine's provenance record")
    env.set_defaults(fn=_cmd_env)

    tun = sub.add_parser("tune", help="measure every path on this GPU and write its dispatch table to the user's "
                                      "cache (~/.cache/labkit/dispatch, or $LABKIT_TABLE_DIR); the rule uses it")
    tun.add_argument("--full", action="store_true", help="the committed tables' whole grid (default: a short one)")
    tun.add_argument("--rounds", type=int, default=None, help="samples per path and shape (default 7, full 9)")
    tun.add_argument("--forward-only", action="store_true", help="leave the backward's table out")
    tun.add_argument("--quiet", action="store_true", help="no progress bar")
    tun.add_argument("--json", action="store_true", help="also print what was measured as one line of JSON")
    tun.set_defaults(fn=_cmd_tune)

    warm = sub.add_parser("warmup", help="build the host extension and compile the kernels this GPU's first calls "
                                         "would (without a GPU: every drop-in kernel for --arch), ahead of time")
    warm.add_argument("--device", default=None, help="a CUDA device (cuda:1) or cpu (default: the current GPU, if any)")
    warm.add_argument("--arch", default=None, help="compile for this target instead of a GPU's, e.g. sm_90 "
                                                   "(the default without a GPU)")
    warm.add_argument("--shape", action="append", default=None, metavar="ROWS,N",
                      help="a rows x N the model calls with (GPU only; repeat for more): only the kernels the rule "
                           "picks for these")
    warm.add_argument("--dtype", action="append", default=None, choices=("bfloat16", "float16"),
                      help="also the builds for a model of this dtype (repeat for both); float32's always")
    warm.add_argument("--quiet", action="store_true", help="no progress bar")
    warm.add_argument("--json", action="store_true", help="also print the record as one line of JSON")
    warm.set_defaults(fn=_cmd_warmup)

    ver = sub.add_parser("verify", help="check our kernels against torch's on this install (the trust gate's "
                                        "canary) and keep the verdict for this key")
    ver.add_argument("--device", default=None, help="a CUDA device, e.g. cuda:1 (default: the current GPU)")
    ver.add_argument("--again", action="store_true", help="run the canary even where a verdict is kept")
    ver.add_argument("--json", action="store_true", help="also print the verdict as one line of JSON")
    ver.set_defaults(fn=_cmd_verify)

    exp = sub.add_parser("explain", help="which path the drop-in takes for an input on this GPU, and which table said so")
    exp.add_argument("--shape", default="16,4194304", help="comma-separated input shape (default: L1/40's rows)")
    exp.add_argument("--dims", type=int, default=1, help="how many trailing dimensions are normalized")
    exp.add_argument("--eps", type=float, default=1e-5)
    exp.add_argument("--no-affine", action="store_true", help="no weight and bias")
    exp.set_defaults(fn=_cmd_explain)

    summ = sub.add_parser("summary", help="summarize committed runs")
    summ.add_argument("run_dirs", nargs="+")
    summ.add_argument("--json", action="store_true", help="the summary as one line of JSON")
    summ.set_defaults(fn=_cmd_summary)

    cur = sub.add_parser("curate", help="copy a book build's runs (with their executed notebooks and logs) into data/runs")
    cur.add_argument("book_dir", help="a `labkit book --out` directory")
    cur.add_argument("--to", default="data/runs")
    cur.add_argument("--attach", nargs="*", default=[], help="extra files (logs) to add to every curated run")
    cur.add_argument("--commit", default=None,
                     help="the launching side's commit, where the run recorded a stale one; refused unless every "
                          "kernel source hash the run recorded equals that commit's file")
    cur.set_defaults(fn=_cmd_curate)

    aud = sub.add_parser("audit", help="reclassify every saved check record under both scalings; non-zero exit "
                                       "if a stored verdict contradicts its figures")
    aud.add_argument("run_dirs", nargs="*", help="run directories or folders holding runs (default: data/runs)")
    aud.add_argument("--details", action="store_true", help="also list every check record")
    aud.add_argument("--json", action="store_true", help="one line of JSON")
    aud.set_defaults(fn=_cmd_audit)

    bun = sub.add_parser("bundle", help="write a reproduction archive of runs (records, notebooks, pages, sources, "
                                        "licenses, SHA-256 manifest), or --verify one")
    bun.add_argument("run_dirs", nargs="*", help="run directories (e.g. data/runs/*)")
    bun.add_argument("--out", default="build/bundle.tar.gz", help="the archive to write (.tar.gz)")
    bun.add_argument("--book", default=None, help="a built book (`labkit book --out`) to take the pages from; "
                                                  "pages it lacks are made from the executed notebooks")
    bun.add_argument("--verify", metavar="ARCHIVE", default=None,
                     help="recheck ARCHIVE against its manifest; non-zero exit naming each mismatch")
    bun.set_defaults(fn=_cmd_bundle)

    args = parser.parse_args(argv)
    try:
        return args.fn(args)
    except ValueError as exc:
        print(f"labkit: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
