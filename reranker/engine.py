"""Two-stage "more like this": nested sentence k-NN candidates, then the exact SDR rerank; or
hybrid: lexical candidates too, and the signals fused.

Works over any :class:`sdr_search.indexer.store.DocumentStore`. The source is an indexed document (its
stored vectors and precomputed per-paragraph statistics) or new text (encoded now, normalised
against the store's recorded reference sample). Candidates come from :mod:`sdr_search.indexer.candidates`,
narrowed from ``SDR_PRERANK_FACTOR x K`` to K by the centroid pre-rank (:mod:`sdr_search.indexer.prerank`);
the top K are scored exactly (:func:`sdr_search.core.scoring.score_documents`, over the store's
:meth:`~sdr_search.indexer.store.DocumentStore.fetch_documents`: memory-map views in the embedded store) with
the source's statistics, which never depend on the candidates.

Methods:

- ``sdr``: the K vector candidates ranked by exact SDR.
- ``hybrid``: the K vector candidates united with the lexical top K (BM25 of the whole source
  text, :meth:`DocumentStore.lexical_search`), so a document only one side finds can still win.
  Every document of the union gets all three signals: its exact SDR score, the cosine of the mean
  sentence vectors (from the vectors fetched for SDR), and its BM25 score (the lexical search also
  scores the vector candidates it did not return). The signals are fused per query
  (:func:`sdr_search.core.fusion.fuse`: z-score or min-max normalisation and a weighted mean, or RRF).

Which method and fusion: a request's own values, else the index's recorded search defaults
(:meth:`DocumentStore.search_defaults`), else :class:`MLTSettings` (environment), else
:data:`sdr_search.core.fusion.DEFAULT_HYBRID`.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping, Sequence

import numpy as np
from pydantic import Field
from pydantic_settings import SettingsConfigDict

from sdr_search.indexer.candidates import AGGREGATIONS, aggregate_hits
from sdr_search.indexer.prerank import prerank_order
from sdr_search.indexer.store import DocumentStore
from sdr_search.core.documents import Document, parse_record
from sdr_search.core.encoder import SentenceEncoder
from sdr_search.core.errors import InvalidInputError, ModelMismatchError, StatsUnavailableError
from sdr_search.core.fusion import METHODS, SIGNALS, HybridSpec, fuse
from sdr_search.core.scoring import NormStats, paragraph_scores, rank, score_documents, top_of
from sdr_search.core.settings import HybridSettings, SegmentationSettings
from sdr_search.core.stats import SampledParagraphs, stats_against_sample
from sdr_search.core.vectors import CorpusVectors, DocVectors

__all__ = ["METHODS", "MLTSettings", "Source", "Hit", "MLTResult", "MoreLikeThis", "mean_cosines"]

logger = logging.getLogger(__name__)


class MLTSettings(HybridSettings):
    """Query-time settings of the engine (env prefix ``SDR_``), with the hybrid fusion settings of
    :class:`sdr_search.core.settings.HybridSettings` (``SDR_FUSION``, ``SDR_HYBRID_WEIGHTS``,
    ``SDR_RRF_RANK_CONSTANT``)."""

    model_config = SettingsConfigDict(env_prefix="SDR_", extra="ignore")

    method: Literal["sdr", "hybrid"] = Field(
        "hybrid",
        description="Default ranking method: 'hybrid' (lexical and vector candidates, BM25/SDR/mean fused; see "
        "SDR_FUSION, SDR_HYBRID_WEIGHTS) or 'sdr' (vector candidates, exact SDR only). 'hybrid' because it keeps "
        "BM25 in the ranking as a guard against a weak encoder; SDR alone depends more on the encoder and the "
        "paragraph units (README 'Which default', bench/hybrid.py).",
    )

    candidates: int = Field(
        100, gt=0,
        description="K: documents reranked exactly. Higher K raises recall of the exact top-10 and "
        "costs linearly in rerank time (about 0.3 ms per candidate of 200 sentences on 2 cores).",
    )
    knn_k: int = Field(
        30, gt=0,
        description="Documents returned per source sentence by the nested k-NN stage (plus any tied with the "
        "k-th). Higher finds more candidates at the cost of ANN time. 30 by measurement with the centroid "
        "pre-rank (bench/two_stage.py, K=100, one run): IRLeD dev top-10 fidelity 0.988 / 0.992 / 0.994 / 0.992 "
        "at k = 20 / 30 / 40 / 50, wiki 1.000; p50 on the 1.14M-sentence wiki latency store 87 / 98 / 106 ms at "
        "k = 30 / 40 / 50 (2-core Xeon).",
    )
    prerank_factor: float = Field(
        2.0, ge=1.0,
        description="Centroid pre-rank (sdr_search.indexer.prerank): the top prerank_factor x K documents by candidate "
        "aggregation are narrowed to K by their aggregation and paragraph-centroid scores; 1 turns it off (the "
        "top K by aggregation). 2 by measurement (bench/two_stage.py, README): IRLeD dev top-10 fidelity at K=100 "
        "0.988 -> 0.992 (knn_k 50) and 0.978 -> 0.988 (knn_k 20), for about 12 ms on the 1.14M-sentence wiki "
        "store (the embedded store keeps paragraph centroids in memory).",
    )
    aggregation: str = Field(
        "weighted-sum",
        description=f"Candidate aggregation: {', '.join(AGGREGATIONS)}. 'weighted-sum' is the default by "
        "measurement (bench/two_stage.py, bench/candidates_exact.py: best or tied-best top-10 recall on IRLeD dev "
        "at K=100 with the default knn_k).",
    )
    max_query_sentences: int = Field(
        2000, gt=0, description="Largest source accepted for a query (sentences); larger ones are refused."
    )


@dataclass(frozen=True)
class Source:
    document: Document
    vectors: DocVectors
    stats: NormStats
    stats_origin: str  # "stored" | "reference-sample"
    indexed_id: str | None = None  # set when the source is an indexed document (excluded from results)


@dataclass(frozen=True)
class Hit:
    id: str
    score: float
    title: str | None = None
    explanation: dict[str, Any] | None = None
    signals: dict[str, dict[str, float]] | None = None  # hybrid: raw / normalised / weight per signal

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"id": self.id, "score": self.score}
        if self.title:
            d["title"] = self.title
        if self.explanation is not None:
            d["explanation"] = self.explanation
        return d


@dataclass(frozen=True)
class MLTResult:
    hits: list[Hit]
    candidates: int
    stats_origin: str
    stats_stale: bool
    timings_ms: dict[str, float] = field(default_factory=dict)
    method: str = "sdr"
    hybrid: dict[str, Any] | None = None  # the fusion used (HybridSpec.to_dict()) for method hybrid

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "method": self.method,
            "hits": [h.to_dict() for h in self.hits],
            "candidates": self.candidates,
            "stats": {"origin": self.stats_origin, "stale": self.stats_stale},
            "timings_ms": self.timings_ms,
        }
        if self.hybrid is not None:
            d["hybrid"] = self.hybrid
        return d


def mean_cosines(source: DocVectors, candidates: Sequence[DocVectors]) -> np.ndarray:
    """Cosine of the source's mean sentence vector with each candidate's (the ``mean`` signal),
    float64, shape ``(D,)``."""
    sums = np.stack([d.vectors.sum(axis=0) for d in (source, *candidates)])  # the source first
    means = sums / np.maximum(np.linalg.norm(sums, axis=1, keepdims=True), 1e-12)  # as mean_vectors
    return (means[1:] @ means[0]).astype(np.float64)


def explain_pair(
    source: Source, candidate: Document, cand_vectors: DocVectors, *, top_paragraphs: int = 3, top_sentences: int = 3
) -> dict[str, Any]:
    """The three levels of an SDR score: document score, best paragraph pairs with their
    normalised scores, and for each pair the best sentence pairs with their cosines."""
    cv = CorpusVectors.from_docs([candidate.id], [cand_vectors])
    P = paragraph_scores(source.vectors, cv)  # (n, m)
    mu = np.asarray(source.stats.mu, dtype=np.float64)[:, None]
    sigma = np.asarray(source.stats.sigma, dtype=np.float64)[:, None]
    N = (P - mu) / sigma
    best_j = N.argmax(axis=1)
    best_n = N[np.arange(N.shape[0]), best_j]
    pairs = []
    for i in np.argsort(-best_n, kind="stable")[:top_paragraphs]:
        j = int(best_j[i])
        S = source.vectors.paragraph(int(i)) @ cand_vectors.paragraph(j).T
        r = S.argmax(axis=1)
        sims = S[np.arange(S.shape[0]), r]
        sentence_pairs = [
            {
                "source_sentence": source.document.paragraphs[int(i)][int(k)],
                "candidate_sentence": candidate.paragraphs[j][int(r[k])],
                "cosine": round(float(sims[k]), 6),
            }
            for k in np.argsort(-sims, kind="stable")[:top_sentences]
        ]
        pairs.append({
            "source_paragraph": int(i),
            "candidate_paragraph": j,
            "paragraph_score": round(float(P[i, j]), 6),
            "normalised_score": round(float(N[i, j]), 6),
            "sentence_pairs": sentence_pairs,
        })
    return {"score": float(best_n.mean()), "paragraph_pairs": pairs}


class MoreLikeThis:
    """The two-stage engine over one store."""

    def __init__(self, *, store: DocumentStore, encoder: SentenceEncoder | None = None, settings: MLTSettings | None = None):
        self.store = store
        self.encoder = encoder
        self.settings = settings or MLTSettings()
        self._sample: SampledParagraphs | None = None
        self._sample_doc_ids: tuple[str, ...] = ()
        self._sample_version: int | None = None

    # -- sources ------------------------------------------------------------------------------
    def _reference(self) -> tuple[SampledParagraphs, tuple[str, ...]]:
        version = self.store.stats_info().version
        if self._sample is None or self._sample_version != version:
            ref = self.store.reference()
            if ref is None:
                raise StatsUnavailableError(
                    "this index has no reference sample for normalisation statistics; run `sdr stats`"
                )
            owners = {d: k for k, d in enumerate(dict.fromkeys(ref.doc_ids))}
            doc_index = np.array([owners[d] for d in ref.doc_ids], dtype=np.int64)
            self._sample = SampledParagraphs(ref.vectors, doc_index)
            self._sample_doc_ids = ref.doc_ids
            self._sample_version = version
        return self._sample, self._sample_doc_ids

    def _sampled_stats(self, vectors: DocVectors, own_id: str | None) -> NormStats:
        sample, owners = self._reference()
        exclude = None
        if own_id is not None and own_id in owners:
            exclude = int(sample.doc_index[owners.index(own_id)])
        return stats_against_sample(vectors, sample, exclude_doc=exclude)

    def source_from_id(self, doc_id: str) -> Source:
        stored = self.store.get(doc_id)
        if stored.stats is not None and len(stored.stats.mu) == stored.vectors.n_paragraphs:
            return Source(stored.document, stored.vectors, stored.stats, "stored", doc_id)
        stats = self._sampled_stats(stored.vectors, doc_id)
        return Source(stored.document, stored.vectors, stats, "reference-sample", doc_id)

    def source_from_vectors(self, doc: Document, vectors: DocVectors) -> Source:
        """A new document already encoded (statistics from the reference sample)."""
        return Source(doc, vectors, self._sampled_stats(vectors, None), "reference-sample", None)

    def source_from_record(self, record: Mapping[str, Any]) -> Source:
        """A new document (``{"text": ...}``, ``{"paragraphs": [...]}`` or ``{"sections": ...}``)."""
        record = {"id": "_query", **record}
        doc = parse_record(record, settings=self.segmentation())
        if doc.n_sentences > self.settings.max_query_sentences:
            raise InvalidInputError(
                f"the source has {doc.n_sentences} sentences, over the limit of "
                f"{self.settings.max_query_sentences} (SDR_MAX_QUERY_SENTENCES)"
            )
        if self.encoder is None:
            raise InvalidInputError("this engine has no encoder; only indexed documents can be sources")
        self.check_encoder()
        flat = self.encoder.encode(doc.sentences)
        sizes = [len(p) for p in doc.paragraphs]
        vectors = DocVectors(flat, np.concatenate([[0], np.cumsum(sizes)]))
        return Source(doc, vectors, self._sampled_stats(vectors, None), "reference-sample", None)

    def segmentation(self) -> SegmentationSettings:
        """How new text is segmented for this store: as its documents were (the recorded
        segmentation; an index that recorded none, or no index yet, takes the settings)."""
        meta = self.store.meta()
        if meta is None or not dict(meta.segmentation):
            return SegmentationSettings()
        return SegmentationSettings.from_recorded(meta.segmentation)

    def check_encoder(self) -> None:
        meta = self.store.meta()
        if meta is not None and self.encoder is not None and meta.encoder_tag != self.encoder.cache_tag:
            raise ModelMismatchError(
                f"the index was built with model {meta.model_id} ({meta.encoder_tag}); the query encoder is "
                f"{self.encoder.model_id} ({self.encoder.cache_tag}). Use the index's model or re-index."
            )

    # -- method and fusion ----------------------------------------------------------------------
    def index_defaults(self) -> dict[str, Any]:
        """The index's recorded search defaults (``method``, ``fusion``, ``weights``,
        ``rank_constant``); empty when it records none."""
        return dict(self.store.search_defaults() or {})

    def resolve(
        self, *, method: str | None = None, fusion: str | None = None, weights: Mapping[str, float] | None = None,
        rank_constant: int | None = None,
    ) -> HybridSpec | None:
        """The fusion to search with: ``None`` for method ``sdr``, else a :class:`HybridSpec`.

        Each value comes from the arguments, else the index's search defaults, else the settings;
        fusion options without a method mean ``hybrid``. Raises :class:`InvalidInputError` for an
        unknown method, invalid weights, or fusion options with method ``sdr``.
        """
        defaults = self.index_defaults()
        implied = "hybrid" if any(v is not None for v in (fusion, weights, rank_constant)) else None
        chosen = method or implied or defaults.get("method") or self.settings.method
        if chosen not in METHODS:
            raise InvalidInputError(f"unknown method {chosen!r}; choose from {', '.join(METHODS)}")
        if chosen == "sdr":
            given = [n for n, v in (("fusion", fusion), ("weights", weights), ("rank_constant", rank_constant)) if v is not None]
            if given:
                verb = "applies" if len(given) == 1 else "apply"
                raise InvalidInputError(f"{', '.join(given)} {verb} to method 'hybrid' only; this search uses method 'sdr'")
            return None
        base = self.settings.spec().replace(
            fusion=defaults.get("fusion"), weights=defaults.get("weights"), rank_constant=defaults.get("rank_constant"),
        )
        return base.replace(fusion=fusion, weights=weights, rank_constant=rank_constant)

    # -- search -------------------------------------------------------------------------------
    def _aggregated(self, source: Source, k: int) -> tuple[list[str], np.ndarray]:
        exclude = [source.indexed_id] if source.indexed_id else []
        hits = self.store.sentence_knn(source.vectors.vectors, self.settings.knn_k, exclude_ids=exclude)
        ids, scores = aggregate_hits(
            hits, source.vectors.par_offsets, method=self.settings.aggregation, stats=source.stats
        )
        return top_of(ids, scores, k)

    def candidates(self, source: Source, k: int) -> list[str]:
        """The top ``k`` vector candidates by aggregation of the nested k-NN hits (no pre-rank)."""
        return self._aggregated(source, k)[0]

    def vector_candidates(self, source: Source, k: int) -> tuple[list[str], dict[str, float]]:
        """The ``k`` vector candidates for the exact rerank: the top ``prerank_factor * k`` by
        aggregation narrowed to ``k`` by the centroid pre-rank (:mod:`sdr_search.indexer.prerank`, with the
        store's :meth:`~sdr_search.indexer.store.DocumentStore.paragraph_centroids`). Also returns timings
        (ms) of the two steps."""
        t0 = time.perf_counter()
        pool, scores = self._aggregated(source, max(k, int(np.ceil(self.settings.prerank_factor * k))))
        t1 = time.perf_counter()
        if len(pool) > k:
            keep = prerank_order(pool, scores, source.vectors, self.store.paragraph_centroids(pool))[:k]
            pool = [pool[i] for i in keep]
        t2 = time.perf_counter()
        return pool, {"candidates": round((t1 - t0) * 1e3, 2), "prerank": round((t2 - t1) * 1e3, 2)}

    def lexical_candidates(self, source: Source, k: int) -> list[str]:
        """The lexical (BM25) top ``k`` for the source's whole text."""
        exclude = [source.indexed_id] if source.indexed_id else []
        return self.store.lexical_search(source.document.text, k, exclude_ids=exclude).ids

    def search(
        self, source: Source, *, size: int = 10, offset: int = 0, candidates: int | None = None, explain: bool = False,
        candidate_ids: Sequence[str] | None = None, hybrid: HybridSpec | None = None,
    ) -> MLTResult:
        """Rank for ``source`` with exact SDR (``hybrid`` None) or fused signals. ``candidate_ids``
        (optional) skips candidate generation and ranks exactly those documents (e.g. candidates
        already restricted by a metadata filter; for hybrid, the union of both sides)."""
        if size < 0 or offset < 0:
            raise InvalidInputError("size and from must be >= 0")
        K = candidates or self.settings.candidates
        if K < size + offset:
            K = size + offset
        if hybrid is not None:
            return self._search_hybrid(source, hybrid, size=size, offset=offset, K=K, explain=explain,
                                       candidate_ids=candidate_ids)
        t0 = time.perf_counter()
        timings: dict[str, float] = {}
        if candidate_ids is None:
            cand_ids, timings = self.vector_candidates(source, K)
        else:
            cand_ids = list(candidate_ids)
        t1 = time.perf_counter()
        hits: list[Hit] = []
        if cand_ids:
            docs = self.store.fetch_documents(cand_ids)
            t2 = time.perf_counter()
            scores = score_documents(source.vectors, docs, source.stats)
            order = rank(cand_ids, scores)[offset : offset + size]
            for i in order:
                hits.append(Hit(cand_ids[i], float(scores[i])))
        else:
            t2 = t1
        t3 = time.perf_counter()
        if explain and hits:
            hits = self._explained(source, hits)
        info = self.store.stats_info()
        return MLTResult(
            hits, len(cand_ids), source.stats_origin, info.stale,
            {"candidates": round((t1 - t0) * 1e3, 2), **timings, "fetch": round((t2 - t1) * 1e3, 2),
             "rerank": round((t3 - t2) * 1e3, 2)},
        )

    def _search_hybrid(
        self, source: Source, spec: HybridSpec, *, size: int, offset: int, K: int, explain: bool,
        candidate_ids: Sequence[str] | None,
    ) -> MLTResult:
        text = source.document.text
        exclude = [source.indexed_id] if source.indexed_id else []
        t0 = time.perf_counter()
        timings: dict[str, float] = {}
        if candidate_ids is None:
            vector_ids, timings = self.vector_candidates(source, K)
            t1 = time.perf_counter()
            lexical = self.store.lexical_search(text, K, exclude_ids=exclude, score_ids=vector_ids)
            seen = set(vector_ids)
            cand_ids = vector_ids + [i for i in lexical.ids if i not in seen]
        else:
            cand_ids = [i for i in dict.fromkeys(candidate_ids) if i not in exclude]
            t1 = time.perf_counter()
            lexical = self.store.lexical_search(text, 0, score_ids=cand_ids)
        t2 = time.perf_counter()
        hits: list[Hit] = []
        if cand_ids:
            docs = self.store.fetch_documents(cand_ids)
            t3 = time.perf_counter()
            signals = {
                "bm25": np.asarray([lexical.score_of(i) for i in cand_ids], dtype=np.float64),
                "sdr": score_documents(source.vectors, docs, source.stats),
                "mean": mean_cosines(source.vectors, docs),
            }
            fused = fuse(cand_ids, signals, spec)
            for i in fused.order(cand_ids)[offset : offset + size]:
                detail = {
                    name: {"raw": float(signals[name][i]), "weight": float(spec.weights[name]),
                           **({"normalised": float(fused.normalised[name][i])} if name in fused.normalised else {})}
                    for name in SIGNALS
                }
                hits.append(Hit(cand_ids[i], float(fused.scores[i]), signals=detail))
        else:
            t3 = t2
        t4 = time.perf_counter()
        if explain and hits:
            hits = self._explained(source, hits, spec)
        info = self.store.stats_info()
        return MLTResult(
            hits, len(cand_ids), source.stats_origin, info.stale,
            {"candidates": round((t1 - t0) * 1e3, 2), **timings, "lexical": round((t2 - t1) * 1e3, 2),
             "fetch": round((t3 - t2) * 1e3, 2), "rerank": round((t4 - t3) * 1e3, 2)},
            method="hybrid", hybrid=spec.to_dict(),
        )

    def _explained(self, source: Source, hits: list[Hit], spec: HybridSpec | None = None) -> list[Hit]:
        explained = []
        for h in hits:
            stored = self.store.get(h.id)
            ex = explain_pair(source, stored.document, stored.vectors)
            if spec is not None and h.signals is not None:
                ex["hybrid"] = {"score": h.score, "fusion": spec.fusion, "signals": h.signals}
                if spec.fusion == "rrf":
                    ex["hybrid"]["rank_constant"] = spec.rank_constant
            explained.append(Hit(h.id, h.score, stored.document.title, ex, h.signals))
        return explained

    def more_like_this(
        self,
        *,
        doc_id: str | None = None,
        record: Mapping[str, Any] | None = None,
        size: int = 10,
        offset: int = 0,
        candidates: int | None = None,
        explain: bool = False,
        method: str | None = None,
        fusion: str | None = None,
        weights: Mapping[str, float] | None = None,
        rank_constant: int | None = None,
    ) -> MLTResult:
        if (doc_id is None) == (record is None):
            raise InvalidInputError("give exactly one source: an indexed document id or a new document")
        spec = self.resolve(method=method, fusion=fusion, weights=weights, rank_constant=rank_constant)
        source = self.source_from_id(doc_id) if doc_id is not None else self.source_from_record(record)
        return self.search(source, size=size, offset=offset, candidates=candidates, explain=explain, hybrid=spec)
