"""Twin rows: sentence vectors that are byte-for-byte identical (the same sentence in several
documents: boilerplate such as "Appeal dismissed.", numbering such as "2.", template lines).

Nested k-NN keeps a document's best sentence and the top ``k`` documents per query row. When a
sentence occurs in more documents than ``k``, its twins tie exactly, and the HNSW search returns an
arbitrary ``k`` of them: exhaustive SDR credits every document containing the sentence, the
candidate stage only some. :class:`Twins` lets :func:`.ann.knn_rounds` expand a hit to all of its
twins, so ties at the k-th place are kept whole (``SDR_STORE_KNN_TWINS``, off by default). On IRLeD
dev, where 8% of sentence rows have a twin in another document, exact nested k-NN gains from it
(``bench/experiments/candidates_exact.py``), but with HNSW, keeping the ties already among the returned hits
measured as well or better (``bench/two_stage.py``).

Twins are found by a 64-bit hash of each row's bytes (integer arithmetic, so identical rows hash
identically wherever they sit), grouped by sorting the hashes, and every group is verified byte for
byte (a hash collision never merges different vectors). The structure is in memory only, built
from the vector file's committed rows and extended when rows are appended (rebuilt after a
compaction: a new epoch).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from .vectorfile import CHUNK_ROWS

__all__ = ["TwinGroups", "Twins", "row_hashes"]

_SEED = 0x5D2_7E1  # fixed: equal rows hash equally in every process


def _words(block: np.ndarray) -> np.ndarray:
    """Rows of ``block`` as unsigned integer words (uint32 when the row size allows, else uint16)."""
    raw = np.ascontiguousarray(block)
    row_bytes = raw.shape[1] * raw.dtype.itemsize
    word = np.uint32 if row_bytes % 4 == 0 else np.uint16
    return raw.view(np.uint8).reshape(raw.shape[0], row_bytes).view(word)


@lru_cache(maxsize=8)
def _constants(n_words: int) -> np.ndarray:
    """Fixed odd random 64-bit multipliers, one per word of a row."""
    rng = np.random.default_rng(_SEED)
    return rng.integers(0, 2**63, size=n_words, dtype=np.uint64) * np.uint64(2) + np.uint64(1)


def row_hashes(block: np.ndarray) -> np.ndarray:
    """A 64-bit hash of each row's bytes, shape ``(rows,)`` uint64.

    A multilinear hash: the sum of the row's words times fixed odd random 64-bit constants, modulo
    2**64. Exact integer arithmetic: equal rows always hash equally.
    """
    if block.shape[0] == 0:
        return np.zeros(0, dtype=np.uint64)
    words = _words(block)
    consts = _constants(words.shape[1])
    out = np.empty(words.shape[0], dtype=np.uint64)
    with np.errstate(over="ignore"):
        for a in range(0, words.shape[0], 8192):
            out[a : a + 8192] = (words[a : a + 8192].astype(np.uint64) * consts).sum(axis=1, dtype=np.uint64)
    return out


def _identical_sets(rows: np.ndarray, matrix: np.ndarray) -> list[np.ndarray]:
    """The sets of byte-identical rows (two or more) among ``rows`` (ascending), which share a hash;
    more than one set only after a hash collision. Stored vectors are finite (checked at put)."""
    block = np.asarray(matrix[rows])
    sets = []
    while rows.size > 1:
        same = np.all(block == block[0], axis=1)
        if same.sum() > 1:
            sets.append(rows[same])
        rows, block = rows[~same], block[~same]
    return sets


@dataclass(frozen=True)
class TwinGroups:
    """Groups of identical rows among the first ``hashes.size`` rows of one vector file epoch.

    ``members[start[g] : start[g] + size[g]]`` are the rows of group ``g`` (ascending);
    ``group[r]`` is row ``r``'s group, ``-1`` when it has no twin. Never changed once built.
    """

    epoch: int | None = None
    hashes: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.uint64))
    group: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    members: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    start: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    size: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    @property
    def rows(self) -> int:
        return int(self.hashes.size)

    @classmethod
    def build(cls, epoch: int, hashes: np.ndarray, matrix: np.ndarray) -> "TwinGroups":
        """Group the rows of ``matrix`` whose ``hashes`` are equal, verified byte for byte."""
        order = np.argsort(hashes, kind="stable")
        runs = np.concatenate([[0], np.flatnonzero(np.diff(hashes[order]) != 0) + 1, [hashes.size]])
        groups = [
            rows
            for s0, s1 in zip(runs[:-1].tolist(), runs[1:].tolist())
            if s1 - s0 > 1
            for rows in _identical_sets(np.sort(order[s0:s1]), matrix)
        ]
        size = np.asarray([g.size for g in groups], dtype=np.int64)
        group = np.full(hashes.size, -1, dtype=np.int64)
        for g, rows in enumerate(groups):
            group[rows] = g
        return cls(
            epoch, hashes, group,
            np.concatenate(groups) if groups else np.zeros(0, dtype=np.int64),
            (np.cumsum(size) - size).astype(np.int64), size,
        )

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


class Twins:
    """The store's current :class:`TwinGroups`, brought up to date on demand (thread-safe)."""

    def __init__(self) -> None:
        self._groups = TwinGroups()
        self._lock = threading.Lock()

    def current(self, epoch: int, committed: int, matrix: np.ndarray) -> TwinGroups:
        """The groups of ``committed`` rows of ``matrix`` (the vector file of ``epoch``): rebuilt
        for a new epoch (or fewer rows); for appended rows only those are hashed."""
        with self._lock:
            old = self._groups
            if old.epoch == epoch and old.rows == committed:
                return old
            base = old.hashes if old.epoch == epoch and committed > old.rows else np.zeros(0, dtype=np.uint64)
            new = [row_hashes(matrix[a : min(committed, a + CHUNK_ROWS)]) for a in range(base.size, committed, CHUNK_ROWS)]
            self._groups = TwinGroups.build(epoch, np.concatenate([base, *new]), matrix)
            return self._groups
