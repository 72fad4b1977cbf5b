"""The whole paragraph-pair matrix of an explanation (``explain_matrix``): every source paragraph
against every paragraph of a hit, the normalised scores ``N_ij`` the SDR score is computed from,
and for each cell its best sentence pair, so a reader can open any cell, not only the best pairs.

Pure functions of the vectors and statistics; :func:`paragraph_matrix` is tested against the
brute force of :mod:`sdr_search.core.reference`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from sdr_search.core.scoring import NormStats, paragraph_scores
from sdr_search.core.vectors import CorpusVectors, DocVectors

__all__ = ["PairMatrix", "paragraph_matrix", "matrix_cells", "matrix_body"]

_BLOCK_SENTENCES = 512  # candidate sentences per product: (source sentences x 512) float32, 11 MB for 5,305


@dataclass(frozen=True)
class PairMatrix:
    """Source paragraphs (rows) against a hit's paragraphs (columns).

    ``raw[i, j]`` is ``P_ij`` (the mean over the sentences of source paragraph ``i`` of each one's
    best cosine in paragraph ``j``), ``normalised[i, j]`` is ``N_ij = (P_ij - mu_i) / sigma_i``;
    ``source_sentence[i, j]`` and ``candidate_sentence[i, j]`` are the positions, inside paragraphs
    ``i`` and ``j``, of the cell's best sentence pair (the source sentence whose best cosine in ``j``
    is highest, and that best sentence), ``cosine[i, j]`` its cosine: the pair an explanation lists
    first for that paragraph pair."""

    raw: np.ndarray
    normalised: np.ndarray
    source_sentence: np.ndarray
    candidate_sentence: np.ndarray
    cosine: np.ndarray


def matrix_cells(n_rows: int, n_columns: Sequence[int]) -> int:
    """Cells of the matrices of one source of ``n_rows`` paragraphs against hits of ``n_columns``
    paragraphs each (what ``SDR_MAX_MATRIX_CELLS`` bounds)."""
    return int(n_rows) * int(sum(n_columns))


def paragraph_matrix(source: DocVectors, stats: NormStats, candidate: DocVectors, P: np.ndarray | None = None) -> PairMatrix:
    """The :class:`PairMatrix` of ``source`` (with its paragraphs' statistics) against ``candidate``.
    ``P``: the paragraph scores when already computed (the engine's, so the matrix and the
    explanation's paragraph pairs hold the same numbers)."""
    if P is None:
        P = paragraph_scores(source, CorpusVectors.from_docs([""], [candidate]))
    n, m = source.n_paragraphs, candidate.n_paragraphs
    P = np.asarray(P, dtype=np.float64)
    if P.shape != (n, m):
        raise ValueError(f"paragraph scores of shape {P.shape} for a {n} x {m} matrix")
    mu = np.asarray(stats.mu, dtype=np.float64)[:, None]
    sigma = np.asarray(stats.sigma, dtype=np.float64)[:, None]
    # A block of candidate paragraphs at a time (the sentence products of a long pair are never held at once:
    # 5,305 x 4,273 sentences would be 90 MB): each source sentence's best cosine in each paragraph of the
    # block (a max over contiguous rows, numpy's fast direction); per cell, the source sentence of the row's
    # paragraph with the highest of them (the first), then the candidate sentence it is best with (the first).
    src_starts = source.par_offsets[:-1]
    src_sizes = np.diff(source.par_offsets)
    positions = np.arange(source.n_sentences, dtype=np.int32)[:, None]
    k_best = np.empty((n, m), dtype=np.int64)
    r_best = np.empty((n, m), dtype=np.int64)
    cos = np.empty((n, m), dtype=np.float64)
    offsets = candidate.par_offsets
    j = 0
    while j < m:
        stop = j + 1
        while stop < m and offsets[stop + 1] - offsets[j] <= _BLOCK_SENTENCES:
            stop += 1
        block = candidate.vectors[offsets[j]:offsets[stop]] @ source.vectors.T  # (block sentences, source sentences)
        starts = (offsets[j:stop] - offsets[j]).astype(np.int64)
        best = np.ascontiguousarray(np.maximum.reduceat(block, starts, axis=0).T)  # (source sentences, paragraphs)
        top = np.maximum.reduceat(best, src_starts, axis=0)  # (source paragraphs, paragraphs of the block)
        first = np.minimum.reduceat(np.where(best == np.repeat(top, src_sizes, axis=0), positions,
                                             np.int32(source.n_sentences)), src_starts, axis=0)
        k_best[:, j:stop] = first - src_starts[:, None]
        cos[:, j:stop] = top
        for q in range(j, stop):
            rows = block[offsets[q] - offsets[j]:offsets[q + 1] - offsets[j]]
            r_best[:, q] = rows[:, first[:, q - j]].argmax(axis=0)
        j = stop
    return PairMatrix(P, (P - mu) / sigma, k_best, r_best, cos)


def matrix_body(
    matrix: PairMatrix, *, rows: Sequence[tuple[int | None, int]], stats: NormStats,
    source_spans: Sequence[Sequence[tuple[int, int] | None]], candidate_spans: Sequence[Sequence[tuple[int, int]]],
) -> dict[str, Any]:
    """The response's ``explanation.matrix`` (:class:`~sdr_search.reranker.results.ParagraphMatrix`):
    ``rows`` names each row as ``(like source or None, paragraph in it)``; the spans are each
    sentence's character offsets (the source's into the text ``source_offsets`` names, the
    candidate's into its stored text). The raw scores are not repeated: ``P_ij = mu_i + sigma_i N_ij``
    (each row carries its ``mu`` and ``sigma``), which keeps the body a third smaller."""
    n, m = matrix.normalised.shape
    if len(rows) != n or len(source_spans) != n or len(candidate_spans) != m:
        raise ValueError("rows, spans and the matrix disagree in shape")
    normalised = np.round(matrix.normalised, 6).tolist()
    cosine = np.round(matrix.cosine, 6).tolist()
    k, r = matrix.source_sentence.tolist(), matrix.candidate_sentence.tolist()
    return {
        "rows": [{**({"source": s} if s is not None else {}), "paragraph": p,
                  "mu": round(float(stats.mu[i]), 6), "sigma": round(float(stats.sigma[i]), 6),
                  "sentences": [list(span) if span is not None else None for span in source_spans[i]]}
                 for i, (s, p) in enumerate(rows)],
        "columns": [{"sentences": [list(span) for span in spans]} for spans in candidate_spans],
        "normalised": normalised,
        "sentence_pairs": [[[k[i][j], r[i][j], cosine[i][j]] for j in range(m)] for i in range(n)],
    }
