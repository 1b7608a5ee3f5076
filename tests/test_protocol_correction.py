"""The protocol-correction notebook executes in CPU mode through the book runner, as CI does."""
import json

import nbformat

from labkit import book


def test_protocol_correction_notebook_template():
    [path] = book.notebooks(["04"])
    nb = nbformat.read(path, as_version=4)
    [params] = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    for line in ('device: str = "auto"', 'mode: str = "quick"', "seeds: list = [0, 1, 2]", "rounds: int = 35",
                 'output_dir: str = "build/book"'):
        assert line in params.source
    assert all("#" in line for line in params.source.splitlines() if line.strip())  # each commented
