"""The protocol-correction audit: every saved check record, reclassified under both scalings from its figures.

A check record is `labkit.records.check.CheckRecord.to_json()`, found anywhere inside a run's JSON files (for example
`bit_identity.cases[3].output`). Each keeps both maximum finite-error ratios (max |diff| / budget; <= 1 passes):

- official, candidate scale (the pinned evaluator, `torch.allclose(reference, candidate, atol=1e-4, rtol=1e-4)`):
  pass  <=>  (max_ratio_candidate_scale <= 1 or there are no finite pairs) and bad_special == 0
- historical, reference scale (the post's superseded helper): the same with max_ratio_reference_scale.

For each record the audit reports both verdicts, whether they differ (a *flip*), and the margin to a flip:
min(|ratio_c - 1|, |ratio_r - 1|) — how far the nearer ratio is from the 1.0 threshold (a bit-identical record has
ratios 0, margin 1.0). A record is *inconsistent* when a verdict or count it stores contradicts its own figures;
any inconsistency fails the audit (`labkit audit` exits non-zero).

"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

from labkit.records.run import DATA_RUNS, load_run
from labkit.records.text import text_table

RATIO_C = "max_ratio_candidate_scale"
RATIO_R = "max_ratio_reference_scale"


# ---------------------------------------------------------------------------------------------------------------
# Finding and reclassifying check records
# ---------------------------------------------------------------------------------------------------------------

def is_check_record(obj) -> bool:
    """A dict carrying a stored official verdict and both ratios: what the audit needs."""
    return isinstance(obj, dict) and "official_pass" in obj and RATIO_C in obj and RATIO_R in obj


def _is_partial_record(obj) -> bool:
    """A verdict stored with only one of the two ratios: cannot be audited, so it is reported, never skipped."""
    return (isinstance(obj, dict) and "official_pass" in obj and (RATIO_C in obj) != (RATIO_R in obj))


def iter_check_records(obj, path: str = ""):
    """Yield (json_path, record) for every check record (or partial one) nested in `obj`, in document order."""
    if is_check_record(obj) or _is_partial_record(obj):
        yield path, obj
        return
    if isinstance(obj, dict):
        for key, value in obj.items():
            yield from iter_check_records(value, f"{path}.{key}" if path else str(key))
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            yield from iter_check_records(value, f"{path}[{i}]")


def _ratio(value) -> float | None:
    return None if value is None else float(value)


def verdict_from_figures(ratio: float | None, bad_special: int) -> bool:
    """Pass under one scaling from the saved figures: the finite pairs within budget (ratio <= 1; None means there
    were no finite pairs) and no unaccepted special pair. NaN/inf ratios compare false, so they fail."""
    return (ratio is None or ratio <= 1.0) and int(bad_special) == 0


def official_from_figures(record: dict) -> bool:
    """The official (candidate-scale) verdict recomputed from a record's saved figures."""
    return verdict_from_figures(_ratio(record[RATIO_C]), record.get("bad_special", 0))


def margin_to_flip(ratio_c: float | None, ratio_r: float | None) -> float | None:
    """min(|ratio - 1|) over the ratios present; None when neither scaling saw a finite pair."""
    present = [abs(r - 1.0) for r in (ratio_c, ratio_r) if r is not None]
    return min(present) if present else None


@dataclass
class AuditRow:
    run_id: str
    record: str            # file (without .json) and JSON path inside it
    elements: int | None
    bit_equal: int | None
    ratio_c: float | None  # official, candidate scale
    ratio_r: float | None  # historical, reference scale
    bad_special: int
    official: bool | None  # recomputed from the figures
    historical: bool | None
    stored_official: bool
    flip: bool
    margin: float | None
    consistent: bool
    issues: list = field(default_factory=list)

    def to_json(self) -> dict:
        return asdict(self)


def audit_record(run_id: str, where: str, rec: dict) -> AuditRow:
    stored = bool(rec["official_pass"])
    if not is_check_record(rec):
        missing = RATIO_R if RATIO_C in rec else RATIO_C
        return AuditRow(run_id, where, rec.get("elements"), rec.get("bit_equal"), _ratio(rec.get(RATIO_C)),
                        _ratio(rec.get(RATIO_R)), int(rec.get("bad_special", 0)), None, None, stored, False, None,
                        False, [f"missing {missing}: cannot reclassify"])
    rc, rr = _ratio(rec[RATIO_C]), _ratio(rec[RATIO_R])
    special = int(rec.get("bad_special", 0))
    official = verdict_from_figures(rc, special)
    historical = verdict_from_figures(rr, special)
    issues = []
    if stored != official:
        issues.append(f"stored official_pass={stored} but the figures give {official}")
    if "reference_scaled_pass" in rec and bool(rec["reference_scaled_pass"]) != historical:
        issues.append(f"stored reference_scaled_pass={rec['reference_scaled_pass']} but the figures give "
                      f"{historical}")
    for key, ratio in (("bad_finite_candidate_scale", rc), ("bad_finite_reference_scale", rr)):
        if key in rec and (int(rec[key]) > 0) != (ratio is not None and not ratio <= 1.0):
            issues.append(f"{key}={rec[key]} contradicts ratio {ratio}")
    return AuditRow(run_id, where, rec.get("elements"), rec.get("bit_equal"), rc, rr, special, official,
                    historical, stored, official != historical, margin_to_flip(rc, rr), not issues, issues)


