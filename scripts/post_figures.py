"""Extract every figure the original post reports into data/post/figures.json.

    PYTHONPATH=$PWD python scripts/post_figures.py [--post PATH] [--out data/post/figures.json] [--check]

No number is typed here: each figure is a regex locating ONE token in the post (the capture group), and the
value is parsed from that token. A figure the post does not state but that follows from two of its tokens (a ratio)
is written with the expression and the ids it comes from. --check regenerates and compares with the committed
JSON (exit 1 on any difference), so the JSON cannot drift from the post.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from labkit.records.post import parse_token  # noqa: E402  (the one token parser, shared with the tests)

DEFAULT_POST = Path("/work/shared/seed/000_21a6888e2bbfa6e6.txt")
DEFAULT_OUT = ROOT / "data" / "post" / "figures.json"
HARDWARE = "RTX 3090"
SOFTWARE = "torch 2.5.1"

N = r"(\d[\d]*(?:\.\d+)?)"                 # a plain decimal
NK = r"(\d{1,3}(?:,\d{3})+)"               # a number with thousands separators
RANGE = r"(\d+(?:\.\d+)?--\d+(?:\.\d+)?)"  # lo--hi
EXP = r"(\d+e-\d+|0)"                      # 1e-4, 1e-5, 0

FULL = (16, 64, 256, 256)
MID = (8, 32, 128, 256)
TALL = (4096, 1, 1, 1024)
UNEVEN = (3, 64, 17, 19)


def key(shape) -> str | None:
    return "x".join(str(d) for d in shape) if shape else None


def F(fid, section, quantity, unit, pattern, shape=None, method=None, **extra):
    """One figure: `pattern` has one capture group, the token."""
    return {"id": fid, "section": section, "quantity": quantity, "unit": unit, "pattern": pattern,
            "shape": list(shape) if shape else None, "method": method, **extra}


def cell(row_label: str, column: int, quartiles: bool) -> list[str]:
    """Patterns for one cell of a one-line markdown table: median (and 25th, 75th percentile)."""
    head = r"\| " + re.escape(row_label) + r" \|" + r"[^|]*\|" * column + " "
    if not quartiles:
        return [head + N + r"(?: \||$| )"]
    return [head + N + r" \[", head + r"[\d.]+ \[" + N + ",", head + r"[\d.]+ \[[\d.]+," + N + r"\]"]


def table_figures() -> list[dict]:
    out = []
    ro_methods = ("native", "native_torchscript", "reference_order")
    for label, affine in (("Default gamma=1,beta=0", "default"), ("Nontrivial random gamma/beta", "random")):
        for col, method in enumerate(ro_methods):
            for stat, pat in zip(("median", "p25", "p75"), cell(label, col, True)):
                out.append(F(f"timing.{method}.{key(FULL)}.{affine}.{stat}", "reference_order", f"graph {stat}",
                             "ms", pat, FULL, method, affine=affine, protocol="graph replay"))
    fs_methods = (("Native", "native"), ("Parallel var_mean + eager pointwise", "split_eager"),
                  ("Parallel var_mean + TorchScript pointwise", "split_torchscript"),
                  ("Parallel var_mean + flat custom pointwise", "fast_stats_flat"),
                  ("Parallel var_mean + row-interleaved custom pointwise", "fast_stats_interleaved"))
    for label, method in fs_methods:
        for col, affine in enumerate(("default", "random")):
            out.append(F(f"timing.{method}.{key(FULL)}.{affine}.median.fast_stats_block", "fast_stats",
                         "graph median", "ms", cell(label, col, False)[0], FULL, method, affine=affine,
                         protocol="graph replay"))
    return out


SPECS: list[dict] = [
    # headline and protocol correction
    F("headline.reference_order.speedup", "headline", "approximate speedup", "x", r"~" + N + r"x with tested", FULL,
      "reference_order"),
    F("protocol.audit.result_files", "protocol_correction", "audited local result files", "count",
      r"Across" + N + r" audited"),
    F("protocol.audit.error_ratios", "protocol_correction", "saved maximum finite-error ratios", "count",
      r"\(" + N + r" saved maximum"),
    F("protocol.atol", "protocol_correction", "official atol", "1", r"atol=(1e-4),rtol=1e-4\)"),
    F("protocol.rtol", "protocol_correction", "official rtol", "1", r"atol=1e-4,rtol=(1e-4)\)"),
    # scope
    F("scope.rows", "scope", "rows at the default shape", "count", r"Each of" + N + r" rows", FULL),
    F("scope.row_elements", "scope", "FP32 values per row", "elements", r"rows contains" + NK, FULL),
    F("environment.gpu_memory", "environment", "GPU memory", "GiB", r"RTX3090 " + N + r"GiB"),
    F("source.threads_per_block", "source_reading", "threads per block of the vectorized path", "threads",
      r"uses" + N + r" threads, one block per row"),
    F("support.alignment", "scope", "required alignment", "bytes", r"contiguous," + N + r"-byte-aligned"),
    F("support.multiple", "scope", "normalized size multiple", "elements", r"positive multiple of" + N + " no"),
    F("support.max_normalized", "scope", "largest normalized size", "elements", r"no larger than(\d+\*\d+),"),
    F("support.max_total", "scope", "total elements bound (exclusive)", "elements", r"elements below(\d\^\d+)\."),
    # reference-order protocol
    F("protocol.graph.warmups", "reference_order", "warmups per method", "count", r"replay," + N + r" warmups"),
    F("protocol.graph.rounds", "reference_order", "randomized-order rounds", "count",
      N + r" randomized-order rounds,"),
    F("protocol.graph.replays_per_pair", "reference_order", "replays per CUDA-event pair", "count",
      r"rounds," + N + r" replays per"),
    F("ratio.reference_order.vs_native.16x64x256x256", "reference_order", "speedup versus the native references",
      "x", r"approximately " + RANGE + r"x versus", FULL, "reference_order"),
    F("timing.native.16x64x256x256.scout", "reference_order", "independent scout median", "ms",
      r"scout measured" + N + r" versus", FULL, "native"),
    F("timing.reference_order.16x64x256x256.scout", "reference_order", "independent scout median", "ms",
      r"scout measured[\d.]+ versus" + N + r"ms", FULL, "reference_order"),
    F("timing.native.16x64x256x256.noaffine_block", "noaffine_baseline", "graph median", "ms",
      r"native was" + N + r"ms, no-affine", FULL, "native"),
    F("timing.noaffine_eager_affine.16x64x256x256.noaffine_block", "noaffine_baseline", "graph median", "ms",
      r"no-affine\+eager affine" + N + "ms", FULL, "noaffine_eager_affine"),
    F("timing.noaffine_torchscript_affine.16x64x256x256.noaffine_block", "noaffine_baseline", "graph median", "ms",
      r"no-affine\+TorchScript affine" + N + "ms", FULL, "noaffine_torchscript_affine"),
    F("timing.reference_order.16x64x256x256.noaffine_block", "noaffine_baseline", "graph median", "ms",
      r"custom implementation" + N + r"ms\.", FULL, "reference_order"),
    # bit identity
    F("bit_identity.cases", "bit_identity", "full-size cases bit-identical (output, mean, rstd)", "count",
      r"All" + N + r" full-size cases", FULL, "reference_order"),
    F("bit_identity.seeds", "bit_identity", "seeds", "count", r"\*\*" + N + r" seeds x"),
    F("bit_identity.affines", "bit_identity", "affine initializations", "count", r"seeds x" + N + r" affine init"),
    F("bit_identity.distributions", "bit_identity", "input distributions", "count",
      r"initializations x" + N + r" input distributions"),
    F("inputs.scaled_normal.factor", "bit_identity", "normal input scale", "1", r"normal times" + N + r","),
    F("inputs.offset_normal.offset", "bit_identity", "normal input offset", "1", r"normal plus" + N + r", constant"),
    F("inputs.constant.value", "bit_identity", "constant input value", "1", r", constant" + N + r"\)"),
    F("bit_identity.uneven_width", "bit_identity", "uneven row width bit-identical in the scout", "elements",
      r"row width" + N + r", including", UNEVEN, "reference_order"),
    F("edge.controls", "bit_identity", "small zero/tiny/nonfinite controls matched", "count",
      r"\. (Nine) additional small", method="reference_order"),
    F("edge.eps.0", "bit_identity", "edge-control eps", "1", r"across eps" + EXP + r",1e-5,1e-3"),
    F("edge.eps.1", "bit_identity", "edge-control eps", "1", r"across eps0," + EXP + r",1e-3"),
    F("edge.eps.2", "bit_identity", "edge-control eps", "1", r"across eps0,1e-5," + EXP + r" matched"),
]

for shape, tag in ((MID, r"\(8,32,128,256\) "), (TALL, r"\(4096,1,1,1024\) "), (UNEVEN, r"\(3,64,17,19\) ")):
    SPECS += [
        F(f"timing.native.{key(shape)}.median", "reference_order", "graph median", "ms", tag + N + "/", shape,
          "native", protocol="graph replay"),
        F(f"timing.reference_order.{key(shape)}.median", "reference_order", "graph median", "ms",
          tag + r"[\d.]+/" + N + r"(?:;| in|,)", shape, "reference_order", protocol="graph replay"),
        F(f"timing.reference_order.{key(shape)}.ratio", "reference_order", "native / reference-order median", "x",
          tag + r"([\d.]+/[\d.]+)", shape, "reference_order", protocol="graph replay"),
    ]

SPECS += table_figures() + [
    F("protocol.fast_stats.rounds", "fast_stats", "randomized-order rounds", "count", r"randomized" + N + r"-round"),
    F("ratio.fast_stats.vs_native.16x64x256x256", "fast_stats", "speedup versus native (ordinary inputs)", "x",
      r"about" + N + r"x versus native", FULL, "fast_stats_interleaved"),
    F("ratio.fast_stats.vs_strongest.16x64x256x256", "fast_stats", "speedup versus the strongest alternative", "x",
      r"native and" + N + r"x versus the strongest", FULL, "fast_stats_interleaved"),
    F("fast_stats.ordinary_cases", "fast_stats", "ordinary full-size cases passing", "count",
      r"All" + N + r" ordinary full-size", FULL),
    F("fast_stats.offset_cases_failed", "fast_stats", "normal-plus-offset cases failing (each implementation)",
      "count", r"All" + N + r" normal-plus", FULL),
    F("fast_stats.implementations", "fast_stats", "split-statistics implementations", "count",
      r"for each of the (three) split"),
    F("fast_stats.offset.failing_elements", "fast_stats", "failing elements (seed 0, default affine, interleaved)",
      "elements", r"has" + NK + r" failing", FULL, "fast_stats_interleaved", seed=0, affine="default"),
    F("fast_stats.offset.max_error", "fast_stats", "maximum absolute error", "1", r"maximum error" + N + r" and",
      FULL, "fast_stats_interleaved", seed=0, affine="default"),
    F("fast_stats.offset.budget_ratio", "fast_stats", "maximum tolerance-budget ratio", "1",
      r"budget ratio" + N + r"\.", FULL, "fast_stats_interleaved", seed=0, affine="default"),
    F("fast_stats.constant.value", "fast_stats", "constant control value", "1", r"A smaller constant" + N + r" control",
      UNEVEN),
    F("fast_stats.constant.max_error", "fast_stats", "maximum error against native (constant input)", "1",
      r"maximum error about" + N + r" against", UNEVEN, "fast_stats_interleaved", affine="random"),
    F("headline.fast_stats.speedup", "fast_stats", "approximate speedup (not a correct speedup)", "x",
      r"approximate" + N + r"x figure", FULL, "fast_stats_interleaved"),
    F("timing.native.4096x1x1x1024.fast_stats_block", "fast_stats", "graph median", "ms",
      r"native was" + N + r"ms versus", TALL, "native", protocol="graph replay"),
    F("timing.fast_stats_interleaved.4096x1x1x1024.fast_stats_block", "fast_stats", "graph median", "ms",
      r"ms versus" + N + r"ms for the custom interleaved", TALL, "fast_stats_interleaved", protocol="graph replay"),
    F("timing.native.8x32x128x256.fast_stats_block", "fast_stats", "graph median", "ms",
      r"measured" + N + r"ms native,", MID, "native", protocol="graph replay"),
    F("timing.split_torchscript.8x32x128x256.fast_stats_block", "fast_stats", "graph median", "ms",
      r"native," + N + r"ms compiled split", MID, "split_torchscript", protocol="graph replay"),
    F("timing.fast_stats_interleaved.8x32x128x256.fast_stats_block", "fast_stats", "graph median", "ms",
      r"split," + N + r"ms custom", MID, "fast_stats_interleaved", protocol="graph replay"),
    # layout follow-up
    F("layout.channels", "layout", "channels of the native-layout timing", "count", r"layout with" + N + r" channels"),
    F("layout.rows_kernel.time", "layout", "row-normalization kernel on native channels-last layout", "ms",
      r"about" + RANGE + r"ms, with", method="rows_channels_last"),
    F("layout.cases", "layout", "ordinary correctness cases passing", "count", r"with" + N + r" ordinary correctness"),
    F("layout.channel_counts.0", "layout", "channel count tested", "count", r"across" + N + r"/\d+/\d+ channels"),
    F("layout.channel_counts.1", "layout", "channel count tested", "count", r"across\d+/" + N + r"/\d+ channels"),
    F("layout.channel_counts.2", "layout", "channel count tested", "count", r"across\d+/\d+/" + N + r" channels"),
    F("layout.convert_roundtrip.time", "layout", "NCHW -> rows -> NCHW end to end", "ms",
      r"took " + RANGE + r"ms end to end", method="convert_rows_convert"),
    F("layout.direct_nchw.time", "layout", "existing direct NCHW kernel", "ms", r"about" + RANGE + r"ms for the existing",
      method="direct_nchw"),
]

# ratios the post implies but does not write: numerator id, denominator id
DERIVED = [
    ("timing.fast_stats_interleaved.4096x1x1x1024.ratio", "fast_stats", "native / fast-statistics median",
     "timing.native.4096x1x1x1024.fast_stats_block", "timing.fast_stats_interleaved.4096x1x1x1024.fast_stats_block"),
    ("timing.fast_stats_interleaved.8x32x128x256.ratio", "fast_stats", "native / fast-statistics median",
     "timing.native.8x32x128x256.fast_stats_block", "timing.fast_stats_interleaved.8x32x128x256.fast_stats_block"),
    ("timing.noaffine_eager_affine.16x64x256x256.ratio", "noaffine_baseline", "native / method median",
     "timing.native.16x64x256x256.noaffine_block", "timing.noaffine_eager_affine.16x64x256x256.noaffine_block"),
    ("timing.noaffine_torchscript_affine.16x64x256x256.ratio", "noaffine_baseline", "native / method median",
     "timing.native.16x64x256x256.noaffine_block", "timing.noaffine_torchscript_affine.16x64x256x256.noaffine_block"),
    ("timing.reference_order.16x64x256x256.ratio.noaffine_block", "noaffine_baseline", "native / method median",
     "timing.native.16x64x256x256.noaffine_block", "timing.reference_order.16x64x256x256.noaffine_block"),
] + [
    (f"timing.{m}.16x64x256x256.{a}.ratio", "reference_order" if m in ("native_torchscript", "reference_order")
     else "fast_stats", "native / method median",
     f"timing.native.16x64x256x256.{a}.median" + ("" if m in ("native_torchscript", "reference_order")
                                                  else ".fast_stats_block"),
     f"timing.{m}.16x64x256x256.{a}.median" + ("" if m in ("native_torchscript", "reference_order")
                                              else ".fast_stats_block"))
    for m in ("native_torchscript", "reference_order", "split_eager", "split_torchscript", "fast_stats_flat",
              "fast_stats_interleaved") for a in ("default", "random")
]


def locate(lines: list[str], pattern: str, fid: str) -> tuple[int, str]:
    hits = [(i + 1, m.group(1)) for i, line in enumerate(lines) for m in re.finditer(pattern, line)]
    if len(hits) != 1:
        raise ValueError(f"figure {fid}: pattern {pattern!r} must match exactly once in the post, matched {len(hits)}")
    line, token = hits[0]
    if token not in lines[line - 1]:
        raise ValueError(f"figure {fid}: token {token!r} not on line {line}")
    return line, token


def metadata(lines: list[str]) -> dict:
    """The post's title (its first line) and its byline "author · ISO time · forum" (the first line with two ' · ')."""
    byline = next(line for line in lines if line.count(" · ") == 2)
    author, when, forum = (part.strip() for part in byline.split(" · "))
    return {"title": lines[0].strip(), "author": author, "date": when[:10], "forum": forum}


