"""Refresh the normalisation statistics of a store.

Draws (and records) the reference sample used for new-text sources, then computes the statistics
of every paragraph of every indexed document: exact (against every corpus paragraph of the other
documents, O(sentences^2), blocked) or sampled (against the reference sample, O(sentences x R)).

A store of one document has no statistics: they are taken over the other documents' paragraphs.
The refresh then records the reference sample (its paragraphs: a new text is normalised against
them), stores :meth:`NormStats.identity` for the document (its scores are used unnormalised; it
has nothing to be ranked against anyway) and says so: one warning, and :func:`unavailable_reason`
for the summaries of ``sdr index``, ``sdr stats`` and ``sdr info``. The next document indexed
makes the statistics stale, and the next refresh computes them.
"""

from __future__ import annotations

import logging

import numpy as np

from sdr_search.core.errors import NoComparisonError
from sdr_search.core.scoring import NormStats
from sdr_search.core.stats import draw_reference_sample, exact_corpus_stats, sample_vectors, stats_against_sample

from .store import DocumentStore, ReferenceParagraphs, StatsInfo

__all__ = ["refresh_stats", "unavailable_reason", "ONE_DOCUMENT"]

logger = logging.getLogger(__name__)

ONE_DOCUMENT = (
    "the store has one document and statistics are taken over the other documents' paragraphs; "
    "scores stay unnormalised until a second document is indexed"
)


def unavailable_reason(documents: int) -> str | None:
    """Why a store of ``documents`` documents has no normalisation statistics, or None."""
    return ONE_DOCUMENT if documents == 1 else None


def refresh_stats(
    store: DocumentStore,
    *,
    exact: bool = True,
    sample_size: int = 5000,
    seed: int = 0,
    progress: bool = False,
) -> StatsInfo:
    """Recompute the reference sample and every document's statistics; returns the new info."""
    corpus = store.all_vectors()
    sample = draw_reference_sample(corpus, sample_size, seed=seed)
    sampled = sample_vectors(corpus, sample)
    owner = corpus.paragraph_doc()[sample.paragraph_indices]
    in_doc = sample.paragraph_indices - corpus.doc_par_offsets[owner]
    store.set_reference(
        ReferenceParagraphs(tuple(corpus.ids[d] for d in owner), in_doc.astype(np.int64), sampled.vectors, seed, sample_size)
    )
    stats: dict[str, NormStats] = {}
    if corpus.n_docs < 2:
        logger.warning("no normalisation statistics: %s", ONE_DOCUMENT)
        stats[corpus.ids[0]] = NormStats.identity(corpus.n_paragraphs)
    elif exact:
        logger.info("exact statistics over %d paragraphs (%d sentences)", corpus.n_paragraphs, corpus.n_sentences)
        allstats = exact_corpus_stats(corpus, progress=progress)
        for k, doc_id in enumerate(corpus.ids):
            p0, p1 = corpus.doc_par_offsets[k], corpus.doc_par_offsets[k + 1]
            stats[doc_id] = NormStats(allstats.mu[p0:p1], allstats.sigma[p0:p1])
    else:
        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=corpus.n_docs, unit="doc", desc=f"stats (sample R={sample_size})")
        alone = 0
        for k, doc_id in enumerate(corpus.ids):
            try:
                stats[doc_id] = stats_against_sample(corpus.doc(k), sampled, exclude_doc=k, if_empty="raise")
            except NoComparisonError:  # every sampled paragraph is its own (a sample smaller than a document)
                alone += 1
                stats[doc_id] = NormStats.identity(corpus.doc(k).n_paragraphs)
            if bar is not None:
                bar.update(1)
        if bar is not None:
            bar.close()
        if alone:
            logger.warning("%d documents have no paragraph of another document in the reference sample (R=%d): "
                           "their scores are left unnormalised; refresh with a larger sample", alone, sample_size)
    return store.write_stats(stats, mode="exact" if exact else "sampled", sample_size=sample_size, seed=seed)
