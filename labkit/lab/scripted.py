"""TorchScript compilation, once per function per process, with what it said while compiling.

TorchScript is deprecated on recent torch and may be missing or raise; callers get the failure as data
(`error`) instead of an exception, so a study can record it as a row.

No `from __future__ import annotations` in modules whose functions are scripted: TorchScript reads their source.
"""
from __future__ import annotations

import threading
import warnings
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Scripted:
    fn: object | None  # the torch.jit.script'ed function, or None when compiling failed
    error: str | None
    warnings: tuple[str, ...] = field(default=())

    @property
    def available(self) -> bool:
        return self.fn is not None


_lock = threading.Lock()
_cache: dict = {}


def deprecations(caught) -> list[str]:
    """The deprecation/future warnings among `caught`, as sorted unique strings."""
    return sorted({f"{w.category.__name__}: {w.message}" for w in caught
                   if issubclass(w.category, (DeprecationWarning, FutureWarning))})


def script(fn) -> Scripted:
    """torch.jit.script(fn), compiled on first use and cached by the function's qualified name."""
    import torch

    key = f"{fn.__module__}.{fn.__qualname__}"
    with _lock:
        if key not in _cache:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                try:
                    compiled, error = torch.jit.script(fn), None
                except Exception as exc:  # recorded by the caller, never a crash
                    compiled, error = None, f"{type(exc).__name__}: {exc}"
            _cache[key] = Scripted(compiled, error, tuple(deprecations(caught)))
        return _cache[key]
