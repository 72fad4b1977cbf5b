"""Settings of the OpenSearch backend, from the environment (prefix ``SDR_OPENSEARCH_``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from sdr_search.core.retry import Backoff
from sdr_search.indexer.opensearch.hosts import parse_urls

__all__ = ["OpenSearchSettings"]


class OpenSearchSettings(BaseSettings):
    """Connection, write policy and index shape of an OpenSearch store.

    The HNSW parameters, shards and replicas apply when the store creates its index; an existing
    index keeps the values it was created with (recorded in its ``_meta``).
    """

    model_config = SettingsConfigDict(env_prefix="SDR_OPENSEARCH_", extra="ignore")

    url: str = Field(
        "http://localhost:9200",
        description="OpenSearch endpoint (scheme, host, port), or a cluster's nodes comma-separated "
        "(http://a:9200,http://b:9200,http://c:9200). With several, a request whose node cannot be reached or "
        "does not answer within the timeout is sent to the next node at once (the failed node is left out for "
        "dead_timeout); name at least two nodes so that losing one is ridden out.",
    )
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
        "need more than searches; too low fails slow requests, too high hides a hung node. Searches carry it "
        "to the node too (cancel_after_time_interval): the node stops a search the store no longer waits for.",
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
    max_request_bytes: int = Field(
        100 * 1024 * 1024, ge=1,
        description="The cluster's http.max_content_length (100 MB by default): a document whose _bulk "
        "action is larger is refused by name (the others are written) instead of failing the request. "
        "About 4 kB per sentence at 384 dimensions (JSON floats; 6 kB with the base64 copy).",
    )
    max_retries: int = Field(
        5, ge=0,
        description="Retries of a request answered 429 (overload), 502, 503 or 504, or that could not "
        "connect, of a _msearch one of whose searches is answered so, and of bulk items rejected with 429; "
        "with exponential backoff. Timeouts and other "
        "errors are not retried. More retries ride out longer outages but delay reporting them.",
    )
    retry_backoff: float = Field(
        1.0, gt=0,
        description="Seconds before the first retry; doubled at every further retry (capped by "
        "retry_backoff_max). The default 5 retries wait 1+2+4+8+16 = 31 s in all, long enough for a "
        "node restart.",
    )
    retry_backoff_max: float = Field(60.0, gt=0, description="Longest wait between two retries, in seconds.")
    dead_timeout: float = Field(
        60.0, gt=0,
        description="With several node URLs: seconds a node that failed a request is left out before it is "
        "tried again (doubled at each further failure, up to 32x). Short: a revived node serves sooner, but a "
        "dead one costs a failed attempt (a timeout, for a hung node) more often.",
    )
    refresh: Literal["wait_for", "true", "false"] = Field(
        "wait_for",
        description="Refresh policy of writes. 'wait_for': a write returns once searches see it (up to one "
        "refresh interval, 1 s by default). 'true': force a refresh (immediate, costly under load). 'false': "
        "return at once; searches, counts, statistics, queries by id and the hits' titles and text see the write "
        "after the next refresh (fastest for bulk loads; a GET of the document sees it at once).",
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
    engine: Literal["lucene", "faiss"] = Field(
        "lucene",
        description="k-NN engine of a new index (recorded in its _meta). 'lucene': pure Java, in every "
        "k-NN distribution (also the Maven Central one that scripts/opensearch-node.sh installs). 'faiss': "
        "native, faster to build and search at large scale, but needs the k-NN plugin's JNI libraries; "
        "a node without them exits on the first graph build. Fixed at index creation.",
    )
    knn_encoder: Literal["none", "sq"] = Field(
        "none",
        description="Quantisation of the k-NN field's HNSW graph in a new index (lucene engine): 'sq' keeps 7-bit "
        "codes for the graph search (Lucene's scalar quantiser), about a quarter of the float vectors' page "
        "cache, while the sdr plugin's exact scores still read the float vectors, which Lucene keeps beside "
        "them (disk grows by the codes). Measured in docs/results/scale.md. Fixed at index creation.",
    )
    reindex_max_segments: int = Field(
        1, ge=0,
        description="`sdr reindex` into OpenSearch force-merges the new index to at most this many segments per "
        "shard before the alias moves to it (0: no merge). Each segment has its own HNSW graph, and the "
        "candidate search walks every one: on the demo corpus 11 segments as written cost 232 ms at p50 against 61 "
        "merged to one (docs/results/opensearch.md). The merge rebuilds the graphs once; its time grows "
        "faster than the index (docs/results/scale.md).",
    )
    hnsw_ef_search: int = Field(
        100, ge=2,
        description="Candidate list size at query time, sent with every k-NN query "
        "(method_parameters.ef_search, OpenSearch 2.16+; both engines use at least k). Higher raises "
        "recall and latency.",
    )
    shards: int = Field(
        1, ge=1,
        description="Primary shards of a new index. Each shard answers k-NN for its own documents; more "
        "shards spread large corpora over nodes but add per-query overhead.",
    )
    replicas: int = Field(
        0, ge=0,
        description="Replicas of a new index: availability and read throughput on a cluster of several "
        "nodes (set 1 or more there); 0 keeps a single node green.",
    )
    derived_source: Literal["auto", "on", "off"] = Field(
        "auto",
        description="How sentence vectors are kept out of stored _source: 'on' = k-NN derived source "
        "(index.knn.derived_source.enabled true), 'off' = _source.excludes (the setting false), 'auto' = "
        "derived source when the cluster is 3.0 or newer. The index setting is always written explicitly.",
    )
    plugin: Literal["auto", "on", "off"] = Field(
        "auto",
        description="Use the node's sdr plugin (opensearch-plugin/: candidates, exact SDR and vector reads next "
        "to the data) when it is installed. 'auto': detected once per store from the node's plugin list; 'on': "
        "required (an error names the node when it lacks it); 'off': never (the Python path: k-NN per "
        "source sentence, vectors fetched, exact SDR in Python).",
    )
    candidate_search: Literal["sentences", "documents"] = Field(
        "sentences",
        description="How the sdr plugin's candidate stage searches for each source sentence. 'sentences': the "
        "k-NN of k x candidate_oversample sentences, each document kept once (its best sentence), the best k "
        "documents, as the embedded store's nested k-NN does. 'documents': the k-NN plugin's nested query (k "
        "distinct documents, HNSW beam max(k, ef_search) documents), which explores far more of the graph "
        "(docs/results/opensearch.md measures both).",
    )
    candidate_oversample: int = Field(
        4, ge=1,
        description="Sentence hits per wanted document in the plugin's 'sentences' candidate search (k x this, at "
        "least hnsw_ef_search), as SDR_STORE_KNN_OVERSAMPLE for the embedded store.",
    )
    vector_copy: Literal["auto", "on", "off"] = Field(
        "auto",
        description="Whether a new index also stores each document's vectors as base64 in _source "
        "(vectors_b64), the Python path's way to read them. 'auto': only when the node lacks the sdr plugin "
        "at creation (with it, vectors are stored once, in the k-NN field, and read through the plugin); "
        "'on' / 'off': always / never. Recorded in the index's _meta; fixed at index creation.",
    )
    recovery_source: Literal["auto", "full", "without-vectors"] = Field(
        "auto",
        description="Without derived source (2.x), OpenSearch keeps each document's whole source, vectors as "
        "JSON floats included, as _recovery_source until merges prune it (half the index as written). "
        "'without-vectors' leaves the vectors out of it (_source.recovery_source_excludes); a replica that "
        "recovers by replaying recent operations would then index those documents without vectors. 'auto': "
        "without vectors for an index created with 0 replicas, full otherwise. Fixed at index creation.",
    )
    lexical_query: Literal["terms", "more_like_this"] = Field(
        "terms",
        description="Lexical (BM25) query of hybrid search. 'terms': the source's most frequent terms as term "
        "queries boosted by their counts, which reproduces the embedded store's BM25 (top-100 overlap 0.98 "
        "on IRLeD dev with 1000 terms, bench/experiments/lexical_variants.py). 'more_like_this': OpenSearch's "
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

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: str) -> str:
        return ",".join(parse_urls(value))

    def backoff(self) -> Backoff:
        """The retry policy of the store's requests and bulk items (:mod:`sdr_search.core.retry`)."""
        return Backoff(self.max_retries, self.retry_backoff, self.retry_backoff_max)
