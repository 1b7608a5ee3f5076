"""The layout boundary (notebook 09): small-channel RMS / mean-abs / L2 normalization over dim 1, three routes.

Question: on NCHW input with 32-128 channels, does a channels-last row kernel pay off once the conversion to rows
and back is counted? The post (RTX 3090, torch 2.5.1) measured 0.675-0.679 ms for its row kernel on native rows,
6.74-6.89 ms for the conversion route, 0.67-0.69 ms for a direct NCHW kernel.

Run functions (GPU, in labkit.studies.layout_routes and layout_profile) return JSON-able records; the functions
here turn records into rows, a figure and a verdict, so live and replayed runs render alike, and hold the CPU
checks and the run's summary (labkit.studies.catalog dispatches here). Inputs are drawn on the device with a
seeded torch.Generator (a 256 MiB case is drawn in microseconds there, in seconds on the host); the seed and the
generator's device are recorded.
"""
from __future__ import annotations

from labkit import tasks
from labkit.records.check import KERNELBENCH_PREDICATE, official_allclose
from labkit.studies import bench, timing as timing_study
from labkit.studies.layout_profile import op_profile_line
from labkit.studies.layout_routes import BASELINE, CONTROLS, DIAGNOSTIC, ORDINARY, ROUTES


# --- CPU-possible parts -------------------------------------------------------------------------------------------

def kernel_builds(arch: str = "sm_90") -> list[dict]:
    """Both kernel files compiled with NVRTC for `arch` (no GPU needed): what a GPU run would load."""
    from labkit.core.compile import compile_kernel

    rows = []
    for k in ("channel_norm_nchw", "channel_norm_rows"):
        r = compile_kernel(k, arch).record
        rows.append({"kernel": k, "arch": r.arch, "nvrtc": ".".join(map(str, r.nvrtc_version)),
                     "options": " ".join(r.options), "cubin sha256": r.cubin_sha256[:16], "cache hit": r.cache_hit})
    return rows


def plan_rows(channels=tasks.LAYOUT_CHANNELS, shapes=((4, 512, 512), (112, 512, 512), (3, 17, 19))) -> list[dict]:
    """torch's reduction plan for each channel count and (N, H, W): the tree the direct kernel reproduces."""
    from labkit.lab import channel_norm as cn

    out = []
    for n, h, w in shapes:
        for c in channels:
            p = cn.reduction_plan(int(c), n, h * w)
            out.append({"shape": f"({n}, {c}, {h}, {w})", "output vec": p["output_vec"], "block": tuple(p["block"]),
                        "warps per output": p["split"], "values per thread": p["values_per_thread"]})
    return out


def reference_rows(seed: int = 0, shape=(2, 64, 5, 6)) -> list[dict]:
    """On the CPU: each task's eager reference against its formula in float64 (the official predicate), and the
    tree emulator against a float64 sum."""
    import numpy as np
    import torch

    from labkit.lab import channel_norm as cn

    x = torch.randn(shape, generator=torch.Generator().manual_seed(seed))
    xd = x.double()
    formulas = {"rms": xd / torch.sqrt((xd * xd).mean(1, keepdim=True) + cn.EPS),
                "mean_abs": xd / xd.abs().mean(1, keepdim=True),
                "l2": xd / torch.sqrt((xd * xd).sum(1, keepdim=True))}
    rows = []
    for family in cn.FAMILIES:
        ref = cn.reference(family, x)
        rows.append({"check": f"{tasks.LAYOUT_TASKS[family].key} eager reference vs float64 formula",
                     "official pass": official_allclose(formulas[family].float(), ref),
                     "max abs diff": float((formulas[family] - ref.double()).abs().max())})
    col = x[0, :, 0, 0].numpy()
    for split in (1, 4):
        s = cn.tree_sum(col, split, "square")
        exact = float(np.sum(col.astype(np.float64) ** 2))
        rows.append({"check": f"tree sum of squares (split {split}) vs float64", "official pass":
                     bool(abs(float(s) - exact) <= 1e-4 + 1e-4 * abs(float(s))), "max abs diff": abs(float(s) - exact)})
    return rows


# --- rows from records --------------------------------------------------------------------------------------------

