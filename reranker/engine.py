"""Two-stage "more like this": nested sentence k-NN candidates, then the exact SDR rerank; or
hybrid: lexical candidates too, and the signals fused.

One entry point, :meth:`MoreLikeThis.run` (:class:`Query` in, :class:`MLTResult` out), whichever
door a query comes in by (HTTP, ``sdr mlt``, ``sdr eval --store``, :mod:`sdr_search`). One path
inside it:

1. read the store's state once (:meth:`DocumentStore.query_state`: meta, search defaults,
   statistics info, and the reference sample when the engine's cached copy is out of date);
2. resolve method and fusion: the query's values, else the index's recorded search defaults, else
   :class:`MLTSettings` (environment), else :data:`sdr_search.core.fusion.DEFAULT_HYBRID`;
3. the source: an indexed document (its stored vectors and precomputed per-paragraph statistics)
   or new text (segmented as the store's documents were, capped at ``SDR_MAX_QUERY_SENTENCES``,
   encoded now, normalised against the store's reference sample);
4. candidates: the nested k-NN hits aggregated per document (:mod:`sdr_search.indexer.candidates`;
   a pool of ``SDR_PRERANK_FACTOR x K``, or ``K x SDR_FILTER_OVERSAMPLE`` with a filter) and, for
   hybrid, one BM25 search of the whole source text that also scores every vector candidate; a
   metadata filter is applied to both sides in the engine (:mod:`sdr_search.reranker.filters`);
5. the centroid pre-rank narrows the vector pool to K (:mod:`sdr_search.indexer.prerank`);
6. fetch once: the vectors of the K vector candidates and the lexical-only ones (a store whose
   centroids are not cheap fetches the pool once and the pre-rank and rerank share it);
7. score: exact SDR (:func:`sdr_search.core.scoring.score_documents`) with the source's statistics,
   which never depend on the candidates; hybrid: BM25, SDR and the mean-vector cosine fused per
   query (:func:`sdr_search.core.fusion.fuse`: z-score or min-max and a weighted mean, or RRF);
8. present the returned hits only (at most ``size``): title and metadata read in one bulk call
   without vectors (:meth:`DocumentStore.documents_of`), and a snippet, the hit's best sentence
   pair (the best sentence pair of its best paragraph pair), from the vectors the rerank already
   fetched; explain (optional): the best paragraph pairs and their best sentence pairs per hit.

Character offsets (``source_start``/``source_end``, ``candidate_start``/``candidate_end``) index a
document's *stored text*, :attr:`Document.text` (:func:`sentence_spans`): the title, then each
SDR paragraph's sentences joined by one space, blocks separated by a blank line (``"\n\n"``), in
Python string positions (code points). The source's offsets index its stored text when it is an
indexed (or pre-encoded) document, and the request's own text when it is new text
(:func:`request_text`, :func:`aligned_spans`): ``text`` as sent, or the ``paragraphs`` (every
section's paragraphs) joined by a blank line. :attr:`MLTResult.source_offsets` says which.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping, Sequence

import numpy as np
from pydantic import AliasChoices, Field
from pydantic_settings import SettingsConfigDict

from sdr_search.core.documents import Document, source_document
from sdr_search.core.embed import doc_vectors
from sdr_search.core.encoder import SentenceEncoder
from sdr_search.core.errors import (
    DocumentNotFoundError,
    InvalidInputError,
    ModelMismatchError,
    SourceTooLargeError,
    StatsUnavailableError,
)
from sdr_search.core.fusion import METHODS, SIGNALS, HybridSpec, fuse
from sdr_search.core.scoring import NormStats, paragraph_scores, rank, score_documents, top_of
from sdr_search.core.settings import HybridSettings, SegmentationSettings
from sdr_search.core.stats import SampledParagraphs, stats_against_sample
from sdr_search.core.vectors import CorpusVectors, DocVectors
from sdr_search.indexer.candidates import AGGREGATIONS, aggregate_hits
from sdr_search.indexer.prerank import paragraph_centroids, prerank_order
from sdr_search.indexer.store import DocumentStore, IndexMeta, LexicalHits, QueryState

from .filters import filter_candidates

__all__ = ["METHODS", "MLTSettings", "Query", "Source", "Hit", "MLTResult", "MoreLikeThis", "mean_cosines",
           "explain_pair", "best_sentence_pair", "sentence_spans", "aligned_spans", "request_text"]

logger = logging.getLogger(__name__)


class MLTSettings(HybridSettings):
    """Query-time settings of the engine (env prefix ``SDR_``), with the hybrid fusion settings of
    :class:`sdr_search.core.settings.HybridSettings` (``SDR_FUSION``, ``SDR_HYBRID_WEIGHTS``,
    ``SDR_RRF_RANK_CONSTANT``)."""

    model_config = SettingsConfigDict(env_prefix="SDR_", extra="ignore", populate_by_name=True)

    method: Literal["sdr", "hybrid"] = Field(
        "hybrid",
        description="Default ranking method: 'hybrid' (lexical and vector candidates, BM25/SDR/mean fused; see "
        "SDR_FUSION, SDR_HYBRID_WEIGHTS) or 'sdr' (vector candidates, exact SDR only). 'hybrid' because it keeps "
        "BM25 in the ranking as a guard against a weak encoder; SDR alone depends more on the encoder and the "
        "paragraph units (docs/results/relevance.md 'Which default', bench/hybrid.py).",
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
        "top K by aggregation). 2 by measurement (bench/two_stage.py, docs/results/two-stage.md): IRLeD dev top-10 fidelity at K=100 "
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
        2000, gt=0,
        validation_alias=AliasChoices("SDR_MAX_QUERY_SENTENCES", "SDR_SERVICE_MAX_SOURCE_SENTENCES"),
        description="Largest new-text source, in sentences, for every door (CLI, HTTP, library); larger ones "
        "are refused (SourceTooLargeError, HTTP 413). Encoding time grows linearly: about 1 s per 500 "
        "sentences on 2 CPU cores with bf16. SDR_SERVICE_MAX_SOURCE_SENTENCES is read as an older name.",
    )
    filter_oversample: int = Field(
        10, gt=0,
        validation_alias=AliasChoices("SDR_FILTER_OVERSAMPLE", "SDR_SERVICE_FILTER_OVERSAMPLE"),
        description="With a metadata filter, stage 1 returns K x this many candidates, which are filtered "
        "before the pre-rank and the exact rerank. Higher finds more matches of a rare filter, at the cost of "
        "metadata look-ups. SDR_SERVICE_FILTER_OVERSAMPLE is read as an older name.",
    )
    max_filter_candidates: int = Field(
        5000, gt=0,
        validation_alias=AliasChoices("SDR_MAX_FILTER_CANDIDATES", "SDR_SERVICE_MAX_FILTER_CANDIDATES"),
        description="Cap on the over-fetched candidates of a filtered query. SDR_SERVICE_MAX_FILTER_CANDIDATES "
        "is read as an older name.",
    )


_SCALARS = (str, int, float, bool)


@dataclass(frozen=True)
class Query:
    """One "more like this" query, whichever door it came in by.

    The source is exactly one of: ``id`` (an indexed document, left out of its own results),
    ``text`` (raw text: paragraphs separated by blank lines), ``paragraphs``, ``sections``
    (``[{"title": ..., "paragraphs": [...]}]``), or ``document`` + ``vectors`` (a new document the
    caller already encoded). ``size``/``offset`` page the hits; ``candidates`` is K (documents
    reranked exactly; default ``SDR_CANDIDATES``, raised to offset + size); ``filter`` is a metadata
    equality filter (:mod:`sdr_search.reranker.filters`); ``method``/``fusion``/``weights``/
    ``rank_constant`` override the index's and the settings' defaults; ``candidate_ids`` skips
    candidate generation and ranks exactly those documents.
    """

    id: str | None = None
    text: str | None = None
    paragraphs: Sequence[str] | None = None
    sections: Sequence[Mapping[str, Any]] | None = None
    title: str | None = None
    document: Document | None = None
    vectors: DocVectors | None = None
    size: int = 10
    offset: int = 0
    candidates: int | None = None
    filter: Mapping[str, Any] | None = None
    explain: bool = False
    method: str | None = None
    fusion: str | None = None
    weights: Mapping[str, float] | None = None
    rank_constant: int | None = None
    candidate_ids: Sequence[str] | None = None
    details: bool = True

    def __post_init__(self) -> None:
        given = [k for k in ("id", "text", "paragraphs", "sections", "document") if getattr(self, k) is not None]
        if len(given) != 1:
            found = ", ".join(given) if given else "none"
            raise InvalidInputError(f"give exactly one source: an indexed document id, text, paragraphs or sections (found: {found})")
        if (self.document is None) != (self.vectors is None):
            raise InvalidInputError("a pre-encoded source needs both document and vectors")
        if isinstance(self.size, bool) or not isinstance(self.size, int) or self.size < 0:
            raise InvalidInputError(f"size must be an integer >= 0, got {self.size!r}")
        if isinstance(self.offset, bool) or not isinstance(self.offset, int) or self.offset < 0:
            raise InvalidInputError(f"from (offset) must be an integer >= 0, got {self.offset!r}")
        if self.candidates is not None and (isinstance(self.candidates, bool) or not isinstance(self.candidates, int)
                                            or self.candidates < 1):
            raise InvalidInputError(f"candidates must be an integer >= 1, got {self.candidates!r}")
        if self.filter is not None:
            check_filter(self.filter)

    def new_document(self, settings: SegmentationSettings) -> Document:
        """The new source document segmented with ``settings`` (not for ``id`` or ``document``)."""
        return source_document(text=self.text, paragraphs=self.paragraphs, sections=self.sections, title=self.title,
                               settings=settings)


def check_filter(flt: Any) -> None:
    """Refuse a filter that is not ``{field: scalar or list of scalars}`` (the HTTP schema's rule)."""
    if not isinstance(flt, Mapping):
        raise InvalidInputError(f"filter must be an object {{field: value}}, got {type(flt).__name__}")
    for k, v in flt.items():
        if not isinstance(k, str) or not k:
            raise InvalidInputError(f"filter field names must be non-empty strings, got {k!r}")
        items = v if isinstance(v, list) else [v]
        if not all(isinstance(x, _SCALARS) for x in items):
            raise InvalidInputError(f"filter field {k!r}: a value is a string, number, boolean or a list of them")


@dataclass(frozen=True)
class Source:
    document: Document
    vectors: DocVectors
    stats: NormStats
    stats_origin: str  # "stored" | "reference-sample"
    indexed_id: str | None = None  # set when the source is an indexed document (excluded from results)
    text: str | None = None  # a new-text source: the request's text (request_text), which its offsets index

    @property
    def offsets(self) -> str:
        """What the source's character offsets index: ``"stored"`` (its stored text,
        :attr:`Document.text`) or ``"request"`` (the request's text, :func:`request_text`)."""
        return "stored" if self.text is None else "request"

    def spans(self) -> list[list[tuple[int, int] | None]]:
        """Each source sentence's ``(start, end)`` in the text :attr:`offsets` names (None: a
        sentence the request's text does not hold verbatim, up to white space)."""
        if self.text is None:
            return sentence_spans(self.document)  # type: ignore[return-value]
        return aligned_spans(self.text, self.document)


@dataclass(frozen=True)
class Hit:
    """One result. ``title``/``metadata``/``snippet`` are set unless the query asked for no
    details (:attr:`Query.details`); ``snippet`` is the best sentence pair
    (:func:`best_sentence_pair`): ``source_sentence``, ``candidate_sentence``, ``cosine``,
    ``source_paragraph``, ``candidate_paragraph`` and the four character offsets."""

    id: str
    score: float
    title: str | None = None
    explanation: dict[str, Any] | None = None
    signals: dict[str, dict[str, float]] | None = None  # hybrid: raw / normalised / weight per signal
    metadata: Mapping[str, Any] | None = None
    snippet: dict[str, Any] | None = None


@dataclass(frozen=True)
class MLTResult:
    hits: list[Hit]
    candidates: int
    stats_origin: str
    stats_stale: bool
    timings_ms: dict[str, float] = field(default_factory=dict)
    method: str = "sdr"
    hybrid: dict[str, Any] | None = None  # the fusion used (HybridSpec.to_dict()) for method hybrid
    source_offsets: str = "stored"  # what source_start/source_end index: "stored" or "request" (Source.offsets)


def mean_cosines(source: DocVectors, candidates: Sequence[DocVectors]) -> np.ndarray:
    """Cosine of the source's mean sentence vector with each candidate's (the ``mean`` signal),
    float64, shape ``(D,)``."""
    sums = np.stack([d.vectors.sum(axis=0) for d in (source, *candidates)])  # the source first
    means = sums / np.maximum(np.linalg.norm(sums, axis=1, keepdims=True), 1e-12)  # as mean_vectors
    return (means[1:] @ means[0]).astype(np.float64)


# -- offsets into a document's text ----------------------------------------------------------------
_TOKEN = re.compile(r"\S+")  # the complement of the splitter's white space (sdr_search.core.sentences)


def sentence_spans(doc: Document) -> list[list[tuple[int, int]]]:
    """``(start, end)`` of every sentence in ``doc``'s stored text, :attr:`Document.text` (the
    title, then each paragraph's sentences joined by one space, blocks separated by ``"\\n\\n"``):
    ``doc.text[start:end]`` is the sentence. Per paragraph, in order."""
    spans: list[list[tuple[int, int]]] = []
    pos = len(doc.title) + 2 if doc.title else 0
    for paragraph in doc.paragraphs:
        row = []
        for k, sentence in enumerate(paragraph):
            pos += 1 if k else 0
            row.append((pos, pos + len(sentence)))
            pos += len(sentence)
        spans.append(row)
        pos += 2
    return spans


def request_text(query: Query) -> str | None:
    """The text a new-text source's offsets index: ``text`` as sent; ``paragraphs``, or every
    section's paragraphs in order, joined by a blank line (``"\\n\\n"``; section titles are not
    part of it). None for an indexed or pre-encoded source (their offsets index the stored text)."""
    if query.text is not None:
        return query.text
    if query.paragraphs is not None:
        return "\n\n".join(query.paragraphs)
    if query.sections is not None:
        return "\n\n".join(p for section in query.sections for p in section.get("paragraphs", ()))
    return None


def aligned_spans(text: str, doc: Document) -> list[list[tuple[int, int] | None]]:
    """``(start, end)`` of each sentence of ``doc`` (segmented from ``text``) in ``text`` itself:
    segmentation collapses white space and joins fragments with one space, so each sentence is
    found in order in the white-space-collapsed text and mapped back. A sentence not found that way
    (a splitter break without white space, then joined) is None; ``text[start:end]`` equals the
    sentence up to white space."""
    tokens = [(m.start(), m.end()) for m in _TOKEN.finditer(text)]
    collapsed = " ".join(text[a:b] for a, b in tokens)
    starts: list[int] = []  # each token's start in the collapsed text
    pos = 0
    for a, b in tokens:
        starts.append(pos)
        pos += b - a + 1

    def raw(at: int) -> int:  # a position inside a token of the collapsed text -> the text's
        t = bisect_right(starts, at) - 1
        return tokens[t][0] + (at - starts[t])

    out: list[list[tuple[int, int] | None]] = []
    cursor = 0
    for paragraph in doc.paragraphs:
        row: list[tuple[int, int] | None] = []
        for sentence in paragraph:
            at = collapsed.find(sentence, cursor) if sentence else -1
            if at < 0:
                row.append(None)
                continue
            cursor = at + len(sentence)
            row.append((raw(at), raw(cursor - 1) + 1))
        out.append(row)
    return out


# -- explanation and snippet ------------------------------------------------------------------------
def _best_pairs(
    source: Source, cand_vectors: DocVectors, top_paragraphs: int, top_sentences: int, P: np.ndarray | None = None,
) -> tuple[float, list[tuple[int, int, float, float, list[tuple[int, int, float]]]]]:
    """The SDR score against one candidate and its best paragraph pairs ``(i, j, P_ij, N_ij,
    [(source sentence k, candidate sentence r, cosine), ...])``, best first (positions inside the
    paragraphs). ``P``: the paragraph scores against this candidate when already computed."""
    P = paragraph_scores(source.vectors, CorpusVectors.from_docs([""], [cand_vectors])) if P is None else P  # (n, m)
    mu = np.asarray(source.stats.mu, dtype=np.float64)[:, None]
    sigma = np.asarray(source.stats.sigma, dtype=np.float64)[:, None]
    N = (P - mu) / sigma
    best_j = N.argmax(axis=1)
    best_n = N[np.arange(N.shape[0]), best_j]
    pairs = []
    for i in np.argsort(-best_n, kind="stable")[:top_paragraphs]:
        i, j = int(i), int(best_j[i])
        S = source.vectors.paragraph(i) @ cand_vectors.paragraph(j).T
        r = S.argmax(axis=1)
        sims = S[np.arange(S.shape[0]), r]
        sentences = [(int(k), int(r[k]), float(sims[k])) for k in np.argsort(-sims, kind="stable")[:top_sentences]]
        pairs.append((i, j, float(P[i, j]), float(N[i, j]), sentences))
    return float(best_n.mean()), pairs


def _sentence_pair(
    source: Source, candidate: Document, i: int, j: int, k: int, r: int, cosine: float,
    source_spans: Sequence[Sequence[tuple[int, int] | None]] | None,
    candidate_spans: Sequence[Sequence[tuple[int, int]]] | None,
) -> dict[str, Any]:
    pair: dict[str, Any] = {
        "source_sentence": source.document.paragraphs[i][k],
        "candidate_sentence": candidate.paragraphs[j][r],
        "cosine": round(cosine, 6),
    }
    src = source_spans[i][k] if source_spans is not None else None
    if src is not None:
        pair["source_start"], pair["source_end"] = src
    if candidate_spans is not None:
        pair["candidate_start"], pair["candidate_end"] = candidate_spans[j][r]
    return pair


def explain_pair(
    source: Source, candidate: Document, cand_vectors: DocVectors, *, top_paragraphs: int = 3, top_sentences: int = 3,
    source_spans: Sequence[Sequence[tuple[int, int] | None]] | None = None, P: np.ndarray | None = None,
) -> dict[str, Any]:
    """The three levels of an SDR score: document score, best paragraph pairs with their
    normalised scores, and for each pair the best sentence pairs with their cosines and character
    offsets (the candidate's into its stored text; the source's into ``source_spans``' text, by
    default :meth:`Source.spans`). ``P``: the paragraph scores against the candidate, when known."""
    score, best = _best_pairs(source, cand_vectors, top_paragraphs, top_sentences, P)
    source_spans = source.spans() if source_spans is None else source_spans
    candidate_spans = sentence_spans(candidate)
    pairs = [{
        "source_paragraph": i,
        "candidate_paragraph": j,
        "paragraph_score": round(p, 6),
        "normalised_score": round(n, 6),
        "sentence_pairs": [_sentence_pair(source, candidate, i, j, k, r, c, source_spans, candidate_spans)
                           for k, r, c in sentences],
    } for i, j, p, n, sentences in best]
    return {"score": score, "paragraph_pairs": pairs}


def best_sentence_pair(
    source: Source, candidate: Document, cand_vectors: DocVectors, *,
    source_spans: Sequence[Sequence[tuple[int, int] | None]] | None = None, P: np.ndarray | None = None,
) -> dict[str, Any]:
    """The snippet of a hit: the best sentence pair of its best paragraph pair (the pair SDR
    weighs most; the first sentence pair :func:`explain_pair` lists), with the two paragraphs'
    positions and the character offsets :func:`explain_pair` gives. ``P`` as for :func:`explain_pair`."""
    _, best = _best_pairs(source, cand_vectors, 1, 1, P)
    i, j, _, _, ((k, r, cosine),) = best[0]
    source_spans = source.spans() if source_spans is None else source_spans
    pair = _sentence_pair(source, candidate, i, j, k, r, cosine, source_spans, sentence_spans(candidate))
    return {**pair, "source_paragraph": i, "candidate_paragraph": j}


class MoreLikeThis:
    """The two-stage engine over one store. :meth:`run` is the one query entry point: the HTTP
    service, ``sdr mlt``, ``sdr eval --store`` and the library front door all call it."""

    def __init__(self, *, store: DocumentStore, encoder: SentenceEncoder | None = None, settings: MLTSettings | None = None):
        self.store = store
        self.encoder = encoder
        self.settings = settings or MLTSettings()
        self._sample: SampledParagraphs | None = None
        self._sample_doc_ids: tuple[str, ...] = ()
        self._sample_version: int | None = None
        self._sample_lock = threading.Lock()

    # -- the query --------------------------------------------------------------------------
    def run(self, query: Query) -> MLTResult:
        """Answer ``query``: resolve settings -> source -> vector and lexical candidates (filtered) ->
        pre-rank -> fetch once -> exact SDR -> fusion -> explain. Reads the store's state once."""
        t0 = time.perf_counter()
        state = self.store.query_state(reference_version=self._sample_version)
        spec = self._resolve(state, query)
        K = max(query.candidates or self.settings.candidates, query.offset + query.size)
        source = self._source(state, query)
        t1 = time.perf_counter()
        timings = {"source": _ms(t1 - t0)}
        exclude = [source.indexed_id] if source.indexed_id else []
        lexical: LexicalHits | None = None
        if query.candidate_ids is not None:  # rank exactly these: no candidate generation, no pre-rank
            pool, pool_scores = [i for i in dict.fromkeys(query.candidate_ids) if i not in exclude], None
            if spec is not None:
                lexical = self.store.lexical_search(source.document.text, 0, score_ids=pool)
            lexical_ranked: list[str] = []
            timings["candidates"] = _ms(time.perf_counter() - t1)
        else:
            pool_n = max(K, int(np.ceil(self.settings.prerank_factor * K)))
            allowed = None
            if query.filter and self.store.capabilities.filtered_knn:  # the filter inside the k-NN search
                allowed = self.store.ids_matching(query.filter)
                timings["filter"] = _ms(time.perf_counter() - t1)
            elif query.filter:  # over-fetch, then filter the candidates
                pool_n = min(K * self.settings.filter_oversample, max(self.settings.max_filter_candidates, pool_n))
            pool, pool_scores = self._aggregated(source, pool_n, exclude, allowed)
            t2 = time.perf_counter()
            timings["candidates"] = _ms(t2 - t1)
            lexical_ranked: list[str] = []
            if spec is not None and allowed is not None:  # one BM25 search, scoring the matching documents
                lexical = self.store.lexical_search(source.document.text, 0, exclude_ids=exclude, score_ids=allowed)
                skip = set(exclude)
                lexical_ranked = sorted((i for i, v in lexical.scored.items() if v > 0 and i not in skip),
                                        key=lambda i: (-lexical.scored[i], i))[: 2 * K]
                timings["lexical"] = _ms(time.perf_counter() - t2)
            elif spec is not None:  # one BM25 search: the lexical top and the BM25 of every vector candidate
                lexical = self.store.lexical_search(source.document.text, pool_n if query.filter else K,
                                                    exclude_ids=exclude, score_ids=pool)
                lexical_ranked = list(lexical.ids)
                timings["lexical"] = _ms(time.perf_counter() - t2)
            if query.filter and allowed is None:
                t3 = time.perf_counter()
                keep = set(filter_candidates(self.store, pool, query.filter,
                                             limit=max(K, int(np.ceil(self.settings.prerank_factor * K)))))
                positions = [k for k, i in enumerate(pool) if i in keep]
                pool, pool_scores = [pool[k] for k in positions], pool_scores[positions]
                lexical_ranked = filter_candidates(self.store, lexical_ranked, query.filter, limit=2 * K)
                timings["filter"] = _ms(time.perf_counter() - t3)
        vector_ids, lexical_ids, docs = self._prerank_and_fetch(source, pool, pool_scores, lexical_ranked, K, timings)
        cand_ids = vector_ids + lexical_ids
        t5 = time.perf_counter()
        hits = self._ranked(source, cand_ids, docs, lexical, spec, query.offset, query.size)
        t6 = time.perf_counter()
        timings["rerank"] = _ms(t6 - t5)
        if hits and (query.details or query.explain):
            fetched = dict(zip(cand_ids, docs))
            hits = self._presented(source, hits, [fetched[h.id] for h in hits], spec, query.explain)
            timings["explain" if query.explain else "snippets"] = _ms(time.perf_counter() - t6)
        return MLTResult(
            hits, len(cand_ids), source.stats_origin, state.stats.stale, timings,
            method="sdr" if spec is None else "hybrid", hybrid=spec.to_dict() if spec is not None else None,
            source_offsets=source.offsets,
        )

    # -- settings -------------------------------------------------------------------------------
    def _resolve(self, state: QueryState, query: Query) -> HybridSpec | None:
        return self.resolve(method=query.method, fusion=query.fusion, weights=query.weights,
                            rank_constant=query.rank_constant, defaults=state.search_defaults)

    def resolve(
        self, *, method: str | None = None, fusion: str | None = None, weights: Mapping[str, float] | None = None,
        rank_constant: int | None = None, defaults: Mapping[str, Any] | None = None,
    ) -> HybridSpec | None:
        """The fusion to search with: ``None`` for method ``sdr``, else a :class:`HybridSpec`.

        Each value comes from the arguments, else the index's search defaults (``defaults``; read
        from the store when None), else the settings; fusion options without a method mean
        ``hybrid``. Raises :class:`InvalidInputError` for an unknown method, invalid weights, or
        fusion options with method ``sdr``.
        """
        defaults = dict(self.store.search_defaults() or {}) if defaults is None else dict(defaults)
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

    def segmentation(self, meta: IndexMeta | None = None) -> SegmentationSettings:
        """How new text is segmented for this store: as its documents were (the recorded
        segmentation; an index that recorded none, or no index yet, takes the settings)."""
        meta = self.store.meta() if meta is None else meta
        if meta is None or not dict(meta.segmentation):
            return SegmentationSettings()
        return SegmentationSettings.from_recorded(meta.segmentation)

    def check_encoder(self, meta: IndexMeta | None = None) -> None:
        meta = self.store.meta() if meta is None else meta
        if meta is not None and self.encoder is not None and meta.encoder_tag != self.encoder.cache_tag:
            raise ModelMismatchError(
                f"the index was built with model {meta.model_id} ({meta.encoder_tag}); the query encoder is "
                f"{self.encoder.model_id} ({self.encoder.cache_tag}). Use the index's model or re-index."
            )

    # -- sources --------------------------------------------------------------------------------
    def source(self, query: Query) -> Source:
        """The source of ``query`` with its normalisation statistics, as :meth:`run` resolves it
        (for exhaustive comparisons in tests and benches)."""
        return self._source(self.store.query_state(reference_version=self._sample_version), query)

    def _source(self, state: QueryState, query: Query) -> Source:
        if query.id is not None:
            return self.source_from_id(query.id, state)
        if query.vectors is not None:
            doc, vectors = query.document, query.vectors
            self._check_size(doc)
        else:
            doc = query.new_document(self.segmentation(state.meta))
            self._check_size(doc)  # before encoding: the cap bounds the encoder's work
            if self.encoder is None:
                raise InvalidInputError("this engine has no encoder; only indexed documents can be sources")
            self.check_encoder(state.meta)
            vectors = doc_vectors(doc, self.encoder.encode(doc.sentences))
        text = request_text(query) if query.vectors is None else None
        return Source(doc, vectors, self._sampled_stats(vectors, None, state), "reference-sample", None, text)

    def _check_size(self, doc: Document) -> None:
        if doc.n_sentences > self.settings.max_query_sentences:
            raise SourceTooLargeError(
                f"the source has {doc.n_sentences} sentences, over the limit of "
                f"{self.settings.max_query_sentences} (SDR_MAX_QUERY_SENTENCES)"
            )

    def source_from_id(self, doc_id: str, state: QueryState | None = None) -> Source:
        """An indexed document as the source: its stored statistics, else the reference sample's."""
        stored = self.store.get(doc_id)
        if stored.stats is not None and len(stored.stats.mu) == stored.vectors.n_paragraphs:
            return Source(stored.document, stored.vectors, stored.stats, "stored", doc_id)
        stats = self._sampled_stats(stored.vectors, doc_id, state)
        return Source(stored.document, stored.vectors, stats, "reference-sample", doc_id)

    def _reference(self, state: QueryState | None) -> tuple[SampledParagraphs, tuple[str, ...]]:
        if state is None:
            state = self.store.query_state(reference_version=self._sample_version)
        with self._sample_lock:
            if state.reference_current and self._sample is not None:
                return self._sample, self._sample_doc_ids
            ref = state.reference
            if ref is None:
                if state.reference_current:  # our copy was current when asked, then replaced: read it again
                    return self._reference(self.store.query_state())
                raise StatsUnavailableError(
                    "this index has no reference sample for normalisation statistics; run `sdr stats`"
                )
            owners = {d: k for k, d in enumerate(dict.fromkeys(ref.doc_ids))}
            doc_index = np.array([owners[d] for d in ref.doc_ids], dtype=np.int64)
            self._sample = SampledParagraphs(ref.vectors, doc_index)
            self._sample_doc_ids = ref.doc_ids
            self._sample_version = state.stats.version
            return self._sample, self._sample_doc_ids

    def _sampled_stats(self, vectors: DocVectors, own_id: str | None, state: QueryState | None) -> NormStats:
        sample, owners = self._reference(state)
        exclude = None
        if own_id is not None and own_id in owners:
            exclude = int(sample.doc_index[owners.index(own_id)])
        # a one-document store: the source's own paragraphs are the whole sample; no statistics
        # exist, so its scores stay unnormalised (mu 0, sigma 1) rather than failing
        return stats_against_sample(vectors, sample, exclude_doc=exclude, if_empty="identity" if own_id else "raise")

    # -- candidates ----------------------------------------------------------------------------
    def _aggregated(
        self, source: Source, k: int, exclude: Sequence[str], allowed: Sequence[str] | None = None,
    ) -> tuple[list[str], np.ndarray]:
        if allowed is not None and not allowed:
            return [], np.zeros(0, dtype=np.float64)
        hits = self.store.sentence_knn(source.vectors.vectors, self.settings.knn_k, exclude_ids=exclude,
                                       allowed_ids=allowed)
        ids, scores = aggregate_hits(
            hits, source.vectors.par_offsets, method=self.settings.aggregation, stats=source.stats
        )
        return top_of(ids, scores, k)

    def _prerank_and_fetch(
        self, source: Source, pool: list[str], scores: np.ndarray | None, lexical_ranked: list[str], K: int,
        timings: dict[str, float],
    ) -> tuple[list[str], list[str], list[DocVectors]]:
        """The K vector candidates (the pool narrowed by the centroid pre-rank when it is larger),
        the lexical candidates that are not among them (at most K, in lexical order), and the vectors
        of both, each document fetched once. A store whose centroids are not cheap
        (``capabilities.cheap_centroids`` false) has the pool fetched once: the pre-rank's centroids
        and the rerank share those vectors."""
        t0 = time.perf_counter()
        prerank = scores is not None and len(pool) > K
        fetched: dict[str, DocVectors] = {}
        if prerank and not self.store.capabilities.cheap_centroids:
            in_pool = set(pool)
            ids = pool + [i for i in lexical_ranked if i not in in_pool]
            fetched = dict(zip(ids, self.store.fetch_documents(ids)))
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
        if not fetched:
            t1 = time.perf_counter()
            fetched = dict(zip(ids, self.store.fetch_documents(ids))) if ids else {}
            timings.update(prerank=_ms(t1 - t0), fetch=_ms(time.perf_counter() - t1))
        return vector_ids, lexical_ids, [fetched[i] for i in ids]

    # -- scoring ----------------------------------------------------------------------------------
    def _ranked(
        self, source: Source, cand_ids: list[str], docs: list[DocVectors], lexical: LexicalHits | None,
        spec: HybridSpec | None, offset: int, size: int,
    ) -> list[Hit]:
        if not cand_ids:
            return []
        sdr = score_documents(source.vectors, docs, source.stats)
        if spec is None:
            return [Hit(cand_ids[i], float(sdr[i])) for i in rank(cand_ids, sdr)[offset : offset + size]]
        signals = {
            "bm25": np.asarray([lexical.score_of(i) if lexical is not None else 0.0 for i in cand_ids], dtype=np.float64),
            "sdr": sdr,
            "mean": mean_cosines(source.vectors, docs),
        }
        fused = fuse(cand_ids, signals, spec)
        hits = []
        for i in fused.order(cand_ids)[offset : offset + size]:
            detail = {
                name: {"raw": float(signals[name][i]), "weight": float(spec.weights[name]),
                       **({"normalised": float(fused.normalised[name][i])} if name in fused.normalised else {})}
                for name in SIGNALS
            }
            hits.append(Hit(cand_ids[i], float(fused.scores[i]), signals=detail))
        return hits

    def _presented(
        self, source: Source, hits: list[Hit], vectors: list[DocVectors], spec: HybridSpec | None, explain: bool
    ) -> list[Hit]:
        """The returned hits with title, metadata and snippet (and the explanation when asked): the
        documents read in one call without vectors; the snippet from the vectors the rerank
        fetched (a document replaced since is read again whole, vectors included)."""
        documents = self.store.documents_of([h.id for h in hits])
        source_spans = source.spans()
        # one paragraph-score product for every hit, split per hit (P for each is a column block)
        P_all = paragraph_scores(source.vectors, CorpusVectors.from_docs([h.id for h in hits], vectors))
        ends = np.cumsum([v.n_paragraphs for v in vectors])
        out = []
        for h, vecs, end in zip(hits, vectors, ends.tolist()):
            P: np.ndarray | None = P_all[:, end - vecs.n_paragraphs : end]
            doc = documents.get(h.id)
            if doc is not None and _paragraph_sizes(doc) != tuple(np.diff(vecs.par_offsets).tolist()):
                try:
                    stored = self.store.get(h.id)
                    doc, vecs, P = stored.document, stored.vectors, None
                except DocumentNotFoundError:
                    doc = None
            if doc is None:  # deleted since it was scored: the hit stays, without details
                out.append(Hit(h.id, h.score, signals=h.signals))
                continue
            ex = None
            if explain:
                ex = explain_pair(source, doc, vecs, source_spans=source_spans, P=P)
                first = ex["paragraph_pairs"][0]
                snippet = {**first["sentence_pairs"][0], "source_paragraph": first["source_paragraph"],
                           "candidate_paragraph": first["candidate_paragraph"]}
                if spec is not None and h.signals is not None:
                    ex["hybrid"] = {"score": h.score, "fusion": spec.fusion, "signals": h.signals}
                    if spec.fusion == "rrf":
                        ex["hybrid"]["rank_constant"] = spec.rank_constant
            else:
                snippet = best_sentence_pair(source, doc, vecs, source_spans=source_spans, P=P)
            out.append(Hit(h.id, h.score, doc.title, ex, h.signals, metadata=dict(doc.metadata), snippet=snippet))
        return out


def _paragraph_sizes(doc: Document) -> tuple[int, ...]:
    return tuple(len(p) for p in doc.paragraphs)


def _ms(seconds: float) -> float:
    return round(seconds * 1e3, 2)
