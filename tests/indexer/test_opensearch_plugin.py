"""The sdr OpenSearch plugin (``opensearch-plugin/``) on a real node: documents written by the
OpenSearchStore, a raw search with the ``sdr`` rescore clause through opensearch-py, scores checked
against the brute-force oracle (:mod:`sdr_search.core.reference`, ``sdr_core/reference.py``) within
1e-4, with the source's vectors sent both ways (base64 float32 and JSON float arrays), the per-hit
explanation (``_sdr`` field and the explain API), and bad input answered 400 with a message.

The node must have the plugin (``scripts/opensearch-node.sh start`` builds and installs it unless
``SDR_NODE_PLUGIN=0``): a node without it fails these tests; only a run that asks for a node
without the plugin (``SDR_NODE_PLUGIN=0``) skips them.
"""

from __future__ import annotations

import base64
import json
import math
import os

import numpy as np
import pytest
from opensearchpy import OpenSearch
from opensearchpy import exceptions as ox

from factories import AS_GIVEN, WORDS
from sdr_search.core.reference import reference_paragraph_score, reference_paragraph_stats
from sdr_search.core.scoring import NormStats
from sdr_search.core.documents import parse_record
from sdr_search.core.vectors import DocVectors
from sdr_search.indexer.opensearch import OpenSearchSettings, OpenSearchStore
from sdr_search.indexer.store import IndexMeta

pytestmark = pytest.mark.integration

DIM = 16
META = IndexMeta("model-a", "tag-a", DIM, {"paragraph_unit": "paragraph"}, {"numpy": np.__version__})
TOL = 1e-4
NO_SENTENCES = -3.4028234663852886e38  # the plugin's score for a hit without sentence vectors (lowest float32)
# candidate shapes (sentences per paragraph): 1, 5 and 17 sentences, one-paragraph documents, mixed
SHAPES = [[1], [5], [17], [1, 5, 17], [3, 3], [2, 1, 4], [17, 1], [1, 1, 1, 1], [6], [4, 2]]


@pytest.fixture(scope="module")
def plugin_url(opensearch_url) -> str:
    """The node's URL once it is known to have the sdr plugin (a failure otherwise, unless the run
    asked for a node without it: SDR_NODE_PLUGIN=0)."""
    client = OpenSearch([opensearch_url], timeout=60)
    try:
        plugins = client.cat.plugins(params={"h": "component", "format": "json"})
    finally:
        client.close()
    if any(p["component"] == "sdr" for p in plugins):
        return opensearch_url
    if os.environ.get("SDR_NODE_PLUGIN", "1") == "0":
        pytest.skip("SDR_NODE_PLUGIN=0: this run uses a node without the sdr plugin")
    pytest.fail(f"the node at {opensearch_url} has no sdr plugin (plugins: {sorted(p['component'] for p in plugins)}); "
                "scripts/opensearch-node.sh builds and installs it (restart a node started without it), or set "
                "SDR_NODE_PLUGIN=0 for a run without it", pytrace=False)


