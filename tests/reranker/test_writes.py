"""Writes over HTTP (PUT / DELETE a document, bulk NDJSON, statistics refresh) on a real embedded
store, with a stand-in encoder (hashed sentence vectors) so that no model loads."""

from __future__ import annotations

import json
import time

import pytest

from factories import FakeEncoder, make_docs
from sdr_search.indexer.embedded import EmbeddedStore
from sdr_search.indexer.pipeline import index_documents
from sdr_search.indexer.stats_job import refresh_stats

pytestmark = pytest.mark.integration

MLT = "/v1/indices/default/more_like_this"
DOC = "/v1/indices/default/documents/"
NEW_TEXT = ("The river flooded the northern valley in spring. Farmers lost their harvest to the water.\n\n"
            "The council built a new levee. The levee held during the next flood.")


@pytest.fixture()
def served(tmp_path):
    from fastapi.testclient import TestClient

    from sdr_search.reranker.service.app import create_app
    from sdr_search.reranker.service.settings import ServiceSettings

    with EmbeddedStore(tmp_path / "s", create=True) as store:
        index_documents(store, [d for d, _ in make_docs(30, seed=5)], FakeEncoder())
        refresh_stats(store, exact=True, sample_size=50, seed=0)
        app = create_app(stores={"default": store}, encoder=FakeEncoder(),
                         settings=ServiceSettings(api_key=None, stats_refresh_delay_s=0.3))
        with TestClient(app) as client:
            yield client, store, app.state.sdr.refresher


def test_put_is_visible_to_the_next_query_then_update_and_delete(served):
    client, store, _ = served
    r = client.put(DOC + "new-1", json={"title": "Flood", "metadata": {"court": "river"}, "text": NEW_TEXT})
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["result"], body["id"], body["stats_stale"]) == ("created", "new-1", True) and body["sentences"] == 4
    got = client.get(DOC + "new-1").json()
    assert got["title"] == "Flood" and got["metadata"] == {"court": "river"}
    hits = client.post(MLT, json={"text": NEW_TEXT, "size": 3, "method": "sdr"}).json()["hits"]
    assert hits[0]["id"] == "new-1"  # the same sentences, the same vectors
    only = client.post(MLT, json={"id": "d001", "size": 5, "filter": {"court": "river"}}).json()["hits"]
    assert [h["id"] for h in only] == ["new-1"]
    assert client.post(MLT, json={"id": "new-1", "size": 3}).status_code == 200  # an indexed source now

    r = client.put(DOC + "new-1", json={"paragraphs": ["A different text about mountains.", "Snow fell early."]})
    assert r.json()["result"] == "updated"
    stored = " ".join(s for p in client.get(DOC + "new-1").json()["paragraphs"] for s in p)
    assert "mountains" in stored and "Snow fell early." in stored and "river" not in stored

    assert client.delete(DOC + "new-1").json()["result"] == "deleted"
    assert client.get(DOC + "new-1").status_code == 404
    r = client.delete(DOC + "new-1")
    assert r.status_code == 404 and r.json()["error"]["type"] == "DocumentNotFoundError"


def test_bad_writes_are_refused_clearly(served):
    client, store, _ = served
    assert client.put(DOC + "x", json={"title": "no body"}).status_code == 422
    assert client.put(DOC + "x", json={"text": "a", "paragraphs": ["b"]}).status_code == 422
    assert client.put(DOC + "x", json={"text": "ok", "colour": "red"}).status_code == 422  # unknown field
    assert client.put(DOC + "x", json={"text": "   "}).status_code == 422  # no sentence
    assert "x" not in set(store.iter_ids())


