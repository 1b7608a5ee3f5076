"""The command line as users meet it: a failing notebook, progress, the default summary and audit views, curate
without runs, --device cuda without a GPU, no kernel transport warning, and world-readable outputs."""
import json
import os
import re
import stat

import nbformat
import pytest

from labkit import cli
from labkit.core.atomic import atomic_write_bytes, atomic_write_json
from labkit.records.run import committed_runs
from labkit.studies.catalog import summarize_runs


def _notebook(path, *sources: str) -> None:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell('device: str = "auto"  # device', metadata={"tags": ["parameters"]})]
    nb.cells += [nbformat.v4.new_code_cell(s) for s in sources]
    nbformat.write(nb, path)


@pytest.fixture
def good(tmp_path):
    d = tmp_path / "good"
    d.mkdir()
    _notebook(d / "00_first.ipynb", 'print("first ran")')
    _notebook(d / "01_second.ipynb", 'print("second ran")')
    return d


@pytest.fixture
def failing(tmp_path):
    d = tmp_path / "failing"
    d.mkdir()
    _notebook(d / "00_first.ipynb", 'print("first ran")')
    _notebook(d / "01_breaks.ipynb", 'print("before the error")', 'limit = 3\nraise ValueError(f"limit {limit} exceeded")',
              'print("never")')
    _notebook(d / "02_after.ipynb", 'print("after ran")')
    return d


def _book(out, notebooks, *extra) -> int:
    return cli.main(["book", "--out", str(out), "--device", "cpu", "--notebooks", str(notebooks), *extra])


def _tree(path) -> dict:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_build_progress_publishes_readable_files_and_no_transport_warning(tmp_path, good, capfd):
    out = tmp_path / "site" / "book"
    old_umask = os.umask(0o022)
    try:
        assert _book(out, good) == 0
    finally:
        os.umask(old_umask)
    captured = capfd.readouterr()  # file-descriptor level: the kernel process's own stderr is in here
    assert re.search(r"^\[book\] 1/2 00_first\.ipynb ok in \d+\.\ds$", captured.out, re.M), captured.out
    assert re.search(r"^\[book\] 2/2 01_second\.ipynb ok in \d+\.\ds$", captured.out, re.M), captured.out
    assert "without encryption" not in captured.out + captured.err
    assert "TCP" not in captured.err, captured.err
    assert {"00_first.ipynb", "00_first.html", "01_second.html", "index.html", "book.json"} <= set(_tree(out))
    for p in out.rglob("*"):
        mode = stat.S_IMODE(p.stat().st_mode)
        assert mode == (0o755 if p.is_dir() else 0o644), (p, oct(mode))
    assert stat.S_IMODE(out.stat().st_mode) == 0o755
    assert sorted(p.name for p in out.parent.iterdir()) == ["book"]  # no staging or old folder left behind


@pytest.mark.slow
def test_failing_notebook_stops_keeps_partial_and_leaves_the_published_book(tmp_path, good, failing, capsys):
    out = tmp_path / "book"
    assert _book(out, good) == 0
    before = _tree(out)
    capsys.readouterr()
    assert _book(out, failing) == 1
    captured = capsys.readouterr()
    # the build stopped at the failing notebook: 02 never ran
    assert re.search(r"^\[book\] 1/3 00_first\.ipynb ok in", captured.out, re.M)
    assert re.search(r"^\[book\] 2/3 01_breaks\.ipynb FAILED in", captured.out, re.M)
    assert "02_after" not in captured.out
    err = captured.err
    # In [4]: parameters, papermill's injected parameters, the print, then the failing cell
    assert "labkit book: 01_breaks.ipynb failed at In [4]: ValueError: limit 3 exceeded" in err, err
    assert "    raise ValueError(f\"limit {limit} exceeded\")" in err  # the failing cell's source
    kept = tmp_path / "book.failed" / "01_breaks.ipynb"
    assert f"partial executed notebook kept: {kept}" in err
    assert f"the published book {out} is unchanged" in err
    assert "Traceback" not in err
    # the partial notebook holds the output before the error and the error itself, not what came after
    outputs = [o for c in nbformat.read(kept, as_version=4).cells if c.cell_type == "code" for o in c.outputs]
    assert any("before the error" in o.get("text", "") for o in outputs)
    assert any(o.get("output_type") == "error" and o.get("evalue") == "limit 3 exceeded" for o in outputs)
    assert not any("never" in o.get("text", "") for o in outputs)
    assert not (tmp_path / "book.failed" / "02_after.ipynb").exists()
    # the last good book is byte for byte what it was; no staging folder is left
    assert _tree(out) == before
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


@pytest.mark.slow
def test_rebuilding_keeps_the_live_runs_of_the_replaced_book(tmp_path, good):
    out = tmp_path / "book"
    assert _book(out, good) == 0
    run = out / "runs" / "20260101T000000Z-nvidia-h200-environment-abcdef"
    run.mkdir(parents=True)
    (run / "run.json").write_text('{"run_id": "x"}')
    assert _book(out, good) == 0
    assert (run / "run.json").read_text() == '{"run_id": "x"}'  # a GPU run not yet curated is not thrown away


