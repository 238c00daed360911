"""Scene keys hash the catalog's fingerprint once per change, not once per key: the memo gives
catalog.fingerprint() exactly, and a duration measured mid-build (a lazy catalog) or another
catalog is hashed afresh."""

from __future__ import annotations

import copy

from casu_dataset.dataset.scene_cache import catalog_fingerprint
from casu_dataset.sounds.catalog import Catalog


def test_the_fingerprint_memo_follows_what_the_fingerprint_covers():
    cat = copy.deepcopy(Catalog.embedded())  # mutated below: not the shared one
    first = catalog_fingerprint(cat)
    assert first == cat.fingerprint() == catalog_fingerprint(cat)
    cat.clips[3].duration += 0.5  # as a lazy catalog's check measures it
    moved = catalog_fingerprint(cat)
    assert moved == cat.fingerprint() != first
    cat.clips[5].type = "another_type"
    assert catalog_fingerprint(cat) == cat.fingerprint() != moved
    other = copy.deepcopy(Catalog.embedded())
    assert catalog_fingerprint(other) == other.fingerprint() == first
