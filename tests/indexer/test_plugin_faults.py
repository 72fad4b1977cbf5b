"""Faults around the sdr plugin on a real node (issue 33, item 6): every bad request of the plugin's
three entry points is a 400 with a message, never a node error, and a candidate whose vectors are missing
has one defined behaviour.

Bad requests: the rescorer's (wrong dimension, NaN, missing statistics, ...) are in
``test_opensearch_plugin.py::test_bad_input_is_a_400_with_a_message``; here ``sdr_candidates`` (wrong
dimension, NaN, statistics of one kind or of another length, ``k``, ``search``) and ``sdr_vectors`` (an
unknown key, a field the mapping lacks or of another type: a 400, as for the rescorer, where it used to
answer "no sentences" for every hit).

Documents whose vectors are missing (written around the store, which refuses them: no sentences at all,
an empty ``sentences`` list, sentences without a vector; on the Python path's index also without the base64
copy): on the node, the rescorer gives them the lowest float and ``_sdr.sentences`` 0, ``sdr_candidates``
never returns them, ``sdr_vectors`` says ``sentences`` 0, and the node stays healthy. In the store and the
engine, through either path (plugin, or plugin off): :class:`StoreError` naming the document, the same
message as reading its vectors (``stored vectors of document 'x' are missing``); a query that does not meet
them is unaffected.
"""

from __future__ import annotations

import base64
import os
import uuid

import numpy as np
import pytest
from opensearchpy import OpenSearch
from opensearchpy import exceptions as ox

from factories import META, FakeEncoder, make_docs
from sdr_search.core.errors import StoreError
from sdr_search.core.scoring import NormStats
from sdr_search.core.vectors import DocVectors
from sdr_search.indexer.opensearch import OpenSearchSettings, OpenSearchStore
from sdr_search.indexer.opensearch.requests import NO_SENTENCES_SCORE
from sdr_search.indexer.stats_job import refresh_stats
from sdr_search.reranker.engine import MLTSettings, MoreLikeThis, Query

pytestmark = pytest.mark.integration

DIM = META.dim
DAMAGED = ("hollow", "novec", "nosent")
MISSING = "stored vectors of document '{}' are missing"


def _b64(v: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(v, dtype="<f4").tobytes()).decode("ascii")


@pytest.fixture(scope="module")
def node(opensearch_url):
    client = OpenSearch([opensearch_url], timeout=60)
    try:
        if not any(p["component"] == "sdr" for p in client.cat.plugins(params={"h": "component", "format": "json"})):
            if os.environ.get("SDR_NODE_PLUGIN", "1") == "0":
                pytest.skip("SDR_NODE_PLUGIN=0: this run uses a node without the sdr plugin")
            pytest.fail(f"the node at {opensearch_url} has no sdr plugin; scripts/opensearch-node.sh installs it",
                        pytrace=False)
        yield opensearch_url, client
    finally:
        client.close()


@pytest.fixture(scope="module")
def stores(node):
    """``{"plugin": store, "python": store}``: 8 documents written by each store (vectors once, read through
    the plugin; and with the base64 copy, plugin off), statistics computed, then three documents without
    vectors written around the store into each index."""
    url, client = node
    name = f"sdr-test-faults-{uuid.uuid4().hex[:8]}"
    made = {"plugin": OpenSearchStore(url, index=f"{name}-plugin", settings=OpenSearchSettings(plugin="on")),
            "python": OpenSearchStore(url, index=f"{name}-python", settings=OpenSearchSettings(plugin="off"))}
    try:
        for store in made.values():
            store.ensure_meta(META)
            store.put(make_docs(8, seed=4))
            refresh_stats(store, exact=True, sample_size=100, seed=0)
            index = store.index_name
            src = client.get(index=index, id="d000")["_source"]
            src.pop("vectors_b64", None)
            # A derived-source index (3.x's default) rebuilds the vectors into _source: take them out by hand.
            src["sentences"] = [{k: v for k, v in s.items() if k != "vector"} for s in src["sentences"]]
            client.index(index=index, id="novec", body={**src, "doc_id": "novec", "title": "novec"})
            client.index(index=index, id="hollow", body={**src, "doc_id": "hollow", "title": "hollow",
                                                         "sentences": [], "n_sentences": 0})
            bare = {k: v for k, v in src.items() if k != "sentences"}
            client.index(index=index, id="nosent", body={**bare, "doc_id": "nosent", "title": "nosent"},
                         params={"refresh": "true"})
        yield made
    finally:
        for store in made.values():
            store.drop()
            store.close()


