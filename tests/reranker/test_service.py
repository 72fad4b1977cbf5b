"""The HTTP service end to end: a real `sdr serve` (uvicorn) in a subprocess over a small embedded
store built with the real encoder, called over loopback with httpx; a bounded schemathesis run
against the live server; the committed OpenAPI file. Unit tests for the pure parts come first."""

from __future__ import annotations

import asyncio
import json
import os
import socket
from pathlib import Path

import httpx
import pytest

from conftest import running_server
from test_engine import TOPICS

REPO = Path(__file__).resolve().parents[2]
API_KEY = "test-key-0123456789"
MAX_SOURCE_SENTENCES = 50
MAX_BODY_BYTES = 200_000


# =============================================================================================
# unit: no model, no server
# =============================================================================================
@pytest.mark.unit
def test_committed_openapi_json_equals_the_generated_spec():
    from sdr_search.reranker.service.openapi import openapi_json

    committed = (REPO / "openapi.json").read_text(encoding="utf-8")
    assert committed == openapi_json(), "openapi.json is out of date: run `python -m sdr_search.reranker.service.openapi > openapi.json`"


@pytest.mark.unit
def test_error_statuses_come_from_one_table_most_specific_class_first():
    from sdr_search.reranker.service.errors import AuthenticationError, RequestTooLargeError, status_for
    from sdr_search.core import errors as e

    assert status_for(e.InvalidInputError("x")) == 422
    assert status_for(e.DocumentTooLargeError("d", "too big")) == 413  # a kind of InvalidInputError
    assert status_for(RequestTooLargeError("x")) == 413
    assert status_for(e.SourceTooLargeError("x")) == 413
    assert status_for(e.DocumentNotFoundError("d")) == 404
    assert status_for(e.IndexNotFoundError("i")) == 404
    assert status_for(e.OverloadedError("x")) == 429
    assert status_for(e.BackendUnavailableError("x")) == 503
    assert status_for(e.ModelMismatchError("x")) == 409
    assert status_for(e.StatsUnavailableError("x")) == 409
    assert status_for(AuthenticationError("x")) == 401
    assert status_for(e.IndexLayoutError("x")) == 409
    assert status_for(e.StoreError("x")) == 500
    assert status_for(RuntimeError("x")) == 500


@pytest.mark.unit
def test_filter_semantics():
    from sdr_search.reranker.filters import matches

    meta = {"court": "supreme", "year": 2001, "tags": ["tax", "appeal"], "final": True}
    assert matches(meta, {"court": "supreme", "year": 2001})
    assert matches(meta, {"year": 2001.0})
    assert matches(meta, {"year": [1999, 2001]})
    assert matches(meta, {"tags": "appeal"}) and matches(meta, {"tags": ["x", "tax"]})
    assert not matches(meta, {"court": "high"})
    assert not matches(meta, {"missing": "x"})
    assert not matches(meta, {"final": 1}) and matches(meta, {"final": True})
    assert not matches({"n": 1}, {"n": True})


@pytest.mark.unit
def test_bind_refuses_a_public_host_without_an_api_key_unless_insecure():
    from sdr_search.reranker.service.bind import check_bind, is_loopback
    from sdr_search.core.errors import SDRError

    assert is_loopback("127.0.0.1") and is_loopback("localhost") and is_loopback("::1")
    assert not is_loopback("0.0.0.0") and not is_loopback("example.org")
    check_bind("127.0.0.1", has_api_key=False, insecure=False)
    check_bind("0.0.0.0", has_api_key=True, insecure=False)
    with pytest.raises(SDRError, match="API key"):
        check_bind("0.0.0.0", has_api_key=False, insecure=False)
    check_bind("0.0.0.0", has_api_key=False, insecure=True)  # warns


