"""Console output of CASU's library messages, for entry points.

Library modules log through `logging.getLogger(__name__)` and never print: a program that
imports them decides where their messages go. An entry point (`python -m casu_dataset`) calls
`setup_console_logging()` once, so users see the messages as the CLI always showed them: the
bare text, progress and notices (INFO) on stdout, warnings and errors on stderr."""

from __future__ import annotations

import logging
import sys

from casu_dataset.core.redact import RedactingFilter

LOGGER = "casu_dataset"


class _Console(logging.StreamHandler):
    """A handler writing to sys.stdout or sys.stderr as they are when a message is logged (a
    program or a test that swaps the stream after set-up still gets the message)."""

    def __init__(self, which: str):
        self._which = which  # "stdout" or "stderr"
        super().__init__()

    @property
    def stream(self):
        return getattr(sys, self._which)

    @stream.setter
    def stream(self, _value) -> None:  # StreamHandler.__init__ assigns one; the live stream wins
        pass


def setup_console_logging(level: int = logging.INFO) -> None:
    """Show the `casu_dataset` loggers' messages at `level` and above on the console; a second
    call changes the level and adds no second pair of handlers."""
    logger = logging.getLogger(LOGGER)
    logger.setLevel(level)
    if any(isinstance(h, _Console) for h in logger.handlers):
        return
    out, err = _Console("stdout"), _Console("stderr")
    out.addFilter(lambda record: record.levelno < logging.WARNING)
    err.setLevel(logging.WARNING)
    for h in (out, err):
        h.setFormatter(logging.Formatter("%(message)s"))
        h.addFilter(RedactingFilter())  # a key or token in a library message never reaches the console
        logger.addHandler(h)
