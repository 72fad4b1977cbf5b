"""The metadata and filter contract through the HTTP service, on the embedded store and on a real
OpenSearch node (issue 41, cases 8 and 11; docs/http-api.md "Metadata and filters"): the same
writes succeed, the same filters find the same documents, and the same limits answer the same 422
naming the field or key and the limit, on both.

The encoder is the test stand-in (:class:`factories.FakeEncoder`): what is under test is which
documents are stored and which a filter lets through, not the vectors."""

from __future__ import annotations

import json
import uuid

import pytest

from factories import FakeEncoder

pytestmark = pytest.mark.integration

MLT = "/v1/indices/default/more_like_this"
DOCS = "/v1/indices/default/documents"
TEXT = "The river flooded the valley. Farmers lost the harvest. The council built a levee."


@pytest.fixture(params=["embedded", "opensearch"])
def client(request, tmp_path):
    from fastapi.testclient import TestClient

    from sdr_search.core.documents import parse_record
    from sdr_search.indexer.pipeline import index_documents
    from sdr_search.reranker.service.app import create_app
    from sdr_search.reranker.service.settings import ServiceSettings

    if request.param == "embedded":
        from sdr_search.indexer.embedded import EmbeddedStore

        store = EmbeddedStore(tmp_path / "store", create=True)
    else:
        from sdr_search.indexer.opensearch import OpenSearchSettings, OpenSearchStore

        url = request.getfixturevalue("opensearch_url")
        store = OpenSearchStore(url, index=f"sdr-meta-http-{uuid.uuid4().hex[:10]}", settings=OpenSearchSettings(replicas=0))
    try:
        seeds = [{"id": "seed1", "text": "An appeal against the tax was dismissed. The tribunal found the notice late."},
                 {"id": "seed2", "text": "Shares were sold below their value. The witness could not recall the date."}]
        index_documents(store, [parse_record(r) for r in seeds], FakeEncoder())
        app = create_app(stores={"default": store}, encoder=FakeEncoder(),
                         settings=ServiceSettings(api_key=None, stats_refresh_delay_s=0))
        with TestClient(app) as c:
            yield c
    finally:
        if request.param == "opensearch":
            store.drop()
        store.close()


def _put(client, doc_id: str, metadata: dict):
    return client.put(f"{DOCS}/{doc_id}", json={"text": TEXT, "metadata": metadata})


def _hits(client, flt: dict) -> list[str]:
    r = client.post(MLT, json={"text": TEXT, "size": 20, "filter": flt})
    assert r.status_code == 200, r.text
    return sorted(h["id"] for h in r.json()["hits"])


def test_the_same_metadata_is_written_and_filtered_the_same_on_both_stores(client):
    """Case 11: a key's type is not fixed by its first writer; 940 keys per document, in three
    documents, are all written; a nested object and a dotted key are one path."""
    writes = {"n5": {"k": 5}, "five": {"k": "five"}, "s5": {"k": "5"}, "nested": {"a": {"b": {"c": {"d": 1}}}},
              "dotted": {"a.b.c.d": 1}, "wide1": {f"x{i}": i for i in range(940)}, "wide2": {f"y{i}": i for i in range(940)},
              "wide3": {f"z{i}": i for i in range(940)}}
    for doc_id, metadata in writes.items():
        r = _put(client, doc_id, metadata)
        assert r.status_code == 200, (doc_id, r.text)
    assert client.get(f"{DOCS}/dotted").json()["metadata"] == {"a.b.c.d": 1}  # kept as given
    assert client.post("/v1/indices/default/_refresh_stats").status_code == 200
    assert _hits(client, {"k": 5}) == ["n5"]
    assert _hits(client, {"k": 5.0}) == ["n5"]
    assert _hits(client, {"k": ["five", "5"]}) == ["five", "s5"]
    assert _hits(client, {"a.b.c.d": 1}) == ["dotted", "nested"]
    assert _hits(client, {"z939": 939, "z0": [0, 1]}) == ["wide3"]


def test_the_same_limits_answer_the_same_422_on_both_stores(client):
    """Case 8: a filter of 10,000 values answered 500 on OpenSearch and 200 on the embedded store;
    now one bound (1,000 values per field), a 422 naming the field and the limit, on both. A
    document's metadata over its limits is refused alone, naming the key."""
    assert _put(client, "y2000", {"year": 2000}).status_code == 200
    assert client.post("/v1/indices/default/_refresh_stats").status_code == 200
    assert _hits(client, {"year": list(range(1001, 2001))}) == ["y2000"]  # the bound itself: 1,000 values
    r = client.post(MLT, json={"text": TEXT, "filter": {"year": list(range(10_000))}})
    assert r.status_code == 422, r.text
    message = r.json()["error"]["message"]
    assert "'year'" in message and "10,000 values" in message and "1,000" in message, message
    r = client.post(MLT, json={"text": TEXT, "filter": {"year": None}})
    assert r.status_code == 422 and "filter.year" in r.json()["error"]["message"], r.text

    r = _put(client, "wide", {f"k{i}": i for i in range(1001)})
    assert r.status_code == 422 and "'k1000'" in r.json()["error"]["message"] and "1,000 keys" in r.json()["error"]["message"], r.text
    lines = [{"id": "ok", "text": TEXT, "metadata": {"a": 1}}, {"id": "deep", "text": TEXT, "metadata": {"a": [[[[[[[[1]]]]]]]]}}]
    r = client.post("/v1/indices/default/_bulk", content="\n".join(json.dumps(x) for x in lines) + "\n",
                    headers={"Content-Type": "application/x-ndjson"})
    assert r.status_code == 200, r.text
    got = r.json()
    assert [i["result"] for i in got["items"]] == ["created", "failed"]
    assert "metadata key 'a'" in got["failed"][0]["error"] and "limit of 8 levels" in got["failed"][0]["error"]
    assert client.get(f"{DOCS}/deep").status_code == 404 and client.get(f"{DOCS}/ok").status_code == 200