def _ordinary(record):
    return [c for c in (record or {}).get("cases", []) if c["distribution"] in ORDINARY]


def _controls(record):
    return [c for c in (record or {}).get("cases", []) if c["distribution"] in CONTROLS]


def correctness_rows(record: dict | None) -> list[dict]:
    """Per family and route: ordinary cases passing the official predicate, bit-identical cases, the lowest
    bit-equal fraction and the largest ulp distance against eager."""
    out = {}
    for c in _ordinary(record):
        for route, ch in c["routes"].items():
            r = out.setdefault((c["family"], route), {"family": c["family"], "kernel": route, "cases": 0,
                                                      "official pass": 0, "bit-identical": 0,
                                                      "min bit-equal fraction": 1.0, "max ulp": 0})
            r["cases"] += 1
            r["official pass"] += bool(ch["official_pass"])
            r["bit-identical"] += ch["bit_equal_fraction"] == 1.0
            r["min bit-equal fraction"] = min(r["min bit-equal fraction"], ch["bit_equal_fraction"])
            r["max ulp"] = max(r["max ulp"], ch["max_ulp"] or 0)
    return list(out.values())


def channel_rows(record: dict | None, route: str = "direct_nchw") -> list[dict]:
    """One route's bit identity per family and channel count (the stretch goal's table)."""
    out = {}
    for c in _ordinary(record):
        ch = c["routes"].get(route)
        if ch is None:
            continue
        r = out.setdefault((c["family"], c["channels"]), {"family": c["family"], "channels": c["channels"],
                                                          "cases": 0, "bit-identical": 0, "max ulp": 0})
        r["cases"] += 1
        r["bit-identical"] += ch["bit_equal_fraction"] == 1.0
        r["max ulp"] = max(r["max ulp"], ch["max_ulp"] or 0)
    return list(out.values())


def control_rows(record: dict | None) -> list[dict]:
    """Controls, apart: per case and kernel the official verdict, the equal-NaN convention and the bit-equal
    fraction."""
    return [{"family": c["family"], "channels": c["channels"], "seed": c["seed"], "control": c["distribution"],
             "kernel": route, "official pass": ch["official_pass"], "equal-NaN pass (not official)":
             ch["equal_nan_pass"], "bit-equal fraction": ch["bit_equal_fraction"], "max ulp": ch["max_ulp"]}
            for c in _controls(record) for route, ch in c["routes"].items()]


def timing_rows(record: dict | None, protocol: str = "A") -> list[dict]:
    """Per family and method: median [q25, q75] ms, paired ratio vs eager, GB/s and % of the copy ceiling, and
    the check on the timing input; untimed methods with their reason."""
    if not record:
        return []
    ceil = record.get("copy_ceiling", {}).get(protocol, {}).get("median_gbps")
    out = []
    for fam in record["families"]:
        if "skipped" in fam:
            out.append({"family": fam["family"], "method": "(all)", "status": fam["skipped"]})
            continue
        t = fam["timing"].get(protocol, {})
        for name, row in fam["methods"].items():
            s, r = t.get("stats", {}).get(name), t.get("ratio_vs_baseline", {}).get(name)
            ck = row.get("check") or {}
            base = {"family": fam["family"], "shape": "x".join(map(str, fam["shape"])), "method": name}
            if s is None:
                out.append({**base, "status": row["status"], "why": row.get("error") or
                            row.get("excluded", {}).get(protocol) or fam["timing_errors"].get(protocol) or
                            ("fails the official check" if ck and not ck.get("official_pass") else "")})
                continue
            gb = fam["bytes"] / (s["median_ms"] * 1e-3) / 1e9
            out.append({**base, "median ms": round(s["median_ms"], 4),
                        "[q25, q75] ms": f"[{s['q25_ms']:#.3g}, {s['q75_ms']:#.3g}]",
                        "eager / method": f"{r['median']:.3g} [{r['q25']:.3g}, {r['q75']:.3g}]",
                        "GB/s": round(gb, 1), "% copy ceiling": round(100 * gb / ceil, 1) if ceil else None,
                        "bytes": fam["bytes"], "bit-equal fraction": ck.get("bit_equal_fraction"), "n": s["n"]})
    return out


