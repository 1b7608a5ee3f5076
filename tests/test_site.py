"""The static site (labkit.site): offline pages with a banner, a front page whose headlines come from the records,
and a headless-Chromium pass over the built book (marker `browser`).

The browser is Debian's `chromium` driven by Playwright for Python with `executable_path` (Playwright's own browser
download is not reachable from CI); without either, the browser test skips and says why.
"""
import functools
import http.server
import json
import os
import re
import shutil
import threading
from pathlib import Path
from urllib.parse import unquote, urlparse

import nbformat
import pytest

from labkit import book, site
from labkit.records.text import speed
from labkit.records.run import committed_runs, load_run
from labkit.studies.catalog import notebook_runs, summarize_run

NOTEBOOKS = book.notebooks()
CHROMIUM = os.environ.get("LABKIT_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
# notebooks whose markdown holds formulas: they must render as MathML, never as TeX text
FORMULA_PAGES = ("03_timing", "04_protocol_correction")
# an attribute or CSS url() that makes the browser fetch something from another host
EXTERNAL_RESOURCE = re.compile(r"""(?:\b(?:src|srcset|data|poster|action)\s*=\s*["']?\s*(?:https?:)?//)"""
                               r"""|(?:<link\b[^>]*\bhref\s*=\s*["']?\s*(?:https?:)?//)"""
                               r"""|(?:url\(\s*["']?\s*(?:https?:)?//)|(?:import\s*\(\s*["'](?:https?:)?//)""",
                               re.IGNORECASE)


# --- units: no build needed ---------------------------------------------------------------------------------------

def test_tex_becomes_mathml_without_namespace_url():
    out = site.tex_to_mathml(r"\lvert r_i - c_i\rvert \le \mathrm{atol} + \mathrm{rtol}\,\lvert c_i\rvert")
    assert out.startswith("<math") and "<msub>" in out and "http" not in out
    assert 'display="block"' in site.tex_to_mathml(r"x^2", "block")


def test_tex_that_does_not_convert_stays_visible_as_tex():
    # latex2mathml leaves \bigl\lvert as the text "\lvert": that must not pass for a formula
    out = site.tex_to_mathml(r"\bigl\lvert x \bigr\rvert")
    assert "tex-fallback" in out and r"\bigl\lvert" in out


@pytest.mark.parametrize("run_dir", committed_runs(), ids=[p.name for p in committed_runs()])
def test_headline_numbers_come_from_the_run(run_dir):
    line = site.run_headline(run_dir)
    s = summarize_run(run_dir)
    assert s["gpu"] in line and s["torch"] in line
    records = load_run(run_dir)["records"]
    if "bit_identity" in s:
        assert f"{s['bit_identity']['identical']}/{s['bit_identity']['cases']} " in line
    if s["name"] in ("timing", "parallel_stats"):
        from labkit.records.text import ratio
        from labkit.studies.timing import l1_40_case

        case = l1_40_case(records["timing"])
        t = case["timing"]["A"]
        method = "chain" if s["name"] == "parallel_stats" else None
        if method:
            assert f"chain {t['stats']['chain']['median_ms']:.3g} ms" in line
            assert ratio(t["ratio_vs_baseline"]["chain"]["median"]) + " native" in line
        else:
            assert f"native {t['stats']['native']['median_ms']:.3g} ms" in line


def test_headline_follows_the_record_not_a_typed_number(tmp_path):
    """A copy of the newest bit-identity run with one case made non-identical: the headline counts it."""
    src = committed_runs("bit_identity")[-1]
    dst = tmp_path / src.name
    shutil.copytree(src, dst)
    rec = json.loads((dst / "bit_identity.json").read_text())
    rec["cases"][0]["identical"] = False
    (dst / "bit_identity.json").write_text(json.dumps(rec))
    n = len(rec["cases"])
    assert f"{n - 1}/{n} bit-identical" in site.run_headline(dst)


@pytest.mark.parametrize("name", ["parallel_stats", "dropin", "training", "kernelbench_timing"])
def test_the_front_pages_goals_are_the_ones_the_verdict_prints(name):
    """Each goal the front page counts is a line of its notebook's verdict, met or missed alike (one list, so the
    front page cannot say fewer goals were missed than the verdict does)."""
    from labkit.records.session import newest_complete_run
    from labkit.studies import dropin, kernelbench_timing, parallel_stats, training
    from labkit.studies.goals import goal_line, tally

    # KernelBench's timing: the newest committed run holding it, as the front page and notebook 07 read it
    records = (load_run(kernelbench_timing.newest_run()) if name == "kernelbench_timing"
               else newest_complete_run(name))["records"]
    study = {"parallel_stats": parallel_stats, "dropin": dropin, "training": training,
             "kernelbench_timing": kernelbench_timing}[name]
    goals = study.goals(records)
    assert goals and all(g["met"] in (True, False, None) and g["protocol"] != "" for g in goals)
    if name == "parallel_stats":
        lines = study.verdict_lines(records["timing"], records["stage_breakdown"], records["run"]["provenance"], "s",
                                    records["bit_identity"])
        count = tally(goals)
        assert f"goals: {count['met']} of {count['judged']} met" in "\n".join(lines)
    else:
        lines = (study.verdict_lines(records["kernelbench_timing"], "s") if name == "kernelbench_timing"
                 else study.verdict_lines(records, "s"))
        assert [ln for ln in lines if ln.endswith(("met)", "missed)", "not judged)"))] == [goal_line(g) for g in goals]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_every_notebook_states_its_question(path):
    question = nbformat.read(path, as_version=4).metadata.get("labkit", {}).get("question", "")
    assert question.endswith("?") and len(question) > 20, f"{path.name}: metadata.labkit.question is {question!r}"


# --- the built book (shared CPU build, conftest.book_build) -------------------------------------------------------

@pytest.fixture(scope="module")
def book_dir(book_build):
    out, results = book_build
    failed = {n: r.error for n, r in results.items() if r.status != "ok"}
    assert not failed, failed
    return out


@pytest.mark.notebook
@pytest.mark.slow
def test_pages_fetch_nothing_from_outside(book_dir):
    pages = sorted(book_dir.glob("*.html"))
    assert len(pages) == len(NOTEBOOKS) + 1
    for page in pages:
        text = page.read_text()
        found = EXTERNAL_RESOURCE.findall(text)
        assert not found, f"{page.name} references external resources: {found[:5]}"
        assert "cdnjs" not in text and "unpkg.com" not in text and "MathJax" not in text, page.name


@pytest.mark.notebook
@pytest.mark.slow
def test_front_page_headlines_and_sources(book_dir):
    index = (book_dir / "index.html").read_text()
    positions = []
    for path in NOTEBOOKS:
        info = site.page_info(book_dir / path.name, book_dir)
        link = f"<a href='{path.stem}.html'>"
        assert link in index and ".ipynb</a>" not in index, path.name
        positions.append(index.index(link))
        assert site.html.escape(info.headline) in index
        assert site.html.escape(info.question) in index
        if path.stem in notebook_runs():  # a replayed run: its id, GPU and torch on the front page and on the page
            assert info.run is not None, f"{path.name}: no run found for the front page"
            assert info.run.run_id in index and info.run.run_id in (book_dir / f"{path.stem}.html").read_text()
            assert info.headline == site.run_headline(Path(info.run.path)) and info.headline_source == "run record"
        else:
            assert info.run is None and info.headline == info.verdict.splitlines()[0]
    assert positions == sorted(positions), "front page is not in reading order"


@pytest.mark.notebook
@pytest.mark.slow
def test_front_page_is_the_post_with_numbers_from_the_runs(book_dir):
    """The post named, the answer in sentences, the goals counted from every run's verdict, the headline table and
    figure (with what its torch.compile points are) from the runs' records, the protocols and glossary defined, the
    reproduce box with the two commands and the GPU pass."""
    from labkit.records.post import about
    from labkit.studies import front

    index = (book_dir / "index.html").read_text()
    post = about()
    assert site.html.escape(post["title"]) in index and post["date"] in index
    runs = front.runs_by_name()
    rows = front.headline_rows(runs)
    assert {r["protocol"] for r in rows} == set(front.PROTOCOLS)  # the glossary's two names, nothing else
    for r in rows:  # each row's shape and numbers as the table prints them, from the record
        assert f"<td>{site.html.escape(r['shape'])}</td>" in index and "x" in r["shape"], r
        assert f"<td>{site._sig(r['ms'])}</td><td>{speed(r['x torch eager'])}</td>" in index, r
        assert re.fullmatch(r"\d+/\d+ .*", r["bit-identical"] or ""), r  # k/n from the records, not a word
    # the goals statement: every goal each run's verdict judges, counted from the same list the verdict prints
    goals = front.goals_by_notebook(runs)
    assert site.html.escape(front.goals_sentence(goals)) in index
    for study, _, _ in front.GOAL_RUNS:
        judged = study.goals(load_run(runs[study.RUN_NAME])["records"])
        g = next(g for g in goals if g["study"] == study.RUN_NAME)  # one run can hold two studies' records
        assert (g["met"], g["missed"]) == (sum(x["met"] is True for x in judged),
                                           sum(x["met"] is False for x in judged))
        for x in judged:
            if x["met"] is False:
                assert site.html.escape(f"{x['brief']} {x['short']} (goal {x['target']})") in index, x
    note = front.figure_note(runs)
    assert note and site.html.escape(note) in index
    assert "<img class='labkit-figure'" in index
    for term in (*front.PROTOCOLS, *front.GLOSSARY):
        assert f"<dt>{site.html.escape(term)}</dt>" in index
    for command in (site.BOOK_COMMAND, site.TEST_COMMAND, site.GPU_COMMAND):  # README's: tests/test_readme.py
        assert site.html.escape(command) in index
    assert index.index("labkit-headline") < index.index("id='notebooks'")
    # the list straight after its heading; the post beside the book and the departures after the list
    assert index.index("<ol class='labkit-book'>") < index.index("class='labkit-post'")
    assert index.index("<ol class='labkit-book'>") < index.index("labkit-departures")


def test_the_reproduce_box_names_the_repository_and_never_a_local_path(monkeypatch):
    import subprocess

    def remote(url):
        return lambda *a, **k: subprocess.CompletedProcess(a, 0, stdout=url + "\n", stderr="")
    for url, shown in (("https://user:token@example.org/lab/wide-ln.git", "https://example.org/lab/wide-ln.git"),
                       ("https://user:p@ss@example.org/lab/wide-ln.git?token=x", "https://example.org/lab/wide-ln.git"),
                       ("git@example.org:lab/wide-ln.git", "git@example.org:lab/wide-ln.git"),
                       ("me@buildbox:/home/me/wide-ln", None), ("/work/main", None), ("", None)):
        monkeypatch.setattr(subprocess, "run", remote(url))
        assert site.public_remote() == shown
    box = site.reproduce_html("0123456789ab", "https://example.org/lab/wide-ln.git")
    assert "a clone of <code>https://example.org/lab/wide-ln.git</code> at commit <code>0123456789ab</code>" in box
    assert "From a clone of the <code>labkit</code> repository at commit" in site.reproduce_html("0123456789ab", None)


def _planted_page_leaks(tmp_path, prose: str, code: str, output) -> list[str]:
    """What the leak check finds on a one-notebook page exported as the book exports it: `prose` in markdown, a code
    cell with `output`; read as PAGE_FACTS reads a page (no styles, scripts or code inputs)."""
    from bs4 import BeautifulSoup

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell(f"# 99 — Planted?\n\n{prose}"),
                nbformat.v4.new_code_cell(code, outputs=[output])]
    executed = tmp_path / "99_planted.ipynb"
    nbformat.write(nb, executed)
    soup = BeautifulSoup(site.export_page(executed, tmp_path).read_text(), "html.parser")
    for tag in soup(["style", "script"]) + soup.select(".jp-CodeCell .jp-InputArea, pre.labkit-code"):
        tag.decompose()
    return site.leaks(soup.get_text(" "))


