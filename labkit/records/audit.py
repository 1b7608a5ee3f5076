"""The protocol-correction audit: every saved check record, reclassified under both scalings from its figures.

A check record is `labkit.check.CheckRecord.to_json()`, found anywhere inside a run's JSON files (for example
`bit_identity.cases[3].output`). Each keeps both maximum finite-error ratios (max |diff| / budget; <= 1 passes):

- official, candidate scale (the pinned evaluator, `torch.allclose(reference, candidate, atol=1e-4, rtol=1e-4)`):
  pass  <=>  (max_ratio_candidate_scale <= 1 or there are no finite pairs) and bad_special == 0
- historical, reference scale (the post's superseded helper): the same with max_ratio_reference_scale.

For each record the audit reports both verdicts, whether they differ (a *flip*), and the margin to a flip:
min(|ratio_c - 1|, |ratio_r - 1|) — how far the nearer ratio is from the 1.0 threshold (a bit-identical record has
ratios 0, margin 1.0). A record is *inconsistent* when a verdict or count it stores contradicts its own figures;
any inconsistency fails the audit (`labkit audit` exits non-zero).

The module also holds the notebook's CPU evidence: deterministic direction witnesses (the two scalings disagreeing,
each way, verified against torch.allclose), the official predicate checked against torch.allclose on random and
adversarial FP32 inputs, and the equal-NaN stress check (kept apart from the official verdict).
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

from labkit.records import check
from labkit.records.run import DATA_RUNS, load_run

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


def audit_run(path: Path) -> dict:
    """One run: its id, completeness, and an AuditRow per check record in any of its JSON files."""
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
    return {"run_id": run_id, "path": str(path), "complete": loaded["complete"], "rows": rows}


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
        return [{"run": r["run_id"], "complete": r["complete"], **summarize_rows(r["rows"]),
                 "inconsistent": sum(not x.consistent for x in r["rows"])} for r in self.runs]

    def record_table(self, sort_by_margin: bool = True) -> list[dict]:
        rows = self.rows
        if sort_by_margin:
            rows = sorted(rows, key=lambda r: (r.consistent, math.inf if r.margin is None else r.margin))
        return [{"run": r.run_id, "record": r.record, "elements": r.elements,
                 "ratio (cand. scale)": _fmt(r.ratio_c), "ratio (ref. scale)": _fmt(r.ratio_r),
                 "bad special": r.bad_special, "official": _pf(r.official), "historical": _pf(r.historical),
                 "stored": _pf(r.stored_official), "flip": "FLIP" if r.flip else "", "margin": r.margin,
                 "consistent": "yes" if r.consistent else "NO: " + "; ".join(r.issues)}
                for r in rows]

    def to_json(self) -> dict:
        return {"ok": self.ok, "summary": self.summary(),
                "runs": [{k: v for k, v in r.items() if k != "rows"} for r in self.runs],
                "records": [r.to_json() for r in self.rows]}

    def headline(self) -> str:
        s = self.summary()
        return (f"audit: {s['runs']} run(s), {s['records']} check record(s), {s['flips']} flip(s), "
                f"min margin {s['min_margin']}, {s['inconsistent']} inconsistent — "
                f"{'OK' if self.ok else 'FAILED'}")


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


# ---------------------------------------------------------------------------------------------------------------
# The two predicates, and direction witnesses
# ---------------------------------------------------------------------------------------------------------------

def predicate_table() -> list[dict]:
    """The official and the historical predicates side by side."""
    return [
        {"predicate": "official (KernelBench, pinned)", "code": check.KERNELBENCH_PREDICATE,
         "elementwise": "|ref - cand| <= atol + rtol*|cand|", "relative scale": "candidate (2nd argument)",
         "NaN": "never equal", "inf": "equal only to the same inf", "role": "the verdict"},
        {"predicate": "historical helper (superseded)", "code": "check.historical_reference_scaled_pass(ref, cand)",
         "elementwise": "|ref - cand| <= atol + rtol*|ref|", "relative scale": "reference (1st argument)",
         "NaN": "NaN matches NaN", "inf": "equal only to the same inf", "role": "audit comparison only"},
    ]


DIRECTIONS = {
    "official_only": "candidate scale passes, reference scale fails (|cand| > |ref|)",
    "historical_only": "reference scale passes, candidate scale fails (|ref| > |cand|)",
}


@dataclass(frozen=True)
class Witness:
    direction: str
    reference: float       # exact float32 values (as Python floats)
    candidate: float
    reference_hex: str
    candidate_hex: str
    diff: float            # |ref - cand| in float32, as allclose computes it
    budget_candidate_scale: float
    budget_reference_scale: float
    torch_allclose: bool   # torch.allclose(ref, cand, atol=1e-4, rtol=1e-4) itself
    historical: bool       # check.historical_reference_scaled_pass
    verified_on: tuple

    def tensors(self, device="cpu"):
        import torch

        return (torch.tensor([self.reference], dtype=torch.float32, device=device),
                torch.tensor([self.candidate], dtype=torch.float32, device=device))

    def to_json(self) -> dict:
        d = asdict(self)
        d["verified_on"] = list(self.verified_on)
        return d


def _f32(x: float) -> float:
    import torch

    return float(torch.tensor([x], dtype=torch.float32).item())


def _f32_hex(x: float) -> str:
    import struct

    return "0x" + struct.pack(">f", x).hex()


def _diff_and_budgets(ref: float, cand: float):
    """float32 |ref - cand|, and the two budgets atol + rtol*|scale|, computed exactly as check/allclose do."""
    import torch

    r = torch.tensor([ref], dtype=torch.float32)
    c = torch.tensor([cand], dtype=torch.float32)
    diff = (r - c).abs()
    return float(diff.item()), float((check.ATOL + check.RTOL * c.abs()).item()), \
        float((check.ATOL + check.RTOL * r.abs()).item())


def construct_witness(inner: float, direction: str = "official_only", verify_on=("cpu",)) -> Witness | None:
    """From the smaller-magnitude value `inner` (rounded to float32), step the other value outward one float32 ulp
    at a time from inner + budget(inner) until the pair just exceeds the budget scaled by `inner`; if the larger
    value's own budget still covers the difference, the scalings disagree. `official_only` puts the larger value
    in the candidate (candidate scale passes), `historical_only` in the reference. None when the float32 grid has
    no such pair next to `inner` (the window is rtol*atol wide, so |inner| must be small, roughly < 0.1)."""
    import torch

    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {list(DIRECTIONS)}, got {direction!r}")
    inner = _f32(inner)
    sign = -1.0 if math.copysign(1.0, inner) < 0 else 1.0
    away = torch.tensor([sign * math.inf])
    x = torch.tensor([inner], dtype=torch.float32)
    outer = x + sign * (check.ATOL + check.RTOL * x.abs())
    for _ in range(64):  # a handful of ulps at most
        diff, budget_outer, budget_inner = _diff_and_budgets(inner, float(outer.item()))
        if diff > budget_inner:
            break
        outer = torch.nextafter(outer, away)
    else:
        return None
    if not diff <= budget_outer:
        return None
    ref, cand = (inner, float(outer.item())) if direction == "official_only" else (float(outer.item()), inner)
    return verify_witness(ref, cand, direction, verify_on)


def verify_witness(ref: float, cand: float, direction: str, verify_on=("cpu",)) -> Witness:
    """Check a candidate witness with torch.allclose itself, the historical helper and check.compare, on each
    device in `verify_on`; raise if it does not classify as `direction` says."""
    import torch

    diff, b_c, b_r = _diff_and_budgets(ref, cand)
    verdicts = set()
    for dev in verify_on:
        r = torch.tensor([ref], dtype=torch.float32, device=dev)
        c = torch.tensor([cand], dtype=torch.float32, device=dev)
        official = bool(torch.allclose(r, c, atol=check.ATOL, rtol=check.RTOL))
        historical = check.historical_reference_scaled_pass(r, c)
        rec = check.compare(r, c)
        verdicts.add((official, historical, rec.official_pass, rec.reference_scaled_pass))
    want = (True, False) if direction == "official_only" else (False, True)
    if verdicts != {want * 2}:
        raise AssertionError(f"({ref!r}, {cand!r}) is not a {direction} witness on {verify_on}: {verdicts}")
    return Witness(direction, ref, cand, _f32_hex(ref), _f32_hex(cand), diff, b_c, b_r, want[0], want[1],
                   tuple(verify_on))


def direction_witnesses(per_direction: int = 3, seed: int = 0, verify_on=("cpu",)) -> list[Witness]:
    """`per_direction` verified witnesses for each direction: first from inner value 0.0 (the smallest reference
    budget), then from seeded random small magnitudes of both signs, tried in a fixed order. Deterministic."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    out = {d: [] for d in DIRECTIONS}
    tried = 0
    inners = [0.0]
    while any(len(v) < per_direction for v in out.values()):
        if not inners:
            mag = float(torch.rand(1, generator=gen).item()) * 10.0 ** -int(torch.randint(1, 8, (1,), generator=gen))
            inners.append(mag if torch.rand(1, generator=gen).item() < 0.5 else -mag)
        inner = inners.pop(0)
        tried += 1
        if tried > 10_000:
            raise RuntimeError(f"no witnesses found in {tried} tries")
        for direction, found in out.items():
            if len(found) < per_direction:
                w = construct_witness(inner, direction, verify_on)
                if w is not None:
                    found.append(w)
    return [w for d in DIRECTIONS for w in out[d]]


