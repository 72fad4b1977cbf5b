"""The OpenSearch store's searches of its own (the sdr plugin's are in :mod:`.plugin`): the nested
k-NN of sentence vectors, BM25 on the ``text`` field, and the ids a metadata filter matches.

A metadata filter (and allowed ids) is one document-level query (:func:`build_restriction`),
checked before any request is sent; the k-NN query applies it as its own filter, the lexical search
as a filter clause (scores unchanged).
"""

from __future__ import annotations

import itertools
from typing import Any, Mapping, Sequence

import numpy as np

from sdr_search.core.errors import InvalidInputError, ModelMismatchError
from sdr_search.core.lexical import query_terms
from sdr_search.indexer.store import LexicalHits, SentenceHits

from .indices import Indices
from .plugin import SdrPlugin
from .requests import (
    MATCH_NONE,
    MAX_KNN_K,
    build_lexical_msearch,
    build_more_like_this_query,
    build_msearch_bodies,
    build_restriction,
    build_terms_query,
    parse_knn_responses,
    parse_lexical_response,
)
from .settings import OpenSearchSettings
from .transport import Transport, chunks

__all__ = ["Search"]

_SCORE_IDS_PER_SEARCH = 1_000  # ids scored by one filtered lexical search


class Search:
    """The searches of the store's target (``indices``) through ``transport``."""

    def __init__(self, transport: Transport, indices: Indices, settings: OpenSearchSettings,
                 plugin: SdrPlugin | None = None) -> None:
        self._transport = transport
        self._indices = indices
        self.settings = settings
        self._plugin = plugin  # the k-NN through the plugin's own search where the node has it ('sentences')

    def ids_matching(self, flt: Mapping[str, Any], *, limit: int | None = None) -> list[str]:
        """The ids of every document whose metadata matches ``flt``, in ``doc_id`` order (a
        filtered scan of doc values; one page per 10 x ``scan_page_size`` ids). The filter is the
        one the k-NN search applies (:func:`build_metadata_filter`), on the same typed terms
        :func:`sdr_search.core.filters.matches` compares, so it is equal to it. With ``limit``,
        at most that many: one page of ``limit`` ids when it is under a scan page."""
        query = build_restriction(flt, None)
        target = self._indices.read()
        target.filterable(flt)
        if query == MATCH_NONE or limit == 0:
            return []
        page = 10 * self.settings.scan_page_size
        hits = self._transport.scan(target.name, False, page if limit is None else max(1, min(limit, page)), query=query)
        return [str(h["fields"]["doc_id"][0]) for h in itertools.islice(hits, limit)]

    def sentence_knn(
        self, vectors: np.ndarray, k: int, *, exclude_ids: Sequence[str] = (), allowed_ids: Sequence[str] | None = None,
        filter: Mapping[str, Any] | None = None,
    ) -> SentenceHits:
        """Nested k-NN, one ``_msearch`` per ``msearch_batch`` query rows; scores are cosines.

        ``filter`` (a metadata filter) and ``allowed_ids`` (at most :data:`MAX_ALLOWED_IDS`) are
        the k-NN query's own filter: OpenSearch searches only the sentences of the documents they
        match (the k-NN plugin joins a filter on the parent documents' fields down to their
        nested sentences, 2.12+), so a rare filter still gets ``k`` documents per row. On an index of
        several shards with the sdr plugin and ``settings.candidate_search`` 'sentences' (the engine's
        candidate stage there, :meth:`.plugin.SdrPlugin.one_shard`), the plugin's sentence search instead
        (:meth:`.plugin.SdrPlugin.sentence_hits`: the documents a one-shard ``sdr_candidates`` counts)."""
        if k < 1:
            raise InvalidInputError(f"k must be >= 1, got {k}")
        q = np.atleast_2d(np.asarray(vectors, dtype=np.float32))
        if q.ndim != 2:
            raise InvalidInputError(f"query vectors must be a 2-D array, got shape {np.shape(vectors)}")
        restriction = build_restriction(filter, allowed_ids)
        target = self._indices.read()
        target.filterable(filter)
        if q.shape[1] != int(target.recorded.dim):
            raise ModelMismatchError(
                f"query vectors have dimension {q.shape[1]}, OpenSearch index {target.name!r} holds dimension "
                f"{target.recorded.dim} (model {target.recorded.model_id})"
            )
        if not np.all(np.isfinite(q)):
            raise InvalidInputError("query vectors contain NaN or infinity")
        if k > MAX_KNN_K:
            raise InvalidInputError(f"k must be <= {MAX_KNN_K} on OpenSearch (the k-NN query's limit), got {k}")
        if restriction == MATCH_NONE:
            return SentenceHits([[] for _ in range(q.shape[0])], [np.zeros(0, np.float32) for _ in range(q.shape[0])])
        plugin = self._plugin
        if plugin is not None and self.settings.candidate_search == "sentences" and plugin.available() \
                and not plugin.one_shard():
            return plugin.sentence_hits(target, q, k, [str(i) for i in exclude_ids], restriction)
        ids: list[list[str]] = []
        scores: list[np.ndarray] = []
        for body in build_msearch_bodies(q, k, target.name, exclude_ids=[str(i) for i in exclude_ids],
                                         batch_size=self.settings.msearch_batch, ef_search=self.settings.hnsw_ef_search,
                                         filter=restriction):
            r = self._transport.msearch_body("a nested k-NN search", body, index=target.name)
            batch_ids, batch_scores = parse_knn_responses(r["responses"], k=k, index=target.name, space_type=target.space_type)
            ids += batch_ids
            scores += batch_scores
        return SentenceHits(ids, scores)

    def lexical_search(
        self, text: str, k: int, *, exclude_ids: Sequence[str] = (), score_ids: Sequence[str] = (),
        filter: Mapping[str, Any] | None = None,
    ) -> LexicalHits:
        """OpenSearch BM25 on the ``text`` field (``settings.lexical_query``: boosted term queries
        or ``more_like_this``), one ``_msearch``: the top ``k`` (restricted to the documents the
        metadata ``filter`` matches, a filter clause: scores unchanged), then the same query
        filtered to ``score_ids`` (up to 1000 ids per search) for their scores; an id that does
        not match scores 0."""
        if k < 0:
            raise InvalidInputError(f"k must be >= 0, got {k}")
        if not isinstance(text, str):
            raise InvalidInputError("the lexical query must be a string")
        restriction = build_restriction(filter, None) if filter else None
        target = self._indices.read()
        target.filterable(filter)
        s = self.settings
        exclude = [str(i) for i in exclude_ids]
        wanted = list(dict.fromkeys(str(i) for i in score_ids))
        if s.lexical_query == "terms":
            terms = query_terms(text, s.lexical_max_terms)

            def make(size: int, only: Sequence[str] | None, skip: Sequence[str],
                     restrict: Mapping[str, Any] | None = None) -> dict[str, Any]:
                return build_terms_query(terms, size, exclude_ids=skip, only_ids=only, filter=restrict)
        else:
            def make(size: int, only: Sequence[str] | None, skip: Sequence[str],
                     restrict: Mapping[str, Any] | None = None) -> dict[str, Any]:
                return build_more_like_this_query(size, like_text=text, exclude_ids=skip, only_ids=only,
                                                  max_query_terms=s.lexical_max_terms, filter=restrict)
        top = make(k, None, exclude, restriction) if k > 0 and restriction != MATCH_NONE else None
        parts = list(chunks(wanted, _SCORE_IDS_PER_SEARCH))
        scored_bodies = [make(len(c), list(c), ()) for c in parts]
        if top is None and not scored_bodies:
            return LexicalHits([], np.zeros(0, dtype=np.float32), {})
        r = self._transport.msearch_body("a lexical search", build_lexical_msearch(target.name, top, scored_bodies),
                                         index=target.name)
        responses = list(r["responses"])
        # OpenSearch 2.x's BM25 (LegacyBM25Similarity) keeps the (k1 + 1) factor that bm25s (the embedded
        # store) and 3.x drop: divide it out so both stores report the same BM25.
        scale = np.float32(1.0 / target.bm25_factor)
        ids: list[str] = []
        scores = np.zeros(0, dtype=np.float32)
        if top is not None:
            ids, scores = parse_lexical_response(responses.pop(0), index=target.name)
            scores = scores * scale
        scored = {i: 0.0 for i in wanted}
        for item in responses:
            got_ids, got_scores = parse_lexical_response(item, index=target.name)
            scored.update({i: float(v * scale) for i, v in zip(got_ids, got_scores)})
        return LexicalHits(ids, scores, scored)
