"""What the OpenSearch store creates and sends, checked on a real node (the ``opensearch_url``
fixture): k-NN engine and space type recorded and honoured, derived source set explicitly, the
k-NN query's limits (``k <= 10,000``, ``ef_search >= 2``) and per-query ``ef_search``, replicas."""

from __future__ import annotations

import json

import numpy as np
import pytest
from opensearchpy import OpenSearch
from pydantic import ValidationError

from factories import AS_GIVEN
from sdr_search.indexer.opensearch import OpenSearchSettings, OpenSearchStore
from sdr_search.indexer.opensearch import requests as osr
from sdr_search.indexer.store import IndexMeta
from sdr_search.core.documents import parse_record
from sdr_search.core.errors import InvalidInputError, StoreError
from sdr_search.core.vectors import DocVectors

pytestmark = pytest.mark.integration

DIM = 8
META = IndexMeta("model-a", "tag-a", DIM, {"paragraph_unit": "paragraph"}, {"numpy": np.__version__})


def docs(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        doc = parse_record({"id": f"d{i:03d}", "paragraphs": [f"Sentence one of d{i}. Sentence two of d{i}."]},
                           settings=AS_GIVEN)
        v = rng.standard_normal((2, DIM)).astype(np.float32)
        out.append((doc, DocVectors(v / np.linalg.norm(v, axis=1, keepdims=True), [0, 2])))
    return out


@pytest.fixture()
def client(opensearch_url):
    c = OpenSearch([opensearch_url], timeout=60)
    yield c
    c.close()


def open_store(url, name, **settings):
    store = OpenSearchStore(url, index=name, settings=OpenSearchSettings(**settings))
    store.ensure_meta(META)
    return store


def index_settings(client, name) -> dict[str, str]:
    """The index's own settings, flat (``index.knn.derived_source.enabled``, ...)."""
    return client.indices.get_settings(index=name, params={"flat_settings": "true"})[name]["settings"]


def test_new_index_is_lucene_green_and_explicit_about_derived_source(opensearch_url, os_index, client):
    store = open_store(opensearch_url, os_index())
    try:
        store.put(docs(3))
        settings = index_settings(client, store.index)
        assert settings["index.knn.derived_source.enabled"] in ("false", "true")  # always written
        major = int(client.info()["version"]["number"].split(".")[0])
        assert settings["index.knn.derived_source.enabled"] == ("true" if major >= 3 else "false")
        assert "index.knn.algo_param.ef_search" not in settings  # ef_search is a query parameter now
        assert settings["index.number_of_replicas"] == "0"
        health = client.cluster.health(index=store.index, params={"wait_for_status": "green"})
        assert health["status"] == "green"
        mapping = client.indices.get_mapping(index=store.index)[store.index]["mappings"]
        method = mapping["properties"]["sentences"]["properties"]["vector"]["method"]
        assert (method["engine"], method["space_type"]) == ("lucene", "innerproduct")
        assert (mapping["_meta"]["sdr"]["engine"], mapping["_meta"]["sdr"]["space_type"]) == ("lucene", "innerproduct")
    finally:
        store.drop()
        store.close()


@pytest.mark.parametrize("mode", ["on", "off"])
def test_derived_source_setting_is_what_the_node_keeps(opensearch_url, os_index, client, mode):
    store = open_store(opensearch_url, os_index(), derived_source=mode)
    try:
        store.put(docs(2))
        enabled = index_settings(client, store.index)["index.knn.derived_source.enabled"]
        assert enabled == ("true" if mode == "on" else "false")
        mapping = client.indices.get_mapping(index=store.index)[store.index]["mappings"]
        assert ("_source" in mapping) == (mode == "off")
        assert store.fetch(["d000"]).n_docs == 1  # the rerank's vectors come back either way
    finally:
        store.drop()
        store.close()


@pytest.mark.parametrize("mode", ["on", "off"])
def test_a_put_reads_content_keys_without_source_in_real_time(opensearch_url, os_index, client, monkeypatch, mode):
    """A put (and ``sdr index``'s skip of unchanged documents) reads the stored documents' content keys
    in real time. On a derived-source index (the 3.x default) an ``_mget`` of ``_source`` rebuilds every
    sentence vector of each document before its filter (on 3.5.0: 520 ms for 20 demo articles against 19
    without ``_source``), so a new index stores ``content_key`` and the read asks for that stored field
    alone. An index created before (no stored field) is still read, from ``_source``."""
    from sdr_search.core.cache import document_key
    from sdr_search.indexer.opensearch.requests import layout

    items = docs(3)
    key = {d.id: document_key(META.encoder_tag, d.paragraphs) for d, _ in items}
    store = open_store(opensearch_url, os_index(), derived_source=mode)
    bodies: list[dict] = []
    try:
        store.put(items[:2])
        mapping = client.indices.get_mapping(index=store.index)[store.index]["mappings"]
        assert mapping["properties"]["content_key"] == {"type": "keyword", "store": True}
        real = store._transport.mget
        monkeypatch.setattr(store._transport, "mget", lambda what, body, **kw: (bodies.append(body), real(what, body, **kw))[1])
        # written around the store, not refreshed: a real-time read sees it
        (action,) = osr.build_bulk_actions([items[2]], index=store.index, encoder_tag=META.encoder_tag,
                                           model_id=META.model_id, centroids=True)
        client.index(index=store.index, id=action["_id"], body=action["_source"], refresh=False)
        assert store.content_keys(["d002", "nope", "d000"]) == {"d002": key["d002"], "d000": key["d000"]}
        assert bodies and all(d["_source"] is False and d["stored_fields"] == ["content_key"]
                              for body in bodies for d in body["docs"])
        bodies.clear()
        store.put([items[0]])  # unchanged: its statistics stay; the read is the same
        assert bodies and all(d["_source"] is False for body in bodies for d in body["docs"])
    finally:
        monkeypatch.undo()
        store.drop()
        store.close()

    real_mapping = layout.load_mapping

    def before_the_stored_field(name):
        body = real_mapping(name)
        if name == "index.json":
            body["mappings"]["properties"]["content_key"] = {"type": "keyword"}
        return body

    monkeypatch.setattr(layout, "load_mapping", before_the_stored_field)
    old = open_store(opensearch_url, os_index(), derived_source=mode)
    try:
        monkeypatch.setattr(layout, "load_mapping", real_mapping)
        old.put(items)
        assert not old._indices.read().stored_content_key
        assert old.content_keys(["d001", "nope"]) == {"d001": key["d001"]}
    finally:
        old.drop()
        old.close()


def test_edited_space_type_is_recorded_and_translated(opensearch_url, os_index, client, monkeypatch):
    """A user who edits mappings/index.json to cosinesimil still gets cosines back (the score
    translation follows the mapping, recorded in _meta), and an untranslatable one is refused."""
    original = osr.load_mapping

    def edited(space):
        def load(name):
            body = original(name)
            if name == "index.json":
                body["mappings"]["properties"]["sentences"]["properties"]["vector"]["method"]["space_type"] = space
            return body
        return load

    monkeypatch.setattr(osr.layout, "load_mapping", edited("cosinesimil"))  # where build_index_body reads it
    items = docs(5)
    store = open_store(opensearch_url, os_index())
    try:
        store.put(items)
        meta = client.indices.get_mapping(index=store.index)[store.index]["mappings"]["_meta"]["sdr"]
        assert meta["space_type"] == "cosinesimil"
        q = items[0][1].vectors[:1]
        hits = store.sentence_knn(q, 5)
        expected = {d.id: float((q @ v.vectors.T).max()) for d, v in items}
        for doc_id, cos in zip(hits.doc_ids[0], hits.scores[0]):
            assert cos == pytest.approx(expected[doc_id], abs=1e-5)
    finally:
        store.drop()
        store.close()
    monkeypatch.setattr(osr.layout, "load_mapping", edited("hamming"))
    bad = OpenSearchStore(opensearch_url, index=os_index())
    with pytest.raises(StoreError, match="hamming"):
        bad.ensure_meta(META)
    assert not client.indices.exists(index=bad.index)
    bad.close()


def test_knn_limits_on_the_node(opensearch_url, os_index):
    """k + excluded ids stays within the node's 10,000; ef_search below 2 is refused before any
    index is made; ef_search is sent per query and accepted by the node."""
    with pytest.raises(ValidationError):
        OpenSearchSettings(hnsw_ef_search=1)
    items = docs(6)
    store = open_store(opensearch_url, os_index(), hnsw_ef_search=2)
    try:
        store.put(items)
        q = items[0][1].vectors[:1]
        excluded = [f"x{i}" for i in range(50)] + ["d000"]
        hits = store.sentence_knn(q, osr.MAX_KNN_K, exclude_ids=excluded)  # node limit: k <= 10,000
        assert sorted(hits.doc_ids[0]) == [f"d{i:03d}" for i in range(1, 6)]
        with pytest.raises(InvalidInputError, match="10000"):
            store.sentence_knn(q, osr.MAX_KNN_K + 1)
        # ef_search goes with the query: a query with and without a large ef_search agree here
        wide = open_store(opensearch_url, store.index, hnsw_ef_search=500).sentence_knn(q, 3)
        assert wide.doc_ids == store.sentence_knn(q, 3).doc_ids
    finally:
        store.drop()
        store.close()


def test_query_body_carries_ef_search():
    body = osr.build_msearch_body(np.ones((1, DIM), np.float32), 5, "i", ef_search=64)
    assert json.loads(json.dumps(body))[1]["query"]["nested"]["query"]["knn"]["sentences.vector"]["method_parameters"] == {
        "ef_search": 64}


def test_merge_segments_leaves_one_segment_per_shard_and_every_document(opensearch_url, os_index):
    """``merge_segments`` (what ``sdr reindex`` runs before the alias moves) force-merges on the node:
    an index written in several refreshed batches has several segments, then one per shard, with the
    same documents, counts and nearest sentences."""
    store = open_store(opensearch_url, os_index(), refresh="true", shards=2)
    try:
        written = docs(24, seed=3)
        for k in range(0, 24, 4):  # each refreshed put leaves new segments
            store.put(written[k:k + 4])
        before, shards = store.segments()
        assert shards == 2 and before > shards
        query = written[5][1].vectors
        hits_before = store.sentence_knn(query, 5)
        counts = store.counts()
        seen: list[tuple[int, float]] = []
        assert store.merge_segments(1, poll_s=0.2, progress=lambda n, s: seen.append((n, s))) == (before, shards)
        assert store.segments() == (shards, shards)
        assert seen and seen[-1][0] == shards
        assert store.counts() == counts
        assert sorted(store.iter_ids()) == sorted(d.id for d, _ in written)
        hits_after = store.sentence_knn(query, 5)
        assert hits_after.doc_ids == hits_before.doc_ids
        assert store.merge_segments(1, poll_s=0.2) == (shards, shards)  # nothing to merge: no request
    finally:
        store.drop()
