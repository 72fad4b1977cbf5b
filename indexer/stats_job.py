"""Refresh the normalisation statistics of a store.

Draws (and records) the reference sample used for new-text sources, then computes the statistics
of every paragraph of every indexed document: exact (against every corpus paragraph of the other
documents, O(sentences^2), blocked) or sampled (against the reference sample, O(sentences x R)).
"""

from __future__ import annotations

import logging

import numpy as np

from sdr_search.core.scoring import NormStats
from sdr_search.core.stats import draw_reference_sample, exact_corpus_stats, sample_vectors, stats_against_sample

from .store import DocumentStore, ReferenceParagraphs, StatsInfo

__all__ = ["refresh_stats"]

logger = logging.getLogger(__name__)


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
    if exact:
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
        for k, doc_id in enumerate(corpus.ids):
            stats[doc_id] = stats_against_sample(corpus.doc(k), sampled, exclude_doc=k)
            if bar is not None:
                bar.update(1)
        if bar is not None:
            bar.close()
    return store.write_stats(stats, mode="exact" if exact else "sampled", sample_size=sample_size, seed=seed)