def test_leak_check_flags_a_planted_warning(tmp_path):
    """A page whose output carries a warning (or a traceback, an import error, a build path) fails the check."""
    found = _planted_page_leaks(tmp_path, "Question: does the check see a warning? Seeds [0, 1, 2] in prose.",
                                "x = ['eager', 'torchscript']  # code: not prose",
                                nbformat.v4.new_output("stream", name="stderr",
                                                       text="/tmp/x.py:3: DeprecationWarning: planted\n"))
    assert any(f.startswith("a warning") for f in found) and any(f.startswith("a build path") for f in found)
    # rendered markdown is read (its list is found); the code cell's input is not (its list is not)
    lists = [f for f in found if f.startswith("a raw list")]
    assert len(lists) == 1 and "Seeds [0, 1, 2]" in lists[0] and "'eager'" not in lists[0]
    assert site.leaks("mean 0.299 ms, 27.8x [27, 27.6]; torch.tensor([0.00010000000474974513])") == []
    assert site.leaks("methods ['eager', 'torchscript', 'flat']") and site.leaks("at [16, 64, 256, 256]")
    assert site.leaks("min margin 0.913771909794152")


def test_leak_check_flags_a_planted_issue_reference(tmp_path):
    """A page that cites the project's tracker ("issue 12"), the machine it was built on or a VM kernel build string
    fails the check; a GPU that issues loads does not."""
    found = _planted_page_leaks(tmp_path, "Question: does the check see a tracker reference? The goal is issue 12's.",
                                "print('goal')", nbformat.v4.new_output("stream", name="stdout",
                                                                        text="goal: <= 0.33 ms\n"))
    assert len(found) == 1 and found[0].startswith("an issue-tracker reference") and "issue 12" in found[0]
    for text in ("Issue 24's goals", "issues 15 and 22", "as the issue's table says", "issue #7"):
        assert site.leaks(text), text
    for text in ("this workplace", "the tag could not be fetched here", "Linux-6.18.44-fc-v1147-gpu-x86_64-with-glibc2.39",
                 "kernel 6.18.44-fc-v1147-gpu", "6.8.0-45-generic"):
        assert site.leaks(text), text
    assert site.leaks("32 LDS.128 issued in series; the warp issues 32 loads; the s1 warp issues 2 reads + 4 products; torch 2.11.0+cu130, 2.13.0+cpu; "
                      "Linux (x86_64, glibc 2.39); goal: <= 0.33 ms") == []