def ceiling_rows(record: dict | None) -> list[dict]:
    return timing_study.ceiling_rows(record)


def route_ms(fam: dict, protocol: str = "A") -> dict:
    """{route: median ms} of one family's timing (absent routes omitted)."""
    stats = fam.get("timing", {}).get(protocol, {}).get("stats", {})
    return {r: stats[r]["median_ms"] for r in (*ROUTES, BASELINE) if r in stats}


def route_figure(record: dict | None, protocol: str = "A", label: str = ""):
    """Bars: the three routes and eager per family, median ms with q25-q75 whiskers, GB/s over each bar."""
    import matplotlib.pyplot as plt

    fams = [f for f in (record or {}).get("families", []) if f.get("timing", {}).get(protocol)]
    if not fams:
        return None
    names = (*ROUTES, BASELINE)
    fig, ax = plt.subplots(figsize=(10, 4.2))
    width = 0.8 / len(names)
    for j, name in enumerate(names):
        xs, med, lo, hi, gbs = [], [], [], [], []
        for i, fam in enumerate(fams):
            s = fam["timing"][protocol]["stats"].get(name)
            if s:
                xs.append(i + (j - (len(names) - 1) / 2) * width)
                med.append(s["median_ms"])
                lo.append(s["median_ms"] - s["q25_ms"])
                hi.append(s["q75_ms"] - s["median_ms"])
                gbs.append(fam["bytes"] / (s["median_ms"] * 1e-3) / 1e9)
        bars = ax.bar(xs, med, width, yerr=[lo, hi], capsize=2, label=name)
        for b, g in zip(bars, gbs):
            ax.annotate(f"{g:.0f}", (b.get_x() + b.get_width() / 2, b.get_height()), ha="center", va="bottom",
                        fontsize=7)
    ax.set_xticks(range(len(fams)), [f"{f['family']} ({f['task']})" for f in fams])
    ax.set_ylabel("median ms per call")
    shape = "x".join(map(str, fams[0]["shape"]))
    ax.set_title(f"Routes per family at {shape}, protocol {protocol}; numbers over bars: GB/s at "
                 f"8*numel bytes {label}".strip(), fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    return fig


def post_rows(record: dict | None, correctness_record: dict | None = None, here: str | None = None) -> list[dict]:
    """The post's layout figures beside this run's (per family: the post does not say which family it timed)."""
    from labkit.records import post

    pairs = []
    for fam in (record or {}).get("families", []):
        ms = route_ms(fam)
        note = (f"{fam['family']} at {'x'.join(map(str, fam['shape']))}, {bench.PROTOCOL_NAMES['A']}; the post names "
                f"neither the family nor the shape it timed, so the ratio compares two GPUs at perhaps different "
                f"inputs")
        pairs += [("layout.direct_nchw.time", ms.get("direct_nchw"), note, f"direct NCHW, {fam['family']}"),
                  ("layout.rows_kernel.time", ms.get("rows"), note, f"rows on channels-last, {fam['family']}"),
                  ("layout.convert_roundtrip.time", ms.get("conversion"), note, f"conversion route, {fam['family']}")]
    if not pairs:
        pairs = [(fid, None, "no timing record") for fid in
                 ("layout.direct_nchw.time", "layout.rows_kernel.time", "layout.convert_roundtrip.time")]
    ordinary = _ordinary(correctness_record)
    passed = sum(all(ch["official_pass"] for r, ch in c["routes"].items() if r in ROUTES) for c in ordinary)
    pairs.append(("layout.cases", passed if ordinary else None,
                  f"here: ordinary cases where all three routes pass, of {len(ordinary)} in this book's grid; the "
                  f"post's cases across 32/64/128 channels are not listed, so the two counts are of different cases"))
    return post.compare_rows(pairs, here=here)


# --- verdict ------------------------------------------------------------------------------------------------------

def _stretch_line(correctness_record) -> str:
    rows = channel_rows(correctness_record)
    if not rows:
        return "Bit identity of the direct NCHW kernels: not measured."
    ident = sum(r["bit-identical"] for r in rows)
    n = sum(r["cases"] for r in rows)
    worst = max(r["max ulp"] for r in rows)
    diag = [ch for c in _ordinary(correctness_record) for r, ch in c["routes"].items() if r == DIAGNOSTIC]
    l2 = ""
    if diag:
        l2 = (f" L2 with rounded squares (no FMA) is bit-identical in {sum(d['bit_equal_fraction'] == 1.0 for d in diag)}"
              f"/{len(diag)} cases, which says whether eager's NormTwoOps contracts acc + x*x.")
    return (f"Stretch — direct NCHW kernels bit-identical to eager (int32 views) in {ident}/{n} ordinary cases "
            f"(max {worst} ulp): {'reached' if ident == n else 'not reached'}.{l2}")


def verdict_lines(timing_record: dict | None, correctness_record: dict | None, provenance: dict | None,
                  source: str, defaults_record: dict | None = None, controls_record: dict | None = None,
                  profile_record: dict | None = None) -> list[str]:
    """Sentences whose numbers all come from the records."""
    if not timing_record and not correctness_record:
        return [f"No layout-boundary run ({source}): nothing here was measured on a GPU, so no speed or "
                "correctness claim about the kernels is made. The CPU checks above cover the references and the "
                "reduction tree only."]
    prov = provenance or {}
    lines = [f"{source}: {prov.get('gpu')}, torch {prov.get('torch')} (the post: RTX 3090, torch 2.5.1)."]
    for r in correctness_rows(correctness_record):
        lines.append(f"- {r['family']} / {r['kernel']}: {r['official pass']}/{r['cases']} ordinary cases pass "
                     f"{KERNELBENCH_PREDICATE}; {r['bit-identical']} bit-identical; max {r['max ulp']} ulp.")
    controls = _controls(correctness_record) + _controls(controls_record)
    if controls:
        fails = sum(not ch["official_pass"] for c in controls for ch in c["routes"].values())
        lines.append(f"Controls (reported apart): {fails} of {sum(len(c['routes']) for c in controls)} control "
                     "checks fail the official predicate (NaN never equals NaN there); see the control table.")
    lines.append(_stretch_line(correctness_record))
    for fam in (timing_record or {}).get("families", []):
        ms = route_ms(fam)
        if {"direct_nchw", "conversion"} <= set(ms):
            rows_part = f", rows on native channels-last {ms['rows']:.4g} ms" if "rows" in ms else ""
            lines.append(f"{fam['family']} at {'x'.join(map(str, fam['shape']))} (protocol A): direct NCHW "
                         f"{ms['direct_nchw']:.4g} ms{rows_part}, conversion route {ms['conversion']:.4g} ms "
                         f"({ms['conversion'] / ms['direct_nchw']:.2g}x the direct kernel), eager "
                         f"{ms.get('eager', float('nan')):.4g} ms.")
    conv = [route_ms(f) for f in (timing_record or {}).get("families", [])]
    conv = [m for m in conv if {"direct_nchw", "conversion"} <= set(m)]
    if conv:
        worse = all(m["conversion"] > m["direct_nchw"] for m in conv)
        lines.append("Boundary: " + ("in every family the conversion route is slower than the direct NCHW kernel, "
                                     "as in the post: a native-layout gain does not pay for converting per call."
                                     if worse else "the conversion route is not slower in every family here; "
                                     "the post's boundary does not reproduce as stated on this machine."))
    for fam in (defaults_record or {}).get("families", []):
        if "skipped" in fam:
            lines.append(f"Default shape {fam['task']} {tuple(fam['shape'])}: skipped ({fam['skipped']}).")
            continue
        ms = {k: v["median_ms"] for k, v in fam["timing"].get("A", {}).get("stats", {}).items()}
        lines.append(f"Default shape {fam['task']} {tuple(fam['shape'])}, {fam['timing'].get('A', {}).get('protocol', {}).get('rounds')} "
                     "rounds: " + ", ".join(f"{k} {v:.4g} ms" for k, v in ms.items()) + ".")
    if profile_record:
        lines.append(op_profile_line(profile_record))
    lines.append("Not supported: other GPUs or torch builds (the bit identity follows one torch's Reduce.cuh "
                 "configuration), shapes whose plan the kernels refuse, training/backward.")
    return lines


def plain_verdict(timing_record: dict | None, correctness_record: dict | None) -> list[str]:
    """The page's short verdict: a few plain sentences, the answer first, every number from the records, each ratio
    with its protocol and its baseline (eager torch, paired median, or the direct kernel's median)."""
    from labkit.records.text import ratio

    if not timing_record and not correctness_record:
        return ["No layout-boundary run, so this page makes no speed or correctness claim about the kernels."]
    out = []
    graph = bench.PROTOCOL_NAMES["A"]
    fams = [f for f in (timing_record or {}).get("families", []) if "skipped" not in f]
    ms = [route_ms(f) for f in fams]
    ms = [m for m in ms if set(ROUTES) <= set(m)]
    if ms:
        fastest = {min(ROUTES, key=m.get) for m in ms}
        conv = [m["conversion"] / m["direct_nchw"] for m in ms]
        span = ratio(min(conv)) if ratio(min(conv)) == ratio(max(conv)) else f"{ratio(min(conv))} to {ratio(max(conv))}"
        names = {"rows": "the rows kernel on native channels-last", "direct_nchw": "the direct NCHW kernel",
                 "conversion": "converting to rows and back"}
        out.append((f"Of our three routes, {names[fastest.pop()]} is the fastest in every family" if len(fastest) == 1
                    else "No one route of ours is the fastest in every family")
                   + f" under {graph}, and converting to rows and back per call "
                   + ("costs the most" if min(conv) > 1 else "is not always the slowest")
                   + f": {span} the direct NCHW kernel's time.")
    rows = correctness_rows(correctness_record)
    if rows:
        per = {k: [r for r in rows if r["kernel"] == k] for k in ROUTES}
        ident = {k: (sum(r["bit-identical"] for r in v), sum(r["cases"] for r in v)) for k, v in per.items()}
        passed = sum(r["official pass"] for v in per.values() for r in v)
        n = sum(r["cases"] for v in per.values() for r in v)
        out.append(f"The direct NCHW kernels give eager torch's bits in {ident['direct_nchw'][0]} of "
                   f"{ident['direct_nchw'][1]} ordinary cases, the rows kernel in {ident['rows'][0]} of "
                   f"{ident['rows'][1]}; {passed} of {n} route checks pass the official tolerance check.")
    for p in ("A", "B"):
        gains = [(f["family"], f["timing"][p]["ratio_vs_baseline"]["direct_nchw"]["median"]) for f in fams
                 if "direct_nchw" in f.get("timing", {}).get(p, {}).get("ratio_vs_baseline", {})]
        if gains:
            shape = "x".join(map(str, fams[0]["shape"]))
            lead = (f"Under {bench.PROTOCOL_NAMES[p]} at {shape} the direct NCHW kernel runs at " if p == "A" else
                    f"Under {bench.PROTOCOL_NAMES[p]} it runs at ")
            out.append(lead + ", ".join(f"{ratio(r)} ({fam})" for fam, r in gains) + " eager torch's speed (paired "
                       + ("median; above 1x is faster)." if p == "A" else "median)."))
    beaten = [p for p in ("A", "B") if fams and all(
        "compile" in (st := f["timing"].get(p, {}).get("stats", {})) and any(r in st for r in OUR_ROUTES)
        and st["compile"]["median_ms"] < min(st[r]["median_ms"] for r in OUR_ROUTES if r in st) for f in fams)]
    if beaten:
        bits = all((f["methods"].get("compile", {}).get("check") or {}).get("bit_equal_fraction", 1) < 1 for f in fams)
        out.append("Yet torch.compile" + (", which does not keep eager's bits," if bits else "")
                   + " is faster than every route of ours in every family under "
                   + " and ".join(bench.PROTOCOL_NAMES[p] for p in beaten) + ".")
    return out[:5]


# --- the run's summary and headline (labkit.studies.catalog dispatches here) -------------------------------------

RUN_NAME = "layout_boundary"
NOTEBOOK = "09_layout_boundary"


def layout_block(records: dict) -> dict | None:
    """The `layout` summary block of a layout_boundary run (notebook 09): {family: {direct_nchw_ms, rows_ms,
    conversion_ms, cases, passed}}: protocol A medians at the evaluation shape; cases/passed count the (ordinary
    case, route) checks under the official predicate."""
    timing, correctness = records.get("timing") or {}, records.get("correctness") or {}
    if "families" not in timing and "cases" not in correctness:
        return None
    ordinary = [c for c in correctness.get("cases", []) if c.get("distribution") in ORDINARY]
    fams = {f["family"]: f for f in timing.get("families", [])}
    out = {}
    for family in sorted({c["family"] for c in ordinary} | set(fams)):
        stats = fams.get(family, {}).get("timing", {}).get("A", {}).get("stats", {})
        checks = [ch for c in ordinary if c["family"] == family for r, ch in c["routes"].items()
                  if r in ROUTES]
        out[family] = {f"{r}_ms": stats.get(r, {}).get("median_ms") for r in ROUTES}
        out[family] |= {"cases": len(checks), "passed": sum(bool(ch["official_pass"]) for ch in checks)}
    return out


def layout_line(layout: dict) -> str:
    fmt = lambda v: "n/a" if v is None else f"{v:.3g}"  # noqa: E731
    parts = [f"{fam} direct {fmt(b['direct_nchw_ms'])} / rows {fmt(b['rows_ms'])} / conversion "
             f"{fmt(b['conversion_ms'])} ms, {b['passed']}/{b['cases']} pass" for fam, b in layout.items()]
    return "layout: " + "; ".join(parts)


def summary(records: dict, prov: dict) -> dict:
    block = layout_block(records)
    return {"layout": block} if block else {}


def summary_lines(s: dict) -> list[str]:
    return [layout_line(s["layout"])] if s.get("layout") else []


def page_headline(records: dict, summary: dict) -> str:
    from labkit.records.text import on_gpu

    layout = summary.get("layout") or {}
    parts = []
    for family, b in layout.items():
        if b.get("direct_nchw_ms") and b.get("conversion_ms"):
            parts.append(f"{family}: direct NCHW {b['direct_nchw_ms']:.3g} ms, conversion route "
                         f"{b['conversion_ms']:.3g} ms")
    cases = sum(b["cases"] for b in layout.values())
    passed = sum(b["passed"] for b in layout.values())
    timed = f"under {bench.PROTOCOL_NAMES['A']}: " if parts else ""
    checks = f"{passed}/{cases} route checks pass the official predicate"
    return timed + "; ".join(parts + [checks]) + f" {on_gpu(summary)}"


# --- where others win (the page says it beside our wins) ---------------------------------------------------------

OUR_ROUTES = ("direct_nchw", "rows")  # the routes this study writes (conversion pays two copies on top of rows)


def others_win(timing_record: dict | None) -> str:
    """Where torch.compile beats every route of ours, per family and protocol, beside what our bit-identical direct
    kernel gains over eager torch; numbers from the record's medians (ms) and paired ratios."""
    from labkit.studies.bench import PROTOCOL_NAMES

    if not timing_record:
        return "No timing record: nothing to say about who is faster."
    out = []
    for p in ("A", "B"):
        wins, ours_gain = [], []
        for fam in timing_record["families"]:
            t = fam.get("timing", {}).get(p, {})
            st, rt = t.get("stats", {}), t.get("ratio_vs_baseline", {})
            if "compile" not in st or not any(r in st for r in OUR_ROUTES):
                continue
            best = min((r for r in OUR_ROUTES if r in st), key=lambda r: st[r]["median_ms"])
            if st["compile"]["median_ms"] < st[best]["median_ms"]:
                wins.append(f"{fam['family']} {st['compile']['median_ms']:.3g} ms against {st[best]['median_ms']:.3g} "
                            f"ms for our fastest route ({best})")
            if "direct_nchw" in rt:
                ours_gain.append(f"{fam['family']} {rt['direct_nchw']['median']:.2f}x")
        if wins:
            shape = "x".join(map(str, timing_record["families"][0]["shape"]))
            out.append(f"Under {PROTOCOL_NAMES[p]} at {shape}, torch.compile beats every route of ours: "
                       + "; ".join(wins) + ".")
            if ours_gain:
                out.append(f"Our direct NCHW kernel, the route that keeps eager torch's bits, runs at "
                           f"{', '.join(ours_gain)} eager torch's speed (same protocol, paired median).")
    return " ".join(out) or "torch.compile beats no route of ours in this run."
