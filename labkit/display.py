"""Tables for notebooks and terminals: records (lists of dicts) in; HTML built by pandas for pages, plain text for
terminals and benchmark scripts.

Page tables are `DataFrame.to_html(escape=True)`: a value or a column name holding `|`, `*` or `<` is text in a
cell, never table syntax. Every value goes through `cell_text` first, so floats read the same in every table.
"""
from __future__ import annotations

import html
import json
import re
from pathlib import Path


def cell_text(v) -> str:
    """One value as table text: floats with 3 significant digits (a reader compares magnitudes; a value whose
    digits matter is recorded in the run and shown as text by its study), except a near-miss of a small whole
    number (0.99982 keeps six digits; 1.000000073 reads "1 + 7.3e-08"), thousands separated from 1,000 on,
    booleans as check marks, lists joined by commas, dicts as "key: value; ...", None as an em dash."""
    if v is None:
        return "—"
    if isinstance(v, bool):
        return "✓" if v else "✗"
    if isinstance(v, float):
        if v != v or v in (float("inf"), float("-inf")):
            return f"{v}"
        short = f"{v:.3g}"
        if float(short) == round(v) != v:
            if abs(v) < 10:  # 0.99982 must not read as 1: a near-miss of a small whole number keeps its digits
                near = f"{v:.6g}"
                if float(near) != round(v):
                    return near
                # closer than six figures say (an audit ratio of 1.000000073): the whole number and the difference
                return f"{round(v)} {'+' if v > round(v) else '−'} {abs(v - round(v)):.3g}"
            if abs(float(short)) < 100:  # 30.0018 reads 30.0: three figures, not a whole number it is not
                return f"{v:#.3g}"
        if 1e3 <= abs(float(short)) < 1e15:
            return f"{v:,.0f}"  # whole units, separated: 8369.62 us reads 8,370, a count 4194304.0 reads 4,194,304
        return short
    if isinstance(v, (list, tuple)):
        return ", ".join(cell_text(x) for x in v)
    if isinstance(v, dict):  # counts by name, as a reader says them
        return "; ".join(f"{k}: {cell_text(x)}" for k, x in v.items()) or "—"
    return str(v).replace("\n", " ")


def _columns(rows: list[dict], columns: list[str] | None) -> list[str]:
    return columns or list(dict.fromkeys(k for r in rows for k in r))


def _rows(rows: list[dict] | dict) -> list[dict]:
    if isinstance(rows, dict):  # one record: its fields as key/value rows
        return [{"key": k, "value": v} for k, v in rows.items()]
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise ValueError(f"rows must be a dict or a list of dicts, got {type(rows).__name__}")
    return rows


def frame(rows: list[dict] | dict, columns: list[str] | None = None):
    """The rows as a pandas DataFrame of display strings (`cell_text`), columns in first-seen order."""
    import pandas as pd

    rows = _rows(rows)
    columns = _columns(rows, columns)
    return pd.DataFrame([[cell_text(r.get(c)) for c in columns] for r in rows], columns=[str(c) for c in columns])


def table_html(rows: list[dict] | dict, columns: list[str] | None = None) -> str:
    """An HTML table (escaped) of the rows; `<p><em>(no rows)</em></p>` when there are none."""
    rows = _rows(rows)
    if not rows:
        return "<p><em>(no rows)</em></p>"
    return frame(rows, columns).to_html(escape=True, index=False, border=0, classes="labkit-table")


def table_text(rows: list[dict] | dict, columns: list[str] | None = None) -> str:
    """A plain-text table of the rows (the text/plain twin of `table_html`)."""
    rows = _rows(rows)
    if not rows:
        return "(no rows)"
    return frame(rows, columns).to_string(index=False)


def markdown_table(rows: list[dict], columns: list[str] | None = None) -> str:
    """A Markdown table for terminals and benchmark scripts (pages use `table_html`)."""
    if not rows:
        return "_(no rows)_"
    columns = _columns(rows, columns)

    def md(v) -> str:
        return cell_text(v).replace("|", "\\|")

    head = "| " + " | ".join(md(c) for c in columns) + " |\n|" + "---|" * len(columns) + "\n"
    return head + "\n".join("| " + " | ".join(md(r.get(c)) for c in columns) + " |" for r in rows)


