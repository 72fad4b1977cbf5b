"""Candidate documents from nested sentence k-NN hits (backend-independent, pure).

The store returns, for every source sentence, its top-k documents scored by their best-matching
sentence (nested k-NN semantics). These per-sentence hits are aggregated into one score per
document, and the top K documents go to the exact rerank. Aggregations:

- ``votes``: in how many source sentences' hit lists the document appears;
- ``sum``: sum over source sentences of the document's best similarity (0 when absent);
- ``weighted-sum`` (the engine's default, ``SDR_AGGREGATION``, chosen by measurement in
  ``bench/two_stage.py`` and ``bench/experiments/candidates_exact.py``): the ``sum`` with each source sentence
  weighted as SDR's normalisation weighs it: ``1 / (n_i * sigma_i)`` for a sentence of source
  paragraph ``i`` (``n_i`` sentences, statistics ``sigma_i``; without statistics, ``1 / n_i``). It is SDR with the paragraph max
  relaxed to a document max and absent hits counted as 0, so paragraphs whose scores vary little
  over the corpus, and sentences of short paragraphs, count for more, and a paragraph of
  boilerplate sentences (which match many documents equally) counts for less. On IRLeD dev at
  K = 100 it has the best top-10 recall for k >= 50 in ``bench/two_stage.py`` and at every k in
  ``bench/experiments/candidates_exact.py`` (exact k-NN); ``sum`` ties it at k = 20 and at K >= 200.
- ``sdr-bound``: an SDR-shaped upper bound. For source sentence k and document c,
  ``b_k(c)`` is the hit similarity when c was returned for k, otherwise the lowest similarity
  in k's hit list (with exact k-NN, c's best sentence scores at most that). Then
  ``A_i(c) = mean_{k in paragraph i} b_k(c)`` is >= the best paragraph score ``max_j P_ij`` of
  SDR, and the candidate score is ``mean_i (A_i(c) - mu_i) / sigma_i`` — SDR with the
  paragraph-level max relaxed to a document-level max, using the same normalisation.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from sdr_search.core.scoring import NormStats, top_of

from sdr_search.indexer.store import SentenceHits

__all__ = ["AGGREGATIONS", "aggregate_hits", "top_candidates"]

AGGREGATIONS = ("sum", "weighted-sum", "sdr-bound", "votes")


def _hit_matrix(hits: SentenceHits) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Union of hit documents, and an (S, C) matrix of similarities (NaN where absent)."""
    column: dict[str, int] = {}
    for row in hits.doc_ids:
        for d in row:
            if d not in column:
                column[d] = len(column)
    S = len(hits.doc_ids)
    M = np.full((S, len(column)), np.nan, dtype=np.float32)
    for k, (row, sc) in enumerate(zip(hits.doc_ids, hits.scores)):
        if row:
            M[k, [column[d] for d in row]] = np.asarray(sc, dtype=np.float32)
    return list(column), M, np.array([len(r) for r in hits.doc_ids])


def aggregate_hits(
    hits: SentenceHits,
    par_offsets: np.ndarray,
    *,
    method: str = "sdr-bound",
    stats: NormStats | None = None,
) -> tuple[list[str], np.ndarray]:
    """Score every document seen in ``hits``; returns ``(doc_ids, scores)`` (unsorted).

    ``par_offsets`` groups the source sentences (the rows of ``hits``) into paragraphs.
    """
    if method not in AGGREGATIONS:
        raise ValueError(f"unknown aggregation {method!r}; choose from {', '.join(AGGREGATIONS)}")
    par_offsets = np.asarray(par_offsets, dtype=np.int64)
    if par_offsets[-1] != len(hits.doc_ids):
        raise ValueError(f"{len(hits.doc_ids)} hit rows for {par_offsets[-1]} source sentences")
    ids, M, sizes = _hit_matrix(hits)
    if not ids:
        return [], np.zeros(0, dtype=np.float64)
    present = ~np.isnan(M)
    if method == "votes":
        return ids, present.sum(axis=0).astype(np.float64)
    if method == "sum":
        return ids, np.where(present, M, 0.0).sum(axis=0, dtype=np.float64)
    counts = np.diff(par_offsets)
    if method == "weighted-sum":
        sigma = np.ones(counts.size) if stats is None else np.asarray(stats.sigma, dtype=np.float64)
        weights = np.repeat(1.0 / (counts * sigma), counts)
        return ids, weights @ np.where(present, M, 0.0).astype(np.float64)
    # sdr-bound: absent -> the row's lowest returned similarity (rows with no hit: 0)
    floors = np.where(sizes > 0, np.nanmin(np.where(present, M, np.inf), axis=1), 0.0)
    floors = np.where(np.isfinite(floors), floors, 0.0).astype(np.float32)
    B = np.where(present, M, floors[:, None]).astype(np.float64)
    A = np.add.reduceat(B, par_offsets[:-1], axis=0) / counts[:, None]
    if stats is not None:
        A = (A - np.asarray(stats.mu, dtype=np.float64)[:, None]) / np.asarray(stats.sigma, dtype=np.float64)[:, None]
    return ids, A.mean(axis=0)


def top_candidates(ids: Sequence[str], scores: np.ndarray, k: int) -> list[str]:
    """The ``k`` best ids by score descending, ties by id ascending."""
    return top_of(ids, scores, k)[0]