def _bad(client, index: str, body: dict, expected: str) -> None:
    with pytest.raises(ox.RequestError) as info:  # HTTP 400
        client.search(index=index, body=body)
    assert info.value.status_code == 400
    assert expected in str(info.value.info), info.value.info


def test_bad_sdr_candidates_and_sdr_vectors_requests_are_400s(node, stores):
    _, client = node
    index = stores["plugin"].index_name
    rng = np.random.default_rng(2)
    src = rng.standard_normal((5, DIM)).astype(np.float32)

    def candidates(**kw):
        return {"size": 20, "query": {"sdr_candidates": {"vectors": _b64(src), "paragraph_sizes": [2, 3], **kw}}}

    assert client.search(index=index, body=candidates())["hits"]["hits"]  # the good request answers
    _bad(client, index, {"query": {"sdr_candidates": {"vectors": _b64(np.ones((5, DIM + 1))), "paragraph_sizes": [2, 3]}}},
         f"[sdr_candidates] the source vectors have {DIM + 1} dimensions but field [sentences.vector] has {DIM}")
    nan = src.copy()
    nan[3, 2] = np.nan
    _bad(client, index, {"query": {"sdr_candidates": {"vectors": _b64(nan), "paragraph_sizes": [2, 3]}}},
         "[sdr_candidates] [vectors] sentence 3 holds NaN at dimension 2: every value must be finite")
    _bad(client, index, candidates(mu=[0.1, 0.2]), "[mu] and [sigma] go together")
    _bad(client, index, candidates(mu=[0.1], sigma=[1.0]), "[mu] has 1 values for 2 source paragraphs")
    _bad(client, index, candidates(mu=[0.1, 0.2], sigma=[1.0, -1.0]), "[sigma] value 1 is negative")
    _bad(client, index, candidates(k=0), "[sdr_candidates] [k] must be between 1 and 10000, got 0")
    _bad(client, index, candidates(search="nope"), "[search] must be documents or sentences, got [nope]")
    _bad(client, index, candidates(aggregation="max"), "[aggregation] must be one of")
    _bad(client, index, candidates(paragraph_sizes=[2, 2]), "[sdr_candidates]")
    _bad(client, index, candidates(bogus=1), "[sdr_candidates] does not support [bogus]")
    _bad(client, index, {"query": {"match_all": {}}, "ext": {"sdr_vectors": {"bogus": 1}}},
         "[sdr_vectors] does not support [bogus]")
    _bad(client, index, {"query": {"match_all": {}}, "ext": {"sdr_vectors": {"field": "nothing.vector"}}},
         f"[sdr_vectors] field [nothing.vector] is not in the mapping of index [{index}]")
    _bad(client, index, {"query": {"match_all": {}}, "ext": {"sdr_vectors": {"field": "sentences.paragraph"}}},
         "[sdr_vectors] field [sentences.paragraph] is of type [integer], not knn_vector")
    _bad(client, index, {"query": {"match_all": {}}, "ext": {"sdr_vectors": {"field": "vector"}}},
         "[sdr_vectors] [field] must be a field of a nested object")
    assert client.cluster.health()["status"] in ("green", "yellow")