def _display(html_text: str, plain: str) -> None:
    from IPython.display import display

    display({"text/html": html_text, "text/plain": plain}, raw=True)


FOLD_OVER = 25  # rows: a longer table is shown folded, behind a one-line summary


def fold_summary(rows: list[dict]) -> str:
    """One line for a long table: its row count and, per yes/no column, how many rows say yes."""
    counts = []
    for c in _columns(rows, None):
        values = [r.get(c) for r in rows if r.get(c) is not None]
        if values and all(isinstance(v, bool) for v in values):
            counts.append(f"{c}: {sum(values)}/{len(values)} ✓")
    return f"{len(rows)} rows" + (f" — {'; '.join(counts)}" if counts else "") + " (open to read them all)"


MERGE_AT = 3  # rows: from this many on, columns equal in every row are shown as one
_AXIS = re.compile(r"^(2\^\d+|\d[\d.,e+-]*)$")  # a grid's axis label (2^12, 4096): its columns never merge


def merge_repeated(rows: list[dict]) -> list[dict]:
    """Rows with the columns that say the same in every row (as cell_text shows them) shown once, under the joined
    header "a, b": three columns of 1s for output, mean and rstd read as one. Tables shorter than MERGE_AT rows
    (where equality may be chance) and a grid's axis columns stay as they are."""
    if len(rows) < MERGE_AT:
        return rows
    keys = list(dict.fromkeys(k for r in rows for k in r))
    text = {k: [cell_text(r.get(k)) for r in rows] for k in keys}
    groups: dict[tuple, list[str]] = {}
    for k in keys:
        if _AXIS.match(str(k)) or not any(v.strip() for v in text[k]):
            groups[(k,)] = [k]
        else:
            groups.setdefault(tuple(text[k]), []).append(k)
    if all(len(g) == 1 for g in groups.values()):
        return rows
    first = {g[0]: ", ".join(map(str, g)) for g in groups.values()}
    return [{first[k]: r.get(k) for k in keys if k in first} for r in rows]


def hoist_constant(rows: list[dict]) -> tuple[list[dict], dict]:
    """(rows without the columns that hold one value in every row, {column: that value}): a table of MERGE_AT rows
    or more says "shape 8x256, calls 10,000" once above it instead of in every row. At least two columns stay."""
    if len(rows) < MERGE_AT:
        return rows, {}
    keys = list(dict.fromkeys(k for r in rows for k in r))
    same = [k for k in keys if len({cell_text(r.get(k)) for r in rows}) == 1 and cell_text(rows[0].get(k)) != "—"]
    if len(keys) - len(same) < 2:
        same = same[:max(0, len(keys) - 2)]
    if not same:
        return rows, {}
    return [{k: r.get(k) for k in keys if k not in same} for r in rows], {k: rows[0].get(k) for k in same}


def show(rows: list[dict] | dict, columns: list[str] | None = None):
    """Display records (a list of dicts, or one dict as key/value rows) as a table, repeated columns merged
    (merge_repeated) and columns of one value said once above it (hoist_constant); one of more than FOLD_OVER rows
    folded behind its `fold_summary`, so a page reads as answers with the evidence one click away."""
    rows = _rows(rows)
    common: dict = {}
    if columns is None:
        rows, common = hoist_constant(merge_repeated(rows))
    table = table_html(rows, columns)
    if len(rows) > FOLD_OVER:
        table = f"<details class='labkit-fold'><summary>{html.escape(fold_summary(rows))}</summary>{table}</details>"
    said = "; ".join(f"{k}: {cell_text(v)}" for k, v in common.items())
    if said:
        table = f"<p class='labkit-common'>Every row: {html.escape(said)}</p>{table}"
    _display(table, (f"every row: {said}\n" if said else "") + table_text(rows, columns))