@pytest.mark.notebook
@pytest.mark.slow
def test_replaying_notebooks_name_the_newest_committed_run(book_dir):
    owned = notebook_runs()
    for path in NOTEBOOKS:
        info = site.page_info(book_dir / path.name, book_dir)
        if path.stem in owned:
            assert info.run is not None and info.run.name == owned[path.stem], path.name
            newest = committed_runs(info.run.name)[-1].name
            assert info.run.run_id == newest and not info.run.live, path.name


@pytest.mark.notebook
@pytest.mark.slow
def test_pages_link_their_neighbours_in_reading_order(book_dir):
    pages = sorted(p.stem for p in book_dir.glob("[0-9][0-9]_*.html"))
    assert len(pages) >= 2
    for i, stem in enumerate(pages):
        text = (book_dir / f"{stem}.html").read_text()
        nxt = re.findall(r"""href=["']([^"']+)\.html["'] rel=["']next""", text)
        prev = re.findall(r"""href=["']([^"']+)\.html["'] rel=["']prev""", text)
        assert nxt == pages[i + 1:i + 2] and prev == pages[max(i - 1, 0):i], stem


@pytest.mark.notebook
@pytest.mark.slow
def test_long_audit_list_is_linked_not_printed(book_dir):
    page = (book_dir / "04_protocol_correction.html").read_text()
    rows = json.loads((book_dir / "04_audit_records.json").read_text())
    assert len(rows) > 10 and (book_dir / "04_audit_records.csv").is_file()
    assert 'href="04_audit_records.csv"' in page and 'href="04_audit_records.json"' in page
    shown = page[page.index('href="04_audit_records.json"'):]
    shown = shown[:shown.index("</table>")]
    assert shown.count("<tr") == 1 + 10, "the page shows more than the first ten records"


