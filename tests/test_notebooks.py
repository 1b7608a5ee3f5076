"""The whole book, built once in CPU mode as CI and users build it: every notebook executes without an error,
exports HTML, says it is in CPU mode or REPLAYED, and replays the newest committed run of its study."""
import json

import nbformat
import pytest

from labkit import book
from labkit.records.run import committed_runs

pytestmark = pytest.mark.notebook

NOTEBOOKS = book.notebooks()

# The run name each notebook's session opens (RunSession.open(name, ...)); notebooks absent here replay no run.
RUN_NAMES = {"00": "environment", "01": "bit_identity", "02": "fast_stats_counterexamples", "03": "timing",
             "07": "parallel_stats"}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("book")
    try:
        results = book.build(out, device="cpu", mode="quick", keep_going=True)
    except book.BuildFailed as exc:  # each notebook's test still reports its own outcome
        results = exc.results
    return out, {r.notebook: r for r in results}


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
    name = RUN_NAMES.get(path.stem[:2])
    run_id = _newest_run_id(name) if name else None
    if run_id:
        assert run_id in text, f"{path.name} does not show the newest committed {name!r} run {run_id}"