COMPARABLE_UNITS = ("ms", "us", "x", "GB/s")  # times and speedups: a ratio of two of them means something
# how a unit follows a number in the post table: a ratio's "x" joined, a pure number ("1") and a count bare
UNIT_TEXT = {"x": "x", "1": "", "count": "", None: "", "": ""}


def post_table_html(rows: list[dict]) -> str:
    """Post-vs-here rows (labkit.records.post.compare_row) as a reader compares them: the figure, the post's value
    as it wrote it, ours, ours/post only for times and speedups (never for counts), the note under its row."""
    e = html.escape
    if not rows:
        return "<p><em>(no rows)</em></p>"
    hw = sorted({r["post_hw"] for r in rows})
    here = sorted({r["here"] for r in rows if r.get("here")})
    caption = f"post: {', '.join(hw)}" + (f"; here: {', '.join(here)}" if here else "")
    body = []
    for r in rows:
        ratio = r["ours/post"] if r.get("unit") in COMPARABLE_UNITS else None
        unit = UNIT_TEXT.get(r.get("unit"), f" {r.get('unit')}")
        what = r["figure"] + (f" ({r['shape']})" if r.get("shape") else "")
        written = str(r["post_token"])
        # a derived figure: its value, not its formula; a range as a reader writes one
        post = cell_text(r["post"]) if "/" in written else written.replace("--", "–")
        # the post's figure is quoted as it wrote it (0.00031662): a quotation, not one of our numbers to round
        body.append(f"<tr><td>{e(what)}</td>"
                    f"<td class='labkit-quoted' title='as the post wrote it'>{e(post)}{e(unit)}</td>"
                    f"<td>{e(cell_text(r['ours']))}{e(unit) if r['ours'] is not None else ''}</td>"
                    f"<td>{e(cell_text(ratio)) if ratio is not None else ''}</td></tr>")
        if r.get("note"):
            body.append(f"<tr class='labkit-note'><td colspan='4'>{e(r['note'])}</td></tr>")
    return (f"<table class='labkit-table labkit-post'><caption>{e(caption)}</caption><thead><tr><th>figure</th>"
            f"<th>post</th><th>ours</th><th>ours / post</th></tr></thead><tbody>{''.join(body)}</tbody></table>"
            "<style>table.labkit-post tr.labkit-note td { font-size: 0.85em; color: #555; padding-left: 2em; "
            "border-top: none; } table.labkit-post caption { text-align: left; font-size: 0.9em; }</style>")


def departures_html(rows: list[dict]) -> str:
    """Where the book departs from the post's protocol behind these rows (labkit.records.post.departures_for), as a
    list a reader sees before the figures it touches; empty where none does."""
    from labkit.records.post import departure_sentence, departures_for

    found = departures_for(r["id"] for r in rows if r.get("id"))
    if not found:
        return ""
    items = "".join(f"<li>{html.escape(departure_sentence(d))}</li>" for d in found)
    return f"<p><strong>Where these figures' protocol departs from the post's:</strong></p><ul>{items}</ul>"


def show_post(rows: list[dict]):
    """The post beside this run (post_table_html), folded behind a one-line count when long, after the departures
    from the post's protocol behind its rows."""
    table = departures_html(rows) + post_table_html(rows)
    compared = sum(r.get("ours") is not None for r in rows)
    if len(rows) > FOLD_OVER:
        table = (f"<details class='labkit-fold'><summary>{compared} of {len(rows)} post figures set beside this "
                 f"run's (open to read them all)</summary>{table}</details>")
    _display(table, table_text(rows, ["figure", "post_token", "ours", "ours/post", "note"]))


def show_code(code: str, printed: list[str] | None, where: str):
    """Code a reader can copy, and what it printed where it ran (`where`: the run it comes from)."""
    out = "\n".join(printed) if printed is not None else "(not run: see where)"
    _display(f"<pre class='labkit-code'><code>{html.escape(code)}</code></pre><p>It printed ({html.escape(where)}):"
             f"</p><pre>{html.escape(out)}</pre>", f"{code}\n--- printed ({where}):\n{out}")