def build(post_text: str, post_name: str) -> dict:
    lines = post_text.splitlines()
    figures, by_id = [], {}
    for spec in SPECS:
        spec = dict(spec)
        pattern = spec.pop("pattern")
        line, token = locate(lines, pattern, spec["id"])
        fig = {**spec, "value": parse_token(token), "hardware": HARDWARE, "software": SOFTWARE,
               "source": {"line": line, "token": token}}
        if fig["id"] in by_id:
            raise ValueError(f"duplicate figure id {fig['id']}")
        figures.append(fig)
        by_id[fig["id"]] = fig
    for fid, section, quantity, num, den in DERIVED:
        a, b = by_id[num], by_id[den]
        expression = f"{a['source']['token']}/{b['source']['token']}"
        figures.append({"id": fid, "section": section, "quantity": quantity, "unit": "x",
                        "value": parse_token(expression), "shape": b["shape"], "method": b["method"],
                        **{k: b[k] for k in ("affine", "protocol") if k in b},
                        "hardware": HARDWARE, "software": SOFTWARE,
                        "source": {"line": b["source"]["line"], "expression": expression, "from": [num, den]}})
    return {"post": post_name, **metadata(lines), "hardware": HARDWARE, "software": SOFTWARE,
            "generated_by": "scripts/post_figures.py", "figures": figures}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--post", type=Path, default=DEFAULT_POST)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--check", action="store_true", help="compare with the committed JSON instead of writing")
    args = ap.parse_args(argv)
    if not args.post.is_file():
        raise SystemExit(f"post text not found: {args.post}")
    doc = build(args.post.read_text(encoding="utf-8"), args.post.name)
    text = json.dumps(doc, indent=1) + "\n"
    if args.check:
        same = args.out.is_file() and args.out.read_text() == text
        print("figures.json matches the post" if same else f"{args.out} differs from the post's figures")
        return 0 if same else 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(f"{len(doc['figures'])} figures -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
