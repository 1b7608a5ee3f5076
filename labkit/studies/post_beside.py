"""The post beside the book, claim by claim, for the front page: one declarative entry per claim of the post
(CLAIMS), each naming where the post's figure comes from (labkit.records.post, data/post/figures.json, read from the
post's text), which committed run record gives the book's, and how the verdict is decided. Nothing here types a
measured number or a verdict: `rows` computes both from the post's figures and the runs' records.

Verdicts: "holds" (the book's record says what the post said), "reversed" (it says the opposite), "not comparable"
(no run measures it, or the two count different things); each with why in a few words.
"""
from __future__ import annotations

from pathlib import Path

from labkit.records import post
from labkit.records.run import load_run
from labkit.studies.bench import PROTOCOL_NAMES
from labkit.studies.timing import paired
from labkit.tasks import EXTRA_SHAPES, L1_40, shape_key

GRAPH, EAGER = PROTOCOL_NAMES["A"], PROTOCOL_NAMES["B"]
L1 = shape_key(L1_40)
# the run names a claim reads (labkit.records.session.newest_complete_run finds each)
RUN_NAMES = ("bit_identity", "timing", "fast_stats_counterexamples", "layout_boundary", "parallel_stats",
             "fused_consumer")


def _recs(runs: dict, name: str) -> dict:
    p = runs.get(name)
    return load_run(Path(p))["records"] if p else {}


def _case(runs, shape=L1_40, affine="random_normal"):
    """The timing run's case at `shape` with random affine parameters (a trained LayerNorm's are not 1 and 0; with
    them the affine step is exact and the native-split route would keep torch's bits by construction)."""
    key = f"{shape_key(shape)}/{affine}"
    return next((c for c in (_recs(runs, "timing").get("timing") or {}).get("cases", []) if c["key"] == key), None)


def _ms(case, method, protocol="A"):
    s = (((case or {}).get("timing") or {}).get(protocol) or {}).get("stats", {}).get(method) or {}
    return s.get("median_ms")


def _x(a, b):
    return a / b if a and b else None


def _side(v):
    return None if v is None else v > 1


def _p(fid):
    return post.figure(fid)["value"]


def _ptok(fid):
    return post.figure(fid)["source"]["token"]


def _speedup(runs, method, fid, post_method_word="", shape=L1_40):
    """A post speedup vs torch (graph replay) beside the timing run's paired ratio under graph replay."""
    case = _case(runs, shape)
    ours = paired(case, "A", "native", method)
    pv = _p(fid)
    pv = pv[0] if isinstance(pv, list) else pv
    if ours is None:
        return None, "not comparable", "not in the timing run"
    same = _side(ours) == _side(pv)
    return ours, "holds" if same else "reversed", (
        f"{'faster' if ours > 1 else 'slower'} than torch on both GPUs" if same else
        f"post {'faster' if pv > 1 else 'slower'}, here {'faster' if ours > 1 else 'slower'}")


# --- one function per claim: (the book's figure as text, verdict, why) ---------------------------------------------

def _bit_identity(runs):
    from labkit.studies import bit_identity

    block = bit_identity.identity_block(_recs(runs, "bit_identity"), {}) if runs.get("bit_identity") else None
    if not block:
        return None, "not comparable", "no bit-identity run"
    ok = block["identical"] == block["cases"] and block["cases"] >= _p("bit_identity.cases")
    return (f"{block['identical']}/{block['cases']} cases", "holds" if ok else "reversed",
            "every case torch's bits, on an H200 and a newer torch" if ok else "some cases differ")


def _graph_table(runs):
    ours, v, why = _speedup(runs, "reference_order", "ratio.reference_order.vs_native.16x64x256x256")
    return (None if ours is None else f"{ours:.3g}x torch eager, {GRAPH}"), v, why


def _native_split(runs):
    case = _case(runs)
    fid = "timing.noaffine_torchscript_affine.16x64x256x256.ratio"
    route = "noaffine_traced_affine" if _ms(case, "noaffine_traced_affine") else "noaffine_torchscript_affine"
    ours = paired(case, "A", "native", route)
    if ours is None:
        return None, "not comparable", "not in the timing run"
    bits = ((case["methods"].get(route) or {}).get("check") or {}).get("bit_equal_fraction")
    slower = ours < 1
    return (f"{ours:.3g}x torch eager, {GRAPH}" + (f"; {bits:.1%} of elements torch's bits" if bits is not None
                                                   else ""),
            "holds" if slower == (_p(fid) < 1) else "reversed",
            ("no faster than torch" if slower else "faster than torch here") + (", not torch's bits" if bits is not None
                                                                                and bits < 1 else ""))


