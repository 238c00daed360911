"""One seeded-RNG derivation for the builder and the harness: every random draw of a build (the
mixer's gaps, voice assignment, retrieval tie-breaks, realization 2) and of a run (masking noise,
the random baseline) comes from a stream keyed by what it is for, so a draw never depends on
what else is built or in what order. tests/test_contract.py pins the streams."""

from __future__ import annotations

import hashlib
from typing import Literal

import numpy as np


def key_int(key: str, nbytes: int = 8, byteorder: Literal["little", "big"] = "little") -> int:
    """The first `nbytes` of sha256(key) as an integer."""
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:nbytes], byteorder)


def derive_rng(
    seed: int | None, key: str, *salt: int, nbytes: int = 8, byteorder: Literal["little", "big"] = "little"
) -> np.random.Generator:
    """One independent, reproducible stream per (seed, key[, salt]): a draw never depends on what
    else is built or in what order. `nbytes`/`byteorder` keep the streams of dataset 2.x
    bit-compatible (the mixer uses 8 little-endian bytes, voices and retrieval 4 big-endian)."""
    parts = ([int(seed)] if seed is not None else []) + [key_int(key, nbytes, byteorder), *salt]
    return np.random.default_rng(parts)
