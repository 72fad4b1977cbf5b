"""The query contract: one typed model of a "more like this" query, used by every door.

:class:`MoreLikeThisRequest` is what a client may send: the HTTP body (its schema is the OpenAPI
spec's), what ``sdr mlt``'s flags build, what the library's :class:`Query` holds. Its rules (exactly
one source, the limits, the id rule, fusion options only with method ``hybrid``, the filter's shape)
are written here once; the HTTP service answers 422 for a body that breaks them, the CLI and the
library raise :class:`~sdr_search.core.errors.InvalidInputError` with the same messages.
:class:`Query` adds what only code can give: a pre-encoded source (``document`` + ``vectors``),
``candidate_ids`` (rank exactly these) and ``details`` (False: no titles or snippets, as
``sdr eval`` ranks).

Bounds here are part of the API contract and fixed (they appear in ``openapi.json``); operational
limits (body bytes, source sentences, concurrency) are settings.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Sequence, Union

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    StrictBool,
    ValidationError,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic.json_schema import SkipJsonSchema

from sdr_search.core.documents import (
    ID_PATTERN, ID_RULE, MAX_ID_LENGTH, Document, check_id, check_text, source_document,
)
from sdr_search.core.errors import InvalidInputError
from sdr_search.core.filters import MAX_FILTER_FIELDS, MAX_FILTER_VALUES, check_filter
from sdr_search.core.metadata import MAX_PATH_LENGTH
from sdr_search.core.settings import SegmentationSettings
from sdr_search.core.vectors import DocVectors

__all__ = [
    "MAX_SIZE", "MAX_FROM", "MAX_CANDIDATES", "MAX_SOURCES", "MAX_FILTER_FIELDS", "MAX_WEIGHT", "MAX_RANK_CONSTANT",
    "NOT_BLANK_PATTERN", "NonBlank", "RequestId", "Scalar", "Section", "Weights", "SourceItem", "MoreLikeThisRequest",
    "Query", "validation_message",
]

MAX_SOURCES = 16
"""Most sources one query may name in ``like``, and in ``unlike``."""

MAX_SIZE = 100
"""Most hits one query may ask for (``size``); an evaluation run (``details=False``) up to :data:`MAX_CANDIDATES`."""

MAX_FROM = 900
"""Most hits one query may skip (``from``/``offset``)."""

MAX_CANDIDATES = 1000
"""Largest K (``candidates``): documents reranked exactly."""

MAX_WEIGHT = 1000.0
MAX_RANK_CONSTANT = 10_000

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


def _number(value: Any) -> Any:
    """A number field takes a number: a boolean or a string is refused, as an id given as a boolean
    is (lax validation would read ``true`` as 1 and ``"5"`` as 5)."""
    if isinstance(value, bool):
        raise ValueError("must be a number, not a boolean")
    if isinstance(value, str):
        raise ValueError("must be a number, not a string")
    return value


Int = Annotated[int, BeforeValidator(_number)]
Float = Annotated[float, BeforeValidator(_number)]


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

    bm25: Float = Field(None, ge=0, le=MAX_WEIGHT, allow_inf_nan=False,  # type: ignore[assignment]
                        description="Lexical BM25 of the whole source text.")
    sdr: Float = Field(None, ge=0, le=MAX_WEIGHT, allow_inf_nan=False,  # type: ignore[assignment]
                       description="Exact SDR score.")
    mean: Float = Field(None, ge=0, le=MAX_WEIGHT, allow_inf_nan=False,  # type: ignore[assignment]
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
    schema["not"] = {"anyOf": [
        {  # fusion options contradict method "sdr"
            "required": ["method"], "properties": {"method": {"const": "sdr"}},
            "anyOf": [{"required": [k]} for k in HYBRID_OPTIONS],
        },
        # a title belongs to a new-document source, not to an id or to several sources
        {"required": ["title"], "anyOf": [{"required": ["id"]}, {"required": ["like"]}]},
        # rank_constant is reciprocal-rank fusion's k: another fusion would ignore it
        {"required": ["rank_constant", "fusion"], "properties": {"fusion": {"not": {"const": "rrf"}}}},
        # explain_matrix applies with explain: true
        {"required": ["explain_matrix"], "properties": {"explain_matrix": {"const": True}},
         "not": {"required": ["explain"], "properties": {"explain": {"const": True}}}},
    ]}
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

    def new_document(self, settings: SegmentationSettings) -> Document:
        """This new document (not an id), segmented with ``settings``."""
        sections = [s.model_dump(exclude_none=True) for s in self.sections] if self.sections is not None else None
        return source_document(text=self.text, paragraphs=self.paragraphs, sections=sections, title=self.title,
                               settings=settings)

    def request_text(self) -> str | None:
        """The text this new source's offsets index: ``text`` as sent; ``paragraphs``, or every
        section's paragraphs in order, joined by a blank line. None for an id."""
        if self.text is not None:
            return self.text
        if self.paragraphs is not None:
            return "\n\n".join(self.paragraphs)
        if self.sections is not None:
            return "\n\n".join(p for section in self.sections for p in section.paragraphs)
        return None


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
    title: str = Field(  # type: ignore[assignment]
        None, max_length=10_000, description="The title of a new-document source (`text`, `paragraphs`, `sections`).")
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
    unlike_weight: Float = Field(  # type: ignore[assignment]
        None, ge=0, le=MAX_WEIGHT, allow_inf_nan=False,
        description="Weight of the unlike term (default: the server's SDR_UNLIKE_WEIGHT, 0.5).",
    )
    size: Int = Field(10, ge=1, le=MAX_SIZE, description="Hits to return.")
    offset: Int = Field(0, alias="from", ge=0, le=MAX_FROM, description="Hits to skip (paging).")
    candidates: Int = Field(  # type: ignore[assignment]
        None, ge=1, le=MAX_CANDIDATES,
        description="K: documents reranked exactly (default: the server's SDR_CANDIDATES, 100). Raised to "
        "from + size when smaller.",
    )
    filter: dict[Annotated[str, Field(min_length=1)], Union[Scalar, list[Scalar]]] = Field(  # type: ignore[assignment]
        None, max_length=MAX_FILTER_FIELDS,
        description="Metadata equality filters {field: value}; every field must match. A field is a metadata key "
        "or a dotted path (`a.b` names a nested object's key and a dotted key alike). Equality is typed: 5 equals "
        "5.0 but not \"5\", a boolean only equals a boolean. A list value matches any of its items; a stored list "
        f"matches when any of its items equals the value. At most {MAX_FILTER_FIELDS} fields, {MAX_FILTER_VALUES:,} "
        f"values per field, fields of at most {MAX_PATH_LENGTH:,} characters; no null. The filter runs inside "
        "the candidate searches (the nested k-NN search and BM25 visit only matching documents), so every hit "
        "matches and a filter matching few documents still returns `size` hits when that many match.",
    )
    explain: StrictBool = Field(
        False,
        description="Add to each hit the three levels of its SDR score: the document score, the best paragraph "
        "pairs with raw and normalised scores, and for each pair the best sentence pairs with their cosines.",
    )
    explain_matrix: StrictBool = Field(
        False,
        description="With `explain`: add to each explanation the whole paragraph-pair matrix (`explanation.matrix`: "
        "every source paragraph against every paragraph of the hit, N_ij, and each cell's best sentence pair with "
        "character offsets). Large: rows x columns cells per hit, at most SDR_MAX_MATRIX_CELLS over the returned "
        "hits (413 beyond; ask fewer hits, e.g. `from` = a hit's rank and `size` 1).",
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
    rank_constant: Int = Field(  # type: ignore[assignment]
        None, ge=1, le=MAX_RANK_CONSTANT, description="Hybrid rrf only: k in 1 / (k + rank). Default 60. With "
        "another fusion (given, or the index's or server's default) it is refused, not ignored."
    )
    feedback: StrictBool = Field(  # type: ignore[assignment]
        None,
        description="Hybrid adaptive only: document feedback, where a short source is ranked again with its top hits "
        "as further sources (docs/scoring.md 'Document feedback'). Default: the server's SDR_FEEDBACK (true).",
    )

    def _given_sources(self) -> list[str]:
        return [k for k in SOURCE_FIELDS if getattr(self, k) is not None]

    @field_validator("filter")
    @classmethod
    def _filter_contract(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None:
            check_filter(value)  # the limits every store applies (sdr_search.core.filters), in the same words
        return value

    @model_validator(mode="after")
    def _one_source(self) -> "MoreLikeThisRequest":
        given = self._given_sources()
        if len(given) != 1:
            found = ", ".join(given) if given else "none"
            raise ValueError(f"give exactly one source: 'id', 'text', 'paragraphs', 'sections' or 'like' (found: {found})")
        if self.title is not None and given[0] not in ("text", "paragraphs", "sections", "document"):
            raise ValueError("title applies to a single new-document source (text, paragraphs or sections); "
                             "give each like item its own")
        if self.explain_matrix and not self.explain:
            raise ValueError("explain_matrix applies with explain: true")
        if self.method == "sdr":
            extra = [k for k in HYBRID_OPTIONS if getattr(self, k) is not None]
            if extra:
                raise ValueError(f"{', '.join(extra)} {'applies' if len(extra) == 1 else 'apply'} to method 'hybrid' only")
        if self.rank_constant is not None and self.fusion not in (None, "rrf"):
            raise ValueError(f"rank_constant applies to fusion 'rrf' only, not to fusion {self.fusion!r}")
        return self

    @model_validator(mode="after")
    def _filter_text(self) -> "MoreLikeThisRequest":
        if self.filter is not None:  # the text rule (the sources' own text is checked where it is segmented)
            check_text(self.filter, "filter")
        return self

    def record(self) -> dict[str, Any]:
        """The new-document record for :func:`sdr_search.core.documents.parse_record` (not for ``id``)."""
        if self.text is not None:
            return {"text": self.text}
        if self.paragraphs is not None:
            return {"paragraphs": list(self.paragraphs)}
        return {"sections": [s.model_dump(exclude_none=True) for s in self.sections]}


_UNION_TAGS = {"object", "id", "str", "int", "float", "bool"}
_TYPE_NAMES = {"str": "a string", "int": "a number", "float": "a number", "bool": "a boolean", "list": "a list of them",
               "object": "an object", "id": "an id"}


def _where(loc: Sequence[Any]) -> tuple[str, str | None]:
    """``like[1].title`` from pydantic's ``("like", 1, "object", "title")``; and the union member a
    location ends in (``str``, ``list[...]``), if any."""
    out, member = "", None
    for part in loc:
        text = str(part)
        if isinstance(part, int):
            out += f"[{part}]"
        elif text in _UNION_TAGS or text.startswith(("list[", "function-", "tagged-union", "[key]")):
            member = "key" if text == "[key]" else text.split("[")[0]
        else:
            out += f".{text}" if out else text
    return out, member


def validation_message(error: ValidationError) -> str:
    """A validation error as one line, ``where: what`` per problem (a value that fits no member of
    a union is one problem naming what it may be)."""
    found: dict[str, list[tuple[str | None, str]]] = {}
    for err in error.errors():
        where, member = _where(err.get("loc", ()))
        found.setdefault(where, []).append((member, str(err.get("msg", "invalid")).removeprefix("Value error, ")))
    parts = []
    for where, problems in found.items():
        members = [m for m, _ in problems if m not in (None, "key")]
        if len(problems) > 1 and len(members) == len(problems):
            names = list(dict.fromkeys(_TYPE_NAMES.get(m, m) for m in members))
            what = "expected " + (", ".join(names[:-1]) + " or " + names[-1] if len(names) > 1 else names[0])
        else:
            what = "; ".join(dict.fromkeys(msg for _, msg in problems))
        if any(m == "key" for m, _ in problems):
            what = f"a field name: {what}"
        where = where.rstrip(".")
        parts.append(f"{where}: {what}" if where else what)
    return "; ".join(parts) or "invalid query"


class Query(MoreLikeThisRequest):
    """One "more like this" query, whichever door it came in by (the contract of
    :class:`MoreLikeThisRequest`), plus what only code can give:

    - ``document`` + ``vectors``: a new document the caller already encoded (instead of a source);
    - ``candidate_ids``: skip candidate generation and rank exactly these documents;
    - ``details``: False returns hits without titles, metadata or snippets (``sdr eval``), and
      allows ``size`` up to :data:`MAX_CANDIDATES`.

    Invalid values raise :class:`InvalidInputError` naming each problem.
    """

    model_config = ConfigDict(extra="forbid", populate_by_name=True, arbitrary_types_allowed=True, frozen=True)

    size: Int = Field(10, ge=1, description="Hits to return (at most MAX_SIZE; MAX_CANDIDATES without details).")
    document: SkipJsonSchema[Document | None] = Field(None, exclude=True)
    vectors: SkipJsonSchema[DocVectors | None] = Field(None, exclude=True)
    candidate_ids: SkipJsonSchema[tuple[str, ...] | None] = Field(None, exclude=True)
    details: SkipJsonSchema[bool] = Field(True, exclude=True)

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as e:
            raise InvalidInputError(validation_message(e)) from None

    def _given_sources(self) -> list[str]:
        return [*super()._given_sources(), *(["document"] if self.document is not None else [])]

    @model_validator(mode="after")
    def _pre_encoded(self) -> "Query":
        if (self.document is None) != (self.vectors is None):
            raise ValueError("a pre-encoded source needs both document and vectors")
        return self

    @model_validator(mode="after")
    def _size_with_details(self) -> "Query":
        most = MAX_SIZE if self.details else MAX_CANDIDATES
        if self.size > most:  # the message of the HTTP body's own bound
            raise ValueError(f"size: Input should be less than or equal to {most}")
        return self

    @classmethod
    def from_request(cls, request: MoreLikeThisRequest) -> "Query":
        """The query of a validated request (the HTTP body): the same fields, nothing added."""
        return cls.model_construct(**{name: getattr(request, name) for name in MoreLikeThisRequest.model_fields},
                                   document=None, vectors=None, candidate_ids=None, details=True)

    # -- the sources, as the engine reads them ------------------------------------------------------
    @property
    def needs_encoder(self) -> bool:
        """Whether a source is new text (to be encoded); indexed and pre-encoded sources are not."""
        return any(x.id is None for x in (*(self.likes() or ()), *self.unlikes()))

    def likes(self) -> tuple[SourceItem, ...] | None:
        """The like sources as items: ``like``, or the one source (None for a pre-encoded ``document``)."""
        if self.like is not None:
            return tuple(_item(x) for x in self.like)
        if self.document is not None:
            return None
        return (SourceItem.model_construct(id=self.id, text=self.text, paragraphs=self.paragraphs,
                                           sections=self.sections, title=self.title),)

    def unlikes(self) -> tuple[SourceItem, ...]:
        return tuple(_item(x) for x in self.unlike or ())

    def request_text(self) -> str | None:
        """The text a single new-text source's offsets index (None for an id, a pre-encoded
        document or several sources: each has its own, :meth:`SourceItem.request_text`)."""
        likes = self.likes() if self.like is None else None
        return likes[0].request_text() if likes else None


def _item(value: Any) -> SourceItem:
    return value if isinstance(value, SourceItem) else SourceItem.model_construct(
        id=value, text=None, paragraphs=None, sections=None, title=None)
