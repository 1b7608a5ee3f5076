"""`labkit summary`: the headline numbers of committed runs, read from their records (never recomputed)."""
from __future__ import annotations

from pathlib import Path

from labkit.records.audit import audit_block
from labkit.records.check import identical_count
from labkit.records.run import load_run


def _bit_identity(records: dict, prov: dict) -> dict | None:
    cases = records.get("bit_identity", {}).get("cases")
    if not cases:
        return None
    identical, n = identical_count(cases)
    return {"cases": n, "identical": identical,
            "torch": prov.get("torch"), "gpu": prov.get("gpu")}


def fast_stats_block(records: dict) -> dict | None:
    """Headline counts of a `fast_stats` record (notebook 02), read as recorded.

    Every count is over (method x case) combinations — e.g. 4 methods x 18 ordinary cases = 72 — not over input
    cases. A combination whose method could not run (e.g. TorchScript raising on the installed torch) has no
    output: it is counted in `errors` and in no other count. `ordinary_pass`: ordinary combinations passing the
    official predicate; `offset_fail`: offset (+1000) combinations failing it; `per_method` repeats the counts for
    each method.
    """
    cases = records.get("fast_stats", {}).get("cases")
    if not cases:
        return None

    def counts(cs: list) -> dict:
        ran = [c for c in cs if c.get("output")]
        by = {cat: [c for c in ran if c.get("category") == cat] for cat in ("ordinary", "offset", "constant_control")}
        return {"ordinary_pass": sum(bool(c["output"]["official_pass"]) for c in by["ordinary"]),
                "ordinary_cases": len(by["ordinary"]),
                "offset_fail": sum(not c["output"]["official_pass"] for c in by["offset"]),
                "offset_cases": len(by["offset"]),
                "constant_control_fail": sum(not c["output"]["official_pass"] for c in by["constant_control"]),
                "constant_control_cases": len(by["constant_control"]),
                "errors": len(cs) - len(ran)}

    methods = list(dict.fromkeys(c.get("method") for c in cases))
    return {**counts(cases), "per_method": {m: counts([c for c in cases if c.get("method") == m]) for m in methods}}


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
    if fast := fast_stats_block(records):
        out["fast_stats"] = fast
    if timing := timing_block(records):
        out["timing"] = timing
    if post := post_block(records, prov):
        out["post"] = post
    if meta.get("name") == "layout_boundary" and (layout := layout_block(records)):
        out["layout"] = layout
    if meta.get("name") == "dropin" and (dropin := dropin_block(records)):
        out["dropin"] = dropin
    audit = audit_block(path)
    if audit:
        out["audit"] = audit
    if reliability := reliability_block(records):
        out["reliability"] = reliability
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


def _sanitizer_errors(inv: dict, kernels: str) -> int:
    """Errors of one finished invocation over our product kernels: the tool's own count when it instrumented only
    our kernels (the kernel filter), else the errors its report attributes to a kernel matching `kernels`."""
    import re

    if inv.get("kernel_filter"):
        return int(inv["errors"])
    return sum(c["errors"] for k, c in inv.get("per_kernel", {}).items() if re.fullmatch(kernels, k))


