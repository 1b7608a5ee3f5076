"""Tables for notebooks: records in, Markdown out (rendered by Jupyter and kept in the HTML export)."""
from __future__ import annotations


def _cell(v) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, (list, tuple)):
        return ", ".join(_cell(x) for x in v)
    return str(v).replace("|", "\\|").replace("\n", " ")


def markdown_table(rows: list[dict], columns: list[str] | None = None) -> str:
    if not rows:
        return "_(no rows)_"
    columns = columns or list(dict.fromkeys(k for r in rows for k in r))
    head = "| " + " | ".join(columns) + " |\n|" + "---|" * len(columns) + "\n"
    return head + "\n".join("| " + " | ".join(_cell(r.get(c, "")) for c in columns) + " |" for r in rows)


def show(rows: list[dict] | dict, columns: list[str] | None = None):
    """Display records (a list of dicts, or one dict as key/value rows) as a Markdown table."""
    from IPython.display import Markdown, display

    if isinstance(rows, dict):
        rows = [{"key": k, "value": v} for k, v in rows.items()]
    display(Markdown(markdown_table(rows, columns)))


def show_files(files: list[tuple[str, str]]):
    """Display (name, text) pairs as folded blocks, one per file: open one to read it."""
    import html

    from IPython.display import HTML, display

    blocks = [f"<details><summary><code>{html.escape(name)}</code> ({len(text.splitlines())} lines)</summary>"
              f"<pre>{html.escape(text)}</pre></details>" for name, text in files]
    display(HTML("\n".join(blocks)))
