"""Dispatch tables measured per device, one generated module each (scripts/dispatch_table.py writes them from a
committed dispatch_table run; do not edit them). A module holds RUN_ID, DEVICE {"name", "arch", "sm_count"} and
SCORES[row level][log2 N] = {path: eager time / torch's}.

Which table serves a device (`for_device`), as README "GPUs" summarizes it:
  0. a table `labkit tune` measured on this GPU (same name, arch and SM count; a JSON file in the user's table
     cache, `table_dir()`), if it was measured with the kernel sources installed now (else it is stale: ignored,
     and the reason says so);
  1. else the committed table measured on a GPU of the same arch and SM count;
  2. else one of the same arch (the nearest SM count): the row axis counts waves of the chain schedule's blocks,
     so it carries to another SM count, but the table was not measured there and the reason says so;
  3. else none: torch's own kernel serves the drop-in, and chain_layer_norm's automatic schedule falls back to the
     waves rule (labkit.ops.dispatch.rule.schedule).
"""
from __future__ import annotations

import importlib
import json
import os
import pkgutil
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path

_tables: list | None = None
TABLE_DIR_ENV = "LABKIT_TABLE_DIR"
TUNED_FORMAT = 1
_tuned_lock = threading.Lock()
_tuned: dict[Path, tuple[float, object]] = {}  # path -> (mtime, Tuned or the reason it is not used)


@dataclass(frozen=True)
class Tuned:
    """A table `labkit tune` measured (the committed modules' attributes, read from the JSON file `path`)."""

    SCORES: dict
    BACKWARD: dict | None
    DEVICE: dict
    RUN_ID: str            # "tuned <UTC time>": tuned tables are not committed runs
    path: Path
    meta: dict = field(default_factory=dict)
    GRAPH: dict | None = None  # the same sweep's graph-replay scores
    BACKWARD_GRAPH: dict | None = None  # the backward sweep's graph-replay scores

    @property
    def BACKWARD_RUN_ID(self) -> str:  # noqa: N802  (the committed modules' name)
        return self.RUN_ID


def module_name(name: str, arch: int, sm_count: int) -> str:
    """The generated module's name for a device, e.g. nvidia_h200_sm90_132."""
    return f"{re.sub(r'[^a-z0-9]+', '_', name.lower()).strip('_')}_sm{arch}_{sm_count}"


def tables() -> list:
    """Every generated table module in this package, imported once."""
    global _tables
    if _tables is None:
        _tables = [importlib.import_module(f"{__name__}.{m.name}") for m in pkgutil.iter_modules(__path__)]
    return _tables


def table_dir() -> Path:
    """Where `labkit tune` writes tables and the rule looks for them: $LABKIT_TABLE_DIR, else
    ~/.cache/labkit/dispatch (beside the cubin cache; never inside the package)."""
    root = os.environ.get(TABLE_DIR_ENV)
    return Path(root) if root else Path.home() / ".cache" / "labkit" / "dispatch"


def tuned_path(name: str, arch: int, sm_count: int) -> Path:
    return table_dir() / f"{module_name(name, arch, sm_count)}.json"


def _sources_digest() -> str:
    from labkit.core.compile import sources_digest

    return sources_digest()


def _scores_from_json(d: dict | None) -> dict | None:
    if d is None:
        return None
    return {float(x): {int(y): dict(point) for y, point in level.items()} for x, level in d.items()}


def scores_to_json(scores: dict | None) -> dict | None:
    if scores is None:
        return None
    return {repr(x): {str(y): point for y, point in level.items()} for x, level in scores.items()}


def measured_with() -> dict:
    """What a tuned table's timings depend on besides the GPU, as its file records it: the kernel sources, the op
    modules that size their launches, torch (its kernel is every score's denominator) and NVRTC."""
    import torch

    from labkit.core.compile import digest, nvrtc_version

    ops = Path(__file__).resolve().parents[2]  # labkit/ops
    launch = digest(*(f"{q.relative_to(ops)}\n{q.read_text(encoding='utf-8')}" for q in sorted(ops.rglob("*.py"))
                       if "tables" not in q.parts))
    return {"kernels_sha256": _sources_digest(), "ops_sha256": launch, "torch": torch.__version__,
            "nvrtc": list(nvrtc_version())}


def _check_scores(scores, name: str) -> None:
    """ValueError unless `scores` is a non-empty {level: {log2 N: {path: finite positive score}}} with native."""
    if not isinstance(scores, dict) or not scores:
        raise ValueError(f"{name} is empty")
    for level in scores.values():
        if not isinstance(level, dict) or not level:
            raise ValueError(f"{name} has an empty row level")
        for point in level.values():
            if not isinstance(point, dict) or "native" not in point:
                raise ValueError(f"{name} has a point without torch's time")
            if not all(isinstance(v, (int, float)) and 0 < v < float("inf") for v in point.values()):
                raise ValueError(f"{name} has a score that is not a finite positive number")