def unit(rng: np.random.Generator, n: int) -> np.ndarray:
    x = rng.standard_normal((n, DIM)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def make_item(doc_id: str, rng: np.random.Generator, sizes: list[int]):
    paragraphs = [" ".join(f"Sentence {s} of {doc_id} says {WORDS[(p + s) % len(WORDS)]}." for s in range(n))
                  for p, n in enumerate(sizes)]
    doc = parse_record({"id": doc_id, "title": f"Title {doc_id}", "paragraphs": paragraphs}, settings=AS_GIVEN)
    assert [len(p) for p in doc.paragraphs] == sizes
    return doc, DocVectors(unit(rng, sum(sizes)), np.concatenate([[0], np.cumsum(sizes)]))


def paragraphs_of(vectors: DocVectors) -> list[np.ndarray]:
    offsets = vectors.par_offsets
    return [vectors.vectors[offsets[i]:offsets[i + 1]] for i in range(len(offsets) - 1)]


def b64(vectors: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(vectors, dtype="<f4").tobytes()).decode("ascii")


def oracle(source: list[np.ndarray], candidate: list[np.ndarray], mu, sigma) -> tuple[float, list[tuple[int, float, float]]]:
    """S(s, c) from reference.py's paragraph score, with the given mu / sigma (sigma < 1e-6 -> 1), and per source
    paragraph (best j, P_ij, N_ij)."""
    total, rows = 0.0, []
    for i, sp in enumerate(source):
        s = 1.0 if sigma[i] < 1e-6 else sigma[i]
        scored = [(j, reference_paragraph_score(sp, cp)) for j, cp in enumerate(candidate)]
        j, p = max(scored, key=lambda t: ((t[1] - mu[i]) / s, -t[0]))
        rows.append((j, p, (p - mu[i]) / s))
        total += (p - mu[i]) / s
    return total / len(source), rows


@pytest.fixture(scope="module")
def corpus(plugin_url, tmp_path_factory):
    """A fresh index (module scope, deleted afterwards) with the SHAPES documents and one document
    with no sentence vector, plus a source and its corpus statistics."""
    from opensearchpy import OpenSearch as Client
    import uuid

    rng = np.random.default_rng(33)
    items = [make_item(f"c{k:02d}", rng, shape) for k, shape in enumerate(SHAPES)]
    name = f"sdr-test-plugin-{uuid.uuid4().hex[:10]}"
    store = OpenSearchStore(plugin_url, index=name, settings=OpenSearchSettings())
    client = Client([plugin_url], timeout=60)
    try:
        store.ensure_meta(META)
        store.put(items)
        # a document whose sentences are missing (written around the store, which refuses such documents)
        client.index(index=name, id="hollow", body={"doc_id": "hollow", "title": "hollow", "n_paragraphs": 0,
                                                     "n_sentences": 0, "sentences": []}, params={"refresh": "true"})
        source = paragraphs_of(make_item("src", rng, [1, 5, 17])[1])
        stat_paragraphs = [p for _, v in items for p in paragraphs_of(v)]
        stats = [reference_paragraph_stats(sp, stat_paragraphs) for sp in source]
        yield {"name": name, "client": client, "items": {d.id: paragraphs_of(v) for d, v in items}, "source": source,
               "mu": [m for m, _ in stats], "sigma": [s for _, s in stats]}
    finally:
        client.indices.delete(index=f"{name}*", params={"expand_wildcards": "all", "ignore_unavailable": "true"})
        client.close()
        store.close()


def sdr_clause(source: list[np.ndarray], mu, sigma, *, as_arrays: bool = False, **extra) -> dict:
    vectors = np.concatenate(source)
    return {"vectors": vectors.astype(np.float32).tolist() if as_arrays else b64(vectors),
            "paragraph_sizes": [len(p) for p in source], "mu": list(mu), "sigma": list(sigma), **extra}


def search(client, index: str, clause: dict, *, size: int = 20, window: int = 50, **body):
    return client.search(index=index, body={"size": size, "query": {"match_all": {}}, "_source": ["doc_id"],
                                            "rescore": {"window_size": window, "sdr": clause}, **body})


@pytest.mark.parametrize("as_arrays", [False, True], ids=["base64", "float-arrays"])
def test_scores_equal_the_reference(corpus, as_arrays):
    source, mu, sigma = corpus["source"], corpus["mu"], corpus["sigma"]
    res = search(corpus["client"], corpus["name"], sdr_clause(source, mu, sigma, as_arrays=as_arrays, explain=True))
    hits = res["hits"]["hits"]
    assert len(hits) == len(SHAPES) + 1
    expected = {doc_id: oracle(source, cand, mu, sigma) for doc_id, cand in corpus["items"].items()}
    ranked = sorted(expected, key=lambda d: (-expected[d][0], d))
    assert [h["_source"]["doc_id"] for h in hits[:-1]] == ranked  # no ties in these random vectors
    for hit in hits[:-1]:
        score, rows = expected[hit["_source"]["doc_id"]]
        assert hit["_score"] == pytest.approx(score, abs=TOL)
        explained = hit["fields"]["_sdr"][0]
        assert explained["score"] == pytest.approx(score, abs=TOL)
        assert explained["sentences"] == sum(len(p) for p in corpus["items"][hit["_source"]["doc_id"]])
        assert len(explained["source_paragraphs"]) == len(source)
        for i, (row, (j, p, z)) in enumerate(zip(explained["source_paragraphs"], rows)):
            assert row["source_paragraph"] == i
            assert row["candidate_paragraph"] == j
            assert row["paragraph_score"] == pytest.approx(p, abs=TOL)
            assert row["normalised_score"] == pytest.approx(z, abs=TOL)
            assert [pair["source_sentence"] for pair in row["sentence_pairs"]] == list(range(len(source[i])))
            cand = corpus["items"][hit["_source"]["doc_id"]][j]
            for pair in row["sentence_pairs"]:
                cosines = cand @ source[i][pair["source_sentence"]]
                assert pair["candidate_sentence"] == int(np.argmax(cosines))
                assert pair["cosine"] == pytest.approx(float(cosines.max()), abs=TOL)
    last = hits[-1]  # the document without sentence vectors: SDR's -inf, the lowest float, last
    assert last["_id"] == "hollow"
    assert last["_score"] == pytest.approx(NO_SENTENCES, rel=1e-6)
    assert last["fields"]["_sdr"][0] == {"score": None, "sentences": 0, "paragraphs": 0, "source_paragraphs": []}


def test_sigma_below_the_floor_counts_as_one_and_parts_average(corpus):
    source = corpus["source"]
    mu = [0.1, -0.05, 0.2]
    sigma = [0.0, 5e-7, 0.3]
    res = search(corpus["client"], corpus["name"], sdr_clause(source, mu, sigma))
    for hit in res["hits"]["hits"][:-1]:
        assert hit["_score"] == pytest.approx(oracle(source, corpus["items"][hit["_source"]["doc_id"]], mu, sigma)[0],
                                              abs=TOL)
    # two sources merged (parts [1, 2]): the mean of each part's own mean
    res = search(corpus["client"], corpus["name"], sdr_clause(source, mu, sigma, parts=[1, 2]))
    for hit in res["hits"]["hits"][:-1]:
        cand = corpus["items"][hit["_source"]["doc_id"]]
        first = oracle(source[:1], cand, mu[:1], sigma[:1])[0]
        rest = oracle(source[1:], cand, mu[1:], sigma[1:])[0]
        assert hit["_score"] == pytest.approx((first + rest) / 2, abs=TOL)


def test_one_sentence_source_and_the_window(corpus):
    rng = np.random.default_rng(7)
    source = [unit(rng, 1)]
    client, name = corpus["client"], corpus["name"]
    first = client.search(index=name, body={"size": 20, "query": {"match_all": {}}, "_source": ["doc_id"]})
    window_ids = [h["_id"] for h in first["hits"]["hits"][:3]]
    res = search(client, name, sdr_clause(source, [0.0], [1.0]), size=20, window=3)
    hits = res["hits"]["hits"]
    assert sorted(h["_id"] for h in hits) == sorted(window_ids)  # only the rescored window comes back
    for hit in hits:
        if hit["_id"] != "hollow":
            assert hit["_score"] == pytest.approx(oracle(source, corpus["items"][hit["_source"]["doc_id"]], [0.0], [1.0])[0],
                                                  abs=TOL)


def test_explain_api_gives_the_paragraph_breakdown(corpus):
    source, mu, sigma = corpus["source"], corpus["mu"], corpus["sigma"]
    res = search(corpus["client"], corpus["name"], sdr_clause(source, mu, sigma), size=3, explain=True)
    for hit in res["hits"]["hits"]:
        score, rows = oracle(source, corpus["items"][hit["_source"]["doc_id"]], mu, sigma)
        explanation = hit["_explanation"]
        assert explanation["value"] == pytest.approx(score, abs=TOL)
        assert explanation["description"].startswith("sdr: mean over 3 source paragraphs")
        assert [d["value"] for d in explanation["details"]] == pytest.approx([z for _, _, z in rows], abs=TOL)
        for d, (j, _, _) in zip(explanation["details"], rows):
            assert f"best candidate paragraph {j}," in d["description"]


def test_two_shards_merge_sdr_scores(plugin_url, os_index):
    rng = np.random.default_rng(5)
    items = [make_item(f"s{k:02d}", rng, shape) for k, shape in enumerate(SHAPES)]
    store = OpenSearchStore(plugin_url, index=os_index("sdr-test-plugin2"), settings=OpenSearchSettings(shards=2))
    client = OpenSearch([plugin_url], timeout=60)
    try:
        store.ensure_meta(META)
        store.put(items)
        source = paragraphs_of(make_item("src2", rng, [17, 5])[1])
        mu, sigma = [0.05, 0.02], [0.1, 0.2]
        res = search(client, store.index, sdr_clause(source, mu, sigma), size=5)
        assert res["_shards"]["successful"] == 2
        expected = {d.id: oracle(source, paragraphs_of(v), mu, sigma)[0] for d, v in items}
        top = sorted(expected, key=lambda d: -expected[d])[:5]
        assert [h["_source"]["doc_id"] for h in res["hits"]["hits"]] == top
        for hit in res["hits"]["hits"]:
            assert hit["_score"] == pytest.approx(expected[hit["_source"]["doc_id"]], abs=TOL)
        # explain_top needs the fetch phase in the rescore's pass: over two shards it runs apart, so no hit
        # carries a breakdown (never a wrong one); the store then stops asking and the engine asks with explain
        topped = search(client, store.index, sdr_clause(source, mu, sigma, explain_top=3), size=5)
        assert [h["_score"] for h in topped["hits"]["hits"]] == [h["_score"] for h in res["hits"]["hits"]]
        assert all("_sdr" not in h.get("fields", {}) for h in topped["hits"]["hits"])
        src = DocVectors(np.concatenate(source), np.cumsum([0, 17, 5]))
        stats = NormStats(np.asarray(mu), np.asarray(sigma))
        ids = [d.id for d, _ in items]
        assert store.sdr_scores([(src, stats)], ids, explain_top=3).explanations == [None] * len(ids)
        assert store._plugin.many_shards == {store._indices.read().name}
    finally:
        store.close()
        client.close()


def _bad(corpus, clause: dict, expected: str, **kw) -> None:
    with pytest.raises(ox.RequestError) as info:  # opensearch-py: RequestError is HTTP 400
        search(corpus["client"], corpus["name"], clause, **kw)
    assert info.value.status_code == 400
    assert expected in str(info.value.info), info.value.info


def test_bad_input_is_a_400_with_a_message(corpus):
    source, mu, sigma = corpus["source"], corpus["mu"], corpus["sigma"]
    rng = np.random.default_rng(3)
    wrong_dim = [rng.standard_normal((len(p), DIM + 1)).astype(np.float32) for p in source]
    _bad(corpus, sdr_clause(wrong_dim, mu, sigma), f"the source vectors have {DIM + 1} dimensions but field [sentences.vector] has {DIM}")
    with_nan = [p.copy() for p in source]
    with_nan[1][2, 3] = np.nan
    _bad(corpus, sdr_clause(with_nan, mu, sigma), "every value must be finite")
    with_inf = [p.copy() for p in source]
    with_inf[0][0, 0] = np.inf
    _bad(corpus, sdr_clause(with_inf, mu, sigma), "every value must be finite")
    # a number too large for a double is infinity once parsed (Python's json writes inf as a bare Infinity
    # token, which the node's JSON parser refuses by itself): send it as the literal 1e400
    body = json.dumps({"size": 5, "query": {"match_all": {}},
                       "rescore": {"window_size": 10, "sdr": sdr_clause(source, [mu[0], 12345.5, mu[2]], sigma)}})
    with pytest.raises(ox.RequestError) as info:
        corpus["client"].search(index=corpus["name"], body=body.replace("12345.5", "1e400"))
    assert "[mu] value 1 is Infinity: statistics must be finite" in str(info.value.info)
    _bad(corpus, sdr_clause(source, mu, [sigma[0], -1.0, sigma[2]]), "[sigma] value 1 is negative")
    clause = sdr_clause(source, mu, sigma)
    del clause["mu"]
    _bad(corpus, clause, "[mu] is required")
    clause = sdr_clause(source, mu, sigma)
    del clause["sigma"]
    _bad(corpus, clause, "[sigma] is required")
    _bad(corpus, sdr_clause(source, mu[:2], sigma), "[mu] has 2 values for 3 source paragraphs")
    _bad(corpus, {**sdr_clause(source, mu, sigma), "paragraph_sizes": [1, 5, 16]},
         "not a whole number of rows for 22 sentences")
    _bad(corpus, {**sdr_clause(source, mu, sigma, as_arrays=True), "paragraph_sizes": [1, 5, 16]},
         "[paragraph_sizes] add up to 22 sentences but [vectors] holds 23")
    _bad(corpus, {"vectors": "", "paragraph_sizes": [], "mu": [], "sigma": []}, "empty source")
    _bad(corpus, {"vectors": [], "paragraph_sizes": [], "mu": [], "sigma": []}, "empty source")
    _bad(corpus, {**sdr_clause(source, mu, sigma), "field": "nothing.vector"}, "field [nothing.vector] is not in the mapping")
    _bad(corpus, {**sdr_clause(source, mu, sigma), "field": "sentences.paragraph"}, "not knn_vector")
    _bad(corpus, {**sdr_clause(source, mu, sigma), "vectors": "%%%"}, "[vectors] is not valid base64")
    _bad(corpus, {**sdr_clause(source, mu, sigma), "k": 3}, "[sdr] does not support [k]")
    _bad(corpus, sdr_clause(source, mu, sigma), "window_size must be at least 1", window=0)


def test_nan_in_json_statistics_is_a_400(corpus):
    """opensearch-py writes float('nan') as a bare NaN token (json.dumps' default); the node answers 400."""
    source, mu, sigma = corpus["source"], corpus["mu"], corpus["sigma"]
    with pytest.raises(ox.RequestError) as info:
        search(corpus["client"], corpus["name"], sdr_clause(source, [math.nan, *mu[1:]], sigma))
    assert info.value.status_code == 400
