"""labkit.display: page tables from pandas (escaped, so no value or column name can break one), readable numbers,
long lists summarized with the full list written next to the page."""
import csv
import json
import math

import IPython.display
import pytest
from bs4 import BeautifulSoup

from labkit import display

HOSTILE = [{"max |diff| output": "a | b", "mean max |ulp|": "*x* and **y**", "<b>": "<script>alert(1)</script>",
            "ratio": 0.1 + 0.2},
           {"max |diff| output": "|---|", "mean max |ulp|": 2.5e-07, "<b>": None, "ratio": [1, "x|y"]}]


@pytest.fixture
def shown(monkeypatch):
    """What show()/show_long() hand to IPython: a list of mime bundles."""
    out = []
    monkeypatch.setattr(IPython.display, "display", lambda obj, raw=False: out.append(obj))
    return out


def _table(html_text: str):
    soup = BeautifulSoup(html_text, "html.parser")
    table = soup.find("table")
    head = [th.get_text() for th in table.find("thead").find_all("th")]
    body = [[td.get_text() for td in tr.find_all("td")] for tr in table.find("tbody").find_all("tr")]
    return soup, head, body


def test_no_value_or_column_name_breaks_the_table(shown):
    display.show(HOSTILE)
    bundle = shown[-1]
    soup, head, body = _table(bundle["text/html"])
    assert head == list(HOSTILE[0])
    assert body == [["a | b", "*x* and **y**", "<script>alert(1)</script>", "0.3"],
                    ["|---|", "2.5e-07", "—", "1, x|y"]]
    assert soup.find("script") is None and soup.find("b") is None  # markup in values stays text
    assert "a | b" in bundle["text/plain"]


def test_one_dict_is_shown_as_key_value_rows(shown):
    display.show({"gpu": "NVIDIA H200", "sms": 132})
    _, head, body = _table(shown[-1]["text/html"])
    assert head == ["key", "value"] and body == [["gpu", "NVIDIA H200"], ["sms", "132"]]


def test_columns_pick_and_order(shown):
    display.show([{"a": 1, "b": 2, "c": 3}], columns=["c", "a"])
    _, head, body = _table(shown[-1]["text/html"])
    assert head == ["c", "a"] and body == [["3", "1"]]


def test_no_rows_says_so(shown):
    display.show([])
    assert "(no rows)" in shown[-1]["text/html"] and "<table" not in shown[-1]["text/html"]


@pytest.mark.parametrize("value, text", [(0.1 + 0.2, "0.3"), (0.29912345678, "0.299"), (26.8, "26.8"), (1234.5, "1,234"),
                                         (4194304.0, "4,194,304"), (1e-9, "1e-09"), (math.nan, "nan"),
                                         (math.inf, "inf"), (3, "3"), (True, "✓"), (False, "✗"), (None, "—"),
                                         ((16, 64), "16, 64"), ("two\nlines", "two lines")])
def test_cell_text(value, text):
    assert display.cell_text(value) == text


def test_rows_must_be_dicts():
    with pytest.raises(ValueError, match="list of dicts, got str"):
        display.table_html("rows")
    with pytest.raises(ValueError, match="list of dicts, got list"):
        display.table_html([{"a": 1}, ("b", 2)])


def test_show_long_shows_the_head_and_links_every_row(shown, tmp_path):
    rows = [{"run": f"r{i}", "margin": i / 7, "note": "x | y"} for i in range(25)]
    display.show_long(rows, "audit_records", tmp_path, head=10)
    html_text = shown[-1]["text/html"]
    soup, head, body = _table(html_text)
    assert head == ["run", "margin", "note"] and [r[0] for r in body] == [f"r{i}" for i in range(10)]
    assert {a["href"] for a in soup.find_all("a")} == {"audit_records.csv", "audit_records.json"}
    assert "25 rows" in html_text
    assert json.loads((tmp_path / "audit_records.json").read_text()) == rows
    with open(tmp_path / "audit_records.csv", newline="") as f:
        written = list(csv.DictReader(f))
    assert len(written) == 25 and written[-1] == {"run": "r24", "margin": display.cell_text(24 / 7),
                                                  "note": "x | y"}


def test_show_long_refuses_a_path_as_name_and_a_bad_head(tmp_path):
    with pytest.raises(ValueError, match="plain file stem"):
        display.show_long([{"a": 1}], "../x", tmp_path)
    with pytest.raises(ValueError, match="head must be at least 1, got 0"):
        display.show_long([{"a": 1}], "x", tmp_path, head=0)


