"""Request and response schemas of the HTTP service (pydantic; they define the OpenAPI spec).

Bounds here are part of the API contract and fixed (they appear in ``openapi.json``); operational
limits (body bytes, source sentences, concurrency) are :class:`sdr_search.reranker.settings.ServiceSettings`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    WithJsonSchema,
    model_validator,
)

from sdr_search.core.documents import ID_PATTERN, ID_RULE, MAX_ID_LENGTH, check_id

from .engine import MAX_CANDIDATES, MAX_FROM, MAX_SIZE, MAX_SOURCES  # the query contract's limits

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
    "query_from_request",
    "response_from",
    "stored_text",
]

MAX_FILTER_FIELDS = 16
MAX_WEIGHT = 1000.0
MAX_RANK_CONSTANT = 10_000
INDEX_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"

# A paragraph or text must hold a character that is not white space in Python's sense
# (str.isspace, as the segmenter strips): a blank source has no sentence to encode. The schema
# states the same rule as a pattern (written for ECMA and Python regex engines alike).
NOT_BLANK_PATTERN = r"[^\s\x1c-\x1f\x85]"


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must contain a character other than white space")
    return value


NonBlank = Annotated[
    str, AfterValidator(_not_blank), WithJsonSchema({"type": "string", "minLength": 1, "pattern": NOT_BLANK_PATTERN})
]
# The one id rule of the indexer and the server (sdr_search.core.documents.check_id): an integer is
# the same id as its decimal string; surrounding white space and control characters are refused.
RequestId = Annotated[str, BeforeValidator(check_id), WithJsonSchema({"anyOf": [
    {"type": "string", "minLength": 1, "maxLength": MAX_ID_LENGTH, "pattern": ID_PATTERN},
    {"type": "integer"}], "description": ID_RULE})]
Scalar = Union[str, int, float, bool]


def _drop_null_defaults(schema: dict[str, Any]) -> None:
    """Optional fields are typed without ``None``: an explicit JSON null is rejected and the schema says
    "string", not "string or null"; an absent field keeps the default ``None``, which the schema omits."""
    for prop in schema.get("properties", {}).values():
        if "default" in prop and prop["default"] is None:
            del prop["default"]


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra=lambda schema, cls: _drop_null_defaults(schema))

    title: str = Field(None, max_length=10_000, description="Section title (not scored).")  # type: ignore[assignment]
    paragraphs: list[NonBlank] = Field(..., min_length=1, description="Paragraphs of raw text.")


class Weights(BaseModel):
    """Weight per hybrid signal; a signal left out weighs 0; at least one weight must be > 0."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=lambda schema, cls: _weights_schema(schema))

    bm25: float = Field(None, ge=0, le=MAX_WEIGHT, allow_inf_nan=False,  # type: ignore[assignment]
                        description="Lexical BM25 of the whole source text.")
    sdr: float = Field(None, ge=0, le=MAX_WEIGHT, allow_inf_nan=False,  # type: ignore[assignment]
                       description="Exact SDR score.")
    mean: float = Field(None, ge=0, le=MAX_WEIGHT, allow_inf_nan=False,  # type: ignore[assignment]
                        description="Cosine of the mean sentence vectors (one vector per document).")

    @model_validator(mode="after")
    def _one_positive(self) -> "Weights":
        if not any((v or 0) > 0 for v in (self.bm25, self.sdr, self.mean)):
            raise ValueError("at least one of bm25, sdr, mean needs a weight > 0")
        return self

    def as_dict(self) -> dict[str, float]:
        return {k: float(v) for k, v in (("bm25", self.bm25), ("sdr", self.sdr), ("mean", self.mean)) if v is not None}


def _weights_schema(schema: dict[str, Any]) -> None:
    _drop_null_defaults(schema)
    schema["anyOf"] = [
        {"required": [k], "properties": {k: {"type": "number", "exclusiveMinimum": 0}}} for k in ("bm25", "sdr", "mean")
    ]


def _request_schema(schema: dict[str, Any]) -> None:
    _drop_null_defaults(schema)
    schema["oneOf"] = [{"required": [k]} for k in SOURCE_FIELDS]
    schema["not"] = {  # fusion options contradict method "sdr"
        "required": ["method"], "properties": {"method": {"const": "sdr"}},
        "anyOf": [{"required": [k]} for k in HYBRID_OPTIONS],
    }
    schema["examples"] = [
        {"id": "doc-42", "size": 10},
        {"text": "The appellant was convicted of murder.\n\nThe appeal was dismissed.", "size": 5,
         "filter": {"court": "supreme"}, "explain": True},
        {"id": "doc-42", "method": "hybrid", "fusion": "zscore", "weights": {"bm25": 1, "mean": 1, "sdr": 0.5}},
    ]


