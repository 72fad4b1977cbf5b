"""A hit's best paragraph pairs and their best sentence pairs (:data:`Pairs`), the selection every
explanation and snippet shows: from the candidate's vectors (:func:`best_pairs`), or from the
breakdown a store that scores exactly computed next to its data (:func:`stored_pairs`, the same
selection). Pure."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from sdr_search.core.documents import Document
from sdr_search.core.scoring import paragraph_scores
from sdr_search.core.vectors import CorpusVectors, DocVectors

from .sources import Source

__all__ = ["Pairs", "best_pairs", "stored_pairs", "paragraph_sizes"]


Pairs = tuple[float, list[tuple[int, int, float, float, list[tuple[int, int, float]]]]]
"""An SDR score against one candidate and its best paragraph pairs ``(i, j, P_ij, N_ij, [(source
sentence k, candidate sentence r, cosine), ...])``, best first (positions inside the paragraphs)."""


def _score_of(source: Source, best_n: np.ndarray) -> float:
    """The SDR score from each source paragraph's best normalised score (several sources: the mean of
    their own scores, as the ranking computes it)."""
    if not source.parts:
        return float(best_n.mean())
    offsets = source.part_offsets
    return float(np.mean(np.add.reduceat(best_n, offsets[:-1]) / np.diff(offsets)))


def best_pairs(
    source: Source, cand_vectors: DocVectors, top_paragraphs: int, top_sentences: int, P: np.ndarray | None = None,
) -> Pairs:
    """:data:`Pairs` from the candidate's vectors. ``P``: the paragraph scores against this candidate
    when already computed."""
    P = paragraph_scores(source.vectors, CorpusVectors.from_docs([""], [cand_vectors])) if P is None else P  # (n, m)
    mu = np.asarray(source.stats.mu, dtype=np.float64)[:, None]
    sigma = np.asarray(source.stats.sigma, dtype=np.float64)[:, None]
    N = (P - mu) / sigma
    best_j = N.argmax(axis=1)
    best_n = N[np.arange(N.shape[0]), best_j]
    pairs = []
    for i in np.argsort(-best_n, kind="stable")[:top_paragraphs]:
        i, j = int(i), int(best_j[i])
        S = source.vectors.paragraph(i) @ cand_vectors.paragraph(j).T
        r = S.argmax(axis=1)
        sims = S[np.arange(S.shape[0]), r]
        sentences = [(int(k), int(r[k]), float(sims[k])) for k in np.argsort(-sims, kind="stable")[:top_sentences]]
        pairs.append((i, j, float(P[i, j]), float(N[i, j]), sentences))
    return _score_of(source, best_n), pairs


def stored_pairs(source: Source, breakdown: Mapping[str, Any], top_paragraphs: int, top_sentences: int) -> Pairs:
    """:data:`Pairs` from the breakdown a store that scores exactly computed next to its data
    (:attr:`SdrScores.explanations`: each source paragraph's best candidate paragraph with P_ij and
    N_ij, and each of its sentences' best sentence there; opensearch-plugin/README.md, "Response"):
    the same selection as :func:`best_pairs`, no vector read."""
    rows = breakdown["source_paragraphs"]
    if len(rows) != source.vectors.n_paragraphs:
        raise ValueError(f"a breakdown of {len(rows)} source paragraphs for a source of {source.vectors.n_paragraphs}")
    best_n = np.asarray([float(row["normalised_score"]) for row in rows], dtype=np.float64)
    pairs = []
    for i in np.argsort(-best_n, kind="stable")[:top_paragraphs]:
        row = rows[int(i)]
        found = row["sentence_pairs"]
        sims = np.asarray([float(p["cosine"]) for p in found], dtype=np.float64)
        sentences = [(int(found[k]["source_sentence"]), int(found[k]["candidate_sentence"]), float(sims[k]))
                     for k in np.argsort(-sims, kind="stable")[:top_sentences]]
        pairs.append((int(i), int(row["candidate_paragraph"]), float(row["paragraph_score"]), float(best_n[i]), sentences))
    return _score_of(source, best_n), pairs


def paragraph_sizes(doc: Document) -> tuple[int, ...]:
    return tuple(len(p) for p in doc.paragraphs)
