"""Normalisation statistics ``mu_i`` / ``sigma_i`` (SPEC "Normalisation statistics").

* Exact: every corpus paragraph against every paragraph of every *other* document
  (:func:`exact_corpus_stats`), or one possibly external source against the whole corpus
  (:func:`source_stats_exact`).
* Sampled: against a fixed, seeded reference sample of corpus paragraphs
  (:class:`ReferenceSample`, :func:`draw_reference_sample`, :func:`sampled_stats`), recorded
  with the index so a raw-text query is normalised against the same sample at query time.

One document alone has no statistics (they are taken over the *other* documents' paragraphs):
:func:`exact_corpus_stats` raises :class:`NoComparisonError` (a ``ValueError``) for a corpus of
fewer than two documents, and so do the per-source functions when no paragraph of another
document is left, unless ``if_empty="identity"``: then :meth:`NormStats.identity` (scores used
unnormalised; such a source has nothing to be compared with in that corpus anyway).

Pure functions on :mod:`sdr_search.core.vectors` containers; float64 accumulation; no I/O.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np
from tqdm import tqdm

from sdr_search.core.errors import NoComparisonError
from sdr_search.core.scoring import (
    NO_COMPARISON,
    IfEmpty,
    NormStats,
    clamp_sigma,
    iter_paragraph_score_tiles,
    paragraph_scores,
    stats_from_paragraph_scores,
)
from sdr_search.core.vectors import CorpusVectors, DocVectors

__all__ = [
    "exact_corpus_stats",
    "source_stats_exact",
    "ReferenceSample",
    "draw_reference_sample",
    "SampledParagraphs",
    "sample_vectors",
    "stats_against_sample",
    "sampled_stats",
]


class _RunningMoments:
    """Per-row count, mean and sum of squared deviations, merged tile by tile (Chan et al.)."""

    def __init__(self, n_rows: int) -> None:
        self.count = np.zeros(n_rows, dtype=np.int64)
        self.mean = np.zeros(n_rows, dtype=np.float64)
        self.m2 = np.zeros(n_rows, dtype=np.float64)

    def update(self, tile: np.ndarray, excluded: np.ndarray | None = None) -> None:
        """Merge the values of ``tile`` (rows x columns) not marked in ``excluded`` (same shape)."""
        values = tile.astype(np.float64)
        if excluded is None:
            n_b = np.full(values.shape[0], values.shape[1], dtype=np.int64)
            mean_b = values.mean(axis=1)
            m2_b = np.square(values - mean_b[:, None]).sum(axis=1)
        else:
            keep = ~excluded
            n_b = keep.sum(axis=1)
            mean_b = np.where(keep, values, 0.0).sum(axis=1) / np.maximum(n_b, 1)
            m2_b = np.where(keep, np.square(values - mean_b[:, None]), 0.0).sum(axis=1)
        n_ab = self.count + n_b
        safe = np.maximum(n_ab, 1)
        delta = mean_b - self.mean
        self.mean = self.mean + delta * (n_b / safe)
        self.m2 = self.m2 + m2_b + np.square(delta) * (self.count * n_b / safe)
        self.count = n_ab

    def stats(self) -> NormStats:
        if np.any(self.count == 0):
            raise NoComparisonError(NO_COMPARISON)
        return NormStats(self.mean, clamp_sigma(np.sqrt(self.m2 / self.count)))


def _doc_range(corpus: CorpusVectors, k0: int, k1: int) -> DocVectors:
    """Documents ``k0..k1-1`` of ``corpus`` as one multi-paragraph source (no copy)."""
    p0, p1 = int(corpus.doc_par_offsets[k0]), int(corpus.doc_par_offsets[k1])
    s0, s1 = int(corpus.par_offsets[p0]), int(corpus.par_offsets[p1])
    return DocVectors(corpus.vectors[s0:s1], corpus.par_offsets[p0 : p1 + 1] - s0)


def exact_corpus_stats(
    corpus: CorpusVectors,
    *,
    block_docs: int = 64,
    block_sentences: int = 65536,
    max_tile_floats: int = 1 << 25,
    progress: bool = False,
) -> NormStats:
    """Exact statistics for every corpus paragraph, length ``corpus.n_paragraphs``.

    ``mu``/``sigma`` of paragraph ``q`` are the mean and population std of its paragraph-pair
    scores against every paragraph of every *other* document. Computed by blocks of
    ``block_docs`` source documents against blocks of corpus columns; the column block is
    ``block_sentences`` sentences, shrunk so that one similarity tile holds at most
    ``max_tile_floats`` float32 (128 MiB by default) unless a single paragraph needs more.
    Moments are merged in float64 tile by tile. ``progress`` shows a tqdm bar on stderr.
    """
    if block_docs < 1:
        raise ValueError(f"block_docs must be >= 1, got {block_docs}")
    if block_sentences < 1 or max_tile_floats < 1:
        raise ValueError("block_sentences and max_tile_floats must be >= 1")
    if corpus.n_docs < 2:
        raise NoComparisonError(
            "exact statistics need at least two documents (a paragraph's own document is left out)"
        )
    par_doc = corpus.paragraph_doc()
    mu = np.empty(corpus.n_paragraphs, dtype=np.float64)
    sigma = np.empty(corpus.n_paragraphs, dtype=np.float64)
    with tqdm(total=corpus.n_docs, disable=not progress, file=sys.stderr, unit="doc", desc="exact stats") as bar:
        for k0 in range(0, corpus.n_docs, block_docs):
            k1 = min(k0 + block_docs, corpus.n_docs)
            source = _doc_range(corpus, k0, k1)
            r0, r1 = int(corpus.doc_par_offsets[k0]), int(corpus.doc_par_offsets[k1])
            row_doc = par_doc[r0:r1]
            columns = max(1, min(block_sentences, max_tile_floats // source.n_sentences))
            moments = _RunningMoments(source.n_paragraphs)
            for p0, p1, tile in iter_paragraph_score_tiles(source, corpus, block_sentences=columns):
                col_doc = par_doc[p0:p1]
                excluded = None
                if col_doc[0] < k1 and col_doc[-1] >= k0:  # the tile meets some row's own document
                    excluded = row_doc[:, None] == col_doc[None, :]
                moments.update(tile, excluded)
            block = moments.stats()
            mu[r0:r1] = block.mu
            sigma[r0:r1] = block.sigma
            bar.update(k1 - k0)
    return NormStats(mu, sigma)


def _check_doc_index(corpus: CorpusVectors, exclude_doc: int | None) -> None:
    if exclude_doc is not None and not 0 <= exclude_doc < corpus.n_docs:
        raise ValueError(f"exclude_doc must be a document index in [0, {corpus.n_docs}), got {exclude_doc}")


def source_stats_exact(
    source: DocVectors,
    corpus: CorpusVectors,
    *,
    exclude_doc: int | None = None,
    block_sentences: int = 65536,
    if_empty: IfEmpty = "raise",
) -> NormStats:
    """Exact statistics of one (possibly external) source against all corpus paragraphs.

    ``exclude_doc`` is the source's own document index when it belongs to the corpus; that
    document's paragraphs are left out (the only document: see ``if_empty`` and the module
    docstring).
    """
    _check_doc_index(corpus, exclude_doc)
    exclude = None if exclude_doc is None else corpus.paragraph_doc() == exclude_doc
    if exclude is not None and exclude.all():
        return stats_from_paragraph_scores(np.zeros((source.n_paragraphs, 0), np.float32), if_empty=if_empty)
    P = paragraph_scores(source, corpus, block_sentences=block_sentences)
    return stats_from_paragraph_scores(P, exclude=exclude, if_empty=if_empty)


@dataclass(frozen=True)
class ReferenceSample:
    """A fixed uniform sample of corpus paragraphs used for sampled normalisation statistics.

    ``paragraph_indices`` are sorted, distinct int64 indices into the corpus paragraphs;
    ``seed`` and ``size`` (the requested size) are what drew them. Record it with the index
    (:meth:`to_dict`) so query-time statistics use the same sample.
    """

    paragraph_indices: np.ndarray
    seed: int
    size: int

    def __post_init__(self) -> None:
        indices = np.asarray(self.paragraph_indices, dtype=np.int64)
        if indices.ndim != 1 or indices.size == 0:
            raise ValueError("paragraph_indices must be a non-empty 1-D array")
        if indices[0] < 0 or np.any(np.diff(indices) <= 0):
            raise ValueError("paragraph_indices must be sorted, distinct and non-negative")
        if self.size < indices.size:
            raise ValueError(f"size {self.size} is smaller than the {indices.size} indices given")
        object.__setattr__(self, "paragraph_indices", indices)
        object.__setattr__(self, "seed", int(self.seed))
        object.__setattr__(self, "size", int(self.size))

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form: ``{"paragraph_indices": [...], "seed": int, "size": int}``."""
        return {"paragraph_indices": self.paragraph_indices.tolist(), "seed": self.seed, "size": self.size}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "ReferenceSample":
        """Inverse of :meth:`to_dict`."""
        missing = {"paragraph_indices", "seed", "size"} - set(data)
        if missing:
            raise ValueError(f"reference sample is missing {sorted(missing)}")
        return cls(np.asarray(data["paragraph_indices"], dtype=np.int64), int(data["seed"]), int(data["size"]))


