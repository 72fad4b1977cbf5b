"""Response schemas of the HTTP service (pydantic; with the query contract of :mod:`.query`, whose
:class:`~.query.MoreLikeThisRequest` is the request body, they define the OpenAPI spec).

Bounds are part of the API contract and fixed (they appear in ``openapi.json``); operational limits
(body bytes, source sentences, concurrency) are :class:`sdr_search.reranker.settings.ServiceSettings`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

from .query import (  # the query contract (the request body is its public model)
    MAX_CANDIDATES,
    MAX_FILTER_FIELDS,
    MAX_FROM,
    MAX_SIZE,
    NOT_BLANK_PATTERN,
    MoreLikeThisRequest,
    NonBlank,
    Section,
    SourceItem,
    Weights,
    _drop_null_defaults,
)

INDEX_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"

__all__ = [
    "MAX_SIZE",
    "MAX_FROM",
    "MAX_CANDIDATES",
    "MAX_FILTER_FIELDS",
    "INDEX_PATTERN",
    "NOT_BLANK_PATTERN",
    "Section",
    "Weights",
    "MoreLikeThisRequest",
    "SourceItem",
    "SourceScore",
    "SourceInfo",
    "SentencePair",
    "Snippet",
    "ParagraphPair",
    "Explanation",
    "SignalScore",
    "HybridExplanation",
    "Fusion",
    "Hit",
    "StatsState",
    "MoreLikeThisResponse",
    "DocumentResponse",
    "IndexHealth",
    "EncoderHealth",
    "HealthResponse",
    "ErrorBody",
    "ErrorResponse",
    "response_from",
    "stored_text",
]

_OFFSETS = (
    "Character offsets (Python string positions, i.e. Unicode code points; end exclusive) of the sentence: the "
    "candidate's into its stored text (`text` of GET /v1/indices/{index}/documents/{id}); the source's into the "
    "text `source_offsets` names."
)


class SentencePair(BaseModel):
    source_sentence: str = Field(..., description="A whole source sentence.")
    candidate_sentence: str = Field(..., description="The candidate sentence most similar to it (whole).")
    cosine: float = Field(..., description="Cosine similarity of the two sentence vectors.")
    source: int | None = Field(
        None, description="With several sources (`like`): which like source the sentence is from (its position)."
    )
    source_start: int | None = Field(
        None, description="Where the source sentence starts. " + _OFFSETS + " Absent when a new-text source's "
        "sentence is not found verbatim (up to white space) in the request's text."
    )
    source_end: int | None = Field(None, description="Where the source sentence ends (exclusive).")
    candidate_start: int | None = Field(None, description="Where the candidate sentence starts in its stored text.")
    candidate_end: int | None = Field(None, description="Where the candidate sentence ends (exclusive).")


class Snippet(SentencePair):
    """The hit's best sentence pair: the best sentence pair of its best paragraph pair (the first
    sentence pair of the explanation)."""

    source_paragraph: int = Field(..., description="Position of the source paragraph.")
    candidate_paragraph: int = Field(..., description="Position of the candidate paragraph.")


class ParagraphPair(BaseModel):
    source: int | None = Field(None, description="With several sources: which like source (its position in `like`).")
    source_paragraph: int = Field(..., description="Position of the source paragraph (in its own source).")
    candidate_paragraph: int = Field(..., description="Position of its best candidate paragraph.")
    paragraph_score: float = Field(..., description="P_ij: mean over source sentences of the best cosine.")
    normalised_score: float = Field(..., description="N_ij = (P_ij - mu_i) / sigma_i.")
    sentence_pairs: list[SentencePair]


class SignalScore(BaseModel):
    raw: float = Field(..., description="The signal's score for this document.")
    normalised: float | None = Field(
        None, description="After per-query normalisation (for rrf: 1 / (k + rank)); absent for a signal of weight 0."
    )
    weight: float


class HybridExplanation(BaseModel):
    score: float = Field(..., description="The fused score (the hit's score).")
    fusion: Literal["zscore", "minmax", "rrf", "adaptive"]
    rank_constant: int | None = None
    signals: dict[str, SignalScore] = Field(..., description="bm25, sdr and mean: raw and normalised scores.")


class Explanation(BaseModel):
    score: float = Field(..., description="S(s, c): mean over source paragraphs of the best normalised score.")
    paragraph_pairs: list[ParagraphPair]
    hybrid: HybridExplanation | None = Field(None, description="Hybrid hits: how the fused score was made.")


class FeedbackUsed(BaseModel):
    ids: list[str] = Field(..., description="The feedback documents: the top hits of the first ranking, in order.")
    share: float = Field(..., description="Their share of each hit's score: f h / (h + n) for a source of n sentences.")


class Fusion(BaseModel):
    fusion: Literal["zscore", "minmax", "rrf", "adaptive"]
    weights: dict[str, float]
    rank_constant: int | None = None
    adaptive: dict[str, float] | None = Field(
        None, description="Adaptive fusion: its parameters (half_sentences n0, mean_weight, evidence_power, "
        "evidence_top, length_correction c, feedback_docs k, feedback_weight f, feedback_half h; docs/scoring.md). "
        "Each hit's signals give the weights this query used."
    )
    weights_applied: dict[str, float] | None = Field(
        None, description="The weights this query's fusion used, as shares of 1 (adaptive fusion sets them per query "
        "from the source's length; `weights` are the configured ones they start from).")
    feedback: FeedbackUsed | None = Field(
        None, description="Set when document feedback ranked this query: the feedback documents and their share.")


class SourceScore(BaseModel):
    role: Literal["like", "unlike"]
    index: int = Field(..., description="Position in `like` or `unlike`.")
    score: float = Field(..., description="This source's own score for the hit (SDR, or the fused hybrid score).")


class SourceInfo(BaseModel):
    role: Literal["like", "unlike"]
    index: int = Field(..., description="Position in `like` or `unlike`.")
    id: str | None = Field(None, description="The indexed document (absent for a new document).")
    paragraphs: int
    sentences: int
    stats: Literal["stored", "reference-sample"] = Field(..., description="Where its normalisation statistics came from.")
    offsets: Literal["stored", "request"] = Field(
        ..., description="What its character offsets index: its stored text, or the item's own text (`text`, or "
        "`paragraphs` joined by a blank line)."
    )
    weight: float | None = Field(None, description="Unlike sources: minus the unlike weight.")


class Hit(BaseModel):
    id: str
    score: float = Field(..., description="Method sdr: the SDR score S(s, c); hybrid: the fused score; several "
                         "sources: the like mean minus unlike_weight x the unlike mean.")
    title: str | None = Field(None, description="The document's title (absent when it has none).")
    metadata: dict[str, Any] | None = Field(None, description="The document's metadata as stored.")
    snippet: Snippet | None = Field(None, description="The best-matching source/candidate sentence pair.")
    sources: list[SourceScore] | None = Field(None, description="Several sources: each one's own score for this hit.")
    explanation: Explanation | None = None


class StatsState(BaseModel):
    origin: Literal["stored", "reference-sample", "mixed"] = Field(
        ..., description="Where the source's normalisation statistics came from ('mixed': several sources, of both "
        "origins; see `sources`)."
    )
    stale: bool = Field(..., description="Documents changed since the last statistics refresh (`sdr stats`).")


class MoreLikeThisResponse(BaseModel):
    index: str
    method: Literal["sdr", "hybrid"]
    hybrid: Fusion | None = Field(None, description="The fusion used (method hybrid).")
    hits: list[Hit]
    candidates: int = Field(..., description="Documents reranked exactly (after the filter, when one is given).")
    stats: StatsState
    source_offsets: Literal["stored", "request", "mixed"] = Field(
        ..., description="What `source_start`/`source_end` index: 'stored', the source document's stored text (an "
        "indexed source, by `id`); 'request', the request's own text: `text` as sent, or `paragraphs` (every "
        "section's `paragraphs`, in order) joined by a blank line (\"\\n\\n\"; section titles not included). "
        "Several sources: each pair's `source` says which; 'mixed' when some are stored and some new (`sources`)."
    )
    sources: list[SourceInfo] | None = Field(None, description="Several sources (like/unlike): each one described.")
    timings_ms: dict[str, float]


class DocumentResponse(BaseModel):
    id: str
    title: str | None = None
    metadata: dict[str, Any]
    paragraphs: list[list[str]] = Field(..., description="SDR paragraphs, each a list of sentences.")
    text: str = Field(
        None,  # type: ignore[assignment]
        description="The stored text, which the character offsets of results index: the title, then each "
        "paragraph's sentences joined by one space, blocks separated by a blank line (\"\\n\\n\").",
    )

    @model_validator(mode="after")
    def _stored_text(self) -> "DocumentResponse":
        if self.text is None:
            self.text = stored_text(self.title, self.paragraphs)
        return self


def stored_text(title: str | None, paragraphs: list[list[str]]) -> str:
    """A document's stored text (:attr:`sdr_search.core.documents.Document.text`) from its title
    and paragraphs."""
    return "\n\n".join(([title] if title else []) + [" ".join(p) for p in paragraphs])


class IndexHealth(BaseModel):
    status: Literal["ok", "unavailable"]
    documents: int | None = None
    error: str | None = None


class EncoderHealth(BaseModel):
    status: Literal["ok", "unavailable", "absent"]
    model: str | None = None
    error: str | None = None


class HealthResponse(BaseModel):
    status: Literal["ok", "unavailable"]
    indices: dict[str, IndexHealth]
    encoder: EncoderHealth


class ErrorBody(BaseModel):
    type: str = Field(..., description="Error class, e.g. DocumentNotFoundError, RequestValidationError.")
    message: str
    details: list[dict[str, Any]] | None = Field(None, description="Per-field problems of a validation error.")


class ErrorResponse(BaseModel):
    error: ErrorBody



# -- translation to and from the engine (the service and `sdr mlt --json` share these) -------------


def response_from(result, index: str) -> MoreLikeThisResponse:
    """The response body for an engine :class:`~sdr_search.reranker.engine.MLTResult`."""
    return MoreLikeThisResponse(
        index=index,
        method=result.method,
        hybrid=Fusion.model_validate(result.hybrid) if result.hybrid is not None else None,
        hits=[Hit(id=h.id, score=h.score, title=h.title,
                  metadata=dict(h.metadata) if h.metadata is not None else None,
                  snippet=Snippet.model_validate(h.snippet) if h.snippet is not None else None,
                  sources=[SourceScore.model_validate(x) for x in h.sources] if h.sources is not None else None,
                  explanation=Explanation.model_validate(h.explanation) if h.explanation is not None else None)
              for h in result.hits],
        candidates=result.candidates,
        stats=StatsState(origin=result.stats_origin, stale=result.stats_stale),
        source_offsets=result.source_offsets,
        sources=[SourceInfo.model_validate(x) for x in result.sources] if result.sources is not None else None,
        timings_ms=result.timings_ms,
    )
