"""Ctrl+C and SIGTERM stop a command with one line and the shell's exit code (130, 143).

`stop_on_signals()` makes SIGINT raise KeyboardInterrupt (also in a process started with SIGINT
ignored, as a shell starts a background job) and SIGTERM raise `Stopped`, in the main thread, so
the `with`/`finally` blocks below unwind: a build's staging folder is removed, a pool's workers
are terminated, temp files are cleaned. Worker processes are started `with ignoring_sigint()`:
the parent alone decides what Ctrl+C stops (a terminal sends it to the whole process group), and
the workers are terminated by their pool without a traceback each.
"""

from __future__ import annotations

import contextlib
import signal


class Stopped(BaseException):
    """SIGTERM arrived (a BaseException, like KeyboardInterrupt: no `except Exception` swallows it)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _raise_stopped(signum, frame):
    raise Stopped(signum)


def stop_on_signals() -> dict | None:
    """In the main thread of a command: SIGINT -> KeyboardInterrupt, SIGTERM -> Stopped. Returns
    the handlers it replaced, for `restore_signals` (a command called in-process, from a test or a
    notebook, leaves the caller's handlers as they were); None off the main thread (nothing set)."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        return None
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _raise_stopped)
    return previous


def restore_signals(previous: dict | None) -> None:
    for s, handler in (previous or {}).items():
        signal.signal(s, handler if handler is not None else signal.SIG_DFL)


@contextlib.contextmanager
def ignoring_sigint():
    """Around starting worker processes: they inherit SIGINT ignored from their first instruction
    (a terminal's Ctrl+C reaches the whole process group, imports included); the parent's handler
    is back when the block ends. Off the main thread, nothing changes."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before if before is not None else signal.SIG_DFL)


def stopped_exit(err: BaseException) -> tuple[int, str]:
    """(exit code, signal name) of a KeyboardInterrupt or Stopped: 128 + the signal number."""
    signum = err.signum if isinstance(err, Stopped) else signal.SIGINT
    name = "Ctrl+C (SIGINT)" if signum == signal.SIGINT else signal.Signals(signum).name
    return 128 + int(signum), name
