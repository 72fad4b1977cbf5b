"""A metadata filter inside the OpenSearch k-NN search (``capabilities.filtered_knn``).

Unit tests: the pure request builders (the metadata mapping read, the filter query, the nested
k-NN query's own ``filter``, the lexical and scan bodies). Integration tests, on a real node
(``OPENSEARCH_URL`` or the local node of ``scripts/opensearch-node.sh``): a filter matching 1 % of
the documents still returns ``size`` hits, ranked as exhaustive SDR over the filtered set ranks
them, and every filter shape the k-NN plugin has to join down to the nested sentences works.
(The store contract, ``tests/store_contract.py``, checks the same methods on both stores.)
"""

from __future__ import annotations

import dataclasses
import json
import uuid

import numpy as np
import pytest

from factories import META, make_docs
from sdr_search.core.errors import InvalidInputError, StoreError
from sdr_search.core.filters import matches
from sdr_search.indexer.opensearch.requests import (
    MATCH_NONE,
    MAX_ALLOWED_IDS,
    MetadataField,
    build_candidate_filter,
    build_index_body,
    build_metadata_filter,
    build_more_like_this_query,
    build_nested_knn_query,
    build_scan_query,
    build_terms_query,
    metadata_fields,
)

# what OpenSearch's dynamic mapping makes of {"court": "x", "year": 2019, "score": 0.5, "flag": true,
# "tags": ["a"], "where": {"city": "x"}} (read back from a 2.19.1 node), plus hand-made fields
MAPPING = {"mappings": {"properties": {"doc_id": {"type": "keyword"}, "metadata": {"dynamic": "true", "properties": {
    "court": {"type": "text", "fields": {"keyword": {"type": "keyword", "ignore_above": 256}}},
    "year": {"type": "long"},
    "score": {"type": "float"},
    "flag": {"type": "boolean"},
    "tags": {"type": "text", "fields": {"keyword": {"type": "keyword", "ignore_above": 256}}},
    "where": {"properties": {"city": {"type": "text", "fields": {"keyword": {"type": "keyword", "ignore_above": 256}}}}},
    "code": {"type": "keyword"},
    "small": {"type": "byte"},
    "prose": {"type": "text"},
}}}}}
FIELDS = metadata_fields(MAPPING)


# -- pure builders ----------------------------------------------------------------------------------------
@pytest.mark.unit
def test_metadata_fields_name_the_exact_value_path_of_each_field():
    assert FIELDS["court"] == MetadataField("string", "metadata.court.keyword", 256, "text")
    assert FIELDS["code"] == MetadataField("string", "metadata.code", None, "keyword")
    assert FIELDS["year"] == MetadataField("integer", "metadata.year", None, "long")
    assert FIELDS["score"] == MetadataField("float", "metadata.score", None, "float")
    assert FIELDS["flag"] == MetadataField("boolean", "metadata.flag", None, "boolean")
    assert FIELDS["where"].kind == "object" and FIELDS["where.city"].path == "metadata.where.city.keyword"
    assert FIELDS["prose"].kind == "other"
    assert metadata_fields({"mappings": {"properties": {"metadata": {"type": "object", "dynamic": True}}}}) == {}
    assert metadata_fields(build_index_body(16, m=16, ef_construction=100, shards=1, replicas=0, meta={})) == {}


@pytest.mark.unit
def test_a_filter_is_term_queries_or_ed_per_field_and_anded_across_fields():
    assert build_metadata_filter({"court": "supreme"}, FIELDS) == \
        {"bool": {"filter": [{"term": {"metadata.court.keyword": "supreme"}}]}}
    got = build_metadata_filter({"court": ["high", "low"], "year": [2019, 2020.0], "flag": True}, FIELDS)
    assert got == {"bool": {"filter": [
        {"bool": {"should": [{"term": {"metadata.court.keyword": "high"}}, {"term": {"metadata.court.keyword": "low"}}],
                  "minimum_should_match": 1}},
        {"bool": {"should": [{"term": {"metadata.year": 2019}}, {"term": {"metadata.year": 2020}}],
                  "minimum_should_match": 1}},
        {"term": {"metadata.flag": True}},
    ]}}
    # never a terms query: the k-NN plugin (2.19) applies a numeric terms query to the nested sentences
    assert '"terms"' not in json.dumps(got)
    assert build_metadata_filter({"where.city": "Oslo"}, FIELDS) == \
        {"bool": {"filter": [{"term": {"metadata.where.city.keyword": "Oslo"}}]}}
    assert build_metadata_filter({}, FIELDS) is None


