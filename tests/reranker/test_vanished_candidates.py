"""A candidate deleted while a query runs is skipped, never a 404 for the query (issue 41, case 9).

A query reads the store several times: the search that finds the candidates, then the pre-rank's
centroids, the fetch of their vectors, or (on OpenSearch with the plugin) the exact scores and the
mean vectors computed next to the data. A document deleted between two of those reads (a
concurrent ``DELETE`` or ``_bulk``) made an unrelated query answer 404 "document 'cw7' is not in the
index". Here the delete is a real one, on a real store, made right after a chosen read returns:
every place the engine reads the candidates again is hit deterministically. A threaded run on the
HTTP service mixes writes and queries as the issue did.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from factories import FakeEncoder

pytestmark = pytest.mark.integration

TOPICS = [
    "The river flooded the northern valley in spring and the farmers lost their harvest.",
    "The council built a new levee along the bank of the river after the flood.",
    "An appeal against the tax assessment was dismissed by the high court.",
    "The tribunal found that the notice of the tax demand was served late.",
    "Shares of the company were sold below their value before the merger.",
    "The witness could not recall the date of the meeting with the directors.",
    "A second levee was planned for the following year along the northern bank.",
    "The contract was signed by both parties in March and registered in April.",
    "Interest on the loan was charged at a fixed rate for the whole term.",
    "The court held that the river authority owed a duty of care to the farmers.",
]
IDS = [f"cw{i}" for i in range(len(TOPICS))]
SOURCE = "Flooding of the river valley ruined the harvest. The levee along the bank failed in spring."


def _records():
    return [{"id": doc_id, "text": f"{text} {TOPICS[(k + 1) % len(TOPICS)]} {TOPICS[(k + 3) % len(TOPICS)]}"}
            for k, (doc_id, text) in enumerate(zip(IDS, TOPICS))]


def _fill(store) -> None:
    from sdr_search.core.documents import parse_record
    from sdr_search.indexer.pipeline import index_documents
    from sdr_search.indexer.stats_job import refresh_stats

    index_documents(store, [parse_record(r) for r in _records()], FakeEncoder())
    refresh_stats(store, exact=True, sample_size=500, seed=0)


def _ids_in(value) -> list[str]:
    """The document ids a store read returned or was asked for, in order."""
    from sdr_search.indexer.store import CandidatePool, SdrScores, SentenceHits

    if isinstance(value, SentenceHits):
        return [i for row in value.doc_ids for i in row]
    if isinstance(value, CandidatePool):
        return list(value.ids)
    if isinstance(value, SdrScores):
        return list(value.ids)
    if isinstance(value, tuple) and value and isinstance(value[0], list):  # sdr_candidates: (ids, scores)
        return [str(i) for i in value[0]]
    if isinstance(value, (list, tuple)) and all(isinstance(i, str) for i in value):
        return list(value)
    return []


def delete_after(store, method: str) -> list[str]:
    """After the first call of ``store.<method>`` returns, delete (for real) the first candidate it
    found or was asked about that is not the query's own source: a concurrent write landing between
    that read and the engine's next one. Returns the deleted ids (one, once it fired)."""
    original = getattr(store, method)
    deleted: list[str] = []

    def read_then_delete(*args, **kwargs):
        out = original(*args, **kwargs)
        if not deleted:
            seen = _ids_in(out) + [i for a in (*args, *kwargs.values()) for i in _ids_in(a)]
            victim = next((i for i in seen if i in IDS), None)
            if victim is not None:
                assert store.delete([victim]) == 1
                deleted.append(victim)
        return out

    setattr(store, method, read_then_delete)  # this store object only; the class is untouched
    return deleted


def _query(store, **kw):
    from sdr_search.reranker.engine import MoreLikeThis, Query

    return MoreLikeThis(store=store, encoder=FakeEncoder()).run(Query(**kw))


def _check(store, read: str, **query) -> None:
    deleted = delete_after(store, read)
    result = _query(store, **query)  # before the fix: DocumentNotFoundError("document 'cw..' is not in the index")
    assert deleted, f"{read} was never called by this query"
    got = [h.id for h in result.hits]
    assert deleted[0] not in got and got, (deleted, got)
    assert set(got) <= set(IDS) - set(deleted)


# -- the embedded store: the search, the pre-rank's centroids, the fetch ---------------------------
EMBEDDED_CASES = [
    ("sentence_knn", dict(method="sdr")),  # then the fetch of the vectors
    ("sentence_knn", dict(method="hybrid", fusion="zscore")),  # then BM25 of the candidates, the fetch
    ("sentence_knn", dict(method="sdr", candidates=3)),  # then the pre-rank's centroids (pool > K)
    ("paragraph_centroids", dict(method="sdr", candidates=3)),  # then the fetch of the K kept
    ("lexical_search", dict(method="hybrid", fusion="zscore")),  # a lexical-only candidate, then the fetch
]


@pytest.mark.parametrize("method,query", EMBEDDED_CASES, ids=[f"{m}-{q.get('method')}-{q.get('candidates', 'K')}"
                                                               for m, q in EMBEDDED_CASES])
