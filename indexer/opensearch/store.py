"""The OpenSearch backend: a :class:`~sdr_search.indexer.store.DocumentStore` on an OpenSearch cluster.

Layout (request bodies in :mod:`sdr_search.indexer.opensearch.requests`, mappings in ``mappings/``):

* **Document index** (the ``index`` setting, or the one index an alias of that name points to):
  one document per SDR document, ``_id`` = its id (sha256 for ids over 512 bytes). Sentence
  vectors are stored twice on purpose: in the ``nested`` field ``sentences.vector`` (HNSW, inner
  product, engine ``lucene`` by default or ``faiss``; nested k-NN) and as one base64 float32 string ``vectors_b64`` (fetched with
  ``_mget`` for the exact rerank: smaller and faster to decode than JSON floats, measured in
  docs/results/opensearch.md, "Candidate-vector payload").
  Provenance (:class:`~sdr_search.indexer.store.IndexMeta`, library and cluster versions, HNSW parameters)
  is the mapping's ``_meta.sdr``.
* **State index** ``<concrete index>-sdr-state``: one ``stats`` document per document
  (``stats_mu``, ``stats_sigma``, ``stats_version``), the reference sample (one document per
  sampled paragraph with its own vectors, under a generation number) and one ``state`` document
  (statistics version, mode, stale flag, reference header). Statistics are kept out of the
  document index because updating a document re-indexes all its sentence vectors (and, on 2.x
  where vectors are excluded from ``_source``, drops them).

Consistency: each document is written by one ``index`` action, so it is visible completely or
not at all. The state document is only read by id (``GET`` is real-time), so its writes need no
refresh. ``put`` marks the statistics stale and deletes the documents' old statistics before
writing them (a document never shows statistics of its previous content); ``delete`` removes
statistics first. With the default refresh policy (``wait_for``) a write is visible to search,
counts and statistics when it returns. ``docs_without_stats`` is the number of documents minus
the number of statistics documents.

:class:`OpenSearchStore` composes one part per job, each its own module:

* :mod:`.transport`: the client (created on first use, released by :meth:`OpenSearchStore.close`),
  errors as domain errors, retries with backoff, bulk writes, ``_mget``, point-in-time scans;
* :mod:`.indices`: the concrete index behind the name and its provenance (:class:`~.indices.Target`),
  creating both indices, aliases, deleting them;
* :mod:`.state`: the state index (statistics, reference sample, search defaults);
* :mod:`.plugin`: the node's sdr plugin (detection, limits, ``sdr_candidates``, the ``sdr``
  rescorer, ``sdr_vectors``);
* :mod:`.documents`: document writes and reads (by id and by scan);
* :mod:`.search`: nested k-NN, BM25 and metadata-filtered id scans.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np

from sdr_search.core.documents import Document
from sdr_search.core.errors import InvalidInputError
from sdr_search.core.scoring import NormStats
from sdr_search.core.vectors import CorpusVectors, DocVectors
from sdr_search.indexer.opensearch.hosts import parse_urls
from sdr_search.indexer.store import (
    CandidateFeatures,
    CandidatePool,
    DocumentStore,
    IndexMeta,
    LexicalHits,
    QueryState,
    ReferenceParagraphs,
    SdrScores,
    SentenceHits,
    StatsInfo,
    StoreCapabilities,
    StoredDocument,
)

from .documents import Documents
from .indices import Indices
from .plugin import SdrPlugin
from .search import Search
from .settings import OpenSearchSettings
from .state import StateIndex
from .transport import Transport

__all__ = ["OpenSearchStore"]


class OpenSearchStore(DocumentStore):
    """A :class:`DocumentStore` on OpenSearch (see the module docstring for the layout and the parts).

    ``url`` and ``index`` default to ``settings.url`` / ``settings.index`` (env
    ``SDR_OPENSEARCH_URL`` / ``SDR_OPENSEARCH_INDEX``); ``url`` is one node's URL or a cluster's nodes,
    comma-separated (:mod:`.hosts`). ``index`` may be an alias of exactly one
    index; the store pins that index at first use (until :meth:`close`). ``ensure_meta`` creates
    the index (and its state index) when it does not exist. ``client``: an opensearch-py client of
    the caller's (not closed by the store).
    """

    # metadata by _mget without vectors; BM25 is the node's own (nothing to build); paragraph
    # centroids are computed from fetched vectors (the interface's default); a metadata filter is
    # the nested k-NN query's own filter (k-NN "efficient filtering" on the parent documents' fields);
    # with the node's sdr plugin, the candidate stage and exact SDR run on the node (capabilities)
    _BASE_CAPABILITIES = StoreCapabilities(metadata_lookup=True, filtered_knn=True)
    _PLUGIN_CAPABILITIES = StoreCapabilities(metadata_lookup=True, filtered_knn=True, sdr_candidates=True, exact_sdr=True)
    # several shards: no one-request sdr_candidates (its per-shard cut depends on the shard count, .plugin.SdrPlugin.one_shard)
    _SHARDED_PLUGIN_CAPABILITIES = StoreCapabilities(metadata_lookup=True, filtered_knn=True, exact_sdr=True)

    def __init__(
        self,
        url: str | None = None,
        *,
        index: str | None = None,
        settings: OpenSearchSettings | None = None,
        client: Any = None,
    ) -> None:
        self.settings = settings or OpenSearchSettings()
        self.urls = parse_urls(url or self.settings.url, what="the OpenSearch URL (--opensearch / SDR_OPENSEARCH_URL)")
        self.url = ",".join(self.urls)
        self.index = index or self.settings.index
        if not self.index or self.index != self.index.lower() or self.index.startswith(("_", "-", "+")):
            raise InvalidInputError(f"invalid OpenSearch index name {self.index!r} (lower case, not starting with _ - +)")
        self._transport = Transport(self.url, self.settings, index=self.index, client=client,
                                    on_index_missing=self._forget_index)
        self._indices = Indices(self._transport, self.settings, self.index, has_plugin=self.has_plugin)
        self._plugin = SdrPlugin(self._transport, self._indices, self.settings)
        self._state = StateIndex(self._transport, self._indices)
        self._documents = Documents(self._transport, self._indices, self._state, self._plugin, self.settings)
        self._search = Search(self._transport, self._indices, self.settings, self._plugin)

    def _forget_index(self) -> None:
        """A request found the index missing: read its target (and its shards) again next time."""
        self._indices.forget()
        self._plugin.many_shards.clear()
        self._plugin.shard_counts.clear()

    def _os(self) -> Any:
        """The opensearch-py client, created on first use (:meth:`.transport.Transport.os`)."""
        return self._transport.os()

    @property
    def capabilities(self) -> StoreCapabilities:  # type: ignore[override]
        """The interface's optional features: ``exact_sdr`` when the node has the sdr plugin
        (``settings.plugin``; detected once per store from the node's plugin list), and ``sdr_candidates``
        too on an index of one shard (:meth:`.plugin.SdrPlugin.one_shard`)."""
        if not self.has_plugin():
            return self._BASE_CAPABILITIES
        return self._PLUGIN_CAPABILITIES if self._plugin.one_shard() else self._SHARDED_PLUGIN_CAPABILITIES

    def has_plugin(self) -> bool:
        """Whether this store uses the node's sdr plugin (:meth:`.plugin.SdrPlugin.available`)."""
        return self._plugin.available()

    @property
    def index_name(self) -> str | None:
        """The concrete document index (None while it does not exist)."""
        target = self._indices.resolve()
        return target.name if target else None

    # -- creation and metadata (.indices) ---------------------------------------------------------
    def meta(self) -> IndexMeta | None:
        target = self._indices.resolve()
        return target.meta if target else None

    def ensure_meta(self, meta: IndexMeta) -> IndexMeta:
        return self._indices.ensure_meta(meta)

    def point_alias(self, alias: str) -> None:
        """Point ``alias`` at this store's index, removing it from any other index (atomic)."""
        self._indices.point_alias(alias)

    def segments(self) -> tuple[int, int]:
        """The document index's primary segments and primary shards."""
        return self._indices.segments()

    def merge_segments(self, max_segments: int, *, poll_s: float = 5.0,
                       progress: Callable[[int, float], None] | None = None) -> tuple[int, int]:
        """Force-merge the document index to at most ``max_segments`` segments per shard
        (:meth:`.indices.Indices.merge_segments`); returns the primary segments before and after."""
        return self._indices.merge_segments(max_segments, poll_s=poll_s, progress=progress)

    def drop(self) -> bool:
        """Delete the document index and its state index; False when there was nothing to delete."""
        dropped = self._indices.drop()
        self._plugin.many_shards.clear()
        self._plugin.shard_counts.clear()
        return dropped

    # -- documents (.documents) -------------------------------------------------------------------
    def counts(self) -> dict[str, int]:
        return self._documents.counts()

    def cluster_health(self, timeout: float | None = None) -> dict[str, Any]:
        """The cluster's health and the index's, with the nodes that do not answer within ``timeout``
        (:meth:`.transport.Transport.cluster_health`)."""
        return self._transport.cluster_health(self._indices.read().name, timeout=timeout)

    def put(self, items: Sequence[tuple[Document, DocVectors]]) -> None:
        """Insert or replace documents (one ``index`` action each; see the module docstring).

        Raises :class:`BulkWriteError` naming the documents not written (the others are)."""
        self._documents.put(items)

    def delete(self, ids: Sequence[str]) -> int:
        return self._documents.delete(ids)

    def get(self, doc_id: str) -> StoredDocument:
        return self._documents.get(doc_id)

    def stored_documents(self, ids: Sequence[str]) -> dict[str, StoredDocument]:
        """:meth:`get` of those ``ids`` that exist, in two requests whatever their number
        (:meth:`.documents.Documents.stored_documents`)."""
        return self._documents.stored_documents(ids)

    def content_keys(self, ids: Sequence[str]) -> dict[str, str]:
        return self._documents.content_keys(ids)

    def metadata_of(self, ids: Sequence[str]) -> dict[str, Mapping[str, Any]]:
        """Metadata of those ``ids`` that exist (:meth:`.documents.Documents.metadata_of`)."""
        return self._documents.metadata_of(ids)

    def documents_of(self, ids: Sequence[str]) -> dict[str, Document]:
        """The documents of those ``ids`` that exist (:meth:`.documents.Documents.documents_of`)."""
        return self._documents.documents_of(ids)

    def iter_ids(self) -> Iterator[str]:
        """Document ids in ``doc_id`` order (stable; fetched page by page while iterating)."""
        return self._documents.iter_ids()

    def fetch(self, ids: Sequence[str]) -> CorpusVectors:
        """Sentence vectors of ``ids`` in that order (:meth:`.documents.Documents.fetch`)."""
        return self._documents.fetch(ids)

    def all_vectors(self) -> CorpusVectors:
        """Every document in ``doc_id`` order (in memory). Raises :class:`StoreError` when empty."""
        return self._documents.all_vectors()

    # -- searches (.search) -----------------------------------------------------------------------
    def ids_matching(self, flt: Mapping[str, Any], *, limit: int | None = None) -> list[str]:
        """The ids of every document whose metadata matches ``flt`` (:meth:`.search.Search.ids_matching`)."""
        return self._search.ids_matching(flt, limit=limit)

    def sentence_knn(
        self, vectors: np.ndarray, k: int, *, exclude_ids: Sequence[str] = (), allowed_ids: Sequence[str] | None = None,
        filter: Mapping[str, Any] | None = None,
    ) -> SentenceHits:
        """Nested k-NN with the metadata filter as the k-NN query's own (:meth:`.search.Search.sentence_knn`)."""
        return self._search.sentence_knn(vectors, k, exclude_ids=exclude_ids, allowed_ids=allowed_ids, filter=filter)

    def lexical_search(
        self, text: str, k: int, *, exclude_ids: Sequence[str] = (), score_ids: Sequence[str] = (),
        filter: Mapping[str, Any] | None = None,
    ) -> LexicalHits:
        """OpenSearch BM25 on the ``text`` field (:meth:`.search.Search.lexical_search`)."""
        return self._search.lexical_search(text, k, exclude_ids=exclude_ids, score_ids=score_ids, filter=filter)

    # -- the sdr plugin (.plugin) -----------------------------------------------------------------
    def sdr_candidates(
        self, source: DocVectors, k: int, size: int, *, stats: NormStats | None = None,
        aggregation: str = "weighted-sum", exclude_ids: Sequence[str] = (), filter: Mapping[str, Any] | None = None,
    ) -> tuple[list[str], np.ndarray]:
        """The candidate stage on the node in one search (:meth:`.plugin.SdrPlugin.sdr_candidates`).
        ``capabilities.sdr_candidates``."""
        return self._plugin.sdr_candidates(source, k, size, stats=stats, aggregation=aggregation,
                                           exclude_ids=exclude_ids, filter=filter)

    def sdr_candidate_pool(
        self, source: DocVectors, k: int, size: int, *, centroids: np.ndarray | None = None,
        stats: NormStats | None = None, aggregation: str = "weighted-sum", exclude_ids: Sequence[str] = (),
        filter: Mapping[str, Any] | None = None,
    ) -> CandidatePool:
        """The candidate stage and the pool's centroid rows in one search (:meth:`.plugin.SdrPlugin.sdr_candidate_pool`).
        ``capabilities.sdr_candidates``."""
        return self._plugin.sdr_candidate_pool(source, k, size, centroids=centroids, stats=stats, aggregation=aggregation,
                                               exclude_ids=exclude_ids, filter=filter)

    def sdr_scores(
        self, sources: Sequence[tuple[DocVectors, NormStats]], ids: Sequence[str], *, explain: bool = False,
        explain_top: int = 0, documents: bool = False,
    ) -> SdrScores:
        """Exact SDR on the node, paged within its limits (:meth:`.plugin.SdrPlugin.sdr_scores`).
        ``capabilities.exact_sdr``."""
        return self._plugin.sdr_scores(sources, ids, explain=explain, explain_top=explain_top, documents=documents)

    def centroid_rows(self, source_centroids: np.ndarray, ids: Sequence[str]) -> np.ndarray:
        """The centroid pre-rank's rows computed on the node (:meth:`.plugin.SdrPlugin.centroid_rows`).
        ``capabilities.exact_sdr``."""
        return self._plugin.centroid_rows(source_centroids, ids)

    def candidate_features(self, ids: Sequence[str]) -> CandidateFeatures:
        """Paragraph counts and normalised mean vectors of ``ids`` (in that order): with the sdr
        plugin computed on the node (:meth:`.plugin.SdrPlugin.candidate_features`); without it the
        interface's default (every vector fetched)."""
        if not self.has_plugin():
            return super().candidate_features(ids)
        return self._plugin.candidate_features(ids)

    # -- statistics, reference sample, search defaults (.state) -----------------------------------
    def stats_info(self) -> StatsInfo:
        return self._state.stats_info()

    def write_stats(
        self, stats: Mapping[str, NormStats], *, mode: str, sample_size: int | None, seed: int | None
    ) -> StatsInfo:
        """One refresh: every document's statistics with version + 1 (:meth:`.state.StateIndex.write_stats`)."""
        return self._state.write_stats(stats, mode=mode, sample_size=sample_size, seed=seed)

    def reference(self) -> ReferenceParagraphs | None:
        return self._state.reference()

    def set_reference(self, reference: ReferenceParagraphs) -> None:
        """Record a new reference sample (:meth:`.state.StateIndex.set_reference`)."""
        self._state.set_reference(reference)

    def search_defaults(self) -> dict[str, Any]:
        """The search defaults recorded in the state document (``{}`` when none)."""
        return self._state.search_defaults()

    def set_search_defaults(self, defaults: Mapping[str, Any]) -> dict[str, Any]:
        """Record the search defaults in the state document (validated; ``{}`` clears them)."""
        return self._state.set_search_defaults(defaults)

    def query_state(self, *, reference_version: int | None = None, ids: Sequence[str] = ()) -> QueryState:
        """Meta, search defaults, statistics info and the reference sample from one real-time read of the
        state document, with the documents ``ids`` and their statistics in the same ``_mget``
        (:meth:`.state.StateIndex.query_state`)."""
        return self._state.query_state(reference_version=reference_version, documents=self._documents, ids=ids)

    # -- lifecycle --------------------------------------------------------------------------------
    def close(self) -> None:
        """Release the client (when this store created it). The store can be used again after."""
        with self._transport.lock:
            self._transport.close()
            self._indices.reset()
            self._plugin.reset()

    def __repr__(self) -> str:
        return f"OpenSearchStore({self.url!r}, index={self.index!r})"
