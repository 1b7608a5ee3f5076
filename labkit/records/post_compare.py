"""The post's figures beside this book's records (labkit.records.post), one function per notebook; in records
so that `labkit summary` can count them.

Every "ours" number and every note is computed from the record passed in; a figure whose counterpart the record
lacks gets ours=None and says so. A reversal (the post's ratio and ours on opposite sides of 1) is explained only by
what the same record measured: graph replay (protocol A) against eager per call, L2 flushed (protocol B), and the
method's
effective bandwidth as a fraction of the device-copy ceiling measured in the same run. The post measured no copy
ceiling on its RTX 3090, so the GPU-to-GPU part of a difference is stated as unmeasured, never estimated.
"""
from __future__ import annotations

from labkit.records import post
from labkit.records.text import PROTOCOL_NAMES
from labkit.tasks import EXTRA_SHAPES, L1_40, UNEVEN_SHAPE, shape_key

# What each notebook sets beside the post (the figures "in scope" for its `post` summary block).
LAUNCH_BOUND_BELOW = 0.25  # fraction of the copy ceiling under which a time is not called bandwidth-bound
NOT_IN_RUN = "not in this run"
FULL = shape_key(L1_40)

# timing method names here -> post method names in figure ids
_TIMING = {"native_torchscript": "native_torchscript", "reference_order": "reference_order",
           "split_eager": "split_eager", "split_torchscript": "split_torchscript", "split_flat": "fast_stats_flat",
           "split_interleaved": "fast_stats_interleaved"}


# figure ids whose method word is not a method name: the post's fast-statistics ratios are its interleaved kernel's
_ID_METHOD = {"fast_stats": "fast_stats_interleaved"}

# Where the book runs the post's own route beside its own, the post's figure is set beside the post's route: its
# fast-statistics kernel as it compiled and launched it (kernels/post_affine.cu, --fmad=false, scalars) and its
# frozen trace; a record from before those methods existed falls back to the book's versions, and the note says so.
_POST_ROUTES = {"split_interleaved": "post_split_interleaved", "native_torchscript": "native_torchscript_traced",
                "split_torchscript": "split_traced", "noaffine_torchscript_affine": "noaffine_traced_affine",
                "interleaved": "post_interleaved"}
_TRACE = "the post's route, torch.jit.freeze(torch.jit.trace(...))"
_KERNEL = "the post's own kernel and flags (post_affine.cu, --fmad=false)"
_ROUTE_NOTE = {"post_split_interleaved": _KERNEL, "post_interleaved": _KERNEL, "native_torchscript_traced": _TRACE,
               "split_traced": _TRACE, "noaffine_traced_affine": _TRACE}


def _route(case, method: str) -> str:
    """The post's own route for `method` where this case timed it, else `method` (the book's route)."""
    post_route = _POST_ROUTES.get(method)
    return post_route if post_route and _ratio(case, "A", post_route) is not None else method


def _with_route(note: str, method: str, route: str) -> str:
    if route != method:
        return "; ".join(x for x in (f"here: {_ROUTE_NOTE[route]}", note) if x)
    if method in _POST_ROUTES:
        return "; ".join(x for x in (f"here: the book's {method} (the post's own route not in this run)", note) if x)
    return note


def _routed_ratio(case, fid: str, method: str, label: str, l2_bytes) -> tuple:
    """The pair for a post ratio figure `fid` whose book method is `method`: on the post's own route where the case
    timed it (_route), its explanation (explain) with the route said (_with_route); `label` takes the route."""
    r = _route(case, method)
    return (fid, _ratio(case, "A", r), _with_route(explain(case, r, post.figure(fid)["value"], l2_bytes), method, r),
            label.format(r))


def _case(record, shape, affine):
    key = f"{shape_key(shape)}/{affine}"
    for c in (record or {}).get("cases", []):
        if c["key"] == key:
            return c
    return None


def _stat(case, protocol, method, what="median_ms"):
    t = (case or {}).get("timing", {}).get(protocol)
    if not t or method not in t["stats"]:
        return None
    return t["stats"][method][what] if what in t["stats"][method] else None


def _ratio(case, protocol, method):
    t = (case or {}).get("timing", {}).get(protocol)
    if not t or method not in t.get("ratio_vs_baseline", {}):
        return None
    return t["ratio_vs_baseline"][method]["median"]


def _bw(case, protocol, method):
    b = (case or {}).get("bandwidth", {}).get(protocol, {}).get(method)
    return b


