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
   metadata filter runs inside both searches when the store can (``capabilities.filtered_knn``:
   both stores), else the candidates are over-fetched and filtered (:mod:`sdr_search.reranker.filters`);
   a filter that matches at most K documents skips the searches: they are all ranked exactly;
   several like sources search as one (:func:`merge_sources`);
5. the centroid pre-rank narrows the vector pool to K (:mod:`sdr_search.indexer.prerank`);
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
   fetched; explain (optional): the best paragraph pairs and their best sentence pairs per hit.

Character offsets (``source_start``/``source_end``, ``candidate_start``/``candidate_end``) index a
document's *stored text*, :attr:`Document.text` (:func:`sentence_spans`): the title, then each
SDR paragraph's sentences joined by one space, blocks separated by a blank line (``"\n\n"``), in
Python string positions (code points). The source's offsets index its stored text when it is an
indexed (or pre-encoded) document, and the request's own text when it is new text
(:meth:`Query.request_text`, :func:`aligned_spans`): ``text`` as sent, or the ``paragraphs`` (every
section's paragraphs) joined by a blank line. :attr:`MLTResult.source_offsets` says which.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from bisect import bisect_right
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal, Mapping, Sequence

import numpy as np
from pydantic import AliasChoices, Field
from pydantic_settings import SettingsConfigDict

from sdr_search.core.documents import Document
from sdr_search.core.embed import doc_vectors
from sdr_search.core.encoder import SentenceEncoder
from sdr_search.core.errors import (
    DocumentNotFoundError,
    InvalidInputError,
    ModelMismatchError,
    SourceTooLargeError,
    StatsUnavailableError,
)
from sdr_search.core.fusion import METHODS, SIGNALS, HybridSpec, SourceShape, feedback_share, fuse, with_feedback, without_own
from sdr_search.core.scoring import (
    NormStats,
    document_best,
    like_unlike,
    paragraph_scores,
    part_scores,
    rank,
    sdr_scores,
    top_of,
)
from sdr_search.core.settings import HybridSettings, SegmentationSettings
from sdr_search.core.stats import SampledParagraphs, stats_against_sample
from sdr_search.core.vectors import CorpusVectors, DocVectors
from sdr_search.indexer.candidates import AGGREGATIONS, aggregate_hits
from sdr_search.indexer.prerank import paragraph_centroids, prerank_order
from sdr_search.indexer.store import DocumentStore, IndexMeta, LexicalHits, QueryState

from .filters import filter_candidates
from .query import MAX_CANDIDATES, MAX_SOURCES, Query, SourceItem

__all__ = ["METHODS", "MAX_SOURCES", "MLTSettings", "Query", "Source", "merge_sources", "Hit", "MLTResult", "MoreLikeThis", "mean_cosines",
           "explain_pair", "best_sentence_pair", "sentence_spans", "aligned_spans"]

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
        100, gt=0, le=MAX_CANDIDATES,
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
    unlike_weight: float = Field(
        0.5, ge=0, allow_inf_nan=False,
        description="Weight of the unlike term of a query with `unlike` sources: score = mean over the like "
        "sources of each one's score - unlike_weight x mean over the unlike sources (docs/scoring.md 'Several "
        "sources'). 0.5: a document as close to an unlike source as to a like source keeps half its score, so "
        "unlike demotes rather than cancels. A query's own unlike_weight wins.",
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


def _applied(hits: Sequence["Hit"]) -> dict[str, Any]:
    """``{"weights_applied": {signal: share}}``: the weights the fusion used for this query (adaptive
    fusion sets them per query from the source's length), as shares of 1; empty without hits."""
    signals = hits[0].signals if hits else None
    if not signals:
        return {}
    weights = {name: float(v["weight"]) for name, v in signals.items() if "weight" in v}
    total = sum(weights.values())
    return {"weights_applied": {k: v / total for k, v in weights.items()}} if total > 0 else {}


@dataclass(frozen=True)
class Source:
    """A query's source with its normalisation statistics; several sources scored as one
    (:func:`merge_sources`) have their paragraphs, vectors and statistics concatenated and keep
    the sources in :attr:`parts`."""

    document: Document
    vectors: DocVectors
    stats: NormStats
    stats_origin: str  # "stored" | "reference-sample" | "mixed" (merged sources of both origins)
    indexed_id: str | None = None  # set when the source is an indexed document (excluded from results)
    text: str | None = None  # a new-text source: the request's text (Query.request_text), which its offsets index
    parts: tuple["Source", ...] = ()  # merged sources: the sources, in order

    @property
    def members(self) -> tuple["Source", ...]:
        """The sources this one is made of (itself when it is not merged)."""
        return self.parts or (self,)

    @property
    def indexed_ids(self) -> tuple[str, ...]:
        """The indexed documents among the sources (left out of the results)."""
        return tuple(dict.fromkeys(m.indexed_id for m in self.members if m.indexed_id is not None))

    @cached_property
    def part_offsets(self) -> np.ndarray:
        """Source ``p`` owns paragraphs ``part_offsets[p]:part_offsets[p + 1]``."""
        return np.concatenate([[0], np.cumsum([m.vectors.n_paragraphs for m in self.members])]).astype(np.int64)

    def locate(self, i: int) -> tuple[int, int]:
        """Paragraph ``i`` of this (possibly merged) source as ``(source, paragraph in it)``."""
        p = int(np.searchsorted(self.part_offsets, i, side="right")) - 1
        return p, i - int(self.part_offsets[p])

    @property
    def offsets(self) -> str:
        """What the source's character offsets index: ``"stored"`` (its stored text,
        :attr:`Document.text`) or ``"request"`` (the request's text, :meth:`Query.request_text`);
        merged sources of both kinds: ``"mixed"`` (each source's own, as its kind says)."""
        kinds = {"stored" if m.text is None else "request" for m in self.members}
        return kinds.pop() if len(kinds) == 1 else "mixed"

    def spans(self) -> list[list[tuple[int, int] | None]]:
        """Each source sentence's ``(start, end)`` in the text :attr:`offsets` names (None: a
        sentence the request's text does not hold verbatim, up to white space); for merged
        sources, each paragraph's into its own source's text."""
        if self.parts:
            return [row for m in self.parts for row in m.spans()]
        if self.text is None:
            return sentence_spans(self.document)  # type: ignore[return-value]
        return aligned_spans(self.text, self.document)


def merge_sources(sources: Sequence[Source]) -> Source:
    """Several sources scored as one: paragraphs, vectors and statistics concatenated in order
    (one source is returned as it is). Stage 1 searches with all their sentences; the exact score
    splits back per source (:func:`sdr_search.core.scoring.part_scores`)."""
    if len(sources) == 1:
        return sources[0]
    members = tuple(m for s in sources for m in s.members)
    document = Document("", tuple(p for m in members for p in m.document.paragraphs))
    offsets, base = [np.zeros(1, dtype=np.int64)], 0
    for m in members:
        offsets.append(m.vectors.par_offsets[1:] + base)
        base += m.vectors.n_sentences
    vectors = DocVectors(np.concatenate([m.vectors.vectors for m in members]), np.concatenate(offsets))
    stats = NormStats(np.concatenate([m.stats.mu for m in members]), np.concatenate([m.stats.sigma for m in members]))
    origins = {m.stats_origin for m in members}
    return Source(document, vectors, stats, origins.pop() if len(origins) == 1 else "mixed", parts=members)


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
    sources: list[dict[str, Any]] | None = None  # several sources: each one's own score for this hit


@dataclass(frozen=True)
class MLTResult:
    hits: list[Hit]
    candidates: int
    stats_origin: str
    stats_stale: bool
    timings_ms: dict[str, float] = field(default_factory=dict)
    method: str = "sdr"
    hybrid: dict[str, Any] | None = None  # the fusion used (HybridSpec.to_dict()) for method hybrid
    source_offsets: str = "stored"  # what source_start/source_end index: "stored", "request" or "mixed" (Source.offsets)
    sources: list[dict[str, Any]] | None = None  # several sources: each one described (_described)


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
    offsets = source.part_offsets  # several sources: the like sources' mean of their own scores
    score = float(np.mean(np.add.reduceat(best_n, offsets[:-1]) / np.diff(offsets))) if source.parts else float(best_n.mean())
    pairs = []
    for i in np.argsort(-best_n, kind="stable")[:top_paragraphs]:
        i, j = int(i), int(best_j[i])
        S = source.vectors.paragraph(i) @ cand_vectors.paragraph(j).T
        r = S.argmax(axis=1)
        sims = S[np.arange(S.shape[0]), r]
        sentences = [(int(k), int(r[k]), float(sims[k])) for k in np.argsort(-sims, kind="stable")[:top_sentences]]
        pairs.append((i, j, float(P[i, j]), float(N[i, j]), sentences))
    return score, pairs


def _sentence_pair(
    source: Source, candidate: Document, i: int, j: int, k: int, r: int, cosine: float,
    source_spans: Sequence[Sequence[tuple[int, int] | None]] | None,
    candidate_spans: Sequence[Sequence[tuple[int, int]]] | None,
) -> dict[str, Any]:
    pair: dict[str, Any] = {
        **({"source": source.locate(i)[0]} if source.parts else {}),
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
        **({"source": source.locate(i)[0]} if source.parts else {}),
        "source_paragraph": source.locate(i)[1],
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
    return {**pair, "source_paragraph": source.locate(i)[1], "candidate_paragraph": j}


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
        state = self._state()
        spec = self._resolve(state, query)
        K = max(query.candidates or self.settings.candidates, query.offset + query.size)
        likes, unlikes = self._sources(state, query)
        source, against = merge_sources(likes), (merge_sources(unlikes) if unlikes else None)
        unlike_weight = self.settings.unlike_weight if query.unlike_weight is None else float(query.unlike_weight)
        t1 = time.perf_counter()
        timings = {"source": _ms(t1 - t0)}
        exclude = list(dict.fromkeys(source.indexed_ids + (against.indexed_ids if against is not None else ())))
        cand_ids, docs, lexical = self._candidates(source, against, exclude, query, spec, K, timings)
        t5 = time.perf_counter()
        every = source if against is None else merge_sources([source, against])
        share = feedback_share(SourceShape.of(source.document), spec.adaptive) if (
            spec is not None and spec.feedback and len(source.members) == 1) else 0.0
        feedback: list[str] = []
        if share > 0 and cand_ids:  # document feedback: the top hits become further sources
            first = self._ranked(every, 1, unlike_weight, cand_ids, docs, lexical, spec, 0, spec.adaptive.feedback_docs)
            t_read = time.perf_counter()
            timings["feedback_first_rank"] = _ms(t_read - t5)
            found = [s for s in (self._feedback_source(h.id, state) for h in first) if s is not None]
            feedback = [s.indexed_id for s in found]
            timings["feedback_sources"] = _ms(time.perf_counter() - t_read)
        if feedback:
            scored, cand_ids, docs = self._feedback_round(source, against, found, exclude, query, spec, K, cand_ids, docs,
                                                          timings)
            t5 = time.perf_counter()
            hits = self._ranked(scored, 1 + len(feedback), unlike_weight, cand_ids, docs, None, spec, query.offset,
                                query.size, feedback=len(feedback), share=share)
        else:
            hits = self._ranked(every, len(source.members), unlike_weight, cand_ids, docs, lexical, spec, query.offset,
                                query.size)
        t6 = time.perf_counter()
        timings["rerank"] = _ms(t6 - t5)
        if hits and (query.details or query.explain):
            fetched = dict(zip(cand_ids, docs))
            hits = self._presented(source, hits, [fetched[h.id] for h in hits], spec, query.explain)
            timings["explain" if query.explain else "snippets"] = _ms(time.perf_counter() - t6)
        return MLTResult(
            hits, len(cand_ids), every.stats_origin, state.stats.stale, timings,
            method="sdr" if spec is None else "hybrid",
            hybrid=None if spec is None else {**spec.to_dict(), **_applied(hits),
                                              **({"feedback": {"ids": feedback, "share": share}} if feedback else {})},
            source_offsets=every.offsets,
            sources=_described(source, against, unlike_weight) if len(every.members) > 1 else None,
        )

    def _feedback_source(self, doc_id: str, state: QueryState) -> Source | None:
        """A feedback document as a source (its stored vectors and statistics); None when it was
        deleted since the first ranking found it (a concurrent write): the query goes on without it."""
        try:
            return self.source_from_id(doc_id, state)
        except DocumentNotFoundError:
            logger.info("feedback document %r was deleted during the query; ranking without it", doc_id)
            return None

    def _feedback_round(
        self, source: Source, against: Source | None, feedback: list[Source], exclude: list[str],
        query: Query, spec: HybridSpec, K: int, cand_ids: list[str], docs: list[DocVectors], timings: dict[str, float],
    ) -> tuple[Source, list[str], list[DocVectors]]:
        """Document feedback's second search: the source with the ``feedback`` documents as
        further like sources, then the unlike ones; the candidates of the first search followed by
        the new ones this search finds (only those are fetched). Returns the sources to score, the
        candidates and their vectors; each source's BM25 is computed in :meth:`_ranked`."""
        expanded = merge_sources([source, *feedback])
        round_two: dict[str, float] = {}
        more_ids, more_docs, _ = self._candidates(expanded, against, exclude, query, spec, K, round_two,
                                                  known=dict(zip(cand_ids, docs)))
        timings.update({f"feedback_{k}": v for k, v in round_two.items()})
        have = set(cand_ids)
        new = [k for k, i in enumerate(more_ids) if i not in have]
        scored = expanded if against is None else merge_sources([expanded, against])
        return scored, cand_ids + [more_ids[k] for k in new], docs + [more_docs[k] for k in new]

    def _candidates(
        self, source: Source, against: Source | None, exclude: list[str], query: Query, spec: HybridSpec | None, K: int,
        timings: dict[str, float], known: Mapping[str, DocVectors] | None = None,
    ) -> tuple[list[str], list[DocVectors], LexicalHits | None]:
        """Steps 4-6 for ``source``: the candidate ids (the vector ones, then the lexical-only
        ones), their vectors (those in ``known`` are not fetched again), and the BM25 hits of the
        source's text (None when each source is searched on its own, in :meth:`_ranked`)."""
        t1 = time.perf_counter()
        lexical: LexicalHits | None = None
        everything: list[str] | None = None  # rank exactly these: no candidate generation, no pre-rank
        if query.candidate_ids is not None:
            everything = [i for i in dict.fromkeys(query.candidate_ids) if i not in exclude]
        elif query.filter and self.store.capabilities.filtered_knn:
            everything = self._all_matching(query.filter, K, exclude)  # None: more than K match
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
            pool, pool_scores = self._aggregated(source, pool_n, exclude, in_store)
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
                lexical_ranked = filter_candidates(self.store, lexical_ranked, query.filter, limit=2 * K)
                timings["filter"] = _ms(time.perf_counter() - t3)
        vector_ids, lexical_ids, docs = self._prerank_and_fetch(source, pool, pool_scores, lexical_ranked, K, timings,
                                                                known)
        cand_ids = vector_ids + lexical_ids
        return cand_ids, docs, lexical

    # -- settings -------------------------------------------------------------------------------
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
        ``hybrid``. Raises :class:`InvalidInputError` for an unknown method, invalid weights, or
        fusion options with method ``sdr``. ``feedback`` turns document feedback on or off (None:
        the settings' ``SDR_FEEDBACK``); it only acts with adaptive fusion.
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
        return base.replace(fusion=fusion, weights=weights, rank_constant=rank_constant, feedback=feedback)

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
        """The (like) source of ``query`` with its normalisation statistics, as :meth:`run`
        resolves it, several like sources merged (for exhaustive comparisons in tests and benches)."""
        likes, _ = self._sources(self._state(), query)
        return merge_sources(likes)

    def _sources(self, state: QueryState, query: Query) -> tuple[list[Source], list[Source]]:
        """The like and the unlike sources, each with its statistics. New documents are segmented
        first and their sentences counted against ``SDR_MAX_QUERY_SENTENCES`` together (before
        encoding: the cap bounds the encoder's work), then encoded in one call."""
        likes, unlikes = query.likes(), query.unlikes()
        several = query.like is not None or bool(unlikes)
        items: list[tuple[str, SourceItem | None]] = []
        if likes is None:  # a pre-encoded document
            items.append(("source", None))
        else:
            items += [(f"like[{k}]" if several else "source", x) for k, x in enumerate(likes)]
        items += [(f"unlike[{k}]", x) for k, x in enumerate(unlikes)]
        segmentation = self.segmentation(state.meta) if any(x is not None and x.id is None for _, x in items) else None
        new: dict[int, Document] = {}
        for n, (_, x) in enumerate(items):
            if x is not None and x.id is None:
                new[n] = x.new_document(segmentation)
        pre_encoded = query.document.n_sentences if likes is None else 0
        self._check_size(sum(d.n_sentences for d in new.values()) + pre_encoded, several)
        encoded: dict[int, DocVectors] = {}
        if new:
            if self.encoder is None:
                raise InvalidInputError("this engine has no encoder; only indexed documents can be sources")
            self.check_encoder(state.meta)
            matrix = self.encoder.encode([s for d in new.values() for s in d.sentences])
            at = 0
            for n, d in new.items():
                encoded[n] = doc_vectors(d, matrix[at : at + d.n_sentences])
                at += d.n_sentences
        out: list[Source] = []
        for n, (where, x) in enumerate(items):
            try:
                if x is None:
                    vectors = query.vectors
                    out.append(Source(query.document, vectors, self._sampled_stats(vectors, None, state),
                                      "reference-sample"))
                elif x.id is not None:
                    out.append(self.source_from_id(x.id, state))
                else:
                    vectors = encoded[n]
                    out.append(Source(new[n], vectors, self._sampled_stats(vectors, None, state), "reference-sample",
                                      None, x.request_text()))
            except DocumentNotFoundError as e:
                if not several:
                    raise
                raise DocumentNotFoundError(e.doc_id, where) from None
        n_like = 1 if likes is None else len(likes)
        return out[:n_like], out[n_like:]

    def _check_size(self, n_sentences: int, several: bool = False) -> None:
        if n_sentences > self.settings.max_query_sentences:
            what = "the new sources have" if several else "the source has"
            raise SourceTooLargeError(
                f"{what} {n_sentences} sentences, over the limit of "
                f"{self.settings.max_query_sentences} (SDR_MAX_QUERY_SENTENCES)"
            )

    def source_from_id(self, doc_id: str, state: QueryState | None = None) -> Source:
        """An indexed document as the source: its stored statistics, else the reference sample's."""
        stored = self.store.get(doc_id)
        if stored.stats is not None and len(stored.stats.mu) == stored.vectors.n_paragraphs:
            return Source(stored.document, stored.vectors, stored.stats, "stored", doc_id)
        stats = self._sampled_stats(stored.vectors, doc_id, state)
        return Source(stored.document, stored.vectors, stats, "reference-sample", doc_id)

    def _state(self) -> QueryState:
        """The store's state for one query. A reference sample newer than this engine's copy is
        adopted at once, whether or not this query needs it, so the next query's read skips the
        sample (a query by id with stored statistics never needs it, and read and decoded it on
        every request: 44 % of a by-id request on the wiki store)."""
        state = self.store.query_state(reference_version=self._sample_version)
        if state.reference is not None:
            self._reference(state)
        return state

    def _reference(self, state: QueryState | None) -> tuple[SampledParagraphs, tuple[str, ...]]:
        if state is None:
            state = self._state()
        with self._sample_lock:
            ref = state.reference
            # current for the version asked with, or adopted since (by _state) for this state's version
            if self._sample is not None and (state.reference_current or state.stats.version == self._sample_version):
                return self._sample, self._sample_doc_ids
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
    def _all_matching(self, flt: Mapping[str, Any], k: int, exclude: Sequence[str]) -> list[str] | None:
        """The documents ``flt`` matches (but ``exclude``) when they are at most ``k``, else None.
        Ranking them all is the exhaustive answer, and cheaper than the filtered k-NN: on
        OpenSearch 3.5 with 1,500 documents a 1 % filter took 290 ms this way against 911 ms through
        the k-NN (docs/results/filters.md)."""
        skip = set(exclude)
        kept = [i for i in self.store.ids_matching(dict(flt), limit=k + len(skip) + 1) if i not in skip]
        return kept if len(kept) <= k else None  # a list cut at the limit keeps more than k

    def _aggregated(
        self, source: Source, k: int, exclude: Sequence[str], flt: Mapping[str, Any] | None = None,
    ) -> tuple[list[str], np.ndarray]:
        hits = self.store.sentence_knn(source.vectors.vectors, self.settings.knn_k, exclude_ids=exclude,
                                       **({"filter": flt} if flt else {}))
        ids, scores = aggregate_hits(
            hits, source.vectors.par_offsets, method=self.settings.aggregation, stats=source.stats
        )
        return top_of(ids, scores, k)

    def _prerank_and_fetch(
        self, source: Source, pool: list[str], scores: np.ndarray | None, lexical_ranked: list[str], K: int,
        timings: dict[str, float], known: Mapping[str, DocVectors] | None = None,
    ) -> tuple[list[str], list[str], list[DocVectors]]:
        """The K vector candidates (the pool narrowed by the centroid pre-rank when it is larger),
        the lexical candidates that are not among them (at most K, in lexical order), and the vectors
        of both, each document fetched once. A store whose centroids are not cheap
        (``capabilities.cheap_centroids`` false) has the pool fetched once: the pre-rank's centroids
        and the rerank share those vectors. ``known``: vectors this query fetched already (document
        feedback's second search), not fetched again."""
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
        return vector_ids, lexical_ids, [fetched[i] for i in ids]

    def _fetch(self, ids: list[str], known: Mapping[str, DocVectors] | None) -> dict[str, DocVectors]:
        """The vectors of ``ids``: those in ``known`` as they are, the others in one store read."""
        known = known or {}
        out = {i: known[i] for i in ids if i in known}
        missing = [i for i in ids if i not in out]
        if missing:
            out.update(zip(missing, self.store.fetch_documents(missing)))
        return out

    # -- scoring ----------------------------------------------------------------------------------
    def _ranked(
        self, every: Source, n_like: int, unlike_weight: float, cand_ids: list[str], docs: list[DocVectors],
        lexical: LexicalHits | None, spec: HybridSpec | None, offset: int, size: int, *, feedback: int = 0,
        share: float = 0.0,
    ) -> list[Hit]:
        """Score ``cand_ids`` exactly and return the hits ``offset:offset + size``. Each source of
        ``every`` (the ``n_like`` like sources, then the unlike ones) gets its own score, SDR, or
        hybrid: BM25 of its text, its SDR and its mean-vector cosine fused over the candidates; the
        hit's score is :func:`like_unlike` of them (one source: its score). ``feedback``: the last
        that many like sources are feedback documents (hybrid only): the like score is then
        :func:`with_feedback` of the first like source's fused scores and theirs, with ``share``,
        each feedback document's own signals left out of its fusion (:func:`without_own`)."""
        if not cand_ids:
            return []
        parts = every.members
        best = document_best(every.vectors, docs)  # one product for every source's paragraphs
        if len(parts) == 1:
            sdr_rows = sdr_scores(best, every.stats)[None, :]
        else:
            sdr_rows = part_scores(best, every.stats, every.part_offsets)
        if spec is None:
            scores = like_unlike(sdr_rows, n_like, unlike_weight)
            order = rank(cand_ids, scores)[offset : offset + size]
            return [Hit(cand_ids[i], float(scores[i]), sources=_part_scores(sdr_rows[:, i], n_like, len(parts)))
                    for i in order]
        lexicals = [lexical] if len(parts) == 1 else [
            self.store.lexical_search(m.document.text, 0, score_ids=cand_ids) for m in parts
        ]
        signals, fused = [], []
        paragraphs = np.asarray([d.n_paragraphs for d in docs], dtype=np.int64)
        user = n_like - feedback  # the like sources the query named
        at = {c: i for i, c in enumerate(cand_ids)}
        own = [at.get(m.indexed_id) for m in parts[user:n_like]]  # a feedback document's place among the candidates
        for p, (m, lex, sdr) in enumerate(zip(parts, lexicals, sdr_rows)):
            part_signals = {
                "bm25": np.asarray([lex.score_of(i) if lex is not None else 0.0 for i in cand_ids], dtype=np.float64),
                "sdr": sdr,
                "mean": mean_cosines(m.vectors, docs),
            }
            signals.append(part_signals)
            fused.append(fuse(cand_ids, without_own(part_signals, own[p - user]) if user <= p < n_like else part_signals,
                              spec, source=SourceShape.of(m.document), paragraphs=paragraphs))
        rows = np.stack([f.scores for f in fused])
        liked = with_feedback(rows[:user].mean(axis=0), rows[user:n_like], share, own)  # no feedback: the like mean
        scores = like_unlike(np.vstack([liked[None, :], rows[n_like:]]), 1, unlike_weight)
        hits = []
        for i in rank(cand_ids, scores)[offset : offset + size]:
            detail = {  # each signal of the named like sources (their mean with several); adaptive: the weights used
                name: {"raw": float(np.mean([sig[name][i] for sig in signals[:user]])),
                       "weight": float(np.mean([f.weights.get(name, 0.0) for f in fused[:user]]))
                       if spec.fusion == "adaptive" else float(spec.weights[name]),
                       **({"normalised": float(np.mean([f.normalised[name][i] for f in fused[:user]]))}
                          if name in fused[0].normalised else {})}
                for name in SIGNALS
            }
            hits.append(Hit(cand_ids[i], float(scores[i]), signals=detail,
                            sources=_part_scores([f.scores[i] for p, f in enumerate(fused) if not user <= p < n_like],
                                                 user, len(parts) - feedback)))
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
                out.append(Hit(h.id, h.score, signals=h.signals, sources=h.sources))
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
            out.append(Hit(h.id, h.score, doc.title, ex, h.signals, metadata=dict(doc.metadata), snippet=snippet,
                           sources=h.sources))
        return out


def _part_scores(values: Sequence[float], n_like: int, n_parts: int) -> list[dict[str, Any]] | None:
    """Each source's own score for one hit (None with one source)."""
    if n_parts == 1:
        return None
    return [{"role": "like" if p < n_like else "unlike", "index": p if p < n_like else p - n_like,
             "score": float(v)} for p, v in enumerate(values)]


def _described(source: Source, against: Source | None, unlike_weight: float) -> list[dict[str, Any]]:
    """The sources of a query with several: role, position, id (an indexed one), size,
    statistics origin, what its offsets index, and the unlike weight."""
    out = []
    for role, merged in (("like", source), ("unlike", against)):
        for k, m in enumerate(merged.members if merged is not None else ()):
            out.append({"role": role, "index": k, **({"id": m.indexed_id} if m.indexed_id is not None else {}),
                        "paragraphs": m.vectors.n_paragraphs, "sentences": m.vectors.n_sentences,
                        "stats": m.stats_origin, "offsets": m.offsets,
                        **({"weight": -unlike_weight} if role == "unlike" else {})})
    return out


def _paragraph_sizes(doc: Document) -> tuple[int, ...]:
    return tuple(len(p) for p in doc.paragraphs)


def _ms(seconds: float) -> float:
    return round(seconds * 1e3, 2)
