"""The engine's query-time settings (environment prefix ``SDR_``; every default documented in
docs/configuration.md, which ``scripts/gen_configuration.py`` writes from this class)."""

from __future__ import annotations

from typing import Literal

from pydantic import AliasChoices, Field
from pydantic_settings import SettingsConfigDict

from sdr_search.core.settings import HybridSettings

from .candidates import AGGREGATIONS
from .query import MAX_CANDIDATES

__all__ = ["MLTSettings"]


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
        description="Centroid pre-rank (sdr_search.reranker.prerank): the top prerank_factor x K documents by candidate "
        "aggregation are narrowed to K by their aggregation and paragraph-centroid scores; 1 turns it off (the "
        "top K by aggregation). 2 by measurement (bench/two_stage.py, docs/results/two-stage.md): IRLeD dev top-10 fidelity at K=100 "
        "0.988 -> 0.992 (knn_k 50) and 0.978 -> 0.988 (knn_k 20), for about 12 ms on the 1.14M-sentence wiki "
        "store (the embedded store keeps paragraph centroids in memory).",
    )
    aggregation: str = Field(
        "weighted-sum",
        description=f"Candidate aggregation: {', '.join(AGGREGATIONS)}. 'weighted-sum' is the default by "
        "measurement (bench/two_stage.py, bench/experiments/candidates_exact.py: best or tied-best top-10 recall on IRLeD dev "
        "at K=100 with the default knn_k).",
    )
    in_store: bool = Field(
        True,
        description="Run the candidate stage and the exact SDR score inside the store when it can (OpenSearch with "
        "the sdr plugin: capabilities sdr_candidates and exact_sdr), so that no vector travels: the centroid "
        "pre-rank narrows the pool of prerank_factor x K candidates to K from centroid rows computed on the node, "
        "and the K are scored exactly there. false: the store's k-NN hits, and vectors fetched for the Python rerank (the reference "
        "the plugin is tested against).",
    )
    max_query_sentences: int = Field(
        2000, gt=0,
        validation_alias=AliasChoices("SDR_MAX_QUERY_SENTENCES", "SDR_SERVICE_MAX_SOURCE_SENTENCES"),
        description="Largest new-text source, in sentences, for every door (CLI, HTTP, library); larger ones "
        "are refused (SourceTooLargeError, HTTP 413). Encoding time grows linearly: about 1 s per 500 "
        "sentences on 2 CPU cores with bf16. New text with more than 4 x this many possible sentence ends "
        "is refused before it is split (the splitter's work: about 0.6 s at the default). "
        "SDR_SERVICE_MAX_SOURCE_SENTENCES is read as an older name.",
    )
    max_matrix_cells: int = Field(
        400_000, gt=0,
        description="Most paragraph-pair cells an answer with explain_matrix may hold, summed over its hits (source "
        "paragraphs x each hit's paragraphs); more is refused (ExplanationTooLargeError, HTTP 413) before any matrix "
        "is computed. A cell costs about 26 bytes of JSON, so 400,000 is about 10 MB: the largest IRLeD judgment "
        "against the second largest is 560 x 421 = 235,760 cells. Ask one hit at a time (from = its rank, size 1) "
        "for long documents, as the /ui page does.",
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
