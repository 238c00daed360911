"""The errors CASU raises on purpose: one root and one base per meaning, each with its exit code.

Entry points catch `CasuError` alone, print its message in one line and exit with its
`exit_code`; anything else is a bug and keeps its traceback. Nothing raises `CasuError` itself:
every error class derives from exactly one of the five bases below, which alone set `exit_code`
(tests/test_errors.py checks both), so an error's exit code follows from what it means:

    InputError     2  bad input: a flag, a config, a file or a folder (argparse's usage code)
    RunError       1  a step of a valid run failed (a build, a mix check, the second realization)
    ModelError     3  a model, an adapter, an LLM backend or its reply
    HubError       5  the Hugging Face Hub could not be reached or refused
    ResourceError  6  a resource ran out (a full disk, a size limit, memory)

A subclass of a base exists only where some caller catches it by name or its message differs in
kind; `FieldError` is the message mechanism a class combines with its base
(`class ConfigError(InputError, FieldError, ValueError)`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable


class CasuError(Exception):
    """An expected failure with a message meant for the user (it names the file, field or flag).
    The root that entry points catch; raise one of the five bases below (or a subclass)."""

    #: Set by the base of the error's meaning (InputError, RunError, ModelError, HubError,
    #: ResourceError), never by a subclass.
    exit_code: int


class InputError(CasuError):
    """Bad input: a flag, a config, a file or a folder; the message names which and why."""

    exit_code = 2  # the usage-error code of argparse and of most CLIs


class RunError(CasuError):
    """A step of a valid run failed (a build, a merge, a mix check, the second realization)."""

    exit_code = 1


class ModelError(CasuError):
    """A model, an adapter or an LLM backend cannot be loaded or run, or its reply is unusable."""

    exit_code = 3


@dataclass(frozen=True)
class Field:
    """A config field named in an error; `value` picks one value of it (lock="relock")."""

    name: str
    value: str | None = None

    def __str__(self) -> str:
        return self.name if self.value is None else f"{self.name}={self.value}"


class FieldError(CasuError):
    """A message made of text and Fields, so each caller names a field its own way: `str()` uses
    the field names (the Python API), a command its flags (`render`). Library code raises these
    instead of naming a flag it cannot know was typed. It sets no exit code: a class combines it
    with the base of its meaning, base first (`class BuildError(RunError, FieldError)`)."""

    def __init__(self, *parts: str | Field):
        self.parts = parts
        self.fields = tuple(p for p in parts if isinstance(p, Field))
        super().__init__(self.render(str))

    def render(self, name: Callable[[Field], str]) -> str:
        return "".join(name(p) if isinstance(p, Field) else p for p in self.parts)


class HubError(FieldError):
    """The Hugging Face Hub could not be reached (offline, no route) or refused (token,
    permissions); the message names the flag (a Field, as the commands show it), the repo and why.
    (A bad repo id or folder, before anything is sent, is core.hub.PushError: bad input.)"""

    exit_code = 5


class LoadError(InputError, ValueError):
    """A built dataset that cannot be read as asked (also: no dataset at that path); the message
    names the folder or repo, the config, the file or the field (from the harness, it starts with
    `--dataset`). Here, not in formats/reader.py, so that contract.UnknownTaskError can be one too."""


class BuildError(RunError, FieldError, RuntimeError):
    """A build, a merge or a contrast family's variant that failed (the message names the flag, the
    folder or the family and variant). Here, not in dataset/build.py, because families/ (a lower
    stage) raises it too; a build reports a failed family as skipped and goes on."""

    # What was built and skipped (a dataset.report.BuildReport), when the refusal follows a build;
    # typed Any because core imports no higher stage.
    report: Any = None


# -- resources: a full disk, a file size limit, too long a name, no permission, no memory ---------

#: The exit code of a run stopped by a resource (disk, file size limit, memory), in both CLIs.
EXIT_RESOURCE = 6


class ResourceError(CasuError):
    """A resource ran out (a full disk, a size limit, memory); the message names the path."""

    exit_code = EXIT_RESOURCE


_RESOURCE_WHY = {
    "ENOSPC": "no space left on the device",
    "EDQUOT": "the disk quota is exceeded",
    "EFBIG": "the file grew past this process's file size limit (ulimit -f)",
    "ENAMETOOLONG": "the file name is too long for the file system",
    "EACCES": "permission denied",
    "EPERM": "operation not permitted",
    "EROFS": "the file system is read-only",
    "EMFILE": "too many open files (ulimit -n)",
}


def resource_message(err: BaseException, writing: str | None = None) -> str | None:
    """One line for an error that a resource caused (naming the path and what ran out), or None
    for any other error (a bug, which keeps its traceback). `writing`: the command's output (a
    flag and its path), named when the error itself carries no file name (a failed write())."""
    import errno
    import sqlite3

    if isinstance(err, MemoryError):
        return (
            "out of memory: the run asked for more than this machine has; ask for less "
            "(a smaller --bootstrap_iters, --limit, batch size or --num-proc)"
        )
    if isinstance(err, sqlite3.OperationalError) and any(
        s in str(err).lower() for s in ("disk is full", "disk i/o error", "readonly database")
    ):
        return f"the response cache could not be written ({err}): free space or give another --cache"
    if isinstance(err, OSError) and err.errno is not None:
        name = errno.errorcode.get(err.errno, "")
        if name in _RESOURCE_WHY:
            where = err.filename if err.filename is not None else f"writing {writing or 'a file'}"
            return f"{where}: {_RESOURCE_WHY[name]} ({name}); nothing half-written was kept"
    return None