@pytest.mark.unit
def test_values_that_cannot_equal_a_stored_value_are_dropped_as_the_filter_semantics_say():
    # 1 equals 1.0; a boolean only equals a boolean; a string never equals a number
    assert build_metadata_filter({"year": [2019.0, 2019, True, "2019"]}, FIELDS) == \
        {"bool": {"filter": [{"term": {"metadata.year": 2019}}]}}
    assert build_metadata_filter({"score": [1, 0.5]}, FIELDS)["bool"]["filter"][0]["bool"]["should"] == \
        [{"term": {"metadata.score": 1.0}}, {"term": {"metadata.score": 0.5}}]
    for flt in ({"year": 2019.5}, {"year": "2019"}, {"flag": 1}, {"court": 3}, {"missing": 1}, {"where": "x"},
                {"small": 300}, {"court": "x" * 257}, {"court": "supreme", "year": True}):
        assert build_metadata_filter(flt, FIELDS) == MATCH_NONE, flt
    with pytest.raises(StoreError, match="keyword sub-field"):
        build_metadata_filter({"prose": "x"}, FIELDS)
    assert [v for v in (matches({"year": 2019}, {"year": x}) for x in (2019.0, True, "2019"))] == [True, False, False]


@pytest.mark.unit
def test_candidate_filter_ands_the_metadata_filter_with_allowed_ids():
    meta = build_metadata_filter({"year": 2019}, FIELDS)
    assert build_candidate_filter(None) is None
    assert build_candidate_filter(meta) == meta
    assert build_candidate_filter(None, ["a", "b", "a"]) == {"terms": {"doc_id": ["a", "b"]}}
    assert build_candidate_filter(meta, ["a"]) == {"bool": {"filter": [meta, {"terms": {"doc_id": ["a"]}}]}}
    assert build_candidate_filter(meta, []) == MATCH_NONE
    assert build_candidate_filter(MATCH_NONE, ["a"]) == MATCH_NONE
    with pytest.raises(ValueError, match="filter="):
        build_candidate_filter(None, [str(i) for i in range(MAX_ALLOWED_IDS + 1)])


@pytest.mark.unit
def test_the_filter_is_the_knn_querys_own_and_holds_the_excluded_ids():
    flt = build_metadata_filter({"year": 2019}, FIELDS)
    body = build_nested_knn_query([0.6, 0.8], 5, exclude_ids=["x", "y"], ef_search=50, filter=flt)
    assert body == {
        "size": 5, "_source": False, "stored_fields": "_none_", "docvalue_fields": ["doc_id"],
        "track_total_hits": False,
        "query": {"nested": {"path": "sentences", "score_mode": "max", "query": {"knn": {"sentences.vector": {
            "vector": [pytest.approx(0.6), pytest.approx(0.8)], "k": 5,  # excluded inside the filter: k not raised
            "method_parameters": {"ef_search": 50},
            "filter": {"bool": {"filter": [flt], "must_not": [{"terms": {"doc_id": ["x", "y"]}}]}},
        }}}}},
    }
    plain = build_nested_knn_query([0.6, 0.8], 5, exclude_ids=["x"])
    assert plain["query"]["bool"]["must_not"] == [{"terms": {"doc_id": ["x"]}}]
    assert plain["query"]["bool"]["must"][0]["nested"]["query"]["knn"]["sentences.vector"]["k"] == 6
    assert "filter" not in build_nested_knn_query([1.0], 3, filter={"terms": {"doc_id": ["a"]}})["query"]["nested"] \
        and build_nested_knn_query([1.0], 3, filter={"terms": {"doc_id": ["a"]}})["query"]["nested"]["query"]["knn"][
            "sentences.vector"]["filter"] == {"bool": {"filter": [{"terms": {"doc_id": ["a"]}}]}}


@pytest.mark.unit
def test_lexical_and_scan_bodies_take_the_filter_as_a_non_scoring_clause():
    flt = build_metadata_filter({"flag": True}, FIELDS)
    body = build_terms_query({"alpha": 2}, 10, exclude_ids=["x"], filter=flt)
    assert body["query"]["bool"]["filter"] == [flt]
    assert body["query"]["bool"]["must_not"] == [{"terms": {"doc_id": ["x"]}}]
    assert build_terms_query({}, 10, filter=flt)["query"]["bool"]["filter"] == [flt]
    both = build_more_like_this_query(3, like_text="a b", only_ids=["a"], filter=flt)["query"]["bool"]["filter"]
    assert both == [{"terms": {"doc_id": ["a"]}}, flt]
    assert "filter" not in json.dumps(build_terms_query({"alpha": 1}, 10))
    scan = build_scan_query(size=100, source=False, query=flt)
    assert scan["query"] == {"bool": {"filter": [flt]}} and scan["sort"] == [{"doc_id": "asc"}]
    assert "query" not in build_scan_query(size=100, source=False)


