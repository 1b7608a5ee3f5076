"""The whole book, built once in CPU mode as CI and users build it: every notebook executes without an error,
exports HTML, says it is in CPU mode or REPLAYED, and replays the newest committed run of its study."""
import json

import nbformat
import pytest

from labkit import book
from labkit.records.run import committed_runs
from labkit.studies.catalog import notebook_runs

pytestmark = [pytest.mark.notebook, pytest.mark.slow]  # the whole book, built once (conftest.book_build)

NOTEBOOKS = book.notebooks()
RUN_NAMES = notebook_runs()  # {notebook stem: the run name its study's session opens}, from the study modules


@pytest.fixture(scope="module")
def built(book_build):
    return book_build  # built once per session (conftest), shared with tests/test_site.py


def _outputs(executed) -> list[dict]:
    nb = nbformat.read(executed, as_version=4)
    return [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]


def _newest_run_id(name: str) -> str | None:
    runs = committed_runs(name)
    return json.loads((runs[-1] / "run.json").read_text())["run_id"] if runs else None


def test_index_lists_every_notebook(built):
    out, results = built
    assert set(results) == {p.name for p in NOTEBOOKS}
    index = (out / "index.html").read_text()
    assert all(f"{p.stem}.html" in index for p in NOTEBOOKS)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_builds_on_cpu(built, path):
    out, results = built
    result = results[path.name]
    assert result.status == "ok", result.error
    outputs = _outputs(result.executed)
    errors = [f"{o.get('ename')}: {o.get('evalue')}" for o in outputs if o.get("output_type") == "error"]
    assert not errors, errors
    assert result.html and (out / f"{path.stem}.html").stat().st_size > 0
    text = json.dumps(outputs)
    assert "REPLAYED" in text or "CPU mode" in text, f"{path.name} does not say it is REPLAYED or in CPU mode"
    announced = nbformat.read(result.executed, as_version=4).metadata.get("labkit", {}).get("run")
    name = RUN_NAMES.get(path.stem)
    if name is None:
        assert announced is None, f"{path.name} opens a session of run {announced} that no study owns"
        return
    assert announced, f"{path.name} replays no run: its metadata has no labkit.run (show_session not called?)"
    assert announced["name"] == name and not announced["live"], announced
    newest = _newest_run_id(name)
    assert newest, f"no committed {name!r} run to replay"
    assert announced["run_id"] == newest, f"{path.name} replays {announced['run_id']}, not the newest {newest}"
    assert newest in text, f"{path.name} does not show the newest committed {name!r} run {newest}"


def test_every_study_with_a_notebook_has_it():
    stems = {p.stem for p in NOTEBOOKS}
    assert set(RUN_NAMES) <= stems, set(RUN_NAMES) - stems
    assert {"08_using_it", "09_layout_boundary", "07_parallel_statistics"} <= set(RUN_NAMES)
