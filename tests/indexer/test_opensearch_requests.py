"""Unit tests of the OpenSearch backend without a cluster: every request builder's JSON (golden
dicts), score translation, base64 vectors, stable ids, msearch batching, bulk item-error handling
and 429 retries (driven with recorded response dicts), error mapping, and a lazy client."""

from __future__ import annotations

import json
import socket
import time
from importlib import resources
from pathlib import Path

import numpy as np
import pytest

from sdr_search.indexer.opensearch import OpenSearchSettings, OpenSearchStore
from sdr_search.indexer.opensearch.bulk import run_bulk
from sdr_search.indexer.opensearch.requests import (
    FORMAT_VERSION,
    build_alias_swap,
    build_bulk_actions,
    build_counts_query,
    build_delete_actions,
    build_index_body,
    build_lexical_msearch,
    build_meta,
    build_mget_body,
    build_mget_stored_body,
    build_sources_search,
    build_more_like_this_query,
    build_msearch_bodies,
    build_msearch_body,
    build_nested_knn_query,
    bm25_k1,
    MAX_KNN_K,
    knn_method,
    build_reference_actions,
    build_reference_delete_actions,
    build_scan_query,
    build_state_index_body,
    build_stats_count_query,
    build_stats_delete_actions,
    build_stats_update_actions,
    build_terms_query,
    bulk_lines,
    chunk_by_size,
    cosine_to_knn_score,
    decode_vectors_b64,
    document_os_id,
    encode_vectors_b64,
    error_from_response,
    fill_placeholders,
    index_meta_from_meta,
    initial_state,
    knn_score_to_cosine,
    load_mapping,
    parse_knn_responses,
    parse_lexical_response,
    process_bulk_response,
    state_index_name,
    stats_os_id,
    stored_content_key,
    VECTORS_INDEX,
    build_document_source,
    build_sdr_candidates_query,
    build_sdr_scores_msearch,
    build_sentence_hits_msearch,
    build_vectors_search,
    hit_doc_id,
    parse_sdr_hits,
    parse_sdr_sources,
    parse_vector_hit,
)
from sdr_search.indexer.store import IndexMeta, ReferenceParagraphs
from sdr_search.core import retry as shared_retry
from sdr_search.core.retry import Backoff
from sdr_search.core.cache import document_key
from sdr_search.core.documents import parse_record
from sdr_search.core.errors import (
    BackendUnavailableError,
    BulkWriteError,
    IndexNotFoundError,
    InvalidInputError,
    OverloadedError,
    StoreError,
)
from sdr_search.core.scoring import NormStats
from sdr_search.core.settings import SegmentationSettings
from sdr_search.core.vectors import CorpusVectors, DocVectors

AS_GIVEN = SegmentationSettings.from_recorded({})  # paragraphs and sentences as written

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
META = IndexMeta("model-a", "tag-a", 2, {"paragraph_unit": "paragraph"}, {"numpy": "2.0"}, "2025-01-01T00:00:00+00:00")
AT = "2025-01-02T03:04:05+00:00"


def small_doc(doc_id: str = "a"):
    doc = parse_record({"id": doc_id, "title": "T", "paragraphs": ["The cat sat. The dog ran.", "A bird flew."], "lang": "en"}, settings=AS_GIVEN)
    vectors = DocVectors(np.array([[1.0, 0.0], [0.0, 1.0], [0.5, -0.25]], np.float32), [0, 2, 3])
    return doc, vectors


# -- mappings -------------------------------------------------------------------------------------
def test_index_body_golden():
    meta = build_meta(META, versions={"numpy": "2.0", "opensearch": "2.19.1"}, hnsw={"m": 16, "ef_construction": 100},
                      derived_source=False, created_at=AT, engine="lucene", space_type="innerproduct")
    body = build_index_body(384, m=16, ef_construction=128, shards=2, replicas=1, meta=meta)
    assert body == {
        "settings": {"index": {
            "number_of_shards": 2, "number_of_replicas": 1, "knn": True,
            "mapping.nested_objects.limit": 20000,
            "analysis": {
                "tokenizer": {"sdr_words": {"type": "pattern", "pattern": "(?U)\\b\\w\\w+\\b", "group": 0}},
                "filter": {"sdr_english_stop": {"type": "stop", "stopwords": "_english_"}},
                "analyzer": {"sdr_text": {"type": "custom", "tokenizer": "sdr_words",
                                          "filter": ["lowercase", "sdr_english_stop"]}},
            },
            "similarity": {"sdr_bm25": {"type": "BM25", "k1": 1.5, "b": 0.75}},
            "knn.derived_source.enabled": False,
        }},
        "mappings": {
            "dynamic": "strict",
            "date_detection": False,
            "_source": {"excludes": ["sentences.vector", "par_centroids"]},
            "properties": {
                "doc_id": {"type": "keyword"},
                "title": {"type": "text", "fields": {"keyword": {"type": "keyword", "ignore_above": 1024}}},
                "text": {"type": "text", "analyzer": "sdr_text", "similarity": "sdr_bm25"},
                "metadata": {"type": "object", "enabled": False},
                "metadata_terms": {"type": "keyword", "doc_values": False},
                "n_paragraphs": {"type": "integer"},
                "n_sentences": {"type": "integer"},
                "model_id": {"type": "keyword"},
                "encoder_tag": {"type": "keyword"},
                "content_key": {"type": "keyword", "store": True},
                "indexed_at": {"type": "date"},
                "paragraphs": {"type": "object", "enabled": False},
                "par_sizes": {"type": "integer", "index": False, "doc_values": False},
                "vectors_b64": {"type": "binary"},
                "par_centroids": {"type": "binary", "doc_values": True},
                "sentences": {"type": "nested", "properties": {
                    "vector": {"type": "knn_vector", "dimension": 384, "doc_values": False, "method": {
                        "name": "hnsw", "engine": "lucene", "space_type": "innerproduct",
                        "parameters": {"m": 16, "ef_construction": 128}}},
                    "paragraph": {"type": "integer"},
                    "position": {"type": "integer"},
                }},
            },
            "_meta": {"sdr": {
                "format_version": FORMAT_VERSION,
                "index_meta": META.to_dict(),
                "versions": {"numpy": "2.0", "opensearch": "2.19.1"},
                "hnsw": {"m": 16, "ef_construction": 100},
                "space_type": "innerproduct",
                "engine": "lucene",
                "derived_source": False,
                "vectors": "b64",
                "recovery_source_excludes": False,
                "created_at": AT,
            }},
        },
    }


def test_index_body_derived_source_drops_excludes():
    body = build_index_body(8, m=8, ef_construction=64, shards=1, replicas=0, meta={},
                            derived_source=True, max_sentences=50_000, engine="faiss")
    assert body["mappings"]["properties"]["sentences"]["properties"]["vector"]["method"]["engine"] == "faiss"
    assert "_source" not in body["mappings"]
    assert body["settings"]["index"]["knn.derived_source.enabled"] is True
    assert body["settings"]["index"]["mapping.nested_objects.limit"] == 50_000
    assert body["mappings"]["_meta"] == {}


def test_index_body_rejects_bad_parameters():
    with pytest.raises(ValueError, match="dim"):
        build_index_body(0, m=16, ef_construction=100, shards=1, replicas=0, meta={})
    with pytest.raises(ValueError, match="replicas"):
        build_index_body(4, m=16, ef_construction=100, shards=1, replicas=-1, meta={})
    with pytest.raises(ValueError, match="engine"):
        build_index_body(4, m=16, ef_construction=100, shards=1, replicas=0, meta={}, engine="nmslib")


def test_index_body_always_sets_derived_source():
    """3.x turns derived source on unless the request sets it: 'off' must be written, not left out."""
    body = build_index_body(4, m=16, ef_construction=100, shards=1, replicas=0, meta={}, derived_source=False)
    assert body["settings"]["index"]["knn.derived_source.enabled"] is False
    assert body["mappings"]["_source"] == {"excludes": ["sentences.vector", "par_centroids"]}


def test_knn_method_reads_the_filled_mapping(monkeypatch):
    """Engine and space type come from the mapping users may edit, not from constants."""
    body = build_index_body(4, m=16, ef_construction=100, shards=1, replicas=0, meta={})
    assert knn_method(body) == ("lucene", "innerproduct")
    vec = body["mappings"]["properties"]["sentences"]["properties"]["vector"]["method"]
    vec["space_type"] = "cosinesimil"
    assert knn_method(body) == ("lucene", "cosinesimil")
    vec["space_type"] = "hamming"
    with pytest.raises(StoreError, match="hamming"):
        knn_method(body)