# -- on a real node ----------------------------------------------------------------------------------------
N_DOCS = 1200  # 1 % = 12 documents


def _group(i: int) -> dict:
    return {"one_pct": i % 100 == 7, "court": ["supreme", "high", "district"][i % 3], "year": 2000 + i % 4}


@pytest.fixture(scope="module")
def filtered_store(opensearch_url):
    from sdr_search.indexer.opensearch import OpenSearchSettings, OpenSearchStore
    from sdr_search.indexer.stats_job import refresh_stats

    store = OpenSearchStore(opensearch_url, index=f"sdr-filtered-{uuid.uuid4().hex[:10]}",
                            settings=OpenSearchSettings(replicas=0))
    items = [(dataclasses.replace(d, metadata=_group(i)), v)
             for i, (d, v) in enumerate(make_docs(N_DOCS, seed=11, n_pars=3, n_sents=4))]
    try:
        store.ensure_meta(META)
        store.put(items)
        refresh_stats(store, exact=True, sample_size=200, seed=0)
        yield store, items
    finally:
        store.drop()
        store.close()


@pytest.mark.integration
def test_a_one_percent_filter_gets_k_documents_per_sentence_exactly(filtered_store):
    store, items = filtered_store
    assert store.capabilities.filtered_knn
    allowed = store.ids_matching({"one_pct": True})
    assert len(allowed) == N_DOCS // 100
    vectors = {d.id: v.vectors for d, v in items}
    source = items[0][1].vectors
    hits = store.sentence_knn(source, 10, exclude_ids=[allowed[0]], filter={"one_pct": True})
    for row, got in zip(source, hits.doc_ids):
        best = {i: float((vectors[i] @ row).max()) for i in allowed if i != allowed[0]}
        assert got == sorted(best, key=lambda i: -best[i])[:10]  # k hits, none missed, in order
    # the same restriction as an id list (what ids_matching hands an engine that passes allowed_ids)
    assert store.sentence_knn(source, 10, exclude_ids=[allowed[0]], allowed_ids=allowed).doc_ids == hits.doc_ids
    with pytest.raises(InvalidInputError, match="filter="):
        store.sentence_knn(source, 10, allowed_ids=[f"x{i}" for i in range(MAX_ALLOWED_IDS + 1)])


@pytest.mark.integration
@pytest.mark.parametrize("flt", [{"one_pct": True}, {"court": "high", "year": [2001, 2003]}])
def test_a_filtered_query_returns_size_hits_ranked_as_exhaustive_sdr(filtered_store, flt):
    from sdr_search.reranker.engine import MLTSettings, MoreLikeThis, Query

    store, items = filtered_store
    by_id = {d.id: d.metadata for d, _ in items}
    allowed = [i for i, m in by_id.items() if matches(m, flt)]
    size = 10
    engine = MoreLikeThis(store=store, settings=MLTSettings(method="sdr", candidates=40, knn_k=10))
    sources = [i for i in by_id if i not in set(allowed)][:10]
    agree = []
    for src in sources:
        res = engine.run(Query(id=src, size=size, filter=flt))
        exhaustive = engine.run(Query(id=src, size=size, candidate_ids=allowed))
        assert len(res.hits) == size and all(h.id in set(allowed) for h in res.hits)
        agree.append(len({h.id for h in res.hits} & {h.id for h in exhaustive.hits}) / size)
    if len(allowed) <= 40:  # K covers the filtered set: the filtered ranking is exhaustive SDR's
        assert np.mean(agree) >= 0.99, agree
    else:  # random vectors give the k-NN stage no signal over a broad set; every hit still matches
        assert np.mean(agree) > 0.0, agree
    # K = size under the matches: through the filtered k-NN (with K >= the matches the engine ranks them all)
    narrow = MoreLikeThis(store=store, settings=MLTSettings(method="sdr", candidates=size, knn_k=10))
    searched = []
    stage = "sdr_candidates" if store.capabilities.sdr_candidates else "sentence_knn"  # the plugin's, or k-NN hits
    real = getattr(store, stage)
    setattr(store, stage, lambda *a, **k: searched.append(k.get("filter")) or real(*a, **k))
    try:
        res = narrow.run(Query(id=sources[0], size=size, filter=flt))
    finally:
        delattr(store, stage)
    assert searched == [flt] and len(res.hits) == size and all(h.id in set(allowed) for h in res.hits)
    hybrid = MoreLikeThis(store=store, settings=MLTSettings(candidates=20, knn_k=10))
    res = hybrid.run(Query(id=sources[0], size=size, filter=flt))
    assert len(res.hits) == size and all(h.id in set(allowed) for h in res.hits)
    assert engine.run(Query(id=sources[0], size=size, filter={"year": 1999})).hits == []
