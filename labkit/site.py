"""The book as a static site: one HTML page per executed notebook and a front page, readable from a folder or a
plain web server with no network.

Choices, and why:
- Pages: nbconvert's HTMLExporter with its "lab" template (nbconvert is already the book's exporter and is
  packaged; a book builder such as Jupyter Book would add a second toolchain whose themes expect web assets). The
  template is extended by a small Jinja template held here (`PAGE_TEMPLATE`, given as `raw_template`): it empties
  the blocks that load require.js, MathJax, mermaid.js and the widget manager from CDNs, and puts a banner at the top
  of each page (live or replayed run, the parameters papermill injected, the headline result). Prompts are hidden.
- Formulas: converted to MathML when the page is built, with latex2mathml (pure Python, on PyPI). nbconvert's own
  markdown parser finds the math (`$...$`, `$$...$$`), so `*` and `_` inside a formula never reach Markdown; our
  renderer emits `<math>` instead of handing the TeX to MathJax. Browsers render MathML Core natively (Chromium
  since 109, Firefox, Safari), so no script, font or network is needed. The alternative, vendoring MathJax (~2 MB
  of JavaScript per copy of the book), would work offline too but is a bundled third-party script to maintain. A
  formula latex2mathml cannot convert is kept as TeX in `<code class="tex-fallback">` (the site test fails on it).
- Figures: nbconvert embeds image outputs as base64 data URIs (no image files to lose).
- Tables: pandas (`labkit.display`), escaped, so no value breaks a table.
- Headlines on the front page are read from the run each notebook replayed or wrote (the owning study's
  page_headline, labkit.studies.catalog); a notebook without a run shows the first line of its verdict cell's output.
"""
from __future__ import annotations

import datetime as _dt
import html
import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path

from labkit.core.atomic import atomic_write_bytes
from labkit.records.run import DATA_RUNS
from labkit.records.text import speed
from labkit.studies.catalog import run_headline, summarize_run

BOOK_TITLE = "Wide LayerNorm lab book"

# --- what a reader must never see -----------------------------------------------------------------------------

_LEAKS = {
    "a warning": re.compile(r"\b[A-Z]\w*Warning\b:"),
    "a traceback": re.compile(r"Traceback \(most recent call last\)"),
    "an import error": re.compile(r"ModuleNotFoundError|No module named"),
    "a raw dict": re.compile(r"\{'[^'\n]{1,80}': "),
    # a Python list printed whole: quoted strings (['eager', 'torchscript']) or three or more numbers (seeds
    # [0, 1, 2], a shape [16, 64, 256, 256]); two numbers in brackets are a quartile interval ([27, 27.6]) and a
    # torch.tensor([...]) literal is code to copy
    "a raw list": re.compile(r"(?<!tensor\()\['[^'\n]*'(?:, '[^'\n]*')*\]"
                             r"|(?<!tensor\()\[-?\d+(?:\.\d+)?(?:, -?\d+(?:\.\d+)?){2,}\]"),
    "a build path": re.compile(r"\.staging-|/tmp/|site-packages/|/work/|/root/|/home/|/opt/"),
    # 12+ decimals: a float printed whole (0.913771909794152); the audit's 10 significant digits are deliberate
    # (a ratio of 1.00000007 must not print as 1), and a witness's torch.tensor([...]) literal is code to copy
    "an unrounded float": re.compile(r"(?<!tensor\(\[)\b\d+\.\d{12,}\b"),
    # the project's tracker is not the reader's: the word followed by a number (with or without "#", singular or
    # plural), or preceded by "the" (a GPU "issues" instructions, so the word alone is fine); tests/test_site.py
    # plants examples
    "an issue-tracker reference": re.compile(
        r"(?<!warp )(?<!lane )(?<!thread )(?<!block )(?<!GPU )(?<!SM )(?<!scheduler )"
        r"\b[Ii]ssues?\s*#?\d+(?!\d)(?!\s+(?:[A-Z]{2,}|(?:loads?|stores?|reads?|writes?|instructions?|warps?|"
        r"requests?|cycles?|products?|shuffles?|FMAs?|pushes?)\b))"
        r"|\b[Tt]he issue(?:'s|\u2019s)?\b"),
    # where the book was built or the runs were made, not what they found
    # (spelled with a character class so that the project's own word check does not flag this pattern itself)
    "a build-machine remark": re.compile(r"\b[Tt]his work[p]lace\b|\bcould not be fetched\b"),
    # a VM's kernel build string ("6.18.44-fc-v1147-gpu", "6.8.0-45-generic") or platform.platform()'s whole line
    # ("Linux-...-with-glibc2.39"); page 00 shows the OS family instead
    "a platform build string": re.compile(
        r"\b\d+\.\d+\.\d+-(?:[\w.]+-)*(?:gpu|generic|aws|azure|gcp|kvm|cloud)\b|\b\d+\.\d+\.\d+-fc-v\d+"
        r"|\b(?:Linux|macOS|Darwin|Windows)-\S*-with-(?:glibc|libc)"),
}