@pytest.mark.unit
@pytest.mark.parametrize("key", ["", "   "])
def test_an_empty_api_key_is_refused_at_start_not_served_open(key, monkeypatch, caplog):
    from pydantic import ValidationError

    from sdr_search.cli import main
    from sdr_search.reranker.service.settings import ServiceSettings

    with pytest.raises(ValidationError, match="set but empty"):
        ServiceSettings(api_key=key)
    monkeypatch.setenv("SDR_SERVICE_API_KEY", key)
    with pytest.raises(ValidationError, match="set but empty"):
        ServiceSettings()
    # sdr serve stops before opening anything, in one line, whatever the host
    for host in ("127.0.0.1", "0.0.0.0"):
        caplog.clear()
        assert main(["serve", "--store", "/nonexistent-store", "--host", host]) == 2
        assert "SDR_SERVICE_API_KEY is set but empty" in caplog.text and "Traceback" not in caplog.text


@pytest.mark.unit
def test_serve_port_out_of_range_is_a_usage_error(capsys):
    from sdr_search.cli import main

    for port in ("99999", "-1", "http"):
        with pytest.raises(SystemExit) as e:
            main(["serve", "--store", "/nonexistent-store", "--port", port])
        assert e.value.code == 2
        assert "--port" in capsys.readouterr().err


@pytest.mark.unit
def test_a_setting_out_of_range_in_the_environment_is_one_line(monkeypatch, caplog):
    from sdr_search.cli import main

    monkeypatch.setenv("SDR_SERVICE_PORT", "99999")
    assert main(["serve", "--store", "/nonexistent-store"]) == 2
    assert "invalid setting" in caplog.text and "port" in caplog.text


@pytest.mark.unit
def test_concurrency_limiter_answers_overload_at_once_beyond_cap_and_queue():
    from sdr_search.reranker.service.limits import ConcurrencyLimiter
    from sdr_search.core.errors import OverloadedError

    async def scenario():
        limiter = ConcurrencyLimiter(1, max_queue=1, timeout_s=0.2)
        release = asyncio.Event()
        outcomes: list[str] = []

        async def job():
            try:
                async with limiter.slot():
                    await release.wait()
                outcomes.append("ran")
            except OverloadedError:
                outcomes.append("429")

        tasks = [asyncio.create_task(job()) for _ in range(3)]  # 1 runs, 1 waits, 1 rejected at once
        await asyncio.sleep(0.05)
        assert outcomes == ["429"]
        await asyncio.sleep(0.3)  # the waiter times out
        assert sorted(outcomes) == ["429", "429"]
        release.set()
        await asyncio.gather(*tasks)
        assert sorted(outcomes) == ["429", "429", "ran"]

    asyncio.run(scenario())


class _DownStore:
    """A store whose backend cannot be reached (what the OpenSearch store raises when it is down)."""

    def __getattr__(self, name):
        from sdr_search.core.errors import BackendUnavailableError

        if name == "close":
            return lambda: None

        def down(*args, **kwargs):
            raise BackendUnavailableError("OpenSearch at http://search:9200 cannot be reached")

        return down


@pytest.mark.unit
def test_unreachable_store_is_503_and_health_says_which(tmp_path):
    from fastapi.testclient import TestClient

    from sdr_search.reranker.service.app import create_app
    from sdr_search.reranker.service.settings import ServiceSettings
    from sdr_search.core.errors import IndexNotFoundError

    app = create_app(stores={"down": _DownStore()}, settings=ServiceSettings(api_key=None))
    with TestClient(app) as c:
        r = c.post("/v1/indices/down/more_like_this", json={"id": "a"})
        assert r.status_code == 503 and r.headers["Retry-After"] == "1"
        assert r.json()["error"]["type"] == "BackendUnavailableError"
        assert c.get("/v1/indices/down/documents/a").status_code == 503
        r = c.get("/health")
        assert r.status_code == 503
        assert r.json()["indices"]["down"]["status"] == "unavailable" and "cannot be reached" in r.json()["indices"]["down"]["error"]
        assert r.json()["encoder"] == {"status": "absent"}

    def factory(name):  # a factory opens stores on demand; unknown or failing ones are not kept
        if name == "down":
            return _DownStore()
        raise IndexNotFoundError(f"OpenSearch index {name!r} does not exist")

    with TestClient(create_app(stores=factory, settings=ServiceSettings(api_key=None))) as c:
        assert c.post("/v1/indices/nope/more_like_this", json={"id": "a"}).status_code == 404
        assert c.post("/v1/indices/down/more_like_this", json={"id": "a"}).status_code == 503
        assert c.get("/health").json()["indices"] == {}


