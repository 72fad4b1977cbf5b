"""Brute-force SDR, written straight from the SPEC formulas ("Two-stage score").

This is the test oracle: plain Python loops over paragraphs and sentences, one float64 dot
product at a time. It is slow on purpose and never used in production; everything faster
(:mod:`sdr_search.core.scoring`, :mod:`sdr_search.core.stats`) is tested against it.

A paragraph is a ``(sentences, dim)`` array of L2-normalised sentence vectors; a document is a
list of paragraphs.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

__all__ = [
    "reference_cosine",
    "reference_paragraph_score",
    "reference_paragraph_stats",
    "reference_sdr_score",
    "reference_corpus_scores",
]

_SIGMA_FLOOR = 1e-6


def reference_cosine(u: np.ndarray, v: np.ndarray) -> float:
    """``cos(u, v)`` for unit vectors: their dot product, in float64."""
    return float(np.dot(np.asarray(u, dtype=np.float64), np.asarray(v, dtype=np.float64)))


def reference_paragraph_score(source_paragraph: np.ndarray, candidate_paragraph: np.ndarray) -> float:
    """``P_ij = (1/|s_i|) * sum_k max_r cos(s_i^k, c_j^r)`` (stage 1)."""
    total = 0.0
    for k in range(len(source_paragraph)):
        best = -math.inf
        for r in range(len(candidate_paragraph)):
            best = max(best, reference_cosine(source_paragraph[k], candidate_paragraph[r]))
        total += best
    return total / len(source_paragraph)


def reference_paragraph_stats(
    source_paragraph: np.ndarray, stat_paragraphs: Sequence[np.ndarray]
) -> tuple[float, float]:
    """``(mu_i, sigma_i)``: mean and population std of ``P_i.`` over ``stat_paragraphs``.

    ``sigma_i < 1e-6`` is replaced by 1 (SPEC).
    """
    if len(stat_paragraphs) == 0:
        raise ValueError("need at least one paragraph to compute statistics")
    values = [reference_paragraph_score(source_paragraph, q) for q in stat_paragraphs]
    mu = math.fsum(values) / len(values)
    sigma = math.sqrt(math.fsum((v - mu) ** 2 for v in values) / len(values))
    if sigma < _SIGMA_FLOOR:
        sigma = 1.0
    return mu, sigma


def reference_sdr_score(
    source_paragraphs: list[np.ndarray],
    candidate_paragraphs: list[np.ndarray],
    stat_paragraphs: list[np.ndarray] | None,
) -> float:
    """``S(s, c) = (1/n) * sum_i max_j (P_ij - mu_i) / sigma_i`` (stage 2).

    ``stat_paragraphs`` are all the corpus paragraphs to normalise against (every paragraph of
    every document other than the source); ``None`` means no normalisation (mu 0, sigma 1).
    """
    total = 0.0
    for source_paragraph in source_paragraphs:
        if stat_paragraphs is None:
            mu, sigma = 0.0, 1.0
        else:
            mu, sigma = reference_paragraph_stats(source_paragraph, stat_paragraphs)
        best = -math.inf
        for candidate_paragraph in candidate_paragraphs:
            p = reference_paragraph_score(source_paragraph, candidate_paragraph)
            best = max(best, (p - mu) / sigma)
        total += best
    return total / len(source_paragraphs)


def reference_corpus_scores(
    source_paragraphs: list[np.ndarray],
    corpus_documents: list[list[np.ndarray]],
    *,
    source_index: int | None = None,
    normalise: bool = True,
) -> list[float]:
    """Exhaustive reference: ``S(s, c)`` for every document ``c`` of the corpus.

    Statistics are taken over every paragraph of every corpus document except the one at
    ``source_index`` (the source itself, when it belongs to the corpus).
    """
    stat_paragraphs = None
    if normalise:
        stat_paragraphs = [
            paragraph
            for index, document in enumerate(corpus_documents)
            if index != source_index
            for paragraph in document
        ]
    return [reference_sdr_score(source_paragraphs, document, stat_paragraphs) for document in corpus_documents]