def draw_reference_sample(corpus: CorpusVectors, size: int, *, seed: int = 0) -> ReferenceSample:
    """Draw ``size`` corpus paragraphs uniformly without replacement (all of them if ``size`` >= the total)."""
    if size < 1:
        raise ValueError(f"size must be >= 1, got {size}")
    n = corpus.n_paragraphs
    if size >= n:
        indices = np.arange(n, dtype=np.int64)
    else:
        indices = np.sort(np.random.default_rng(seed).choice(n, size=size, replace=False)).astype(np.int64)
    return ReferenceSample(indices, seed, size)


@dataclass(frozen=True)
class SampledParagraphs:
    """The sampled paragraphs as a corpus where each paragraph is its own document.

    ``doc_index[j]`` is the index, in the original corpus, of the document that owns sampled
    paragraph ``j`` (to leave out a source's own paragraphs).
    """

    vectors: CorpusVectors
    doc_index: np.ndarray  # (R,) int64


def sample_vectors(corpus: CorpusVectors, sample: ReferenceSample) -> SampledParagraphs:
    """Gather the sentence vectors of the sampled paragraphs (one copy; build once, reuse per query)."""
    indices = sample.paragraph_indices
    if indices[-1] >= corpus.n_paragraphs:
        raise ValueError(
            f"sample refers to paragraph {int(indices[-1])}, the corpus has {corpus.n_paragraphs} (stale sample?)"
        )
    starts = corpus.par_offsets[indices]
    lengths = corpus.par_offsets[indices + 1] - starts
    new_offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    rows = np.repeat(starts - new_offsets[:-1], lengths) + np.arange(new_offsets[-1], dtype=np.int64)
    sampled = CorpusVectors(
        ids=tuple(str(int(q)) for q in indices),
        vectors=corpus.vectors[rows],
        par_offsets=new_offsets,
        doc_par_offsets=np.arange(indices.size + 1, dtype=np.int64),
    )
    return SampledParagraphs(sampled, corpus.paragraph_doc()[indices])


