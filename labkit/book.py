"""The book runner: papermill executes each numbered notebook, nbconvert exports it to HTML, and an index
page links them. The only module that knows about notebooks."""
from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from labkit import tasks
from labkit.core.compile import REPO_ROOT
from labkit.core.atomic import default_dir_mode
from labkit.core.environ import scoped_environ

NOTEBOOK_DIR = REPO_ROOT / "notebooks"


@dataclass
class NotebookResult:
    notebook: str
    status: str  # "ok" or "failed"
    seconds: float
    executed: str
    html: str | None
    error: str | None = None  # "<ename>: <evalue>" of the failing cell (or of papermill itself)
    parameters: dict | None = None  # what this notebook was given: the book's parameters it declares
    failed_cell: str | None = None  # source of the cell that raised
    failed_cell_label: str | None = None  # "In [7]" (its execution count), or "cell 12" (index) when it never ran


class BuildFailed(Exception):
    """A notebook failed: the build stopped and nothing was published. `result` is the failing notebook's row;
    `kept` the folder holding the partial build (the failing notebook executed up to its error)."""

    def __init__(self, result: NotebookResult, kept: Path, published: Path, results: list | None = None):
        super().__init__(f"{result.notebook}: {result.error}")
        self.result, self.kept, self.published = result, kept, published
        self.results = results or [result]  # every notebook that ran, in order
        self.failed = [r for r in self.results if r.status != "ok"]  # several only with keep_going


def notebooks(only: list[str] | None = None, notebook_dir: Path = NOTEBOOK_DIR) -> list[Path]:
    found = sorted(Path(notebook_dir).glob("[0-9][0-9]_*.ipynb"))
    if only:
        matched = [p for p in found if any(p.stem.startswith(o) or p.name == o for o in only)]
        if not matched:
            raise ValueError(f"no notebook matches {only}; have {[p.name for p in found]}")
        return matched
    return found


def _neighbours(nb: Path, every: list[Path]) -> tuple[str | None, str | None]:
    i = [p.name for p in every].index(nb.name)
    return (every[i - 1].stem if i > 0 else None, every[i + 1].stem if i + 1 < len(every) else None)


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


def lift_run_metadata(executed: Path) -> dict | None:
    """Copy the run a notebook's session announced (labkit.display.show_session's RUN_MIME output) into the executed
    notebook's metadata as metadata["labkit"]["run"], where the site and the tests read it; None without one."""
    import nbformat

    from labkit.display import RUN_MIME

    nb = nbformat.read(executed, as_version=4)
    found = next((o["data"][RUN_MIME] for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
                  if RUN_MIME in o.get("data", {})), None)
    if found is not None:
        nb.metadata.setdefault("labkit", {})["run"] = dict(found)
        nbformat.write(nb, executed)
    return found


def export_html(executed: Path, neighbours: tuple[str | None, str | None] = (None, None)) -> Path:
    """The page of an executed notebook (labkit.site: offline HTML with a banner saying where its results come
    from); `neighbours` names the notebooks before and after it in reading order, for the page's links."""
    from labkit import site

    return site.export_page(executed, neighbours=neighbours)


def _kernel_config():
    """Run the kernel over IPC (Unix sockets): ipykernel warns "running over TCP without encryption" on every
    start with the default TCP transport, and a book build has no reason to open TCP ports. Windows has no IPC
    transport, so it keeps TCP (and the warning)."""
    from traitlets.config import Config

    return Config({"KernelManager": {"transport": "ipc"}}) if os.name == "posix" else Config()


def _describe_failure(exc: Exception) -> tuple[str, str | None, str | None]:
    """(error, failing cell source, cell label) from what papermill raised. PapermillExecutionError's str() is a
    newline, a rule and the traceback, so its first line read as "PapermillExecutionError: " and nothing else;
    its ename/evalue/source are the message a user needs."""
    from papermill.exceptions import PapermillExecutionError

    if isinstance(exc, PapermillExecutionError):
        label = f"In [{exc.exec_count}]" if exc.exec_count is not None else f"cell {exc.cell_index}"
        return f"{exc.ename}: {exc.evalue}", exc.source, label
    return f"{type(exc).__name__}: {str(exc).strip()[:2000]}", None, None


def _quiet_first_use():
    """LABKIT_QUIET=1 in the environment the notebook's kernel starts with (labkit.core.log): a page shows its
    results, not the lines a cold cache's builds print."""
    return scoped_environ(LABKIT_QUIET="1")


def run_notebook(path: Path, out_dir: Path, params: dict, kernel_name: str = "python3",
                 neighbours: tuple[str | None, str | None] = (None, None)) -> NotebookResult:
    """Execute `path` with the book parameters it declares (others are left out), then export its HTML. A failing
    cell makes a "failed" row carrying the error and the cell; the executed notebook is kept up to that cell."""
    import papermill

    executed = out_dir / path.name
    params = notebook_parameters(path, params)
    t0 = time.perf_counter()
    error = cell = label = None
    try:
        with _quiet_first_use():
            papermill.execute_notebook(str(path), str(executed), parameters=params, kernel_name=kernel_name,
                                       cwd=str(REPO_ROOT), progress_bar=False, config=_kernel_config())
        status = "ok"
    except Exception as exc:  # the row says what failed; `build` stops there
        status = "failed"
        error, cell, label = _describe_failure(exc)
    page = None
    if executed.exists():
        try:
            lift_run_metadata(executed)
            page = export_html(executed, neighbours)
        except Exception as exc:  # a page that cannot be exported must not hide the notebook's own error
            if status == "ok":
                status, error = "failed", f"HTML export: {type(exc).__name__}: {exc}"
    return NotebookResult(path.name, status, time.perf_counter() - t0, str(executed),
                          str(page) if page else None, error, params, cell, label)