# --- the browser --------------------------------------------------------------------------------------------------

class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def server(book_dir):
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                            functools.partial(_QuietHandler, directory=str(book_dir)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(scope="module")
def browser():
    # CI sets LABKIT_REQUIRE_BROWSER=1: there a missing browser is a failure, not a skip
    required = os.environ.get("LABKIT_REQUIRE_BROWSER") == "1"
    if not CHROMIUM:
        (pytest.fail if required else pytest.skip)("no chromium executable (apt-get install chromium; .ci/run installs it)")
    if required:
        import playwright.sync_api  # noqa: F401  (an ImportError fails the test)
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install playwright)")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True)
        yield b
        b.close()


# in-page checks: links, images, tables, formulas, folded sources, the banner
PAGE_FACTS = r"""() => {
  const links = [...document.querySelectorAll('a[href]')].map(a => a.getAttribute('href'));
  const ids = new Set([...document.querySelectorAll('[id]')].map(e => e.id));
  const images = [...document.images].map(i => ({src: i.src.slice(0, 40), ok: i.complete && i.naturalWidth > 0}));
  const pipeParagraphs = [...document.querySelectorAll('p')].map(p => p.innerText.trim())
      .filter(t => t.startsWith('|') || t.includes('|---') || t.includes('|:--'));
  const raggedTables = [...document.querySelectorAll('table')].filter(t => {
      const widths = [...t.rows].map(r => [...r.cells].reduce((n, c) => n + c.colSpan, 0));
      return t.rows.length === 0 || widths.some(w => w !== widths[0]);
  }).map(t => t.outerHTML.slice(0, 200));
  // columns saying the same in every row of a table of 3+ rows (a grid's axis columns, 2^12 or 4096, aside)
  const repeatedColumns = [...document.querySelectorAll('table')].flatMap(t => {
      const head = [...(t.tHead?.rows[0]?.cells || [])].map(c => c.innerText.trim());
      const rows = [...(t.tBodies[0]?.rows || [])].map(r => [...r.cells].map(c => c.innerText.trim()))
          .filter(r => r.length === head.length);
      if (rows.length < 3) return [];
      const out = [];
      head.forEach((h, i) => head.forEach((g, j) => {
          if (j <= i || /^(2\^\d+|\d[\d.,e+-]*)$/.test(h) || /^(2\^\d+|\d[\d.,e+-]*)$/.test(g)) return;
          const a = rows.map(r => r[i]);
          if (a.some(v => v) && rows.every(r => r[j] === r[i])) out.push(`${h} = ${g}`);
      }));
      return out;
  });
  const NUMBER = /^[-+−]?(\d{1,3}(,\d{3})+|\d+)?\.\d+(e[-+]?\d+)?x?$/;  // a decimal number, maybe a ratio
  const maths = [...document.querySelectorAll('math')];
  const body = document.body.innerText;
  const readable = document.body.cloneNode(true);
  // what a reader reads: outputs, banners and rendered markdown (which nbconvert puts inside .jp-InputArea too);
  // only code is left out: code cells' input and the code listings outputs show (pre.labkit-code: kernel sources)
  readable.querySelectorAll('.jp-CodeCell .jp-InputArea, pre.labkit-code, style, script').forEach(e => e.remove());
  return {
    readable: readable.textContent,
    boolCells: [...document.querySelectorAll('td')].filter(td => /^(True|False)$/.test(td.innerText.trim())).length,
    numberCells: [...document.querySelectorAll('td:not(.labkit-quoted)')].map(td => td.innerText.trim())
        .filter(t => NUMBER.test(t)),  // a figure quoted from the post keeps the digits it was written with
    wideTables: [...document.querySelectorAll('table')].filter(t => t.getBoundingClientRect().right >
                                                            window.innerWidth + 1).length,
    width: document.documentElement.scrollWidth,
    firstEntryAt: (e => e ? e.getBoundingClientRect().top + window.scrollY : null)(
        document.querySelector('table.labkit-claims, ol.labkit-book > li')),  // the first link to a page: the claims table or the list
    links, ids: [...ids], images, pipeParagraphs, raggedTables, repeatedColumns,
    tables: document.querySelectorAll('table').length,
    maths: maths.length, flatMaths: maths.filter(m => m.getBoundingClientRect().width === 0).length,
    texFallbacks: document.querySelectorAll('code.tex-fallback').length,
    rawTex: (body.match(/\$\$|\\(mathrm|lvert|frac|underbrace|text)\b/g) || []).length,
    details: [...document.querySelectorAll('details')].map(d => ({summary: d.querySelector('summary')?.innerText,
                                                                   open: d.open})),
    banner: document.getElementById('labkit-banner')?.innerText || null,
    height: document.documentElement.scrollHeight,
  };
}"""


