"""Environment variables set for the length of a block and then put back as they were (set to
their old value, or unset again): the one place that saves and restores os.environ."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager


def _put(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


@contextmanager
def environment(values: Mapping[str, str | None]) -> Iterator[None]:
    """Set each variable of `values` (None: unset it) inside the block; afterwards every one of
    them is restored, also when the block raised."""
    saved = {k: os.environ.get(k) for k in values}
    try:
        for k, v in values.items():
            _put(k, v)
        yield
    finally:
        for k, old in saved.items():
            _put(k, old)
