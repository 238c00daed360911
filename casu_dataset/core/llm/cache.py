"""A response cache in SQLite: a re-run with the same backend, prompt and settings costs nothing."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

from casu_dataset.core.content_key import content_key


class ResponseCache:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(self.path), check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        self._db.commit()
        self.hits = 0
        self.misses = 0

    @staticmethod
    def key(*parts) -> str:
        # ensure_ascii=False: the form of the keys in the caches on disk (another form misses them all)
        return content_key(list(parts), ensure_ascii=False)

    def get(self, key: str) -> str | None:
        with self._lock:  # counters too: several threads share one cache
            row = self._db.execute("SELECT value FROM responses WHERE key = ?", (key,)).fetchone()
            if row is None:
                self.misses += 1
                return None
            self.hits += 1
        return row[0]

    def put(self, key: str, value: str) -> None:
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO responses (key, value) VALUES (?, ?)", (key, value))
            self._db.commit()


class CachedBackend:
    """Wraps a backend; identical requests are answered from the cache."""

    def __init__(self, backend, cache: ResponseCache):
        self.backend = backend
        self.cache = cache
        self.fingerprint = backend.fingerprint

    def complete(self, messages, schema=None, max_tokens=512, temperature=0.0) -> str:
        k = self.cache.key(self.fingerprint, messages, schema, max_tokens, temperature)
        hit = self.cache.get(k)
        if hit is not None:
            return hit
        out = self.backend.complete(messages, schema=schema, max_tokens=max_tokens, temperature=temperature)
        self.cache.put(k, out)
        return out