def explain(case, method: str, post_ratio, l2_bytes=None) -> str:
    """The measured context of a timing ratio: both protocols' paired ratios and the bandwidth fraction of the
    copy ceiling, with 'REVERSAL' when the post's ratio and protocol A's are on opposite sides of 1."""
    if case is None:
        return NOT_IN_RUN
    a, b = _ratio(case, "A", method), _ratio(case, "B", method)
    if a is None:
        return f"{method} not timed in this run ({case['methods'].get(method, {}).get('status', 'absent')})"
    parts = []
    p = post_ratio[0] if isinstance(post_ratio, list) else post_ratio
    if p is not None and (p - 1) * (a - 1) < 0:
        parts.append(f"REVERSAL (post {p:.3g}x, here {a:.3g}x)")
    parts.append(f"here: {PROTOCOL_NAMES['A']} {a:.3g}x" + (f", {PROTOCOL_NAMES['B']} {b:.3g}x"
                                                          if b is not None else ", protocol B not run"))
    for m in dict.fromkeys(("native", method)):
        bw = _bw(case, "A", m)
        if bw:
            frac = bw["fraction_of_copy_ceiling"]
            kind = "far below the ceiling" if frac < LAUNCH_BOUND_BELOW else "bandwidth-bound"
            parts.append(f"{m} {bw['median_gbps']:.0f} GB/s = {frac:.1%} of this run's copy ceiling ({kind})")
    if l2_bytes and case["bytes"] <= l2_bytes:
        parts.append(f"its {case['bytes'] / 2**20:.1f} MiB fit this GPU's {l2_bytes / 2**20:.0f} MiB L2, which "
                     f"protocol A does not flush")
    if b is not None and (a - 1) * (b - 1) < 0:
        parts.append("the sign of the difference flips with the protocol: launch cost decides it at this shape")
    parts.append("post: no copy ceiling measured on its GPU")
    return "; ".join(parts)


def timing_pairs(record: dict | None, l2_bytes=None) -> list[tuple]:
    """(figure id, ours, note, label) for every post timing figure a timing record can answer (notebooks 03, 07)."""
    pairs = []
    # the reference-order block at the L1/40 shape, both affines
    for affine, tag in (("default", "default"), ("random_normal", "random")):
        case = _case(record, L1_40, affine)
        for method in ("native", "native_torchscript", "reference_order"):
            r = _route(case, method)
            pairs.append((f"timing.{method}.{FULL}.{tag}.median", _stat(case, "A", r),
                          _with_route("" if case else NOT_IN_RUN, method, r), f"{r} median ms ({tag} affine)"))
        for method in ("native_torchscript", "reference_order"):
            pairs.append(_routed_ratio(case, f"timing.{method}.{FULL}.{tag}.ratio", method,
                                       "{} speedup vs native (" + tag + " affine)", l2_bytes))
        # the fast-statistics block
        for ours_name, post_name in _TIMING.items():
            if post_name in ("native_torchscript", "reference_order"):
                continue
            pairs.append(_routed_ratio(case, f"timing.{post_name}.{FULL}.{tag}.ratio", ours_name,
                                       "{} speedup vs native (" + tag + " affine)", l2_bytes))
    # the other shapes (the post's reference-order block: random affine)
    for shape in EXTRA_SHAPES:
        case = _case(record, shape, "random_normal")
        k = shape_key(shape)
        pairs.append((f"timing.native.{k}.median", _stat(case, "A", "native"), "" if case else NOT_IN_RUN,
                      "native median ms"))
        pairs.append((f"timing.reference_order.{k}.median", _stat(case, "A", "reference_order"),
                      "" if case else NOT_IN_RUN, "reference_order median ms"))
        fid = f"timing.reference_order.{k}.ratio"
        pairs.append((fid, _ratio(case, "A", "reference_order"),
                      explain(case, "reference_order", post.figure(fid)["value"], l2_bytes), "reference_order speedup"))
    for shape in ((4096, 1, 1, 1024), (8, 32, 128, 256)):
        case = _case(record, shape, "random_normal")
        pairs.append(_routed_ratio(case, f"timing.fast_stats_interleaved.{shape_key(shape)}.ratio",
                                   "split_interleaved", "{} speedup", l2_bytes))
    # the no-affine baselines (post: random affine, L1/40)
    case = _case(record, L1_40, "random_normal")
    # the post's headline ratios and its independent scout, beside this run's own (random affine, protocol A): a
    # second measurement of the same quantity (notebook 07's run is the book's second, 03's the first)
    for method in ("native", "reference_order"):
        pairs.append((f"timing.{method}.{FULL}.scout", _stat(case, "A", method),
                      "the post's independent scout beside this run's median" if case else NOT_IN_RUN,
                      f"{method} median ms (the post's scout)"))
    pairs.append(("ratio.reference_order.vs_native.16x64x256x256", _ratio(case, "A", "reference_order"),
                  "" if case else NOT_IN_RUN, "reference_order speedup vs native (the post's headline range)"))
    fr = _route(case, "split_interleaved")
    pairs.append(("ratio.fast_stats.vs_native.16x64x256x256", _ratio(case, "A", fr),
                  _with_route("" if case else NOT_IN_RUN, "split_interleaved", fr),
                  f"{fr} speedup vs native (ordinary inputs)"))
    # the post's block held its fast kernel's two geometries, the split eager and compiled routes and native: the
    # same here (the post's flat geometry where the run timed it, else the book's; never the book's interleaved
    # kernel beside the post's, which the post's block did not hold)
    flat = "post_split_flat" if _stat(case, "A", "post_split_flat") is not None else "split_flat"
    # native is in the post's block too, but never its strongest alternative; a run without the block's other
    # methods (notebook 07's) has nothing to compare with
    others = {m: _stat(case, "A", m) for m in ("split_eager", _route(case, "split_torchscript"), flat)}
    others = {m: v for m, v in others.items() if v}
    fast = _stat(case, "A", fr)
    strongest = min(others, key=others.get) if others else None
    pairs.append(("ratio.fast_stats.vs_strongest.16x64x256x256",
                  others[strongest] / fast if strongest and fast else None,
                  _with_route(f"the strongest other method of its block here: {strongest} ({others[strongest]:.3g} ms)"
                              if strongest and fast else NOT_IN_RUN, "split_interleaved", fr),
                  f"{fr} vs the strongest alternative in its block"))
    for method in ("noaffine_eager_affine", "noaffine_torchscript_affine"):
        pairs.append(_routed_ratio(case, f"timing.{method}.{FULL}.ratio", method, "{} speedup vs native",
                                   l2_bytes))
    return pairs


