"""labkit's logger ("labkit", with a child per module), and the lines a first use prints while it waits.

A library leaves logging's configuration to the application: labkit sets no level and adds no handler. What a
first call waits on (the host extension's C++ build, each NVRTC compile; a cache hit says nothing) goes through
`first_use`. Where the application has configured no logging (the root logger has no handler) and set no level on
"labkit", Python's own fallback would drop an INFO line, and a user would meet a silent wait of tens of seconds:
there the line is written to stderr, through tqdm so that it never tears a progress bar (`labkit warmup`'s, `labkit
tune`'s). Everywhere else it is an INFO record, and the application's configuration decides whether it shows.
LABKIT_QUIET=1 drops the stderr lines (the book runner sets it: a page shows its results, not a build's log).
"""
from __future__ import annotations

import logging
import os
import sys

LOGGER = logging.getLogger("labkit")


def _unconfigured() -> bool:
    return not logging.root.handlers and LOGGER.level == logging.NOTSET and os.environ.get("LABKIT_QUIET") != "1"


def first_use(logger: logging.Logger, msg: str, *args) -> None:
    """Say what a first use waits on: to stderr where nothing is configured (see the module docstring), else as
    `logger.info(msg, *args)`."""
    if not _unconfigured():
        logger.info(msg, *args)
        return
    line = "labkit: " + (msg % args if args else msg)
    try:
        from tqdm import tqdm

        tqdm.write(line, file=sys.stderr)
    except ImportError:
        print(line, file=sys.stderr)
