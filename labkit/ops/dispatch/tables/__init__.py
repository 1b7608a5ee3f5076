"""Dispatch tables measured per device, one generated module each (scripts/dispatch_table.py writes them from a
committed dispatch_table run; do not edit them). A module holds RUN_ID, DEVICE {"name", "arch", "sm_count"} and
SCORES[row level][log2 N] = {path: eager time / torch's}.

Which table serves a device (`for_device`), as documented in README "Dispatch":
  1. the table measured on a GPU of the same arch and SM count;
  2. else one of the same arch (the nearest SM count): the row axis counts waves of the chain schedule's blocks,
     so it carries to another SM count, but the table was not measured there and the reason says so;
  3. else none: torch's own kernel serves the drop-in, and chain_layer_norm's automatic schedule falls back to the
     waves rule (labkit.ops.dispatch.rule.schedule).
"""
from __future__ import annotations

import importlib
import pkgutil
import re

_tables: list | None = None


def module_name(name: str, arch: int, sm_count: int) -> str:
    """The generated module's name for a device, e.g. nvidia_h200_sm90_132."""
    return f"{re.sub(r'[^a-z0-9]+', '_', name.lower()).strip('_')}_sm{arch}_{sm_count}"


def tables() -> list:
    """Every generated table module in this package, imported once."""
    global _tables
    if _tables is None:
        _tables = [importlib.import_module(f"{__name__}.{m.name}") for m in pkgutil.iter_modules(__path__)]
    return _tables


def for_device(arch: int, sm_count: int) -> tuple[object | None, str]:
    """(table module or None, which table serves and why) for a device."""
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
