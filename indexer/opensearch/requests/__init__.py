"""Pure builders of OpenSearch request bodies for an sdr-search index, and pure readers of the
responses. Nothing here imports or calls a client: every function takes plain values and returns
dicts, strings or arrays, so the JSON is unit-tested without a cluster
(the store's parts send it: :mod:`sdr_search.indexer.opensearch.store`).

Two indices make one store (see :mod:`sdr_search.indexer.opensearch.store`):

* the **document index** (``mappings/index.json``): one top-level document per SDR document with
  its text, paragraphs, counts, provenance, all sentence vectors as one base64 float32 string
  (``vectors_b64``, the cheap fetch path of the exact rerank) and a ``nested`` field
  ``sentences`` whose ``knn_vector`` (HNSW, inner product; engine ``lucene`` or ``faiss``) serves
  nested k-NN;
* the document index's ``text`` field is analysed like bm25s (analyzer ``sdr_text``: the
  pattern tokenizer ``(?U)\\b\\w\\w+\\b``, lowercase, ``_english_`` stop words; similarity
  ``sdr_bm25``: k1 = 1.5, b = 0.75), so lexical search (:func:`build_terms_query`, or
  :func:`build_more_like_this_query`) is the embedded store's BM25;
* the **state index** ``<index>-sdr-state`` (``mappings/state.json``): per-document
  normalisation statistics, the reference sample with its vectors, and one ``state`` document
  (statistics version, stale flag, reference header).

Version notes (targets: OpenSearch 2.19+ and 3.x with the k-NN plugin):

* **k counts documents (2.12+).** For a ``knn`` query inside ``nested``, each segment returns
  the ``k`` nearest *parent documents* (each scored by its best nested vector), not the ``k``
  nearest vectors, so one document with many close sentences cannot crowd out the others
  (https://opensearch.org/blog/enhanced-multi-vector-support-in-opensearch-knn/). Before 2.12 a
  query could return fewer than ``k`` documents. ``score_mode: max`` makes the parent's score
  its best sentence's score explicitly.
* **expand_nested_docs (2.19+)** scores every nested vector of the returned documents (inner hits
  for all sentences, parent score = mean, or max with ``score_mode: max``). Not used: the first
  stage needs one score per document; it could feed sentence-level explanations later.
* **Derived source.** ``index.knn.derived_source.enabled`` keeps vectors out of stored
  ``_source`` and rebuilds them on read, so ``_update`` and reindex keep working. The k-NN plugin
  turns it on for every k-NN index created on 3.0+ *unless the request sets it*, so
  :func:`build_index_body` always sets it: ``true`` (and no ``_source.excludes``: combining the
  two breaks vector reconstruction, opensearch-project/k-NN#3536) or ``false`` with
  ``_source.excludes`` on the vectors, which means a partial ``_update`` or a reindex of a
  document *drops its vectors*. This backend therefore never updates a document in place:
  statistics live in the state index. (2.19 has derived source as an experimental feature,
  nested fields included since 2.19.2; the store turns it on only on 3.x unless
  ``SDR_OPENSEARCH_DERIVED_SOURCE=on``. Tested both ways on 2.19.1 and 3.5.0 nodes.)
* **Engine.** ``lucene`` (pure Java, in every k-NN distribution, including the Maven Central one
  that has no native libraries) or ``faiss`` (native; a node without its JNI library exits on the
  first graph build). ``ef_search`` is sent with every query (``method_parameters.ef_search``,
  2.16+): the index setting ``index.knn.algo_param.ef_search`` is read by nmslib only
  (k-NN ``IndexUtil.getParametersAtLoading``). Engine and space type are read from the filled
  mapping and recorded in ``_meta``, so an edited ``mappings/index.json`` cannot silently change
  the score translation.
* **Limits.** A k-NN query takes ``k <= 10,000`` (:data:`MAX_KNN_K`); ``ef_search >= 2``.
* **Score translation.** See :func:`knn_score_to_cosine`.
"""

from __future__ import annotations

