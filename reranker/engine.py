"""Two-stage "more like this": nested sentence k-NN candidates, then the exact SDR rerank; or
hybrid: lexical candidates too, and the signals fused.

One entry point, :meth:`MoreLikeThis.run` (:class:`Query` in, :class:`MLTResult` out), whichever
door a query comes in by (HTTP, ``sdr mlt``, ``sdr eval --store``, :mod:`sdr_search`). One path
inside it:

1. read the store's state once (:meth:`DocumentStore.query_state`: meta, search defaults,
   statistics info, and the reference sample when the engine's cached copy is out of date), and the
   query's indexed sources with it (on OpenSearch in the same real-time ``_mget``);
2. resolve method and fusion: the query's values, else the index's recorded search defaults, else
   :class:`MLTSettings` (environment), else :data:`sdr_search.core.fusion.DEFAULT_HYBRID`;
3. the source: an indexed document (its stored vectors and precomputed per-paragraph statistics)
   or new text (segmented as the store's documents were, capped at ``SDR_MAX_QUERY_SENTENCES``,
   encoded now, normalised against the store's reference sample);
4. candidates: the nested k-NN hits aggregated per document (:mod:`.candidates`;
   a pool of ``SDR_PRERANK_FACTOR x K``, or ``K x SDR_FILTER_OVERSAMPLE`` with a filter) and, for
   hybrid, one BM25 search of the whole source text that also scores every vector candidate; a
   metadata filter runs inside both searches when the store can (``capabilities.filtered_knn``:
   both stores), else the candidates are over-fetched and filtered (:mod:`sdr_search.reranker.filters`);
   a filter that matches at most K documents skips the searches: they are all ranked exactly;
   several like sources search as one (:func:`merge_sources`);
5. the centroid pre-rank narrows the vector pool to K (:mod:`sdr_search.reranker.prerank`);
6. fetch once: the vectors of the K vector candidates and the lexical-only ones (a store whose
   centroids are not cheap fetches the pool once and the pre-rank and rerank share it);
7. score: exact SDR (:func:`sdr_search.core.scoring.document_best`) with the source's statistics,
   which never depend on the candidates; hybrid: BM25, SDR and the mean-vector cosine fused per
   query (:func:`sdr_search.core.fusion.fuse`: z-score or min-max and a weighted mean, or RRF);
   several sources: each one's own score, the like mean minus the weighted unlike mean
   (:func:`sdr_search.core.scoring.like_unlike`, docs/scoring.md "Several sources");
   adaptive fusion with document feedback (one like source, short enough that
   :func:`sdr_search.core.fusion.feedback_share` is above 0): the top ``feedback_docs`` hits
   become further sources, steps 4-7 run again with them, and each hit's score is
   :func:`sdr_search.core.fusion.with_feedback` of its fused scores (docs/scoring.md "Document
   feedback");
8. present the returned hits only (at most ``size``): title and metadata read in one bulk call
   without vectors (:meth:`DocumentStore.documents_of`), and a snippet, the hit's best sentence
   pair (the best sentence pair of its best paragraph pair), from the vectors the rerank already
   fetched; explain (optional): the best paragraph pairs and their best sentence pairs per hit, and
   with ``explain_matrix`` the whole paragraph-pair matrix (:mod:`.matrix`).

Character offsets (``source_start``/``source_end``, ``candidate_start``/``candidate_end``) index a
document's *stored text*, :attr:`Document.text` (:func:`.offsets.sentence_spans`): the title, then each
SDR paragraph's sentences joined by one space, blocks separated by a blank line (``"\n\n"``), in
Python string positions (code points). The source's offsets index its stored text when it is an
indexed (or pre-encoded) document, and the request's own text when it is new text
(:meth:`Query.request_text`, :func:`.offsets.aligned_spans`): ``text`` as sent, or the ``paragraphs`` (every
section's paragraphs) joined by a blank line. :attr:`MLTResult.source_offsets` says which.

The stages live in their own modules and this one reads them top to bottom: the query contract
(:mod:`.query`), the sources (:mod:`.sources`), candidates, pre-rank and fetch (:mod:`.retrieval`,
:mod:`.candidates`, :mod:`.prerank`), who scores them (:mod:`.scoring`), the exact scores and the
fusion (:mod:`.ranking`), the hits presented and explained (:mod:`.explain`, :mod:`.offsets`) and the
result (:mod:`.results`).
"""

from __future__ import annotations

import logging
import time
from typing import Any, Mapping

from sdr_search.core import deadline
from sdr_search.core.encoder import SentenceEncoder
from sdr_search.core.errors import DocumentNotFoundError, InvalidInputError
from sdr_search.core.fusion import METHODS, HybridSpec, SourceShape, feedback_share
from sdr_search.core.settings import SegmentationSettings
from sdr_search.indexer.store import DocumentStore, IndexMeta, QueryState

from .engine_settings import MLTSettings
from .explain import present
from .query import Query
from .ranking import Candidates, rank_hits
from .results import Hit, MLTResult, applied_weights, described_sources
from .retrieval import CandidateStage
from .sources import Source, SourceResolver, merge_sources