def _visit(page, url: str, allowed_netloc: str | None) -> tuple[dict, list[str]]:
    """Open `url`; return its facts and every problem seen while loading it."""
    problems = []
    handlers = {
        "console": lambda m: m.type == "error" and problems.append(f"console error: {m.text}"),
        "pageerror": lambda e: problems.append(f"page error: {e}"),
        "requestfailed": lambda r: problems.append(f"failed request: {r.url} ({r.failure})"),
        "response": lambda r: r.status >= 400 and problems.append(f"HTTP {r.status}: {r.url}"),
        "request": lambda r: (urlparse(r.url).scheme in ("http", "https", "ws", "wss")
                              and urlparse(r.url).netloc != allowed_netloc
                              and problems.append(f"external request: {r.url}")),
    }
    for event, fn in handlers.items():
        page.on(event, fn)
    try:
        page.goto(url, wait_until="load")
        page.wait_for_timeout(50)  # late console errors from inline scripts
        facts = page.evaluate(PAGE_FACTS)
    finally:
        for event, fn in handlers.items():
            page.remove_listener(event, fn)
    return facts, problems


def _link_problems(facts: dict, page_file: Path, book_dir: Path) -> list[str]:
    problems, ids = [], set(facts["ids"])
    for href in facts["links"]:
        parsed = urlparse(href)
        if parsed.scheme in ("http", "https", "mailto"):
            continue  # prose links to the post or GitHub: allowed, never followed
        if parsed.scheme:
            problems.append(f"link with scheme {parsed.scheme}: {href}")
            continue
        if parsed.path:
            target = (page_file.parent / unquote(parsed.path)).resolve()
            if not target.is_file() or book_dir.resolve() not in target.parents:
                problems.append(f"broken link: {href}")
                continue
        # the HTML spec tries the fragment as written, then percent-decoded (nbconvert's heading ids are encoded)
        if parsed.fragment and not parsed.path and not {parsed.fragment, unquote(parsed.fragment)} & ids:
            problems.append(f"broken anchor: {href}")
    return problems