def reliability_block(records: dict) -> dict | None:
    """Headline numbers of the reliability step (scripts/gpu/reliability.sh), keys as issue 15 item 8 names them.

    sanitizer: per tool, errors over our product kernels in the invocations labelled "product..." that finished
    (None when none finished); sanitizer_unattributed: per tool, errors whose report names no kernel the parser
    knows (not counted above; the logs say whose they are); racecheck_unexplained: those racecheck errors less the ones in chain_stats_tma
    when the racecheck evidence record marks them explained (a race-free minimal ring of the same protocol is
    reported the same way); fuzz_*: cases run, distinct shapes, (case, method) checks not bit-identical or
    raising; soak_*: calls after warm-up and growth of torch's allocated bytes over them."""
    san = records.get("sanitizer")
    fuzz, soak, evidence = records.get("fuzz"), records.get("soak"), records.get("racecheck_evidence", {})
    if not (san or fuzz or soak):
        return None
    block: dict = {"sanitizer": {}, "racecheck_unexplained": None}
    invocations = [i for i in (san or {}).get("invocations", []) if i["label"].startswith("product")]
    kernels = (san or {}).get("product_kernels", ".*")
    for tool in ("memcheck", "racecheck", "initcheck", "synccheck"):
        done = [i for i in invocations if i["tool"] == tool and i["finished"]]
        block["sanitizer"][tool] = sum(_sanitizer_errors(i, kernels) for i in done) if done else None
        # errors no report block names a kernel for (could be anyone's): shown, never silently dropped
        block.setdefault("sanitizer_unattributed", {})[tool] = sum(i.get("unattributed") or 0 for i in done
                                                                 if not i.get("kernel_filter")) if done else None
    race = block["sanitizer"]["racecheck"]
    if race is not None:
        explained = 0
        # chain_stats_tma's reports are forgiven only while the race-free ring of its current protocol (every lane
        # arrives: ring_all_arrive) is reported as well; ring_ok is the old protocol and says nothing about it now
        current = ((evidence.get("rings") or {}).get("ring_all_arrive") or {}).get("racecheck_errors") or 0
        if evidence.get("explained") and current > 0:
            explained = sum(i.get("per_kernel", {}).get("chain_stats_tma", {}).get("errors", 0)
                            for i in invocations if i["tool"] == "racecheck" and i["finished"])
        block["racecheck_unexplained"] = max(0, race - explained)
    cases = [c for c in (fuzz or {}).get("cases", []) if "skipped" not in c]
    checks = [m for c in cases for m in c["methods"].values()]
    block.update({"fuzz_cases": len(cases) if fuzz else None,
                  "fuzz_shapes": len({tuple(c["shape"]) for c in cases}) if fuzz else None,
                  "fuzz_mismatches": sum("error" in m or not all(m.values()) for m in checks) if fuzz else None,
                  "soak_calls": soak.get("calls") if soak else None,
                  "soak_mem_growth_bytes": soak.get("growth_bytes") if soak else None})
    return block


def timing_block(records: dict) -> dict | None:
    """Headline numbers of a `timing` record (notebook 03), read as recorded: per case ("<shape>/<affine>") and
    method, protocol A's median [q25, q75] ms and the bit-equal fraction vs native. A method that was not timed
    (unavailable, failed the official check) has null times and its status."""
    cases = records.get("timing", {}).get("cases")
    if not cases:
        return None
    out = {}
    for case in cases:
        stats = case.get("timing", {}).get("A", {}).get("stats", {})
        block = out.setdefault(case["key"], {})
        for name, row in case["methods"].items():
            s = stats.get(name, {})
            block[name] = {"median_ms": s.get("median_ms"), "q25_ms": s.get("q25_ms"), "q75_ms": s.get("q75_ms"),
                           "bit_equal_fraction": (row.get("check") or {}).get("bit_equal_fraction"),
                           "status": row.get("status")}
    return out


# ---------------------------------------------------------------------------------------------------------------
# The terminal view (`labkit summary` without --json)
# ---------------------------------------------------------------------------------------------------------------

def _bit_identity_line(b: dict) -> str:
    return f"bit identity: {b['identical']}/{b['cases']} cases bit-identical to torch"


def _fast_stats_line(f: dict) -> str:
    return (f"fast statistics: ordinary {f['ordinary_pass']}/{f['ordinary_cases']} pass, offset "
            f"{f['offset_fail']}/{f['offset_cases']} fail, constant control {f['constant_control_fail']}/"
            f"{f['constant_control_cases']} fail, {f['errors']} error(s) ({len(f.get('per_method', {}))} methods)")


def _timing_line(t: dict, shown: int = 3) -> str:
    """The first case (the book's headline shape): bit-identical methods and the others apart, fastest first."""
    case, methods = next(iter(t.items()))
    timed = sorted(((m, v) for m, v in methods.items() if v.get("median_ms") is not None),
                   key=lambda mv: mv[1]["median_ms"])
    untimed = [m for m, v in methods.items() if v.get("median_ms") is None]

    def listing(group: list) -> str:
        text = ", ".join(f"{m} {v['median_ms']:.4g}" for m, v in group[:shown])
        return text + (f", +{len(group) - shown} more" if len(group) > shown else "")

    exact = [mv for mv in timed if mv[1].get("bit_equal_fraction") == 1.0]
    other = [mv for mv in timed if mv[1].get("bit_equal_fraction") != 1.0]
    parts = [f"bit-identical {listing(exact)}" if exact else "", f"others {listing(other)}" if other else "",
             f"not timed {', '.join(untimed)}" if untimed else ""]
    return (f"timing {case} ({len(t)} case(s)), median ms: " + "; ".join(p for p in parts if p))