def test_state_index_body_golden():
    assert build_state_index_body(replicas=0) == {
        "settings": {"index": {"number_of_shards": 1, "number_of_replicas": 0}},
        "mappings": {"dynamic": "strict", "properties": {
            "kind": {"type": "keyword"},
            "doc_id": {"type": "keyword"},
            "stats_mu": {"type": "double", "index": False, "doc_values": False},
            "stats_sigma": {"type": "double", "index": False, "doc_values": False},
            "stats_version": {"type": "integer"},
            "state": {"type": "object", "enabled": False},
            "generation": {"type": "integer"},
            "position": {"type": "integer"},
            "paragraph_index": {"type": "integer"},
            "label": {"type": "keyword"},
            "n_sentences": {"type": "integer"},
            "vectors_b64": {"type": "binary"},
        }},
    }
    assert state_index_name("sdr-v2") == "sdr-v2-sdr-state"


def test_initial_state_golden():
    assert initial_state(AT) == {"kind": "state", "state": {
        "stats": {"version": 0, "mode": None, "sample_size": None, "seed": None, "computed_at": None, "stale": False},
        "reference": None, "created_at": AT,
    }}


def test_meta_provenance_round_trip():
    meta = build_meta(META, versions={"sdr-search": "0.1.0", "opensearch-py": "3.2.0"}, hnsw={"m": 16},
                      derived_source=True, created_at=AT, engine="lucene", space_type="innerproduct")
    body = build_index_body(2, m=16, ef_construction=100, shards=1, replicas=0, meta=meta)
    sdr = body["mappings"]["_meta"]["sdr"]
    assert sdr["versions"] == {"sdr-search": "0.1.0", "opensearch-py": "3.2.0"}
    assert sdr["index_meta"]["encoder_tag"] == "tag-a" and sdr["index_meta"]["dim"] == 2
    assert index_meta_from_meta(json.loads(json.dumps(body["mappings"]["_meta"]))) == META
    assert index_meta_from_meta(None) is None and index_meta_from_meta({"other": 1}) is None
    newer = {"sdr": {**sdr, "format_version": FORMAT_VERSION + 1}}
    with pytest.raises(StoreError, match="Upgrade"):
        index_meta_from_meta(newer)


@pytest.mark.parametrize("name", ["index.json", "state.json"])
def test_packaged_mapping_is_the_checkout_file(name):
    checkout = (REPO / "mappings" / name).read_bytes()
    packaged = resources.files("sdr_search.indexer.opensearch").joinpath("mappings", name).read_bytes()
    assert packaged == checkout, f"indexer/opensearch/mappings/{name} must be a copy of mappings/{name}"
    assert load_mapping(name) == json.loads(checkout)


def test_fill_placeholders():
    assert fill_placeholders({"a": ["${x}", "${x}y", 3]}, {"x": 7}) == {"a": [7, "${x}y", 3]}
    with pytest.raises(KeyError, match="nope"):
        fill_placeholders({"a": "${nope}"}, {})


# -- ids and vectors ---------------------------------------------------------------------------------
def test_long_ids_are_hashed_stably():
    assert document_os_id("d-1") == "d-1"
    exact = "x" * 512
    assert document_os_id(exact) == exact
    long_id = "x" * 513
    hashed = document_os_id(long_id)
    assert hashed.startswith("sha256-") and len(hashed) == 7 + 64
    assert all(c in "0123456789abcdef" for c in hashed[7:])
    assert document_os_id(long_id) == hashed  # stable
    assert document_os_id("x" * 514) != hashed
    multibyte = "é" * 257  # 257 characters, 514 UTF-8 bytes
    assert document_os_id(multibyte).startswith("sha256-")
    assert document_os_id("é" * 256) == "é" * 256  # 512 bytes
    assert stats_os_id("d-1") == "stats:d-1"
    assert len(stats_os_id(exact).encode()) <= 512


def test_long_id_hash_is_sha256_of_utf8():
    import hashlib

    long_id = "ü" * 300
    assert document_os_id(long_id) == "sha256-" + hashlib.sha256(long_id.encode("utf-8")).hexdigest()


def test_b64_golden_and_bit_exact_round_trip():
    assert encode_vectors_b64(np.array([[1, 0], [0, 1], [0.5, -0.25]], np.float32)) == "AACAPwAAAAAAAAAAAACAPwAAAD8AAIC+"
    rng = np.random.default_rng(0)
    x = rng.standard_normal((37, 16)).astype(np.float32)
    x[0, :4] = [-0.0, np.float32(1e-45), np.finfo(np.float32).max, np.finfo(np.float32).tiny]
    back = decode_vectors_b64(encode_vectors_b64(x), 16)
    assert back.dtype == np.float32 and back.shape == (37, 16) and back.flags.writeable
    np.testing.assert_array_equal(back.view(np.uint32), x.view(np.uint32))
    big_endian = x.astype(">f4")
    np.testing.assert_array_equal(decode_vectors_b64(encode_vectors_b64(big_endian), 16), x)


def test_b64_rejects_damaged_values():
    with pytest.raises(StoreError, match="whole number"):
        decode_vectors_b64(encode_vectors_b64(np.zeros((2, 3), np.float32)), 4)
    with pytest.raises(StoreError, match="base64"):
        decode_vectors_b64("not base64!", 2)


# -- bulk actions ----------------------------------------------------------------------------------------
def test_bulk_actions_golden():
    doc, vectors = small_doc()
    actions = build_bulk_actions([(doc, vectors)], index="sdr-1", encoder_tag="tag-a", model_id="model-a", indexed_at=AT)
    assert actions == [{
        "_op_type": "index", "_index": "sdr-1", "_id": "a",
        "_source": {
            "doc_id": "a",
            "title": "T",
            "text": "T\n\nThe cat sat. The dog ran.\n\nA bird flew.",
            "metadata": {"lang": "en"},
            "metadata_terms": ['["lang","en"]'],
            "n_paragraphs": 2,
            "n_sentences": 3,
            "model_id": "model-a",
            "encoder_tag": "tag-a",
            "content_key": document_key("tag-a", doc.paragraphs),
            "indexed_at": AT,
            "paragraphs": [["The cat sat.", "The dog ran."], ["A bird flew."]],
            "par_sizes": [2, 1],
            "vectors_b64": "AACAPwAAAAAAAAAAAACAPwAAAD8AAIC+",
            "sentences": [
                {"vector": [1.0, 0.0], "paragraph": 0, "position": 0},
                {"vector": [0.0, 1.0], "paragraph": 0, "position": 1},
                {"vector": [0.5, -0.25], "paragraph": 1, "position": 2},
            ],
        },
    }]
    assert actions[0]["_source"]["content_key"] == document_key("tag-a", (("The cat sat.", "The dog ran."), ("A bird flew.",)))


def test_bulk_actions_long_id_keeps_real_id():
    long_id = "é" * 300
    doc, vectors = small_doc(long_id)
    (action,) = build_bulk_actions([(doc, vectors)], index="i", encoder_tag="t", model_id="m", indexed_at=AT)
    assert action["_id"] == document_os_id(long_id) and action["_id"].startswith("sha256-")
    assert action["_source"]["doc_id"] == long_id
    assert build_delete_actions([long_id], index="i") == [{"_op_type": "delete", "_index": "i", "_id": action["_id"]}]


def test_bulk_lines_exact_bytes():
    action = {"_op_type": "index", "_index": "i", "_id": "é", "_source": {"x": [0.5], "t": "ü"}}
    assert bulk_lines(action) == '{"index":{"_index":"i","_id":"é"}}\n{"x":[0.5],"t":"ü"}\n'.encode()
    assert bulk_lines({"_op_type": "delete", "_index": "i", "_id": "a"}) == b'{"delete":{"_index":"i","_id":"a"}}\n'
    with pytest.raises(ValueError):
        bulk_lines({"_op_type": "index", "_index": "i", "_id": "a", "_source": {"x": float("nan")}})


def test_delete_stats_and_reference_actions_golden():
    assert build_delete_actions(["a", "b"], index="i") == [
        {"_op_type": "delete", "_index": "i", "_id": "a"}, {"_op_type": "delete", "_index": "i", "_id": "b"}]
    stats = {"a": NormStats(np.array([0.25, 0.5]), np.array([1.0, 2.0]))}
    assert build_stats_update_actions(stats, 3, index="i-sdr-state") == [{
        "_op_type": "index", "_index": "i-sdr-state", "_id": "stats:a",
        "_source": {"kind": "stats", "doc_id": "a", "stats_mu": [0.25, 0.5], "stats_sigma": [1.0, 2.0], "stats_version": 3},
    }]
    assert build_stats_delete_actions(["a"], index="s") == [{"_op_type": "delete", "_index": "s", "_id": "stats:a"}]
    assert build_reference_delete_actions(4, 2, index="s") == [
        {"_op_type": "delete", "_index": "s", "_id": "ref:4:0"}, {"_op_type": "delete", "_index": "s", "_id": "ref:4:1"}]


