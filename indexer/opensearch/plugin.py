"""The node's sdr plugin as the OpenSearch store uses it: whether the node has it (at the version this
package speaks, :mod:`.plugin_version`), its limits (``sdr.limits.*``), and its calls, paged within
those limits: the ``sdr_candidates`` query (the candidate stage), the ``sdr`` rescorer (exact SDR
and its breakdowns) and the ``sdr_vectors`` fetch (vectors, centroid rows, mean vectors).

Request bodies and the readers of the answers are pure functions in
:mod:`sdr_search.indexer.opensearch.requests.plugin`.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from sdr_search.core.documents import Document
from sdr_search.core.errors import (
    BackendUnavailableError,
    DocumentNotFoundError,
    InvalidInputError,
    ModelMismatchError,
    StoreError,
)
from sdr_search.core.scoring import NormStats
from sdr_search.core.vectors import DocVectors
from sdr_search.indexer.store import CandidateFeatures, CandidatePool, SdrScores, SentenceHits

from . import plugin_version
from .indices import Indices, Target
from .requests import (
    MATCH_NONE,
    MAX_KNN_K,
    PRESENTED_FIELDS,
    PluginLimits,
    build_restriction,
    build_sdr_candidates_query,
    build_sdr_scores_msearch,
    build_sentence_counts_search,
    build_sentence_hits_msearch,
    build_vectors_search,
    candidate_hits_per_sentence,
    check_source_limits,
    explained_per_search,
    hit_doc_id,
    pack_by_values,
    parse_centroid_rows_hit,
    parse_mean_hit,
    parse_plugin_limits,
    parse_presented_document,
    parse_sdr_hits,
    parse_sdr_sources,
    parse_sentence_counts,
    parse_vector_hit,
)
from .settings import OpenSearchSettings
from .transport import Transport, chunks

__all__ = ["SdrPlugin"]

logger = logging.getLogger(__name__)

_VECTOR_CHUNK = 100  # documents per search of the plugin's vector fetch (~400 kB of base64 each at 200 x 384)
_MEAN_CHUNK = 500  # documents per search of the plugin's mean vectors (1.5 kB each)


def _source_rows(target: Target, rows: np.ndarray, what: str = "query vectors") -> np.ndarray:
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


class SdrPlugin:
    """The sdr plugin of the node behind ``transport``, for the store's target (``indices``)."""

    def __init__(self, transport: Transport, indices: Indices, settings: OpenSearchSettings) -> None:
        self._transport = transport
        self._indices = indices
        self.settings = settings
        self._plugin: bool | None = None  # the node has the sdr plugin (None: not asked yet)
        self._check: plugin_version.PluginCheck | None = None  # what its plugin list said
        self._limits: PluginLimits | None = None  # the plugin's sdr.limits.* (None: not read yet)
        self.many_shards: set[str] = set()  # indices whose searches span several shards (no explain_top there)
        self.shard_counts: dict[str, int] = {}  # primary shards of each index read (one_shard)

    def reset(self) -> None:
        """Ask the node again next time (the store closed)."""
        self._plugin = None
        self._check = None
        self._limits = None
        self.many_shards.clear()
        self.shard_counts.clear()

    def one_shard(self) -> bool:
        """Whether the index has one primary shard (read once per index, until :meth:`reset`; an index not
        created yet, or a node not answering now: ``settings.shards``, asked again next time). ``sdr_candidates``
        cuts each source sentence's hits to the top ``k`` on each shard before aggregating, so over several
        shards a document gets the rows it is in the top ``k`` of on its own shard, not in the index: its
        aggregate, and the pool, would depend on the shard count. An index of several shards runs the
        candidate stage as :meth:`sentence_hits` instead (one search per source sentence, merged by the
        coordinator into the index's top ``k``), aggregated by the engine (docs/opensearch.md, "Writes,
        retries, shards")."""
        try:
            target = self._indices.resolve()
            if target is None or target.meta is None:
                return self.settings.shards == 1
            n = self.shard_counts.get(target.name)
            if n is None:
                r = self._transport.call("reading the index's shard count", lambda: self._transport.os().indices.get_settings(
                    index=target.name, name="index.number_of_shards"), index=target.name)
                n = self.shard_counts[target.name] = int(r[target.name]["settings"]["index"]["number_of_shards"])
        except (StoreError, BackendUnavailableError):
            return self.settings.shards == 1
        return n == 1

    def sentence_hits(self, target: Target, q: np.ndarray, k: int, exclude: list[str],
                      restriction: Mapping[str, Any] | None) -> SentenceHits:
        """:meth:`OpenSearchStore.sentence_knn` through the plugin, with ``sdr_candidates``'s search
        (``settings.candidate_search`` 'sentences': the k-NN of ``k x candidate_oversample`` sentences, each
        document once, the first ``k``): one search per row (:func:`build_sentence_hits_msearch`),
        ``msearch_batch`` rows per ``_msearch``. The candidate stage of an index of several shards
        (:meth:`one_shard`): each row's hits are the index's top ``k``, as a one-shard ``sdr_candidates``
        counts them."""
        oversample = max(1, min(self.settings.candidate_oversample, MAX_KNN_K // k))
        ef_search = self.settings.hnsw_ef_search
        limits = self.limits()
        check_source_limits(limits, 1, q.shape[1], "a query vector")
        per_sentence = candidate_hits_per_sentence(k, max(ef_search, k), "sentences", oversample)
        if per_sentence > limits.max_candidate_hits:
            raise InvalidInputError(f"k={k} collects {per_sentence} hits per query vector, more than the "
                                    f"{limits.max_candidate_hits} of sdr.limits.max_candidate_hits")
        ids: list[list[str]] = []
        scores: list[np.ndarray] = []
        step = max(1, self.settings.msearch_batch)
        for start in range(0, q.shape[0], step):
            body = build_sentence_hits_msearch(target.name, q[start:start + step], k=k, ef_search=ef_search,
                                               oversample=oversample, exclude_ids=exclude, filter=restriction)
            r = self._transport.msearch_body("a sentence k-NN search", body, index=target.name)
            for item in r["responses"]:
                got, values, _ = parse_sdr_hits(item, index=target.name, what="a sentence k-NN search")
                order = sorted(range(len(got)), key=lambda i: (-values[i], got[i]))[:k]  # ties by id
                ids.append([got[i] for i in order])
                scores.append(np.asarray([values[i] for i in order], dtype=np.float32))
        return SentenceHits(ids, scores)

    @property
    def url(self) -> str:
        return self._transport.url

    def available(self) -> bool:
        """Whether this store uses the node's sdr plugin: ``settings.plugin`` 'off' never, 'on' always
        (:class:`StoreError` when the node lacks it or has another version), 'auto' when the node lists it
        at the version this package speaks (:mod:`.plugin_version`; another version: the Python path, and
        one warning per process naming both). Asked once per store (until :meth:`reset`); a node that
        cannot be reached is asked again next time."""
        mode = self.settings.plugin
        if mode == "off":
            return False
        known = self._plugin
        if known is None:
            try:
                plugins = self._transport.call("listing the node's plugins", lambda: self._transport.os().cat.plugins(
                    params={"format": "json", "h": "component,version"}))
            except BackendUnavailableError as e:
                logger.debug("could not list the plugins of %s: %s", self.url, e)
                if mode == "on":
                    raise
                return False
            check = plugin_version.check_plugins(plugins)
            self._check = check
            known = self._plugin = check.state == "ok"
            if check.state == "absent":
                plugin_version.log_once(
                    logger, logging.INFO, (self.url, "absent"), "OpenSearch at %s has no sdr plugin: candidates and "
                    "exact SDR run in Python (opensearch-plugin/README.md installs it)", self.url)
            elif check.state == "mismatch" and mode != "on":
                plugin_version.log_once(logger, logging.WARNING, (self.url, "mismatch", *check.versions),
                                        "%s", plugin_version.mismatch_message(self.url, check.versions, mode))
        if mode == "on" and not known:
            check = self._check
            if check is not None and check.state == "mismatch":
                raise StoreError(plugin_version.mismatch_message(self.url, check.versions, mode))
            raise StoreError(f"SDR_OPENSEARCH_PLUGIN=on but OpenSearch at {self.url} has no sdr plugin; install "
                             "opensearch-plugin/ (docs/opensearch.md) or set SDR_OPENSEARCH_PLUGIN=auto")
        return known

    def describe(self) -> str:
        """'plugin off', 'not installed' or 'version X, not Y' (for messages)."""
        if self.settings.plugin == "off":
            return "plugin off"
        check = self._check
        if check is not None and check.state == "mismatch":
            return f"version {', '.join(check.versions)}, not {plugin_version.PLUGIN_VERSION}"
        return "not installed"

    def limits(self) -> PluginLimits:
        """The node's ``sdr.limits.*`` (``GET _cluster/settings?include_defaults=true``), read once per store (until
        :meth:`reset`); the plugin's documented defaults where the node does not list them. A cluster whose
        settings cannot be read (a user without the cluster monitor privilege) gets the defaults, logged once."""
        limits = self._limits
        if limits is None:
            from opensearchpy import exceptions as ox

            def read() -> Mapping[str, Any] | None:
                try:
                    return self._transport.os().cluster.get_settings(params={"include_defaults": "true",
                                                                             "flat_settings": "true"})
                except ox.AuthorizationException as e:
                    plugin_version.log_once(logger, logging.WARNING, (self.url, "limits"), "cannot read the cluster "
                                            "settings of %s (%s): the sdr plugin's default limits are assumed", self.url, e)
                    return None

            limits = self._limits = parse_plugin_limits(self._transport.call("reading the sdr plugin's limits", read))
        return limits

    def unreadable(self, target: Target) -> StoreError:
        """The error of a read of vectors kept only in the k-NN field, on a node without the plugin."""
        return StoreError(
            f"OpenSearch index {target.name!r} keeps its sentence vectors only in the k-NN field, and the node at "
            f"{self.url} has no sdr plugin to read them (SDR_OPENSEARCH_PLUGIN={self.settings.plugin}; sdr plugin: "
            f"{self.describe()}); install the plugin (docs/opensearch.md), or re-index with "
            "SDR_OPENSEARCH_VECTOR_COPY=on")

    def _target(self, what: str) -> Target:
        target = self._indices.read()
        if not self.available():
            raise StoreError(f"{what} needs the sdr plugin on the node at {self.url} (capabilities: "
                             f"{self.describe()})")
        return target

    # -- the sdr_vectors fetch --------------------------------------------------------------------
    def vectors(self, target: Target, ids: Sequence[str], what: str, *,
                values: Mapping[str, int] | None = None) -> dict[str, DocVectors]:
        """``id -> DocVectors`` for those of the (distinct) ``ids`` that exist (:meth:`vector_hits`, searches of
        :data:`_VECTOR_CHUNK` documents; ``values``: their sentence counts when known)."""
        return self.vector_hits(target, ids, what, _VECTOR_CHUNK, parse_vector_hit, values=values)

    def vector_hits(self, target: Target, ids: Sequence[str], what: str, chunk: int,
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
        limit = self.limits().max_fetch_values
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
            searches = [(target.name, build_vectors_search(part, **search)) for part in parts]
            for item in self._transport.msearch(what, searches):
                for hit in item["hits"]["hits"]:
                    doc_id = hit_doc_id(hit)
                    if doc_id not in asked:
                        raise StoreError(f"{what}: the node returned a hit without a doc_id asked for ({doc_id!r})")
                    found[doc_id] = parse(hit, dim)
        return found

    def _sentence_counts(self, target: Target, ids: Sequence[str], what: str) -> dict[str, int]:
        """``id -> n_sentences`` (the documents' recorded sentence counts, from doc values) of those ``ids`` that
        exist: what their vectors weigh in a fetch, read before it."""
        counts: dict[str, int] = {}
        for part in chunks(list(ids), MAX_KNN_K):
            body = build_sentence_counts_search(part)
            counts.update(parse_sentence_counts(self._transport.call(what, lambda body=body: self._transport.os().search(
                index=target.name, body=body, params=self._transport.search_params()), index=target.name)))
        return counts

    # -- the calls the engine makes ---------------------------------------------------------------
    def sdr_candidates(
        self, source: DocVectors, k: int, size: int, *, stats: NormStats | None = None,
        aggregation: str = "weighted-sum", exclude_ids: Sequence[str] = (), filter: Mapping[str, Any] | None = None,
    ) -> tuple[list[str], np.ndarray]:
        """:meth:`sdr_candidate_pool` without centroid rows."""
        pool = self.sdr_candidate_pool(source, k, size, stats=stats, aggregation=aggregation, exclude_ids=exclude_ids,
                                       filter=filter)
        return pool.ids, pool.scores

    def sdr_candidate_pool(
        self, source: DocVectors, k: int, size: int, *, centroids: np.ndarray | None = None,
        stats: NormStats | None = None, aggregation: str = "weighted-sum", exclude_ids: Sequence[str] = (),
        filter: Mapping[str, Any] | None = None,
    ) -> CandidatePool:
        """The candidate stage on the node in one search (the sdr plugin's ``sdr_candidates`` query;
        :meth:`DocumentStore.sdr_candidates`): per source sentence the top ``k`` documents by their best
        sentence (``settings.candidate_search``: 'sentences', the k-NN of ``k x candidate_oversample``
        sentences with each document kept once, as the embedded store searches; 'documents', the nested
        k-NN query :meth:`OpenSearchStore.sentence_knn` sends), ``ef_search`` ``settings.hnsw_ef_search``, the
        metadata ``filter`` and ``exclude_ids`` as ``sentence_knn`` applies them, aggregated per document on
        each shard; the best ``size`` ``(ids, scores)``, best first, ties by id.
        ``capabilities.sdr_candidates``. With ``centroids`` (the source's paragraph centroids) each hit also
        brings its centroid rows (:meth:`centroid_rows`) from the same search (the ``sdr_vectors`` fetch on its
        hits): the pre-rank costs no request of its own; where ``size`` x the centroids' rows pass
        ``sdr.limits.max_fetch_values`` they are read apart, as :meth:`centroid_rows` pages them."""
        if k < 1 or k > MAX_KNN_K:
            raise InvalidInputError(f"k must be between 1 and {MAX_KNN_K} on OpenSearch, got {k}")
        if size < 0:
            raise InvalidInputError(f"size must be >= 0, got {size}")
        restriction = build_restriction(filter, None)
        target = self._target("sdr_candidates")
        target.filterable(filter)
        q = _source_rows(target, source.vectors)
        cs = None if centroids is None else _source_rows(target, centroids, "source centroids")
        if restriction == MATCH_NONE or size == 0:
            return CandidatePool([], np.zeros(0, dtype=np.float64),
                                 None if cs is None else np.zeros((cs.shape[0], 0), dtype=np.float32))
        search, ef_search = self.settings.candidate_search, self.settings.hnsw_ef_search
        # the plugin takes k x oversample <= 10,000 sentence hits per source sentence
        oversample = max(1, min(self.settings.candidate_oversample, MAX_KNN_K // k))
        limits = self.limits()
        check_source_limits(limits, q.shape[0], q.shape[1])
        if cs is not None:
            check_source_limits(limits, cs.shape[0], cs.shape[1], "the source's paragraph centroids")
        # the rows in the same search while its hits' rows stay within one fetch's limit, else read apart
        folded = cs is not None and size * cs.shape[0] <= limits.max_fetch_values
        per_sentence = candidate_hits_per_sentence(k, max(ef_search, k), search, oversample)
        if q.shape[0] * per_sentence > limits.max_candidate_hits:
            raise InvalidInputError(
                f"the candidate stage of a source of {q.shape[0]} sentences with k={k} would collect {q.shape[0]} x "
                f"{per_sentence} = {q.shape[0] * per_sentence} hits, more than the {limits.max_candidate_hits} the node's "
                "sdr plugin collects in one request (sdr.limits.max_candidate_hits): ask for fewer candidates")
        body = build_sdr_candidates_query(
            q, np.diff(source.par_offsets), k=k, size=size, ef_search=ef_search,
            aggregation=aggregation, mu=None if stats is None else stats.mu, sigma=None if stats is None else stats.sigma,
            exclude_ids=[str(i) for i in exclude_ids], filter=restriction, search=search, oversample=oversample,
            centroids=cs if folded else None)
        r = self._transport.call("an sdr candidate search", lambda: self._transport.os().search(
            index=target.name, body=body, params=self._transport.search_params()), index=target.name)
        ids, scores, _ = parse_sdr_hits(r, index=target.name, what="an sdr candidate search")
        order = sorted(range(len(ids)), key=lambda i: (-scores[i], ids[i]))  # ties by id, as top_of
        ranked = [ids[i] for i in order]
        rows = None
        if folded and cs is not None:
            hits = r.get("hits", {}).get("hits", [])
            rows = np.stack([parse_centroid_rows_hit(hits[i], cs.shape[0]) for i in order], axis=1) if order \
                else np.zeros((cs.shape[0], 0), dtype=np.float32)
        elif cs is not None:
            rows = self.centroid_rows(cs, ranked)
        return CandidatePool(ranked, scores[order], rows)

    def sdr_scores(
        self, sources: Sequence[tuple[DocVectors, NormStats]], ids: Sequence[str], *, explain: bool = False,
        explain_top: int = 0, documents: bool = False,
    ) -> SdrScores:
        """Exact SDR on the node (the sdr plugin's rescorer): one ``_msearch`` with one search per
        source over the documents ``ids`` (:meth:`DocumentStore.sdr_scores`). ``capabilities.exact_sdr``.
        Within the node's limits (:meth:`limits`): the ids are paged, at most 10,000 per search (the
        rescore window) and, with ``explain``, as many as one search may explain (``sdr.limits.max_explain_pairs``
        over the first source's sentences); ``explain_top`` is narrowed to that many (the engine asks for the
        breakdowns it still lacks with ``explain``); with ``documents`` the explained hits come with their
        documents (``explain_source``: their ``_source`` filtered to what ``documents_of`` reads, from the
        fetch of the same search); a source over the source limits is an
        :class:`InvalidInputError` naming the limit. The results are the same whatever the pages.
        ``explain_top`` comes back from an index of one shard (the plugin keeps the breakdowns for a
        fetch phase run in the same pass) and one page; once a search shows several shards the store stops asking
        for it, and the hits come back unexplained (the engine then asks with ``explain``).
        A document without any sentence vector in the index raises :class:`StoreError` naming it, as
        :meth:`OpenSearchStore.fetch` does (so the engine fails the same way through either path)."""
        unique = list(dict.fromkeys(str(i) for i in ids))
        if not sources:
            raise InvalidInputError("sdr_scores needs at least one source")
        if explain_top < 0:
            raise InvalidInputError(f"explain_top must be >= 0, got {explain_top}")
        target = self._target("sdr_scores")
        limits = self.limits()
        rows = []
        for vectors, stats in sources:
            q = _source_rows(target, vectors.vectors)
            if len(stats) != vectors.n_paragraphs:
                raise InvalidInputError(f"statistics for {len(stats)} paragraphs, the source has {vectors.n_paragraphs}")
            check_source_limits(limits, q.shape[0], q.shape[1])
            rows.append((q, np.diff(vectors.par_offsets), stats.mu, stats.sigma))
        if not unique:
            return SdrScores([], np.zeros((len(sources), 0), dtype=np.float64), [])
        # The pages: a rescore window holds at most MAX_KNN_K documents (index.max_rescore_window), and a search
        # that explains every hit at most explained_per_search of them (sdr.limits.max_explain_pairs).
        per_search = explained_per_search(limits, rows[0][0].shape[0])
        pages = list(chunks(unique, min(MAX_KNN_K, per_search) if explain else MAX_KNN_K))
        if target.name in self.many_shards or len(pages) > 1:
            explain_top = 0  # one-shard searches only; and the best of a window can be told in one window only
        # narrowed to what one search may explain: the caller asks for the breakdowns it still lacks (explain=True)
        explain_top = min(explain_top, per_search)
        explained_any = explain or explain_top > 0
        scores = np.full((len(sources), len(unique)), np.nan, dtype=np.float64)
        column = {d: c for c, d in enumerate(unique)}
        explanations: list[Mapping[str, Any] | None] = [None] * len(unique) if explained_any else []
        presented: dict[str, Document] = {}
        fields = PRESENTED_FIELDS if documents and explained_any else ()
        for page in pages:
            body = build_sdr_scores_msearch(target.name, rows, page, explain=explain, explain_top=explain_top,
                                            explain_source=fields)
            r = self._transport.msearch_body("an exact SDR search", body, index=target.name)
            if explain_top and any(int(item.get("_shards", {}).get("total", 1)) > 1 for item in r["responses"]):
                self.many_shards.add(target.name)
            for row, item in enumerate(r["responses"]):
                got, values, explained = parse_sdr_hits(item, index=target.name, what="an exact SDR search")
                for doc_id, value, why in zip(got, values, explained):
                    scores[row, column[doc_id]] = value
                    if explained_any and row == 0:
                        explanations[column[doc_id]] = why
                if fields and row == 0:
                    presented.update((i, parse_presented_document(src, i)) for i, src in parse_sdr_sources(item).items())
        missing = [d for d, c in column.items() if np.isnan(scores[0, c])]
        if missing:
            raise DocumentNotFoundError(missing[0])
        hollow = [d for d, c in column.items() if np.isneginf(scores[0, c])]
        if hollow:  # no sentence vector in the index (written around the store): as fetch says it
            raise StoreError(f"stored vectors of document {hollow[0]!r} are missing: the index holds no sentence "
                             "vector for it")
        return SdrScores(unique, scores, explanations, presented)

    def centroid_rows(self, source_centroids: np.ndarray, ids: Sequence[str]) -> np.ndarray:
        """The centroid pre-rank's rows computed on the node (:meth:`DocumentStore.centroid_rows`): the
        plugin's ``sdr_vectors`` with the source's paragraph centroids, one ``_msearch`` of searches of
        :data:`_VECTOR_CHUNK` documents, a few bytes per document back. ``capabilities.exact_sdr``."""
        target = self._target("centroid_rows")
        cs = _source_rows(target, source_centroids, "source centroids")
        ids = [str(i) for i in ids]
        if not ids:
            return np.zeros((cs.shape[0], 0), dtype=np.float32)
        n = cs.shape[0]
        check_source_limits(self.limits(), n, cs.shape[1], "the source's paragraph centroids")
        found = self.vector_hits(target, list(dict.fromkeys(ids)), "computing centroid rows", _VECTOR_CHUNK,
                                 lambda hit, dim: parse_centroid_rows_hit(hit, n), per_hit=n, fields=(), centroids=cs)
        for doc_id in ids:
            if doc_id not in found:
                raise DocumentNotFoundError(doc_id)
        return np.stack([found[i] for i in ids], axis=1)

    def candidate_features(self, ids: Sequence[str]) -> CandidateFeatures:
        """Paragraph counts and normalised mean vectors of ``ids`` (in that order) computed on the node
        (``sdr_vectors`` with ``mean``: 1.5 kB per document instead of all its vectors, one ``_msearch``)."""
        target = self._indices.read()
        ids = [str(i) for i in ids]
        dim = int(target.recorded.dim)
        if not ids:
            return CandidateFeatures(np.zeros(0, dtype=np.int64), np.zeros((0, dim), dtype=np.float32))
        found = self.vector_hits(target, list(dict.fromkeys(ids)), "reading mean vectors", _MEAN_CHUNK,
                                 parse_mean_hit, per_hit=dim, fields=(), mean=True)
        for doc_id in ids:
            if doc_id not in found:
                raise DocumentNotFoundError(doc_id)
        return CandidateFeatures(np.asarray([found[i][0] for i in ids], dtype=np.int64),
                                 np.stack([found[i][1] for i in ids]).astype(np.float32))
