"""The store interface that the embedded store and the OpenSearch backend both implement.

A store holds segmented documents with their sentence vectors, per-paragraph normalisation
statistics, a reference sample for sampled statistics, and index metadata (provenance). Retrieval
has *nested* semantics, as OpenSearch nested k-NN: for each query vector the store returns the
top-k **documents**, each scored by its best-matching sentence.

Lexical retrieval (:meth:`DocumentStore.lexical_search`) is BM25 over each document's text
(title and paragraphs), the whole source text as the query: bm25s in the embedded store,
OpenSearch's own BM25 on the ``text`` field there. Hybrid "more like this" fuses it with the
vector signals (:mod:`sdr_search.core.fusion`, :mod:`sdr_search.reranker.engine`).

A query reads everything it needs about the store's state with one call
(:meth:`DocumentStore.query_state`: meta, search defaults, statistics info and the reference
sample, the sample only when the caller's copy is out of date). What a store can do beyond the
required methods is declared in :attr:`DocumentStore.capabilities` (:class:`StoreCapabilities`),
never probed; the checks every ``put()`` makes live in :mod:`sdr_search.indexer.validation`.

Aggregating those per-sentence hits into candidate documents is backend-independent
(:mod:`sdr_search.reranker.candidates`), and so is the exact rerank (:mod:`sdr_search.reranker.engine`), so both stores
give the same ranking.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Iterator, Mapping, Sequence

import numpy as np

from sdr_search.core.scoring import mean_vectors, paragraph_centroids
from sdr_search.core.documents import Document
from sdr_search.core.scoring import NormStats
from sdr_search.core.vectors import CorpusVectors, DocVectors

__all__ = [
    "IndexMeta",
    "StatsInfo",
    "StoredDocument",
    "SentenceHits",
    "LexicalHits",
    "ReferenceParagraphs",
    "QueryState",
    "query_state_of",
    "SdrScores",
    "CandidatePool",
    "CandidateFeatures",
    "StoreCapabilities",
    "DocumentStore",
]


@dataclass(frozen=True)
class IndexMeta:
    """Provenance recorded when an index is created; a query with another encoder is refused."""

    model_id: str
    encoder_tag: str  # SentenceEncoder.cache_tag: model content hash | token cap | precision | pooling
    dim: int
    segmentation: Mapping[str, Any]  # paragraph_unit, splitter source, ...
    versions: Mapping[str, str] = field(default_factory=dict)  # sdr-search, torch, transformers, faiss, ...
    created_at: str = ""
    model_dir: str | None = None  # local model directory; None = the bundled default encoder

    def to_dict(self) -> dict[str, Any]:
        return {
            "model_id": self.model_id,
            "encoder_tag": self.encoder_tag,
            "dim": self.dim,
            "segmentation": dict(self.segmentation),
            "versions": dict(self.versions),
            "created_at": self.created_at,
            "model_dir": self.model_dir,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "IndexMeta":
        return cls(
            d["model_id"], d["encoder_tag"], int(d["dim"]), dict(d["segmentation"]),
            dict(d.get("versions", {})), d.get("created_at", ""), d.get("model_dir"),
        )


@dataclass(frozen=True)
class StatsInfo:
    """State of the normalisation statistics."""

    version: int  # 0 = never computed; +1 at every refresh
    mode: str | None  # "exact" | "sampled" | None
    sample_size: int | None
    seed: int | None
    stale: bool  # documents were added, changed or deleted since the last refresh
    computed_at: str | None
    docs_without_stats: int

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class StoredDocument:
    document: Document
    vectors: DocVectors
    stats: NormStats | None  # per paragraph; None until stats are computed for this document


@dataclass(frozen=True)
class SentenceHits:
    """Nested k-NN results: for query vector ``q``, ``doc_ids[q]`` are up to k documents, best
    first, and ``scores[q]`` their best sentence similarity (cosine)."""

    doc_ids: list[list[str]]
    scores: list[np.ndarray]


@dataclass(frozen=True)
class LexicalHits:
    """Lexical (BM25) results for one source text: the top ``ids`` with their ``scores``, best
    first, and ``scored``: the BM25 score of each document asked for by ``score_ids`` (0.0 for a
    document that shares no indexed term with the source, or is not stored)."""

    ids: list[str]
    scores: np.ndarray  # float32, descending
    scored: dict[str, float] = field(default_factory=dict)

    def score_of(self, doc_id: str) -> float:
        """The BM25 score of ``doc_id`` if this result knows it (top hit or scored), else 0.0."""
        if doc_id in self.scored:
            return self.scored[doc_id]
        try:
            return float(self.scores[self.ids.index(doc_id)])
        except ValueError:
            return 0.0


@dataclass(frozen=True)
class ReferenceParagraphs:
    """The recorded reference sample with its own copy of the vectors (stable under updates)."""

    doc_ids: tuple[str, ...]  # owner of each sampled paragraph
    paragraph_index: np.ndarray  # (R,) paragraph position inside its document
    vectors: CorpusVectors  # each sampled paragraph is its own "document"
    seed: int
    size: int


@dataclass(frozen=True)
class QueryState:
    """Everything a query reads about a store's state, read at once
    (:meth:`DocumentStore.query_state`).

    ``reference`` is the reference sample, or None: either the store has none
    (``reference_current`` False), or the caller's cached copy, recorded at statistics version
    ``reference_version``, is still current and was not read again (``reference_current`` True).
    ``documents``: the stored documents the query asked for with its state (``ids``: its indexed
    sources), those that exist, read with the state (on OpenSearch in the same ``_mget``).
    """

    meta: IndexMeta | None
    search_defaults: dict[str, Any]  # {} when the index records none
    stats: StatsInfo
    reference: ReferenceParagraphs | None
    reference_current: bool = False
    documents: Mapping[str, "StoredDocument"] = field(default_factory=dict)

    @property
    def reference_changed(self) -> bool:
        """Whether the caller must replace its cached reference sample by :attr:`reference`
        (which is None when the store has no sample)."""
        return not self.reference_current


@dataclass(frozen=True)
class CandidatePool:
    """The candidate stage's pool in the store (:meth:`DocumentStore.sdr_candidate_pool`): ``ids`` best
    first, their aggregate ``scores`` (float64), and, when asked for, the centroid pre-rank's rows of
    them (``centroid_rows[i, c]``: source paragraph centroid ``i`` against document ``ids[c]``,
    float32, :meth:`DocumentStore.centroid_rows`; None when not asked for)."""

    ids: list[str]
    scores: np.ndarray
    centroid_rows: np.ndarray | None = None


@dataclass(frozen=True)
class SdrScores:
    """Exact SDR computed by the store (:meth:`DocumentStore.sdr_scores`): ``scores[s, c]`` is
    source ``s``'s SDR score of candidate ``ids[c]`` (float64; ``-inf`` for a document without
    sentence vectors), the same numbers as :func:`sdr_search.core.scoring.sdr_scores` of
    :func:`~sdr_search.core.scoring.document_best` within float32 rounding (tested at 1e-4).
    ``explanations[c]``, when asked for, is the first source's breakdown for candidate ``c``: its best
    candidate paragraph per source paragraph with P_ij, N_ij and the best sentence pairs
    (opensearch-plugin/README.md, "Response"); empty when not asked for, None for a candidate not
    explained (with ``explain_top``: one below the first source's best). ``documents``, when asked for:
    the explained candidates' documents without vectors (as :meth:`DocumentStore.documents_of` reads
    them), read by the same request, by id."""

    ids: list[str]
    scores: np.ndarray
    explanations: list[Mapping[str, Any] | None] = field(default_factory=list)
    documents: Mapping[str, Document] = field(default_factory=dict)


@dataclass(frozen=True)
class CandidateFeatures:
    """Per candidate (in the order asked): its SDR paragraph count and its mean sentence vector,
    normalised (``(n, dim)`` float32; the ``mean`` signal is its cosine with the source's)."""

    n_paragraphs: np.ndarray
    mean_vectors: np.ndarray

    @classmethod
    def of(cls, docs: Sequence[DocVectors]) -> "CandidateFeatures":
        dim = docs[0].vectors.shape[1] if docs else 0
        means = mean_vectors(docs) if docs else np.zeros((0, dim), dtype=np.float32)
        return cls(np.asarray([d.n_paragraphs for d in docs], dtype=np.int64), means)


def query_state_of(
    meta: IndexMeta | None,
    search_defaults: Mapping[str, Any] | None,
    stats: StatsInfo,
    read_reference: Callable[[], ReferenceParagraphs | None],
    reference_version: int | None,
    documents: Mapping[str, "StoredDocument"] | None = None,
) -> QueryState:
    """The :class:`QueryState` of what a store read; ``read_reference`` is only called when the
    caller's copy (statistics version ``reference_version``) is not current."""
    current = reference_version is not None and int(reference_version) == int(stats.version)
    return QueryState(meta, dict(search_defaults or {}), stats, None if current else read_reference(), current,
                      dict(documents or {}))


@dataclass(frozen=True)
class StoreCapabilities:
    """What a store can do beyond the required interface, declared by the store class
    (:attr:`DocumentStore.capabilities`) so callers ask instead of probing. Each flag names the
    method it concerns; without the flag that method has the interface's documented default or
    raises :class:`~sdr_search.core.errors.StoreError`."""

    # metadata_of() and documents_of() read many documents' metadata (documents_of: the whole
    # document) in bulk, without their vectors (without it: the defaults read each document with
    # get(), vectors included)
    metadata_lookup: bool = False
    # refresh_lexical() builds a local lexical index ahead of the first lexical search
    # (without it: the store has nothing to build and refresh_lexical() raises)
    lexical_refresh: bool = False
    # paragraph_centroids() answers without fetching the documents' vectors (kept in memory)
    # (without it: the default computes them from fetch_documents(), so a caller that needs the
    # vectors too should fetch once and compute the centroids itself)
    cheap_centroids: bool = False
    # sentence_knn(..., filter=) and lexical_search(..., filter=) search only the documents a
    # metadata filter matches, sentence_knn(..., allowed_ids=) only those documents, and
    # ids_matching(filter) lists the documents a filter matches (a filter applied inside the
    # candidate stage; without it the engine over-fetches candidates and filters them)
    filtered_knn: bool = False
    # sdr_candidates() runs the whole candidate stage inside the store in one request: a nested
    # k-NN per source sentence and the aggregation of reranker/candidates.py, returning the best
    # documents with their aggregate scores (without it: the engine calls sentence_knn() and
    # aggregates the hits itself). OpenSearch: when the node has the sdr plugin.
    sdr_candidates: bool = False
    # sdr_scores() computes exact SDR next to the data, for any number of sources in one request,
    # so the rerank fetches no vectors (without it: fetch_documents() and the Python rerank, which
    # stays the reference). OpenSearch: when the node has the sdr plugin.
    exact_sdr: bool = False

    def to_dict(self) -> dict[str, bool]:
        return dict(self.__dict__)


class DocumentStore(ABC):
    """Abstract store. Implementations are lazy (nothing opens or connects in ``__init__``
    beyond cheap checks) and must be closed (or used as a context manager).

    Optional features are declared in :attr:`capabilities`, never found by probing for methods.
    """

    capabilities: ClassVar[StoreCapabilities] = StoreCapabilities()

    # -- metadata ------------------------------------------------------------------------------
    @abstractmethod
    def meta(self) -> IndexMeta | None:
        """Index metadata, None for a store with no document yet."""

    @abstractmethod
    def ensure_meta(self, meta: IndexMeta) -> IndexMeta:
        """Record ``meta`` on first use; afterwards raise ``ModelMismatchError`` when ``meta``'s
        encoder_tag or dim differ from the recorded ones. Returns the recorded meta."""

    @abstractmethod
    def counts(self) -> dict[str, int]:
        """``{"documents": .., "paragraphs": .., "sentences": ..}``."""

    # -- documents -----------------------------------------------------------------------------
    @abstractmethod
    def put(self, items: Sequence[tuple[Document, DocVectors]]) -> None:
        """Insert or replace documents. Each document becomes visible completely or not at all.
        Marks statistics stale."""

    @abstractmethod
    def delete(self, ids: Sequence[str]) -> int:
        """Delete documents; returns how many existed. Marks statistics stale."""

    @abstractmethod
    def get(self, doc_id: str) -> StoredDocument:
        """Raises ``DocumentNotFoundError``."""

    @abstractmethod
    def content_keys(self, ids: Sequence[str]) -> dict[str, str]:
        """Stored content key (hash of encoder tag + sentences) for those ids that exist; used to
        skip unchanged documents when an interrupted index run resumes."""

    @abstractmethod
    def iter_ids(self) -> Iterator[str]:
        """All document ids, in a stable order."""

    # -- retrieval -----------------------------------------------------------------------------
    @abstractmethod
    def sentence_knn(
        self, vectors: np.ndarray, k: int, *, exclude_ids: Sequence[str] = (), allowed_ids: Sequence[str] | None = None,
        filter: Mapping[str, Any] | None = None,
    ) -> SentenceHits:
        """Nested k-NN: for each row of ``vectors`` the top-``k`` documents by best sentence.

        A backend may return more than ``k`` when documents tie at the k-th place (the embedded
        store keeps every tied document among its hits), and fewer when a row's nearest sentences
        crowd into fewer documents than ``k`` (the embedded store's single search by default,
        ``SDR_STORE_KNN_ROUNDS``). ``filter`` (a metadata equality filter,
        :func:`sdr_search.core.filters.matches`) and ``allowed_ids`` (only for a store that
        declares ``capabilities.filtered_knn``) restrict the search to the documents the filter
        matches and to those ids (both: the documents in both). A store may bound the number of
        ``allowed_ids`` (OpenSearch: 10,000 per search). A filter's bounds are every store's, checked
        before any work (:func:`sdr_search.core.filters.check_filter`: :class:`InvalidInputError`)."""

    def ids_matching(self, flt: Mapping[str, Any], *, limit: int | None = None) -> list[str]:
        """The ids of every document whose metadata matches the equality filter ``flt``
        (:func:`sdr_search.core.filters.matches`); with ``limit``, at most that many (the first in
        the store's order; the engine asks whether a filter matches few enough documents to rank
        them all). Only for a store that declares ``capabilities.filtered_knn``."""
        from sdr_search.core.errors import StoreError

        raise StoreError(f"{type(self).__name__} cannot filter inside the candidate stage "
                         "(capabilities.filtered_knn is false)")

    def sdr_candidates(
        self, source: DocVectors, k: int, size: int, *, stats: NormStats | None = None,
        aggregation: str = "weighted-sum", exclude_ids: Sequence[str] = (), filter: Mapping[str, Any] | None = None,
    ) -> tuple[list[str], np.ndarray]:
        """SDR's candidate stage in the store, one request: for each sentence of ``source`` the
        nested k-NN top ``k`` documents (as :meth:`sentence_knn` with ``exclude_ids`` and ``filter``),
        aggregated per document as :func:`sdr_search.reranker.candidates.aggregate_hits` does
        (``aggregation``, with ``stats`` the source paragraphs' statistics), and the best ``size`` of
        them: ``(ids, scores)``, best first (float64). Equal to ``top_of(*aggregate_hits(
        sentence_knn(...)), size)`` up to the HNSW search and ties at the cut. Only for a store that
        declares ``capabilities.sdr_candidates``."""
        from sdr_search.core.errors import StoreError

        raise StoreError(f"{type(self).__name__} cannot run the candidate stage itself "
                         "(capabilities.sdr_candidates is false)")

    def sdr_candidate_pool(
        self, source: DocVectors, k: int, size: int, *, centroids: np.ndarray | None = None,
        stats: NormStats | None = None, aggregation: str = "weighted-sum", exclude_ids: Sequence[str] = (),
        filter: Mapping[str, Any] | None = None,
    ) -> CandidatePool:
        """:meth:`sdr_candidates` and, with ``centroids`` (the source's paragraph centroids), the
        :meth:`centroid_rows` of the pool it returns, as one :class:`CandidatePool`. This default makes
        those two calls; a store answers both in one request where it can (OpenSearch: the plugin's
        ``sdr_vectors`` fetch on the candidate search's hits). Only for a store that declares
        ``capabilities.sdr_candidates``."""
        ids, scores = self.sdr_candidates(source, k, size, stats=stats, aggregation=aggregation,
                                          exclude_ids=exclude_ids, filter=filter)
        return CandidatePool(ids, scores, None if centroids is None else self.centroid_rows(centroids, ids))

    def sdr_scores(
        self, sources: Sequence[tuple[DocVectors, NormStats]], ids: Sequence[str], *, explain: bool = False,
        explain_top: int = 0, documents: bool = False,
    ) -> SdrScores:
        """Exact SDR of each of ``sources`` (vectors and their paragraphs' statistics) against the
        documents ``ids``, computed by the store next to its data, in one request (:class:`SdrScores`,
        ids in the order given). ``explain``: the first source's breakdown of every candidate;
        ``explain_top`` (without ``explain``): of its best ``explain_top`` only (the hits a caller will
        present, in the same request); ``documents``: the explained candidates' documents too (what the
        caller presents, without a read of its own). A missing id raises ``DocumentNotFoundError``. Only
        for a store that declares ``capabilities.exact_sdr``."""
        from sdr_search.core.errors import StoreError

        raise StoreError(f"{type(self).__name__} cannot compute exact SDR itself (capabilities.exact_sdr is false)")

    @abstractmethod
    def lexical_search(
        self, text: str, k: int, *, exclude_ids: Sequence[str] = (), score_ids: Sequence[str] = (),
        filter: Mapping[str, Any] | None = None,
    ) -> LexicalHits:
        """BM25 of the whole ``text`` against every stored document's text: the top ``k``
        (``k = 0``: none) without ``exclude_ids``, and the score of every id in ``score_ids``
        (so fusion has a lexical score for vector candidates the lexical top-k missed).
        ``filter`` (only for a store that declares ``capabilities.filtered_knn``) restricts the top
        ``k`` to the documents the metadata filter matches; ``score_ids`` are scored whatever it
        says. Scores do not depend on the filter."""

    @abstractmethod
    def fetch(self, ids: Sequence[str]) -> CorpusVectors:
        """Sentence vectors of ``ids`` (in that order) for the exact rerank."""

    def fetch_documents(self, ids: Sequence[str]) -> list[DocVectors]:
        """The same vectors as :meth:`fetch`, one :class:`DocVectors` per id, for
        :func:`sdr_search.core.scoring.score_documents`. A store may return read-only views of its own
        memory (no copy); this default splits :meth:`fetch`."""
        corpus = self.fetch(ids)
        return [corpus.doc(k) for k in range(corpus.n_docs)]

    def paragraph_centroids(self, ids: Sequence[str]) -> list[np.ndarray]:
        """Each document's paragraph centroids (normalised mean sentence vectors, one
        ``(paragraphs, dim)`` array per id, in order) for the centroid pre-rank
        (:mod:`sdr_search.reranker.prerank`). This default computes them from :meth:`fetch_documents`
        (it reads every vector); a store that keeps them declares ``capabilities.cheap_centroids``
        (the embedded store holds them in memory)."""
        return [paragraph_centroids(doc) for doc in self.fetch_documents(ids)]

    def centroid_rows(self, source_centroids: np.ndarray, ids: Sequence[str]) -> np.ndarray:
        """The centroid pre-rank's rows (:func:`sdr_search.reranker.prerank.centroid_rows`) computed
        next to the data: ``M[i, c]`` = the best cosine of source paragraph centroid ``i``
        (``source_centroids``, ``(n, dim)``) with the paragraph centroids of document ``ids[c]``,
        float32 ``(n, len(ids))``; only for a store that declares ``capabilities.exact_sdr`` (the
        others give the engine their centroids, :meth:`paragraph_centroids`)."""
        from sdr_search.core.errors import StoreError

        raise StoreError(f"{type(self).__name__} cannot compute centroid rows itself (capabilities.exact_sdr is false)")

    def candidate_features(self, ids: Sequence[str]) -> CandidateFeatures:
        """What the exact stage needs of the candidates besides their SDR scores, when the store
        computes those (``capabilities.exact_sdr``): each document's paragraph count and its mean
        sentence vector, normalised (the ``mean`` signal). This default reads every vector
        (:meth:`fetch_documents`); a store that keeps the mean vectors reads them alone."""
        docs = self.fetch_documents(ids)
        return CandidateFeatures.of(docs)

    def metadata_of(self, ids: Sequence[str]) -> dict[str, Mapping[str, Any]]:
        """The metadata of those ``ids`` that exist (a missing id is left out), for metadata
        filters. This default reads each document with :meth:`get` (vectors included); a store
        that reads metadata alone, in bulk, declares ``capabilities.metadata_lookup``."""
        from sdr_search.core.errors import DocumentNotFoundError

        out: dict[str, Mapping[str, Any]] = {}
        for doc_id in ids:
            try:
                out[str(doc_id)] = self.get(str(doc_id)).document.metadata
            except DocumentNotFoundError:
                continue
        return out

    def documents_of(self, ids: Sequence[str]) -> dict[str, Document]:
        """The documents (title, metadata, paragraphs; no vectors) of those ``ids`` that exist (a
        missing id is left out), in the order asked, for presenting results (titles, snippets). A store
        whose searches see writes at a refresh reads them as its searches do (those that found the ids).
        This default reads each document with :meth:`get` (vectors included); a store that reads
        them alone, in bulk, declares ``capabilities.metadata_lookup``."""
        from sdr_search.core.errors import DocumentNotFoundError

        out: dict[str, Document] = {}
        for doc_id in dict.fromkeys(str(i) for i in ids):
            try:
                out[doc_id] = self.get(doc_id).document
            except DocumentNotFoundError:
                continue
        return out

    def refresh_lexical(self) -> int:
        """Build (or load) the store's local lexical index now instead of at the first lexical
        search; returns the number of documents it covers. Only for a store that declares
        ``capabilities.lexical_refresh``; raises :class:`~sdr_search.core.errors.StoreError`
        otherwise (a store whose lexical search needs no local index, such as OpenSearch)."""
        from sdr_search.core.errors import StoreError

        raise StoreError(f"{type(self).__name__} keeps no local lexical index to refresh "
                         "(capabilities.lexical_refresh is false)")

    @abstractmethod
    def all_vectors(self) -> CorpusVectors:
        """The whole corpus (for exhaustive ranking and exact statistics); may be memory-mapped."""

    # -- statistics ----------------------------------------------------------------------------
    @abstractmethod
    def stats_info(self) -> StatsInfo:
        ...

    @abstractmethod
    def write_stats(
        self, stats: Mapping[str, NormStats], *, mode: str, sample_size: int | None, seed: int | None
    ) -> StatsInfo:
        """Store per-paragraph statistics for every document (one refresh: version + 1, not stale)."""

    @abstractmethod
    def reference(self) -> ReferenceParagraphs | None:
        ...

    @abstractmethod
    def set_reference(self, reference: ReferenceParagraphs) -> None:
        ...

    # -- search defaults -----------------------------------------------------------------------
    def search_defaults(self) -> dict[str, Any]:
        """The index's recorded search defaults (``method``, ``fusion``, ``weights``,
        ``rank_constant``; see :func:`sdr_search.core.fusion.check_search_defaults`); ``{}`` when none."""
        return {}

    def set_search_defaults(self, defaults: Mapping[str, Any]) -> dict[str, Any]:
        """Record ``defaults`` (validated; ``{}`` clears them) and return them as recorded."""
        from sdr_search.core.errors import StoreError

        raise StoreError(f"{type(self).__name__} cannot record search defaults")

    # -- one read per query --------------------------------------------------------------------
    def query_state(self, *, reference_version: int | None = None, ids: Sequence[str] = ()) -> QueryState:
        """:meth:`meta`, :meth:`search_defaults`, :meth:`stats_info` and :meth:`reference` in one
        call, for one query, and the documents ``ids`` (:meth:`get`; the query's indexed sources:
        ``documents``, those that exist). When ``reference_version`` equals the statistics version, the
        caller's cached reference sample is current: it is not read (``reference`` None,
        ``reference_current`` True). This default calls those methods; a store overrides it to read
        its state once (one SQLite read transaction; on OpenSearch one ``_mget`` of the state document
        and the documents)."""
        return query_state_of(self.meta(), self.search_defaults(), self.stats_info(), self.reference,
                              reference_version, self.stored_documents(ids))

    def stored_documents(self, ids: Sequence[str]) -> dict[str, StoredDocument]:
        """:meth:`get` of those ``ids`` that exist (the query's sources, document feedback's): this default
        reads each; a store with a round trip per read reads them together (OpenSearch: two requests)."""
        from sdr_search.core.errors import DocumentNotFoundError

        out: dict[str, StoredDocument] = {}
        for doc_id in dict.fromkeys(ids):
            try:
                out[doc_id] = self.get(doc_id)
            except DocumentNotFoundError:
                pass
        return out

    # -- health ---------------------------------------------------------------------------------
    def verify(self, *, thorough: bool = False) -> dict[str, int]:
        """Check that the store can answer and return :meth:`counts`; raise the error that says why
        not (:class:`~sdr_search.core.errors.StoreDamagedError` for damaged files,
        :class:`~sdr_search.core.errors.BackendUnavailableError` for a backend that does not
        answer). ``thorough`` also reads the store's files through (seconds on a large store:
        ``sdr info``, ``sdr serve`` at start); this default only asks for the counts."""
        return self.counts()

    def cluster_health(self, timeout: float | None = None) -> dict[str, Any] | None:
        """The health of the cluster behind the store, for ``/health``: ``status`` (green, yellow: a
        replica unassigned, e.g. a node lost; red: a primary unassigned), ``nodes``, ``data_nodes``,
        ``unassigned_shards``, the store's own index's ``index_status`` and, when some of the nodes it
        was given do not answer within ``timeout`` seconds (a hung process the cluster has not dropped
        yet), ``unanswering_nodes``; None for a store with no cluster behind it (the embedded store).
        Raises as :meth:`verify` when the cluster does not answer."""
        return None

    # -- lifecycle -----------------------------------------------------------------------------
    def close(self) -> None:  # noqa: B027 - pragma: no cover - default no-op
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