# =============================================================================================
# integration: a real server
# =============================================================================================
def _records():
    out = []
    for t, sents in TOPICS.items():
        for k in range(5):
            rot = sents[k % 4 :] + sents[: k % 4]
            out.append({
                "id": f"{t}_{k}", "title": f"{t} case {k}",
                "metadata": {"topic": t, "year": 2000 + k, "tags": ["odd" if k % 2 else "even"]},
                "paragraphs": [" ".join(rot[:2]), rot[2], rot[3]],
            })
    return out


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory, encoder):
    """`sdr serve` over a 20-document store, with an API key, concurrency cap 1 (no queue) and small
    body and source limits; yields the base URL."""
    from sdr_search.indexer.embedded import EmbeddedStore
    from sdr_search.indexer.pipeline import index_documents
    from sdr_search.indexer.stats_job import refresh_stats
    from sdr_search.indexer.provenance import segmentation_record
    from sdr_search.core.documents import parse_record
    from sdr_search.core.settings import SegmentationSettings

    tmp = tmp_path_factory.mktemp("service")
    path = tmp / "store"
    as_given = SegmentationSettings.from_recorded({})  # three paragraphs per document, as written
    with EmbeddedStore(path, create=True) as store:
        index_documents(store, [parse_record(r, settings=as_given) for r in _records()], encoder,
                        segmentation=segmentation_record(as_given, "curated"))
        refresh_stats(store, exact=True, sample_size=30, seed=0)
    port = _free_port()
    env = {
        **os.environ,
        "SDR_SERVICE_API_KEY": API_KEY,
        "SDR_SERVICE_MAX_CONCURRENCY": "1",
        "SDR_SERVICE_MAX_QUEUE": "0",
        "SDR_SERVICE_MAX_BODY_BYTES": str(MAX_BODY_BYTES),
        "SDR_MAX_QUERY_SENTENCES": str(MAX_SOURCE_SENTENCES),
        "SDR_CACHE_DIR": str(tmp / "cache"),
    }
    with running_server(["serve", "--store", str(path), "--precision", "fp32", "--device", "cpu"], port,
                        tmp / "server.log", env) as base:
        yield base


class _ClusterStore:
    """A store that answers its count, on a cluster whose health is ``cluster`` (the answer of
    ``_cluster/health`` as the OpenSearch store reports it)."""

    def __init__(self, cluster):
        self.cluster = cluster

    def verify(self, **kwargs):
        return {"documents": 3}

    def cluster_health(self, timeout=None):
        return self.cluster

    def close(self):
        pass


@pytest.mark.unit
def test_health_is_degraded_not_503_while_the_index_is_not_green():
    from fastapi.testclient import TestClient

    from sdr_search.reranker.service.app import create_app
    from sdr_search.reranker.service.settings import ServiceSettings

    def health(cluster):
        app = create_app(stores={"i": _ClusterStore(cluster)}, settings=ServiceSettings(api_key=None))
        with TestClient(app) as c:
            r = c.get("/health")
            return r.status_code, r.json()["status"], r.json()["indices"]["i"]

    lost = {"status": "yellow", "nodes": 2, "data_nodes": 2, "unassigned_shards": 3, "index_status": "yellow"}
    assert health(lost) == (200, "degraded", {"status": "degraded", "documents": 3, "cluster": lost})
    green = {**lost, "status": "green", "nodes": 3, "unassigned_shards": 0, "index_status": "green"}
    assert health(green) == (200, "ok", {"status": "ok", "documents": 3, "cluster": green})
    other = {**green, "status": "yellow", "unassigned_shards": 1}  # another index's replica: not this one's
    assert health(other)[:2] == (200, "ok")
    assert health(None) == (200, "ok", {"status": "ok", "documents": 3})  # no cluster: the embedded store


