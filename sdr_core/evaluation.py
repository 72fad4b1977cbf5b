"""Exhaustive ranking of a whole corpus for every query, with the methods of ``sdr eval``.

Methods:

- ``sdr``: exact SDR (SPEC eq. 4-6) against every corpus document, each source paragraph
  normalised with statistics over all corpus paragraphs (``stats="exact"``, which comes for free
  here since the query is scored against every paragraph anyway) or over a recorded reference
  sample (``stats="sampled"``).
- ``sdr-nonorm``: the paper's "No normalization" ablation.
- ``mean``: one vector per document, the mean of its sentence vectors; cosine.
- ``bm25``: BM25 (bm25s), the whole query document as the query.

A query whose id is also in the corpus is removed from its own ranking, and its own paragraphs are
left out of its normalisation statistics.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from .documents import Document
from .scoring import NormStats, document_max, paragraph_scores, rank, sdr_scores, stats_from_paragraph_scores
from .stats import ReferenceSample, SampledParagraphs, draw_reference_sample, sample_vectors, stats_against_sample
from .vectors import CorpusVectors, DocVectors

__all__ = ["METHODS", "VECTOR_METHODS", "Ranking", "sdr_rank_scores", "mean_vectors", "rank_all"]

logger = logging.getLogger(__name__)

METHODS = ("sdr", "sdr-nonorm", "mean", "bm25")
VECTOR_METHODS = ("sdr", "sdr-nonorm", "mean")

Ranking = list[tuple[str, float]]


def sdr_rank_scores(
    source: DocVectors,
    corpus: CorpusVectors,
    *,
    normalise: bool = True,
    sample: SampledParagraphs | None = None,
    exclude_doc: int | None = None,
) -> np.ndarray:
    """Exact SDR score of ``source`` against every corpus document (shape ``(D,)``).

    With ``sample`` (built once by :func:`sample_vectors`) the statistics come from the reference
    sample; otherwise from every corpus
    paragraph except those of ``exclude_doc``.
    """
    P = paragraph_scores(source, corpus)
    stats: NormStats | None = None
    if normalise:
        if sample is not None:
            stats = stats_against_sample(source, sample, exclude_doc=exclude_doc)
        else:
            exclude = None
            if exclude_doc is not None:
                exclude = corpus.paragraph_doc() == exclude_doc
            stats = stats_from_paragraph_scores(P, exclude=exclude)
    return sdr_scores(document_max(P, corpus.doc_par_offsets), stats)


def mean_vectors(corpus: CorpusVectors) -> np.ndarray:
    """One L2-normalised vector per document: the mean of its sentence vectors."""
    sent_doc_offsets = corpus.par_offsets[corpus.doc_par_offsets]
    sums = np.add.reduceat(corpus.vectors, sent_doc_offsets[:-1], axis=0)
    norms = np.linalg.norm(sums, axis=1, keepdims=True)
    return (sums / np.maximum(norms, 1e-12)).astype(np.float32)


def _ranking(ids: Sequence[str], scores: np.ndarray, exclude: int | None, depth: int | None) -> Ranking:
    order = rank(ids, scores)
    out = [(ids[i], float(scores[i])) for i in order if i != exclude]
    return out[:depth] if depth else out


@dataclass
class EvalInputs:
    corpus_docs: list[Document]
    query_docs: list[Document]
    corpus_vectors: CorpusVectors | None = None
    query_vectors: list[DocVectors] | None = None


def rank_all(
    method: str,
    inputs: EvalInputs,
    *,
    stats: str = "exact",
    sample_size: int = 5000,
    seed: int = 0,
    depth: int | None = None,
    progress: bool = False,
    on_sample: Callable[[ReferenceSample], None] | None = None,
) -> dict[str, Ranking]:
    """Rank every corpus document for every query with ``method``; returns ``{qid: ranking}``."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose from {', '.join(METHODS)}")
    ids = [d.id for d in inputs.corpus_docs]
    position = {doc_id: k for k, doc_id in enumerate(ids)}
    runs: dict[str, Ranking] = {}
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(inputs.query_docs), unit="query", desc=f"ranking ({method})")

    if method == "bm25":
        from .lexical import BM25Ranker

        ranker = BM25Ranker()
        ranker.fit(ids, [d.text for d in inputs.corpus_docs])
        score_fn = lambda k, q: ranker.scores(q.text)  # noqa: E731
    else:
        corpus = inputs.corpus_vectors
        if corpus is None or inputs.query_vectors is None:
            raise ValueError(f"method {method!r} needs corpus and query vectors")
        if tuple(ids) != corpus.ids:
            raise ValueError("corpus vectors do not match the corpus documents")
        if method == "mean":
            doc_means = mean_vectors(corpus)
            q_means = [mean_vectors(CorpusVectors.from_docs(["q"], [qv]))[0] for qv in inputs.query_vectors]
            score_fn = lambda k, q: doc_means @ q_means[k]  # noqa: E731
        else:
            sample = None
            if method == "sdr" and stats == "sampled":
                drawn = draw_reference_sample(corpus, sample_size, seed=seed)
                if on_sample:
                    on_sample(drawn)
                sample = sample_vectors(corpus, drawn)
            elif stats not in ("exact", "sampled"):
                raise ValueError(f"unknown stats mode {stats!r}")
            normalise = method == "sdr"

            def score_fn(k: int, q: Document) -> np.ndarray:
                return sdr_rank_scores(
                    inputs.query_vectors[k],
                    corpus,
                    normalise=normalise,
                    sample=sample,
                    exclude_doc=position.get(q.id),
                )

    try:
        for k, q in enumerate(inputs.query_docs):
            scores = np.asarray(score_fn(k, q), dtype=np.float64)
            runs[q.id] = _ranking(ids, scores, position.get(q.id), depth)
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    return runs