# ---------------------------------------------------------------------------------------------------------------
# The official predicate against torch.allclose itself
# ---------------------------------------------------------------------------------------------------------------

def _boundary_pairs(base, gen, max_ulps: int = 3):
    """(reference, candidate) from values `base`: candidates mostly well inside the budget (or exact copies),
    and 0-2 elements per row placed on the candidate-scale boundary — candidate = base, reference =
    base ± (atol + rtol*|base|) walked up to `max_ulps` float32 ulps either way — so some land exactly on it
    (ratio 1.0) and the row's verdict hinges on them: about half the rows pass."""
    import torch

    n = base.numel()
    ref = base.clone()
    budget = check.ATOL + check.RTOL * base.abs()
    sign = torch.where(torch.rand(n, generator=gen) < 0.5, -1.0, 1.0).to(base.dtype)
    cand = base + sign * budget * (torch.rand(n, generator=gen) * 0.9).to(base.dtype)
    cand = torch.where(torch.rand(n, generator=gen) < 0.2, base, cand)  # exact copies
    k = int(torch.randint(0, 3, (1,), generator=gen))
    for i in torch.randperm(n, generator=gen)[:k].tolist():
        r = base[i:i + 1] + sign[i] * budget[i]
        steps = int(torch.randint(-max_ulps, max_ulps + 1, (1,), generator=gen))
        toward = torch.full_like(r, math.inf if steps > 0 else -math.inf)
        for _ in range(abs(steps)):
            r = torch.nextafter(r, toward)
        ref[i], cand[i] = r[0], base[i]
    return ref, cand


