"""`labkit summary`: the headline numbers of committed runs, read from their records (never recomputed)."""
from __future__ import annotations

from pathlib import Path

from .audit import audit_block
from .results import load_run


def _bit_identity(records: dict, prov: dict) -> dict | None:
    cases = records.get("bit_identity", {}).get("cases")
    if not cases:
        return None
    return {"cases": len(cases), "identical": sum(bool(c["identical"]) for c in cases),
            "torch": prov.get("torch"), "gpu": prov.get("gpu")}


def summarize_run(path: Path) -> dict:
    run = load_run(path)
    records = run["records"]
    meta = records["run"]
    prov = meta["provenance"]
    out = {"run_id": meta["run_id"], "name": meta["name"], "complete": run["complete"], "gpu": prov.get("gpu"),
           "torch": prov.get("torch"), "date_utc": prov.get("date_utc")}
    block = _bit_identity(records, prov)
    if block:
        out["bit_identity"] = block
    audit = audit_block(path)
    if audit:
        out["audit"] = audit
    return out


def summarize_runs(paths: list[Path]) -> dict:
    """One run: its summary. Several: {"runs": [...]}, with top-level blocks merged from the runs that have them."""
    runs = [summarize_run(p) for p in paths]
    if len(runs) == 1:
        return runs[0]
    merged = {"runs": runs}
    audits = [r["audit"] for r in runs if "audit" in r]
    if audits:  # over all the runs, not the first one's
        margins = [a["min_margin"] for a in audits if a["min_margin"] is not None]
        merged["audit"] = {"records": sum(a["records"] for a in audits), "flips": sum(a["flips"] for a in audits),
                           "min_margin": min(margins) if margins else None}
    for r in runs:
        for key, value in r.items():
            if isinstance(value, dict):
                merged.setdefault(key, value)
    return merged