SOURCE_FIELDS = ("id", "text", "paragraphs", "sections", "like")
HYBRID_OPTIONS = ("fusion", "weights", "rank_constant")


class SourceItem(BaseModel):
    """One source of `like` / `unlike` given as an object: exactly one of `id`, `text`,
    `paragraphs`, `sections` (and, for a new document, an optional `title`)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=lambda schema, cls: _source_item_schema(schema))

    id: RequestId = Field(None, description="An indexed document.")  # type: ignore[assignment]
    text: NonBlank = Field(None, description="A new document as raw text.")  # type: ignore[assignment]
    paragraphs: list[NonBlank] = Field(None, min_length=1, description="A new document as paragraphs.")  # type: ignore[assignment]
    sections: list[Section] = Field(None, min_length=1, description="A new document as sections.")  # type: ignore[assignment]
    title: str = Field(None, max_length=10_000, description="A new document's title.")  # type: ignore[assignment]

    @model_validator(mode="after")
    def _one(self) -> "SourceItem":
        given = [k for k in ("id", "text", "paragraphs", "sections") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"a source is exactly one of id, text, paragraphs or sections (found: {', '.join(given) or 'none'})")
        if self.id is not None and self.title is not None:
            raise ValueError("title applies to a new document, not to an id")
        return self

    def as_source(self) -> dict[str, Any]:
        out = self.model_dump(exclude_none=True)
        if self.sections is not None:
            out["sections"] = [s.model_dump(exclude_none=True) for s in self.sections]
        return out


def _source_item_schema(schema: dict[str, Any]) -> None:
    _drop_null_defaults(schema)
    schema["oneOf"] = [{"required": [k]} for k in ("id", "text", "paragraphs", "sections")]
    schema["not"] = {"required": ["id", "title"]}  # a title belongs to a new document


def _source_kind(value: Any) -> str:
    return "object" if isinstance(value, (dict, SourceItem)) else "id"


Sources = list[Annotated[Union[Annotated[RequestId, Tag("id")], Annotated[SourceItem, Tag("object")]],
                         Discriminator(_source_kind)]]


class MoreLikeThisRequest(BaseModel):
    """Exactly one source: an indexed document (``id``), a new document (``text``,
    ``paragraphs`` or ``sections``), or several (``like``); optionally ``unlike`` sources."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra=lambda schema, cls: _request_schema(schema),
    )

    id: RequestId = Field(  # type: ignore[assignment]
        None, description="An indexed document (left out of its own results)."
    )
    text: NonBlank = Field(  # type: ignore[assignment]
        None,
        description="A new document as raw text: paragraphs separated by blank lines (or by line breaks when "
        "there is no blank line).",
    )
    paragraphs: list[NonBlank] = Field(  # type: ignore[assignment]
        None, min_length=1, description="A new document as a list of paragraphs."
    )
    sections: list[Section] = Field(  # type: ignore[assignment]
        None, min_length=1, description="A new document as sections (title + paragraphs)."
    )
    like: Sources = Field(  # type: ignore[assignment]
        None, min_length=1, max_length=MAX_SOURCES,
        description="Several sources at once: each an indexed document's id (a string or integer) or an object "
        "with one of id, text, paragraphs, sections. The score is the mean of each source's own score (SDR, or "
        "the fused hybrid score) minus `unlike_weight` x the mean over `unlike` (docs/scoring.md 'Several "
        "sources'). Indexed sources are left out of the results.",
    )
    unlike: Sources = Field(  # type: ignore[assignment]
        None, max_length=MAX_SOURCES,
        description="Sources the results should not resemble, as in `like`: they do not find candidates, they "
        "lower the score of candidates close to them. At most 16.",
    )
    unlike_weight: float = Field(  # type: ignore[assignment]
        None, ge=0, le=MAX_WEIGHT, allow_inf_nan=False,
        description="Weight of the unlike term (default: the server's SDR_UNLIKE_WEIGHT, 0.5).",
    )
    size: int = Field(10, ge=1, le=MAX_SIZE, description="Hits to return.")
    offset: int = Field(0, alias="from", ge=0, le=MAX_FROM, description="Hits to skip (paging).")
    candidates: int = Field(  # type: ignore[assignment]
        None, ge=1, le=MAX_CANDIDATES,
        description="K: documents reranked exactly (default: the server's SDR_CANDIDATES, 100). Raised to "
        "from + size when smaller.",
    )
    filter: dict[str, Union[Scalar, list[Scalar]]] = Field(  # type: ignore[assignment]
        None, max_length=MAX_FILTER_FIELDS,
        description="Metadata equality filters {field: value}; every field must match. A list value matches "
        "any of its items; a stored list matches when any of its items equals the value. The filter runs inside "
        "the candidate searches (the nested k-NN search and BM25 visit only matching documents), so every hit "
        "matches and a filter matching few documents still returns `size` hits when that many match.",
    )
    explain: bool = Field(
        False,
        description="Add to each hit the three levels of its SDR score: the document score, the best paragraph "
        "pairs with raw and normalised scores, and for each pair the best sentence pairs with their cosines.",
    )

    method: Literal["sdr", "hybrid"] = Field(  # type: ignore[assignment]
        None,
        description="'sdr': vector candidates ranked by exact SDR. 'hybrid': lexical (BM25) candidates too, and "
        "BM25, SDR and the mean-vector cosine fused per query. Default: the index's default, else the server's "
        "SDR_METHOD (default hybrid); `fusion`, `weights` or `rank_constant` without a method mean 'hybrid'.",
    )
    fusion: Literal["zscore", "minmax", "rrf", "adaptive"] = Field(  # type: ignore[assignment]
        None,
        description="Hybrid only: normalise each signal over the candidates (z-score or min-max) and take the "
        "weighted mean, or reciprocal-rank fusion, or adaptive: z-score with weights set per query by the "
        "source's length (short sources lean to BM25, long ones to SDR; `weights` multiply them). Default: the "
        "index's, else SDR_FUSION (adaptive).",
    )
    weights: Weights = Field(  # type: ignore[assignment]
        None, description="Hybrid only: weight per signal. Default: the index's, else SDR_HYBRID_WEIGHTS (bm25=1, sdr=1, mean=1)."
    )
    rank_constant: int = Field(  # type: ignore[assignment]
        None, ge=1, le=MAX_RANK_CONSTANT, description="Hybrid rrf only: k in 1 / (k + rank). Default 60."
    )
    feedback: bool = Field(  # type: ignore[assignment]
        None,
        description="Hybrid adaptive only: document feedback, where a short source is ranked again with its top hits "
        "as further sources (docs/scoring.md 'Document feedback'). Default: the server's SDR_FEEDBACK (true).",
    )

    @model_validator(mode="after")
    def _one_source(self) -> "MoreLikeThisRequest":
        given = [k for k in SOURCE_FIELDS if getattr(self, k) is not None]
        if len(given) != 1:
            found = ", ".join(given) if given else "none"
            raise ValueError(f"give exactly one source: 'id', 'text', 'paragraphs', 'sections' or 'like' (found: {found})")
        if self.method == "sdr":
            extra = [k for k in HYBRID_OPTIONS if getattr(self, k) is not None]
            if extra:
                raise ValueError(f"{', '.join(extra)} {'applies' if len(extra) == 1 else 'apply'} to method 'hybrid' only")
        return self

    def record(self) -> dict[str, Any]:
        """The new-document record for :func:`sdr_search.core.documents.parse_record` (not for ``id``)."""
        if self.text is not None:
            return {"text": self.text}
        if self.paragraphs is not None:
            return {"paragraphs": list(self.paragraphs)}
        return {"sections": [s.model_dump(exclude_none=True) for s in self.sections]}


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


def query_from_request(req: MoreLikeThisRequest):
    """The engine's :class:`~sdr_search.reranker.engine.Query` for a validated request."""
    from .engine import Query

    return Query(
        id=req.id, text=req.text, paragraphs=list(req.paragraphs) if req.paragraphs is not None else None,
        sections=[s.model_dump(exclude_none=True) for s in req.sections] if req.sections is not None else None,
        size=req.size, offset=req.offset, candidates=req.candidates, filter=req.filter, explain=req.explain,
        method=req.method, fusion=req.fusion, rank_constant=req.rank_constant, feedback=req.feedback,
        weights=req.weights.as_dict() if req.weights is not None else None,
        like=_sources(req.like), unlike=_sources(req.unlike), unlike_weight=req.unlike_weight,
    )


def _sources(items):
    if items is None:
        return None
    return [x.as_source() if isinstance(x, SourceItem) else x for x in items]


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
