"""Content keys: the sha256 of a value's canonical JSON, the one way CASU names a cache entry or
a record by what determines it (scene cache, turn cache, LLM and harness response caches, the
faiss index cache, the build record's identity, adapter fingerprints).

Canonical JSON is `json.dumps` with sorted keys and its default separators (", ", ": ") and
`ensure_ascii=True`: the form of the scene, turn and index keys and of the build record, which
the caches on users' disks and the shipped records hold, so another form would change them all.
The response caches pass `ensure_ascii=False` (non-ASCII kept as UTF-8), the form of their keys
on disk. A value that is not JSON (a Path, a numpy number) is a
TypeError, never silently turned into a string that could collide with another value."""

from __future__ import annotations

import hashlib
import json

SEPARATORS = (", ", ": ")


def canonical_json(value, ensure_ascii: bool = True) -> str:
    return json.dumps(value, sort_keys=True, separators=SEPARATORS, ensure_ascii=ensure_ascii)


def content_key(value, length: int | None = None, ensure_ascii: bool = True) -> str:
    """Hex sha256 of `canonical_json(value)`, its first `length` characters if given."""
    return hashlib.sha256(canonical_json(value, ensure_ascii).encode("utf-8")).hexdigest()[:length]