VIEWPORT = {"width": 1400, "height": 900}  # a reader's screen (issue 23)
MAX_PAGE_PX = 12000
MAX_SIG_DIGITS = 3  # labkit.display.cell_text gives three (issue 23); a study formatting its own cells must too


def _sig_digits(text: str) -> int:
    mantissa = text.rstrip("x").replace(",", "").lstrip("+-\u2212").split("e")[0]
    return len(mantissa.replace(".", "").lstrip("0"))


def overprecise(cells: list[str]) -> list[str]:
    """Decimal table cells with more than MAX_SIG_DIGITS significant digits, except cell_text's near-miss of a
    small whole number (below 10, within rounding of it at three figures, at most six digits: 0.99982). Whole
    numbers (counts, 4,194,304) never come here: the page script passes decimals only."""
    out = []
    for c in cells:
        digits = _sig_digits(c)
        if digits <= MAX_SIG_DIGITS:
            continue
        v = float(c.rstrip("x").replace(",", "").replace("\u2212", "-"))
        if not (abs(v) < 10 and digits <= 6 and float(f"{v:.3g}") == round(v)):
            out.append(c)
    return out


def test_overprecise_cells_are_found_and_near_misses_kept():
    assert overprecise(["0.08622809021", "1.000000073", "27.8x", "0.2989", "0.99982", "4,194,304.5", "30.0"]) == \
        ["0.08622809021", "1.000000073", "0.2989", "4,194,304.5"]
    assert overprecise(["0.9999", "2.00013", "0.0862"]) == []