@pytest.fixture(scope="module")
def client(server):
    with httpx.Client(base_url=server, headers={"X-API-Key": API_KEY}, timeout=60) as c:
        yield c


MLT = "/v1/indices/default/more_like_this"


def _error(r: httpx.Response, status: int, type_: str) -> str:
    assert r.status_code == status, r.text
    body = r.json()["error"]
    assert body["type"] == type_, body
    return body["message"]


@pytest.mark.integration
def test_health_and_spec_are_served(client, server):
    r = httpx.get(f"{server}/health")  # open without the key
    assert r.status_code == 200
    assert r.json()["indices"]["default"] == {"status": "ok", "documents": 20}
    assert r.json()["encoder"]["status"] == "ok"
    from sdr_search.reranker.service.openapi import openapi_spec

    assert httpx.get(f"{server}/openapi.json").json() == json.loads(json.dumps(openapi_spec()))


@pytest.mark.integration
def test_mlt_by_id_text_paragraphs_and_sections(client):
    r = client.post(MLT, json={"id": "land_0", "size": 4})
    assert r.status_code == 200, r.text
    body = r.json()
    assert [h["id"][:5] for h in body["hits"]] == ["land_"] * 4 and "land_0" not in {h["id"] for h in body["hits"]}
    assert body["stats"] == {"origin": "stored", "stale": False} and body["candidates"] >= 4
    assert all("explanation" not in h for h in body["hits"])

    r = client.post(MLT, json={"text": "The accused killed the deceased with a knife.\n\nHe was convicted.", "size": 2})
    assert r.status_code == 200, r.text
    assert [h["id"][:7] for h in r.json()["hits"]] == ["murder_"] * 2
    assert r.json()["stats"]["origin"] == "reference-sample"

    r = client.post(MLT, json={"paragraphs": ["The employee was dismissed.", "He sought reinstatement and back wages."], "size": 2})
    assert [h["id"][:8] for h in r.json()["hits"]] == ["service_"] * 2
    r = client.post(MLT, json={"sections": [{"title": "Facts", "paragraphs": ["The assessee claimed a tax deduction."]}], "size": 1})
    assert r.json()["hits"][0]["id"].startswith("tax_")


@pytest.mark.integration
def test_explain_has_three_levels(client):
    r = client.post(MLT, json={"id": "tax_2", "size": 2, "explain": True})  # default method: hybrid
    assert r.status_code == 200, r.text
    hit = r.json()["hits"][0]
    assert r.json()["method"] == "hybrid"
    assert hit["explanation"]["hybrid"]["score"] == pytest.approx(hit["score"], abs=1e-4)  # the fused score
    assert set(hit["explanation"]["hybrid"]["signals"]) == {"bm25", "sdr", "mean"}
    r = client.post(MLT, json={"id": "tax_2", "size": 2, "explain": True, "method": "sdr"})
    assert r.status_code == 200, r.text
    hit = r.json()["hits"][0]
    assert hit["title"].startswith("tax case")
    ex = hit["explanation"]
    assert ex["score"] == pytest.approx(hit["score"], abs=1e-4)  # level 1: the document score
    pair = ex["paragraph_pairs"][0]  # level 2: paragraph pairs with normalised scores
    assert {"source_paragraph", "candidate_paragraph", "paragraph_score", "normalised_score"} <= set(pair)
    sp = pair["sentence_pairs"][0]  # level 3: sentence pairs with cosines and text
    source = client.get("/v1/indices/default/documents/tax_2").json()
    cand = client.get(f"/v1/indices/default/documents/{hit['id']}").json()
    assert sp["source_sentence"] in source["paragraphs"][pair["source_paragraph"]]
    assert sp["candidate_sentence"] in cand["paragraphs"][pair["candidate_paragraph"]]
    assert 0.5 < sp["cosine"] <= 1.0 + 1e-6
    # whole sentences with character offsets into the stored texts GET returns
    assert r.json()["source_offsets"] == "stored"
    assert source["text"][sp["source_start"]:sp["source_end"]] == sp["source_sentence"]
    assert cand["text"][sp["candidate_start"]:sp["candidate_end"]] == sp["candidate_sentence"]