def _fast_timing(runs):
    case = _case(runs)
    route = "post_split_interleaved" if _ms(case, "post_split_interleaved") else "split_interleaved"
    ours, v, why = _speedup(runs, route, "ratio.fast_stats.vs_native.16x64x256x256")
    if ours is None:
        return None, v, why
    chain = paired(case, "A", "native", "chain")
    return (f"{ours:.3g}x torch eager, the post's kernel, {GRAPH}", v,
            why + (f"; the bit-identical chain kernel reaches {chain:.3g}x" if chain else ""))


def _counterexamples(runs):
    from labkit.records import post_compare

    rec = _recs(runs, "fast_stats_counterexamples")
    rows = {r["id"]: r for r in post_compare.fast_stats_rows(rec.get("fast_stats"))}
    failed = (rows.get("fast_stats.offset_cases_failed") or {}).get("ours")
    if failed is None:
        return None, "not comparable", "no fast-statistics run"
    ok = failed == _p("fast_stats.offset_cases_failed")
    return (f"{failed} offset cases fail the official check", "holds" if ok else "reversed",
            "the same offset cases fail KernelBench's check" if ok else "a different count fails")


def _oracle(runs):
    from labkit.studies import fast_stats

    table = fast_stats.oracle_table(_recs(runs, "fast_stats_counterexamples").get("oracle"))
    const = [r for r in table if r["case"].startswith("constant_1e4")]
    native = next((r for r in const if r["candidate"].startswith("native")), None)
    fast = [r for r in const if not r["candidate"].startswith("native")]
    if not native or not fast:
        return None, "not comparable", "no oracle record"
    worst_fast = max(r["rstd max |ulp|"] for r in fast)
    torch_wrong = native["rstd max |ulp|"] > worst_fast
    return (f"torch's rstd {native['rstd max |ulp|']:,} ulp from exact; the fast statistics' {worst_fast} ulp",
            "reversed" if torch_wrong else "holds",
            "the post's error is torch's: its own statistics are the far ones" if torch_wrong
            else "the fast statistics are the far ones")


def _extra_shapes(runs):
    out, flips = [], []
    for shape in EXTRA_SHAPES:
        k = shape_key(shape)
        ours, v, _ = _speedup(runs, "reference_order", f"timing.reference_order.{k}.ratio", shape=shape)
        if ours is None:
            continue
        out.append(f"{k} {ours:.3g}x")
        if v == "reversed":
            flips.append(k)
    if not out:
        return None, "not comparable", "not in the timing run"
    return ("; ".join(out) + f", {GRAPH}", "reversed" if flips else "holds",
            f"faster and slower swap at {', '.join(flips)}" if flips else "same side of 1 at every shape")


def _layout(runs):
    from labkit.studies import layout_boundary

    fams = (_recs(runs, "layout_boundary").get("timing") or {}).get("families", [])
    ratios = [_x(m.get("conversion"), m.get("direct_nchw")) for m in map(layout_boundary.route_ms, fams)]
    ratios = [r for r in ratios if r]
    if not ratios:
        return None, "not comparable", "no layout run"
    lo, hi = (_p("layout.convert_roundtrip.time"), _p("layout.direct_nchw.time"))
    post_slower = min(lo) > max(hi)
    ok = all(r > 1 for r in ratios) == post_slower
    return (f"conversion {min(ratios):.3g}-{max(ratios):.3g}x the direct kernel's time, {GRAPH}",
            "holds" if ok else "reversed", "converting layouts costs more than it saves, on both GPUs" if ok
            else "the conversion route wins here")


def _protocol(runs):
    from labkit.records import audit

    s = audit.audit_runs().summary()
    return (f"{s['flips']} flips over {s['records']} check records of {s['runs']} runs",
            "holds" if s["flips"] == 0 else "reversed",
            "no saved verdict changes under the candidate-scaled check" if s["flips"] == 0
            else "some verdicts change")


def _next_parallel(runs):
    case = _case(runs)
    chain, ref = _ms(case, "chain"), _ms(case, "reference_order")
    bits = ((case or {}).get("methods", {}).get("chain") or {}).get("check", {}).get("bit_equal_fraction")
    if not chain or not ref:
        return None, "not comparable", "no chain kernel in the timing run"
    done = bits == 1 and chain < ref
    return (f"chain kernel {paired(case, 'A', 'reference_order', 'chain'):.3g}x the reference-order kernel, torch's "
            f"bits, {GRAPH}",
            "holds" if done else "reversed", "done: the statistics spread over the GPU, same arithmetic tree" if done
            else "not faster with the same bits")


def _next_fused(runs):
    from labkit.studies import fused

    recs = _recs(runs, fused.RUN_NAME)
    block = fused.fused_block(recs) if recs else None
    if not block or block.get("l1_40_fused_ms") is None:
        return None, "not comparable", "no run of this book measures a fused consumer"
    met = [g["met"] for g in fused.goals(recs.get("timing")) if g["met"] is not None]
    k, n = (int(v) for v in block["bits_identical"].split("/"))
    done = met and all(met) and n > 0 and k == n
    return (f"LayerNorm + GELU + scale in one pass at {block['l1_40_shape']}: {block['l1_40_fused_ms']:.3g} ms "
            f"against {block['l1_40_unfused_ms']:.3g} unfused, bits {block['bits_identical']}, {GRAPH}",
            "holds" if done else "reversed",
            f"done: {sum(met)} of {len(met)} timing goals met, the eager chain's bits" if done
            else f"{sum(met)} of {len(met)} timing goals met, bits {block['bits_identical']}")