def _page_problems(name: str, facts: dict) -> list[str]:
    problems = [f"image did not render: {i['src']}" for i in facts["images"] if not i["ok"]]
    problems += [f"table syntax left as text: {t[:80]!r}" for t in facts["pipeParagraphs"]]
    problems += [f"ragged table: {t}" for t in facts["raggedTables"]]
    problems += [f"columns repeat each other: {c}" for c in facts["repeatedColumns"]]
    if facts["texFallbacks"] or facts["rawTex"] or facts["flatMaths"]:
        problems.append(f"formulas not rendered: {facts['texFallbacks']} TeX fallbacks, {facts['rawTex']} raw TeX "
                        f"fragments, {facts['flatMaths']} empty <math> boxes")
    problems += site.leaks(facts["readable"])
    if facts["boolCells"]:
        problems.append(f"{facts['boolCells']} table cells say True/False (check marks expected)")
    if facts["wideTables"] or facts["width"] > VIEWPORT["width"]:
        problems.append(f"scrolls sideways at {VIEWPORT['width']} px: {facts['wideTables']} tables wider, page "
                        f"{facts['width']} px")
    if facts["height"] > MAX_PAGE_PX:
        problems.append(f"{facts['height']} px tall (at most {MAX_PAGE_PX} at {VIEWPORT['width']} px)")
    problems += [f"table cell with more than {MAX_SIG_DIGITS} significant digits: {c}"
                 for c in overprecise(facts["numberCells"])]
    if name == "index" and (facts["firstEntryAt"] is None or facts["firstEntryAt"] > 1.5 * VIEWPORT["height"]):
        problems.append(f"the front page's first links to the pages (the post beside the book) start at {facts['firstEntryAt']} px (at most 1.5 "
                        f"screens, {1.5 * VIEWPORT['height']:.0f} px)")
    if name != "index" and not (facts["banner"] and "Parameters" in facts["banner"]
                                and re.search(r"Replays|Ran live|Computed when|No GPU run", facts["banner"])):
        problems.append(f"no banner saying live/replayed and the parameters: {facts['banner']!r}")
    return problems


@pytest.mark.notebook
@pytest.mark.browser
@pytest.mark.slow
def test_site_in_headless_chromium(book_dir, server, browser):
    shots = book_dir / "screenshots"
    shots.mkdir(exist_ok=True)
    netloc = urlparse(server).netloc
    page = browser.new_page(viewport=VIEWPORT)
    problems, seen = {}, {}
    names = ["index"] + [p.stem for p in NOTEBOOKS]
    for name in names:
        facts, trouble = _visit(page, f"{server}/{name}.html", netloc)
        trouble += _link_problems(facts, book_dir / f"{name}.html", book_dir)
        trouble += _page_problems(name, facts)
        if trouble:
            problems[name] = trouble
        seen[name] = facts
        if name == "index":
            page.screenshot(path=str(shots / "front.png"), full_page=True)
        elif name in ("03_timing", "08_using_it"):
            page.screenshot(path=str(shots / f"{name}.png"))
            if name == "08_using_it":  # the longest page, whole: what a reader scrolls through
                page.screenshot(path=str(shots / f"{name}_full.png"), full_page=True)
    # the same book from a folder (file://): nothing may reach a network at all
    for name in ("index", "04_protocol_correction"):
        facts, trouble = _visit(page, (book_dir / f"{name}.html").as_uri(), None)
        if trouble:
            problems[f"file://{name}"] = trouble
    page.close()
    assert not problems, json.dumps(problems, indent=1)[:6000]

    # the checks saw what they were meant to see (so they could have failed)
    index_pages = [h for h in seen["index"]["links"] if h.endswith(".html")]
    assert set(index_pages) >= {f"{p.stem}.html" for p in NOTEBOOKS}
    assert sum(len(f["images"]) for f in seen.values()) >= 4, "the book's figures are missing"
    assert all(seen[n]["maths"] > 0 for n in FORMULA_PAGES), {n: seen[n]["maths"] for n in FORMULA_PAGES}
    assert sum(f["tables"] for f in seen.values()) > 50
    # notebook 06: every source file once, folded
    files = [d for d in seen["06_kernel_definitions"]["details"]
             if not d["summary"].startswith(("Verdict", "Departs"))]  # the banner's own folds
    summaries = [d["summary"] for d in files]
    assert summaries and len(summaries) == len(set(summaries)), summaries
    assert not any(d["open"] for d in files)
    assert sum("welford_ln.cuh" in s for s in summaries) == 1, summaries
    # the audit's full list is linked, not printed: notebook 04 stays a readable length
    assert seen["04_protocol_correction"]["height"] < 20000, seen["04_protocol_correction"]["height"]
    assert all((shots / f).stat().st_size > 0 for f in ("front.png", "03_timing.png", "08_using_it_full.png"))
    print(f"screenshots: {shots / 'front.png'}, {shots / '03_timing.png'}, {shots / '08_using_it_full.png'}")