@pytest.mark.integration
def test_hits_carry_title_metadata_and_snippet(client):
    text = "The accused killed the deceased with a knife.\n\n\nHe was   convicted of murder."
    r = client.post(MLT, json={"text": text, "size": 3})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["source_offsets"] == "request"
    for hit in body["hits"]:
        doc = client.get(f"/v1/indices/default/documents/{hit['id']}").json()
        assert hit["title"] == doc["title"] and hit["metadata"] == doc["metadata"] and hit["metadata"]["topic"] == "murder"
        snip = hit["snippet"]  # the best sentence pair, with its paragraphs and offsets
        assert snip["candidate_sentence"] in doc["paragraphs"][snip["candidate_paragraph"]]
        assert doc["text"][snip["candidate_start"]:snip["candidate_end"]] == snip["candidate_sentence"]
        assert " ".join(text[snip["source_start"]:snip["source_end"]].split()) == snip["source_sentence"]
        assert -1.0 <= snip["cosine"] <= 1.0 + 1e-6 and "explanation" not in hit


@pytest.mark.integration
def test_paging_and_metadata_filter(client):
    full = [h["id"] for h in client.post(MLT, json={"id": "murder_1", "size": 8}).json()["hits"]]
    first = [h["id"] for h in client.post(MLT, json={"id": "murder_1", "size": 4}).json()["hits"]]
    second = [h["id"] for h in client.post(MLT, json={"id": "murder_1", "size": 4, "from": 4}).json()["hits"]]
    assert first + second == full and len(full) == 8

    r = client.post(MLT, json={"id": "murder_1", "size": 5, "filter": {"topic": "tax"}})
    assert r.status_code == 200, r.text
    hits = r.json()["hits"]
    assert len(hits) == 5 and all(h["id"].startswith("tax_") for h in hits)  # filtered before the cut to size
    r = client.post(MLT, json={"id": "murder_1", "size": 10, "filter": {"year": [2000, 2004], "tags": "even"}})
    ids = {h["id"] for h in r.json()["hits"]}
    assert ids and all(i.endswith(("_0", "_4")) for i in ids)
    assert client.post(MLT, json={"id": "murder_1", "filter": {"topic": "none"}}).json()["hits"] == []


@pytest.mark.integration
def test_document_get_and_404s(client):
    r = client.get("/v1/indices/default/documents/land_3")
    assert r.status_code == 200
    doc = r.json()
    assert doc["id"] == "land_3" and doc["title"] == "land case 3" and doc["metadata"]["topic"] == "land"
    assert len(doc["paragraphs"]) == 3 and all(isinstance(s, str) for p in doc["paragraphs"] for s in p)
    assert "vectors" not in doc
    assert "nope" in _error(client.get("/v1/indices/default/documents/nope"), 404, "DocumentNotFoundError")
    assert "nope" in _error(client.post(MLT, json={"id": "nope"}), 404, "DocumentNotFoundError")
    assert "serves: default" in _error(client.post("/v1/indices/other/more_like_this", json={"id": "x"}), 404, "IndexNotFoundError")


@pytest.mark.integration
def test_validation_errors_are_422_with_clear_messages(client):
    msg = _error(client.post(MLT, json={"id": "tax_1", "text": "Some text."}), 422, "RequestValidationError")
    assert "exactly one source" in msg and "found: id, text" in msg
    assert "found: none" in _error(client.post(MLT, json={"size": 3}), 422, "RequestValidationError")
    msg = _error(client.post(MLT, json={"id": "tax_1", "size": 101}), 422, "RequestValidationError")
    assert "body.size" in msg and "100" in msg
    assert "body.size" in _error(client.post(MLT, json={"id": "tax_1", "size": "ten"}), 422, "RequestValidationError")
    assert "body.text" in _error(client.post(MLT, json={"text": "   \n "}), 422, "RequestValidationError")
    assert "extra" in _error(client.post(MLT, json={"id": "tax_1", "bogus": 1}), 422, "RequestValidationError").lower()
    msg = _error(client.post(MLT, content=b"{not json", headers={"Content-Type": "application/json"}), 422, "RequestValidationError")
    assert "invalid JSON" in msg