def test_a_candidate_deleted_mid_query_is_skipped_embedded(tmp_path, method, query):
    from sdr_search.indexer.embedded import EmbeddedStore

    with EmbeddedStore(tmp_path / "store", create=True) as store:
        _fill(store)
        _check(store, method, text=SOURCE, size=5, **query)


def test_the_query_source_deleted_mid_query_is_still_a_404(tmp_path):
    """Only candidates are skipped: a query by the id of a document that is gone answers 404."""
    from sdr_search.core.errors import DocumentNotFoundError
    from sdr_search.indexer.embedded import EmbeddedStore

    with EmbeddedStore(tmp_path / "store", create=True) as store:
        _fill(store)
        store.delete(["cw0"])
        with pytest.raises(DocumentNotFoundError, match="cw0"):
            _query(store, id="cw0", method="sdr")


# -- OpenSearch with the plugin: the candidate stage, the exact scores and the features on the node --
OPENSEARCH_CASES = [
    ("sdr_candidate_pool", dict(method="sdr")),  # then the exact scores of the K on the node
    # the pool with its centroid rows (pool > K, one request), then the exact scores of the K kept
    ("sdr_candidate_pool", dict(method="sdr", candidates=3)),
    ("sdr_candidate_pool", dict(method="hybrid", fusion="zscore")),  # then scores and mean vectors on the node
    ("lexical_search", dict(method="hybrid", fusion="zscore")),  # a lexical-only candidate scored on the node
]


@pytest.fixture(scope="module")
def os_store_factory(opensearch_url):
    import uuid

    from sdr_search.indexer.opensearch import OpenSearchSettings, OpenSearchStore

    made: list = []

    def make():
        store = OpenSearchStore(opensearch_url, index=f"sdr-vanish-{uuid.uuid4().hex[:10]}",
                                settings=OpenSearchSettings(replicas=0))
        made.append(store)
        _fill(store)
        return store

    yield make
    for store in made:
        store.drop()
        store.close()


@pytest.mark.parametrize("method,query", OPENSEARCH_CASES, ids=[f"{m}-{q.get('method')}-{q.get('candidates', 'K')}"
                                                                 for m, q in OPENSEARCH_CASES])
def test_a_candidate_deleted_mid_query_is_skipped_opensearch(os_store_factory, method, query):
    store = os_store_factory()
    assert store.capabilities.exact_sdr, "the node has no sdr plugin: the in-store path is not under test"
    _check(store, method, text=SOURCE, size=5, **query)


# -- the HTTP service, threads mixing writes and queries (the run, bounded) -------------------
def test_concurrent_writes_never_fail_an_unrelated_query(tmp_path):
    """8 threads, 10 ids: PUT, DELETE and _bulk on the ids while text queries run. Every query answers
    200 (a candidate deleted under it is skipped); writes answer 200 or, for a DELETE of an id that is
    gone, 404."""
    import json
    import random

    from fastapi.testclient import TestClient

    from sdr_search.indexer.embedded import EmbeddedStore
    from sdr_search.reranker.service.app import create_app
    from sdr_search.reranker.service.settings import ServiceSettings

    store = EmbeddedStore(Path(tmp_path) / "store", create=True)
    _fill(store)
    records = {r["id"]: r["text"] for r in _records()}
    app = create_app(stores={"default": store}, encoder=FakeEncoder(),
                     settings=ServiceSettings(api_key=None, stats_refresh_delay_s=0, max_concurrency=8, max_queue=64))
    bad: list[tuple[str, int, str]] = []
    queries = [0]
    stop = threading.Event()
    with TestClient(app) as client:
        def writer(seed: int) -> None:
            rng = random.Random(seed)
            while not stop.is_set():
                doc_id = rng.choice(IDS)
                kind = rng.choice(["put", "delete", "bulk"])
                if kind == "put":
                    r = client.put(f"/v1/indices/default/documents/{doc_id}", json={"text": records[doc_id]})
                    ok = (200,)
                elif kind == "delete":
                    r = client.delete(f"/v1/indices/default/documents/{doc_id}")
                    ok = (200, 404)
                else:
                    lines = [{"delete": rng.choice(IDS)} if rng.random() < 0.5 else
                             {"id": (i := rng.choice(IDS)), "text": records[i]} for _ in range(4)]
                    r = client.post("/v1/indices/default/_bulk", content="\n".join(map(json.dumps, lines)),
                                    headers={"Content-Type": "application/x-ndjson"})
                    ok = (200,)
                if r.status_code not in ok:
                    bad.append((kind, r.status_code, r.text))

        def reader(seed: int) -> None:
            rng = random.Random(seed)
            for _ in range(12):
                body = {"text": rng.choice(TOPICS) + " " + rng.choice(TOPICS), "size": 5,
                        "method": rng.choice(["sdr", "hybrid"])}
                r = client.post("/v1/indices/default/more_like_this", json=body)
                queries[0] += 1
                if r.status_code != 200:
                    bad.append(("query", r.status_code, r.text))

        writers = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
        readers = [threading.Thread(target=reader, args=(100 + k,)) for k in range(4)]
        for t in writers + readers:
            t.start()
        for t in readers:
            t.join(timeout=300)
        stop.set()
        for t in writers:
            t.join(timeout=60)
    store.close()
    assert queries[0] == 48
    assert not bad, bad[:5]