def _adversarial_pair(n: int, gen, with_specials: bool):
    """References over many magnitudes (±0, denormals, tiny, ordinary, huge, near float32 max), candidates from
    `_boundary_pairs`; with specials, about half the rows get a NaN/inf in one or both tensors (same-inf pairs are
    accepted by allclose, NaN pairs never)."""
    import torch

    f32 = torch.float32
    mags = torch.tensor([0.0, 1e-45, 1e-40, 1e-38, 1e-12, 1e-6, 1e-4, 1e-2, 0.5, 1.0, 3.0, 1e3, 1e8, 1e20, 1e30,
                         2.2e38], dtype=f32)
    ref = mags[torch.randint(0, len(mags), (n,), generator=gen)] * (torch.rand(n, generator=gen) + 0.5).to(f32)
    ref = ref * torch.where(torch.rand(n, generator=gen) < 0.5, -1.0, 1.0).to(f32)
    ref, cand = _boundary_pairs(ref, gen)
    if with_specials and torch.rand(1, generator=gen).item() < 0.5:
        specials = torch.tensor([math.nan, math.inf, -math.inf], dtype=f32)
        i = int(torch.randint(0, n, (1,), generator=gen))
        a, b = (specials[torch.randint(0, 3, (2,), generator=gen)]).tolist()
        how = int(torch.randint(0, 3, (1,), generator=gen))  # 0: same special in both, 1: ref only, 2: both drawn
        ref[i] = a
        cand[i] = a if how == 0 else (cand[i] if how == 1 else b)
    return ref, cand


def _random_pair(n: int, gen):
    import torch

    base = (torch.randn(n, generator=gen) * 10.0 ** torch.randint(-6, 4, (n,), generator=gen)).float()
    return _boundary_pairs(base, gen, max_ulps=40)