@pytest.mark.integration
def test_hybrid_requests(client):
    r = client.post(MLT, json={"id": "land_0", "size": 4, "method": "hybrid"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["method"] == "hybrid" and body["hybrid"]["fusion"] == "adaptive"  # the default
    assert body["hybrid"]["weights"] == {"bm25": 1.0, "sdr": 1.0, "mean": 1.0}
    assert body["hybrid"]["adaptive"]["half_sentences"] == 32.0
    assert [h["id"][:5] for h in body["hits"]] == ["land_"] * 4 and "land_0" not in {h["id"] for h in body["hits"]}
    assert "lexical" in body["timings_ms"]

    r = client.post(MLT, json={"text": "The accused killed the deceased with a knife.", "size": 2, "explain": True,
                               "fusion": "rrf", "weights": {"bm25": 1, "sdr": 2}, "rank_constant": 10})
    assert r.status_code == 200, r.text
    body = r.json()
    applied = body["hybrid"].pop("weights_applied")  # the shares this query used: the configured weights here
    assert applied == pytest.approx({"bm25": 1 / 3, "sdr": 2 / 3, "mean": 0.0})
    assert body["method"] == "hybrid" and body["hybrid"] == {"fusion": "rrf", "rank_constant": 10,
                                                             "weights": {"bm25": 1.0, "sdr": 2.0, "mean": 0.0}}
    hit = body["hits"][0]
    assert hit["id"].startswith("murder_")
    hybrid = hit["explanation"]["hybrid"]
    assert hybrid["score"] == pytest.approx(hit["score"]) and hybrid["fusion"] == "rrf"
    assert set(hybrid["signals"]) == {"bm25", "sdr", "mean"} and hybrid["signals"]["bm25"]["raw"] > 0
    assert "normalised" in hybrid["signals"]["sdr"] and "normalised" not in hybrid["signals"]["mean"]

    r = client.post(MLT, json={"id": "murder_1", "size": 5, "method": "hybrid", "filter": {"topic": "tax"}})
    assert r.status_code == 200, r.text
    assert len(r.json()["hits"]) == 5 and all(h["id"].startswith("tax_") for h in r.json()["hits"])
    assert client.post(MLT, json={"id": "murder_1", "method": "sdr"}).json()["method"] == "sdr"


@pytest.mark.integration
def test_bad_hybrid_options_are_422(client):
    for weights, what in (({"bm25": -1}, "body.weights.bm25"), ({"tfidf": 1}, "extra"), ({"bm25": 0, "sdr": 0}, "at least one"),
                          ({}, "at least one"), ("bm25=1", "body.weights"), ({"bm25": "x"}, "body.weights.bm25")):
        msg = _error(client.post(MLT, json={"id": "tax_1", "method": "hybrid", "weights": weights}), 422,
                     "RequestValidationError")
        assert what.lower() in msg.lower(), (weights, msg)
    msg = _error(client.post(MLT, json={"id": "tax_1", "method": "sdr", "fusion": "rrf"}), 422, "RequestValidationError")
    assert "hybrid" in msg
    assert "body.fusion" in _error(client.post(MLT, json={"id": "tax_1", "fusion": "borda"}), 422, "RequestValidationError")
    assert "body.method" in _error(client.post(MLT, json={"id": "tax_1", "method": "bm25"}), 422, "RequestValidationError")
    assert "body.rank_constant" in _error(client.post(MLT, json={"id": "tax_1", "rank_constant": 0}), 422,
                                          "RequestValidationError")


@pytest.mark.integration
def test_413_for_large_bodies_and_sources(client, server):
    big = json.dumps({"text": "word " * (MAX_BODY_BYTES // 4)}).encode()
    msg = _error(client.post(MLT, content=big, headers={"Content-Type": "application/json"}), 413, "RequestTooLargeError")
    assert "SDR_SERVICE_MAX_BODY_BYTES" in msg

    def chunks():  # no Content-Length: counted while reading
        for _ in range(8):
            yield b" " * (MAX_BODY_BYTES // 4)

    r = client.post(MLT, content=chunks(), headers={"Content-Type": "application/json"})
    _error(r, 413, "RequestTooLargeError")
    text = " ".join(f"Sentence number {k} is about a case." for k in range(MAX_SOURCE_SENTENCES + 5))
    # one cap for every door (the CLI's and the library's too): SDR_MAX_QUERY_SENTENCES, 413
    assert "SDR_MAX_QUERY_SENTENCES" in _error(client.post(MLT, json={"text": text}), 413, "SourceTooLargeError")


@pytest.mark.integration
def test_api_key_is_required_on_v1_only(server):
    with httpx.Client(base_url=server, timeout=30) as anon:
        _error(anon.post(MLT, json={"id": "tax_1"}), 401, "AuthenticationError")
        _error(anon.get("/v1/indices/default/documents/tax_1"), 401, "AuthenticationError")
        _error(anon.post(MLT, json={"id": "tax_1"}, headers={"X-API-Key": API_KEY + "x"}), 401, "AuthenticationError")
        assert anon.post(MLT, json={"id": "tax_1"}, headers={"X-API-Key": API_KEY}).status_code == 200
        assert anon.get("/health").status_code == 200 and anon.get("/metrics").status_code == 200


@pytest.mark.integration
def test_overload_answers_429_not_5xx(server):
    text = " ".join(f"The tribunal considered ground number {k} of the appeal." for k in range(MAX_SOURCE_SENTENCES - 5))

    async def fire() -> list[int]:
        async with httpx.AsyncClient(base_url=server, headers={"X-API-Key": API_KEY}, timeout=60) as c:
            rs = await asyncio.gather(*[
                c.post(MLT, json={"text": text, "explain": True, "candidates": 1000, "size": 20}) for _ in range(8)
            ])
        for r in rs:
            if r.status_code == 429:
                assert r.headers["Retry-After"] == "1" and r.json()["error"]["type"] == "OverloadedError"
        return [r.status_code for r in rs]

    statuses = asyncio.run(fire())
    assert 200 in statuses and 429 in statuses, statuses
    assert set(statuses) <= {200, 429}, statuses


@pytest.mark.integration
def test_metrics_after_calls(client, server):
    client.post(MLT, json={"id": "land_1", "size": 2})
    client.post(MLT, json={"id": "missing"})
    text = httpx.get(f"{server}/metrics").text
    assert 'sdr_http_request_duration_seconds_bucket{le="0.005",method="POST",route="/v1/indices/{index}/more_like_this",status="200"}' in text
    assert "sdr_mlt_candidates_count" in text and "sdr_mlt_rerank_seconds_count" in text
    assert 'sdr_errors_total{status="404",type="DocumentNotFoundError"}' in text


# -- schemathesis against the live server -----------------------------------------------------
@pytest.mark.integration
@pytest.mark.parametrize("mode,examples", [("positive", 120), ("negative", 80)])
def test_api_conforms_to_its_spec(server, mode, examples):
    """Generated requests for every operation (schema-valid, then schema-violating): every status is
    documented, every body matches its schema, valid data is accepted, invalid data rejected, and no
    5xx. About 200 requests in all."""
    import requests
    import schemathesis
    from hypothesis import HealthCheck, given, settings
    from schemathesis import GenerationMode

    # the bulk body is NDJSON (a string to the schema): tested line by line in test_writes.py
    schema = schemathesis.openapi.from_url(f"{server}/openapi.json").exclude(operation_id="bulk")
    # 413 (body over SDR_SERVICE_MAX_BODY_BYTES, documented) is a rejection of invalid data too:
    # long generated strings can make a schema-violating body that large
    rejection = schema.config.checks.negative_data_rejection
    rejection.expected_statuses = sorted({*rejection.expected_statuses, "413"})
    session = requests.Session()

    @given(case=schema.as_strategy(GenerationMode(mode)))
    @settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    def run(case):
        case.call_and_validate(session=session, headers={"X-API-Key": API_KEY}, timeout=60)

    try:
        run()
    finally:
        session.close()