def timing_rows(record: dict | None, provenance: dict | None = None, methods=None) -> list[dict]:
    """Post-vs-here rows of a timing record; `methods` (names here) limits them to what a notebook times."""
    pairs = timing_pairs(record, (provenance or {}).get("gpu_l2_bytes"))
    if methods is not None:
        keep = {_TIMING.get(m, m) for m in methods}
        pairs = [p for p in pairs if _ID_METHOD.get(p[0].split(".")[1], p[0].split(".")[1]) in keep]
    return post.compare_rows(pairs, here=_here(provenance))


def _here(provenance: dict | None) -> str:
    p = provenance or {}
    return f"{p.get('gpu')}, torch {p.get('torch')}" if p else "no run"


def fast_stats_rows(record: dict | None, provenance: dict | None = None, method: str | None = None) -> list[dict]:
    """Counts, failing elements and error/budget ratios of the fast-statistics record (notebook 02): the post's
    own kernel (post_interleaved) where the record has it, else the book's interleaved one; `method` forces one."""
    have = {c["method"] for c in (record or {}).get("cases", []) if c.get("output")}
    method = method or ("post_interleaved" if "post_interleaved" in have else "interleaved")
    cases = [c for c in (record or {}).get("cases", []) if c["method"] == method]
    ok = [c for c in cases if c.get("output")]
    ordinary = [c for c in ok if c["category"] == "ordinary"]
    offset = [c for c in ok if c["category"] == "offset"]
    ex = next((c for c in offset if c["seed"] == 0 and c["affine"] == "default"), None)
    const = next((c for c in ok if c["category"] == "constant_control" and c["seed"] == 0), None)
    full = bool(cases) and tuple(cases[0]["shape"]) == L1_40
    shape_note = "" if full or not cases else f"record at shape {tuple(cases[0]['shape'])}, post at {L1_40}"
    n = ex["output"]["elements"] if ex else None
    pairs = [
        ("fast_stats.ordinary_cases", sum(c["output"]["official_pass"] for c in ordinary) if ordinary else None,
         _with_route(f"{len(ordinary)} ordinary cases in this record; {shape_note}".strip("; ") if ordinary
                     else NOT_IN_RUN, "interleaved", method), f"ordinary cases passing ({method})"),
        ("fast_stats.offset_cases_failed", sum(not c["output"]["official_pass"] for c in offset) if offset else None,
         f"{len(offset)} offset cases in this record" if offset else NOT_IN_RUN, f"offset cases failing ({method})"),
        ("fast_stats.offset.failing_elements", ex["output"]["bad_finite_candidate_scale"] if ex else None,
         (f"{ex['output']['bad_finite_candidate_scale'] / n:.1%} of {n} elements here; inputs are different draws "
          f"(here CPU-seeded make_input, post CUDA randn), so counts compare as fractions, not elements")
         if ex else NOT_IN_RUN, "failing elements, seed 0, default affine"),
        ("fast_stats.offset.max_error", ex["output"]["max_abs_error"] if ex else None, "" if ex else NOT_IN_RUN,
         "max |error|, seed 0, default affine"),
        ("fast_stats.offset.budget_ratio", ex["output"]["max_ratio_candidate_scale"] if ex else None,
         "official (candidate-scaled) budget" if ex else NOT_IN_RUN, "max budget ratio, seed 0, default affine"),
        ("fast_stats.constant.max_error", const["output"]["max_abs_error"] if const else None,
         "constant 1e4 at (3, 64, 17, 19), random affine" if const else NOT_IN_RUN, "max |error|, constant 1e4"),
    ]
    return post.compare_rows(pairs, here=_here(provenance))