def leaks(text: str) -> list[str]:
    """What a page's readable text (outputs, banners, prose; not code) shows that a reader must not meet: warnings,
    tracebacks, import errors, raw dict and list reprs, build paths, unrounded floats, issue-tracker references,
    remarks about the machine the book was built on, VM kernel build strings; each with its context."""
    out = []
    for what, pattern in _LEAKS.items():
        for m in pattern.finditer(text):
            out.append(f"{what}: ...{text[max(0, m.start() - 60):m.end() + 40]}...".replace("\n", " "))
    return out


# --- what a page is about: read from the executed notebook ------------------------------------------------------

@dataclass
class RunRef:
    run_id: str
    name: str
    live: bool  # written by this build (under <out>/runs), not a committed run it replayed
    gpu: str | None
    torch: str | None
    date_utc: str | None
    path: str
    commit: str | None = None
    python: str | None = None


@dataclass
class PageInfo:
    stem: str
    title: str
    question: str
    parameters: dict
    run: RunRef | None
    headline: str
    headline_source: str  # "run record" or "verdict output"
    verdict: str
    verdict_anchor: str | None
    executed_utc: str | None
    missing_run: str | None = None  # the run name a session looked for and did not find
    verdict_short: bool = False  # `verdict` is the page's short verdict (its full one is folded at the end)


def _text_outputs(cell) -> str:
    return "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream"
                   and o.get("name") == "stdout")


def _short_verdict(cell) -> str | None:
    """The short verdict a cell displayed with labkit.display.show_verdict, None without one."""
    from labkit.display import VERDICT_MIME

    return next((o["data"][VERDICT_MIME]["plain"] for o in cell.get("outputs", [])
                 if VERDICT_MIME in o.get("data", {})), None)


def _title(nb, fallback: str) -> str:
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("#"):
                    return line.lstrip("#").strip()
    return fallback


def _verdict_anchor(nb) -> str | None:
    """The id nbconvert gives the heading "Verdict" (the text with spaces as hyphens), if the notebook has one."""
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("#") and line.lstrip("#").strip() == "Verdict":
                    return "Verdict"
    return None


def _find_run(run_id: str, out_dir: Path, extra_roots=()) -> RunRef | None:
    for root, live in ((out_dir / "runs", True), *((Path(r), False) for r in extra_roots), (DATA_RUNS, False)):
        path = root / run_id
        if (path / "run.json").is_file():
            meta = json.loads((path / "run.json").read_text())
            prov = meta.get("provenance", {})
            return RunRef(run_id, meta.get("name", ""), live, prov.get("gpu"), prov.get("torch"),
                          prov.get("date_utc"), str(path), prov.get("git_commit"), prov.get("python"))
    return None


def page_info(executed: Path, out_dir: Path | None = None) -> PageInfo:
    """What the page of executed notebook `executed` says at its top and on the front page."""
    import nbformat

    executed = Path(executed)
    out_dir = Path(out_dir) if out_dir else executed.parent
    nb = nbformat.read(executed, as_version=4)
    pm = nb.metadata.get("papermill", {})
    params = dict(pm.get("parameters") or {})
    code = [c for c in nb.cells if c.cell_type == "code"]
    verdict = _text_outputs(code[-1]).strip() if code else ""
    short = _short_verdict(code[-1]) if code else None
    if short:  # a page with a short verdict (labkit.display.show_verdict) shows it, the full one folded below
        verdict = short
    announced = nb.metadata.get("labkit", {}).get("run") or {}  # labkit.book.lift_run_metadata
    run = None
    if announced.get("run_id"):
        roots = [params["runs_root"]] if params.get("runs_root") else []
        run = _find_run(announced["run_id"], out_dir, roots)
    if run:
        headline, source = run_headline(Path(run.path)), "run record"
    else:
        headline, source = (verdict.splitlines()[0] if verdict else "(no verdict output)"), "verdict output"
    labkit_meta = nb.metadata.get("labkit", {})
    title = _title(nb, executed.stem)
    return PageInfo(stem=executed.stem, title=title, question=labkit_meta.get("question", title), parameters=params,
                    run=run, headline=headline, headline_source=source, verdict=verdict,
                    verdict_anchor=_verdict_anchor(nb), executed_utc=pm.get("end_time"),
                    missing_run=announced.get("name") if announced.get("missing") else None,
                    verdict_short=bool(short))


# --- rendering ----------------------------------------------------------------------------------------------------

def _when(iso: str | None) -> str:
    if not iso:
        return "date not recorded"
    try:
        t = _dt.datetime.fromisoformat(iso.replace("Z", "+00:00")).astimezone(_dt.timezone.utc)
    except ValueError:
        return iso
    return t.strftime("%Y-%m-%d %H:%M UTC")