# ---------------------------------------------------------------------------------------------------------------
# Runs
# ---------------------------------------------------------------------------------------------------------------

def discover_runs(paths=None) -> list[Path]:
    """Run directories (those holding run.json) named by `paths`, or found beneath them; default: data/runs.
    A missing default directory gives no runs; a named path that is neither a run nor holds one is an error."""
    if not paths:
        return sorted(p.parent for p in DATA_RUNS.rglob("run.json")) if DATA_RUNS.is_dir() else []
    found = []
    for p in map(Path, paths):
        if (p / "run.json").is_file():
            found.append(p)
        elif p.is_dir():
            inner = sorted(q.parent for q in p.rglob("run.json"))
            if not inner:
                raise ValueError(f"{p} is not a run directory (no run.json) and holds none")
            found.extend(inner)
        else:
            raise ValueError(f"{p} is not a run directory (no run.json)")
    return list(dict.fromkeys(found))


# What a run's records hold when none is a check record, read from their keys (never typed per run).
_BIT_KEYS = {"identical", "bits", "bit_equal_fraction", "mismatches", "bits_equal_reference", "sampled_mismatches",
             "fuzz_mismatches"}


def _kinds_of_records(records: list) -> list[str]:
    """What the records carry, in words: single-ratio tolerance verdicts, bit comparisons, timings, else other
    measurements (compile records, profiles, sanitizer reports, tables)."""
    single, bits, times = False, False, False

    def walk(o):
        nonlocal single, bits, times
        if isinstance(o, dict):
            if "official_pass" in o and RATIO_C not in o and RATIO_R not in o:
                single = True
            for k, v in o.items():
                k = str(k)
                bits = bits or k in _BIT_KEYS or k.endswith("_identical")
                times = times or k.endswith(("_ms", "_us")) or k in ("samples_ms", "median_ms")
                walk(v)
        elif isinstance(o, list):
            for v in o:
                walk(v)

    for r in records:
        walk(r)
    kinds = []
    if single:
        kinds.append("tolerance verdicts with one ratio")
    if bits:
        kinds.append("bit comparisons (equal or not)")
    if times:
        kinds.append("timings")
    return kinds or ["measurements other than checks (compile records, profiles, tables)"]


def no_checks_reason(path: Path) -> str:
    """Why a run holds no check record: its study's name and what its records carry (`_kinds_of_records`)."""
    path = Path(path)
    run = json.loads((path / "run.json").read_text())
    records = [json.loads(f.read_text()) for f in sorted(path.rglob("*.json"))
               if f.name not in ("manifest.json", "run.json")]
    kinds = _kinds_of_records(records)
    said = ", ".join(kinds[:-1]) + (" and " if len(kinds) > 1 else "") + kinds[-1]
    return f"the {run.get('name', 'run')} study records {said}; none keeps both ratios"


def audit_run(path: Path) -> dict:
    """One run: its id, completeness, and an AuditRow per check record in any of its JSON files (and, when it has
    none, why: `no_checks_reason`)."""
    path = Path(path)
    loaded = load_run(path)  # validates run.json and the manifest
    run_id = loaded["records"]["run"].get("run_id", path.name)
    rows = []
    for f in sorted(path.rglob("*.json")):
        if f.name == "manifest.json":
            continue
        name = str(f.relative_to(path).with_suffix(""))
        for where, rec in iter_check_records(json.loads(f.read_text()), ""):
            sep = "" if where.startswith("[") or not where else "."
            rows.append(audit_record(run_id, f"{name}{sep}{where}", rec))
    return {"run_id": run_id, "name": loaded["records"]["run"].get("name", ""), "path": str(path),
            "complete": loaded["complete"], "rows": rows, "no_checks": None if rows else no_checks_reason(path)}


def summarize_rows(rows: list[AuditRow]) -> dict:
    """{"records": n, "flips": k, "min_margin": m} (m None when no record has a finite ratio)."""
    margins = [r.margin for r in rows if r.margin is not None]
    return {"records": len(rows), "flips": sum(r.flip for r in rows), "min_margin": min(margins) if margins else None}