def test_bulk_writes_and_deletes_reporting_bad_lines(served):
    client, store, _ = served
    lines = [
        {"id": "b1", "text": "Bulk document one. It talks about trains."},
        {"id": "b2", "paragraphs": ["Bulk document two.", "It talks about ships."]},
        {"id": "b3"},  # no body: reported with its line, the others applied
        {"delete": "d000"},
        {"id": "b4", "sections": [{"title": "S", "paragraphs": ["Bulk four is about planes."]}]},
    ]
    raw = "\n".join(json.dumps(x) for x in lines) + "\n\n"
    r = client.post("/v1/indices/default/_bulk", content=raw, headers={"Content-Type": "application/x-ndjson"})
    assert r.status_code == 200, r.text
    out = r.json()
    assert (out["written"], out["deleted"]) == (3, 1) and out["stats_stale"] is True
    assert [(f["id"], f["line"]) for f in out["failed"]] == [("b3", 3)]
    ids = set(store.iter_ids())
    assert {"b1", "b2", "b4"} <= ids and "d000" not in ids and "b3" not in ids
    bad = client.post("/v1/indices/default/_bulk", content='{"id": "c1", "text": "x."}\nnot json\n')
    assert bad.status_code == 422 and "line 2" in bad.json()["error"]["message"]
    assert "c1" not in set(store.iter_ids())  # nothing written when a line is not JSON


def _bulk(client, lines):
    raw = "\n".join(json.dumps(x) for x in lines) + "\n"
    r = client.post("/v1/indices/default/_bulk", content=raw, headers={"Content-Type": "application/x-ndjson"})
    assert r.status_code == 200, r.text
    return r.json()


def test_bulk_lines_apply_in_order_with_true_counts(served):
    client, store, _ = served
    # an existing document deleted, then written again: the new version stays
    out = _bulk(client, [{"delete": "d001"}, {"id": "d001", "text": "Version two of the document."}])
    assert client.get(DOC + "d001").status_code == 200
    assert "Version two" in client.get(DOC + "d001").json()["paragraphs"][0][0]
    assert (out["written"], out["deleted"], out["missing"]) == (1, 0, [])
    assert [(i["line"], i["result"]) for i in out["items"]] == [(1, "deleted"), (2, "created")]
    # a new document written, then deleted: nothing stays, nothing counted as left behind
    out = _bulk(client, [{"id": "c-1", "text": "Short lived."}, {"delete": "c-1"}])
    assert client.get(DOC + "c-1").status_code == 404
    assert (out["written"], out["deleted"], out["missing"]) == (0, 0, [])
    assert [i["result"] for i in out["items"]] == ["created", "deleted"]
    # an existing document written, then deleted
    out = _bulk(client, [{"id": "d002", "text": "Changed."}, {"delete": "d002"}])
    assert client.get(DOC + "d002").status_code == 404 and (out["written"], out["deleted"]) == (0, 1)
    # the same id written twice: one document, the second version
    out = _bulk(client, [{"id": "t-1", "text": "First version."}, {"id": "t-1", "text": "Second version."}])
    assert out["written"] == 1 and [i["result"] for i in out["items"]] == ["created", "updated"]
    assert "Second version." in client.get(DOC + "t-1").json()["paragraphs"][0]
    # deletes of ids that do not exist are reported as missing, not deleted
    out = _bulk(client, [{"delete": "no-such"}, {"delete": "d003"}, {"delete": "d003"}])
    assert (out["deleted"], out["missing"]) == (1, ["no-such", "d003"])
    assert [i["result"] for i in out["items"]] == ["not_found", "deleted", "not_found"]


def test_bulk_delete_ids_follow_the_id_rule(served):
    client, store, _ = served
    assert _bulk(client, [{"id": 123, "text": "An integer id is its decimal string."}])["written"] == 1
    assert client.get(DOC + "123").status_code == 200
    out = _bulk(client, [{"delete": 123}, {"delete": ""}, {"delete": True}])
    assert out["deleted"] == 1 and client.get(DOC + "123").status_code == 404
    assert [(f["line"], f["id"]) for f in out["failed"]] == [(2, None), (3, None)]
    assert all("invalid delete id" in f["error"] for f in out["failed"])
    bad = client.post("/v1/indices/default/_bulk", content='{"delete": "a", "id": "b"}\n')
    assert bad.status_code == 422 and "line 1" in bad.json()["error"]["message"]


