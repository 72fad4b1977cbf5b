"""The OpenSearch backend: a :class:`~sdr_search.indexer.store.DocumentStore` on an OpenSearch cluster.

Layout (request bodies in :mod:`sdr_search.indexer.opensearch.requests`, mappings in ``mappings/``):

* **Document index** (the ``index`` setting, or the one index an alias of that name points to):
  one document per SDR document, ``_id`` = its id (sha256 for ids over 512 bytes). Sentence
  vectors are stored twice on purpose: in the ``nested`` field ``sentences.vector`` (HNSW, inner
  product, engine ``lucene`` by default or ``faiss``; nested k-NN) and as one base64 float32 string ``vectors_b64`` (fetched with
  ``_mget`` for the exact rerank: about 4x smaller and far faster to decode than JSON floats).
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

Nothing connects in ``__init__``: the opensearch-py client is created on first use and released
by :meth:`OpenSearchStore.close` (a client passed in is the caller's and is not closed).
Connection failures raise :class:`~sdr_search.core.errors.BackendUnavailableError`, a missing index
:class:`~sdr_search.core.errors.IndexNotFoundError`, a missing document
:class:`~sdr_search.core.errors.DocumentNotFoundError`, rejected bulk items
:class:`~sdr_search.core.errors.BulkWriteError` (after retrying 429s with backoff).

Retries: with one node URL opensearch-py's own retries are off (it re-sends at once, with no backoff,
whatever the body size). With several (a cluster's nodes, :mod:`.hosts`), its transport sends a request
whose node cannot be reached or does not answer within the timeout to the next live node at once, each
other node once, and leaves the failed node out for ``dead_timeout`` (doubled at each further failure).
On top of that, the store retries a request answered 429, 502, 503 or 504, or that could not connect,
``max_retries`` times with the one retry policy, :mod:`sdr_search.core.retry`
(:meth:`OpenSearchSettings.backoff`: ``retry_backoff`` doubled, capped by ``retry_backoff_max``);
a timeout is not retried there (on one node the request may still be running). Every request the store makes is idempotent
(writes carry stable ``_id`` values), so a retry cannot double a document.
"""

from __future__ import annotations

import itertools
import logging
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import metadata as importlib_metadata
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np

from sdr_search.indexer.opensearch.hosts import parse_urls, transport_retries
from sdr_search.indexer.provenance import library_versions
from sdr_search.indexer.validation import check_put_items
from sdr_search.indexer.store import (
    DocumentStore,
    IndexMeta,
    LexicalHits,
    QueryState,
    ReferenceParagraphs,
    CandidateFeatures,
    SdrScores,
    SentenceHits,
    StatsInfo,
    StoreCapabilities,
    StoredDocument,
    query_state_of,
)
from sdr_search.core.cache import document_key
from sdr_search.core.documents import Document
from sdr_search.core.errors import (
    BackendUnavailableError,
    BulkWriteError,
    DocumentNotFoundError,
    IndexLayoutError,
    IndexNotFoundError,
    InvalidInputError,
    ModelMismatchError,
    OverloadedError,
    StoreError,
)
from sdr_search.core.fusion import check_search_defaults
from sdr_search.core.lexical import query_terms
from sdr_search.core.retry import retry_call
from sdr_search.core.scoring import NormStats
from sdr_search.core.vectors import CorpusVectors, DocVectors

from . import plugin_version
from .bulk import run_bulk
from .requests import (
    FORMAT_VERSION,
    MATCH_NONE,
    MAX_ALLOWED_IDS,
    MAX_KNN_K,
    STATE_DOC_ID,
    build_alias_swap,
    build_bulk_actions,
    build_candidate_filter,
    build_counts_query,
    build_delete_actions,
    build_index_body,
    build_lexical_msearch,
    build_meta,
    build_metadata_filter,
    build_more_like_this_query,
    build_mget_body,
    build_msearch_bodies,
    build_reference_actions,
    build_reference_delete_actions,
    build_scan_query,
    build_sdr_candidates_query,
    build_sdr_scores_msearch,
    build_state_index_body,
    build_vectors_search,
    build_sentence_counts_search,
    parse_sentence_counts,
    candidate_hits_per_sentence,
    check_source_limits,
    explained_per_search,
    hit_doc_id,
    pack_by_values,
    parse_plugin_limits,
    PluginLimits,
    parse_sdr_hits,
    parse_centroid_rows_hit,
    parse_mean_hit,
    parse_vector_hit,
    VECTORS_B64,
    VECTORS_INDEX,
    build_stats_count_query,
    build_stats_delete_actions,
    build_stats_update_actions,
    build_terms_query,
    bulk_lines,
    decode_vectors_b64,
    error_from_response,
    index_meta_from_meta,
    bm25_k1,
    initial_state,
    knn_method,
    legacy_metadata,
    parse_knn_responses,
    parse_lexical_response,
    reference_os_id,
    state_index_name,
    stats_os_id,
)
from .settings import OpenSearchSettings

__all__ = ["OpenSearchStore"]

logger = logging.getLogger(__name__)

_MGET_CHUNK = 500
_VECTOR_CHUNK = 100  # documents per search of the plugin's vector fetch (~400 kB of base64 each at 200 x 384)
_SMALL_DOCS_PER_BULK = 2_000  # statistics documents and deletes are a few hundred bytes each
_STATE_CAS_ATTEMPTS = 5
_SCORE_IDS_PER_SEARCH = 1_000  # ids scored by one filtered lexical search
# _mget item errors meaning "this shard is not started yet" (an index another process has just
# created, a node restarting): the request is retried like a 503, never reported as a rejection.
_SHARD_NOT_READY = frozenset({"no_shard_available_action_exception", "unavailable_shards_exception",
                              "illegal_index_shard_state_exception", "shard_not_found_exception"})


def _transient(error: BaseException, overload: bool) -> bool:
    """Whether a failed request may succeed when sent again: 429 (when ``overload``), 502, 503,
    504, or no connection. A timeout is not (the request may still be running)."""
    from opensearchpy import exceptions as ox

    if isinstance(error, OverloadedError):
        return overload
    if not isinstance(error, BackendUnavailableError):
        return False
    cause = error.__cause__
    if isinstance(cause, ox.ConnectionTimeout):
        return False
    if isinstance(cause, ox.ConnectionError):
        return True
    return isinstance(cause, ox.TransportError) and cause.status_code in (502, 503, 504)


def _bm25_factor(recorded: Mapping[str, Any]) -> float:
    """How much larger the node's BM25 is than bm25s's for an index with this ``_meta.sdr``: indices
    created on 2.x score with LegacyBM25Similarity, ``(k1 + 1)`` times bm25s; 3.x with Lucene's
    BM25Similarity, the same as bm25s (both measured, 3 shards, dfs). ``k1``: the mapping's, 1.5."""
    version = str((recorded.get("versions") or {}).get("opensearch", "2"))
    try:
        major = int(version.split(".")[0])
    except ValueError:
        major = 2
    return 1.0 + float(recorded.get("bm25_k1", 1.5)) if major < 3 else 1.0


def _pit_lost(error: Exception) -> bool:
    """Whether a scan page failed because its point in time no longer exists."""
    cause = error.__cause__
    return "search_context_missing_exception" in str(getattr(cause, "info", "") or "") + str(error)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _offsets(par_sizes: Sequence[int]) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(np.asarray(par_sizes, dtype=np.int64))]).astype(np.int64)


def _chunks(seq: Sequence[Any], n: int) -> Iterator[Sequence[Any]]:
    for i in range(0, len(seq), n):
        yield seq[i : i + n]


@dataclass(frozen=True)
class _Target:
    """The concrete indices behind the configured name, and the recorded provenance."""

    name: str  # concrete document index
    state: str  # its state index
    meta: IndexMeta | None
    engine: str = "faiss"  # k-NN engine recorded in _meta (indices from before the setting: faiss)
    space_type: str = "innerproduct"  # k-NN space type recorded in _meta
    bm25_factor: float = 2.5  # what the node's BM25 multiplies bm25s's by: 1 + k1 on 2.x, 1 on 3.x
    vectors: str = VECTORS_B64  # where readers find the vectors (_meta.sdr.vectors; indices from before: b64)
    derived_source: bool = False  # k-NN derived source (vectors rebuilt into _source on read)
    legacy_metadata: bool = False  # metadata mapped field by field (layout 1): read only, no filter (legacy_metadata)

    @property
    def recorded(self) -> IndexMeta:
        """The recorded provenance (a target returned by ``_read_target`` always has one)."""
        if self.meta is None:
            raise StoreError(f"OpenSearch index {self.name!r} has no model recorded")
        return self.meta