def test_markdown_table_escapes_pipes_in_names_and_values():
    text = display.markdown_table([{"max |diff|": "a|b"}])
    assert text.splitlines() == ["| max \\|diff\\| |", "|---|", "| a\\|b |"]


def test_show_files_folds_each_file_once(monkeypatch):
    out = []
    monkeypatch.setattr(IPython.display, "display", lambda obj: out.append(obj))
    display.show_files([("a.cuh", "x < y\n"), ("b.cu", "z\n")])
    soup = BeautifulSoup(out[-1].data, "html.parser")
    details = soup.find_all("details")
    assert [d.find("summary").get_text() for d in details] == ["a.cuh (1 lines)", "b.cu (1 lines)"]
    assert not any(d.has_attr("open") for d in details) and details[0].find("pre").get_text() == "x < y\n"


def test_long_tables_fold_behind_a_summary(monkeypatch):
    shown = []
    monkeypatch.setattr(display, "_display", lambda h, p: shown.append(h))
    rows = [{"case": i, "bits": i != 3} for i in range(display.FOLD_OVER + 1)]
    display.show(rows)
    assert shown[-1].startswith("<details") and f"{len(rows)} rows — bits: {len(rows) - 1}/{len(rows)} ✓" in shown[-1]
    display.show(rows[:display.FOLD_OVER])
    assert shown[-1].startswith("<table")


def test_post_table_gives_ratios_only_for_times_and_speedups():
    rows = [{"figure": "median", "shape": "16x4", "post": 7.2, "post_token": "7.2", "post_hw": "RTX 3090, torch 2.5.1",
             "ours": 8.3, "here": "H200", "ours/post": 1.15, "note": "why it differs", "unit": "ms"},
            {"figure": "cases", "shape": "", "post": 30, "post_token": "30", "post_hw": "RTX 3090, torch 2.5.1",
             "ours": 40, "here": "H200", "ours/post": 1.3333, "note": "", "unit": "count"}]
    page = display.post_table_html(rows)
    assert "<td>1.15</td>" in page and "1.33" not in page and "why it differs" in page
    assert "'>30</td><td>40</td>" in page  # a count reads bare, no unit word and no ratio
    assert page.count("<tr class='labkit-note'>") == 1 and "post: RTX 3090, torch 2.5.1; here: H200" in page


def test_columns_equal_in_every_row_are_shown_once():
    from labkit.display import merge_repeated

    rows = [{"case": c, "output": 1, "mean": 1, "rstd": r} for c, r in (("a", 1), ("b", 0.5), ("c", 1))]
    assert merge_repeated(rows) == [{"case": c, "output, mean": 1, "rstd": r} for c, r in (("a", 1), ("b", 0.5),
                                                                                             ("c", 1))]
    assert merge_repeated(rows[:2]) == rows[:2]  # two rows: equal columns may be chance
    grid = [{"rows": f"<= {n}", "2^8": "torch", "2^10": "torch"} for n in (1, 8, 64)]
    assert merge_repeated(grid) == grid  # a grid's axis columns stay


@pytest.mark.parametrize("value,text", [(738.448, "738"), (8369.62, "8,370"), (30.0018, "30.0"), (99.97, "100"),
                                        (0.99982, "0.99982"), (1380.16, "1,380"),
                                        # closer to 1 than six figures say: the difference, never "1"
                                        (1.000000073, "1 + 7.3e-08"), (0.9999999, "1 − 1e-07")])
def test_three_figures_everywhere_but_a_near_miss_of_a_small_whole_number(value, text):
    from labkit.display import cell_text

    assert cell_text(value) == text


def test_a_column_of_one_value_is_said_once_above_the_table():
    from labkit.display import hoist_constant

    rows = [{"call": c, "us": u, "shape": "8x256", "calls": 10000} for c, u in (("torch", 12.3), ("ours", 11.8),
                                                                                 ("op", 20.1))]
    kept, common = hoist_constant(rows)
    assert common == {"shape": "8x256", "calls": 10000} and kept[0] == {"call": "torch", "us": 12.3}
    assert hoist_constant(rows[:2]) == (rows[:2], {})  # two rows: nothing said for every row
    two = [{"a": 1, "b": 2}] * 3
    assert hoist_constant(two) == (two, {})  # at least two columns stay
