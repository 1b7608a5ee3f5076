"""The book runner executes the notebooks in CPU mode (papermill + nbconvert), as CI and users do."""
import json

import nbformat
import pytest

from labkit import book


def test_notebook_templates_are_clean_and_parameterized():
    for nb_path in book.notebooks():
        nb = nbformat.read(nb_path, as_version=4)
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert all(not c.outputs and c.execution_count is None for c in code), f"{nb_path.name} has outputs"
        tagged = [c for c in code if "parameters" in c.metadata.get("tags", [])]
        assert len(tagged) == 1, f"{nb_path.name}: exactly one cell must be tagged 'parameters'"
        for name in ("device", "mode", "output_dir"):
            assert f"{name}:" in tagged[0].source, f"{nb_path.name} lacks parameter {name}"


def test_book_parameters_validate_mode(tmp_path):
    with pytest.raises(ValueError, match="mode"):
        book.book_parameters("cpu", "huge", tmp_path)


def test_book_builds_environment_notebook_on_cpu(tmp_path):
    results = book.build(tmp_path, device="cpu", mode="quick", only=["00"])
    assert [r.status for r in results] == ["ok"], results[0].error
    executed = nbformat.read(tmp_path / "00_environment.ipynb", as_version=4)
    text = json.dumps([c.get("outputs", []) for c in executed.cells])
    assert "REPLAYED" in text and "sm_90" in text
    assert (tmp_path / "00_environment.html").stat().st_size > 10_000
    assert "00_environment.html" in (tmp_path / "index.html").read_text()
