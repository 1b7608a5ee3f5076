"""Notebook 04's study: which predicate decides, shown on CPU evidence, and the audit of committed runs summed up.

- the official predicate (KernelBench's `torch.allclose(reference, candidate, atol=1e-4, rtol=1e-4)`, candidate
  scale) beside the post's superseded helper (reference scale);
- deterministic direction witnesses: FP32 pairs on which the two scalings disagree, each way, verified against
  torch.allclose itself;
- the official predicate as `check.compare` computes it (and as the audit recomputes it from saved figures) against
  torch.allclose on random and adversarial inputs;
- the equal-NaN stress convention, kept apart from the official verdict;
- a clearly labelled SYNTHETIC run that shows the audit (labkit.records.audit) does see a flip.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

from labkit import tasks
from labkit.records import check
from labkit.records.audit import AuditReport, official_from_figures

# allclose trials per seed and device


def _margin(m) -> str:
    return "n/a" if m is None else f"{m:.3g}"


def _pf(v) -> str:
    return "-" if v is None else ("pass" if v else "FAIL")


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


# ---------------------------------------------------------------------------------------------------------------
# What the notebook shows: rows and the verdict, from the records above
# ---------------------------------------------------------------------------------------------------------------

def witness_rows(witnesses: list[Witness]) -> list[dict]:
    return [w.to_json() for w in witnesses]


def witness_lines(witnesses: list[Witness]) -> list[str]:
    """Each direction's first witness as a line anyone can paste into Python (after `import torch`)."""
    firsts = {}
    for w in witnesses:
        firsts.setdefault(w.direction, w)
    return [f"torch.allclose(torch.tensor([{w.reference!r}]), torch.tensor([{w.candidate!r}]), atol=1e-4, "
            f"rtol=1e-4)  # {w.torch_allclose}; reference-scaled: {w.historical}  ({w.direction})"
            for w in firsts.values()]


def devices_for(device: str) -> tuple[str, ...]:
    """Where the CPU evidence is checked: always the CPU, and CUDA tensors too when the notebook runs on a GPU."""
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda' (resolved), got {device!r}")
    return ("cpu", "cuda") if device == "cuda" else ("cpu",)


def agreement_runs(mode: str, seeds, device: str = "cpu") -> list[dict]:
    """allclose_agreement for every seed on every device of `devices_for(device)`, tasks.config(mode).allclose_trials
    trials each."""
    trials = tasks.config(mode).allclose_trials
    return [allclose_agreement(trials, seed=int(s), device=d) for s in seeds for d in devices_for(device)]


def agreement_rows(agreement: list[dict]) -> list[dict]:
    return [{"seed": a["seed"], "device": a["device"], **row} for a in agreement for row in a["rows"] + [a["total"]]]


def nearest_to_flip(report: AuditReport, n: int = 10) -> list[dict]:
    """The `n` audited records nearest to a flip (inconsistent ones first): the one-screen view of the audit."""
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    return report.record_table(sort_by_margin=True)[:n]


def verdict(witnesses: list[Witness], agreement: list[dict], report: AuditReport, demo: AuditReport) -> dict:
    """{"lines": what the evidence shows, "problems": what fails (empty when everything holds)}."""
    n_trials = sum(a["total"]["trials"] for a in agreement)
    n_agree = sum(min(a["total"]["agree_compare"], a["total"]["agree_figures"]) for a in agreement)
    n_exact = sum(a["total"]["max ratio exactly 1.0"] for a in agreement)
    dirs = sorted({w.direction for w in witnesses})
    s, d = report.summary(), demo.summary()
    lines = [
        # the audit first: it is the answer the front page shows
        f"Audit of committed runs: {s['runs']} run(s), {s['records']} check record(s), {s['flips']} flip(s), "
        f"min margin to a flip {_margin(s['min_margin'])}, {s['inconsistent']} inconsistent record(s).",
        f"Direction witnesses: {len(witnesses)} verified, directions {', '.join(dirs)}, with torch.allclose itself.",
        f"Official predicate vs torch.allclose: {n_agree}/{n_trials} identical verdicts (compare and saved "
        f"figures), {n_exact} rows exactly on the boundary (ratio 1.0).",
        f"Synthetic demonstration (not a result): {d['records']} records, {d['flips']} flips detected.",
    ]
    problems = []
    if set(dirs) != set(DIRECTIONS):
        problems.append(f"witnesses cover only {dirs}")
    if n_agree != n_trials:
        problems.append(f"allclose disagreements: {[a['disagreements'] for a in agreement]}")
    if not (d["flips"] == 2 and demo.ok):
        problems.append(f"the synthetic run should show 2 consistent flips, got {d}")
    if not report.ok:
        problems.append(f"inconsistent records: {[(r.run_id, r.record, r.issues) for r in report.inconsistent]}")
    return {"lines": lines, "problems": problems}


def post_rows(report: AuditReport) -> list[dict]:
    """The post's predicate and audit figures beside this book's: the tolerances are the same constants; the audit
    counts differ in what is counted (the post: its local result files and their saved error ratios; here: the
    committed GPU runs and their check records), so their ratio measures coverage, not agreement."""
    from labkit.records import post

    s = report.summary()
    return post.compare_rows([
        ("protocol.atol", check.ATOL, "labkit.records.check.ATOL, used by every check record"),
        ("protocol.rtol", check.RTOL, "labkit.records.check.RTOL, used by every check record"),
        ("protocol.audit.result_files", s["runs"], "not the same thing counted: the post's local result files; "
                                                   "here the committed GPU runs (data/runs) audited at build time"),
        ("protocol.audit.error_ratios", s["records"], "not the same records: the post's saved error ratios; here the "
                                                      "saved check records of those runs, one ratio each"),
    ], here="audit of the committed runs, computed when the book was built")
