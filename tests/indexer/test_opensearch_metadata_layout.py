"""An OpenSearch index made before layout 2 (its metadata mapped field by field, by OpenSearch's
dynamic mapping) met by this sdr-search, on a real node: it is read and searched without a filter
as before; a metadata filter or a write is refused (``IndexLayoutError``, HTTP 409) with a message
that says to rebuild it with ``sdr reindex`` (docs/opensearch.md "Metadata"), never answered with
the wrong documents. The old index is made the way the old code made it: the store's own creation
with the old metadata mapping and ``format_version`` 1, documents written without
``metadata_terms``."""

from __future__ import annotations

import dataclasses

import pytest

from factories import META, FakeEncoder, make_docs
from sdr_search.core.errors import IndexLayoutError
from sdr_search.indexer.opensearch import OpenSearchSettings, OpenSearchStore
from sdr_search.indexer.opensearch import requests as osr

LAYOUT_1_METADATA = {"type": "object", "dynamic": True}  # mappings/index.json before layout 2
FAKE_META = dataclasses.replace(META, model_id=FakeEncoder.model_id, encoder_tag=FakeEncoder.cache_tag)  # the service's encoder


@pytest.mark.unit
def test_the_metadata_layout_is_read_from_the_mapping():
    body = osr.build_index_body(16, m=16, ef_construction=100, shards=1, replicas=0, meta={})
    assert body["mappings"]["properties"]["metadata"] == {"type": "object", "enabled": False}
    assert not osr.legacy_metadata(body["mappings"])
    old = {"properties": {**{k: v for k, v in body["mappings"]["properties"].items() if k != osr.METADATA_TERMS_FIELD},
                          "metadata": {"dynamic": "true", "properties": {"court": {"type": "text"}}}}}
    assert osr.legacy_metadata(old)


@pytest.fixture()
def layout_1(opensearch_url, os_index, monkeypatch):
    """``(store, items)``: a layout-1 index holding six documents with metadata, and a handle on it."""
    from opensearchpy import OpenSearch, helpers

    from sdr_search.indexer.opensearch import indices as indices_module

    real_body, real_meta = indices_module.build_index_body, indices_module.build_meta

    def old_body(*args, **kwargs):
        body = real_body(*args, **kwargs)
        body["mappings"]["properties"]["metadata"] = dict(LAYOUT_1_METADATA)
        del body["mappings"]["properties"][osr.METADATA_TERMS_FIELD]
        return body

    def old_meta(*args, **kwargs):
        meta = real_meta(*args, **kwargs)
        meta["sdr"]["format_version"] = 1
        return meta

    name = os_index("sdr-layout1")
    settings = OpenSearchSettings(replicas=0)
    with monkeypatch.context() as m:
        m.setattr(indices_module, "build_index_body", old_body)
        m.setattr(indices_module, "build_meta", old_meta)
        with OpenSearchStore(opensearch_url, index=name, settings=settings) as maker:
            maker.ensure_meta(FAKE_META)
            vector_copy = maker._indices.resolve().vectors == osr.VECTORS_B64
    items = [(dataclasses.replace(d, metadata={"court": ["supreme", "high"][i % 2], "year": 2000 + i}), v)
             for i, (d, v) in enumerate(make_docs(6, seed=41))]
    actions = osr.build_bulk_actions(items, index=name, encoder_tag=FAKE_META.encoder_tag, model_id=FAKE_META.model_id,
                                     vector_copy=vector_copy)
    for action in actions:  # what the old code wrote
        del action["_source"][osr.METADATA_TERMS_FIELD]
    client = OpenSearch([opensearch_url], timeout=60)
    try:
        helpers.bulk(client, actions, refresh=True)
        mapped = client.indices.get_mapping(index=name)[name]["mappings"]
        assert "court" in mapped["properties"]["metadata"]["properties"]  # mapped field by field, as before
    finally:
        client.close()
    store = OpenSearchStore(opensearch_url, index=name, settings=settings)
    yield store, items
    store.close()


@pytest.mark.integration
def test_a_layout_1_index_is_read_and_searched_without_a_filter(layout_1):
    store, items = layout_1
    assert store.counts()["documents"] == 6
    assert store.get("d003").document.metadata == {"court": "high", "year": 2003}
    assert store.metadata_of(["d000"]) == {"d000": {"court": "supreme", "year": 2000}}
    q = items[2][1].vectors[:1]
    assert store.sentence_knn(q, 3).doc_ids[0][0] == "d002"
    assert store.lexical_search(items[2][0].text, 3).ids
    assert store.delete(["d005"]) == 1 and store.counts()["documents"] == 5


@pytest.mark.integration
def test_a_layout_1_index_refuses_filters_and_writes_naming_sdr_reindex(layout_1):
    store, items = layout_1
    source = items[0][1]
    calls = {"ids_matching": lambda: store.ids_matching({"court": "high"}),
             "sentence_knn": lambda: store.sentence_knn(source.vectors[:1], 3, filter={"court": "high"}),
             "lexical_search": lambda: store.lexical_search("Sentence", 3, filter={"court": "high"})}
    if store.capabilities.sdr_candidates:
        calls["sdr_candidates"] = lambda: store.sdr_candidates(source, 3, 3, filter={"court": "high"})
    for what, call in calls.items():
        with pytest.raises(IndexLayoutError, match=r"field by field.*filtered by metadata.*`sdr reindex`"):
            call()
        assert what
    (doc, vec), = make_docs(1, seed=42, prefix="new")
    with pytest.raises(IndexLayoutError, match=r"not written to.*`sdr reindex`"):
        store.put([(doc, vec)])
    assert store.counts()["documents"] == 6


@pytest.mark.integration
def test_the_service_answers_409_for_a_filter_or_a_write_on_a_layout_1_index(layout_1):
    from fastapi.testclient import TestClient

    from sdr_search.indexer.stats_job import refresh_stats
    from sdr_search.reranker.service.app import create_app
    from sdr_search.reranker.service.settings import ServiceSettings

    store, _ = layout_1
    refresh_stats(store, exact=True, sample_size=10, seed=0)
    app = create_app(stores={"default": store}, encoder=FakeEncoder(),
                     settings=ServiceSettings(api_key=None, stats_refresh_delay_s=0))
    with TestClient(app) as client:
        plain = client.post("/v1/indices/default/more_like_this", json={"id": "d000", "size": 3, "method": "sdr"})
        assert plain.status_code == 200, plain.text
        assert len(plain.json()["hits"]) == 3
        for r in (client.post("/v1/indices/default/more_like_this", json={"id": "d000", "filter": {"court": "high"}}),
                  client.put("/v1/indices/default/documents/n1", json={"text": "A new document. It has two sentences."}),
                  client.post("/v1/indices/default/_bulk", content=b'{"id": "n2", "text": "One more. And another."}\n',
                              headers={"Content-Type": "application/x-ndjson"})):
            assert r.status_code == 409, r.text
            assert r.json()["error"]["type"] == "IndexLayoutError" and "sdr reindex" in r.json()["error"]["message"]
    assert store.counts()["documents"] == 6
