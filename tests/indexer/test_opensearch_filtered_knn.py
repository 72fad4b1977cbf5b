"""A metadata filter inside the OpenSearch k-NN search (``capabilities.filtered_knn``).

Unit tests: the pure request builders (the filter query on the typed metadata terms, the nested
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
from sdr_search.core.errors import InvalidInputError
from sdr_search.core.filters import matches
from sdr_search.core.metadata import metadata_terms
from sdr_search.indexer.opensearch.requests import (
    MATCH_NONE,
    MAX_ALLOWED_IDS,
    METADATA_TERMS_FIELD,
    build_candidate_filter,
    build_metadata_filter,
    build_more_like_this_query,
    build_nested_knn_query,
    build_scan_query,
    build_terms_query,
)

# -- pure builders ----------------------------------------------------------------------------------------
def _terms(*terms: str) -> dict:
    return {"terms": {METADATA_TERMS_FIELD: list(terms)}}


@pytest.mark.unit
def test_a_filter_is_one_terms_query_per_field_on_the_typed_metadata_terms():
    assert build_metadata_filter({"court": "supreme"}) == {"bool": {"filter": [_terms('["court","supreme"]')]}}
    got = build_metadata_filter({"court": ["high", "low"], "year": [2019, 2020.0], "flag": True})
    assert got == {"bool": {"filter": [_terms('["court","high"]', '["court","low"]'),
                                       _terms('["year",2019]', '["year",2020]'), _terms('["flag",true]')]}}
    # a nested value is named by its path; the terms are those the documents carry (metadata_terms)
    assert build_metadata_filter({"where.city": "Oslo"}) == {"bool": {"filter": [_terms('["where.city","Oslo"]')]}}
    assert metadata_terms({"where": {"city": "Oslo"}, "year": 2019.0, "tags": ["a", None, []]}) == \
        ['["tags","a"]', '["where.city","Oslo"]', '["year",2019]']
    assert build_metadata_filter({}) is None
    assert build_metadata_filter({"court": []}) == MATCH_NONE  # an empty list matches nothing


@pytest.mark.unit
def test_values_keep_their_type_in_the_terms_as_the_filter_semantics_say():
    # 1 equals 1.0 (one term); a boolean, a number and a string are three different terms
    assert build_metadata_filter({"year": [2019.0, 2019, True, "2019"]}) == \
        {"bool": {"filter": [_terms('["year","2019"]', '["year",2019]', '["year",true]')]}}
    assert build_metadata_filter({"score": [0.5, -0.0]}) == {"bool": {"filter": [_terms('["score",0.5]', '["score",0]')]}}
    long = "x" * 257  # a long string is one term of fixed size (its SHA-256), equal only to the same string
    term = build_metadata_filter({"court": long})["bool"]["filter"][0]["terms"][METADATA_TERMS_FIELD][0]
    assert term == metadata_terms({"court": long})[0] and len(term) < 100 and "sha256" in term
    assert [matches({"year": 2019}, {"year": x}) for x in (2019.0, True, "2019")] == [True, False, False]


@pytest.mark.unit
def test_a_filter_over_the_limits_is_refused_before_any_request():
    with pytest.raises(InvalidInputError, match=r"'year': 10,000 values, over the limit of 1,000"):
        build_metadata_filter({"year": list(range(10_000))})
    assert len(build_metadata_filter({"year": list(range(1000))})["bool"]["filter"][0]["terms"][METADATA_TERMS_FIELD]) == 1000
    for flt, match in (({"year": None}, "null"), ({"where": {"city": "x"}}, "dotted path"), ({"year": [[1]]}, "'year'"),
                       ({f"f{i}": 1 for i in range(17)}, "17 fields"), ({"": 1}, "non-empty")):
        with pytest.raises(InvalidInputError, match=match):
            build_metadata_filter(flt)


@pytest.mark.unit
def test_candidate_filter_ands_the_metadata_filter_with_allowed_ids():
    meta = build_metadata_filter({"year": 2019})
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
    flt = build_metadata_filter({"year": 2019})
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
    flt = build_metadata_filter({"flag": True})
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
    stage = "sdr_candidate_pool" if store.capabilities.sdr_candidates else "sentence_knn"  # the plugin's, or k-NN hits
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