def allclose_agreement(trials: int = 2000, seed: int = 0, n: int = 16, device: str = "cpu") -> dict:
    """Compare, trial by trial, torch.allclose(ref, cand, atol=1e-4, rtol=1e-4) with (a) check.compare's
    official_pass and (b) the verdict the audit recomputes from the record's saved figures (ratio <= 1 and no bad
    special pair). Trials cycle through random inputs, adversarial boundary inputs, and adversarial inputs with
    NaN/inf. Small rows make single-element decisions matter. Returns counts; `disagreements` must be 0."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    kinds = ("random", "adversarial", "adversarial+specials")
    counts = {k: {"trials": 0, "allclose_pass": 0, "agree_compare": 0, "agree_figures": 0,
                  "max ratio exactly 1.0": 0, "min distance of ratio to 1.0": math.inf} for k in kinds}
    bad = []
    for t in range(trials):
        kind = kinds[t % 3]
        ref, cand = _random_pair(n, gen) if kind == "random" else _adversarial_pair(n, gen, kind != "adversarial")
        ref, cand = ref.to(device), cand.to(device)
        truth = bool(torch.allclose(ref, cand, atol=check.ATOL, rtol=check.RTOL))
        rec = check.compare(ref, cand)
        from_figures = official_from_figures(json.loads(json.dumps(rec.to_json())))  # through JSON, as saved
        c = counts[kind]
        c["trials"] += 1
        c["allclose_pass"] += truth
        c["agree_compare"] += rec.official_pass == truth
        c["agree_figures"] += from_figures == truth
        if rec.max_ratio_candidate_scale is not None:
            c["max ratio exactly 1.0"] += rec.max_ratio_candidate_scale == 1.0
            gap = abs(rec.max_ratio_candidate_scale - 1.0)
            c["min distance of ratio to 1.0"] = min(c["min distance of ratio to 1.0"], gap)
        if not (rec.official_pass == truth == from_figures):
            bad.append({"trial": t, "kind": kind, "allclose": truth, "compare": rec.official_pass,
                        "figures": from_figures})
    rows = [{"inputs": k, **v} for k, v in counts.items()]
    total = {key: (min if key.startswith("min distance") else sum)(v[key] for v in counts.values())
             for key in counts[kinds[0]]}
    return {"device": device, "seed": seed, "elements_per_trial": n, "rows": rows,
            "total": {"inputs": "all", **total}, "disagreements": bad}


# ---------------------------------------------------------------------------------------------------------------
# Equal-NaN: a stress convention, never the official verdict
# ---------------------------------------------------------------------------------------------------------------

def equal_nan_stress() -> list[dict]:
    """Pairs with NaN/inf where the equal-NaN convention and the official verdict differ (or not), each with the
    official verdict as stored by check.compare. The official verdict never takes equal_nan=True."""
    import torch

    nan, inf = math.nan, math.inf
    cases = [
        ("NaN at the same position", [1.0, nan, 2.0], [1.0, nan, 2.0]),
        ("NaN vs a number", [1.0, nan, 2.0], [1.0, 0.0, 2.0]),
        ("same +inf", [1.0, inf, 2.0], [1.0, inf, 2.0]),
        ("-inf vs +inf", [1.0, -inf, 2.0], [1.0, inf, 2.0]),
        ("NaN pair and a real error", [1.0, nan, 2.0], [1.0, nan, 2.1]),
        ("finite only, within budget", [1.0, 2.0], [1.0, 2.0001]),
    ]
    rows = []
    for name, r, c in cases:
        ref, cand = torch.tensor(r, dtype=torch.float32), torch.tensor(c, dtype=torch.float32)
        rec = check.compare(ref, cand)
        rows.append({"case": name, "reference": r, "candidate": c,
                     "official (allclose)": _pf(check.official_allclose(ref, cand)),
                     "stored official_pass": _pf(rec.official_pass), "bad special": rec.bad_special,
                     "equal-NaN stress": _pf(check.equal_nan_allclose(ref, cand)),
                     "official == allclose": rec.official_pass == check.official_allclose(ref, cand)})
    return rows


# ---------------------------------------------------------------------------------------------------------------
# A synthetic demonstration run (clearly labelled), for when no committed run exists yet
# ---------------------------------------------------------------------------------------------------------------

SYNTHETIC_NAME = "SYNTHETIC-audit-demo"


def synthetic_demo_run(root: Path, seed: int = 0) -> Path:
    """Write a run named SYNTHETIC-audit-demo under `root` whose records are real check.compare() results on small
    CPU inputs made for the demonstration (not GPU results): a bit-identical case, one witness per direction
    (flips), and a clear failure. Returns the run directory."""
    import torch

    from labkit.records.run import Run

    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(64, generator=gen)
    ws = direction_witnesses(per_direction=1, seed=seed)
    cases = [("bit-identical copy", x, x.clone()),
             *[(f"witness {w.direction}", *w.tensors()) for w in ws],
             ("clear failure (+1e-2)", x, x + 1e-2)]
    run = Run.create(Path(root), SYNTHETIC_NAME, {"synthetic": True, "seed": seed}, device="cpu")
    run.write("checks", {"synthetic": True,
                         "note": "demonstration inputs on the CPU, not a GPU result",
                         "cases": [{"case": name, "output": check.compare(r, c).to_json()} for name, r, c in cases]})
    run.close()
    return run.path
