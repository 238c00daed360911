"""The one base class of every error CASU raises on purpose.

Entry points catch `CasuError` alone, print its message in one line and exit with its
`exit_code`; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations


class CasuError(Exception):
    """An expected failure with a message meant for the user (it names the file, field or flag)."""

    #: 2 = bad input or configuration (the usage-error code of argparse and of most CLIs);
    #: subclasses for runtime failures (a model, a server) use 1.
    exit_code: int = 2