__all__ = ["MoreLikeThis", "Query", "MLTResult", "MLTSettings"]  # the engine's API: a query in, a result out, its settings

logger = logging.getLogger(__name__)


class MoreLikeThis:
    """The two-stage engine over one store. :meth:`run` is the one query entry point: the HTTP
    service, ``sdr mlt``, ``sdr eval --store`` and the library front door all call it."""

    def __init__(self, *, store: DocumentStore, encoder: SentenceEncoder | None = None, settings: MLTSettings | None = None):
        self.store = store
        self.encoder = encoder
        self.settings = settings or MLTSettings()
        self.sources = SourceResolver(store=store, encoder=encoder, max_query_sentences=self.settings.max_query_sentences)
        self.stage = CandidateStage(store=store, settings=self.settings)

    # -- the query --------------------------------------------------------------------------------
    def run(self, query: Query) -> MLTResult:
        """Answer ``query``: state -> settings -> sources -> candidates (filtered, pre-ranked, fetched
        once) -> exact scores and fusion (document feedback for a short source) -> presented hits."""
        t0 = time.perf_counter()
        state = self.sources.state(query)
        spec = self._resolve(state, query)
        K = max(query.candidates or self.settings.candidates, query.offset + query.size)
        likes, unlikes = self.sources.resolve(state, query)
        source, against = merge_sources(likes), (merge_sources(unlikes) if unlikes else None)
        unlike_weight = self.settings.unlike_weight if query.unlike_weight is None else float(query.unlike_weight)
        every = source if against is None else merge_sources([source, against])
        exclude = list(every.indexed_ids)
        timings = {"source": _ms(time.perf_counter() - t0)}

        presented = query.offset + query.size if (query.details or query.explain) else 0
        deadline.check("finding candidates")  # within a request's deadline (the HTTP service's reads)
        found = self.stage.find(source, against=against, exclude=exclude, query=query, spec=spec, K=K, timings=timings,
                                explain_top=presented)
        deadline.check("ranking the candidates")
        t_rank = time.perf_counter()
        ranking = dict(unlike_weight=unlike_weight, spec=spec, offset=query.offset, size=query.size)
        feedback = self._feedback(source, every, found, spec, unlike_weight, state, timings)
        if feedback:
            scored, found = self._feedback_round(source, against, feedback, exclude, query, spec, K, found, timings)
            t_rank = time.perf_counter()
            share = feedback_share(SourceShape.of(source.document), spec.adaptive)
            hits = self._ranked(scored, found, n_like=1 + len(feedback), feedback=len(feedback), share=share, **ranking)
        else:
            hits = self._ranked(every, found, n_like=len(source.members), **ranking)
        t_present = time.perf_counter()
        timings["rerank"] = _ms(t_present - t_rank)

        if hits and (query.details or query.explain):
            deadline.check("explaining the hits")
            hits = present(self.store, source, hits, found.scoring, spec, query.explain, matrix=query.explain_matrix,
                           max_cells=self.settings.max_matrix_cells)
            timings["explain" if query.explain else "snippets"] = _ms(time.perf_counter() - t_present)
        used = {"feedback": {"ids": [f.indexed_id for f in feedback],
                             "share": feedback_share(SourceShape.of(source.document), spec.adaptive)}} if feedback else {}
        return MLTResult(
            hits, len(found.ids), every.stats_origin, state.stats.stale, timings,
            method="sdr" if spec is None else "hybrid",
            hybrid=None if spec is None else {**spec.to_dict(), **applied_weights(hits), **used},
            source_offsets=every.offsets,
            sources=described_sources(source, against, unlike_weight) if len(every.members) > 1 else None,
        )

    def _ranked(self, every: Source, candidates: Candidates, **how: Any) -> list[Hit]:
        """:func:`rank_hits`; a candidate deleted since it was found (a concurrent write, where the
        store reads the candidates again: the scores or features computed next to the data) is
        skipped, and the others ranked."""
        while True:
            try:
                return rank_hits(self.store, every, candidates, **how)
            except DocumentNotFoundError as e:
                if e.doc_id not in candidates.ids:
                    raise
                logger.info("candidate %r was deleted during the query; ranking without it", e.doc_id)
                candidates = candidates.without(e.doc_id)

    # -- document feedback ------------------------------------------------------------------------
    def _feedback(
        self, source: Source, every: Source, found: Candidates, spec: HybridSpec | None, unlike_weight: float,
        state: QueryState, timings: dict[str, float],
    ) -> list[Source]:
        """Adaptive fusion's document feedback (one like source, short enough that its share is above
        0): the top hits of a first ranking, as sources; empty when it does not apply."""
        if spec is None or not spec.feedback or len(source.members) != 1 or not found.ids:
            return []
        if feedback_share(SourceShape.of(source.document), spec.adaptive) <= 0:
            return []
        t0 = time.perf_counter()
        first = self._ranked(every, found, n_like=1, unlike_weight=unlike_weight, spec=spec, offset=0,
                             size=spec.adaptive.feedback_docs)
        t1 = time.perf_counter()
        timings["feedback_first_rank"] = _ms(t1 - t0)
        # the feedback documents as sources (their stored vectors and statistics), read together; one deleted
        # since the first ranking found it (a concurrent write) is left out, and the query goes on without it
        ids = [h.id for h in first]
        stored = self.store.stored_documents(ids)
        for doc_id in ids:
            if doc_id not in stored:
                logger.info("feedback document %r was deleted during the query; ranking without it", doc_id)
        sources = [self.sources.source_from_id(i, state, stored[i]) for i in ids if i in stored]
        timings["feedback_sources"] = _ms(time.perf_counter() - t1)
        return sources

    def _feedback_round(
        self, source: Source, against: Source | None, feedback: list[Source], exclude: list[str],
        query: Query, spec: HybridSpec, K: int, found: Candidates, timings: dict[str, float],
    ) -> tuple[Source, Candidates]:
        """Document feedback's second search: the source with the ``feedback`` documents as
        further like sources, then the unlike ones; the candidates of the first search followed by
        the new ones this search finds (only those are fetched). Returns the sources to score and
        the candidates; each source's BM25 is computed by the ranking."""
        expanded = merge_sources([source, *feedback])
        round_two: dict[str, float] = {}
        more = self.stage.find(expanded, against=against, exclude=exclude, query=query, spec=spec, K=K,
                               timings=round_two, known=found.scoring.fetched)
        timings.update({f"feedback_{k}": v for k, v in round_two.items()})
        have = set(found.ids)
        new = [k for k, i in enumerate(more.ids) if i not in have]
        scored = expanded if against is None else merge_sources([expanded, against])
        return scored, Candidates(found.ids + [more.ids[k] for k in new], found.scoring.joined(more.scoring))

    # -- settings ---------------------------------------------------------------------------------
    def _resolve(self, state: QueryState, query: Query) -> HybridSpec | None:
        weights = query.weights.as_dict() if query.weights is not None else None
        return self.resolve(method=query.method, fusion=query.fusion, weights=weights,
                            rank_constant=query.rank_constant, defaults=state.search_defaults, feedback=query.feedback)

    def resolve(
        self, *, method: str | None = None, fusion: str | None = None, weights: Mapping[str, float] | None = None,
        rank_constant: int | None = None, defaults: Mapping[str, Any] | None = None, feedback: bool | None = None,
    ) -> HybridSpec | None:
        """The fusion to search with: ``None`` for method ``sdr``, else a :class:`HybridSpec`.

        Each value comes from the arguments, else the index's search defaults (``defaults``; read
        from the store when None), else the settings; fusion options without a method mean
        ``hybrid``. Raises :class:`InvalidInputError` for an unknown method, invalid weights,
        fusion options with method ``sdr``, or ``rank_constant`` with a fusion other than ``rrf``.
        ``feedback`` turns document feedback on or off (None: the settings' ``SDR_FEEDBACK``); it
        only acts with adaptive fusion.
        """
        defaults = dict(self.store.search_defaults() or {}) if defaults is None else dict(defaults)
        implied = "hybrid" if any(v is not None for v in (fusion, weights, rank_constant)) else None
        chosen = method or implied or defaults.get("method") or self.settings.method
        if chosen not in METHODS:
            raise InvalidInputError(f"unknown method {chosen!r}; choose from {', '.join(METHODS)}")
        if chosen == "sdr":
            given = [n for n, v in (("fusion", fusion), ("weights", weights), ("rank_constant", rank_constant),
                                    ("feedback", feedback or None)) if v is not None]
            if given:
                verb = "applies" if len(given) == 1 else "apply"
                raise InvalidInputError(f"{', '.join(given)} {verb} to method 'hybrid' only; this search uses method 'sdr'")
            return None
        base = self.settings.spec().replace(
            fusion=defaults.get("fusion"), weights=defaults.get("weights"), rank_constant=defaults.get("rank_constant"),
        )
        spec = base.replace(fusion=fusion, weights=weights, rank_constant=rank_constant, feedback=feedback)
        if rank_constant is not None and spec.fusion != "rrf":  # asked for, and would be ignored
            raise InvalidInputError(f"rank_constant applies to fusion 'rrf' only; this search uses fusion {spec.fusion!r}")
        return spec

    # -- sources (the resolver's, for callers that hold an engine) ----------------------------------
    def segmentation(self, meta: IndexMeta | None = None) -> SegmentationSettings:
        return self.sources.segmentation(meta)

    def check_encoder(self, meta: IndexMeta | None = None) -> None:
        self.sources.check_encoder(meta)

    def source(self, query: Query) -> Source:
        return self.sources.source(query)

    def source_from_id(self, doc_id: str, state: QueryState | None = None) -> Source:
        return self.sources.source_from_id(doc_id, state)


def _ms(seconds: float) -> float:
    return round(seconds * 1e3, 2)