def test_reference_actions_golden():
    vectors = CorpusVectors(("p7", "p9"), np.array([[1, 0], [0, 1], [0.5, -0.25]], np.float32), [0, 2, 3], [0, 1, 2])
    ref = ReferenceParagraphs(("d1", "d2"), np.array([3, 0]), vectors, seed=5, size=2)
    assert build_reference_actions(ref, 2, index="s") == [
        {"_op_type": "index", "_index": "s", "_id": "ref:2:0", "_source": {
            "kind": "reference", "generation": 2, "position": 0, "doc_id": "d1", "paragraph_index": 3, "label": "p7",
            "n_sentences": 2, "vectors_b64": "AACAPwAAAAAAAAAAAACAPw=="}},
        {"_op_type": "index", "_index": "s", "_id": "ref:2:1", "_source": {
            "kind": "reference", "generation": 2, "position": 1, "doc_id": "d2", "paragraph_index": 0, "label": "p9",
            "n_sentences": 1, "vectors_b64": "AAAAPwAAgL4="}},
    ]


def test_chunk_by_size():
    assert chunk_by_size([10, 10, 10, 10, 10], max_items=2, max_bytes=100) == [range(0, 2), range(2, 4), range(4, 5)]
    assert chunk_by_size([60, 50, 10, 200, 5], max_items=10, max_bytes=100) == [range(0, 1), range(1, 3), range(3, 4), range(4, 5)]
    assert chunk_by_size([], max_items=1, max_bytes=1) == []


# -- k-NN --------------------------------------------------------------------------------------------------
def test_nested_knn_query_golden():
    assert build_nested_knn_query(np.array([0.5, -0.25], np.float32), 5) == {
        "size": 5, "_source": False, "stored_fields": "_none_", "docvalue_fields": ["doc_id"],
        "track_total_hits": False,
        "query": {"nested": {"path": "sentences", "score_mode": "max", "query": {
            "knn": {"sentences.vector": {"vector": [0.5, -0.25], "k": 5}}}}},
    }


def test_nested_knn_query_with_exclusions_golden():
    assert build_nested_knn_query([1.0, 0.0], 3, exclude_ids=["x", "y", "x"]) == {
        "size": 3, "_source": False, "stored_fields": "_none_", "docvalue_fields": ["doc_id"],
        "track_total_hits": False,
        "query": {"bool": {
            "must": [{"nested": {"path": "sentences", "score_mode": "max", "query": {
                "knn": {"sentences.vector": {"vector": [1.0, 0.0], "k": 5}}}}}],
            "must_not": [{"terms": {"doc_id": ["x", "y"]}}],
        }},
    }
    with pytest.raises(ValueError):
        build_nested_knn_query([1.0], 0)


def test_nested_knn_query_limits_and_ef_search():
    """k-NN takes k <= 10,000 and ef_search >= 2; ef_search goes per query (method_parameters),
    at least the k asked for."""
    q = build_nested_knn_query([1.0, 0.0], 10, ef_search=50)
    assert q["query"]["nested"]["query"]["knn"]["sentences.vector"]["method_parameters"] == {"ef_search": 50}
    q = build_nested_knn_query([1.0, 0.0], 80, ef_search=50, exclude_ids=["a"])
    assert q["query"]["bool"]["must"][0]["nested"]["query"]["knn"]["sentences.vector"]["method_parameters"] == {"ef_search": 81}
    q = build_nested_knn_query([1.0, 0.0], MAX_KNN_K, exclude_ids=["a", "b"])
    assert q["query"]["bool"]["must"][0]["nested"]["query"]["knn"]["sentences.vector"]["k"] == MAX_KNN_K
    with pytest.raises(ValueError, match="10000"):
        build_nested_knn_query([1.0], MAX_KNN_K + 1)
    with pytest.raises(ValueError, match="ef_search"):
        build_nested_knn_query([1.0], 1, ef_search=1)


def test_msearch_body_golden():
    body = build_msearch_body(np.array([[1, 0], [0, 1]], np.float32), 2, "sdr-1")
    assert body == [
        {"index": "sdr-1"}, build_nested_knn_query([1.0, 0.0], 2),
        {"index": "sdr-1"}, build_nested_knn_query([0.0, 1.0], 2),
    ]


def test_msearch_batching_keeps_order():
    q = np.arange(250 * 2, dtype=np.float32).reshape(250, 2)
    bodies = build_msearch_bodies(q, 4, "i", exclude_ids=["z"], batch_size=100)
    assert [len(b) for b in bodies] == [200, 200, 100]
    sent = [line["query"]["bool"]["must"][0]["nested"]["query"]["knn"]["sentences.vector"]["vector"]
            for body in bodies for line in body[1::2]]
    assert sent == q.tolist()
    assert all(h == {"index": "i"} for body in bodies for h in body[0::2])
    assert len(build_msearch_bodies(q[:100], 4, "i", batch_size=100)) == 1
    assert build_msearch_bodies(q[:0], 4, "i") == []


def test_score_translation_round_trip():
    assert knn_score_to_cosine(2.0) == 1.0 and knn_score_to_cosine(1.0) == 0.0 and knn_score_to_cosine(0.5) == -1.0
    assert cosine_to_knn_score(1.0) == 2.0 and cosine_to_knn_score(0.0) == 1.0 and cosine_to_knn_score(-1.0) == 0.5
    cos = np.linspace(-1.0, 1.0, 2001)
    scores = cosine_to_knn_score(cos)
    assert np.all(np.diff(scores) > 0)  # order preserving
    np.testing.assert_allclose(knn_score_to_cosine(scores), cos, atol=1e-12)
    # what a float32 score from the cluster gives back: within float32 resolution
    np.testing.assert_allclose(knn_score_to_cosine(scores.astype(np.float32)), cos, atol=3e-7)
    with pytest.raises(ValueError):
        knn_score_to_cosine(0.0)


@pytest.mark.parametrize("space", ["innerproduct", "cosinesimil", "l2"])
def test_score_translation_per_space_type(space):
    # the scores a 2.19 node gave for unit vectors at cosine 1, 0.6, 0 and -1 (lucene engine)
    measured = {"innerproduct": [2.0, 1.6, 1.0, 0.5], "cosinesimil": [1.0, 0.8, 0.5, 0.0],
                "l2": [1.0, 0.5555556, 0.33333334, 0.2]}[space]
    np.testing.assert_allclose(knn_score_to_cosine(np.array(measured), space), [1.0, 0.6, 0.0, -1.0], atol=1e-6)
    cos = np.linspace(-1.0, 1.0, 101)
    np.testing.assert_allclose(knn_score_to_cosine(cosine_to_knn_score(cos, space), space), cos, atol=1e-12)
    with pytest.raises(ValueError):
        knn_score_to_cosine(1.0, "hamming")


def test_parse_knn_responses_recorded():
    responses = [
        {"took": 3, "timed_out": False, "status": 200, "hits": {"total": {"value": 2, "relation": "eq"}, "max_score": 2.0,
         "hits": [{"_index": "i", "_id": "a", "_score": 2.0, "fields": {"doc_id": ["a"]}},
                  {"_index": "i", "_id": "sha256-00", "_score": 0.8, "fields": {"doc_id": ["L" * 600]}}]}},
        {"took": 1, "timed_out": False, "status": 200, "hits": {"total": {"value": 0, "relation": "eq"}, "hits": []}},
    ]
    ids, scores = parse_knn_responses(responses, k=5)
    assert ids == [["a", "L" * 600], []]
    assert scores[0].dtype == np.float32
    np.testing.assert_allclose(scores[0], [1.0, 1.0 - 1.0 / 0.8], atol=1e-7)
    assert scores[1].shape == (0,)
    missing = {"status": 404, "error": {"type": "index_not_found_exception", "reason": "no such index [i]", "index": "i"}}
    with pytest.raises(IndexNotFoundError, match="'i'"):
        parse_knn_responses([responses[0], missing], k=5)
    busy = {"status": 429, "error": {"type": "rejected_execution_exception", "reason": "queue full"}}
    with pytest.raises(OverloadedError, match="queue full"):
        parse_knn_responses([busy], k=5)