def source_html(info: PageInfo) -> str:
    """Live, replayed or computed here: one sentence with the run id, GPU, torch and date."""
    e = html.escape
    if info.run and info.run.live:
        return (f"<strong>Ran live</strong> in this build: run <code>{e(info.run.run_id)}</code> on "
                f"{e(str(info.run.gpu))}, torch {e(str(info.run.torch))}, {e(_when(info.run.date_utc))}.")
    if info.run:
        return (f"<strong>Replays</strong> committed GPU run <code>{e(info.run.run_id)}</code>: "
                f"{e(str(info.run.gpu))}, torch {e(str(info.run.torch))}, recorded {e(_when(info.run.date_utc))}; "
                f"executed here {e(_when(info.executed_utc))}. {_build_vs_run(info.run)}")
    if info.missing_run:
        return (f"<strong>No GPU run</strong>: no committed '{e(info.missing_run)}' run to replay, so this page "
                f"shows no GPU result; executed {e(_when(info.executed_utc))}.")
    return (f"<strong>Computed when the book was built</strong> ({e(_when(info.executed_utc))}), on this machine; "
            "this notebook replays no GPU run.")


def _build_vs_run(run: RunRef) -> str:
    """Why a replayed page's machine differs from the run's, said where it shows."""
    import platform

    try:
        import torch

        here_torch = torch.__version__
    except ImportError:
        here_torch = "none"
    e = html.escape
    commit = _commit()
    same = commit and run.commit and run.commit.startswith(commit.split()[0])
    return (f"<span class='labkit-where'>This page was executed with Python {e(platform.python_version())} and "
            f"torch {e(here_torch)} at commit {e(commit or 'unknown (no git here)')}; the run with Python {e(str(run.python))} and torch "
            f"{e(str(run.torch))} at commit {e(str(run.commit)[:12])}"
            + ("" if same else " (a later commit replays an earlier run; notebook 00 sets the run's kernel source "
                                "hashes beside this checkout's)")
            + ". GPU figures are the run's; what a page computes here (CPU checks, cubins compiled by this "
              "machine's NVRTC, the installed torch's headers) is this machine's and says so.</span>")


def parameters_html(params: dict) -> str:
    if not params:
        return "none (the notebook's defaults)"
    return ", ".join(f"<code>{html.escape(k)} = {html.escape(json.dumps(v))}</code>" for k, v in params.items())


def headline_html(info: PageInfo) -> str:
    where = ("from the run's records" if info.headline_source == "run record"
             else "first line of the verdict cell's output (no run)")
    return f"{html.escape(info.headline)} <span class='labkit-where'>({where})</span>"


def _neighbour_links(neighbours: tuple[str | None, str | None]) -> str:
    prev, nxt = neighbours
    links = ([f"<a href='{html.escape(prev)}.html' rel='prev'>‹ {html.escape(prev)}</a>"] if prev else []) \
        + ([f"<a href='{html.escape(nxt)}.html' rel='next'>{html.escape(nxt)} ›</a>"] if nxt else [])
    return f" <span class='labkit-pager'>{' · '.join(links)}</span>" if links else ""


def departures_html(stem: str | None) -> str:
    """Where the book departs from the post's protocol on this page (all of them on the front page)."""
    from labkit.records.post import departure_sentence, departures

    found = departures(stem)
    if not found:
        return ""
    items = "".join(f"<li>{html.escape(departure_sentence(d))}</li>" for d in found)
    return (f"<details class='labkit-departures'><summary><strong>Departs from the post</strong> in "
            f"{len(found)} place{'s' if len(found) > 1 else ''}</summary><ul>{items}</ul></details>")


def banner_html(info: PageInfo, neighbours: tuple[str | None, str | None] = (None, None)) -> str:
    verdict = (f" <a href='#{html.escape(info.verdict_anchor)}'>Verdict ↓</a>" if info.verdict_anchor else "")
    return (f"<nav class='labkit-nav'><a href='index.html'>{html.escape(BOOK_TITLE)}</a> › "
            f"{html.escape(info.title)}{_neighbour_links(neighbours)}</nav>"
            f"<section class='labkit-banner' id='labkit-banner'>"
            f"<p><strong>Question:</strong> {html.escape(info.question)}</p>"
            f"<p><strong>Result:</strong> {headline_html(info)}{verdict}</p>"
            f"<p>{source_html(info)}</p>"
            + (f"<p class='labkit-short-verdict'><strong>Verdict</strong> (generated from the records; the full "
               f"verdict is folded at the end): {html.escape(info.verdict)}</p>" if info.verdict and info.verdict_short
               else f"<details open class='labkit-verdict'><summary><strong>Verdict</strong>, generated from the "
               f"records (the full cell is below)</summary><pre>{html.escape(info.verdict)}</pre></details>"
               if info.verdict else "")
            + departures_html(info.stem)
            + f"<p><strong>Parameters</strong> injected by papermill: "
            f"{parameters_html({k: v for k, v in info.parameters.items() if k != 'output_dir'})}; "
            f"every other parameter at the notebook's default.</p></section>")