class OpenSearchStore(DocumentStore):
    """A :class:`DocumentStore` on OpenSearch (see the module docstring for the layout).

    ``url`` and ``index`` default to ``settings.url`` / ``settings.index`` (env
    ``SDR_OPENSEARCH_URL`` / ``SDR_OPENSEARCH_INDEX``). ``index`` may be an alias of exactly one
    index; the store pins that index at first use (until :meth:`close`). ``ensure_meta`` creates
    the index (and its state index) when it does not exist.
    """

    # metadata by _mget without vectors; BM25 is the node's own (nothing to build); paragraph
    # centroids are computed from fetched vectors (the interface's default); a metadata filter is
    # the nested k-NN query's own filter (k-NN "efficient filtering" on the parent documents' fields);
    # with the node's sdr plugin, the candidate stage and exact SDR run on the node (capabilities)
    _BASE_CAPABILITIES = StoreCapabilities(metadata_lookup=True, filtered_knn=True)
    _PLUGIN_CAPABILITIES = StoreCapabilities(metadata_lookup=True, filtered_knn=True, sdr_candidates=True, exact_sdr=True)

    @property
    def capabilities(self) -> StoreCapabilities:  # type: ignore[override]
        """The interface's optional features: ``sdr_candidates`` and ``exact_sdr`` when the node has
        the sdr plugin (``settings.plugin``; detected once per store from the node's plugin list)."""
        return self._PLUGIN_CAPABILITIES if self.has_plugin() else self._BASE_CAPABILITIES

    def has_plugin(self) -> bool:
        """Whether this store uses the node's sdr plugin: ``settings.plugin`` 'off' never, 'on' always
        (:class:`StoreError` when the node lacks it or has another version), 'auto' when the node lists it
        at the version this package speaks (:mod:`.plugin_version`; another version: the Python path, and
        one warning per process naming both). Asked once per store (until :meth:`close`); a node that
        cannot be reached is asked again next time."""
        mode = self.settings.plugin
        if mode == "off":
            return False
        known = self._plugin
        if known is None:
            try:
                plugins = self._call("listing the node's plugins", lambda: self._os().cat.plugins(
                    params={"format": "json", "h": "component,version"}))
            except BackendUnavailableError as e:
                logger.debug("could not list the plugins of %s: %s", self.url, e)
                if mode == "on":
                    raise
                return False
            check = plugin_version.check_plugins(plugins)
            self._plugin_check = check
            known = self._plugin = check.state == "ok"
            if check.state == "absent":
                plugin_version.log_once(
                    logger, logging.INFO, (self.url, "absent"), "OpenSearch at %s has no sdr plugin: candidates and "
                    "exact SDR run in Python (opensearch-plugin/README.md installs it)", self.url)
            elif check.state == "mismatch" and mode != "on":
                plugin_version.log_once(logger, logging.WARNING, (self.url, "mismatch", *check.versions),
                                        "%s", plugin_version.mismatch_message(self.url, check.versions, mode))
        if mode == "on" and not known:
            check = self._plugin_check
            if check is not None and check.state == "mismatch":
                raise StoreError(plugin_version.mismatch_message(self.url, check.versions, mode))
            raise StoreError(f"SDR_OPENSEARCH_PLUGIN=on but OpenSearch at {self.url} has no sdr plugin; install "
                             "opensearch-plugin/ (docs/opensearch.md) or set SDR_OPENSEARCH_PLUGIN=auto")
        return known

    def _plugin_state(self) -> str:
        """'plugin off', 'not installed' or 'version X, not Y' (for messages)."""
        if self.settings.plugin == "off":
            return "plugin off"
        check = self._plugin_check
        if check is not None and check.state == "mismatch":
            return f"version {', '.join(check.versions)}, not {plugin_version.PLUGIN_VERSION}"
        return "not installed"

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
        self._client = client
        self._owns_client = client is None
        self._lock = threading.RLock()
        self._target: _Target | None = None
        self._many_shards: set[str] = set()  # indices whose searches span several shards (no explain_top there)
        self._state_checked = False
        self._plugin: bool | None = None  # the node has the sdr plugin (None: not asked yet)
        self._plugin_check: plugin_version.PluginCheck | None = None  # what its plugin list said
        self._limits: PluginLimits | None = None  # the plugin's sdr.limits.* (None: not read yet)

    # =========================================================================================
    # client, errors, target
    # =========================================================================================
    def _os(self) -> Any:
        """The opensearch-py client, created on first use."""
        if self._client is None:
            with self._lock:
                if self._client is None:
                    from opensearchpy import OpenSearch

                    s = self.settings
                    kwargs: dict[str, Any] = {
                        "hosts": self.urls, "timeout": s.timeout, "http_compress": s.http_compress,
                        "verify_certs": s.verify_certs,
                    }
                    if s.ca_certs:
                        kwargs["ca_certs"] = s.ca_certs
                    if s.username:
                        kwargs["http_auth"] = (s.username, s.password.get_secret_value() if s.password else "")
                    if not s.verify_certs:
                        kwargs["ssl_show_warn"] = False
                    # One node: no transport retries (they re-send at once, bulk bodies included); _call
                    # retries with backoff. Several: the transport sends a request whose node failed (no
                    # connection, or no answer in time: a hung node) to the next live node at once, and
                    # leaves the failed one out for dead_timeout; _call's backoff comes on top when all fail.
                    kwargs["max_retries"] = transport_retries(len(self.urls))
                    kwargs["retry_on_timeout"] = len(self.urls) > 1
                    kwargs["dead_timeout"] = s.dead_timeout
                    self._client = OpenSearch(**kwargs)
        return self._client

    @contextmanager
    def _calls(self, what: str, index: str | None = None) -> Iterator[None]:
        """Map opensearch-py exceptions raised inside to domain errors (cause chained)."""
        from opensearchpy import exceptions as ox

        try:
            yield
        except ox.ImproperlyConfigured as e:
            raise InvalidInputError(f"invalid OpenSearch client settings for {self.url}: {e}") from e
        except ox.ConnectionError as e:  # includes timeouts and TLS failures
            raise BackendUnavailableError(f"OpenSearch at {self.url} cannot be reached during {what}: {e}") from e
        except ox.TransportError as e:
            err = error_from_response(e.status_code, e.info, what=what, index=index or self.index)
            if isinstance(err, IndexNotFoundError):
                self._target = None
                self._many_shards.clear()
            raise err from e
        except ox.OpenSearchException as e:
            raise StoreError(f"OpenSearch client error during {what}: {e}") from e

    def _call(self, what: str, fn: Any, *, index: str | None = None, retry_overload: bool = True) -> Any:
        """``fn()`` inside :meth:`_calls`, retried with backoff while the failure is transient
        (see the module docstring). ``retry_overload`` False leaves 429s to the caller (the bulk
        loop retries rejected items itself)."""

        def once() -> Any:
            with self._calls(what, index=index):
                return fn()

        return retry_call(once, backoff=self.settings.backoff(), retry_if=lambda e: _transient(e, retry_overload),
                          what=what, log=logger)

    def _search_params(self) -> dict[str, str]:
        """The query parameters of every search the store sends: ``cancel_after_time_interval`` = the store's
        request timeout (``settings.timeout``), so that when the store stops waiting, the node stops the search
        too (it cancels the search's task, and the plugin's loops and OpenSearch's own stop at their next check)
        instead of finishing work nobody reads."""
        return {"cancel_after_time_interval": f"{max(1, int(self.settings.timeout * 1000))}ms"}

    def _plugin_limits(self) -> PluginLimits:
        """The node's ``sdr.limits.*`` (``GET _cluster/settings?include_defaults=true``), read once per store (until
        :meth:`close`); the plugin's documented defaults where the node does not list them. A cluster whose
        settings cannot be read (a user without the cluster monitor privilege) gets the defaults, logged once."""
        limits = self._limits
        if limits is None:
            from opensearchpy import exceptions as ox

            def read() -> Mapping[str, Any] | None:
                try:
                    return self._os().cluster.get_settings(params={"include_defaults": "true", "flat_settings": "true"})
                except ox.AuthorizationException as e:
                    plugin_version.log_once(logger, logging.WARNING, (self.url, "limits"), "cannot read the cluster "
                                            "settings of %s (%s): the sdr plugin's default limits are assumed", self.url, e)
                    return None

            limits = self._limits = parse_plugin_limits(self._call("reading the sdr plugin's limits", read))
        return limits

    def _mget(self, what: str, body: Mapping[str, Any], *, index: str | None = None) -> list[dict[str, Any]]:
        """The ``docs`` of one ``_mget``, retried (as a 503) while an item's shard is not started."""
        from opensearchpy import exceptions as ox

        def mget() -> list[dict[str, Any]]:
            docs = self._os().mget(body=body, index=index)["docs"]
            for d in docs:
                err = d.get("error")
                if isinstance(err, Mapping) and err.get("type") in _SHARD_NOT_READY:
                    raise ox.TransportError(503, str(err["type"]), d)
            return docs

        return self._call(what, mget, index=index)

    def _resolve(self) -> _Target | None:
        """The concrete index behind ``self.index`` and its provenance; None if it does not exist."""
        target = self._target
        if target is not None:
            return target
        from opensearchpy import exceptions as ox

        def read() -> Mapping[str, Any] | None:
            try:
                return self._os().indices.get_mapping(index=self.index)
            except ox.NotFoundError as e:
                if e.error == "index_not_found_exception":
                    return None
                raise

        # retried like every read: it is the first request of a store, often made while a node restarts
        mappings = self._call("reading the index mapping", read)
        if not mappings:
            return None
        if len(mappings) > 1:
            raise StoreError(
                f"{self.index!r} names {len(mappings)} indices ({', '.join(sorted(mappings))}); an sdr store "
                "needs one index (an alias must point to exactly one)"
            )
        (name, body), = mappings.items()
        meta = body.get("mappings", {}).get("_meta") or {}
        recorded = meta.get("sdr") if isinstance(meta.get("sdr"), Mapping) else {}
        target = _Target(name, state_index_name(name), index_meta_from_meta(meta),
                         str(recorded.get("engine", "faiss")), str(recorded.get("space_type", "innerproduct")),
                         _bm25_factor(recorded), str(recorded.get("vectors", VECTORS_B64)),
                         bool(recorded.get("derived_source", False)), legacy_metadata(body.get("mappings", {})))
        if target.meta is not None:
            self._target = target
        return target

    def _read_target(self) -> _Target:
        target = self._resolve()
        if target is None:
            raise IndexNotFoundError(
                f"OpenSearch index {self.index!r} does not exist at {self.url}; run `sdr index` to build it"
            )
        if target.meta is None:
            raise StoreError(
                f"OpenSearch index {target.name!r} was not created by sdr-search (no _meta.sdr in its mapping)"
            )
        return target

    def _writable_target(self) -> _Target:
        target = self._resolve()
        if target is None or target.meta is None:
            raise StoreError(f"OpenSearch index {self.index!r} has no model recorded; call ensure_meta() before put()")
        return target

    @property
    def index_name(self) -> str | None:
        """The concrete document index (None while it does not exist)."""
        target = self._resolve()
        return target.name if target else None

    # =========================================================================================
    # creation and metadata
    # =========================================================================================
    def _cluster_version(self) -> str:
        info = self._call("reading the cluster version", lambda: self._os().info())
        return str(info.get("version", {}).get("number", "unknown"))

    def _use_derived_source(self, cluster_version: str) -> bool:
        mode = self.settings.derived_source
        if mode != "auto":
            return mode == "on"
        try:
            return int(cluster_version.split(".")[0]) >= 3
        except ValueError:
            return False

    def _vector_layout(self) -> str:
        """Where a new index keeps the vectors: only in the k-NN field when the node has the sdr plugin
        (``settings.vector_copy`` 'auto') or when asked ('off'), else also as base64 in ``_source``."""
        mode = self.settings.vector_copy
        if mode == "on":
            return VECTORS_B64
        if mode == "off":
            return VECTORS_INDEX
        return VECTORS_INDEX if self.has_plugin() else VECTORS_B64

    def _create_state_index(self, state: str) -> None:
        from opensearchpy import exceptions as ox

        def create() -> None:
            try:
                self._os().indices.create(index=state, body=build_state_index_body(replicas=self.settings.replicas))
            except ox.RequestError as e:
                if e.error != "resource_already_exists_exception":
                    raise
            try:
                self._os().index(index=state, id=STATE_DOC_ID, body=initial_state(_now()), params={"op_type": "create"})
            except ox.ConflictError:
                pass  # another process (or a retried request) created it first

        self._call("creating the state index", create, index=state)

    def _create(self, meta: IndexMeta) -> None:
        """Create the state index, then the document index with provenance in ``_meta``."""
        from opensearchpy import exceptions as ox

        s = self.settings
        cluster = self._cluster_version()
        derived = self._use_derived_source(cluster)
        versions = {**library_versions(), "opensearch": cluster}
        try:
            versions["opensearch-py"] = importlib_metadata.version("opensearch-py")
        except importlib_metadata.PackageNotFoundError:  # pragma: no cover - a client was passed in
            pass
        hnsw = {"m": s.hnsw_m, "ef_construction": s.hnsw_ef_construction}
        vectors = self._vector_layout()
        recovery = not derived and (s.recovery_source == "without-vectors"
                                    or (s.recovery_source == "auto" and s.replicas == 0))
        body = build_index_body(
            meta.dim, m=s.hnsw_m, ef_construction=s.hnsw_ef_construction, engine=s.engine,
            shards=s.shards, replicas=s.replicas, derived_source=derived, max_sentences=s.max_sentences, meta={},
            recovery_source_excludes=recovery,
        )
        engine, space_type = knn_method(body)
        body["mappings"]["_meta"] = build_meta(meta, versions=versions, hnsw=hnsw, derived_source=derived,
                                               created_at=_now(), engine=engine, space_type=space_type,
                                               vectors=vectors, recovery_source_excludes=recovery)
        body["mappings"]["_meta"]["sdr"]["bm25_k1"] = bm25_k1(body)
        self._create_state_index(state_index_name(self.index))
        def create() -> bool:
            try:
                self._os().indices.create(index=self.index, body=body)
                return True
            except ox.RequestError as e:
                if e.error != "resource_already_exists_exception":
                    raise
                return False  # another process created it first; its meta is compared by the caller

        if not self._call("creating the index", create):
            return
        self._state_checked = True
        logger.info("created OpenSearch index %s (dim %d, %s HNSW M=%d, %s, derived source %s, vectors %s, recovery "
                    "source %s, cluster %s)", self.index, meta.dim, engine, s.hnsw_m, space_type, derived,
                    "once (k-NN field, read through the sdr plugin)" if vectors == VECTORS_INDEX else "with a base64 copy",
                    "without vectors" if recovery else "full", cluster)

    def meta(self) -> IndexMeta | None:
        target = self._resolve()
        return target.meta if target else None

    def ensure_meta(self, meta: IndexMeta) -> IndexMeta:
        with self._lock:
            target = self._resolve()
            if target is None:
                self._create(meta)
                target = self._resolve()
                if target is None:
                    raise StoreError(f"OpenSearch index {self.index!r} could not be created")
            if target.meta is None:
                raise StoreError(
                    f"OpenSearch index {target.name!r} exists but was not created by sdr-search (no _meta.sdr in "
                    "its mapping); choose another index name or delete it"
                )
            stored = target.meta
            if stored.encoder_tag != meta.encoder_tag or int(stored.dim) != int(meta.dim):
                raise ModelMismatchError(
                    f"OpenSearch index {target.name!r} was built with model {stored.model_id} (tag "
                    f"{stored.encoder_tag}, dim {stored.dim}); it cannot be queried with model {meta.model_id} (tag "
                    f"{meta.encoder_tag}, dim {meta.dim}). Use --model {stored.model_id} or re-index into a new index."
                )
            if not self._state_checked:
                exists = bool(self._call("checking the state index",
                                         lambda: self._os().indices.exists(index=target.state), index=target.state))
                if not exists:
                    logger.warning("OpenSearch index %s had no state index; creating %s", target.name, target.state)
                    self._create_state_index(target.state)
                self._state_checked = True
            return stored

    def _count(self, index: str, body: Mapping[str, Any] | None = None) -> int:
        return int(self._call("counting documents", lambda: self._os().count(index=index, body=dict(body) if body else None),
                              index=index)["count"])

    def counts(self) -> dict[str, int]:
        target = self._read_target()
        r = self._call("counting documents", lambda: self._os().search(index=target.name, body=build_counts_query(),
                                                                    params=self._search_params()),
                       index=target.name)
        aggs = r.get("aggregations", {})
        return {
            "documents": int(r["hits"]["total"]["value"]),
            "paragraphs": int(aggs.get("paragraphs", {}).get("value") or 0),
            "sentences": int(aggs.get("sentences", {}).get("value") or 0),
        }

    def cluster_health(self) -> dict[str, Any]:
        """``_cluster/health`` of the cluster and of the store's index (one request, not retried: a health
        check reports what it sees; the transport still tries another node when the first cannot be reached)."""
        target = self._read_target()
        fields = ("status", "number_of_nodes", "number_of_data_nodes", "unassigned_shards", f"indices.{target.name}.status")
        with self._calls("reading the cluster's health", index=target.name):
            r = self._os().cluster.health(params={"level": "indices", "filter_path": ",".join(fields)})
        index = (r.get("indices") or {}).get(target.name) or {}
        return {"status": r.get("status", "unknown"), "nodes": r.get("number_of_nodes"),
                "data_nodes": r.get("number_of_data_nodes"), "unassigned_shards": r.get("unassigned_shards"),
                "index_status": index.get("status")}

    # =========================================================================================
    # writes
    # =========================================================================================
    def _bulk(self, target: _Target, actions: list[dict[str, Any]], keys: Sequence[str], what: str,
              *, accept: Sequence[int] = (), refresh: str | None = None, max_items: int | None = None) -> dict[str, str]:
        """Bulk-write ``actions`` (named ``keys``) with the store's refresh policy, or ``refresh``
        for writes that are only read back by id (real-time) or refreshed explicitly."""
        s = self.settings
        params = {"refresh": refresh or s.refresh}

        def send(body: bytes) -> Mapping[str, Any]:
            return self._call(what, lambda: self._os().bulk(body=body, params=params), index=target.name,
                              retry_overload=False)

        lines = [bulk_lines(a) for a in actions]
        too_big = {keys[i]: f"its _bulk action is {len(b) / 1e6:.1f} MB, over the request limit of "
                            f"{s.max_request_bytes / 1e6:.1f} MB (SDR_OPENSEARCH_MAX_REQUEST_BYTES, the cluster's "
                            "http.max_content_length); split the document or raise both limits"
                   for i, b in enumerate(lines) if len(b) > s.max_request_bytes}
        keep = [i for i in range(len(lines)) if keys[i] not in too_big]
        try:
            results = run_bulk(
                send, [lines[i] for i in keep], [keys[i] for i in keep], what=what,
                max_items=max_items or s.bulk_chunk_docs, max_bytes=min(s.bulk_chunk_bytes, s.max_request_bytes),
                backoff=s.backoff(), accept=accept,
            ) if keep else {}
        except BulkWriteError as e:
            raise BulkWriteError(what, {**too_big, **e.failed}) from e
        except BackendUnavailableError as e:
            if target.engine == "faiss" and "writing documents" in what:
                raise BackendUnavailableError(
                    f"{e}. If the node stopped while building a faiss graph, its k-NN plugin lacks the native "
                    "faiss library (the Maven Central k-NN zip has none): create the index with "
                    "SDR_OPENSEARCH_ENGINE=lucene, or install the full OpenSearch distribution"
                ) from e
            raise
        if too_big:
            raise BulkWriteError(what, too_big)
        return results

    def _mark_stale(self, target: _Target) -> None:
        stale = initial_state(_now())
        stale["state"]["stats"]["stale"] = True
        body = {"doc": {"state": {"stats": {"stale": True}}}, "upsert": stale}
        self._call("marking statistics stale", lambda: self._os().update(
            index=target.state, id=STATE_DOC_ID, body=body, params={"retry_on_conflict": 5}), index=target.state)

    def put(self, items: Sequence[tuple[Document, DocVectors]]) -> None:
        """Insert or replace documents (one ``index`` action each; see the module docstring).

        Raises :class:`BulkWriteError` naming the documents not written (the others are)."""
        items = list(items)
        if not items:
            return
        target = self._writable_target()
        meta = target.recorded
        check_put_items(items, meta, where=f"OpenSearch index {target.name!r}",
                        max_sentences=self.settings.max_sentences)
        if target.legacy_metadata:
            raise self._legacy(target, "written to")
        ids = [doc.id for doc, _ in items]
        actions = build_bulk_actions(items, index=target.name, encoder_tag=meta.encoder_tag, model_id=meta.model_id,
                                     vector_copy=target.vectors == VECTORS_B64)
        # a document written again with the same content keeps its statistics, and alone makes none stale
        stored = self.content_keys(ids)
        changed = [doc.id for doc, _ in items if stored.get(doc.id) != document_key(meta.encoder_tag, doc.paragraphs)]
        if changed:
            self._mark_stale(target)
            self._bulk(target, build_stats_delete_actions(changed, index=target.state), changed,
                       "deleting replaced statistics", accept=(404,), max_items=_SMALL_DOCS_PER_BULK)
        self._bulk(target, actions, ids, "writing documents")

    def delete(self, ids: Sequence[str]) -> int:
        ids = list(dict.fromkeys(str(i) for i in ids))
        if not ids:
            return 0
        target = self._read_target()
        self._bulk(target, build_stats_delete_actions(ids, index=target.state), ids, "deleting statistics", accept=(404,),
                   max_items=_SMALL_DOCS_PER_BULK)
        results = self._bulk(target, build_delete_actions(ids, index=target.name), ids, "deleting documents", accept=(404,))
        deleted = sum(1 for r in results.values() if r == "deleted")
        if deleted:
            self._mark_stale(target)
        return deleted

    # =========================================================================================
    # reads
    # =========================================================================================
    def _vectors_of(self, target: _Target, ids: Sequence[str], what: str) -> dict[str, DocVectors]:
        """``id -> DocVectors`` for the ids that exist, in an index that keeps its vectors only in the
        k-NN field (``_meta.sdr.vectors`` :data:`VECTORS_INDEX`): through the sdr plugin's
        ``sdr_vectors`` fetch (base64 from the index's vector data; one ``_msearch`` of searches of
        :data:`_VECTOR_CHUNK` documents), or, on a node without the plugin, from the vectors that
        derived source rebuilds into ``_source`` (JSON floats: slow)."""
        dim = target.recorded.dim
        unique = list(dict.fromkeys(str(i) for i in ids))
        found: dict[str, DocVectors] = {}
        if not unique:
            return found
        if self.has_plugin():
            return self._plugin_vector_hits(target, unique, what, _VECTOR_CHUNK, parse_vector_hit)
        if not target.derived_source:
            raise self._unreadable(target)
        for doc_id, src in self._mget_sources(target, unique, ["doc_id", "par_sizes", "sentences"], what).items():
            found[doc_id] = self._derived_vectors(src, dim)
        return found

    def _plugin_vector_hits(self, target: _Target, ids: Sequence[str], what: str, chunk: int,
                            parse: Callable[[Mapping[str, Any], int], Any], *, per_hit: int | None = None,
                            values: Mapping[str, int] | None = None, **search: Any) -> dict[str, Any]:
        """``id -> parse(hit, dim)`` for those of the (distinct) ``ids`` that exist, through the sdr
        plugin's ``sdr_vectors`` fetch: ``_msearch`` requests of searches of at most ``chunk`` documents
        (``search``: the options of :func:`build_vectors_search`). Hits are known by their ``doc_id``
        doc values (:func:`hit_doc_id`), so ``fields=()`` reads no stored field at all: parsing each
        hit's whole source, or even decompressing it for its ``_id``, cost more than the plugin's own
        work on long documents.

        Each search, and each request, returns at most ``sdr.limits.max_fetch_values`` float values (a document
        over it alone is a search of its own): ``per_hit`` values per document (a mean vector, centroid rows), or
        each document's sentences x dimension, from ``values`` (id -> sentences) or read first
        (:meth:`_sentence_counts`)."""
        dim = int(target.recorded.dim)
        ids = list(ids)
        asked = set(ids)
        if per_hit is not None:
            weights = {i: per_hit for i in ids}
        else:
            sentences = values if values is not None else self._sentence_counts(target, ids, what)
            weights = {i: int(sentences.get(i, 0)) * dim for i in ids}
        limit = self._plugin_limits().max_fetch_values
        found: dict[str, Any] = {}
        requests: list[list[list[str]]] = []
        total = limit + 1
        for part in pack_by_values(ids, weights, limit, chunk):
            size = sum(weights[i] for i in part)
            if total + size > limit:  # a request of its own: its searches together stay within the limit too
                requests.append([])
                total = 0
            requests[-1].append(part)
            total += size
        for parts in requests:
            body: list[dict[str, Any]] = []
            for part in parts:
                body += [{"index": target.name}, build_vectors_search(part, **search)]
            r = self._call(what, lambda body=body: self._os().msearch(body=body, params=self._search_params()),
                           index=target.name)
            for item in r["responses"]:
                if "error" in item:
                    raise error_from_response(item.get("status", 500), item, what=what, index=target.name)
                for hit in item["hits"]["hits"]:
                    doc_id = hit_doc_id(hit)
                    if doc_id not in asked:
                        raise StoreError(f"{what}: the node returned a hit without a doc_id asked for ({doc_id!r})")
                    found[doc_id] = parse(hit, dim)
        return found

    def _sentence_counts(self, target: _Target, ids: Sequence[str], what: str) -> dict[str, int]:
        """``id -> n_sentences`` (the documents' recorded sentence counts, from doc values) of those ``ids`` that
        exist: what their vectors weigh in a fetch, read before it."""
        counts: dict[str, int] = {}
        for part in _chunks(list(ids), MAX_KNN_K):
            body = build_sentence_counts_search(part)
            counts.update(parse_sentence_counts(self._call(what, lambda body=body: self._os().search(
                index=target.name, body=body, params=self._search_params()), index=target.name)))
        return counts

    def _unreadable(self, target: _Target) -> StoreError:
        return StoreError(
            f"OpenSearch index {target.name!r} keeps its sentence vectors only in the k-NN field, and the node at "
            f"{self.url} has no sdr plugin to read them (SDR_OPENSEARCH_PLUGIN={self.settings.plugin}; sdr plugin: "
            f"{self._plugin_state()}); install the plugin (docs/opensearch.md), or re-index with "
            "SDR_OPENSEARCH_VECTOR_COPY=on")

    @staticmethod
    def _derived_vectors(src: Mapping[str, Any], dim: int) -> DocVectors:
        """A document's vectors from the ``sentences`` that derived source rebuilds (JSON floats)."""
        try:
            rows = sorted(src["sentences"], key=lambda r: int(r["position"]))
            vectors = np.asarray([r["vector"] for r in rows], dtype=np.float32).reshape(-1, dim)
            offsets = _offsets(src["par_sizes"])
        except (KeyError, TypeError, ValueError) as e:
            raise StoreError(f"stored vectors of document {src.get('doc_id')!r} are damaged: {e}") from e
        if vectors.shape[0] != offsets[-1]:
            raise StoreError(f"stored vectors of document {src.get('doc_id')!r} are damaged: {vectors.shape[0]} "
                             f"sentence vectors for {offsets[-1]} sentences")
        return DocVectors(vectors, offsets)

    def _doc_vectors(self, src: Mapping[str, Any], dim: int) -> DocVectors:
        if "vectors_b64" not in src:  # written around the store: the plugin path says the same (sdr_scores)
            raise StoreError(f"stored vectors of document {src.get('doc_id')!r} are missing: its _source has no "
                             "vectors_b64 (the base64 copy)")
        try:
            return DocVectors(decode_vectors_b64(src["vectors_b64"], dim), _offsets(src["par_sizes"]))
        except (KeyError, ValueError) as e:
            raise StoreError(f"stored vectors of document {src.get('doc_id')!r} are damaged: {e}") from e

    def get(self, doc_id: str) -> StoredDocument:
        target = self._read_target()
        docs = build_mget_body([doc_id], {"excludes": ["sentences", "text"]}, index=target.name)["docs"]
        docs.append({"_index": target.state, "_id": stats_os_id(doc_id), "_source": ["stats_mu", "stats_sigma"]})
        main, stats_doc = self._mget("reading a document", {"docs": docs})
        if "error" in main:
            raise error_from_response(404, main, what="reading a document", index=target.name)
        if not main.get("found"):
            raise DocumentNotFoundError(doc_id)
        src = main["_source"]
        document = Document(
            str(src["doc_id"]), _stored_paragraphs(src, doc_id), src.get("title"), src.get("metadata") or {}
        )
        vectors = (self._doc_vectors(src, target.recorded.dim) if target.vectors == VECTORS_B64
                   else self._vectors_of(target, [doc_id], "reading a document").get(doc_id))
        if vectors is None:
            raise DocumentNotFoundError(doc_id)
        stats = None
        if stats_doc.get("found"):
            s = stats_doc["_source"]
            if len(s.get("stats_mu", ())) == vectors.n_paragraphs:
                try:
                    stats = NormStats(np.asarray(s["stats_mu"]), np.asarray(s["stats_sigma"]))
                except (KeyError, ValueError) as e:
                    raise StoreError(f"stored statistics of document {doc_id!r} are damaged: {e}") from e
        elif "error" in stats_doc:
            logger.warning("statistics of %r unreadable: %s", doc_id, stats_doc["error"])
        return StoredDocument(document, vectors, stats)

    def _mget_sources(self, target: _Target, ids: Sequence[str], fields: Sequence[str], what: str) -> dict[str, dict]:
        """``id -> _source`` (filtered to ``fields``) for the ids that exist."""
        found: dict[str, dict] = {}
        for chunk in _chunks(list(dict.fromkeys(ids)), _MGET_CHUNK):
            docs = self._mget(what, build_mget_body(chunk, fields), index=target.name)
            for doc_id, d in zip(chunk, docs):
                if "error" in d:
                    raise error_from_response(404, d, what=what, index=target.name)
                if d.get("found"):
                    found[doc_id] = d["_source"]
        return found

    def content_keys(self, ids: Sequence[str]) -> dict[str, str]:
        target = self._read_target()
        found = self._mget_sources(target, [str(i) for i in ids], ["content_key"], "reading content keys")
        return {doc_id: src["content_key"] for doc_id, src in found.items()}

    def metadata_of(self, ids: Sequence[str]) -> dict[str, Mapping[str, Any]]:
        """Metadata of those ``ids`` that exist, with one ``_mget`` per 500 ids and no vectors
        (what metadata filters need; cheaper than :meth:`get` per document; ``capabilities.metadata_lookup``)."""
        target = self._read_target()
        found = self._mget_sources(target, [str(i) for i in ids], ["metadata"], "reading metadata")
        return {doc_id: src.get("metadata") or {} for doc_id, src in found.items()}

    def documents_of(self, ids: Sequence[str]) -> dict[str, Document]:
        """The documents of those ``ids`` that exist (in the order asked), with one ``_mget`` per
        500 ids and no vectors (``capabilities.metadata_lookup``)."""
        target = self._read_target()
        found = self._mget_sources(target, [str(i) for i in ids], ["doc_id", "title", "metadata", "paragraphs"],
                                   "reading documents")
        return {
            doc_id: Document(str(src.get("doc_id", doc_id)), _stored_paragraphs(src, doc_id),
                             src.get("title"), src.get("metadata") or {})
            for doc_id, src in found.items()
        }

    def _scan(self, target: _Target, source: Sequence[str] | bool, size: int,
              query: Mapping[str, Any] | None = None, ext: Mapping[str, Any] | None = None) -> Iterator[dict[str, Any]]:
        """Every document's hit (or every one ``query`` matches), in ``doc_id`` order, page by page
        (``search_after``), reading one point in time when the cluster offers it."""
        pit_id = self._open_pit(target) if source is not False else None
        try:
            after = None
            while True:
                body = build_scan_query(size=size, source=source, search_after=after, pit_id=pit_id,
                                        keep_alive=self.settings.pit_keep_alive, query=query, ext=ext)
                try:
                    r = self._call("scanning documents", lambda body=body, pit_id=pit_id: self._os().search(
                        body=body, params=self._search_params()) if pit_id else self._os().search(
                        index=target.name, body=body, params=self._search_params()), index=target.name)
                except StoreError as e:
                    if not pit_id or not _pit_lost(e):
                        raise
                    # the node restarted (or the point in time expired): doc_id order and search_after
                    # let the scan go on from the last document it returned in a new point in time
                    logger.warning("scanning %s: point in time lost (%s); reopening it and going on after %r",
                                   target.name, type(e).__name__, after)
                    pit_id = self._open_pit(target)
                    continue
                pit_id = r.get("pit_id", pit_id)
                hits = r["hits"]["hits"]
                yield from hits
                if len(hits) < size:
                    return
                after = hits[-1]["sort"]
        finally:
            if pit_id:
                self._close_pit(pit_id)

    def _open_pit(self, target: _Target) -> str | None:
        from opensearchpy import exceptions as ox

        def open_pit() -> str | None:
            try:
                return self._os().create_pit(index=target.name, params={"keep_alive": self.settings.pit_keep_alive})["pit_id"]
            except ox.TransportError as e:
                if isinstance(e, ox.ConnectionError) or e.status_code not in (400, 403, 404, 405) \
                        or e.error == "index_not_found_exception":
                    raise
                logger.info("point in time unavailable (%s %s); scanning without one", e.status_code, e.error)
                return None

        return self._call("opening a point in time", open_pit, index=target.name)

    def _close_pit(self, pit_id: str) -> None:
        from opensearchpy import exceptions as ox

        try:
            self._os().delete_pit(body={"pit_id": [pit_id]})
        except ox.OpenSearchException as e:  # it expires on its own
            logger.debug("could not delete point in time: %s", e)

    def iter_ids(self) -> Iterator[str]:
        """Document ids in ``doc_id`` order (stable; fetched page by page while iterating)."""
        target = self._read_target()
        return (str(h["fields"]["doc_id"][0]) for h in self._scan(target, False, 10 * self.settings.scan_page_size))

    # =========================================================================================
    # retrieval
    # =========================================================================================
    # -- metadata filters ---------------------------------------------------------------------
    @staticmethod
    def _restriction(flt: Mapping[str, Any] | None, allowed_ids: Sequence[str] | None) -> dict[str, Any] | None:
        """The document-level query of a metadata filter and allowed ids (None: no restriction;
        :data:`MATCH_NONE`: nothing can match). Pure: it checks both (a filter over the limits of
        :func:`sdr_search.core.filters.check_filter`, too many ids) before any request is sent."""
        metadata = build_metadata_filter(flt) if flt else None
        if allowed_ids is not None and len(set(map(str, allowed_ids))) > MAX_ALLOWED_IDS:
            raise InvalidInputError(f"the OpenSearch store takes at most {MAX_ALLOWED_IDS} allowed_ids per search, "
                                    f"got {len(allowed_ids)}; pass the metadata filter itself (filter=)")
        return build_candidate_filter(metadata, allowed_ids)

    @staticmethod
    def _legacy(target: _Target, what: str) -> IndexLayoutError:
        return IndexLayoutError(
            f"OpenSearch index {target.name!r} maps its documents' metadata field by field (made by an sdr-search "
            f"before index layout {FORMAT_VERSION}): it can be read and searched without a filter, but not {what}. "
            "Rebuild it with `sdr reindex` (docs/opensearch.md, 'Metadata')")

    def _filterable(self, target: _Target, flt: Mapping[str, Any] | None) -> None:
        """Refuse a metadata filter on an index of the old metadata mapping (:func:`legacy_metadata`)."""
        if flt and target.legacy_metadata:
            raise self._legacy(target, "filtered by metadata")

    def ids_matching(self, flt: Mapping[str, Any], *, limit: int | None = None) -> list[str]:
        """The ids of every document whose metadata matches ``flt``, in ``doc_id`` order (a
        filtered scan of doc values; one page per 10 x ``scan_page_size`` ids). The filter is the
        one the k-NN search applies (:func:`build_metadata_filter`), on the same typed terms
        :func:`sdr_search.core.filters.matches` compares, so it is equal to it. With ``limit``,
        at most that many: one page of ``limit`` ids when it is under a scan page."""
        query = self._restriction(flt, None)
        target = self._read_target()
        self._filterable(target, flt)
        if query == MATCH_NONE or limit == 0:
            return []
        page = 10 * self.settings.scan_page_size
        hits = self._scan(target, False, page if limit is None else max(1, min(limit, page)), query=query)
        return [str(h["fields"]["doc_id"][0]) for h in itertools.islice(hits, limit)]

    def sentence_knn(
        self, vectors: np.ndarray, k: int, *, exclude_ids: Sequence[str] = (), allowed_ids: Sequence[str] | None = None,
        filter: Mapping[str, Any] | None = None,
    ) -> SentenceHits:
        """Nested k-NN, one ``_msearch`` per ``msearch_batch`` query rows; scores are cosines.

        ``filter`` (a metadata filter) and ``allowed_ids`` (at most :data:`MAX_ALLOWED_IDS`) are
        the k-NN query's own filter: OpenSearch searches only the sentences of the documents they
        match (the k-NN plugin joins a filter on the parent documents' fields down to their
        nested sentences, 2.12+), so a rare filter still gets ``k`` documents per row."""
        if k < 1:
            raise InvalidInputError(f"k must be >= 1, got {k}")
        q = np.atleast_2d(np.asarray(vectors, dtype=np.float32))
        if q.ndim != 2:
            raise InvalidInputError(f"query vectors must be a 2-D array, got shape {np.shape(vectors)}")
        restriction = self._restriction(filter, allowed_ids)
        target = self._read_target()
        self._filterable(target, filter)
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
        ids: list[list[str]] = []
        scores: list[np.ndarray] = []
        for body in build_msearch_bodies(q, k, target.name, exclude_ids=[str(i) for i in exclude_ids],
                                         batch_size=self.settings.msearch_batch, ef_search=self.settings.hnsw_ef_search,
                                         filter=restriction):
            def search(body: list[dict[str, Any]] = body) -> tuple[list[list[str]], list[np.ndarray]]:
                r = self._os().msearch(body=body, params=self._search_params())
                return parse_knn_responses(r["responses"], k=k, index=target.name, space_type=target.space_type)

            batch_ids, batch_scores = self._call("a nested k-NN search", search, index=target.name)
            ids += batch_ids
            scores += batch_scores
        return SentenceHits(ids, scores)

    def _plugin_target(self, what: str) -> _Target:
        target = self._read_target()
        if not self.has_plugin():
            raise StoreError(f"{what} needs the sdr plugin on the node at {self.url} (capabilities: "
                             f"{self._plugin_state()})")
        return target

    def _source_rows(self, target: _Target, rows: np.ndarray, what: str = "query vectors") -> np.ndarray:
        """``rows`` (a source's sentence vectors or paragraph centroids) as float32, refused by name when of
        another dimension than the index's, empty or not finite."""
        q = np.atleast_2d(np.asarray(rows, dtype=np.float32))
        if q.shape[1] != int(target.recorded.dim):
            raise ModelMismatchError(
                f"{what} have dimension {q.shape[1]}, OpenSearch index {target.name!r} holds dimension "
                f"{target.recorded.dim} (model {target.recorded.model_id})")
        if q.shape[0] == 0 or not np.all(np.isfinite(q)):
            raise InvalidInputError(f"{what} must be finite and at least one")
        return q

    def sdr_candidates(
        self, source: DocVectors, k: int, size: int, *, stats: NormStats | None = None,
        aggregation: str = "weighted-sum", exclude_ids: Sequence[str] = (), filter: Mapping[str, Any] | None = None,
    ) -> tuple[list[str], np.ndarray]:
        """The candidate stage on the node in one search (the sdr plugin's ``sdr_candidates`` query;
        :meth:`DocumentStore.sdr_candidates`): per source sentence the top ``k`` documents by their best
        sentence (``settings.candidate_search``: 'sentences', the k-NN of ``k x candidate_oversample``
        sentences with each document kept once, as the embedded store searches; 'documents', the nested
        k-NN query :meth:`sentence_knn` sends), ``ef_search`` ``settings.hnsw_ef_search``, the metadata
        ``filter`` and ``exclude_ids`` as :meth:`sentence_knn` applies them, aggregated per document on
        each shard; the best ``size`` ``(ids, scores)``, best first, ties by id.
        ``capabilities.sdr_candidates``."""
        if k < 1 or k > MAX_KNN_K:
            raise InvalidInputError(f"k must be between 1 and {MAX_KNN_K} on OpenSearch, got {k}")
        if size < 0:
            raise InvalidInputError(f"size must be >= 0, got {size}")
        restriction = self._restriction(filter, None)
        target = self._plugin_target("sdr_candidates")
        self._filterable(target, filter)
        q = self._source_rows(target, source.vectors)
        if restriction == MATCH_NONE or size == 0:
            return [], np.zeros(0, dtype=np.float64)
        search, ef_search = self.settings.candidate_search, self.settings.hnsw_ef_search
        # the plugin takes k x oversample <= 10,000 sentence hits per source sentence
        oversample = max(1, min(self.settings.candidate_oversample, MAX_KNN_K // k))
        limits = self._plugin_limits()
        check_source_limits(limits, q.shape[0], q.shape[1])
        per_sentence = candidate_hits_per_sentence(k, max(ef_search, k), search, oversample)
        if q.shape[0] * per_sentence > limits.max_candidate_hits:
            raise InvalidInputError(
                f"the candidate stage of a source of {q.shape[0]} sentences with k={k} would collect {q.shape[0]} x "
                f"{per_sentence} = {q.shape[0] * per_sentence} hits, more than the {limits.max_candidate_hits} the node's "
                "sdr plugin collects in one request (sdr.limits.max_candidate_hits): ask for fewer candidates")
        body = build_sdr_candidates_query(
            q, np.diff(source.par_offsets), k=k, size=size, ef_search=ef_search,
            aggregation=aggregation, mu=None if stats is None else stats.mu, sigma=None if stats is None else stats.sigma,
            exclude_ids=[str(i) for i in exclude_ids], filter=restriction, search=search, oversample=oversample)
        r = self._call("an sdr candidate search", lambda: self._os().search(index=target.name, body=body,
                                                                             params=self._search_params()),
                       index=target.name)
        ids, scores, _ = parse_sdr_hits(r, index=target.name, what="an sdr candidate search")
        order = sorted(range(len(ids)), key=lambda i: (-scores[i], ids[i]))  # ties by id, as top_of
        return [ids[i] for i in order], scores[order]

    def sdr_scores(
        self, sources: Sequence[tuple[DocVectors, NormStats]], ids: Sequence[str], *, explain: bool = False,
        explain_top: int = 0,
    ) -> SdrScores:
        """Exact SDR on the node (the sdr plugin's rescorer): one ``_msearch`` with one search per
        source over the documents ``ids`` (:meth:`DocumentStore.sdr_scores`). ``capabilities.exact_sdr``.
        Within the node's limits (:meth:`_plugin_limits`): the ids are paged, at most 10,000 per search (the
        rescore window) and, with ``explain``, as many as one search may explain (``sdr.limits.max_explain_pairs``
        over the first source's sentences); ``explain_top`` is narrowed to that many (the engine asks for the
        breakdowns it still lacks with ``explain``); a source over the source limits is an
        :class:`InvalidInputError` naming the limit. The results are the same whatever the pages.
        ``explain_top`` comes back from an index of one shard (the plugin keeps the breakdowns for a
        fetch phase run in the same pass) and one page; once a search shows several shards the store stops asking
        for it, and the hits come back unexplained (the engine then asks with ``explain``).
        A document without any sentence vector in the index raises :class:`StoreError` naming it, as
        :meth:`fetch` does (so the engine fails the same way through either path)."""
        unique = list(dict.fromkeys(str(i) for i in ids))
        if not sources:
            raise InvalidInputError("sdr_scores needs at least one source")
        if explain_top < 0:
            raise InvalidInputError(f"explain_top must be >= 0, got {explain_top}")
        target = self._plugin_target("sdr_scores")
        limits = self._plugin_limits()
        rows = []
        for vectors, stats in sources:
            q = self._source_rows(target, vectors.vectors)
            if len(stats) != vectors.n_paragraphs:
                raise InvalidInputError(f"statistics for {len(stats)} paragraphs, the source has {vectors.n_paragraphs}")
            check_source_limits(limits, q.shape[0], q.shape[1])
            rows.append((q, np.diff(vectors.par_offsets), stats.mu, stats.sigma))
        if not unique:
            return SdrScores([], np.zeros((len(sources), 0), dtype=np.float64), [])
        # The pages: a rescore window holds at most MAX_KNN_K documents (index.max_rescore_window), and a search
        # that explains every hit at most explained_per_search of them (sdr.limits.max_explain_pairs).
        per_search = explained_per_search(limits, rows[0][0].shape[0])
        pages = list(_chunks(unique, min(MAX_KNN_K, per_search) if explain else MAX_KNN_K))
        if target.name in self._many_shards or len(pages) > 1:
            explain_top = 0  # one-shard searches only; and the best of a window can be told in one window only
        # narrowed to what one search may explain: the caller asks for the breakdowns it still lacks (explain=True)
        explain_top = min(explain_top, per_search)
        explained_any = explain or explain_top > 0
        scores = np.full((len(sources), len(unique)), np.nan, dtype=np.float64)
        column = {d: c for c, d in enumerate(unique)}
        explanations: list[Mapping[str, Any] | None] = [None] * len(unique) if explained_any else []
        for page in pages:
            body = build_sdr_scores_msearch(target.name, rows, page, explain=explain, explain_top=explain_top)
            r = self._call("an exact SDR search", lambda body=body: self._os().msearch(body=body, params=self._search_params()),
                           index=target.name)
            if explain_top and any(int(item.get("_shards", {}).get("total", 1)) > 1 for item in r["responses"]):
                self._many_shards.add(target.name)
            for row, item in enumerate(r["responses"]):
                got, values, explained = parse_sdr_hits(item, index=target.name, what="an exact SDR search")
                for doc_id, value, why in zip(got, values, explained):
                    scores[row, column[doc_id]] = value
                    if explained_any and row == 0:
                        explanations[column[doc_id]] = why
        missing = [d for d, c in column.items() if np.isnan(scores[0, c])]
        if missing:
            raise DocumentNotFoundError(missing[0])
        hollow = [d for d, c in column.items() if np.isneginf(scores[0, c])]
        if hollow:  # no sentence vector in the index (written around the store): as fetch says it
            raise StoreError(f"stored vectors of document {hollow[0]!r} are missing: the index holds no sentence "
                             "vector for it")
        return SdrScores(unique, scores, explanations)

    def centroid_rows(self, source_centroids: np.ndarray, ids: Sequence[str]) -> np.ndarray:
        """The centroid pre-rank's rows computed on the node (:meth:`DocumentStore.centroid_rows`): the
        plugin's ``sdr_vectors`` with the source's paragraph centroids, one ``_msearch`` of searches of
        :data:`_VECTOR_CHUNK` documents, a few bytes per document back. ``capabilities.exact_sdr``."""
        target = self._plugin_target("centroid_rows")
        cs = self._source_rows(target, source_centroids, "source centroids")
        ids = [str(i) for i in ids]
        if not ids:
            return np.zeros((cs.shape[0], 0), dtype=np.float32)
        n = cs.shape[0]
        check_source_limits(self._plugin_limits(), n, cs.shape[1], "the source's paragraph centroids")
        found = self._plugin_vector_hits(target, list(dict.fromkeys(ids)), "computing centroid rows", _VECTOR_CHUNK,
                                         lambda hit, dim: parse_centroid_rows_hit(hit, n), per_hit=n, fields=(), centroids=cs)
        for doc_id in ids:
            if doc_id not in found:
                raise DocumentNotFoundError(doc_id)
        return np.stack([found[i] for i in ids], axis=1)

    def candidate_features(self, ids: Sequence[str]) -> CandidateFeatures:
        """Paragraph counts and normalised mean vectors of ``ids`` (in that order): with the sdr
        plugin computed on the node (``sdr_vectors`` with ``mean``: 1.5 kB per document instead of all
        its vectors, one ``_msearch``); without it the interface's default (every vector fetched)."""
        if not self.has_plugin():
            return super().candidate_features(ids)
        target = self._read_target()
        ids = [str(i) for i in ids]
        dim = int(target.recorded.dim)
        if not ids:
            return CandidateFeatures(np.zeros(0, dtype=np.int64), np.zeros((0, dim), dtype=np.float32))
        found = self._plugin_vector_hits(target, list(dict.fromkeys(ids)), "reading mean vectors", _MGET_CHUNK,
                                         parse_mean_hit, per_hit=dim, fields=(), mean=True)
        for doc_id in ids:
            if doc_id not in found:
                raise DocumentNotFoundError(doc_id)
        return CandidateFeatures(np.asarray([found[i][0] for i in ids], dtype=np.int64),
                                 np.stack([found[i][1] for i in ids]).astype(np.float32))

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
        restriction = self._restriction(filter, None) if filter else None
        target = self._read_target()
        self._filterable(target, filter)
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
        chunks = list(_chunks(wanted, _SCORE_IDS_PER_SEARCH))
        scored_bodies = [make(len(c), list(c), ()) for c in chunks]
        if top is None and not scored_bodies:
            return LexicalHits([], np.zeros(0, dtype=np.float32), {})
        r = self._call("a lexical search", lambda: self._os().msearch(
            body=build_lexical_msearch(target.name, top, scored_bodies), params=self._search_params()),
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

    def search_defaults(self) -> dict[str, Any]:
        """The search defaults recorded in the state document (``{}`` when none)."""
        state, _ = self._read_state(self._read_target())
        return dict(state.get("search_defaults") or {})

    def query_state(self, *, reference_version: int | None = None) -> QueryState:
        """Meta (the mapping's, cached with the target), search defaults, statistics info and
        (unless ``reference_version`` is current) the reference sample from one GET of the state
        document, plus the two ``_count``s of the statistics info and the reference's ``_mget``."""
        target = self._read_target()
        state, _ = self._read_state(target)
        return query_state_of(target.meta, state.get("search_defaults"), self._stats_info(target, state),
                              lambda: self._reference(target, state), reference_version)

    def set_search_defaults(self, defaults: Mapping[str, Any]) -> dict[str, Any]:
        """Record the search defaults in the state document (validated; ``{}`` clears them)."""
        checked = check_search_defaults(defaults)
        target = self._read_target()
        body = {"script": {"source": "ctx._source.state.search_defaults = params.d", "lang": "painless",
                           "params": {"d": checked or None}}}
        self._call("recording search defaults", lambda: self._os().update(
            index=target.state, id=STATE_DOC_ID, body=body, params={"retry_on_conflict": 5}), index=target.state)
        return checked

    def fetch(self, ids: Sequence[str]) -> CorpusVectors:
        """Sentence vectors of ``ids`` in that order: from ``vectors_b64`` with ``_mget``, or, in an
        index without that copy, from the k-NN field (:meth:`_vectors_of`)."""
        ids = [str(i) for i in ids]
        if not ids:
            raise InvalidInputError("fetch() needs at least one document id")
        target = self._read_target()
        if target.vectors == VECTORS_B64:
            found = self._mget_sources(target, ids, ["doc_id", "par_sizes", "vectors_b64"], "fetching vectors")
            decoded = {doc_id: self._doc_vectors(src, target.recorded.dim) for doc_id, src in found.items()}
        else:
            decoded = self._vectors_of(target, ids, "fetching vectors")
        for doc_id in ids:
            if doc_id not in decoded:
                raise DocumentNotFoundError(doc_id)
        return CorpusVectors.from_docs(ids, [decoded[i] for i in ids])

    def all_vectors(self) -> CorpusVectors:
        """Every document in ``doc_id`` order (in memory). Raises :class:`StoreError` when empty."""
        target = self._read_target()
        ids: list[str] = []
        docs: list[DocVectors] = []
        dim = target.recorded.dim
        if target.vectors == VECTORS_B64:
            hits = self._scan(target, ["doc_id", "par_sizes", "vectors_b64"], self.settings.scan_page_size)
            read = lambda hit: self._doc_vectors(hit["_source"], dim)  # noqa: E731
        elif self.has_plugin():  # a page of ids and sentence counts, then their vectors within the fetch limit
            page_size = self.settings.scan_page_size
            scanned = self._scan(target, ["doc_id", "n_sentences"], page_size)
            for page in iter(lambda: list(itertools.islice(scanned, page_size)), []):
                page_ids = [str(h["_source"]["doc_id"]) for h in page]
                sentences = {str(h["_source"]["doc_id"]): int(h["_source"].get("n_sentences") or 0) for h in page}
                found = self._plugin_vector_hits(target, page_ids, "reading all vectors", _VECTOR_CHUNK,
                                                 parse_vector_hit, values=sentences)
                for doc_id in page_ids:
                    if doc_id in found:  # one deleted since the page was read is gone
                        ids.append(doc_id)
                        docs.append(found[doc_id])
            if not ids:
                raise StoreError(f"OpenSearch index {target.name!r} has no documents")
            return CorpusVectors.from_docs(ids, docs)
        else:
            if not target.derived_source:
                raise self._unreadable(target)
            hits = self._scan(target, ["doc_id", "par_sizes", "sentences"], self.settings.scan_page_size)
            read = lambda hit: self._derived_vectors(hit["_source"], dim)  # noqa: E731
        for hit in hits:
            ids.append(str(hit["_source"]["doc_id"]))
            docs.append(read(hit))
        if not ids:
            raise StoreError(f"OpenSearch index {target.name!r} has no documents")
        return CorpusVectors.from_docs(ids, docs)

    # =========================================================================================
    # statistics and reference sample
    # =========================================================================================
    def _read_state(self, target: _Target) -> tuple[dict[str, Any], tuple[int, int] | None]:
        """The state document's ``state`` and its ``(seq_no, primary_term)`` (None if missing)."""
        from opensearchpy import exceptions as ox

        def read() -> Mapping[str, Any] | None:
            try:
                return self._os().get(index=target.state, id=STATE_DOC_ID)
            except ox.NotFoundError as e:
                if e.error == "index_not_found_exception":
                    raise
                return None

        r = self._call("reading the store state", read, index=target.state)
        if r is None:
            return initial_state(_now())["state"], None
        return r["_source"]["state"], (int(r["_seq_no"]), int(r["_primary_term"]))

    def stats_info(self) -> StatsInfo:
        target = self._read_target()
        state, _ = self._read_state(target)
        return self._stats_info(target, state)

    def _stats_info(self, target: _Target, state: Mapping[str, Any]) -> StatsInfo:
        """The statistics info of the state document's ``state`` (two ``_count``s)."""
        s = state["stats"]
        documents = self._count(target.name)
        with_stats = self._count(target.state, build_stats_count_query())
        return StatsInfo(
            version=int(s["version"]), mode=s["mode"], sample_size=s["sample_size"], seed=s["seed"],
            stale=bool(s["stale"]), computed_at=s["computed_at"], docs_without_stats=max(0, documents - with_stats),
        )

    def write_stats(
        self, stats: Mapping[str, NormStats], *, mode: str, sample_size: int | None, seed: int | None
    ) -> StatsInfo:
        """One refresh: every document's statistics with version + 1 (state index, bulk).

        Ids no longer stored are skipped (logged; the result stays stale). A statistics length
        that differs from the document's paragraph count raises :class:`InvalidInputError`
        before anything is written. The result is not stale only if every stored document now
        has statistics of this version. One refresh at a time per store.
        """
        target = self._writable_target()
        ids = [str(i) for i in stats]
        n_pars = {d: int(src["n_paragraphs"]) for d, src in
                  self._mget_sources(target, ids, ["n_paragraphs"], "reading paragraph counts").items()}
        for doc_id in ids:
            if doc_id in n_pars and len(stats[doc_id]) != n_pars[doc_id]:
                raise InvalidInputError(
                    f"statistics of document {doc_id!r} have {len(stats[doc_id])} paragraphs, the document has "
                    f"{n_pars[doc_id]}"
                )
        unknown = [d for d in ids if d not in n_pars]
        state, seq = self._read_state(target)
        version = int(state["stats"]["version"]) + 1
        known = {d: stats[d] for d in ids if d in n_pars}
        if known:
            self._bulk(target, build_stats_update_actions(known, version, index=target.state), list(known),
                       "writing statistics", refresh="false", max_items=_SMALL_DOCS_PER_BULK)
        self._call("refreshing the indices", lambda: self._os().indices.refresh(index=f"{target.name},{target.state}"),
                   index=target.name)  # count what was just written
        behind = self._count(target.name) - self._count(target.state, build_stats_count_query(version))
        info = {"version": version, "mode": mode, "sample_size": sample_size, "seed": seed,
                "computed_at": _now(), "stale": bool(behind > 0 or unknown)}
        self._write_stats_state(target, state, seq, info)
        if unknown:
            logger.warning("OpenSearch index %s: statistics for %d unknown documents skipped (e.g. %r); stats stay stale",
                           target.name, len(unknown), unknown[0])
        return self.stats_info()

    def _write_stats_state(self, target: _Target, state: dict[str, Any], seq: tuple[int, int] | None,
                           info: dict[str, Any]) -> None:
        """Replace the state's statistics info, guarded by the state's sequence number; a write that
        happened meanwhile (a put marking stale) makes this refresh stale."""
        from opensearchpy import exceptions as ox

        for _ in range(_STATE_CAS_ATTEMPTS):
            state = {**state, "stats": info}
            params: dict[str, Any] = {"op_type": "create"} if seq is None else {"if_seq_no": seq[0], "if_primary_term": seq[1]}
            def write(state: dict[str, Any] = state, params: dict[str, Any] = params) -> bool:
                try:
                    self._os().index(index=target.state, id=STATE_DOC_ID, body={"kind": "state", "state": state},
                                     params=params)
                    return True
                except ox.ConflictError:
                    return False

            if self._call("writing the store state", write, index=target.state):
                return
            state, seq = self._read_state(target)
            info = {**info, "stale": True}
        raise StoreError(f"the state of OpenSearch index {target.name!r} changed {_STATE_CAS_ATTEMPTS} times during "
                         "one statistics refresh; run it again")

    def reference(self) -> ReferenceParagraphs | None:
        target = self._read_target()
        state, _ = self._read_state(target)
        return self._reference(target, state)

    def _reference(self, target: _Target, state: Mapping[str, Any]) -> ReferenceParagraphs | None:
        """The sample the state document's ``state`` names (``_mget`` of its paragraphs)."""
        header = state.get("reference")
        if not header:
            return None
        generation, n, dim = int(header["generation"]), int(header["paragraphs"]), int(header["dim"])
        rows: list[dict[str, Any]] = []
        fields = ["doc_id", "paragraph_index", "label", "n_sentences", "vectors_b64"]
        for chunk in _chunks(range(n), _MGET_CHUNK):
            body = {"docs": [{"_id": reference_os_id(generation, p), "_source": fields} for p in chunk]}
            docs = self._mget("reading the reference sample", body, index=target.state)
            for p, d in zip(chunk, docs):
                if not d.get("found"):
                    raise StoreError(f"the reference sample of OpenSearch index {target.name!r} lacks paragraph {p}; "
                                     "run `sdr stats` to record a new one")
                rows.append(d["_source"])
        vectors = np.concatenate([decode_vectors_b64(r["vectors_b64"], dim) for r in rows])
        corpus = CorpusVectors(
            tuple(str(r["label"]) for r in rows), vectors, _offsets([int(r["n_sentences"]) for r in rows]),
            np.arange(n + 1, dtype=np.int64),
        )
        return ReferenceParagraphs(
            tuple(str(r["doc_id"]) for r in rows), np.asarray([int(r["paragraph_index"]) for r in rows], dtype=np.int64),
            corpus, int(header["seed"]), int(header["size"]),
        )

    def set_reference(self, reference: ReferenceParagraphs) -> None:
        """Record a new reference sample: its documents under a new generation, then the header,
        then the old generation is deleted (a reader never sees a half-written sample)."""
        cv = reference.vectors
        n = len(reference.doc_ids)
        if np.asarray(reference.paragraph_index).shape != (n,) or cv.n_docs != n:
            raise InvalidInputError("reference sample: doc_ids, paragraph_index and vectors must have one entry per paragraph")
        if not np.array_equal(cv.doc_par_offsets, np.arange(n + 1)):
            raise InvalidInputError("reference sample: each sampled paragraph must be its own document in vectors")
        target = self._writable_target()
        state, _ = self._read_state(target)
        old = state.get("reference")
        generation = int(old["generation"]) + 1 if old else 1
        actions = build_reference_actions(reference, generation, index=target.state)
        self._bulk(target, actions, [a["_id"] for a in actions], "writing the reference sample", refresh="false")
        header = {"generation": generation, "seed": int(reference.seed), "size": int(reference.size),
                  "dim": cv.dim, "paragraphs": n, "at": _now()}
        self._call("writing the store state", lambda: self._os().update(
            index=target.state, id=STATE_DOC_ID, body={"doc": {"state": {"reference": header}}},
            params={"retry_on_conflict": 5}), index=target.state)
        if old:
            stale = build_reference_delete_actions(int(old["generation"]), int(old["paragraphs"]), index=target.state)
            self._bulk(target, stale, [a["_id"] for a in stale], "deleting the previous reference sample",
                       accept=(404,), refresh="false", max_items=_SMALL_DOCS_PER_BULK)

    # =========================================================================================
    # administration and lifecycle
    # =========================================================================================
    def point_alias(self, alias: str) -> None:
        """Point ``alias`` at this store's index, removing it from any other index (atomic)."""
        from opensearchpy import exceptions as ox

        target = self._read_target()
        def move() -> None:
            try:
                current = list(self._os().indices.get_alias(name=alias))
            except ox.NotFoundError:
                current = []
            self._os().indices.update_aliases(body=build_alias_swap(alias, target.name, current))

        self._call("moving an alias", move, index=target.name)

    def drop(self) -> bool:
        """Delete the document index and its state index; False when there was nothing to delete."""
        target = self._resolve()
        name = target.name if target else self.index
        def delete() -> list[str]:
            existing = [i for i in (name, state_index_name(name)) if self._os().indices.exists(index=i)]
            if existing:
                self._os().indices.delete(index=",".join(existing))
            return existing

        existing = self._call("deleting the index", delete, index=name)
        self._target = None
        self._many_shards.clear()
        self._state_checked = False
        self._metadata_fields = None
        return bool(existing)

    def close(self) -> None:
        """Release the client (when this store created it). The store can be used again after."""
        with self._lock:
            if self._client is not None and self._owns_client:
                self._client.close()
                self._client = None
            self._target = None
            self._many_shards.clear()
            self._state_checked = False
            self._metadata_fields = None
            self._plugin = None
            self._plugin_check = None
            self._limits = None

    def __repr__(self) -> str:
        return f"OpenSearchStore({self.url!r}, index={self.index!r})"


def _stored_paragraphs(src: Mapping[str, Any], doc_id: str) -> tuple[tuple[str, ...], ...]:
    """A stored document's paragraphs; :class:`StoreError` naming it when its ``_source`` has none (a
    document written around the store)."""
    try:
        return tuple(tuple(str(s) for s in p) for p in src["paragraphs"])
    except (KeyError, TypeError) as e:
        raise StoreError(f"stored document {doc_id!r} is damaged: its _source has no paragraphs ({e!r})") from e