# Each claim: what the post says, the post figure(s) it rests on (ids in data/post/figures.json, shown as the post
# wrote them), how the book answers (a function of the runs), the page that shows it.
CLAIMS = (
    {"claim": "bit identity: every full-size case matches output, mean and rstd bit for bit",
     "post": ("bit_identity.cases",), "book": _bit_identity, "page": "01_bit_identity"},
    {"claim": "graph-replay table: reference-order statistics + tiled output beat torch at L1/40",
     "post": ("ratio.reference_order.vs_native.16x64x256x256",), "book": _graph_table, "page": "03_timing"},
    {"claim": "native no-affine + compiled affine: slower than torch, generally not bit-identical",
     "post": ("timing.noaffine_torchscript_affine.16x64x256x256.ratio",), "book": _native_split, "page": "03_timing"},
    {"claim": "fast statistics: several times torch on ordinary inputs",
     "post": ("ratio.fast_stats.vs_native.16x64x256x256",), "book": _fast_timing, "page": "03_timing"},
    {"claim": "fast statistics fail KernelBench's check on the normal + 1000 controls",
     "post": ("fast_stats.offset_cases_failed",), "book": _counterexamples,
     "page": "02_fast_stats_counterexamples"},
    {"claim": "constant 1e4 control: the fast statistics' answer is far from torch's",
     "post": ("fast_stats.constant.max_error",), "book": _oracle, "page": "02_fast_stats_counterexamples"},
    {"claim": "extra shapes: faster at the two larger, a regression at the smallest",
     "post": tuple(f"timing.reference_order.{shape_key(s)}.ratio" for s in EXTRA_SHAPES), "book": _extra_shapes,
     "page": "03_timing"},
    {"claim": "layout follow-up: converting NCHW to rows and back costs more than the direct kernel",
     "post": ("layout.convert_roundtrip.time", "layout.direct_nchw.time"), "book": _layout,
     "page": "09_layout_boundary"},
    {"claim": "protocol correction: no saved finite verdict changes under the candidate-scaled check",
     "post": ("protocol.audit.result_files", "protocol.audit.error_ratios"), "book": _protocol, "page": "04_protocol_correction"},
    {"claim": "next step: parallel statistics without changing the arithmetic tree",
     "post": (), "book": _next_parallel, "page": "07_parallel_statistics"},
    {"claim": "next step: a fused consumer with avoided memory traffic counted end to end",
     "post": (), "book": _next_fused, "page": "11_fused_consumer"},
)


def post_text(ids) -> str:
    """The post's figures for a claim, as the post wrote them, with their unit."""
    parts = []
    for fid in ids:
        f = post.figure(fid)
        unit = {"x": "x", "ms": " ms", "count": "", "1": ""}.get(f["unit"], f" {f['unit']}")
        token = f["source"].get("token")
        if token is None or "/" in token:  # two medians (native/custom): their quotient, then the medians
            text = f"{f['value']:.3g}x" + (f" ({token} ms)" if token else "")
        else:
            text = token.replace("--", "\u2013") + unit + (f" {f['quantity']}" if f["unit"] == "count" else "")
            if f["unit"] == "ms" and len(ids) > 1:
                text = f"{fid.split('.')[1].replace('_', ' ')} {text}"
            elif f["unit"] == "1":
                text = f"{f['quantity']} {text}"
        parts.append((f"{'x'.join(map(str, f['shape']))}: " if len(ids) > 1 and f.get("shape") and
                      tuple(f["shape"]) != L1_40 else "") + text)
    return "; ".join(parts) if parts else "a next step (no figure)"


def runs_by_name(paths: dict | None = None) -> dict[str, Path]:
    """The run each claim reads: the build's own (`paths`) where it has one, else the newest complete committed run."""
    from labkit.records.session import newest_complete_run

    out = {}
    for name in RUN_NAMES:
        if paths and name in paths:
            out[name] = Path(paths[name])
        elif (run := newest_complete_run(name)) is not None:
            out[name] = Path(run["path"])
    return out


def rows(runs: dict) -> list[dict]:
    """One row per claim: the claim, the post's figure, the book's, the verdict and why, the page."""
    out = []
    for c in CLAIMS:
        book, verdict, why = c["book"](runs)
        out.append({"claim": c["claim"], "post": post_text(c["post"]), "book": book or "—", "verdict": verdict,
                    "why": why, "page": c["page"]})
    return out