# -- reads ---------------------------------------------------------------------------------------------------
def test_read_bodies_golden():
    assert build_mget_body(["a", "b"], ["par_sizes", "vectors_b64"]) == {"docs": [
        {"_id": "a", "_source": ["par_sizes", "vectors_b64"]}, {"_id": "b", "_source": ["par_sizes", "vectors_b64"]}]}
    assert build_mget_body(["a"], {"excludes": ["sentences"]}, index="i") == {"docs": [
        {"_index": "i", "_id": "a", "_source": {"excludes": ["sentences"]}}]}
    long_id = "é" * 300  # 600 UTF-8 bytes, over the _id limit: searched by its hashed _id, as written
    assert build_mget_stored_body(["a", long_id], ["content_key"]) == {"docs": [
        {"_id": "a", "_source": False, "stored_fields": ["content_key"]},
        {"_id": document_os_id(long_id), "_source": False, "stored_fields": ["content_key"]}]}
    assert stored_content_key({"properties": {"content_key": {"type": "keyword", "store": True}}})
    assert not stored_content_key({"properties": {"content_key": {"type": "keyword"}}})
    assert not stored_content_key({})
    assert build_sources_search(["a", long_id, "a"], ["title", "paragraphs"]) == {
        "size": 2, "track_total_hits": False, "query": {"ids": {"values": ["a", document_os_id(long_id)]}},
        "_source": {"includes": ["title", "paragraphs"], "excludes": ["sentences.vector"]}}
    assert build_counts_query() == {"size": 0, "track_total_hits": True, "aggs": {
        "paragraphs": {"sum": {"field": "n_paragraphs"}}, "sentences": {"sum": {"field": "n_sentences"}}}}
    assert build_stats_count_query() == {"query": {"bool": {"filter": [{"term": {"kind": "stats"}}]}}}
    assert build_stats_count_query(4) == {"query": {"bool": {"filter": [
        {"term": {"kind": "stats"}}, {"term": {"stats_version": 4}}]}}}


def test_scan_query_golden():
    assert build_scan_query(size=100, source=["doc_id", "vectors_b64"]) == {
        "size": 100, "_source": ["doc_id", "vectors_b64"], "sort": [{"doc_id": "asc"}], "track_total_hits": False}
    assert build_scan_query(size=10, source=False, search_after=["d9"], pit_id="P", keep_alive="1m") == {
        "size": 10, "_source": False, "sort": [{"doc_id": "asc"}], "track_total_hits": False,
        "docvalue_fields": ["doc_id"], "search_after": ["d9"], "pit": {"id": "P", "keep_alive": "1m"}}


def test_alias_swap_golden():
    assert build_alias_swap("sdr", "sdr-v2", ["sdr-v1", "sdr-v2"]) == {"actions": [
        {"remove": {"index": "sdr-v1", "alias": "sdr"}}, {"add": {"index": "sdr-v2", "alias": "sdr"}}]}
    assert build_alias_swap("sdr", "sdr-v1", []) == {"actions": [{"add": {"index": "sdr-v1", "alias": "sdr"}}]}


# -- bulk responses and retries ---------------------------------------------------------------------------
MIXED_RESPONSE = {"took": 30, "errors": True, "items": [
    {"index": {"_index": "i", "_id": "a", "_version": 1, "result": "created", "status": 201}},
    {"index": {"_index": "i", "_id": "b", "_version": 2, "result": "updated", "status": 200}},
    {"index": {"_index": "i", "_id": "c", "status": 429, "error": {
        "type": "rejected_execution_exception", "reason": "rejected execution of coordinating operation"}}},
    {"index": {"_index": "i", "_id": "d", "status": 400, "error": {
        "type": "mapper_parsing_exception", "reason": "failed to parse field [metadata.year] of type [long]",
        "caused_by": {"type": "illegal_argument_exception", "reason": "For input string: \"abc\""}}}},
]}


def test_process_bulk_response_item_by_item():
    out = process_bulk_response(MIXED_RESPONSE, ["a", "b", "c", "d"])
    assert out.results == {"a": "created", "b": "updated"}
    assert out.retry == (2,)
    assert out.failed == {"d": '400 mapper_parsing_exception: failed to parse field [metadata.year] of type [long] '
                               '(caused by illegal_argument_exception: For input string: "abc")'}


def test_process_bulk_response_deletes_accept_404():
    resp = {"errors": False, "items": [
        {"delete": {"_id": "a", "result": "deleted", "status": 200}},
        {"delete": {"_id": "b", "result": "not_found", "status": 404}}]}
    assert process_bulk_response(resp, ["a", "b"], accept=(404,)).results == {"a": "deleted", "b": "not_found"}
    assert process_bulk_response(resp, ["a", "b"]).failed == {"b": "404 not_found"}
    with pytest.raises(StoreError, match="malformed"):
        process_bulk_response(resp, ["a"])


def test_run_bulk_retries_only_429_items():
    """Only items rejected with 429 are retried; 400, 409, 500, 503 item errors fail at once."""
    for status in (400, 409, 500, 503):
        sleeps, calls = [], []
        reply = {"errors": True, "items": [{"index": {"_id": "x", "status": status, "error": {"type": "t", "reason": "r"}}}]}
        with pytest.raises(BulkWriteError) as err:
            run_bulk(lambda body, calls=calls, reply=reply: calls.append(body) or reply, _lines(["x"]), ["x"], what="put",
                     max_items=10, max_bytes=10**6, backoff=Backoff(3, 1.0, 5.0), sleep=sleeps.append)
        assert len(calls) == 1 and sleeps == [] and err.value.failed["x"].startswith(f"{status} t: r")
    sleeps = []
    with pytest.raises(BulkWriteError, match="429"):
        run_bulk(lambda body: {"errors": True, "items": [MIXED_RESPONSE["items"][2]]}, _lines(["c"]), ["c"],
                 what="put", max_items=10, max_bytes=10**6, backoff=Backoff(0, 1.0, 5.0), sleep=sleeps.append)
    assert sleeps == []  # max_retries 0: no retry


def _ok(ids):
    return {"errors": False, "items": [{"index": {"_id": i, "result": "created", "status": 201}} for i in ids]}


def _lines(ids):
    return [bulk_lines({"_op_type": "index", "_index": "i", "_id": i, "_source": {"doc_id": i}}) for i in ids]


def test_run_bulk_retries_only_the_429_items():
    sent, sleeps = [], []
    replies = iter([{"errors": True, "items": [MIXED_RESPONSE["items"][0], MIXED_RESPONSE["items"][2]]}, _ok(["c"])])

    def send(body):
        sent.append(body)
        return next(replies)

    results = run_bulk(send, _lines(["a", "c"]), ["a", "c"], what="put", max_items=10, max_bytes=10**6,
                       backoff=Backoff(3, 0.5, 10), sleep=sleeps.append)
    assert results == {"a": "created", "c": "created"}
    assert sent[1] == _lines(["c"])[0]  # only the rejected item went again
    assert sleeps == [0.5]


def test_run_bulk_reports_failed_ids_and_stops():
    calls = []

    def send(body):
        calls.append(body)
        return {"errors": True, "items": [MIXED_RESPONSE["items"][0], MIXED_RESPONSE["items"][3]]}

    with pytest.raises(BulkWriteError) as err:
        run_bulk(send, _lines(["a", "d", "e", "f"]), ["a", "d", "e", "f"], what="writing documents", max_items=2,
                 max_bytes=10**6, backoff=Backoff(3, 1, 1), sleep=lambda s: None)
    assert len(calls) == 1  # a non-429 item error is never retried, and later chunks are not sent
    assert set(err.value.failed) == {"d", "e", "f"}
    assert err.value.failed["d"].startswith("400 mapper_parsing_exception")
    assert "not attempted" in err.value.failed["e"]
    assert "writing documents: 3 document(s) failed" in str(err.value) and "'d'" in str(err.value)


def test_run_bulk_gives_up_after_max_retries():
    sleeps = []
    busy = {"errors": True, "items": [MIXED_RESPONSE["items"][2]]}
    with pytest.raises(BulkWriteError, match="429") as err:
        run_bulk(lambda body: busy, _lines(["c"]), ["c"], what="put", max_items=10, max_bytes=10**6,
                 backoff=Backoff(2, 1.0, 60), sleep=sleeps.append)
    assert sleeps == [1.0, 2.0] and list(err.value.failed) == ["c"]


def test_run_bulk_retries_a_request_rejected_with_429():
    replies = [OverloadedError("busy"), _ok(["a", "b"])]

    def send(body):
        reply = replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return reply

    sleeps = []
    assert run_bulk(send, _lines(["a", "b"]), ["a", "b"], what="put", max_items=10, max_bytes=10**6,
                    backoff=Backoff(1, 2, 60), sleep=sleeps.append) == {"a": "created", "b": "created"}
    assert sleeps == [2]


