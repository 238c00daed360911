"""The query-embedding cache: the vector `Embedder.encode` returned for each text, kept on disk per
model (the twin of the catalog-embedding cache in retrieval.py), so a build whose queries were all
seen before plans its retrieval without loading sentence-transformers (or importing torch).

One SQLite file per model and EMBED_VERSION under the embeddings folder. Several processes may read
and write it at once (SQLite's locking; a write is one transaction, so a reader sees all of it or
none). Each row carries a digest of its text and vector bytes: a row that does not match it is
treated as missing and encoded again, so a damaged file never yields a wrong vector. A file SQLite
cannot read at all is named in a warning and replaced by an empty one.
"""

from __future__ import annotations

import hashlib
import logging
import os
import sqlite3
import threading
from collections.abc import Iterable
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)

BUSY_TIMEOUT_S = 60.0  # another process's write transaction lasts milliseconds; a build waits for it
_BATCH = 500  # texts per SELECT (under SQLite's bound-variable limit)
_DTYPE = np.dtype("<f4")


def _check(text: str, blob: bytes) -> bytes:
    return hashlib.blake2b(text.encode() + b"\0" + blob, digest_size=8).digest()


class QueryCache:
    """text -> float32 vector, on disk at `path`; every failure to use the file is a warning and a
    miss (the caller encodes the text), never an error of the build."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._db: sqlite3.Connection | None = None
        self._off = False  # the file could not be used in this process: memo only from here on
        self._rebuilt = False  # a damaged file is started again once per process, not in a loop
        # One connection per process, shared by its threads (the retrieval checks of an agent run
        # call encode from a pool) under this lock; a forked child never uses its parent's.
        self._lock = threading.RLock()
        self._pid = os.getpid()

    def _connect(self) -> sqlite3.Connection | None:
        if self._pid != os.getpid():  # forked: the parent's connection is the parent's (never closed here)
            self._db, self._pid = None, os.getpid()
        if self._db is None and not self._off:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                db = sqlite3.connect(
                    str(self.path), timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
                )
                db.execute(
                    "CREATE TABLE IF NOT EXISTS vectors "
                    "(text TEXT PRIMARY KEY, vec BLOB NOT NULL, digest BLOB NOT NULL)"
                )
                self._db = db
            except (sqlite3.DatabaseError, OSError) as err:
                self._unusable(err)
        return self._db

    def _unusable(self, err: Exception) -> None:
        """A file SQLite calls damaged is replaced by an empty one (the texts are encoded again);
        anything else (locked past the timeout, a read-only folder) turns the disk cache off here."""
        if self._db is not None:
            self._db.close()
            self._db = None
        # A damaged file raises DatabaseError itself ("file is not a database", "malformed"); its
        # subclasses (locked, misuse) say nothing about the file, which is kept.
        damaged = type(err) is sqlite3.DatabaseError
        if damaged and not self._rebuilt:
            log.warning(
                "query-embedding cache %s is unreadable (%s): starting it again empty", self.path, err
            )
            self._rebuilt = True
            for suffix in ("", "-journal", "-wal", "-shm"):
                Path(f"{self.path}{suffix}").unlink(missing_ok=True)
            return
        log.warning("query-embedding cache %s not used (%s): encoding without it", self.path, err)
        self._off = True

    def get(self, texts: Iterable[str], dim: int | None = None) -> dict[str, np.ndarray]:
        """The stored vectors of those `texts` that have one (whose digest matches, and of length
        `dim` when given, else of the length most rows have)."""
        with self._lock:
            return self._get(list(texts), dim)

    def _get(self, texts: list[str], dim: int | None) -> dict[str, np.ndarray]:
        for _ in range(2):  # once more after a damaged file was started again
            db = self._connect()
            if db is None or not texts:
                return {}
            try:
                rows = []
                for s in range(0, len(texts), _BATCH):
                    part = texts[s : s + _BATCH]
                    marks = ",".join("?" * len(part))
                    rows += db.execute(
                        f"SELECT text, vec, digest FROM vectors WHERE text IN ({marks})",  # noqa: S608
                        part,
                    ).fetchall()
                break
            except sqlite3.DatabaseError as err:
                self._unusable(err)
        else:
            return {}
        good = [(t, v) for t, v, d in rows if isinstance(v, bytes) and d == _check(t, v)]
        if dim is None and good:
            sizes = [len(v) for _, v in good]
            dim = max(set(sizes), key=sizes.count) // _DTYPE.itemsize
        nbytes = (dim or 0) * _DTYPE.itemsize
        return {t: np.frombuffer(v, dtype=_DTYPE) for t, v in good if len(v) == nbytes}

    def put(self, vectors: dict[str, np.ndarray]) -> None:
        """Store `vectors` in one transaction (a row already there is replaced: same text, same
        model, so the same vector, unless that row was damaged)."""
        with self._lock:
            self._put(vectors)

    def _put(self, vectors: dict[str, np.ndarray]) -> None:
        db = self._connect()
        if db is None or not vectors:
            return
        items = []
        for t, v in vectors.items():
            blob = np.ascontiguousarray(v, dtype=_DTYPE).tobytes()
            items.append((t, blob, _check(t, blob)))
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                db.executemany("INSERT OR REPLACE INTO vectors (text, vec, digest) VALUES (?, ?, ?)", items)
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        except sqlite3.DatabaseError as err:
            self._unusable(err)

    def close(self) -> None:
        with self._lock:
            if self._db is not None and self._pid == os.getpid():
                self._db.close()
            self._db = None