def stats_against_sample(
    source: DocVectors,
    sampled: SampledParagraphs,
    *,
    exclude_doc: int | None = None,
    block_sentences: int = 65536,
    if_empty: IfEmpty = "raise",
) -> NormStats:
    """Statistics of each source paragraph over prebuilt sampled paragraphs.

    Sampled paragraphs owned by original document ``exclude_doc`` are left out; when that leaves
    none (the sample holds only that document's paragraphs, as in a store of one document), see
    ``if_empty`` (the module docstring).
    """
    exclude = None if exclude_doc is None else sampled.doc_index == exclude_doc
    if exclude is not None and exclude.all():
        return stats_from_paragraph_scores(np.zeros((source.n_paragraphs, 0), np.float32), if_empty=if_empty)
    P = paragraph_scores(source, sampled.vectors, block_sentences=block_sentences)
    return stats_from_paragraph_scores(P, exclude=exclude, if_empty=if_empty)


def sampled_stats(
    source: DocVectors,
    corpus: CorpusVectors,
    sample: ReferenceSample,
    *,
    exclude_doc: int | None = None,
    if_empty: IfEmpty = "raise",
) -> NormStats:
    """Statistics of each source paragraph over the reference sample of ``corpus``.

    ``exclude_doc`` is the source's own document index when it belongs to the corpus. For many
    queries, build :func:`sample_vectors` once and call :func:`stats_against_sample`.
    """
    _check_doc_index(corpus, exclude_doc)
    return stats_against_sample(source, sample_vectors(corpus, sample), exclude_doc=exclude_doc, if_empty=if_empty)
