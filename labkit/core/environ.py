"""Environment variables set for the length of a block, the caller's values restored after (also on an exception).

One owner for the three places that need it: the host build (a venv's ninja on PATH), the book runner (LABKIT_QUIET
for the notebooks' kernels) and the deterministic comparisons (cuBLAS's workspace setting)."""
from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator


@contextlib.contextmanager
def scoped_environ(**values: str) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