def write_index(out_dir: Path, results: list[NotebookResult], params: dict) -> Path:
    """The front page and book.json (labkit.site)."""
    from labkit import site

    return site.write_index(out_dir, results, params)


def _is_book(path: Path) -> bool:
    """What `build` may replace: an empty folder or a previous book (it has the book.json every build writes)."""
    return path.is_dir() and (not any(path.iterdir()) or (path / "book.json").is_file())


def _fresh_dir(parent: Path, prefix: str) -> Path:
    """A new folder next to the book (same file system, so renames are atomic) with a normal folder's mode:
    mkdtemp makes it 0700, and it becomes the published book."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    os.chmod(path, default_dir_mode())
    return path


def _carry_runs(old_book: Path, staging: Path) -> None:
    """Copy the old book's live run directories the new build lacks into it: a GPU run not yet curated is
    evidence, and replacing the book must not delete it (run ids are unique, so nothing is overwritten)."""
    if not (old_book / "runs").is_dir():
        return
    for run in sorted(p for p in (old_book / "runs").iterdir() if p.is_dir()):
        if not (staging / "runs" / run.name).exists():
            shutil.copytree(run, staging / "runs" / run.name, symlinks=True)


def _publish(staging: Path, out_dir: Path) -> None:
    """Replace `out_dir` by `staging`: the old book is renamed away, the new one renamed in, then the old one
    deleted. A reader sees the old book or the new one (for an instant, none), never a mix."""
    _carry_runs(out_dir, staging)
    old = None
    if out_dir.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.old-", dir=out_dir.parent))
        os.replace(out_dir, old / out_dir.name)
    os.replace(staging, out_dir)
    if old is not None:
        shutil.rmtree(old)


def _keep_failed(staging: Path, out_dir: Path) -> Path:
    """Move a failed build to `<out>.failed` (replacing an older failed build) so its partial notebook is easy to
    find and the next build starts clean."""
    kept = out_dir.with_name(out_dir.name + ".failed")
    if kept.exists():
        shutil.rmtree(kept)
    os.replace(staging, kept)
    return kept


def _moved(result: NotebookResult, folder: Path) -> None:
    result.executed = str(folder / Path(result.executed).name)
    result.html = str(folder / Path(result.html).name) if result.html else None


def _say(text: str) -> None:
    print(f"[book] {text}", flush=True)


def build(out_dir: Path = REPO_ROOT / "build" / "book", device: str = "auto", mode: str = "quick", seeds=None,
          rounds=None, only: list[str] | None = None, kernel_name: str = "python3",
          notebook_dir: Path = NOTEBOOK_DIR, keep_going: bool = False) -> list[NotebookResult]:
    """Execute every notebook of `notebook_dir` (or those named in `only`), export HTML, write index.html, and
    publish the result as `out_dir`.

    The build runs in a fresh folder next to `out_dir`; `out_dir` is replaced only when every notebook succeeded,
    so a failure never touches the last good book. On the first failing notebook the build stops (`keep_going`:
    runs the rest first), its folder (with the partial executed notebook) is kept as `<out_dir>.failed`, and
    BuildFailed is raised for the first failure. With `only`, the new build starts from a copy of the published
    book, so the other notebooks' pages stay. Notebooks get the build folder as `output_dir` (live runs are
    written under it and published with the book); live runs of the replaced book stay in the new one."""
    from labkit.records.session import resolve

    out_dir = Path(out_dir).resolve()
    resolve(device)  # ValueError before anything runs: --device cuda without a GPU fails in every notebook
    chosen = notebooks(only, notebook_dir)
    every = notebooks(None, notebook_dir)  # reading order for the pages' previous/next links
    if out_dir.exists() and not _is_book(out_dir):
        raise ValueError(f"{out_dir} exists and is not a book (no book.json): refusing to replace it")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = _fresh_dir(out_dir.parent, f".{out_dir.name}.staging-")
    published = False
    try:
        if only and out_dir.is_dir():
            shutil.copytree(out_dir, staging, dirs_exist_ok=True, symlinks=True)
        params = book_parameters(device, mode, staging, seeds, rounds)
        results = []
        for i, nb in enumerate(chosen, 1):
            result = run_notebook(nb, staging, params, kernel_name, _neighbours(nb, every))
            results.append(result)
            _say(f"{i}/{len(chosen)} {nb.name} {'ok' if result.status == 'ok' else 'FAILED'} in {result.seconds:.1f}s")
            if result.status != "ok" and not keep_going:
                break
        failed = [r for r in results if r.status != "ok"]
        if failed:
            kept = _keep_failed(staging, out_dir)
            published = True  # the staging folder has moved: nothing left to clean
            for r in results:
                _moved(r, kept)
            write_index(kept, results, params)
            raise BuildFailed(failed[0], kept, out_dir, results)
        write_index(staging, results, params)
        _publish(staging, out_dir)
        published = True
        for r in results:  # the rows now name the published files
            _moved(r, out_dir)
        return results
    finally:
        if not published:  # interrupted or crashed outside a notebook: keep what ran for inspection
            _keep_failed(staging, out_dir)
