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


def test_protocol_correction_notebook_builds_on_cpu(tmp_path):
    results = book.build(tmp_path, device="cpu", mode="quick", only=["04"])
    assert [r.status for r in results] == ["ok"], results[0].error
    executed = nbformat.read(tmp_path / "04_protocol_correction.ipynb", as_version=4)
    text = json.dumps([c.get("outputs", []) for c in executed.cells])
    assert "official_only" in text and "historical_only" in text  # witnesses, both directions
    assert "1800/1800 identical verdicts" in text  # 3 seeds x 600 trials, quick mode
    assert "Audit of committed runs" in text and "SYNTHETIC" not in text.split("Audit of committed runs")[1][:200]
    assert "2 flips detected" in text
    assert (tmp_path / "04_protocol_correction.html").stat().st_size > 10_000