def test_documents_without_vectors_on_the_node(node, stores):
    _, client = node
    index = stores["plugin"].index_name
    src = stores["plugin"].get("d003").vectors
    sizes = np.diff(src.par_offsets).tolist()
    body = {"size": 20, "query": {"match_all": {}}, "_source": ["doc_id"],
            "rescore": {"window_size": 20, "sdr": {"vectors": _b64(src.vectors), "paragraph_sizes": sizes,
                                                   "mu": [0.0] * len(sizes), "sigma": [1.0] * len(sizes),
                                                   "explain": True}}}
    hits = client.search(index=index, body=body)["hits"]["hits"]
    assert len(hits) == 8 + len(DAMAGED)
    assert hits[0]["_id"] == "d003" and hits[0]["_score"] == pytest.approx(1.0, abs=1e-4)
    assert sorted(h["_id"] for h in hits[-3:]) == sorted(DAMAGED)  # last, with the lowest float
    for h in hits[-3:]:
        assert h["_score"] == pytest.approx(NO_SENTENCES_SCORE, rel=1e-6)
        assert h["fields"]["_sdr"][0]["score"] is None and h["fields"]["_sdr"][0]["sentences"] == 0
    found = client.search(index=index, body={"size": 50, "docvalue_fields": ["doc_id"], "_source": False, "query": {
        "sdr_candidates": {"vectors": _b64(src.vectors), "paragraph_sizes": sizes, "k": 50}}})["hits"]["hits"]
    assert sorted(h["_id"] for h in found) == [f"d{k:03d}" for k in range(8)]  # never a document without vectors
    for mean in (False, True):
        got = client.search(index=index, body={"size": 20, "_source": False, "query": {"ids": {"values": list(DAMAGED)}},
                                               "ext": {"sdr_vectors": {"mean": mean}}})["hits"]["hits"]
        assert len(got) == 3 and all(h["fields"]["_sdr_vectors"][0]["sentences"] == 0 for h in got)
    assert client.cluster.health()["status"] in ("green", "yellow")


@pytest.mark.parametrize("path", ["plugin", "python"])
def test_the_store_names_a_document_without_vectors(stores, path):
    store = stores[path]
    assert store.has_plugin() == (path == "plugin")
    source = store.get("d001")
    for doc_id in DAMAGED:
        with pytest.raises(StoreError, match=MISSING.format(doc_id)):
            store.fetch(["d002", doc_id])
        with pytest.raises(StoreError, match=MISSING.format(doc_id)):
            store.candidate_features(["d002", doc_id])
        with pytest.raises(StoreError, match=MISSING.format(doc_id)):
            store.get(doc_id)
        if path == "plugin":
            with pytest.raises(StoreError, match=MISSING.format(doc_id)):
                store.sdr_scores([(source.vectors, source.stats)], ["d002", doc_id])
    assert store.documents_of(["hollow"])["hollow"].title == "hollow"  # its text is intact
    if path == "plugin":
        ok = store.sdr_scores([(source.vectors, NormStats.identity(source.vectors.n_paragraphs))], ["d002", "d001"])
        assert np.isfinite(ok.scores).all() and ok.scores[0, 1] == pytest.approx(1.0, abs=1e-4)


@pytest.mark.parametrize("method", ["sdr", "hybrid"])
def test_the_engine_fails_the_same_way_through_either_path(stores, method):
    messages = {}
    for path, store in stores.items():
        engine = MoreLikeThis(store=store, encoder=FakeEncoder(), settings=MLTSettings())
        if method == "sdr":  # the k-NN never meets them
            ok = engine.run(Query(id="d001", method=method, size=5))
            assert ok.hits and not {h.id for h in ok.hits} & set(DAMAGED)
        else:  # BM25 does: their text is intact (a copy of d000's)
            with pytest.raises(StoreError, match="stored vectors of document '(novec|hollow|nosent)' are missing"):
                engine.run(Query(id="d001", method=method, size=5))
        with pytest.raises(StoreError) as info:
            engine.run(Query(id="d001", method=method, candidate_ids=["d002", "novec", "d003"]))
        messages[path] = str(info.value)
        with pytest.raises(StoreError, match=MISSING.format("hollow")):  # the filter's matches: all ranked
            engine.run(Query(id="d001", method=method, filter={"lang": "en"}, candidates=20))
    assert messages["plugin"].startswith(MISSING.format("novec")), messages
    assert messages["python"].startswith(MISSING.format("novec")), messages


def test_a_source_document_without_vectors_is_refused(stores):
    for store in stores.values():
        engine = MoreLikeThis(store=store, encoder=FakeEncoder(), settings=MLTSettings())
        with pytest.raises(StoreError, match=MISSING.format("novec")):
            engine.run(Query(id="novec", method="sdr"))


def test_dimension_checked_before_the_node(stores):
    store = stores["plugin"]
    wrong = DocVectors(np.ones((2, DIM + 1), dtype=np.float32), np.array([0, 2]))
    with pytest.raises(Exception, match=str(DIM)):
        store.sdr_candidates(wrong, 5, 10)
