"""Paragraph centroids of the stored documents, kept in memory for the centroid pre-rank
(:mod:`sdr_search.reranker.prerank`).

Like the FAISS index, they are derived from the vector file and never written: the first request
after opening computes the centroids of every live document (one pass over the vector file),
and documents put later are added as they are asked for. They are held as float32 (a paragraph
costs ``4 * dim`` bytes; float16 halved that but its conversion back cost more than the pre-rank's
product: docs/results/two-stage.md, "Tried and not adopted") and keyed by a document's first row: rows are append-only within an
epoch, so a first row names one version of one document. A compaction starts a new epoch and a
new cache; entries of replaced or deleted documents are dropped when they outnumber the live ones.
"""

from __future__ import annotations

import json
import threading
from typing import Callable, Sequence

import numpy as np

from sdr_search.core.vectors import DocVectors

from sdr_search.core.scoring import paragraph_centroids
from .rows import offsets

__all__ = ["CentroidCache"]

Place = tuple[int, int, str]  # (row_start, n_sentences, par_sizes JSON), as the catalogue locates a document
Views = Callable[[list[int], list[int]], list[np.ndarray]]  # (row starts, row counts) -> vectors of each range
_FILL_CHUNK = 512  # documents whose vectors are read at once while filling


class CentroidCache:
    """Float32 paragraph centroids by first row, for one epoch of one store. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._epoch: int | None = None
        self._by_row: dict[int, np.ndarray] = {}

    def __len__(self) -> int:
        return len(self._by_row)

    def _compute(self, places: Sequence[Place], views: Views) -> None:
        for a in range(0, len(places), _FILL_CHUNK):
            chunk = [p for p in places[a : a + _FILL_CHUNK] if p[0] not in self._by_row]
            if not chunk:
                continue
            vectors = views([p[0] for p in chunk], [p[1] for p in chunk])
            for (row, _, sizes), v in zip(chunk, vectors):
                self._by_row[row] = c = paragraph_centroids(DocVectors(v, offsets(json.loads(sizes))))
                c.setflags(write=False)

    def get(
        self, epoch: int, places: Sequence[Place], views: Views, live: Callable[[], Sequence[Place]], n_live: int,
    ) -> list[np.ndarray]:
        """The centroids of the documents at ``places`` (read-only arrays, shared). ``live()`` lists every live
        document (``n_live`` of them); it is read to fill the cache on first use, and again to
        rebuild it once stale entries outnumber the live documents."""
        with self._lock:
            if self._epoch != epoch or len(self._by_row) > 2 * n_live + 1024:  # first use, compaction, or stale
                self._epoch, self._by_row = epoch, {}
                self._compute(list(live()), views)
            self._compute(places, views)
            return [self._by_row[p[0]] for p in places]
