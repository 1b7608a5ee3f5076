import os
import tempfile
from pathlib import Path

import pytest

# Tests never read (or write) the user's own tuned dispatch tables (`labkit tune`): a private, empty table cache,
# removed when the session ends.
_TABLES = tempfile.TemporaryDirectory(prefix="labkit-tables-")
os.environ["LABKIT_TABLE_DIR"] = _TABLES.name

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


# Path, schedule and blocking names whose kernels need sm_90 (the chain's bulk copies and mbarrier transactions):
# a GPU test parametrized by one of them, or marked sm90, is skipped on a GPU that runs below sm_90 (another arch,
# or the H200 under LABKIT_ARCH=compute_80), saying why. (The backward's chain sums run there on a cp.async ring.)
SM90_NAMES = {"chain", "tma", "chain_tma", "chain_w4", "chain_w1"}


def pytest_collection_modifyitems(config, items):
    if not HAS_CUDA:
        skip = pytest.mark.skip(reason="needs a CUDA GPU (run on the H200: python -m pytest -m gpu)")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)
        return
    import torch

    from labkit.core.device import device_info

    from labkit.ops import paths

    device = device_info(torch.cuda.current_device())
    if "chain" in paths.candidates(16, 1 << 22, device):
        return
    # below sm_90 the chain's instructions are missing; on sm_120 its rings do not fit 99 KiB per block
    skip = pytest.mark.skip(reason=f"needs the chain path (sm_90 bulk copies, mbarriers, tensor maps, and room for its "
                                   f"rings), or the H200's table that picks it; this GPU is {device.label}")
    for item in items:
        spec = getattr(item, "callspec", None)
        named = {v for v in spec.params.values() if isinstance(v, str)} if spec else set()
        if "gpu" in item.keywords and ("sm90" in item.keywords or named & SM90_NAMES):
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