def _audit_line(a: dict) -> str:
    margin = "-" if a["min_margin"] is None else f"{a['min_margin']:.4g}"
    return f"audit: {a['records']} check record(s), {a['flips']} flip(s), min margin {margin}"


def _reliability_line(r: dict) -> str:
    san = ", ".join(f"{k} {v}" for k, v in r["sanitizer"].items())
    other = sum(v or 0 for v in (r.get("sanitizer_unattributed") or {}).values())
    san += f" (+{other} unattributed, see the logs)" if other else ""
    return (f"reliability: sanitizer errors over our kernels {san}; racecheck unexplained {r['racecheck_unexplained']}; "
            f"fuzz {r['fuzz_cases']} cases, {r['fuzz_shapes']} shapes, {r['fuzz_mismatches']} mismatch(es); soak "
            f"{r['soak_calls']} calls, {r['soak_mem_growth_bytes']} bytes growth")


def _layout_line(layout: dict) -> str:
    fmt = lambda v: "n/a" if v is None else f"{v:.3g}"  # noqa: E731
    parts = [f"{fam} direct {fmt(b['direct_nchw_ms'])} / rows {fmt(b['rows_ms'])} / conversion "
             f"{fmt(b['conversion_ms'])} ms, {b['passed']}/{b['cases']} pass" for fam, b in layout.items()]
    return "layout: " + "; ".join(parts)


def _dropin_line(d: dict) -> str:
    fmt = lambda v, f: "n/a" if v is None else format(v, f)  # noqa: E731
    return (f"drop-in: eager worst {fmt(d['eager_worst_ratio'], '.2f')}x native at {d['eager_worst_shape']}, L1/40 "
            f"{fmt(d['l1_40_eager_ratio'], '.1f')}x; host {fmt(d['host_us_per_call'], '.1f')} us/call vs torch "
            f"{fmt(d['torch_host_us_per_call'], '.1f')}; bits forward {d['forward_identical']}, backward "
            f"{d['backward_identical']}, compiled {d['compiled_identical']}")


def _run_lines(run: dict) -> list[str]:
    lines = [f"{run['name']}  {run['run_id']}" + ("" if run.get("complete") else "  (INCOMPLETE)"),
             f"  {run.get('gpu') or 'no GPU'} · torch {run.get('torch')} · {run.get('date_utc')}"]
    for key, line in (("bit_identity", _bit_identity_line), ("fast_stats", _fast_stats_line),
                      ("timing", _timing_line), ("layout", _layout_line), ("dropin", _dropin_line),
                      ("audit", _audit_line), ("reliability", _reliability_line)):
        if run.get(key):
            lines.append("  " + line(run[key]))
    return lines


def summary_text(summary: dict) -> str:
    """A few lines per run: name and run id, GPU, torch and date, then one line per headline block; for several
    runs, a last line with the audit over all of them."""
    runs = summary.get("runs", [summary])
    blocks = ["\n".join(_run_lines(r)) for r in runs]
    if "runs" in summary and summary.get("audit"):
        blocks.append(f"all {len(runs)} runs: " + _audit_line(summary["audit"]))
    return "\n\n".join(blocks)


def post_block(records: dict, prov: dict | None = None) -> dict | None:
    """{"figures": post figures in scope, "compared": how many the run sets beside its own} for a run whose records
    reproduce post figures (bit identity 01, fast statistics 02, timing 03/07); None otherwise."""
    from labkit.records import post_compare

    rows = []
    if records.get("bit_identity") and (records.get("uneven_width") or records.get("edge_controls")):  # 01's run
        rows += post_compare.bit_identity_rows(records["bit_identity"], records.get("uneven_width"),
                                               records.get("edge_controls"), prov)
    if records.get("fast_stats"):
        rows += post_compare.fast_stats_rows(records["fast_stats"], prov)
    if records.get("timing"):
        methods = [m["name"] for m in records["timing"].get("methods", [])]
        rows += post_compare.timing_rows(records["timing"], prov, methods)
    return post_compare.block(rows) if rows else None