from .filters import (  # noqa: F401
    build_candidate_filter,
    build_metadata_filter,
    build_restriction,
)
from .knn import (  # noqa: F401
    build_msearch_bodies,
    build_msearch_body,
    build_nested_knn_query,
    cosine_to_knn_score,
    knn_score_to_cosine,
    parse_knn_responses,
)
from .layout import (  # noqa: F401
    AGGREGATIONS,
    CENTROIDS_FIELD,
    ENGINES,
    FORMAT_VERSION,
    HITS_BY_DOC_ID,
    KNN_FIELD,
    LEXICAL_FIELD,
    MATCH_NONE,
    MAX_ALLOWED_IDS,
    MAX_ID_BYTES,
    MAX_KNN_K,
    METADATA_TERMS_FIELD,
    MIN_EF_SEARCH,
    SPACE_TYPES,
    STATE_DOC_ID,
    VECTORS_B64,
    VECTORS_INDEX,
    bm25_k1,
    build_index_body,
    build_meta,
    build_state_index_body,
    decode_vectors_b64,
    document_os_id,
    encode_vectors_b64,
    fill_placeholders,
    hit_doc_id,
    index_meta_from_meta,
    initial_state,
    knn_method,
    legacy_metadata,
    load_mapping,
    reference_os_id,
    state_index_name,
    stats_os_id,
    stored_centroids,
    stored_content_key,
)
from .lexical import (  # noqa: F401
    build_lexical_msearch,
    build_more_like_this_query,
    build_terms_query,
    parse_lexical_response,
)
from .plugin import (  # noqa: F401
    PluginLimits,
    build_sentence_counts_search,
    parse_sentence_counts,
    candidate_hits_per_sentence,
    check_source_limits,
    explained_per_search,
    pack_by_values,
    parse_plugin_limits,
    NO_SENTENCES_SCORE,
    build_sdr_candidates_query,
    build_sdr_scores_msearch,
    build_sentence_hits_msearch,
    build_vectors_search,
    parse_centroid_rows_hit,
    parse_mean_hit,
    parse_sdr_hits,
    parse_sdr_sources,
    parse_vector_hit,
)
from .reads import (  # noqa: F401
    build_alias_swap,
    build_counts_query,
    build_mget_body,
    build_mget_stored_body,
    build_scan_query,
    build_sources_search,
    build_stats_count_query,
    PRESENTED_FIELDS,
    parse_b64_vectors,
    parse_derived_vectors,
    parse_presented_document,
    parse_stored_paragraphs,
    sentence_offsets,
)
from .writes import (  # noqa: F401
    BulkOutcome,
    build_bulk_actions,
    build_delete_actions,
    build_document_source,
    build_reference_actions,
    build_reference_delete_actions,
    build_stats_delete_actions,
    build_stats_update_actions,
    bulk_lines,
    chunk_by_size,
    error_from_response,
    shard_failure,
    process_bulk_response,
)

__all__ = [
    "AGGREGATIONS",
    "CENTROIDS_FIELD",
    "BulkOutcome",
    "ENGINES",
    "FORMAT_VERSION",
    "HITS_BY_DOC_ID",
    "KNN_FIELD",
    "LEXICAL_FIELD",
    "MATCH_NONE",
    "MAX_ALLOWED_IDS",
    "MAX_ID_BYTES",
    "MAX_KNN_K",
    "METADATA_TERMS_FIELD",
    "MIN_EF_SEARCH",
    "NO_SENTENCES_SCORE",
    "SPACE_TYPES",
    "STATE_DOC_ID",
    "VECTORS_B64",
    "VECTORS_INDEX",
    "bm25_k1",
    "build_alias_swap",
    "build_bulk_actions",
    "build_candidate_filter",
    "build_counts_query",
    "build_delete_actions",
    "build_document_source",
    "build_index_body",
    "build_lexical_msearch",
    "build_meta",
    "build_metadata_filter",
    "build_restriction",
    "build_mget_body",
    "build_mget_stored_body",
    "build_more_like_this_query",
    "build_msearch_bodies",
    "build_msearch_body",
    "build_nested_knn_query",
    "build_reference_actions",
    "build_reference_delete_actions",
    "build_scan_query",
    "build_sdr_candidates_query",
    "PluginLimits",
    "build_sentence_counts_search",
    "parse_sentence_counts",
    "candidate_hits_per_sentence",
    "check_source_limits",
    "explained_per_search",
    "pack_by_values",
    "parse_plugin_limits",
    "build_sdr_scores_msearch",
    "build_sentence_hits_msearch",
    "build_state_index_body",
    "build_stats_count_query",
    "parse_b64_vectors",
    "parse_derived_vectors",
    "parse_presented_document",
    "parse_stored_paragraphs",
    "PRESENTED_FIELDS",
    "sentence_offsets",
    "build_stats_delete_actions",
    "build_stats_update_actions",
    "build_terms_query",
    "build_vectors_search",
    "bulk_lines",
    "chunk_by_size",
    "cosine_to_knn_score",
    "decode_vectors_b64",
    "document_os_id",
    "encode_vectors_b64",
    "error_from_response",
    "shard_failure",
    "fill_placeholders",
    "hit_doc_id",
    "index_meta_from_meta",
    "legacy_metadata",
    "stored_centroids",
    "stored_content_key",
    "initial_state",
    "knn_method",
    "knn_score_to_cosine",
    "load_mapping",
    "parse_knn_responses",
    "parse_lexical_response",
    "parse_centroid_rows_hit",
    "parse_mean_hit",
    "parse_sdr_hits",
    "parse_sdr_sources",
    "parse_vector_hit",
    "process_bulk_response",
    "reference_os_id",
    "state_index_name",
    "stats_os_id",
]
