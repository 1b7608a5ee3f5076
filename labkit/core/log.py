"""labkit's logger ("labkit", with a child per module), and whether its lines reach a user who configured no logging.

What a first call waits on (the host extension's C++ build, each NVRTC compile) is logged at INFO, one line each; a
cache hit logs nothing at INFO. Python's own fallback (logging.lastResort) shows WARNING and above only, so those
lines would be lost on a program that never configures logging. `install_default_output` therefore gives the
"labkit" logger level INFO (unless something set a level on it first) and one handler that writes to stderr only
while the root logger has no handler, i.e. until the application configures logging. From then on the lines reach
the application's handlers by ordinary propagation, and nothing is printed twice;
`logging.getLogger("labkit").setLevel(logging.WARNING)` silences them. The handler writes through tqdm, so a line
never tears a progress bar (`labkit warmup`'s, `labkit tune`'s).
"""
from __future__ import annotations

import logging
import sys

LOGGER = logging.getLogger("labkit")


class UntilConfigured(logging.Handler):
    """stderr, while the application has configured no logging (the root logger has no handler)."""

    def emit(self, record: logging.LogRecord) -> None:
        if logging.root.handlers:
            return  # the record propagates to the application's handlers instead
        try:
            from tqdm import tqdm

            tqdm.write(self.format(record), file=sys.stderr)
        except Exception:
            self.handleError(record)


def install_default_output() -> None:
    """Give "labkit" its INFO level and UntilConfigured handler, once per process (at `import labkit`)."""
    if LOGGER.level == logging.NOTSET:
        LOGGER.setLevel(logging.INFO)
    if not any(isinstance(h, UntilConfigured) for h in LOGGER.handlers):
        handler = UntilConfigured()
        handler.setFormatter(logging.Formatter("labkit: %(message)s"))
        LOGGER.addHandler(handler)
