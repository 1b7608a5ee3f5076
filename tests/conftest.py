import os
import tempfile
from pathlib import Path

import pytest

try:  # the GPU machine has no notebook stack unless wheels are carried: leave the book's tests out, not erroring
    import nbformat  # noqa: F401
    import papermill  # noqa: F401
except ImportError:
    collect_ignore = ["test_book.py", "test_cli.py", "test_display.py", "test_notebooks.py", "test_site.py",
                      "test_bundle.py"]


def _has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


HAS_CUDA = _has_cuda()


def pytest_collection_modifyitems(config, items):
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run on the H200: python -m pytest -m gpu)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def cache_dir(monkeypatch):
    """A private cubin cache per test, so cache tests neither see nor disturb the user's cache."""
    with tempfile.TemporaryDirectory() as d:
        monkeypatch.setenv("LABKIT_CACHE_DIR", d)
        yield d


@pytest.fixture(scope="session")
def book_build(tmp_path_factory):
    """The whole book built once in CPU mode, shared by the notebook and site tests: (out_dir, {notebook: result}).
    LABKIT_TEST_BOOK_DIR keeps the build (and the browser test's screenshots) in a directory of your choice."""
    from labkit import book

    out = Path(os.environ["LABKIT_TEST_BOOK_DIR"]).resolve() if os.environ.get("LABKIT_TEST_BOOK_DIR") \
        else tmp_path_factory.mktemp("book")
    try:
        results = book.build(out, device="cpu", mode="quick", keep_going=True)
    except book.BuildFailed as exc:  # each notebook's test still reports its own outcome
        results = exc.results
    return out, {r.notebook: r for r in results}