def _read_tuned(path: Path, target: str | None = None):
    """The Tuned table in `path`, or a string saying why it is not used (unreadable, malformed, measured for another
    compile target, or stale: other kernels, launch code, torch or NVRTC); cached until the file changes."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    stamp = (st.st_mtime_ns, st.st_size, st.st_ino, target)
    with _tuned_lock:
        hit = _tuned.get(path)
        if hit is not None and hit[0] == stamp:
            return hit[1]
    try:
        d = json.loads(path.read_text())
        if not isinstance(d, dict) or d.get("format") != TUNED_FORMAT:
            raise ValueError(f"format {d.get('format') if isinstance(d, dict) else type(d).__name__!r}, this labkit "
                             f"reads {TUNED_FORMAT}")
        scores, graph, back, back_graph = (_scores_from_json(d["scores"]), _scores_from_json(d.get("graph")),
                                           _scores_from_json(d.get("backward")),
                                           _scores_from_json(d.get("backward_graph")))
        _check_scores(scores, "its scores")
        for other, name in ((graph, "its graph scores"), (back, "its backward scores"),
                            (back_graph, "its backward graph scores")):
            if other is not None:
                _check_scores(other, name)
        now = measured_with()
        changed = [k for k in now if d.get(k) != now[k]]
        if target is not None and d["device"].get("target") != target:
            value = (f"tuned table {path} was measured for {d['device'].get('target')}, this process compiles for "
                     f"{target}: run `labkit tune` again")
        elif changed:
            value = (f"tuned table {path} is stale (measured with other {', '.join(changed)}): run `labkit tune` "
                     "again")
        else:
            value = Tuned(scores, back, d["device"], f"tuned {d['created']}", path,
                          {k: d[k] for k in ("torch", "grid", "rounds", "seconds") if k in d}, graph, back_graph)
    except Exception as exc:  # whatever the file holds, a tuned table never breaks the rule: it is not used
        value = f"tuned table {path} is unreadable ({type(exc).__name__}: {exc}): run `labkit tune` again"
    with _tuned_lock:
        _tuned[path] = (stamp, value)
    return value


def write_tuned(device: dict, scores: dict, backward: dict | None, meta: dict, graph: dict | None = None,
                backward_graph: dict | None = None) -> Path:
    """Write a tuned table for `device` ({"name", "arch", "sm_count", ...}) atomically: its eager scores, the
    backward's, the graph-replay ones of each; returns its path."""
    from labkit.core.atomic import atomic_write_bytes

    _check_scores(scores, "the scores")  # a tune whose every measurement failed writes nothing
    path = tuned_path(device["name"], device["arch"], device["sm_count"])
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {"format": TUNED_FORMAT, "device": device, **meta, **measured_with(),  # what it was measured with wins
            "scores": scores_to_json(scores), "backward": scores_to_json(backward), "graph": scores_to_json(graph),
            "backward_graph": scores_to_json(backward_graph)}
    atomic_write_bytes(path, (json.dumps(body, indent=1, sort_keys=True) + "\n").encode())
    return path


def for_device(arch: int, sm_count: int, name: str | None = None, target: str | None = None
               ) -> tuple[object | None, str]:
    """(table or None, which table serves and why) for a device; `name` (the GPU's name) lets a table `labkit
    tune` measured on this GPU serve, if it was measured for `target` (the compile target: sm_90, or compute_80
    under the arch override)."""
    stale = ""
    if name is not None:
        tuned = _read_tuned(tuned_path(name, arch, sm_count), target)
        if isinstance(tuned, Tuned):
            return tuned, (f"dispatch table tuned on this GPU ({name}, sm_{arch}, {sm_count} SMs) by `labkit tune` "
                           f"at {tuned.RUN_ID.removeprefix('tuned ')}, read from {tuned.path}")
        stale = f"{tuned}; " if tuned else ""
    table, which = committed(arch, sm_count)
    return table, stale + which


def committed(arch: int, sm_count: int) -> tuple[object | None, str]:
    """(the committed table module or None, which and why) for an arch and SM count: for_device without tuning."""
    same_arch = [t for t in tables() if t.DEVICE["arch"] == arch]
    exact = [t for t in same_arch if t.DEVICE["sm_count"] == sm_count]
    if exact:
        t = exact[0]
        return t, f"dispatch table measured on {t.DEVICE['name']} ({sm_count} SMs), run {t.RUN_ID}"
    if same_arch:
        t = min(same_arch, key=lambda t: abs(t.DEVICE["sm_count"] - sm_count))
        return t, (f"dispatch table measured on {t.DEVICE['name']} ({t.DEVICE['sm_count']} SMs, run {t.RUN_ID}), "
                   f"carried to {sm_count} SMs through its wave axis: not measured on this GPU")
    return None, f"no dispatch table measured on sm_{arch}"
