"""Settings of the OpenSearch backend, from the environment (prefix ``SDR_OPENSEARCH_``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["OpenSearchSettings"]


class OpenSearchSettings(BaseSettings):
    """Connection, write policy and index shape of an OpenSearch store.

    The HNSW parameters, shards and replicas apply when the store creates its index; an existing
    index keeps the values it was created with (recorded in its ``_meta``).
    """

    model_config = SettingsConfigDict(env_prefix="SDR_OPENSEARCH_", extra="ignore")

    url: str = Field("http://localhost:9200", description="OpenSearch endpoint (scheme, host, port).")
    index: str = Field(
        "sdr",
        description=(
            "Document index or alias. An alias must point to one index; the store pins that index "
            "at first use (re-resolved after close()). State lives in '<concrete index>-sdr-state'."
        ),
    )
    username: str | None = Field(None, description="HTTP basic-auth user (unset: no authentication).")
    password: SecretStr | None = Field(None, description="HTTP basic-auth password.")
    verify_certs: bool = Field(True, description="Verify the server's TLS certificate (https only).")
    ca_certs: str | None = Field(None, description="CA bundle for TLS verification (unset: system CAs).")
    timeout: float = Field(
        60.0, gt=0,
        description="Seconds per request. Bulk writes of large documents and fetches of many candidates "
        "need more than searches; too low fails slow requests, too high hides a hung node.",
    )
    http_compress: bool = Field(
        False,
        description="gzip request bodies. Float vectors in JSON compress about 2x, which helps on a slow "
        "link to a remote cluster, at a CPU cost on both sides.",
    )
    bulk_chunk_docs: int = Field(
        100, ge=1,
        description="Documents per _bulk request. Larger chunks mean fewer round trips but bigger requests "
        "and more work redone when a chunk is rejected.",
    )
    bulk_chunk_bytes: int = Field(
        50_000_000, ge=1,
        description="Largest _bulk request body in bytes (a larger single document is sent alone). Keep it "
        "under the cluster's http.max_content_length (100 MB by default).",
    )
    max_retries: int = Field(
        5, ge=0,
        description="Retries of bulk items (or whole requests) rejected with 429 (overload). Other errors "
        "are never retried. More retries ride out longer overloads but delay reporting them.",
    )
    retry_backoff: float = Field(
        1.0, gt=0,
        description="Seconds before the first 429 retry; doubled at every further retry (capped by "
        "retry_backoff_max).",
    )
    retry_backoff_max: float = Field(60.0, gt=0, description="Longest wait between two 429 retries, in seconds.")
    refresh: Literal["wait_for", "true", "false"] = Field(
        "wait_for",
        description="Refresh policy of writes. 'wait_for': a write returns once searches see it (up to one "
        "refresh interval, 1 s by default). 'true': force a refresh (immediate, costly under load). 'false': "
        "return at once; searches, counts and statistics see the write after the next refresh (fastest for "
        "bulk loads).",
    )
    msearch_batch: int = Field(
        100, ge=1,
        description="Query vectors per _msearch request in nested k-NN. A source with more sentences is sent "
        "in several requests.",
    )
    scan_page_size: int = Field(
        100, ge=1,
        description="Documents per page when scanning the whole index (all_vectors, iter_ids uses 10x). "
        "Each document carries its vectors (~300 kB for 200 sentences x 384 dims).",
    )
    pit_keep_alive: str = Field(
        "5m", description="Keep-alive of the point in time held while scanning all documents."
    )
    hnsw_m: int = Field(
        16, ge=2, le=256,
        description="HNSW graph degree. Higher raises recall and memory (about M x 8 bytes per sentence) and "
        "slows indexing. Fixed at index creation.",
    )
    hnsw_ef_construction: int = Field(
        100, ge=1,
        description="Candidate list size while building the graph: higher gives better recall and slower "
        "indexing. Fixed at index creation.",
    )
    hnsw_ef_search: int = Field(
        100, ge=1,
        description="Candidate list size at query time (index setting index.knn.algo_param.ef_search; faiss "
        "uses at least k). Higher raises recall and latency.",
    )
    shards: int = Field(
        1, ge=1,
        description="Primary shards of a new index. Each shard answers k-NN for its own documents; more "
        "shards spread large corpora over nodes but add per-query overhead.",
    )
    replicas: int = Field(
        1, ge=0,
        description="Replicas of a new index (availability and read throughput; 0 on a single-node cluster "
        "avoids a yellow status).",
    )
    derived_source: Literal["auto", "on", "off"] = Field(
        "auto",
        description="How sentence vectors are kept out of stored _source: 'on' = k-NN derived source "
        "(3.x), 'off' = _source.excludes (2.x), 'auto' = derived source when the cluster is 3.0 or newer.",
    )
    lexical_query: Literal["terms", "more_like_this"] = Field(
        "terms",
        description="Lexical (BM25) query of hybrid search. 'terms': the source's most frequent terms as term "
        "queries boosted by their counts, which reproduces the embedded store's BM25 (top-100 overlap 0.98 "
        "on IRLeD dev with 1000 terms, bench/lexical_variants.py). 'more_like_this': OpenSearch's "
        "more_like_this (terms chosen by count x idf, each counted once; overlap 0.67).",
    )
    lexical_max_terms: int = Field(
        1000, ge=1,
        description="Most source terms in one lexical query (terms or more_like_this max_query_terms). Each "
        "term is one clause: stay under the cluster's indices.query.bool.max_clause_count (1024 by "
        "default). A source with more distinct terms loses its rarest ones.",
    )
    max_sentences: int = Field(
        20_000, ge=1,
        description="Nested objects allowed per document (index.mapping.nested_objects.limit): the largest "
        "document accepted, in sentences. Match SDR_MAX_SENTENCES.",
    )