@dataclass
class AuditReport:
    runs: list  # dicts from audit_run

    @property
    def rows(self) -> list[AuditRow]:
        return [row for run in self.runs for row in run["rows"]]

    @property
    def inconsistent(self) -> list[AuditRow]:
        return [r for r in self.rows if not r.consistent]

    @property
    def ok(self) -> bool:
        return not self.inconsistent

    def summary(self) -> dict:
        return {**summarize_rows(self.rows), "runs": len(self.runs), "inconsistent": len(self.inconsistent),
                "incomplete_runs": sum(not r["complete"] for r in self.runs)}

    def run_table(self) -> list[dict]:
        """One row per run; a run without check records says why in "why no check records"."""
        return [{"run": r["run_id"], "complete": r["complete"], **summarize_rows(r["rows"]),
                 "inconsistent": sum(not x.consistent for x in r["rows"]),
                 "why no check records": r.get("no_checks") or ""} for r in self.runs]

    def record_table(self, sort_by_margin: bool = True) -> list[dict]:
        """One row per check record, the ratios as recorded (floats; the terminal prints them with ten digits, a
        page through labkit.display.cell_text), nearest to a flip first."""
        rows = self.rows
        if sort_by_margin:
            rows = sorted(rows, key=lambda r: (r.consistent, math.inf if r.margin is None else r.margin))
        return [{"run": r.run_id, "record": r.record, "elements": r.elements,
                 "ratio (cand. scale)": r.ratio_c, "ratio (ref. scale)": r.ratio_r,
                 "bad special": r.bad_special, "official": _pf(r.official), "historical": _pf(r.historical),
                 "stored": _pf(r.stored_official), "flip": "FLIP" if r.flip else "", "margin": r.margin,
                 "consistent": "yes" if r.consistent else "NO: " + "; ".join(r.issues)}
                for r in rows]

    def to_json(self) -> dict:
        return {"ok": self.ok, "summary": self.summary(),
                "runs": [{k: v for k, v in r.items() if k != "rows"} for r in self.runs],
                "records": [r.to_json() for r in self.rows]}

    def text(self, details: bool = False, max_runs: int = 20) -> str:
        """The terminal report: the headline and one line per run (at most `max_runs`), and any inconsistent
        record; `details` adds every record, nearest to a flip first."""
        table = self.run_table()
        # runs without check records, one line for all of them: their studies' reasons are in --details
        runs = table if details else [r for r in table if r["records"] or not r["why no check records"]]
        parts = [self.headline(), text_table(runs[:max_runs])]
        if len(runs) > max_runs:
            parts.append(f"... and {len(runs) - max_runs} more run(s)")
        if not details and len(runs) < len(table):
            kept = {r["run"] for r in runs}
            names = sorted({r.get("name") or r["run_id"] for r in self.runs if r["run_id"] not in kept})
            parts.append(f"{len(table) - len(runs)} run(s) keep no check records, only bit comparisons, timings or "
                         f"one-ratio verdicts (studies: {', '.join(names)}); `labkit audit --details` says why "
                         "for each")
        if details:  # the ratios with ten significant digits: 1.00000007 must not print as 1
            parts.append(text_table([{**r, **{k: _fmt(r[k]) for k in RATIO_COLUMNS}} for r in self.record_table()]))
        else:
            bad = [r for r in self.record_table() if r["consistent"] != "yes"]
            if bad:
                parts.append(text_table(bad[:max_runs], ["run", "record", "consistent"])
                             + (f"\n... and {len(bad) - max_runs} more inconsistent" if len(bad) > max_runs else ""))
            parts.append(f"{len(self.rows)} check record(s) in all: `labkit audit --details` lists each one.")
        return "\n\n".join(parts)

    def headline(self) -> str:
        s = self.summary()
        return (f"audit: {s['runs']} run(s), {s['records']} check record(s), {s['flips']} flip(s), "
                f"min margin {s['min_margin']}, {s['inconsistent']} inconsistent — "
                f"{'OK' if self.ok else 'FAILED'}")


RATIO_COLUMNS = ("ratio (cand. scale)", "ratio (ref. scale)")


def _fmt(x: float | None) -> str:
    """Ratios with enough digits that 1.00000007 does not print as 1."""
    return "-" if x is None else f"{x:.10g}"


def _pf(v) -> str:
    return "-" if v is None else ("pass" if v else "FAIL")


def audit_runs(paths=None) -> AuditReport:
    """Audit the named run directories (or those beneath the named folders); default: every run under data/runs."""
    return AuditReport([audit_run(p) for p in discover_runs(paths)])


def audit_block(path: Path) -> dict | None:
    """The `labkit summary` block for one run: {"records", "flips", "min_margin"}, or None without check records."""
    rows = audit_run(path)["rows"]
    return summarize_rows(rows) if rows else None
