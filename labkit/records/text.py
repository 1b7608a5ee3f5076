"""Plain-text tables for the terminal: columns padded to their widest cell, no markup to read around."""
from __future__ import annotations

# The one name of each timing protocol (labkit.studies.bench.PROTOCOL_A and PROTOCOL_B) wherever a page or a note
# says which one a number comes from: headlines, verdicts, the front page's table and glossary, the post's notes.
PROTOCOL_NAMES = {"A": "graph replay (protocol A)", "B": "eager per call, L2 flushed (protocol B)"}


def cell(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value).replace("\n", " ")


def text_table(rows: list[dict], columns: list[str] | None = None) -> str:
    """`rows` as aligned columns under a header line; "(no rows)" when empty."""
    if not rows:
        return "(no rows)"
    columns = columns or list(dict.fromkeys(k for r in rows for k in r))
    cells = [columns] + [[cell(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(line, widths)).rstrip() for line in cells)


def ratio(value: float) -> str:
    """A speed ratio for a line of text: 27.9x, 1.04x."""
    return f"{value:.1f}x" if value >= 10 else f"{value:.2f}x"


def speed(value: float | None) -> str:
    """A ratio of times (theirs / ours) as a reader says it: 27.9x faster, or 14.1x slower (never 0.0711x)."""
    if value is None:
        return "—"
    return f"{value:.3g}x faster" if value >= 1 else f"{1 / value:.3g}x slower"


def on_gpu(summary: dict) -> str:
    """'on <GPU>, torch <version>' of a run summary."""
    return f"on {summary.get('gpu')}, torch {summary.get('torch')}"