@pytest.mark.slow
def test_keep_going_runs_the_rest_and_still_publishes_nothing(tmp_path, failing, capsys):
    out = tmp_path / "book"
    assert _book(out, failing, "--keep-going") == 1
    captured = capsys.readouterr()
    assert re.search(r"^\[book\] 3/3 02_after\.ipynb ok in", captured.out, re.M)
    assert f"nothing was published at {out}" in captured.err
    assert not out.exists() and (tmp_path / "book.failed" / "02_after.html").is_file()


def test_build_refuses_to_replace_a_folder_that_is_not_a_book(tmp_path, good, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "thesis.tex").write_text("precious")
    assert _book(out, good) == 2
    assert "not a book" in capsys.readouterr().err
    assert (out / "thesis.tex").read_text() == "precious"


def test_device_cuda_without_a_gpu_is_one_line_and_runs_nothing(tmp_path, good, capfd):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: --device cuda is valid here")
    out = tmp_path / "book"
    assert cli.main(["book", "--out", str(out), "--device", "cuda", "--notebooks", str(good)]) == 2
    captured = capfd.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "--device cuda" in lines[0] and "sees no CUDA device" in lines[0], captured.err
    assert "[book]" not in captured.out and not out.exists() and not list(tmp_path.glob(".book*"))


def test_summary_prints_a_short_table_and_json_on_request(capsys):
    runs = committed_runs()
    if not runs:
        pytest.skip("no committed runs")
    run = runs[0]
    assert cli.main(["summary", str(run)]) == 0
    text = capsys.readouterr().out
    s = summarize_runs([run])
    lines = text.strip().splitlines()
    assert 3 <= len(lines) <= 8, text
    for value in (s["name"], s["run_id"], s["gpu"], s["torch"], s["date_utc"]):
        assert value in text
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)
    assert cli.main(["summary", "--json", str(run)]) == 0
    raw = capsys.readouterr().out
    assert len(raw.strip().splitlines()) == 1 and json.loads(raw) == json.loads(json.dumps(s))
    # several runs: a few lines each, never the raw JSON's hundreds
    assert cli.main(["summary", *map(str, runs)]) == 0
    text = capsys.readouterr().out
    assert len(text.strip().splitlines()) <= 6 * len(runs) + 2
    assert all(json.loads((r / "run.json").read_text())["run_id"] in text for r in runs)


def test_audit_fits_one_screen_with_details_behind_a_flag(capsys):
    runs = committed_runs()
    if not runs:
        pytest.skip("no committed runs")
    assert cli.main(["audit"]) == 0
    text = capsys.readouterr().out
    lines = text.strip().splitlines()
    assert len(lines) <= 25, text
    assert lines[0].startswith("audit: ") and lines[0].endswith("OK")
    table = __import__("labkit.records.audit", fromlist=["x"]).audit_runs().run_table()
    checked = [r["run"] for r in table if r["records"]]
    assert all(run_id in text for run_id in checked[:20])  # a run with check records has its line
    unchecked = len(table) - len(checked)
    assert unchecked == 0 or f"{unchecked} run(s) keep no check records" in text  # the others, counted in one
    assert cli.main(["audit", "--details"]) == 0
    details = capsys.readouterr().out
    records = json.loads(json.dumps(__import__("labkit.records.audit", fromlist=["x"]).audit_runs().to_json()))
    assert len(details.strip().splitlines()) >= len(records["records"])
    assert records["records"][0]["record"] in details
    assert cli.main(["audit", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == records


def test_curate_a_book_without_gpu_runs_says_so_and_exits_2(tmp_path, capsys):
    book = tmp_path / "book"
    book.mkdir()
    (book / "index.html").write_text("<html></html>")
    assert cli.main(["curate", str(book), "--to", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "no GPU runs" in err and "Traceback" not in err
    # a runs folder holding only an unfinished run (no manifest) is the same: nothing to curate
    unfinished = book / "runs" / "20260101T000000Z-nvidia-h200-environment-abcdef"
    unfinished.mkdir(parents=True)
    (unfinished / "run.json").write_text(json.dumps({"run_id": unfinished.name, "name": "environment"}))
    assert cli.main(["curate", str(book), "--to", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "no complete run" in err
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("umask", [0o022, 0o027, 0o002], ids=["022", "027", "002"])
def test_atomic_writes_get_the_mode_open_would_give(tmp_path, umask):
    old = os.umask(umask)
    try:
        plain = tmp_path / "plain.txt"
        with open(plain, "w") as f:
            f.write("x")
        atomic_write_bytes(tmp_path / "page.html", b"<html></html>")
        atomic_write_json(tmp_path / "record.json", {"a": 1})
        previous = tmp_path / "private.json"
        previous.write_text("{}")
        previous.chmod(0o600)  # a file left by an older build: rewriting it gives the normal mode
        atomic_write_json(previous, {"b": 2})
    finally:
        os.umask(old)
    want = stat.S_IMODE(plain.stat().st_mode)
    assert want == 0o666 & ~umask
    for name in ("page.html", "record.json", "private.json"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == want, name
    assert sorted(p.name for p in tmp_path.iterdir()) == ["page.html", "plain.txt", "private.json", "record.json"]
