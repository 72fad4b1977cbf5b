"""On-disk cache of encoded documents (SQLite), keyed by model, encoder settings and text.

The key of a document is the SHA-256 of the encoder's ``cache_tag`` (model content hash, token
cap, precision, pooling) and the document's sentences, so any change of model, settings or
segmentation misses the cache instead of returning stale vectors. Vectors are stored as float32
bytes: a cached vector is bit-identical to a freshly computed one.
"""

from __future__ import annotations

import hashlib
import logging
import sqlite3
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from .errors import InputReadError

__all__ = ["EmbeddingCache", "document_key"]

logger = logging.getLogger(__name__)


def document_key(cache_tag: str, paragraphs: Sequence[Sequence[str]]) -> str:
    h = hashlib.sha256(cache_tag.encode("utf-8"))
    for para in paragraphs:
        h.update(b"\x1d")
        for s in para:
            h.update(b"\x1e")
            h.update(s.encode("utf-8"))
    return h.hexdigest()


class EmbeddingCache:
    """A tiny key -> float32 matrix store. Opened lazily; safe to share between processes
    (SQLite WAL, one writer at a time)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._conn: sqlite3.Connection | None = None

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                conn = sqlite3.connect(self.path, timeout=60)
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=NORMAL")
                conn.execute(
                    "CREATE TABLE IF NOT EXISTS vectors (key TEXT PRIMARY KEY, n INTEGER NOT NULL, "
                    "dim INTEGER NOT NULL, data BLOB NOT NULL)"
                )
                # what the token cap cut when an entry was encoded (entries written before this
                # table existed have no row: their sentences are tokenised again to count it)
                conn.execute(
                    "CREATE TABLE IF NOT EXISTS truncation (key TEXT PRIMARY KEY, sentences INTEGER NOT NULL, "
                    "truncated INTEGER NOT NULL, chars_cut INTEGER)"
                )
            except sqlite3.Error as e:
                raise InputReadError(f"cannot open the embedding cache {self.path}: {e}") from e
            self._conn = conn
        return self._conn

    def get_many(self, keys: Iterable[str]) -> dict[str, np.ndarray]:
        keys = list(dict.fromkeys(keys))
        out: dict[str, np.ndarray] = {}
        db = self._db()
        for i in range(0, len(keys), 500):
            chunk = keys[i : i + 500]
            q = "SELECT key, n, dim, data FROM vectors WHERE key IN (%s)" % ",".join("?" * len(chunk))
            for key, n, dim, data in db.execute(q, chunk):
                arr = np.frombuffer(data, dtype=np.float32)
                if arr.size != n * dim:
                    logger.warning("embedding cache entry %s is damaged; it will be recomputed", key[:12])
                    continue
                out[key] = arr.reshape(n, dim)
        return out

    def put_many(self, items: Iterable[tuple[str, np.ndarray]]) -> None:
        rows = [
            (k, int(v.shape[0]), int(v.shape[1]), np.ascontiguousarray(v, dtype=np.float32).tobytes())
            for k, v in items
        ]
        db = self._db()
        with db:
            db.executemany("INSERT OR REPLACE INTO vectors (key, n, dim, data) VALUES (?, ?, ?, ?)", rows)

    def get_truncation(self, keys: Iterable[str]) -> dict[str, tuple[int, int, int | None]]:
        """``key -> (sentences, truncated, chars_cut)`` for the entries whose cut is recorded."""
        keys = list(dict.fromkeys(keys))
        out: dict[str, tuple[int, int, int | None]] = {}
        db = self._db()
        for i in range(0, len(keys), 500):
            chunk = keys[i : i + 500]
            q = "SELECT key, sentences, truncated, chars_cut FROM truncation WHERE key IN (%s)" % ",".join("?" * len(chunk))
            for key, n, truncated, chars in db.execute(q, chunk):
                out[key] = (int(n), int(truncated), None if chars is None else int(chars))
        return out

    def put_truncation(self, items: Iterable[tuple[str, int, int, int | None]]) -> None:
        """Record ``(key, sentences, truncated, chars_cut)`` per entry."""
        rows = list(items)
        db = self._db()
        with db:
            db.executemany("INSERT OR REPLACE INTO truncation (key, sentences, truncated, chars_cut) VALUES (?, ?, ?, ?)",
                           rows)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> "EmbeddingCache":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