@pytest.mark.parametrize("raw, message", [
    (b"\xff\n", "the bulk body is not UTF-8 (byte 0)"),
    (b'{"id": "a", "text": "x."}\nnot json\n', "bulk line 2: invalid JSON (Expecting value)"),
    (b'{"id": "a", "text": "x."}\n\n[1]\n', "bulk line 3: expected a JSON object"),
    (b'{"delete": "a", "id": "b"}\nnot json\n', 'bulk line 1: a delete is {"delete": "<id>"} and nothing else'),
    (b"[" * 100_000 + b"\n", "bulk line 1: invalid JSON (maximum recursion depth exceeded"),
    (b" \n\n", "the bulk body has no action"),
])
def test_a_bulk_body_is_refused_naming_its_first_bad_line(raw, message):
    from sdr_search.core.errors import InvalidInputError
    from sdr_search.reranker.service.writes import bulk_actions

    with pytest.raises(InvalidInputError) as e:
        bulk_actions(raw, max_documents=10)
    assert str(e.value).startswith(message), str(e.value)
    assert bulk_actions(b'\n{"delete": "a"}\n\n{"id": "b", "text": "x."}\n', max_documents=2) == [
        (2, {"delete": "a"}), (4, {"id": "b", "text": "x."})]


def test_bulk_is_bounded(tmp_path):
    from fastapi.testclient import TestClient

    from sdr_search.reranker.service.app import create_app
    from sdr_search.reranker.service.settings import ServiceSettings

    with EmbeddedStore(tmp_path / "s", create=True) as store:
        index_documents(store, [d for d, _ in make_docs(5)], FakeEncoder())
        app = create_app(stores={"default": store}, encoder=FakeEncoder(),
                         settings=ServiceSettings(api_key=None, max_bulk_documents=2, stats_refresh_delay_s=0))
        with TestClient(app) as client:
            raw = "\n".join(json.dumps({"delete": f"d00{k}"}) for k in range(3))
            r = client.post("/v1/indices/default/_bulk", content=raw)
            assert r.status_code == 422 and "SDR_SERVICE_MAX_BULK_DOCUMENTS" in r.json()["error"]["message"]
            assert len(set(store.iter_ids())) == 5


def test_statistics_are_refreshed_in_the_background_and_on_demand(served):
    client, store, refresher = served
    assert client.put(DOC + "s1", json={"text": "Statistics go stale after a write."}).json()["stats_stale"]
    version = store.stats_info().version
    deadline = time.monotonic() + 20
    while (store.stats_info().stale or refresher.refreshes < 1) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not store.stats_info().stale and store.stats_info().version > version and refresher.refreshes == 1
    client.delete(DOC + "s1")
    refresher.cancel()  # no background refresh: on demand
    r = client.post("/v1/indices/default/_refresh_stats")
    assert r.status_code == 200 and r.json()["stale"] is False and r.json()["documents"] == 30


def test_a_body_of_another_content_type_is_told_what_to_send(served):
    client, _, _ = served
    r = client.post(MLT, content=b'{"id": "d001"}', headers={"Content-Type": "text/plain"})
    assert r.status_code == 422
    assert "Content-Type: application/json (got text/plain)" in r.json()["error"]["message"]
    r = client.put(DOC + "x", content=b"Some text.", headers={"Content-Type": "text/plain"})
    assert r.status_code == 422 and "application/json" in r.json()["error"]["message"]


def test_writing_the_same_content_again_leaves_the_statistics_fresh(served):
    client, store, refresher = served
    body = {"title": "Same", "text": "A document written twice. Its content does not change."}
    assert client.put(DOC + "same-1", json=body).json()["stats_stale"]
    refresher.refresh_now("default", store)
    assert not store.stats_info().stale
    again = client.put(DOC + "same-1", json={**body, "title": "Retitled"}).json()
    assert again["result"] == "updated" and again["stats_stale"] is False
    out = _bulk(client, [{"id": "same-1", **body}, {"delete": "no-such-id"}])
    assert out["stats_stale"] is False and out["written"] == 1
    assert client.delete(DOC + "no-such-id").status_code == 404 and not store.stats_info().stale
    assert client.put(DOC + "same-1", json={"text": "Now the content changes."}).json()["stats_stale"] is True