def test_the_figure_note_says_how_each_sweep_compiled_from_its_commit():
    """08's and 10's compiled points: per shape with dynamic=False where the run's commit descends from the fix
    (git decides), recompiled with dynamic shapes before it, unknown without the commit in git."""
    import subprocess

    from labkit.records.run import REPO_ROOT
    from labkit.studies import front

    try:
        subprocess.run(["git", "cat-file", "-e", front.STATIC_COMPILE_SINCE], cwd=REPO_ROOT, check=True,
                       capture_output=True)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("no git history here")
    runs = front.runs_by_name()
    assert front._static_compile(runs["training"]) is True  # the committed run is from after the fix
    parent = subprocess.run(["git", "rev-parse", f"{front.STATIC_COMPILE_SINCE}^"], cwd=REPO_ROOT, check=True,
                            capture_output=True, text=True).stdout.strip()
    old = {"run": {"provenance": {"git_commit": parent}}}
    unknown = {"run": {"provenance": {"git_commit": "0" * 40}}}
    real = front._records
    try:
        front._records = lambda p: old if p == "old" else unknown
        assert front._static_compile("old") is False and front._static_compile("unknown") is None
        assert "recompiled it with the sizes that changed" in front._compile_how({"dropin": "old", "training": "old"})
    finally:
        front._records = real


def test_the_front_pages_goal_list_names_misses_and_folds_their_figures(monkeypatch):
    """goals_html: each notebook's line names its missed goals by brief under their protocol; the fold below has the
    same lines with each goal's figure and target, as the verdict prints them."""
    from labkit.studies import front

    goals = [{"notebook": "07", "what": "L1/40", "met": 1, "judged": 3, "not judged": 0, "missed": 2,
              "protocols": ["graph replay (protocol A)"],
              "missed_by_protocol": {
                  "graph replay (protocol A)": [("L1/40 median", "L1/40 median 0.301 ms (goal <= 0.27 ms)")],
                  "other": [("bits", "bits 29/30 (goal 30/30)")]}, "run": "R"}]
    short, full = front.goal_lines(goals, figures=False), front.goal_lines(goals)
    assert short == ["07, L1/40: 1 of 3 met; missed under protocol A: L1/40 median; missed: bits."]
    assert full == ["07, L1/40: 1 of 3 met; missed under protocol A: L1/40 median 0.301 ms (goal <= 0.27 ms); "
                    "missed: bits 29/30 (goal 30/30)."]
    monkeypatch.setattr(front, "goals_by_notebook", lambda runs: goals)
    page = site.goals_html({})
    assert page.index(site.html.escape(short[0])) < page.index("<details>") < page.index(site.html.escape(full[0]))


def test_front_page_reads_as_a_post():
    """The title states the finding (not the old book title), every claim of the post has a row with a computed
    verdict and a link, and the main figure has L1/40's bars."""
    from labkit import site
    from labkit.studies import front, post_beside

    runs = front.runs_by_name()
    t = front.title(runs)
    assert t != site.BOOK_TITLE and "L1/40" in t and "x faster" in t
    rows = post_beside.rows(post_beside.runs_by_name())
    assert len(rows) == len(post_beside.CLAIMS)
    assert all(r["verdict"] in ("holds", "reversed", "not comparable") and r["why"] for r in rows)
    assert sum(r["page"] is not None for r in rows) >= len(rows) - 1
    html_ = site.post_beside_html({})
    assert html_.count("<tr>") == len(rows) + 1 and "href='01_bit_identity.html'>page 01" in html_
    fig = front.l1_40_figure(runs)
    assert fig is not None and len(fig.axes[0].patches) >= 20
    assert 3 <= len(front.bullets(runs)) <= 5
