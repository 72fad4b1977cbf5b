"""Stage 1 and the fetch: the candidate documents of a source, and their vectors, read once.

Nested sentence k-NN hits aggregated per document (:mod:`.candidates`) form a pool of
``SDR_PRERANK_FACTOR x K``; for hybrid, one BM25 search of the source's text adds its top K and
scores every vector candidate; a metadata filter runs inside both searches when the store can
(``capabilities.filtered_knn``), else the pool is over-fetched and filtered (:mod:`.filters`); a
filter that matches at most K documents skips the searches (they are all ranked exactly). The
centroid pre-rank (:mod:`.prerank`) narrows the pool to K, and the vectors of the K and of the
lexical-only candidates are fetched once (a store without cheap centroids fetches the pool once and
the pre-rank and the rerank share those vectors). A store that scores next to its data (the sdr
plugin) computes the pre-rank's centroid rows and the K's exact scores there, and nothing is fetched.
The candidates come with who scores them (:mod:`.scoring`), chosen here and nowhere else.
A candidate deleted between the search that found it and a later read (a concurrent write) is
skipped: the query answers from the others.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Mapping, Sequence

import numpy as np

from sdr_search.core.errors import DocumentNotFoundError
from sdr_search.core.fusion import HybridSpec
from sdr_search.core.scoring import paragraph_centroids, top_of
from sdr_search.core.vectors import DocVectors
from sdr_search.indexer.store import DocumentStore, LexicalHits

from .candidates import aggregate_hits
from .engine_settings import MLTSettings
from .filters import filter_candidates
from .prerank import prerank_order, prerank_order_of_rows
from .query import Query
from .ranking import Candidates
from .scoring import LocalScoring, StoreScoring
from .sources import Source

__all__ = ["CandidateStage"]

logger = logging.getLogger(__name__)


class CandidateStage:
    """The candidate stage over one store, with the engine's settings."""

    def __init__(self, *, store: DocumentStore, settings: MLTSettings) -> None:
        self.store = store
        self.settings = settings

    def find(
        self, source: Source, *, against: Source | None, exclude: list[str], query: Query, spec: HybridSpec | None,
        K: int, timings: dict[str, float], known: Mapping[str, DocVectors] | None = None, explain_top: int = 0,
    ) -> Candidates:
        """Steps 4-6 for ``source``: the candidate ids (the vector ones, then the lexical-only
        ones), who scores them (:mod:`.scoring`: their fetched vectors, those in ``known`` not fetched
        again, or the store next to its data), and the BM25 hits of the source's text (None when each
        source is searched on its own, by the ranking). ``explain_top``: where the store scores the K
        exactly itself, it also returns the breakdown of its best ``explain_top`` (the hits to present)
        in the same request (``StoreScoring.explained``)."""
        t1 = time.perf_counter()
        lexical: LexicalHits | None = None
        everything: list[str] | None = None  # rank exactly these: no candidate generation, no pre-rank
        if query.candidate_ids is not None:
            everything = [i for i in dict.fromkeys(query.candidate_ids) if i not in exclude]
        elif query.filter and self.store.capabilities.filtered_knn:
            everything = self._all_matching(query.filter, K, exclude)  # None: more than K match
        rows: np.ndarray | None = None  # the pool's centroid rows, when the candidate stage's request brought them
        if everything is not None:
            pool, pool_scores = everything, None
            if spec is not None and against is None and not source.parts:  # several sources: searched each in _ranked
                lexical = self.store.lexical_search(source.document.text, 0, score_ids=pool)
            lexical_ranked: list[str] = []
            timings["candidates"] = _ms(time.perf_counter() - t1)
        else:
            pool_n = max(K, int(np.ceil(self.settings.prerank_factor * K)))
            # the filter inside the store's k-NN and lexical searches, else over-fetch and filter the candidates
            in_store = dict(query.filter) if query.filter and self.store.capabilities.filtered_knn else None
            if query.filter and in_store is None:
                pool_n = min(K * self.settings.filter_oversample, max(self.settings.max_filter_candidates, pool_n))
            pool, pool_scores, rows = self.pool(source, pool_n, exclude, in_store, rows=self.in_store and pool_n > K)
            t2 = time.perf_counter()
            timings["candidates"] = _ms(t2 - t1)
            lexical_ranked: list[str] = []
            if spec is not None and in_store is not None:  # the BM25 top among the matching documents
                lexical = self.store.lexical_search(source.document.text, 2 * K, exclude_ids=exclude, score_ids=pool,
                                                    filter=in_store)
                lexical_ranked = list(lexical.ids)
                timings["lexical"] = _ms(time.perf_counter() - t2)
            elif spec is not None:  # one BM25 search: the lexical top and the BM25 of every vector candidate
                lexical = self.store.lexical_search(source.document.text, pool_n if query.filter else K,
                                                    exclude_ids=exclude, score_ids=pool)
                lexical_ranked = list(lexical.ids)
                timings["lexical"] = _ms(time.perf_counter() - t2)
            if query.filter and in_store is None:
                t3 = time.perf_counter()
                keep = set(filter_candidates(self.store, pool, query.filter,
                                             limit=max(K, int(np.ceil(self.settings.prerank_factor * K)))))
                positions = [k for k, i in enumerate(pool) if i in keep]
                pool, pool_scores = [pool[k] for k in positions], pool_scores[positions]
                rows = None if rows is None else rows[:, positions]
                lexical_ranked = filter_candidates(self.store, lexical_ranked, query.filter, limit=2 * K)
                timings["filter"] = _ms(time.perf_counter() - t3)
        while True:
            try:
                if self.in_store:  # the one place the scoring path is chosen (reranker/scoring.py)
                    vector_ids, lexical_ids, scoring = self._prerank_in_store(
                        source, pool, pool_scores, lexical_ranked, K, timings, explain_top, rows)
                else:
                    vector_ids, lexical_ids, scoring = self._prerank_and_fetch(
                        source, pool, pool_scores, lexical_ranked, K, timings, known)
                break
            except DocumentNotFoundError as e:  # a candidate deleted since the search found it: skipped
                if e.doc_id not in pool and e.doc_id not in lexical_ranked:
                    raise
                logger.info("candidate %r was deleted during the query; ranking without it", e.doc_id)
                kept = [k for k, i in enumerate(pool) if i != e.doc_id]
                pool, pool_scores = [pool[k] for k in kept], None if pool_scores is None else pool_scores[kept]
                rows = None if rows is None else rows[:, kept]
                lexical_ranked = [i for i in lexical_ranked if i != e.doc_id]
        return Candidates(vector_ids + lexical_ids, scoring, lexical)

    def _all_matching(self, flt: Mapping[str, Any], k: int, exclude: Sequence[str]) -> list[str] | None:
        """The documents ``flt`` matches (but ``exclude``) when they are at most ``k``, else None.
        Ranking them all is the exhaustive answer, and cheaper than the filtered k-NN for selective
        filters (measured in docs/results/filters.md, the OpenSearch 3.5 section)."""
        skip = set(exclude)
        kept = [i for i in self.store.ids_matching(dict(flt), limit=k + len(skip) + 1) if i not in skip]
        return kept if len(kept) <= k else None  # a list cut at the limit keeps more than k

    @property
    def in_store(self) -> bool:
        """Whether the store scores the candidates exactly itself (nothing is fetched)."""
        return self.settings.in_store and self.store.capabilities.exact_sdr

    def aggregated(
        self, source: Source, k: int, exclude: Sequence[str], flt: Mapping[str, Any] | None = None,
    ) -> tuple[list[str], np.ndarray]:
        """The best ``k`` documents by the aggregation of the source sentences' k-NN hits, with their
        scores: in one request when the store runs the candidate stage itself."""
        ids, scores, _ = self.pool(source, k, exclude, flt)
        return ids, scores

    def pool(
        self, source: Source, k: int, exclude: Sequence[str], flt: Mapping[str, Any] | None = None, *,
        rows: bool = False,
    ) -> tuple[list[str], np.ndarray, np.ndarray | None]:
        """:meth:`aggregated`, and where the store runs the candidate stage itself and ``rows`` is asked
        for, the pool's centroid rows for the in-store pre-rank from the same request
        (:meth:`DocumentStore.sdr_candidate_pool`; None otherwise)."""
        if self.settings.in_store and self.store.capabilities.sdr_candidates:
            found = self.store.sdr_candidate_pool(
                source.vectors, self.settings.knn_k, k, centroids=paragraph_centroids(source.vectors) if rows else None,
                stats=source.stats, aggregation=self.settings.aggregation, exclude_ids=exclude, filter=flt)
            return found.ids, found.scores, found.centroid_rows
        hits = self.store.sentence_knn(source.vectors.vectors, self.settings.knn_k, exclude_ids=exclude,
                                       **({"filter": flt} if flt else {}))
        ids, scores = aggregate_hits(
            hits, source.vectors.par_offsets, method=self.settings.aggregation, stats=source.stats
        )
        return (*top_of(ids, scores, k), None)

    def _prerank_in_store(
        self, source: Source, pool: list[str], scores: np.ndarray | None, lexical_ranked: list[str], K: int,
        timings: dict[str, float], explain_top: int = 0, rows: np.ndarray | None = None,
    ) -> tuple[list[str], list[str], StoreScoring]:
        """:meth:`_prerank_and_fetch` on a store that scores exactly itself (:attr:`in_store`): the same
        pre-rank next to its data (the centroid rows of the pool, :meth:`DocumentStore.centroid_rows`), the
        K kept scored exactly there, and nothing fetched. The :class:`StoreScoring` carries those exact
        scores, which the ranking reuses, and the breakdowns and documents of the best ``explain_top`` of them,
        which the presentation reuses. ``rows``: the pool's centroid rows where the candidate stage's request brought
        them (then not asked for again)."""
        t0 = time.perf_counter()
        keep = range(len(pool) if scores is None else min(len(pool), K))
        scoring = StoreScoring(self.store)
        prerank = scores is not None and len(pool) > K
        if prerank:
            M = self.store.centroid_rows(paragraph_centroids(source.vectors), pool) if rows is None else rows
            keep = prerank_order_of_rows(pool, scores, M)[:K]
        # the K scored exactly now, with the breakdowns of the best explain_top (the hits to present) in the same
        # request; without a pre-rank only for one source (several merged sources are scored each on its own)
        kept = [pool[i] for i in keep]
        if kept and (prerank or not source.parts):
            scored = self.store.sdr_scores([(source.vectors, source.stats)], kept, explain_top=explain_top,
                                           documents=explain_top > 0)
            scoring = StoreScoring(self.store, source, exact=dict(zip(kept, map(float, scored.scores[0]))),
                                   explained={i: why for i, why in zip(scored.ids, scored.explanations) if why is not None},
                                   presented=scored.documents)
            timings["prerank"] = _ms(time.perf_counter() - t0)
        vector_ids = [pool[i] for i in keep]
        chosen = set(vector_ids)
        return vector_ids, [i for i in lexical_ranked if i not in chosen][:K], scoring

    def _prerank_and_fetch(
        self, source: Source, pool: list[str], scores: np.ndarray | None, lexical_ranked: list[str], K: int,
        timings: dict[str, float], known: Mapping[str, DocVectors] | None = None,
    ) -> tuple[list[str], list[str], LocalScoring]:
        """The K vector candidates (the pool narrowed by the centroid pre-rank when it is larger),
        the lexical candidates that are not among them (at most K, in lexical order), and the vectors
        of both (a :class:`LocalScoring`), each document fetched once. A store whose centroids are not
        cheap (``capabilities.cheap_centroids`` false) has the pool fetched once: the pre-rank's
        centroids and the rerank share those vectors. ``known``: vectors this query fetched already
        (document feedback's second search), not fetched again."""
        t0 = time.perf_counter()
        prerank = scores is not None and len(pool) > K
        fetched: dict[str, DocVectors] | None = None
        if prerank and not self.store.capabilities.cheap_centroids:
            in_pool = set(pool)
            fetched = self._fetch(pool + [i for i in lexical_ranked if i not in in_pool], known)
            t1 = time.perf_counter()
            centroids = [paragraph_centroids(fetched[i]) for i in pool]
            keep = prerank_order(pool, scores, source.vectors, centroids)[:K]
            timings.update(fetch=_ms(t1 - t0), prerank=_ms(time.perf_counter() - t1))
        elif prerank:
            keep = prerank_order(pool, scores, source.vectors, self.store.paragraph_centroids(pool))[:K]
        else:
            keep = range(len(pool) if scores is None else min(len(pool), K))
        vector_ids = [pool[i] for i in keep]
        chosen = set(vector_ids)
        lexical_ids = [i for i in lexical_ranked if i not in chosen][:K]
        ids = vector_ids + lexical_ids
        if fetched is None:
            t1 = time.perf_counter()
            fetched = self._fetch(ids, known)
            timings.update(prerank=_ms(t1 - t0), fetch=_ms(time.perf_counter() - t1))
        return vector_ids, lexical_ids, LocalScoring({i: fetched[i] for i in ids})

    def _fetch(self, ids: list[str], known: Mapping[str, DocVectors] | None) -> dict[str, DocVectors]:
        """The vectors of ``ids``: those in ``known`` as they are, the others in one store read."""
        known = known or {}
        out = {i: known[i] for i in ids if i in known}
        missing = [i for i in ids if i not in out]
        if missing:
            out.update(zip(missing, self.store.fetch_documents(missing)))
        return out


def _ms(seconds: float) -> float:
    return round(seconds * 1e3, 2)