class _FlakyClient:
    """A node that answers the index mapping 503 twice, the first ``_bulk`` with a 429 item, the
    second with a request-level 429, and then as it should (what :meth:`OpenSearchStore.delete`
    asks)."""

    def __init__(self):
        from opensearchpy import exceptions as ox

        meta = {"sdr": {"format_version": FORMAT_VERSION, "index_meta": META.to_dict()}}
        mappings = [ox.TransportError(503, "unavailable", {}), ox.TransportError(503, "unavailable", {}),
                    {"idx-1": {"mappings": {"_meta": meta}}}]
        self.bulks = [{"errors": True, "items": [
                          {"delete": {"_id": "a", "status": 429, "error": {"type": "rejected_execution_exception",
                                                                           "reason": "busy"}}},
                          {"delete": {"_id": "b", "status": 404, "result": "not_found"}}]},
                      {"errors": False, "items": [{"delete": {"_id": "a", "status": 200, "result": "deleted"}}]},
                      ox.TransportError(429, "rejected", {"error": {"type": "es_rejected_execution_exception"}}),
                      {"errors": False, "items": [{"delete": {"_id": "a", "status": 200, "result": "deleted"}},
                                                  {"delete": {"_id": "b", "status": 404, "result": "not_found"}}]}]
        self.bodies = []
        self.indices = type("I", (), {"get_mapping": lambda _self, index: self._answer(mappings)})()

    @staticmethod
    def _answer(replies):
        reply = replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return reply

    def bulk(self, body, params):
        self.bodies.append(body)
        return self._answer(self.bulks)

    def update(self, **kwargs):
        return {"result": "updated"}


def test_store_requests_and_bulk_items_retry_with_the_shared_policy(monkeypatch, caplog):
    """The store's request retries (503 on the mapping) and its bulk retries (a 429 item, a
    request answered 429) wait the delays of the one policy, sdr_search.core.retry.Backoff, with the
    store's settings; only the rejected item is sent again."""
    asked, slept = [], []
    policy_delay = shared_retry.Backoff.delay

    def delay(self, attempt):  # the shared formula, recorded
        asked.append(policy_delay(self, attempt))
        return asked[-1]

    monkeypatch.setattr(shared_retry.Backoff, "delay", delay)
    monkeypatch.setattr(time, "sleep", slept.append)  # tenacity's default sleep calls time.sleep
    settings = OpenSearchSettings(max_retries=3, retry_backoff=0.25, retry_backoff_max=0.4)
    assert settings.backoff() == Backoff(3, 0.25, 0.4)
    client = _FlakyClient()
    store = OpenSearchStore("http://unused:9200", index="idx", client=client, settings=settings)
    with caplog.at_level("WARNING", logger="sdr_search.indexer.opensearch"):
        assert store.delete(["a", "b"]) == 1
    # mapping: retries 1 and 2 (0.25, then 0.5 capped at 0.4); statistics: one 429 item; documents: a 429 request
    assert slept == [0.25, 0.4, 0.25, 0.25] and asked == slept
    assert not client.bulks and len(client.bodies) == 4
    assert b'"stats:b"' in client.bodies[0] and b'"stats:a"' in client.bodies[1]
    assert b'"stats:b"' not in client.bodies[1]  # only the rejected item went again
    assert client.bodies[2] == client.bodies[3]  # a request answered 429 went again whole
    by_logger = {name: [r.getMessage() for r in caplog.records if r.name == name]
                 for name in ("sdr_search.indexer.opensearch.transport", "sdr_search.indexer.opensearch.bulk")}
    assert [m.split("; ")[-1] for m in by_logger["sdr_search.indexer.opensearch.transport"]] == [
        "retry 1 of 3 in 0.2 s", "retry 2 of 3 in 0.4 s"]
    assert [m.split(": ", 1)[0] for m in by_logger["sdr_search.indexer.opensearch.bulk"]] == [
        "deleting statistics", "deleting documents"]
    assert all("rejected with 429" in m for m in by_logger["sdr_search.indexer.opensearch.bulk"])


# -- errors, settings, laziness ----------------------------------------------------------------------------
def test_error_mapping():
    nf = error_from_response(404, {"error": {"type": "index_not_found_exception", "reason": "no such index", "index": "x"}},
                             what="reading")
    assert isinstance(nf, IndexNotFoundError) and "'x'" in str(nf)
    assert isinstance(error_from_response(429, {"error": {"type": "t", "reason": "r"}}, what="w"), OverloadedError)
    for status in (401, 403, 500, 503, "N/A"):
        assert isinstance(error_from_response(status, "boom", what="w"), BackendUnavailableError)
    bad = error_from_response(400, {"error": {"type": "mapper_parsing_exception", "reason": "bad"}}, what="w", index="i")
    assert type(bad) is StoreError and "mapper_parsing_exception" in str(bad) and "'i'" in str(bad)


# -- lexical search ---------------------------------------------------------------------------
def test_analyzer_pattern_is_the_embedded_tokenizer():
    """The mapping's tokenizer pattern (Java, (?U) = Unicode classes) is bm25s's token pattern."""
    import re

    from sdr_search.core.lexical import ENGLISH_STOPWORDS, TOKEN_PATTERN, analyze

    analysis = load_mapping("index.json")["settings"]["index"]["analysis"]
    pattern = analysis["tokenizer"]["sdr_words"]["pattern"]
    assert pattern.replace("(?U)", "") == TOKEN_PATTERN.replace("(?u)", "")
    text = "The Appellant's counsel cited Section 302 IPC; naïve café x y2 a."
    assert [t for t in re.findall(pattern.replace("(?U)", "(?u)"), text.lower()) if t not in ENGLISH_STOPWORDS] == analyze(text)
    assert analysis["filter"]["sdr_english_stop"]["stopwords"] == "_english_" and len(ENGLISH_STOPWORDS) == 33


def test_terms_query_golden():
    body = build_terms_query({"murder": 3, "knife": 1}, 5, exclude_ids=["q1"])
    assert body == {
        "size": 5, "_source": False, "stored_fields": "_none_", "docvalue_fields": ["doc_id"],
        "track_total_hits": False,
        "query": {"bool": {
            "must": [{"bool": {"should": [
                {"term": {"text": {"value": "murder", "boost": 3.0}}},
                {"term": {"text": {"value": "knife", "boost": 1.0}}},
            ]}}],
            "must_not": [{"terms": {"doc_id": ["q1"]}}],
        }},
    }
    scored = build_terms_query({"murder": 3}, 2, only_ids=["a", "b", "a"])
    assert scored["query"]["bool"]["filter"] == [{"terms": {"doc_id": ["a", "b"]}}]
    assert "must_not" not in scored["query"]["bool"]
    plain = build_terms_query({"murder": 1}, 3)
    assert plain["query"] == {"bool": {"should": [{"term": {"text": {"value": "murder", "boost": 1.0}}}]}}
    assert build_terms_query({}, 3)["query"] == {"match_none": {}}  # a stopword-only source matches nothing


def test_terms_query_from_a_long_source_fits_the_clause_limit():
    from sdr_search.core.lexical import query_terms

    text = " ".join(f"term{i} " * (1 + i % 7) for i in range(3000))
    terms = query_terms(text, 1000)
    body = build_terms_query(terms, 100)
    should = body["query"]["bool"]["should"]
    assert len(should) == 1000 < 1024  # indices.query.bool.max_clause_count default
    assert min(c["term"]["text"]["boost"] for c in should) >= max(
        c for t, c in query_terms(text).items() if t not in terms)  # the most frequent terms are kept


def test_more_like_this_query_golden():
    body = build_more_like_this_query(10, like_text="The accused was convicted.", exclude_ids=["q"])
    assert body == {
        "size": 10, "_source": False, "stored_fields": "_none_", "docvalue_fields": ["doc_id"],
        "track_total_hits": False,
        "query": {"bool": {
            "must": [{"more_like_this": {
                "fields": ["text"], "like": "The accused was convicted.", "max_query_terms": 1000,
                "min_term_freq": 1, "min_doc_freq": 1, "minimum_should_match": "1", "include": False,
            }}],
            "must_not": [{"terms": {"doc_id": ["q"]}}],
        }},
    }
    by_id = build_more_like_this_query(3, like_ids=["doc-1", "L" * 600], index="idx", max_query_terms=25,
                                       min_term_freq=2, min_doc_freq=5, minimum_should_match="30%")
    mlt = by_id["query"]["more_like_this"]
    assert mlt["like"] == [{"_index": "idx", "_id": "doc-1"}, {"_index": "idx", "_id": document_os_id("L" * 600)}]
    assert (mlt["max_query_terms"], mlt["min_term_freq"], mlt["min_doc_freq"], mlt["minimum_should_match"]) == (25, 2, 5, "30%")
    with pytest.raises(ValueError):
        build_more_like_this_query(3)
    with pytest.raises(ValueError):
        build_more_like_this_query(3, like_text="x", like_ids=["a"], index="i")
    with pytest.raises(ValueError):
        build_more_like_this_query(3, like_ids=["a"])
    with pytest.raises(ValueError):
        build_more_like_this_query(3, like_text="x", max_query_terms=0)


