"""Response schemas of the HTTP service (pydantic; with the query contract of :mod:`sdr_search.reranker.query`, whose
:class:`~sdr_search.reranker.query.MoreLikeThisRequest` is the request body, they define the OpenAPI spec).

Bounds are part of the API contract and fixed (they appear in ``openapi.json``); operational limits
(body bytes, source sentences, concurrency) are :class:`sdr_search.reranker.service.settings.ServiceSettings`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

from ..query import (  # the query contract (the request body is its public model)
    MAX_CANDIDATES,
    MAX_FILTER_FIELDS,
    MAX_FROM,
    MAX_SIZE,
    NOT_BLANK_PATTERN,
    MoreLikeThisRequest,
    Section,
    SourceItem,
    Weights,
)

from ..results import (  # the hit schema (one Hit for the engine and the response)
    Explanation,
    Hit,
    HybridExplanation,
    ParagraphPair,
    SentencePair,
    SignalScore,
    Snippet,
    SourceScore,
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
    "IndicesResponse",
    "FoundDocument",
    "FindResponse",
    "IndexHealth",
    "ClusterHealth",
    "EncoderHealth",
    "HealthResponse",
    "ErrorBody",
    "ErrorResponse",
    "response_from",
    "stored_text",
]

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


class IndicesResponse(BaseModel):
    indices: list[str] = Field(..., description="The indices this server serves (has open).")


class FoundDocument(BaseModel):
    id: str
    title: str | None = None
    match: Literal["id", "text"] = Field(..., description="'id': the query is this document's id; 'text': BM25 of the "
                                         "query against the document's text (title and paragraphs).")
    score: float | None = Field(None, description="The BM25 score (text matches).")


class FindResponse(BaseModel):
    index: str
    hits: list[FoundDocument] = Field(..., description="The document whose id is the query (first), then the best "
                                      "BM25 matches of the query.")


class ClusterHealth(BaseModel):
    status: Literal["green", "yellow", "red", "unknown"] = Field(
        ..., description="The cluster's health: yellow = a replica is unassigned (a node lost; every document still "
        "served), red = a primary is unassigned; unknown = the cluster did not say in time.")
    nodes: int | None = Field(None, description="Nodes in the cluster.")
    data_nodes: int | None = None
    unassigned_shards: int | None = None
    index_status: Literal["green", "yellow", "red"] | None = Field(None, description="The served index's own health.")
    error: str | None = None


class IndexHealth(BaseModel):
    status: Literal["ok", "degraded", "unavailable"] = Field(
        ..., description="ok; degraded = served, but the index is not green in its cluster (a node lost: a replica "
        "unassigned) or its cluster's health is unknown; unavailable = the index cannot be served.")
    documents: int | None = None
    error: str | None = None
    cluster: ClusterHealth | None = Field(None, description="The cluster behind an OpenSearch store (absent: embedded).")


class EncoderHealth(BaseModel):
    status: Literal["ok", "unavailable", "absent"]
    model: str | None = None
    error: str | None = None


class HealthResponse(BaseModel):
    status: Literal["ok", "degraded", "unavailable"] = Field(
        ..., description="ok (200); degraded (200): every index is served but one is not green; unavailable "
        "(503): an index cannot be served or the encoder does not load.")
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
        hits=list(result.hits),
        candidates=result.candidates,
        stats=StatsState(origin=result.stats_origin, stale=result.stats_stale),
        source_offsets=result.source_offsets,
        sources=[SourceInfo.model_validate(x) for x in result.sources] if result.sources is not None else None,
        timings_ms=result.timings_ms,
    )