def bit_identity_rows(bit: dict | None, uneven: dict | None, edge: dict | None,
                      provenance: dict | None = None) -> list[dict]:
    """Case counts of the bit-identity record, its uneven-width and edge controls (notebook 01)."""
    cases = (bit or {}).get("cases", [])
    shapes = sorted({tuple(c["shape"]) for c in cases})
    pairs = [("bit_identity.cases", sum(c["identical"] for c in cases) if cases else None,
              (f"{len(cases)} cases at {', '.join(map(str, shapes))}" if cases else NOT_IN_RUN),
              "cases bit-identical (output, mean, rstd)")]
    uc = (uneven or {}).get("cases", [])
    pairs.append(("bit_identity.uneven_width", uneven.get("n") if uc and all(c["identical"] for c in uc) else None,
                  (f"{sum(c['identical'] for c in uc)}/{len(uc)} cases identical at {UNEVEN_SHAPE}" if uc
                   else NOT_IN_RUN), "uneven row width, all identical"))
    ec = (edge or {}).get("cases", [])
    pairs.append(("edge.controls", sum(c["identical"] for c in ec) if ec else None,
                  (f"{len(ec)} edge cases here ({len({c['kind'] for c in ec})} kinds x "
                   f"{len({c['eps'] for c in ec})} eps); official allclose passes "
                   f"{sum(c['official_pass'] for c in ec)}" if ec else NOT_IN_RUN),
                  "edge controls bit-identical"))
    return post.compare_rows(pairs, here=_here(provenance))


def block(rows: list[dict]) -> dict:
    """{"figures": post figures in scope, "compared": how many this run sets beside its own, "ids": those
    figures' ids (runs share figures, so a book counts distinct ids)}."""
    return {"figures": len(rows), "compared": post.compared_count(rows),
            "ids": sorted(r["id"] for r in rows if r.get("ours") is not None)}


def reversals(rows: list[dict]) -> list[dict]:
    return [r for r in rows if r["note"].startswith("REVERSAL")]


def _post_ratio_text(row: dict) -> str:
    """The post's ratio as a ratio: a figure it gave as two medians (native/custom) by their quotient."""
    token = str(row["post_token"])
    if "/" in token and isinstance(row.get("post"), (int, float)):
        return f"{row['post']:.3g}x ({token} ms)"
    return token if token.endswith("x") else f"{token}x"


def verdict(rows: list[dict]) -> str:
    """One sentence from the rows: how many post figures are set beside this run's, and which reverse."""
    b = block(rows)
    rev = reversals(rows)
    line = f"Post vs here: {b['compared']}/{b['figures']} of the post's figures in scope set beside this run's."
    if rev:
        line += f" Reversals (here: {PROTOCOL_NAMES['A']}, as the post timed): " + "; ".join(
            f"{r['figure']} at {r['shape']} (post {_post_ratio_text(r)}, here {r['ours']:.3g}x)" for r in rev) + "."
    return line