SITE_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; }
.labkit-nav { padding: 8px 16px; font-size: 14px; }
.labkit-banner { margin: 0 16px 16px; padding: 10px 16px; border-left: 4px solid #1e88e5; background: #f3f8fd;
                 font-size: 14px; line-height: 1.5; }
.labkit-banner p { margin: 4px 0; }
.labkit-verdict pre { white-space: pre-wrap; font-size: 12.5px; margin: 4px 0; background: #fff; padding: 4px 8px; }
.labkit-where { color: #666; font-size: 12px; }
.labkit-plain-verdict p { font-size: 15px; line-height: 1.5; max-width: 60em; margin: 4px 0 8px; }
table.labkit-table { border-collapse: collapse; font-size: 12px; margin: 4px 0; }
.jp-RenderedHTMLCommon table.labkit-table th, .jp-RenderedHTMLCommon table.labkit-table td,
table.labkit-table th, table.labkit-table td { border: 1px solid #ddd; padding: 3px 6px; text-align: left;
                                               vertical-align: top; max-width: 40em; overflow-wrap: break-word; }
table.labkit-table th { background: #f2f2f2; }
table.labkit-table tr:nth-child(even) td { background: #fafafa; }
.labkit-pager { float: right; }
.labkit-nav a, .labkit-banner a { color: #1565c0; text-decoration: underline; }
math { font-size: 1.1em; }
math[display="block"] { margin: 8px 0; }
code.tex-fallback { color: #b00; }
"""

PAGE_TEMPLATE = """{%- extends 'index.html.j2' -%}
{%- block html_head_js_requirejs -%}{%- endblock html_head_js_requirejs -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
{%- block jupyter_widgets -%}{%- endblock jupyter_widgets -%}
{%- block extra_css -%}
<link rel="icon" href="data:,">
<style type="text/css">{{ resources.labkit_css }}</style>
{%- endblock extra_css -%}
{%- block body_header -%}
{{ super() }}
{{ resources.labkit_banner }}
{%- endblock body_header -%}
"""


def tex_to_mathml(tex: str, display: str = "inline") -> str:
    """MathML for a TeX formula, without the xmlns attribute (HTML needs none); a formula that does not convert
    cleanly stays TeX in <code class="tex-fallback">."""
    from latex2mathml.converter import convert

    try:
        out = convert(tex.strip(), display=display)
    except Exception:  # noqa: BLE001 - any parser failure means: show the TeX
        out = ""
    if not out or re.search(r">[^<]*\\[A-Za-z]", out):  # a command left unconverted, e.g. "\lvert" as text
        return f"<code class='tex-fallback'>{html.escape(tex)}</code>"
    return out.replace(' xmlns="http://www.w3.org/1998/Math/MathML"', "")


def _exporter():
    from jinja2 import pass_context
    from nbconvert import HTMLExporter
    from nbconvert.filters.markdown_mistune import IPythonRenderer, MarkdownWithMath

    class MathMLRenderer(IPythonRenderer):
        def block_math(self, body: str) -> str:
            return tex_to_mathml(body, "block")

        def inline_math(self, body: str) -> str:
            return tex_to_mathml(body, "inline")

        def latex_environment(self, name: str, body: str) -> str:
            return tex_to_mathml(f"\\begin{{{name}}}{body}\\end{{{name}}}", "block")

    class PageExporter(HTMLExporter):
        @pass_context
        def markdown2html(self, context, source):
            cell = context.get("cell", {})
            renderer = MathMLRenderer(
                escape=False, attachments=cell.get("attachments", {}), embed_images=self.embed_images,
                path=context.get("resources", {}).get("metadata", {}).get("path", ""),
                anchor_link_text=self.anchor_link_text, exclude_anchor_links=self.exclude_anchor_links,
                **self.lexer_options)
            return MarkdownWithMath(renderer=renderer).render(source)

    from nbconvert.preprocessors import TagRemovePreprocessor

    exporter = PageExporter(template_name="lab", exclude_input_prompt=True, exclude_output_prompt=True)
    # what a reader does not need on the page: the parameters cells (the banner lists what papermill injected)
    # and the setup cell's code (imports, the session; its output, the live/replayed line, stays)
    exporter.register_preprocessor(TagRemovePreprocessor(
        remove_cell_tags={"parameters", "injected-parameters"}, remove_input_tags={"setup", "record"}), enabled=True)
    exporter.raw_template = PAGE_TEMPLATE
    # no CDN URL may end up in a page even where a block would use it
    exporter.mathjax_url = exporter.require_js_url = exporter.widget_renderer_url = ""
    exporter.mermaid_js_url = exporter.mermaid_layout_elk_js_url = exporter.jupyter_widgets_base_url = ""
    return exporter


def export_page(executed: Path, out_dir: Path | None = None,
                neighbours: tuple[str | None, str | None] = (None, None)) -> Path:
    """Export executed notebook `executed` to `<same name>.html` with the banner at its top; `neighbours` are the
    stems of the pages before and after it in reading order (linked from the banner)."""
    import nbformat

    executed = Path(executed)
    info = page_info(executed, out_dir)
    nb = nbformat.read(executed, as_version=4)
    nb.metadata["title"] = info.title
    body, _ = _exporter().from_notebook_node(
        nb, resources={"labkit_banner": banner_html(info, neighbours), "labkit_css": SITE_CSS})
    target = executed.with_suffix(".html")
    atomic_write_bytes(target, body.encode())
    return target


# --- the front page -----------------------------------------------------------------------------------------------

def _entry_html(result, info: PageInfo | None) -> str:
    e = html.escape
    page = Path(result.html).name if result.html else None
    title = info.title if info else Path(result.notebook).stem
    link = f"<a href='{e(page)}'>{e(title)}</a>" if page else e(title)
    parts = [f"<li class='labkit-entry'><h2>{link}</h2>"]
    if info:
        parts.append(f"<p><strong>Question:</strong> {e(info.question)}</p>")
        parts.append(f"<p><strong>Result:</strong> {headline_html(info)}</p>")
        parts.append(f"<p>{source_html(info)}</p>")
    if result.status != "ok":
        parts.append(f"<p class='labkit-failed'><strong>This notebook failed</strong> after {result.seconds:.0f} s: "
                     f"<code>{e((result.error or '').splitlines()[0] if result.error else 'unknown error')}</code>"
                     + (" — its page shows the cell that failed." if page else "") + "</p>")
    files = [f"<a href='{e(Path(result.executed).name)}'>executed notebook</a>"] if Path(result.executed).exists() \
        else []
    if info and info.verdict:
        parts.append(f"<details><summary>Verdict, as printed</summary><pre>{e(info.verdict)}</pre></details>")
    parts.append(f"<p class='labkit-files'>{result.seconds:.0f} s to execute"
                 + (f"; {' · '.join(files)}" if files else "") + "</p></li>")
    return "".join(parts)


INDEX_CSS = SITE_CSS + """
body { max-width: 80em; margin: 1.2em auto; padding: 0 1em; line-height: 1.5; color: #222; }
h1 { margin: 0.3em 0 0.2em; }
h2#notebooks { margin: 0.6em 0 0.2em; }
ol.labkit-book { padding-left: 0; list-style: none; }
li.labkit-entry { border-top: 1px solid #ddd; padding: 0.6em 0; }
li.labkit-entry h2 { font-size: 1.15em; margin: 0.2em 0; }
li.labkit-entry p { margin: 0.2em 0; }
.labkit-files, .labkit-build { color: #555; font-size: 0.9em; }
.labkit-failed { color: #b00; }
details pre { white-space: pre-wrap; font-size: 12px; background: #f7f7f7; padding: 6px; }
.labkit-answer p { margin: 0.4em 0; }
table.labkit-headline { border-collapse: collapse; font-size: 12px; line-height: 1.35; margin: 0.4em 0; width: 100%; }
table.labkit-headline th, table.labkit-headline td { border-bottom: 1px solid #ddd; padding: 2px 6px;
  text-align: left; }
table.labkit-headline td:nth-child(-n+3), table.labkit-headline td:nth-child(8) { white-space: nowrap; }
table.labkit-headline td:nth-child(n+4):nth-child(-n+6) { text-align: right; font-variant-numeric: tabular-nums; }
.labkit-goals { font-size: 13px; line-height: 1.4; }
.labkit-goals p { margin: 0.3em 0 0.1em; } .labkit-goals ul { margin: 0.1em 0 0.3em; padding-left: 1.4em; }
.ok { color: #1a7f37; } .miss { color: #b00; }
img.labkit-figure { width: 100%; max-width: 1100px; display: block; margin: 0.2em auto; }
img.labkit-figure.labkit-wide { max-width: 100%; }
ul.labkit-bullets li { margin: 0.3em 0; } .labkit-repro3 pre { margin: 0.3em 0; font-size: 12px; }
table.labkit-claims { border-collapse: collapse; font-size: 12px; line-height: 1.35; width: 100%; }
table.labkit-claims th, table.labkit-claims td { border-bottom: 1px solid #ddd; padding: 3px 6px; text-align: left;
  vertical-align: top; }
p.labkit-figure-note { font-size: 12px; line-height: 1.35; margin: 0.2em 0 0.5em; }
.labkit-two { display: grid; grid-template-columns: 7fr 2fr; gap: 1em; font-size: 12px; line-height: 1.3; }
.labkit-box { background: #f7f7f7; padding: 0.2em 0.8em; border-radius: 4px; }
.labkit-box h2 { font-size: 1em; margin: 0.3em 0; }
.labkit-box dl { column-count: 3; column-gap: 1.4em; margin: 0.2em 0; }
.labkit-box dl > div { break-inside: avoid; margin: 0 0 0.25em; }
.labkit-box dt { font-weight: 600; display: inline; } .labkit-box dt::after { content: ":"; }
.labkit-box dd { margin: 0; display: inline; }
.labkit-box pre { background: #fff; padding: 2px 6px; white-space: pre-wrap; margin: 0.1em 0 0.3em; }
.labkit-box p { margin: 0.2em 0; }
"""


def post_summary_html(results: list, infos: list) -> str:
    """The post beside the book: per notebook whose run reproduces post figures, how many of its post figures the
    run sets beside its own (the summary's "post" block), linking the page; distinct figures over the book (runs
    share some), those no run answers by section, and where the book departs from the post's protocol."""
    from collections import Counter

    from labkit.records import post

    e = html.escape
    items, ids = [], set()
    for r, info in zip(results, infos):
        if not info or not info.run:
            continue
        block = summarize_run(Path(info.run.path)).get("post")
        if not block:
            continue
        ids |= set(block.get("ids", []))
        page = Path(r.html).name if r.html else None
        name = f"<a href='{e(page)}#The-post-beside-this-run'>{e(info.title)}</a>" if page else e(info.title)
        items.append(f"<li>{name}: {block['compared']} of its {block['figures']} post figures set beside this "
                     f"run's</li>")
    if not items:
        return ""
    every = post.figures()
    uncompared = [f for f in every if f["id"] not in ids]
    rest = Counter(f["section"] for f in uncompared)
    rows = "".join(f"<tr><td><code>{e(f['id'])}</code></td><td>{e(f['quantity'])}</td>"
                   f"<td class='labkit-quoted' title='as the post wrote it'>"
                   f"{e(str((f.get('source') or {}).get('token', f.get('value'))))}</td>"
                   f"<td>{e(post.uncompared_reason(f))}</td></tr>" for f in uncompared)
    listing = (f"<details class='labkit-fold'><summary>The {len(uncompared)} figures not set beside a run's number, "
               f"each with why</summary><table class='dataframe'><thead><tr><th>figure</th><th>what</th>"
               f"<th>the post's value</th><th>why not set beside ours</th></tr></thead><tbody>{rows}</tbody></table>"
               f"</details>") if uncompared else ""
    about = post.about()
    return (f"<section class='labkit-post'><h2>The post beside the book</h2><p>{len(ids)} distinct figures of the "
            f"{len(every)} the post states ({e(about['hardware'])}, {e(about['software'])}; data/post/figures.json) "
            f"are set beside a committed run's, each with its ratio where the quantity is a time or a speedup and a "
            f"note where they differ:</p><ul>{''.join(items)}</ul><p class='labkit-build'>Not set beside a run's "
            f"number ({sum(rest.values())}), by section of the post: "
            + ", ".join(f"{e(k)} {v}" for k, v in sorted(rest.items()))
            + ". These are protocol settings, input definitions, quartiles, the post's per-block medians of other "
              "blocks, and its scope statements; pages 04, 05 and 09 set their own post rows beside "
              "those they answer.</p>" + listing + departures_html(None) + "</section>")


# The README's two commands and the GPU pass, as the reproduce box prints them (tests/test_readme.py holds them
# to the README, .ci/run and CONTRIBUTING.md).
BOOK_COMMAND = 'pip install -e ".[cuda13,book]" && labkit book --out build/book'
TEST_COMMAND = 'pip install -e ".[cuda13,test]" && python -m pytest -q'
GPU_COMMAND = "LABKIT_GIT_COMMIT=$(git rev-parse HEAD) LABKIT_GIT_DIRTY=false scripts/h200_pass.sh"


def _sig(v, digits: int = 3) -> str:
    return "—" if v is None else f"{v:.{digits}g}"


def headline_table_html(rows: list[dict]) -> str:
    """The front page's results table: what, at which shape, each ratio beside its protocol, bit identity as k/n,
    met/missed as marks."""
    e = html.escape
    head = ("<tr><th>result</th><th>shape</th><th>protocol</th><th>ms</th><th>vs torch eager</th>"
            "<th>vs torch.compile</th><th>bit-identical</th><th>goal</th></tr>")
    body = []
    for r in rows:
        mark = "" if r["met"] is None else (" <span class='ok'>✓ met</span>" if r["met"]
                                            else " <span class='miss'>✗ missed</span>")
        body.append(f"<tr><td>{e(r['result'])}</td><td>{e(r['shape'])}</td><td>{e(r['protocol'])}</td>"
                    f"<td>{_sig(r['ms'])}</td><td>{speed(r['x torch eager'])}</td>"
                    f"<td>{speed(r['x torch.compile'])}</td>"
                    f"<td>{e(str(r['bit-identical'] or '—'))}</td><td>{e(r['goal'] or '—')}{mark}</td></tr>")
    return f"<table class='labkit-headline'>{head}{''.join(body)}</table>"


def post_beside_html(run_paths: dict) -> str:
    """The post beside the book, one row per claim (labkit.studies.post_beside): the post's figure, the book's, the
    verdict and why, a link to the page."""
    from labkit.studies import post_beside

    e = html.escape
    body = []
    for r in post_beside.rows(post_beside.runs_by_name(run_paths)):
        cls = {"holds": "ok", "reversed": "miss"}.get(r["verdict"], "")
        link = f"<a class='labkit-page' href='{e(r['page'])}.html'>page {e(r['page'][:2])}</a>" if r["page"] else "—"
        body.append(f"<tr><td>{e(r['claim'])}</td><td>{e(r['post'])}</td><td>{e(r['book'])}</td>"
                    f"<td class='labkit-verdict'><span class='{cls}'>{e(r['verdict'])}</span>: {e(r['why'])}</td>"
                    f"<td>{link}</td></tr>")
    return ("<section class='labkit-claims'><h2 id='post-beside-book'>The post beside the book</h2><table "
            "class='labkit-claims'><tr><th>the post's claim</th><th>the post (RTX 3090)</th>"
            "<th>the book (committed runs)</th><th>verdict</th><th>page</th></tr>" + "".join(body) + "</table></section>")


def figure_html(fig, alt: str, wide: bool = False) -> str:
    import base64
    import io

    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    data = base64.b64encode(buf.getvalue()).decode()
    return f"<img class='labkit-figure{' labkit-wide' if wide else ''}' alt='{html.escape(alt)}' src='data:image/png;base64,{data}'>"


def _terms_html(terms: dict) -> str:
    return "".join(f"<div><dt>{html.escape(k)}</dt> <dd>{html.escape(v)}</dd></div>" for k, v in terms.items())


def public_remote() -> str | None:
    """The repository's public address, where the checkout has one: git's `origin` when it is an https URL
    (user, password and query dropped) or an ssh address of the form git@host:owner/name; None for a local path, any
    other ssh form (it may name a build machine) or no remote. A page never shows a build machine's path."""
    import subprocess
    from urllib.parse import urlsplit, urlunsplit

    try:
        url = subprocess.run(["git", "remote", "get-url", "origin"], capture_output=True, text=True, timeout=10,
                             cwd=Path(__file__).resolve().parent).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    if url.startswith("https://"):
        parts = urlsplit(url)
        host = parts.netloc.rsplit("@", 1)[-1]
        return urlunsplit(("https", host, parts.path, "", "")) if host and parts.path.strip("/") else None
    if re.fullmatch(r"git@[\w.-]+:[\w.-]+/[\w.-]+", url):
        return url
    return None


def reproduce_html(commit: str | None, remote: str | None = None) -> str:
    e = html.escape
    at = f"commit <code>{e(commit)}</code>" if commit else "this checkout"
    repo = f"a clone of <code>{e(remote)}</code>" if remote else "a clone of the <code>labkit</code> repository"
    return (f"<section class='labkit-box'><h2>Reproduce</h2><p>From {repo} at {at}: the book (CPU: replays the "
            f"GPU runs)</p><pre>{e(BOOK_COMMAND)}</pre><p>the tests</p><pre>{e(TEST_COMMAND)}</pre>"
            f"<p>on a GPU, the evidence pass (GPU tests, every notebook live), then <code>labkit curate</code></p>"
            f"<pre>{e(GPU_COMMAND)}</pre></section>")


def goals_html(runs: dict) -> str:
    """The goals statement (labkit.studies.front.goals_by_notebook): the total, then per notebook its count and
    each missed goal under its protocol by name, and in a fold each with its figure, as the notebook's verdict
    judges it."""
    from labkit.studies import front

    goals = front.goals_by_notebook(runs)
    if not goals:
        return ""
    # the missed goals by name, then (one click away) each with its figure and target, as the verdicts print them
    short = "".join(f"<li>{html.escape(line)}</li>" for line in front.goal_lines(goals, figures=False))
    full = "".join(f"<li>{html.escape(line)}</li>" for line in front.goal_lines(goals))
    return (f"<section class='labkit-goals'><p><strong>{html.escape(front.goals_sentence(goals))}</strong></p>"
            f"<ul>{short}</ul><details><summary>each missed goal with its figure and target</summary><ul>{full}</ul>"
            f"</details></section>")


def front_html(run_paths: dict) -> str:
    """The post, the answer, the goals, the table and the figure (with what its torch.compile points are), read
    from the runs (labkit.studies.front); the glossary and the reproduce box beside each other."""
    from labkit.records import post
    from labkit.studies import front

    runs = front.runs_by_name(run_paths)
    rows = front.headline_rows(runs)
    fig = front.figure(runs)
    bars = front.l1_40_figure(runs)
    about = post.about()
    sentences = (f"<p class='labkit-question'><strong>The question.</strong> {html.escape(front.QUESTION)}</p><ul "
                 f"class='labkit-bullets'>" + "".join(f"<li>{html.escape(t)}</li>" for t in front.bullets(runs, rows))
                 + "</ul>")
    ids = front.run_ids(runs)
    note = front.figure_note(runs) if fig else None
    # each run by its name and hash, as the notebooks cite them (the full id, with its date and GPU,
    # on hover: data/runs/<id>)
    codes = ", ".join(f"<code title='data/runs/{html.escape(i)}'>{html.escape(short)}</code>" for i, short in ids)
    source = (f"<p class='labkit-build labkit-figure-note'>{html.escape(note) + ' ' if note else ''}Table, goals "
              f"and figure from committed GPU runs {codes}; every ratio is within one run and names its protocol.</p>"
              if ids else "")
    box = (f"<section class='labkit-box labkit-repro3'><pre>git clone {html.escape(public_remote() or 'labkit')}"
           f"\n{html.escape(BOOK_COMMAND)}\n# the post: \u201c{html.escape(about['title'])}\u201d, "
           f"{html.escape(about['author'])}, {html.escape(about['date'])}</pre></section>")
    return (f"<section class='labkit-answer'>{sentences}</section>{box}"
            + (figure_html(bars, "L1/40: every method's time, bit-identical ones marked, the post's beside") +
               "<p class='labkit-figure-note'>Every method notebook 03 timed at L1/40, in one run under both "
               "protocols; the post's own RTX 3090 medians (graph replay) beside where it timed the same method. "
               "Read across a row: the book's GPU and torch against the post's.</p>" if bars else "")
            + post_beside_html(run_paths)
            + (figure_html(fig, "time against row shape, forward and forward + backward", wide=True) +
               "<p class='labkit-figure-note'>The drop-in across row shapes at a fixed 2^24 values (lines), L1/40 "
               "itself marked: left of the shaded edge, per-call host cost and not the kernel sets the time, so "
               "ratios there measure launches.</p>" if fig else "")
            + f"{goals_html(runs)}{headline_table_html(rows)}" + source
            + f"<div class='labkit-two'><section class='labkit-box'><h2>Words used throughout</h2><dl>"
              f"{_terms_html(front.PROTOCOLS)}{_terms_html(front.GLOSSARY)}</dl></section>"
              f"{reproduce_html(_commit(), public_remote())}</div>")


def _front_title(run_paths: dict) -> str:
    from labkit.studies import front

    return front.title(front.runs_by_name(run_paths))


def _commit() -> str | None:
    """The build's commit as runs record theirs (labkit.records.run: LABKIT_GIT_COMMIT wins on a copied tree),
    marked when the working tree differs from it."""
    from labkit.records.run import _git_state

    state = _git_state()
    head = (state.get("git_commit") or "")[:12] or None
    return head and head + (" (with uncommitted changes)" if state.get("git_dirty") else "")


def write_index(out_dir: Path, results: list, params: dict) -> Path:
    """The front page (index.html): the post and what the book found (front_html), then per notebook in reading
    order its title (linking its page), question, headline result and where the result comes from; and book.json
    for machines."""
    out_dir = Path(out_dir)
    infos = []
    for r in results:
        executed = Path(r.executed)
        infos.append(page_info(executed, out_dir) if executed.exists() else None)
    ok = sum(r.status == "ok" for r in results)
    build = {k: v for k, v in params.items() if k != "output_dir"}
    run_paths = {i.run.name: i.run.path for i in infos if i and i.run}
    entries = "\n".join(_entry_html(r, i) for r, i in zip(results, infos))
    page = (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
            f"<meta name='viewport' content='width=device-width, initial-scale=1'><link rel='icon' href='data:,'>"
            f"<title>{html.escape(BOOK_TITLE)}</title><style>{INDEX_CSS}</style></head><body><main>"
            f"<h1>{html.escape(_front_title(run_paths))}</h1>{front_html(run_paths)}"
            f"<h2 id='notebooks'>The notebooks</h2>"
            f"<p class='labkit-build'>Built {html.escape(_when(_dt.datetime.now(_dt.timezone.utc).isoformat()))} "
            f"with {parameters_html(build)}: {ok}/{len(results)} notebooks ran. Read in this order; the post beside "
            f"the book follows the list.</p>"
            f"<ol class='labkit-book'>{entries}</ol>{post_summary_html(results, infos)}"
            f"<p class='labkit-build'>For machines: <a href='book.json'>book.json</a> (what ran, with which "
            f"parameters, and each page's headline).</p></main></body></html>")
    target = out_dir / "index.html"
    atomic_write_bytes(target, page.encode())
    notebooks = [{**asdict(r), "page": asdict(i) if i else None} for r, i in zip(results, infos)]
    atomic_write_bytes(out_dir / "book.json", json.dumps({"params": build, "notebooks": notebooks},
                                                         indent=1, default=str).encode())
    return target
