"""Twin rows: sentence vectors that are byte-for-byte identical (the same sentence in several
documents: boilerplate such as "Appeal dismissed.", numbering such as "2.", template lines).

Nested k-NN keeps a document's best sentence and the top ``k`` documents per query row. When a
sentence occurs in more documents than ``k``, its twins tie exactly, and the HNSW search returns an
arbitrary ``k`` of them: exhaustive SDR credits every document containing the sentence, the
candidate stage only some. :class:`Twins` lets :func:`.ann.knn_rounds` expand a hit to all of its
twins, so ties at the k-th place are kept whole (``SDR_STORE_KNN_TWINS``, off by default). On IRLeD
dev, where 8% of sentence rows have a twin in another document, exact nested k-NN gains from it
(``bench/candidates_exact.py``), but with HNSW, keeping the ties already among the returned hits
measured as well or better (``bench/two_stage.py``).

Twins are found by a 64-bit hash of each row's bytes (integer arithmetic, so identical rows hash
identically wherever they sit), grouped by sorting the hashes, and every group is verified byte for
byte (a hash collision never merges different vectors). The structure is in memory only, built
from the vector file's committed rows and extended when rows are appended (rebuilt after a
compaction: a new epoch).
"""

from __future__ import annotations

import threading

import numpy as np

from .vectorfile import CHUNK_ROWS

__all__ = ["Twins", "row_hashes"]

_SEED = 0x5D2_7E1  # fixed: hashes are comparable across runs (nothing persists them, but tests may)


def _words(block: np.ndarray) -> np.ndarray:
    """Rows of ``block`` as unsigned integer words (uint32 when the row size allows, else uint16)."""
    raw = np.ascontiguousarray(block)
    row_bytes = raw.shape[1] * raw.dtype.itemsize
    word = np.uint32 if row_bytes % 4 == 0 else np.uint16
    return raw.view(np.uint8).reshape(raw.shape[0], row_bytes).view(word)


def row_hashes(block: np.ndarray) -> np.ndarray:
    """A 64-bit hash of each row's bytes, shape ``(rows,)`` uint64.

    A multilinear hash: the sum of the row's words times fixed odd random 64-bit constants, modulo
    2**64. Exact integer arithmetic: equal rows always hash equally.
    """
    if block.shape[0] == 0:
        return np.zeros(0, dtype=np.uint64)
    words = _words(block)
    rng = np.random.default_rng(_SEED)
    consts = rng.integers(0, 2**63, size=words.shape[1], dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    out = np.empty(words.shape[0], dtype=np.uint64)
    with np.errstate(over="ignore"):
        for a in range(0, words.shape[0], 8192):
            out[a : a + 8192] = (words[a : a + 8192].astype(np.uint64) * consts).sum(axis=1, dtype=np.uint64)
    return out


class Twins:
    """Groups of identical rows among the first :attr:`rows` rows of one vector file epoch.

    ``members[start[g] : start[g] + size[g]]`` are the rows of group ``g`` (ascending);
    ``group[r]`` is row ``r``'s group, ``-1`` when it has no twin.
    """

    def __init__(self) -> None:
        self.epoch: int | None = None
        self.rows = 0
        self._hashes = np.zeros(0, dtype=np.uint64)
        self.group = np.zeros(0, dtype=np.int64)
        self.members = np.zeros(0, dtype=np.int64)
        self.start = np.zeros(0, dtype=np.int64)
        self.size = np.zeros(0, dtype=np.int64)
        self._lock = threading.Lock()

    def current(self, epoch: int, committed: int, matrix: np.ndarray) -> "Twins":
        """Bring the groups up to date with ``committed`` rows of ``matrix`` (the vector file of
        ``epoch``): rebuilt for a new epoch (or fewer rows), extended for appended rows."""
        with self._lock:
            if self.epoch == epoch and committed == self.rows:
                return self
            fresh = Twins()
            fresh.epoch = epoch
            base = self._hashes if self.epoch == epoch and committed > self.rows else np.zeros(0, dtype=np.uint64)
            new = [row_hashes(matrix[a : min(committed, a + CHUNK_ROWS)]) for a in range(base.size, committed, CHUNK_ROWS)]
            fresh._hashes = np.concatenate([base, *new])
            fresh.rows = committed
            fresh._group(matrix)
            self.epoch, self.rows, self._hashes = fresh.epoch, fresh.rows, fresh._hashes
            self.group, self.members, self.start, self.size = fresh.group, fresh.members, fresh.start, fresh.size
        return fresh

    def _group(self, matrix: np.ndarray) -> None:
        n = self.rows
        order = np.argsort(self._hashes, kind="stable")
        h = self._hashes[order]
        boundary = np.flatnonzero(np.diff(h) != 0) + 1
        starts = np.concatenate([[0], boundary])
        sizes = np.diff(np.concatenate([starts, [n]]))
        multi = sizes > 1
        starts, sizes = starts[multi], sizes[multi]
        groups: list[np.ndarray] = []
        for s0, m in zip(starts.tolist(), sizes.tolist()):
            rows = np.sort(order[s0 : s0 + m])
            block = np.asarray(matrix[rows])  # stored vectors are finite (checked at put)
            same = np.all(block == block[0], axis=1)
            # a hash collision (rare): keep each set of identical rows that has a partner
            while rows.size > 1:
                if same.sum() > 1:
                    groups.append(rows[same])
                rows, block = rows[~same], block[~same]
                if rows.size:
                    same = np.all(block == block[0], axis=1)
        self.group = np.full(n, -1, dtype=np.int64)
        self.size = np.asarray([g.size for g in groups], dtype=np.int64)
        self.start = np.concatenate([[0], np.cumsum(self.size)[:-1]]).astype(np.int64) if groups else np.zeros(0, np.int64)
        self.members = np.concatenate(groups) if groups else np.zeros(0, dtype=np.int64)
        for g, rows in enumerate(groups):
            self.group[rows] = g

    def expand(self, rows: np.ndarray, dist: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Hits ``(rows, dist)`` with every twin of a hit row added at the same similarity
        (rows past :attr:`rows` and ``-1`` padding pass through). Order is not kept."""
        rows = np.asarray(rows, dtype=np.int64)
        if self.members.size == 0 or rows.size == 0:
            return rows, dist
        known = (rows >= 0) & (rows < self.rows)
        g = np.full(rows.shape, -1, dtype=np.int64)
        g[known] = self.group[rows[known]]
        grouped = g >= 0
        if not grouped.any():
            return rows, dist
        gs, first = np.unique(g[grouped], return_index=True)
        gdist = dist[grouped][first]
        sizes = self.size[gs]
        ends = np.cumsum(sizes)
        idx = np.repeat(self.start[gs] - (ends - sizes), sizes) + np.arange(int(ends[-1]), dtype=np.int64)
        return (np.concatenate([rows[~grouped], self.members[idx]]),
                np.concatenate([dist[~grouped], np.repeat(gdist, sizes)]))