def test_lexical_msearch_and_response_parsing():
    top = build_terms_query({"a": 1}, 2)
    scored = build_terms_query({"a": 1}, 1, only_ids=["x"])
    header = {"index": "idx", "search_type": "dfs_query_then_fetch"}
    assert build_lexical_msearch("idx", top, [scored]) == [header, top, header, scored]
    assert build_lexical_msearch("idx", None, [scored]) == [header, scored]
    ids, scores = parse_lexical_response({"hits": {"hits": [
        {"_id": "x", "_score": 7.5, "fields": {"doc_id": ["x"]}},
        {"_id": "sha256-1", "_score": 2.0, "fields": {"doc_id": ["L" * 600]}},
    ]}})
    assert ids == ["x", "L" * 600] and scores.dtype == np.float32 and scores.tolist() == [7.5, 2.0]
    with pytest.raises(OverloadedError):
        parse_lexical_response({"status": 429, "error": {"type": "es_rejected_execution_exception", "reason": "busy"}})


class _RecordingClient:
    """Answers the two calls lexical_search makes with recorded responses, and keeps the bodies."""

    def __init__(self, responses):
        self.responses = responses
        self.bodies = []
        self.params = []
        meta = {"sdr": {"format_version": FORMAT_VERSION, "index_meta": META.to_dict(), "bm25_k1": 0.0}}
        self.indices = type("I", (), {"get_mapping": lambda _self, index: {"idx-1": {"mappings": {"_meta": meta}}}})()

    def msearch(self, body, params=None):
        self.bodies.append(body)
        self.params.append(params)
        return {"responses": self.responses}


def test_store_lexical_search_sends_one_msearch_and_reads_scores():
    def hits(*pairs):
        return {"hits": {"hits": [{"_score": s, "fields": {"doc_id": [d]}} for d, s in pairs]}}

    client = _RecordingClient([hits(("b", 9.0), ("c", 4.0)), hits(("v1", 3.5))])
    store = OpenSearchStore("http://unused:9200", index="idx", client=client)
    got = store.lexical_search("The murder weapon was a knife. Murder!", 2, exclude_ids=["a"], score_ids=["v1", "v2", "b"])
    assert got.ids == ["b", "c"] and got.scores.tolist() == [9.0, 4.0]  # k1 0 recorded: factor (1 + k1) = 1
    assert got.scored == {"v1": 3.5, "v2": 0.0, "b": 0.0}  # ids the filtered search did not return score 0
    assert got.score_of("c") == 4.0 and got.score_of("v1") == 3.5 and got.score_of("zz") == 0.0
    (body,) = client.bodies
    # the node stops the search when the store stops waiting (its timeout, 60 s by default)
    assert client.params == [{"cancel_after_time_interval": "60000ms"}]
    assert [h for h in body[::2]] == [{"index": "idx-1", "search_type": "dfs_query_then_fetch"}] * 2
    top, scored = body[1], body[3]
    should = top["query"]["bool"]["must"][0]["bool"]["should"]
    assert {c["term"]["text"]["value"]: c["term"]["text"]["boost"] for c in should} == {
        "murder": 2.0, "weapon": 1.0, "knife": 1.0}
    assert top["query"]["bool"]["must_not"] == [{"terms": {"doc_id": ["a"]}}] and top["size"] == 2
    assert scored["query"]["bool"]["filter"] == [{"terms": {"doc_id": ["v1", "v2", "b"]}}] and scored["size"] == 3
    # only scores asked for: no top-k search
    client2 = _RecordingClient([hits(("v2", 1.0))])
    got = OpenSearchStore("http://unused:9200", index="idx", client=client2).lexical_search("knife", 0, score_ids=["v2"])
    assert got.ids == [] and got.scored == {"v2": 1.0} and len(client2.bodies[0]) == 2
    mlt = OpenSearchStore("http://unused:9200", index="idx", client=_RecordingClient([hits()]),
                          settings=OpenSearchSettings(lexical_query="more_like_this", lexical_max_terms=50))
    mlt.lexical_search("knife", 3)
    assert mlt._transport.client.bodies[0][1]["query"]["more_like_this"]["max_query_terms"] == 50
    with pytest.raises(InvalidInputError):
        store.lexical_search("x", -1)


def test_store_lexical_scores_divide_out_the_recorded_k1():
    """OpenSearch 2.x's BM25 keeps the (k1 + 1) factor bm25s and 3.x drop; the store divides it out
    with the k1 and cluster version recorded in _meta (k1 1.5, the shipped mapping's, for indices
    made before it was recorded)."""
    for version, expected in (("2.19.1", 2.0), ("3.5.0", 5.0)):
        client = _RecordingClient([{"hits": {"hits": [{"_score": 5.0, "fields": {"doc_id": ["b"]}}]}}])
        meta = client.indices.get_mapping("idx")["idx-1"]["mappings"]["_meta"]
        del meta["sdr"]["bm25_k1"]
        meta["sdr"]["versions"] = {"opensearch": version}
        got = OpenSearchStore("http://unused:9200", index="idx", client=client).lexical_search("knife", 1)
        assert got.scores.tolist() == [expected], version
    assert bm25_k1(build_index_body(4, m=16, ef_construction=100, shards=1, replicas=0, meta={})) == 1.5


def test_settings_from_environment(monkeypatch):
    monkeypatch.setenv("SDR_OPENSEARCH_URL", "https://search.example:9200")
    monkeypatch.setenv("SDR_OPENSEARCH_INDEX", "judgments")
    monkeypatch.setenv("SDR_OPENSEARCH_REFRESH", "false")
    monkeypatch.setenv("SDR_OPENSEARCH_PASSWORD", "s3cret")
    s = OpenSearchSettings()
    assert (s.url, s.index, s.refresh, s.hnsw_m, s.max_retries) == ("https://search.example:9200", "judgments", "false", 16, 5)
    assert "s3cret" not in repr(s)
    store = OpenSearchStore(settings=s)
    assert (store.url, store.index) == ("https://search.example:9200", "judgments")
    for name, field in OpenSearchSettings.model_fields.items():
        assert field.description, name


