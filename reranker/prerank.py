"""Centroid pre-rank: narrow a pool of vector candidates to the K that get the exact rerank
(backend-independent, pure).

The candidate aggregation (:mod:`sdr_search.reranker.candidates`) scores a document from its best-matching
sentences anywhere in it: SDR with the paragraph max relaxed to a document max. That relaxation
favours long documents whose matches are scattered over many paragraphs; the SDR top-10 documents
it misses at K = 100 on IRLeD dev are short ones (19-35 paragraphs where the candidates' median is
111-242). Paragraph centroids bring the paragraph structure back at a fraction of the exact cost:

- a paragraph's **centroid** is the normalised mean of its sentence vectors
  (:func:`sdr_search.core.scoring.paragraph_centroids`);
- a document's **centroid score** is SDR's shape with a paragraph pair scored by the cosine of its
  centroids: ``M[i, c] = max_j cos(centroid_i, centroid_cj)`` over the source paragraphs ``i``
  and the document's paragraphs ``j``, each row z-scored over the pool, then the mean over ``i``;
- the **pre-rank score** is ``w * z(aggregation score) + (1 - w) * z(centroid score)``, both
  z-scored over the pool, ``w`` = :data:`AGGREGATION_WEIGHT`.

The top ``prerank_factor * K`` documents by aggregation form the pool (``SDR_PRERANK_FACTOR``);
the best K by pre-rank score get the exact SDR score. The product is ``source paragraphs x pool
paragraphs``, about 1/20 of the exact rerank's ``source sentences x candidate sentences`` work.
The centroids come from the store (:meth:`sdr_search.indexer.store.DocumentStore.paragraph_centroids`):
the embedded store keeps them in memory, derived from its vector file; computing them from the
candidates' sentence vectors at query time cost more than the rerank itself on IRLeD.
It raises the top-10 recall at K = 100 with a pool of 2K, with exact nested k-NN and with the
engine's HNSW alike: docs/results/two-stage.md ("Exact k-NN, and what the pre-rank adds", "Fidelity").
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from sdr_search.core.fusion import zscore
from sdr_search.core.scoring import document_blocks, paragraph_centroids, rank, sdr_scores, stats_from_paragraph_scores
from sdr_search.core.vectors import DocVectors

__all__ = ["AGGREGATION_WEIGHT", "centroid_rows", "centroid_scores", "prerank_order", "prerank_order_of_rows",
           "scores_of_rows"]

AGGREGATION_WEIGHT = 0.5
"""Weight of the aggregation score in the pre-rank (the centroid score has ``1 -`` this). Equal
weights, not tuned: 0.3 to 0.7 gave the same top-10 recall within noise on IRLeD dev
(docs/results/two-stage.md, "Exact k-NN, and what the pre-rank adds")."""


def centroid_rows(source: DocVectors, centroids: Sequence[np.ndarray], *, block_rows: int = 4096) -> np.ndarray:
    """``M[i, c] = max_j cos(centroid_i, centroid_cj)``, float32 ``(source paragraphs, D)``: each
    source paragraph centroid's best cosine with the paragraph centroids of each document (given,
    :func:`paragraph_centroids`, one ``(paragraphs, dim)`` array per document). A store that scores
    next to its data computes the same rows there (:meth:`DocumentStore.centroid_rows`).

    Documents are multiplied in blocks of about ``block_rows`` centroids copied into one reused
    buffer: one product per document cost twice the arithmetic in call overhead, one concatenated
    copy of the whole pool as much in page faults (wiki pools hold 10k-20k paragraphs).
    """
    for c in centroids:
        if c.ndim != 2 or c.shape[0] == 0 or c.shape[1] != source.dim:
            raise ValueError(f"dimension mismatch: source has {source.dim}, a document's centroids have shape {c.shape}")
    cs = paragraph_centroids(source)  # (n, dim)
    M = np.empty((cs.shape[0], len(centroids)), dtype=np.float32)
    if not centroids:
        return M
    rows = [c.shape[0] for c in centroids]
    blocks = document_blocks(rows, block_rows)
    widest = max(sum(rows[a:b]) for a, b in blocks)
    block = np.empty((widest, source.dim), dtype=np.float32)
    product = np.empty(cs.shape[0] * widest, dtype=np.float32)
    for a, b in blocks:
        n_rows = sum(rows[a:b])
        np.concatenate(centroids[a:b], out=block[:n_rows], casting="same_kind")
        sims = product[: cs.shape[0] * n_rows].reshape(cs.shape[0], n_rows)
        np.matmul(cs, block[:n_rows].T, out=sims)
        M[:, a:b] = np.maximum.reduceat(sims, np.cumsum([0, *rows[a : b - 1]]), axis=1)
    return M


def centroid_scores(source: DocVectors, centroids: Sequence[np.ndarray], *, block_rows: int = 4096) -> np.ndarray:
    """Centroid score for ``source`` of each document whose paragraph centroids are given
    (:func:`paragraph_centroids`, one ``(paragraphs, dim)`` array per document; module
    docstring), float64 ``(D,)``: :func:`scores_of_rows` of :func:`centroid_rows`.

    The per-source-paragraph z-scores use the mean and std over these documents (the pool), so
    the scores are only comparable within one call.
    """
    if not centroids:
        return np.zeros(0, dtype=np.float64)
    return scores_of_rows(centroid_rows(source, centroids, block_rows=block_rows))


def scores_of_rows(M: np.ndarray) -> np.ndarray:
    """Centroid scores from :func:`centroid_rows`: each row z-scored over the pool, then the mean."""
    return sdr_scores(M, stats_from_paragraph_scores(M))


def prerank_order(
    ids: Sequence[str], aggregation_scores: np.ndarray, source: DocVectors, centroids: Sequence[np.ndarray],
    *, weight: float = AGGREGATION_WEIGHT,
) -> list[int]:
    """Positions of ``ids`` (the pool; ``centroids`` their paragraph centroids, same order) best
    first by ``weight * z(aggregation) + (1 - weight) * z(centroid score)``; ties by id ascending."""
    if len(ids) != len(centroids):
        raise ValueError(f"{len(ids)} ids and {len(centroids)} centroid sets")
    return prerank_order_of_rows(ids, aggregation_scores, centroid_rows(source, centroids), weight=weight)


def prerank_order_of_rows(
    ids: Sequence[str], aggregation_scores: np.ndarray, M: np.ndarray, *, weight: float = AGGREGATION_WEIGHT,
) -> list[int]:
    """:func:`prerank_order` from the pool's :func:`centroid_rows` ``M`` (columns in ``ids`` order), as
    a store that scores next to its data returns them."""
    if len(ids) != len(aggregation_scores) or M.shape[1] != len(ids):
        raise ValueError(f"{len(ids)} ids, {len(aggregation_scores)} scores and {M.shape[1]} centroid columns")
    if not 0.0 <= weight <= 1.0:
        raise ValueError(f"weight must be in [0, 1], got {weight}")
    scores = scores_of_rows(M) if len(ids) else np.zeros(0, dtype=np.float64)
    fused = weight * zscore(aggregation_scores) + (1.0 - weight) * zscore(scores)
    return rank(list(ids), fused)
