"""Which study owns which run, and what `labkit summary` and the front page say of a run: each study module's own
`summary`, `summary_lines` and `page_headline`, dispatched by the run's name.

A study module here declares RUN_NAME (the name its session opens), NOTEBOOK (the notebook that writes the run,
or None) and the three readers; `labkit summary` adds the audit block, which every run with check records has.
"""
from __future__ import annotations

from pathlib import Path

from labkit.records.audit import audit_block
from labkit.records.run import load_run
from labkit.records.text import on_gpu
from labkit.studies import (bit_identity, dropin, environment, fast_stats, fused, kernelbench_timing,
                            layout_boundary, parallel_stats, reliability, timing, training)

STUDIES = {m.RUN_NAME: m for m in (environment, bit_identity, fast_stats, timing, parallel_stats, dropin,
                                   layout_boundary, reliability, training, kernelbench_timing, fused)}


def notebook_runs() -> dict[str, str]:
    """{notebook stem: run name} for every study written by a notebook."""
    return {m.NOTEBOOK: m.RUN_NAME for m in STUDIES.values() if m.NOTEBOOK}


def summarize_run(path: Path, run: dict | None = None) -> dict:
    """The headline blocks of one run directory, read from its records (never recomputed); `run`: the directory
    already loaded (labkit.records.run.load_run)."""
    run = run or load_run(path)
    records = run["records"]
    meta = records["run"]
    prov = meta["provenance"]
    out = {"run_id": meta["run_id"], "name": meta["name"], "complete": run["complete"], "gpu": prov.get("gpu"),
           "torch": prov.get("torch"), "date_utc": prov.get("date_utc")}
    study = STUDIES.get(meta["name"])
    if study is not None:
        out.update(study.summary(records, prov))
    if audit := audit_block(path):
        out["audit"] = audit
    return out


def summarize_runs(paths: list[Path]) -> dict:
    """One run: its summary. Several: {"runs": [...]}, with top-level blocks merged from the runs that have them
    (a key None in the first run's block is taken from a later run's)."""
    runs = [summarize_run(p) for p in paths]
    if len(runs) == 1:
        return runs[0]
    merged = {"runs": runs}
    audits = [r["audit"] for r in runs if "audit" in r]
    if audits:  # over all the runs, not the first one's
        margins = [a["min_margin"] for a in audits if a["min_margin"] is not None]
        merged["audit"] = {"records": sum(a["records"] for a in audits), "flips": sum(a["flips"] for a in audits),
                           "min_margin": min(margins) if margins else None}
    for r in runs:  # key by key: a block two runs share ("forward") takes each run's measured keys
        for key, value in r.items():
            if isinstance(value, dict):
                block = merged.setdefault(key, dict(value))
                for k, v in value.items():
                    if block.get(k) is None:
                        block[k] = v
    return merged


def _audit_line(a: dict) -> str:
    margin = "-" if a["min_margin"] is None else f"{a['min_margin']:.4g}"
    return f"audit: {a['records']} check record(s), {a['flips']} flip(s), min margin {margin}"


def _run_lines(run: dict) -> list[str]:
    lines = [f"{run['name']}  {run['run_id']}" + ("" if run.get("complete") else "  (INCOMPLETE)"),
             f"  {run.get('gpu') or 'no GPU'} · torch {run.get('torch')} · {run.get('date_utc')}"]
    study = STUDIES.get(run["name"])
    lines += ["  " + line for line in (study.summary_lines(run) if study else [])]
    if run.get("audit"):
        lines.append("  " + _audit_line(run["audit"]))
    return lines


def summary_text(summary: dict) -> str:
    """A few lines per run: name and run id, GPU, torch and date, then one line per headline block; for several
    runs, a last line with the audit over all of them."""
    runs = summary.get("runs", [summary])
    blocks = ["\n".join(_run_lines(r)) for r in runs]
    if "runs" in summary and summary.get("audit"):
        blocks.append(f"all {len(runs)} runs: " + _audit_line(summary["audit"]))
    return "\n\n".join(blocks)


def run_headline(run_dir: Path) -> str:
    """One line of what run `run_dir` shows, from its records (the owning study's page_headline); a run of no
    study gets its name and GPU."""
    run = load_run(run_dir)
    s = summarize_run(run_dir, run)
    study = STUDIES.get(s["name"])
    if study is None:
        return f"run '{s['name']}' {on_gpu(s)}"
    return study.page_headline(run["records"], s)