def write_rows(rows: list[dict], name: str, out_dir) -> tuple[Path, Path]:
    """Write every row to `<out_dir>/<name>.csv` (display strings) and `<name>.json` (values as recorded)."""
    if not name or "/" in name or name.startswith("."):
        raise ValueError(f"name must be a plain file stem, got {name!r}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    csv_path, json_path = out / f"{name}.csv", out / f"{name}.json"
    frame(rows).to_csv(csv_path, index=False)
    json_path.write_text(json.dumps(rows, indent=1, default=str))
    return csv_path, json_path


def show_long(rows: list[dict], name: str, out_dir, head: int = 10, columns: list[str] | None = None):
    """Show the first `head` rows and link the full list, written next to the page as `<name>.csv` and
    `<name>.json` in `out_dir` (the book's output directory, where the page is)."""
    if head < 1:
        raise ValueError(f"head must be at least 1, got {head}")
    rows = _rows(rows)
    csv_path, json_path = write_rows(rows, name, out_dir)
    shown = min(head, len(rows))
    note = (f"<p>{len(rows)} rows; the first {shown} are below. All of them: "
            f"<a href=\"{html.escape(csv_path.name)}\">{html.escape(csv_path.name)}</a> (CSV), "
            f"<a href=\"{html.escape(json_path.name)}\">{html.escape(json_path.name)}</a> (JSON).</p>")
    plain = f"{len(rows)} rows; the first {shown} below; all of them: {csv_path} and {json_path}\n"
    shown_rows = rows[:head] if columns is not None else merge_repeated(rows[:head])  # the files keep every column
    _display(note + table_html(shown_rows, columns), plain + table_text(shown_rows, columns))


def show_files(files: list[tuple[str, str]]):
    """Display (name, text) pairs as folded blocks, one per file: open one to read it. The blocks are code
    listings (pre.labkit-code), which the page checks read as code, not prose."""
    from IPython.display import HTML, display

    blocks = [f"<details><summary><code>{html.escape(name)}</code> ({len(text.splitlines())} lines)</summary>"
              f"<pre class='labkit-code'>{html.escape(text)}</pre></details>" for name, text in files]
    display(HTML("\n".join(blocks)))


RUN_MIME = "application/vnd.labkit.run+json"
VERDICT_MIME = "application/vnd.labkit.verdict+json"  # the short verdict, which labkit.site puts in the page's banner


def verdict_html(plain: list[str], full: str, where: str) -> str:
    """A page's verdict as a reader meets it: the short plain verdict (a few sentences) in a paragraph, the full
    verdict generated from the records folded under it (printed once), and one line saying where it comes from."""
    e = html.escape
    return (f"<div class='labkit-plain-verdict'><p>{e(' '.join(plain))}</p></div>"
            f"<details class='labkit-fold'><summary>The full verdict, every line generated from the records "
            f"({len(full.splitlines())} lines: open to read them)</summary><pre>{e(full)}</pre></details>"
            f"<p class='labkit-where'>{e(where)}</p>")


def show_verdict(plain: list[str], full: str | list[str], where: str) -> None:
    """Display a page's verdict (verdict_html); the short one also under VERDICT_MIME, where the page's banner
    finds it (labkit.site.page_info)."""
    from IPython.display import display

    full = full if isinstance(full, str) else "\n".join(full)
    display({"text/html": verdict_html(plain, full, where), "text/plain": " ".join(plain) + f"\n({where})",
             VERDICT_MIME: {"plain": " ".join(plain), "where": where}}, raw=True)


def show_session(session) -> None:
    """The session's banner as the cell's output, with which run it is (RunSession.describe) beside it under
    RUN_MIME: labkit.book lifts that into the executed notebook's metadata, where the site finds the run."""
    from IPython.display import display

    display({"text/plain": session.banner(), RUN_MIME: session.describe()}, raw=True)
