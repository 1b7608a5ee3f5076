"""The book runner: papermill executes each numbered notebook, nbconvert exports it to HTML, and an index
page links them. The only module that knows about notebooks."""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from labkit import tasks
from labkit.core.compile import REPO_ROOT

NOTEBOOK_DIR = REPO_ROOT / "notebooks"


@dataclass
class NotebookResult:
    notebook: str
    status: str  # "ok" or "failed"
    seconds: float
    executed: str
    html: str | None
    error: str | None = None
    parameters: dict | None = None  # what this notebook was given: the book's parameters it declares


def notebooks(only: list[str] | None = None, notebook_dir: Path = NOTEBOOK_DIR) -> list[Path]:
    found = sorted(Path(notebook_dir).glob("[0-9][0-9]_*.ipynb"))
    if only:
        matched = [p for p in found if any(p.stem.startswith(o) or p.name == o for o in only)]
        if not matched:
            raise ValueError(f"no notebook matches {only}; have {[p.name for p in found]}")
        return matched
    return found


def book_parameters(device: str, mode: str, output_dir: Path, seeds=None, rounds=None) -> dict:
    """The book-wide parameters; each notebook receives only those it declares (`notebook_parameters`)."""
    tasks.config(mode)  # raises ValueError naming the modes
    params = {"device": device, "mode": mode, "output_dir": str(output_dir)}
    if seeds is not None:
        params["seeds"] = [int(s) for s in seeds]
    if rounds is not None:
        params["rounds"] = int(rounds)
    return params


def declared_parameters(path: Path) -> set[str]:
    """Names assigned in the notebook's cell tagged `parameters`."""
    import papermill

    return set(papermill.inspect_notebook(str(path)))


def notebook_parameters(path: Path, params: dict) -> dict:
    """The subset of the book's parameters that `path` declares: papermill would otherwise inject a name the
    notebook never reads (a `rounds` in a notebook that times nothing), which reads as if it mattered."""
    declared = declared_parameters(path)
    return {k: v for k, v in params.items() if k in declared}


def export_html(executed: Path) -> Path:
    """The page of an executed notebook (labkit.site: offline HTML with a banner saying where its results come
    from)."""
    from labkit import site

    return site.export_page(executed)


def run_notebook(path: Path, out_dir: Path, params: dict, kernel_name: str = "python3") -> NotebookResult:
    """Execute `path` with the book parameters it declares (others are left out), then export its HTML."""
    import papermill

    executed = out_dir / path.name
    params = notebook_parameters(path, params)
    t0 = time.perf_counter()
    try:
        papermill.execute_notebook(str(path), str(executed), parameters=params, kernel_name=kernel_name,
                                   cwd=str(REPO_ROOT), progress_bar=False)
        status, error = "ok", None
    except Exception as exc:  # the book keeps going: a failing notebook becomes a row, its HTML shows the error
        status, error = "failed", f"{type(exc).__name__}: {str(exc)[:2000]}"
    page = export_html(executed) if executed.exists() else None
    return NotebookResult(path.name, status, time.perf_counter() - t0, str(executed),
                          str(page) if page else None, error, params)


def write_index(out_dir: Path, results: list[NotebookResult], params: dict) -> Path:
    """The front page and book.json (labkit.site)."""
    from labkit import site

    return site.write_index(out_dir, results, params)


def build(out_dir: Path = REPO_ROOT / "build" / "book", device: str = "auto", mode: str = "quick", seeds=None,
          rounds=None, only: list[str] | None = None, kernel_name: str = "python3",
          notebook_dir: Path = NOTEBOOK_DIR) -> list[NotebookResult]:
    """Execute every notebook of `notebook_dir` (or those named in `only`) into `out_dir`, export HTML, write
    index.html."""
    out_dir = Path(out_dir).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    params = book_parameters(device, mode, out_dir, seeds, rounds)
    results = []
    for nb in notebooks(only, notebook_dir):
        print(f"[book] {nb.name} ...", flush=True)
        result = run_notebook(nb, out_dir, params, kernel_name)
        print(f"[book] {nb.name}: {result.status} in {result.seconds:.1f}s"
              + (f" — {result.error.splitlines()[0]}" if result.error else ""), flush=True)
        results.append(result)
    write_index(out_dir, results, params)
    return results
