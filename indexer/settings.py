"""Settings of the indexer's stores, read from the environment with documented defaults.

:class:`EmbeddedStoreSettings` (prefix ``SDR_STORE_``) tunes the embedded store. The settings
that decide how stored bytes are read (vector dtype, HNSW graph shape) are recorded in the store
when it is created and win over these values when the store is reopened.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["EmbeddedStoreSettings"]


class EmbeddedStoreSettings(BaseSettings):
    """The embedded (single-directory) store: vector file, FAISS HNSW index, SQLite catalogue."""

    model_config = SettingsConfigDict(env_prefix="SDR_STORE_", extra="ignore")

    hnsw_m: int = Field(
        16,
        ge=2,
        le=256,
        description=(
            "HNSW graph degree (links per node). Higher raises recall and memory (about "
            "M x 8 bytes per sentence) and slows indexing. Recorded at creation; a reopened store "
            "keeps its own value. Default as OpenSearch k-NN."
        ),
    )
    hnsw_ef_construction: int = Field(
        100,
        ge=1,
        description=(
            "Candidate list size while building the HNSW graph. Higher gives a better graph "
            "(recall) at the cost of slower indexing. Recorded at creation. Default as OpenSearch k-NN."
        ),
    )
    ann_codes: Literal["float32", "fp16", "sq8"] = Field(
        "float32",
        description=(
            "What the FAISS HNSW graph keeps of each sentence vector to choose the k-NN hits: float32 "
            "(1,536 bytes a sentence at dim 384, beside the vector file's own copy), fp16 (768) or sq8 "
            "(384: an 8-bit scalar quantiser, trained on the store's rows). With fp16 or sq8 the hits are "
            "scored again from the float rows of the vector file, so every score stays exact; only which "
            "sentences are hits can change. sq8 makes the graph about 3x smaller (528 against 1,680 bytes a "
            "sentence with its links: about 5 GB instead of 17 at 10M sentences), builds as fast, and gave "
            "the same top-10 fidelity to exhaustive SDR up to 1M sentences; its search decodes codes, so "
            "the candidate stage is slower (docs/results/scale.md). Use it above a few million sentences. "
            "Recorded at creation: a store keeps its own codes (a store made before this setting has "
            "float32); to change them, index into a new store."
        ),
    )
    hit_scores: Literal["exact", "codes"] = Field(
        "exact",
        description=(
            "With fp16 or sq8 codes (ann_codes): how the k-NN hits are scored. 'exact': again from the float "
            "rows of the vector file, so every sentence score the store returns is exact; each query then "
            "reads its hits' rows (about 120 per source sentence, scattered over the file), which needs the "
            "vector file in the page cache: at 2M sentences under a 3.4 GB memory limit the candidate stage "
            "went from 65 to 2,143 ms p50. 'codes': the graph's own approximate scores; they only choose and "
            "order the candidate documents, and the exact SDR rerank still reads float rows (the K candidates' "
            "rows, contiguous per document), so the final scores stay exact (docs/results/scale.md). No "
            "effect on a float32 graph."
        ),
    )
    hnsw_ef_search: int = Field(
        100,
        ge=1,
        description=(
            "Minimum candidate list size at query time (raised to the number of sentence hits "
            "fetched when that is larger). Higher raises recall and query latency."
        ),
    )
    vector_dtype: Literal["float32", "float16"] = Field(
        "float32",
        description=(
            "On-disk type of sentence vectors. float16 halves the vector file and the page cache "
            "it needs; cosines change by about 1e-3. Recorded at creation; a reopened store keeps "
            "its own dtype whatever this says."
        ),
    )
    filter_exact_rows: int = Field(
        100_000,
        ge=0,
        description=(
            "A filtered k-NN search (a query with a metadata filter) whose matching documents hold at most this "
            "many sentences is exact (brute force over those rows); above it, the HNSW graph is searched with "
            "the other documents' rows masked out and 1 / selectivity times as many hits fetched. Brute force "
            "costs about source sentences x matching sentences; the masked graph search wastes most of its hits "
            "when the filter is rare."
        ),
    )
    knn_oversample: int = Field(
        4,
        ge=1,
        description=(
            "Sentence hits fetched per wanted document in nested k-NN (k x this). Several "
            "sentences of one document can occupy the hit list; more oversampling means fewer "
            "follow-up searches but a slower first search."
        ),
    )
    knn_rounds: int = Field(
        1,
        ge=1,
        le=5,
        description=(
            "Nested k-NN searches per query row. With 1 (default) a row gets the documents among its "
            "k x oversample nearest sentences, at most k, each scored by its best sentence; a row whose "
            "nearest sentences crowd into fewer than k documents gets fewer. Each further round searches "
            "such rows again with 4x as many hits (4x the efSearch) until they have k. Default by "
            "measurement (bench/two_stage.py): rounds 1 and 3 gave the same IRLeD dev top-10 fidelity "
            "(0.984 at K=100) and wiki fidelity (1.000), and p50 89 vs 159 ms on the 1.14M-sentence wiki "
            "store, where 45% of rows needed a second search."
        ),
    )
    knn_twins: bool = Field(
        False,
        description=(
            "Nested k-NN adds every hit's twins (byte-identical sentence vectors of other documents: "
            "boilerplate, numbering, template lines) at the same similarity, so a sentence shared by more "
            "than k x oversample documents reaches all of them. Off by measurement: keeping the documents "
            "tied at the k-th place among the hits already gives IRLeD dev top-10 fidelity 0.992 at K=100, "
            "twins 0.988 (bench/two_stage.py). Costs one pass over the vector file at the first query "
            "(about 1 s per million sentences)."
        ),
    )
    faiss_save_every: int = Field(
        50_000,
        ge=1,
        description=(
            "Save the FAISS index after this many new sentence rows (and on close). Smaller means "
            "less catch-up work after a crash, but more time spent writing the index file."
        ),
    )
    lexical_merge_fraction: float = Field(
        0.05,
        ge=0.0,
        le=1.0,
        description=(
            "The lexical (BM25) index keeps the documents put since its base segment was built in a "
            "delta segment and masks deleted ones; once the delta and the masked documents together "
            "exceed this fraction of the base's documents (or lexical_merge_min_docs, whichever is "
            "larger), the next search merges them into a new base (no text is tokenised again) and "
            "saves it. Scores are exact either way; a larger delta makes searches after writes slower."
        ),
    )
    lexical_merge_min_docs: int = Field(
        500,
        ge=0,
        description=(
            "Lower bound of the lexical index's merge threshold (see lexical_merge_fraction), so "
            "that a small store does not merge on every write."
        ),
    )
