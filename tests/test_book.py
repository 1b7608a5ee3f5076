"""The book runner (parameters each notebook declares) and the notebook templates as committed."""
import json
import statistics
from pathlib import Path

import nbformat
import papermill
import pytest

from labkit import book

TEMPLATES = book.notebooks()


def _write_notebook(path, parameters: str) -> None:
    """A notebook whose second cell prints which of the book's parameter names exist in its namespace."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(parameters, metadata={"tags": ["parameters"]}),
                nbformat.v4.new_code_cell(
                    'print("SEEN", sorted(n for n in ("device", "mode", "seeds", "rounds", "output_dir")'
                    ' if n in globals()), device, mode)')]
    nbformat.write(nb, path)


def _printed(executed: str) -> str:
    nb = nbformat.read(executed, as_version=4)
    return "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)


def test_book_parameters_validate_mode(tmp_path):
    with pytest.raises(ValueError, match="mode"):
        book.book_parameters("cpu", "huge", tmp_path)


@pytest.mark.slow
def test_each_notebook_receives_only_the_parameters_it_declares(tmp_path):
    nbs = tmp_path / "nbs"
    nbs.mkdir()
    _write_notebook(nbs / "00_bare.ipynb", 'device: str = "auto"  # device\nmode: str = "quick"  # mode\n')
    _write_notebook(nbs / "01_timed.ipynb", 'device: str = "auto"  # device\nmode: str = "quick"  # mode\n'
                                            'rounds: int = 35  # rounds\noutput_dir: str = "build/book"  # out\n')
    out = tmp_path / "out"
    results = book.build(out, device="cpu", mode="full", seeds=[4], rounds=7, notebook_dir=nbs)
    assert [r.status for r in results] == ["ok", "ok"], [r.error for r in results]
    bare, timed = results
    assert bare.parameters == {"device": "cpu", "mode": "full"}
    assert "SEEN ['device', 'mode'] cpu full" in _printed(bare.executed)
    # output_dir is the build's own folder, created next to --out and renamed to it once every notebook passed
    staging = Path(timed.parameters.pop("output_dir"))
    assert timed.parameters == {"device": "cpu", "mode": "full", "rounds": 7}
    assert staging.parent == out.resolve().parent and staging.name.startswith(".out.staging-")
    assert not staging.exists() and out.is_dir()
    timed.parameters["output_dir"] = str(staging)
    assert "SEEN ['device', 'mode', 'output_dir', 'rounds'] cpu full" in _printed(timed.executed)
    # seeds was given but neither notebook declares it: no notebook received it
    assert all("seeds" not in r.parameters for r in results)
    index = json.loads((out / "book.json").read_text())
    assert [n["parameters"] for n in index["notebooks"]] == [bare.parameters, timed.parameters]
    assert {"00_bare.html", "01_timed.html"} <= {p.name for p in out.iterdir()}


def test_unknown_notebook_prefix_is_refused(tmp_path):
    with pytest.raises(ValueError, match="no notebook matches"):
        book.notebooks(["99"], tmp_path)


@pytest.mark.parametrize("path", TEMPLATES, ids=[p.stem for p in TEMPLATES])
def test_notebook_template(path):
    raw = json.loads(path.read_text())
    cells = raw["cells"]
    missing_id = [i for i, c in enumerate(cells) if not c.get("id")]
    assert not missing_id, f"{path.name}: cells without an id: {missing_id}"
    code = [c for c in cells if c["cell_type"] == "code"]
    dirty = [i for i, c in enumerate(code) if c.get("outputs") or c.get("execution_count") is not None]
    assert not dirty, f"{path.name}: code cells committed with outputs: {dirty}"
    tagged = [i for i, c in enumerate(code) if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert tagged == [0], f"{path.name}: cells tagged 'parameters' among code cells: {tagged} (want exactly [0])"
    for name, p in papermill.inspect_notebook(str(path)).items():
        assert p["inferred_type_name"] != "None" and p["help"], f"{path.name}: parameter {name} lacks type/comment"
    lines = [len("".join(c["source"]).strip().splitlines()) for c in code]
    assert statistics.median(lines) <= 5, f"{path.name}: median code cell is {statistics.median(lines)} lines"
