"""What a query returns: the hits (one :class:`Hit` model for the engine and every door) and the
result around them (:class:`MLTResult`), with the small functions that describe them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Sequence

from pydantic import BaseModel, Field
from pydantic.json_schema import SkipJsonSchema

if TYPE_CHECKING:  # pragma: no cover
    from .sources import Source

__all__ = ["SentencePair", "Snippet", "ParagraphPair", "SignalScore", "HybridExplanation", "MatrixRow", "MatrixColumn",
           "ParagraphMatrix", "Explanation",
           "SourceScore", "Hit", "MLTResult", "applied_weights", "part_scores_of", "described_sources"]


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


class MatrixRow(BaseModel):
    source: int | None = Field(None, description="With several sources: which like source (its position in `like`).")
    paragraph: int = Field(..., description="Position of the paragraph in its source.")
    mu: float = Field(..., description="mu_i: the paragraph's normalisation mean (P_ij = mu_i + sigma_i N_ij).")
    sigma: float = Field(..., description="sigma_i: the paragraph's normalisation standard deviation.")
    sentences: list[list[int] | None] = Field(
        ..., description="Each sentence's [start, end] in the source's text (the one `source_offsets` names); null "
        "for a new-text sentence not found verbatim (up to white space) in the request's text.")


class MatrixColumn(BaseModel):
    sentences: list[list[int]] = Field(..., description="Each sentence's [start, end] in the hit's stored text.")


class ParagraphMatrix(BaseModel):
    """Every source paragraph (rows) against every paragraph of the hit (columns): the SDR matrix the
    score is computed from (each row's maximum is that paragraph's best normalised score)."""

    rows: list[MatrixRow]
    columns: list[MatrixColumn]
    normalised: list[list[float]] = Field(..., description="N_ij, rows x columns.")
    sentence_pairs: list[list[tuple[int, int, float]]] = Field(
        ..., description="Each cell's best sentence pair, rows x columns of [k, r, cosine]: sentence k of the row's "
        "paragraph and sentence r of the column's (positions inside the paragraphs; their offsets are "
        "`rows[i].sentences[k]` and `columns[j].sentences[r]`), the pair the explanation lists first for that "
        "paragraph pair.")


class Explanation(BaseModel):
    score: float = Field(..., description="S(s, c): mean over source paragraphs of the best normalised score.")
    paragraph_pairs: list[ParagraphPair]
    hybrid: HybridExplanation | None = Field(None, description="Hybrid hits: how the fused score was made.")
    matrix: ParagraphMatrix | None = Field(
        None, description="With `explain_matrix`: the whole paragraph-pair matrix, each cell with its best sentence pair.")


class SourceScore(BaseModel):
    role: Literal["like", "unlike"]
    index: int = Field(..., description="Position in `like` or `unlike`.")
    score: float = Field(..., description="This source's own score for the hit (SDR, or the fused hybrid score).")


class Hit(BaseModel):
    """One result, as the engine ranks it and every door returns it (HTTP, `sdr mlt --json`, the
    library): `title`, `metadata` and `snippet` are set unless the query asked for no details."""

    id: str
    score: float = Field(..., description="Method sdr: the SDR score S(s, c); hybrid: the fused score; several "
                         "sources: the like mean minus unlike_weight x the unlike mean.")
    title: str | None = Field(None, description="The document's title (absent when it has none).")
    metadata: dict[str, Any] | None = Field(None, description="The document's metadata as stored.")
    snippet: Snippet | None = Field(None, description="The best-matching source/candidate sentence pair.")
    sources: list[SourceScore] | None = Field(None, description="Several sources: each one's own score for this hit.")
    explanation: Explanation | None = None
    signals: SkipJsonSchema[dict[str, SignalScore] | None] = Field(
        None, exclude=True, description="Hybrid: each signal's raw and normalised score and weight (in the response "
        "inside `explanation.hybrid`).")


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


def applied_weights(hits: Sequence[Hit]) -> dict[str, Any]:
    """``{"weights_applied": {signal: share}}``: the weights the fusion used for this query (adaptive
    fusion sets them per query from the source's length), as shares of 1; empty without hits."""
    signals = hits[0].signals if hits else None
    if not signals:
        return {}
    weights = {name: float(v.weight) for name, v in signals.items()}
    total = sum(weights.values())
    return {"weights_applied": {k: v / total for k, v in weights.items()}} if total > 0 else {}


def part_scores_of(values: Sequence[float], n_like: int, n_parts: int) -> list[SourceScore] | None:
    """Each source's own score for one hit (None with one source)."""
    if n_parts == 1:
        return None
    return [SourceScore(role="like" if p < n_like else "unlike", index=p if p < n_like else p - n_like, score=float(v))
            for p, v in enumerate(values)]


def described_sources(source: Source, against: Source | None, unlike_weight: float) -> list[dict[str, Any]]:
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
