"""The one base class of every error CASU raises on purpose.

Entry points catch `CasuError` alone, print its message in one line and exit with its
`exit_code`; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


class CasuError(Exception):
    """An expected failure with a message meant for the user (it names the file, field or flag)."""

    #: 2 = bad input or configuration (the usage-error code of argparse and of most CLIs);
    #: subclasses for runtime failures (a model, a server) use 1.
    exit_code: int = 2


@dataclass(frozen=True)
class Field:
    """A config field named in an error; `value` picks one value of it (lock="relock")."""

    name: str
    value: str | None = None

    def __str__(self) -> str:
        return self.name if self.value is None else f"{self.name}={self.value}"


class FieldError(CasuError):
    """A CasuError whose message is made of text and Fields, so each caller names a field its
    own way: `str()` uses the field names (the Python API), a command its flags (`render`).
    Library code raises these instead of naming a flag it cannot know was typed."""

    def __init__(self, *parts: str | Field):
        self.parts = parts
        self.fields = tuple(p for p in parts if isinstance(p, Field))
        super().__init__(self.render(str))

    def render(self, name: Callable[[Field], str]) -> str:
        return "".join(name(p) if isinstance(p, Field) else p for p in self.parts)