def test_init_is_lazy(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("OpenSearchStore connected during construction")

    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    store = OpenSearchStore("http://127.0.0.1:9", index="x")
    assert store._transport.client is None
    store.close()
    with OpenSearchStore("http://127.0.0.1:9", index="x") as other:
        assert other._transport.client is None


def test_invalid_index_name():
    with pytest.raises(InvalidInputError, match="index name"):
        OpenSearchStore("http://127.0.0.1:9", index="Upper")


def test_unreachable_node_is_backend_unavailable(caplog):
    settings = OpenSearchSettings(timeout=2, max_retries=2, retry_backoff=0.01)
    store = OpenSearchStore("http://127.0.0.1:9", index="x", settings=settings)
    try:
        with caplog.at_level("WARNING", logger="sdr_search.indexer.opensearch.transport"):
            with pytest.raises(BackendUnavailableError, match="cannot be reached") as err:
                store.counts()
        assert err.value.__cause__ is not None
        # retried with backoff before giving up, and only by the store (no transport retries)
        assert [r.getMessage().split("; ")[-1] for r in caplog.records if r.name == "sdr_search.indexer.opensearch.transport"] == [
            "retry 1 of 2 in 0.0 s", "retry 2 of 2 in 0.0 s"]
        assert store._transport.client.transport.max_retries == 0
    finally:
        store.close()
    assert store._transport.client is None


# -- the sdr plugin's requests (opensearch-plugin/README.md) ---------------------------------------
def test_index_body_without_vectors_in_recovery_source():
    meta = build_meta(META, versions={}, hnsw={}, derived_source=False, created_at=AT, engine="lucene",
                      space_type="innerproduct", vectors=VECTORS_INDEX, recovery_source_excludes=True)
    assert meta["sdr"]["vectors"] == "index" and meta["sdr"]["recovery_source_excludes"] is True
    body = build_index_body(8, m=16, ef_construction=100, shards=1, replicas=0, meta=meta, recovery_source_excludes=True)
    assert body["mappings"]["_source"] == {"excludes": ["sentences.vector", "par_centroids"],
                                           "recovery_source_excludes": ["sentences.vector", "par_centroids"]}
    # derived source: no _source section at all (3.x rebuilds the vectors, recovery included)
    body = build_index_body(8, m=16, ef_construction=100, shards=1, replicas=0, meta=meta, derived_source=True,
                            recovery_source_excludes=True)
    assert "_source" not in body["mappings"]


def test_document_source_without_the_base64_copy():
    doc, vectors = small_doc()
    src = build_document_source(doc, vectors, encoder_tag="t", model_id="m", indexed_at=AT, vector_copy=False)
    assert "vectors_b64" not in src
    assert [s["vector"] for s in src["sentences"]] == vectors.vectors.tolist()
    actions = build_bulk_actions([(doc, vectors)], index="i", encoder_tag="t", model_id="m", indexed_at=AT, vector_copy=False)
    assert "vectors_b64" not in actions[0]["_source"]
    assert "vectors_b64" in build_bulk_actions([(doc, vectors)], index="i", encoder_tag="t", model_id="m")[0]["_source"]


def test_document_source_with_the_stored_centroids():
    """Issue 44: ``centroids=True`` adds each paragraph's normalised mean (what the pre-rank computes), bit for bit,
    as base64 float32 under ``par_centroids``; an index's mapping says whether it has the field."""
    from sdr_search.core.scoring import paragraph_centroids
    from sdr_search.indexer.opensearch.requests import CENTROIDS_FIELD, stored_centroids

    doc, vectors = small_doc()
    src = build_document_source(doc, vectors, encoder_tag="t", model_id="m", indexed_at=AT, centroids=True)
    got = decode_vectors_b64(src[CENTROIDS_FIELD], vectors.vectors.shape[1])
    np.testing.assert_array_equal(got, paragraph_centroids(vectors))
    assert got.shape[0] == len(doc.paragraphs)
    assert CENTROIDS_FIELD not in build_document_source(doc, vectors, encoder_tag="t", model_id="m", indexed_at=AT)
    (action,) = build_bulk_actions([(doc, vectors)], index="i", encoder_tag="t", model_id="m", centroids=True)
    assert action["_source"][CENTROIDS_FIELD] == src[CENTROIDS_FIELD]
    body = build_index_body(8, m=16, ef_construction=100, shards=1, replicas=0, meta={})
    assert stored_centroids(body["mappings"])
    body["mappings"]["properties"].pop(CENTROIDS_FIELD)
    assert not stored_centroids(body["mappings"])


def test_sdr_candidates_query():
    v = np.array([[1, 0], [0, 1], [0.6, 0.8]], np.float32)
    body = build_sdr_candidates_query(v, [2, 1], k=30, size=200, ef_search=100, mu=[0.1, 0.2], sigma=[0.5, 1.0],
                                      exclude_ids=["a", "a", "b"], filter={"term": {"metadata.x": 1}})
    assert body == {"size": 200, "_source": False, "stored_fields": "_none_", "docvalue_fields": ["doc_id"],
                    "track_total_hits": False, "query": {"sdr_candidates": {
                        "vectors": encode_vectors_b64(v), "paragraph_sizes": [2, 1], "mu": [0.1, 0.2], "sigma": [0.5, 1.0],
                        "k": 30, "ef_search": 100, "aggregation": "weighted-sum", "exclude": ["a", "b"],
                        "filter": {"term": {"metadata.x": 1}}}}}
    plain = build_sdr_candidates_query(v, [3], k=150, size=10, ef_search=100, aggregation="sdr-bound")["query"]["sdr_candidates"]
    assert "mu" not in plain and "exclude" not in plain and "filter" not in plain
    assert plain["ef_search"] == 150  # at least k, as the nested k-NN query asks
    with pytest.raises(ValueError, match="aggregation"):
        build_sdr_candidates_query(v, [3], k=5, size=10, ef_search=100, aggregation="max")
    with pytest.raises(ValueError, match="k must be"):
        build_sdr_candidates_query(v, [3], k=MAX_KNN_K + 1, size=10, ef_search=100)


def test_sentence_hits_msearch():
    """One sdr_candidates search per row (a source of that one sentence, sentences mode, aggregation sum: the
    score is the cosine), size k: the coordinator merges each row's hits over the shards (the index's top k)."""
    v = np.array([[1, 0], [0, 1], [0.6, 0.8]], np.float32)
    body = build_sentence_hits_msearch("idx", v, k=7, ef_search=50, oversample=3, exclude_ids=["a"],
                                       filter={"term": {"metadata.x": 1}})
    assert [line for line in body[::2]] == [{"index": "idx"}] * 3
    for row, search in zip(v, body[1::2]):
        assert search == build_sdr_candidates_query(row[None, :], [1], k=7, size=7, ef_search=50, aggregation="sum",
                                                    exclude_ids=["a"], filter={"term": {"metadata.x": 1}},
                                                    search="sentences", oversample=3)
        clause = search["query"]["sdr_candidates"]
        assert clause["paragraph_sizes"] == [1] and clause["aggregation"] == "sum" and clause["search"] == "sentences"
        assert search["size"] == 7 and clause["k"] == 7 and clause["exclude"] == ["a"]


def test_sdr_scores_msearch_and_hits():
    v = np.array([[1, 0], [0, 1]], np.float32)
    long_id = "x" * 600
    body = build_sdr_scores_msearch("idx", [(v, [1, 1], [0.0, 0.1], [1.0, 0.5]), (v[:1], [1], [0.2], [0.3])],
                                    ["a", long_id, "a"], explain=True)
    assert [h for h in body[::2]] == [{"index": "idx"}, {"index": "idx"}]
    first, second = body[1], body[3]
    assert first["query"] == {"ids": {"values": ["a", document_os_id(long_id)]}} and first["size"] == 2
    # the hits known by their doc_id doc values: no stored field read (each would decompress the whole source)
    assert (first["_source"], first["stored_fields"], first["docvalue_fields"]) == (False, "_none_", ["doc_id"])
    assert first["rescore"]["window_size"] == 2 and first["rescore"]["sdr"]["explain"] is True
    assert first["rescore"]["sdr"]["mu"] == [0.0, 0.1] and first["rescore"]["sdr"]["paragraph_sizes"] == [1, 1]
    assert "explain" not in second["rescore"]["sdr"] and second["rescore"]["sdr"]["vectors"] == encode_vectors_b64(v[:1])
    assert "explain_source" not in first["rescore"]["sdr"]
    # the explained hits' documents: asked of the first source with explain or explain_top only
    body = build_sdr_scores_msearch("idx", [(v, [1, 1], [0.0, 0.1], [1.0, 0.5]), (v[:1], [1], [0.2], [0.3])], ["a"],
                                    explain_top=3, explain_source=["doc_id", "title"])
    assert body[1]["rescore"]["sdr"]["explain_top"] == 3
    assert body[1]["rescore"]["sdr"]["explain_source"] == ["doc_id", "title"]
    assert "explain_source" not in body[3]["rescore"]["sdr"]
    assert "explain_source" not in build_sdr_scores_msearch("idx", [(v, [1, 1], [0.0, 0.1], [1.0, 0.5])], ["a"],
                                                            explain_source=["title"])[1]["rescore"]["sdr"]
    assert parse_sdr_sources({"hits": {"hits": [
        {"_score": 1.5, "fields": {"doc_id": ["a"], "_sdr": [{}], "_sdr_source": [{"title": "A", "doc_id": "a"}]}},
        {"_score": 1.0, "fields": {"doc_id": ["b"]}}]}}) == {"a": {"title": "A", "doc_id": "a"}}
    ids, scores, why = parse_sdr_hits({"hits": {"hits": [
        {"_score": 1.5, "fields": {"doc_id": ["a"], "_sdr": [{"score": 1.5}]}},
        {"_score": -3.4028234663852886e38, "fields": {"doc_id": ["b"]}}]}})
    assert ids == ["a", "b"] and scores[0] == 1.5 and scores[1] == -np.inf and why == [{"score": 1.5}, None]
    with pytest.raises(StoreError, match="sdr"):
        parse_sdr_hits({"error": {"type": "illegal_argument_exception", "reason": "[sdr] bad"}, "status": 400})


def test_vectors_search_and_hit():
    assert build_vectors_search(["a", "b", "a"]) == {
        "size": 2, "_source": ["doc_id", "par_sizes"], "docvalue_fields": ["doc_id"], "track_total_hits": False,
        "query": {"ids": {"values": ["a", "b"]}}, "ext": {"sdr_vectors": {}}}
    assert build_vectors_search(["a"], fields=()) == {
        "size": 1, "_source": False, "stored_fields": "_none_", "docvalue_fields": ["doc_id"], "track_total_hits": False,
        "query": {"ids": {"values": ["a"]}}, "ext": {"sdr_vectors": {}}}
    assert hit_doc_id({"_id": "sha256-00", "fields": {"doc_id": ["L" * 600]}}) == "L" * 600
    assert hit_doc_id({"_id": "a", "_source": {"doc_id": "a"}}) == "a"
    assert hit_doc_id({"_id": "a"}) is None  # never the _id: it is a hash for long ids
    v = np.array([[1, 0], [0, 1], [0.5, -0.25]], np.float32)
    hit = {"_source": {"doc_id": "a", "par_sizes": [2, 1]}, "fields": {"_sdr_vectors": [
        {"sentences": 3, "dim": 2, "paragraph_sizes": [2, 1], "vectors": encode_vectors_b64(v)}]}}
    got = parse_vector_hit(hit, 2)
    np.testing.assert_array_equal(got.vectors, v)
    assert got.par_offsets.tolist() == [0, 2, 3]
    with pytest.raises(StoreError, match="damaged"):
        parse_vector_hit({**hit, "_source": {"doc_id": "a", "par_sizes": [1, 2]}}, 2)
    with pytest.raises(StoreError, match="dimension"):
        parse_vector_hit(hit, 3)
    with pytest.raises(StoreError, match="no vectors"):
        parse_vector_hit({"_source": {"doc_id": "a"}}, 2)
    with pytest.raises(StoreError, match="missing"):
        parse_vector_hit({"_source": {"doc_id": "a", "par_sizes": []}, "fields": {"_sdr_vectors": [
            {"sentences": 0, "dim": 2, "paragraph_sizes": [], "vectors": ""}]}}, 2)


def test_mean_vectors_search_and_hit():
    from sdr_search.indexer.opensearch.requests import parse_mean_hit

    assert build_vectors_search(["a"], fields=["doc_id"], mean=True)["ext"] == {"sdr_vectors": {"mean": True}}
    hit = {"_source": {"doc_id": "a"}, "fields": {"_sdr_vectors": [
        {"sentences": 3, "dim": 2, "paragraphs": 2, "mean": encode_vectors_b64(np.array([[0.6, 0.8]], np.float32))}]}}
    n, mean = parse_mean_hit(hit, 2)
    assert n == 2 and mean.tolist() == pytest.approx([0.6, 0.8])
    with pytest.raises(StoreError, match="no mean vector"):
        parse_mean_hit({"_source": {"doc_id": "a"}, "fields": {}}, 2)


def test_centroid_rows_search_and_hit():
    from sdr_search.indexer.opensearch.requests import parse_centroid_rows_hit

    cs = np.array([[1.0, 0.0], [0.6, 0.8]], np.float32)
    ext = build_vectors_search(["a"], fields=["doc_id"], centroids=cs)["ext"]
    assert ext == {"sdr_vectors": {"centroids": encode_vectors_b64(cs)}}
    rows = encode_vectors_b64(np.array([[0.5], [0.25]], np.float32))
    hit = {"_source": {"doc_id": "a"}, "fields": {"_sdr_vectors": [{"sentences": 3, "paragraphs": 2, "centroid_rows": rows}]}}
    assert parse_centroid_rows_hit(hit, 2).tolist() == [0.5, 0.25]
    with pytest.raises(StoreError, match="1 asked for"):
        parse_centroid_rows_hit(hit, 1)
    with pytest.raises(StoreError, match="no centroid rows"):
        parse_centroid_rows_hit({"_source": {"doc_id": "a"}, "fields": {}}, 2)
    with pytest.raises(StoreError, match="missing"):
        parse_centroid_rows_hit({"_source": {"doc_id": "a"}, "fields": {"_sdr_vectors": [
            {"sentences": 0, "paragraphs": 0, "centroid_rows": None}]}}, 2)


# -- the sdr plugin's limits (issue 41) ------------------------------------------------------------
def test_plugin_limits_are_read_from_the_cluster_settings():
    from sdr_search.indexer.opensearch.requests import PluginLimits, parse_plugin_limits

    assert parse_plugin_limits(None) == PluginLimits()
    assert parse_plugin_limits({"defaults": {"sdr.threads": "-1"}}) == PluginLimits()  # an older plugin: the defaults
    got = parse_plugin_limits({
        "defaults": {"sdr.limits.max_source_sentences": "20000", "sdr.limits.max_explain_pairs": "1000000",
                     "sdr.limits.max_fetch_values": "10000000", "sdr.limits.unknown": "3"},
        "persistent": {"sdr.limits.max_explain_pairs": "5000", "sdr.limits.max_fetch_values": "bad"},
        "transient": {"sdr.limits.max_explain_pairs": "700", "sdr.limits.max_candidate_hits": "99"},
    })
    assert got == PluginLimits(max_explain_pairs=700, max_candidate_hits=99)


def test_what_one_plugin_request_may_hold():
    from sdr_search.indexer.opensearch.requests import (PluginLimits, candidate_hits_per_sentence, check_source_limits,
                                                        explained_per_search, pack_by_values)

    limits = PluginLimits(max_source_sentences=10, max_source_values=40, max_explain_pairs=100)
    check_source_limits(limits, 10, 4)
    with pytest.raises(InvalidInputError, match=r"11 sentences, more than the 10 .*sdr.limits.max_source_sentences"):
        check_source_limits(limits, 11, 1)
    with pytest.raises(InvalidInputError, match=r"5 x 9 = 45 values, more than the 40 .*sdr.limits.max_source_values"):
        check_source_limits(limits, 5, 9)
    assert explained_per_search(limits, 30) == 3 and explained_per_search(limits, 101) == 1
    assert candidate_hits_per_sentence(30, 100, "documents", 4) == 100
    assert candidate_hits_per_sentence(300, 100, "documents", 4) == 300
    assert candidate_hits_per_sentence(30, 100, "sentences", 4) == 120
    ids = ["a", "b", "c", "d", "e"]
    weights = {"a": 3, "b": 3, "c": 10, "d": 1, "e": 1}
    assert list(pack_by_values(ids, weights, 6, 10)) == [["a", "b"], ["c"], ["d", "e"]]  # c alone, over the limit
    assert list(pack_by_values(ids, weights, 100, 2)) == [["a", "b"], ["c", "d"], ["e"]]
    assert list(pack_by_values([], weights, 6, 10)) == []


def test_sentence_counts_search():
    from sdr_search.indexer.opensearch.requests import build_sentence_counts_search, parse_sentence_counts

    body = build_sentence_counts_search(["a", "b", "a"])
    assert body["size"] == 2 and body["_source"] is False and body["docvalue_fields"] == ["doc_id", "n_sentences"]
    assert body["query"] == {"ids": {"values": [document_os_id("a"), document_os_id("b")]}}
    r = {"hits": {"hits": [{"_id": "x", "fields": {"doc_id": ["a"], "n_sentences": [7]}},
                           {"_id": "y", "fields": {"doc_id": ["b"]}}]}}
    assert parse_sentence_counts(r) == {"a": 7, "b": 0}


@pytest.mark.unit
def test_index_body_knn_encoder_sq_quantises_the_lucene_graph_only():
    """SDR_OPENSEARCH_KNN_ENCODER=sq (issue 44): the lucene method gets Lucene's scalar quantiser
    (``encoder: sq``); the default mapping has none; faiss or an unknown encoder is refused."""
    def method(body):
        return body["mappings"]["properties"]["sentences"]["properties"]["vector"]["method"]

    plain = build_index_body(8, m=8, ef_construction=64, shards=1, replicas=0, meta={})
    assert "encoder" not in method(plain)["parameters"]
    sq = build_index_body(8, m=8, ef_construction=64, shards=1, replicas=0, meta={}, knn_encoder="sq")
    assert method(sq)["parameters"] == {"m": 8, "ef_construction": 64, "encoder": {"name": "sq"}}
    assert method(sq)["engine"] == "lucene"
    with pytest.raises(ValueError, match="lucene"):
        build_index_body(8, m=8, ef_construction=64, shards=1, replicas=0, meta={}, engine="faiss", knn_encoder="sq")
    with pytest.raises(ValueError, match="knn_encoder"):
        build_index_body(8, m=8, ef_construction=64, shards=1, replicas=0, meta={}, knn_encoder="pq")