LAYOUT_ROUTES = ("direct_nchw", "rows", "conversion")  # labkit.studies.layout_boundary.ROUTES
LAYOUT_ORDINARY = ("uniform", "normal", "offset", "tiny", "mixed_sign")  # its ordinary distributions


def layout_block(records: dict) -> dict | None:
    """Issue 12's `layout` block of a layout_boundary run (notebook 09): {family: {direct_nchw_ms, rows_ms,
    conversion_ms, cases, passed}}: protocol A medians at the evaluation shape; cases/passed count the (ordinary
    case, route) checks under the official predicate."""
    timing, correctness = records.get("timing") or {}, records.get("correctness") or {}
    if "families" not in timing and "cases" not in correctness:
        return None
    ordinary = [c for c in correctness.get("cases", []) if c.get("distribution") in LAYOUT_ORDINARY]
    fams = {f["family"]: f for f in timing.get("families", [])}
    out = {}
    for family in sorted({c["family"] for c in ordinary} | set(fams)):
        stats = fams.get(family, {}).get("timing", {}).get("A", {}).get("stats", {})
        checks = [ch for c in ordinary if c["family"] == family for r, ch in c["routes"].items()
                  if r in LAYOUT_ROUTES]
        out[family] = {f"{r}_ms": stats.get(r, {}).get("median_ms") for r in LAYOUT_ROUTES}
        out[family] |= {"cases": len(checks), "passed": sum(bool(ch["official_pass"]) for ch in checks)}
    return out


DROPIN_NATIVE_FLOOR_MS = 0.020  # issue 16: shapes whose native eager call takes >= 20 us must be >= 1.0x


def _count(cases: list, key: str) -> str:
    judged = [c[key] for c in cases if c.get(key) is not None]
    return f"{sum(bool(v) for v in judged)}/{len(judged)}"


def floor_worst(floor: dict | None, protocol: str = "eager") -> tuple[float | None, str | None]:
    """(worst drop-in / floor ratio, its shape) under `protocol` ("eager" or "graph") in a `dropin_floor` record
    (labkit.studies.dropin.floor_check); (None, None) without one."""
    worst = None, None
    for r in (floor or {}).get("shapes", []):
        ratio = r[protocol]["median_ms"] / r["floor_ms"]
        if worst[0] is None or ratio > worst[0]:
            worst = ratio, r["key"]
    return worst


def dropin_block(records: dict) -> dict | None:
    """Issue 16's headline keys from a `dropin` run (notebook 08): eager per-call ratios native/drop-in (worst over
    shapes whose native call takes >= 20 us; the largest gap in us below that), L1/40's ratio, host time per call
    beside torch's, bit-identity counts, and the worst drop-in / floor ratio at 1-4 rows of 4M-8M elements
    (`dropin_floor`; eager and graph replay). None without a `dropin_sweep` record."""
    sweep = records.get("dropin_sweep")
    if not sweep:
        return None
    worst, worst_shape, gap, l1 = None, None, None, None
    for row in sweep.get("shapes", []):
        eager = row.get("eager") or {}
        native, ours = eager.get("native"), eager.get("dropin")
        if native is None or ours is None:
            continue
        ratio = native / ours
        if native >= DROPIN_NATIVE_FLOOR_MS:
            if worst is None or ratio < worst:
                worst, worst_shape = ratio, row["key"]
        else:
            g = (ours - native) * 1e3
            gap = g if gap is None else max(gap, g)
        if row.get("l1_40"):
            l1 = ratio
    host = records.get("dropin_host") or {}
    ident = records.get("dropin_identity") or {}
    cases, compiled = ident.get("cases", []), ident.get("compiled", [])
    return {"eager_worst_ratio": worst, "eager_worst_shape": worst_shape, "small_shape_gap_us": gap,
            "l1_40_eager_ratio": l1, "host_us_per_call": host.get("dropin_us"),
            "torch_host_us_per_call": host.get("torch_us"), "forward_identical": _count(cases, "forward"),
            "backward_identical": _count(cases, "backward"),
            "compiled_identical": _count(compiled, "identical"),
            "floor_eager_worst_ratio": floor_worst(records.get("dropin_floor"), "eager")[0],
            "floor_graph_worst_ratio": floor_worst(records.get("dropin_floor"), "graph")[0]}
