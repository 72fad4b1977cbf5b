"""The engine gives the same results through either OpenSearch path (issue 33, item 4): one small corpus
(texts with topics, vectors from the deterministic fake encoder, exact statistics) in

* an embedded store (the reference),
* an OpenSearch index used through the sdr plugin (``SDR_IN_STORE`` on: the candidate stage, exact SDR
  and the hybrid features computed on the node; the vectors kept once, in the k-NN field), and
* an OpenSearch index on the same node with the plugin off (the Python path: per-sentence nested k-NN,
  vectors fetched from the base64 copy, SDR in numpy).

For method sdr and hybrid (adaptive fusion, document feedback on), a source by id, a new text, like +
unlike, a metadata filter, each with explain: ``candidates`` (K) covers the whole corpus so that no
candidate stage can leave a document out; then the two OpenSearch paths give the same hit ids in the same
order, the same scores, signals, feedback documents and explanations, and every SDR score (the hit's score
for method sdr, the ``sdr`` signal for hybrid, the explanation's) is within 1e-4 of the embedded store's.
The embedded store's BM25 (bm25s) agrees with the node's on this corpus (within 1e-6), so hybrid is
compared with it in full too. Measured when written: SDR differs from the embedded store's by at most
1.7e-7 through the plugin (float32 on the node) and 4e-16 through the Python path.

The node must have the plugin (as in ``test_opensearch_plugin_store.py``; ``SDR_NODE_PLUGIN=0`` skips).
"""

from __future__ import annotations

import os
import uuid

import pytest
from opensearchpy import OpenSearch

from factories import AS_GIVEN, FakeEncoder
from sdr_search.core.documents import parse_record
from sdr_search.indexer.embedded import EmbeddedStore
from sdr_search.indexer.opensearch import OpenSearchSettings, OpenSearchStore
from sdr_search.indexer.pipeline import index_documents
from sdr_search.indexer.stats_job import refresh_stats
from sdr_search.reranker.engine import MLTSettings, MoreLikeThis, Query

pytestmark = pytest.mark.integration

TOL = 1e-4
TOPICS = ["court", "river", "music", "rocket", "garden", "bridge"]
N_DOCS = 18
SAMPLE = 1000  # larger than the corpus's paragraphs: the whole corpus is the reference sample in every store
TEXT = ("The river story begins near the old bridge. It is about the river and the music.\n\n"
        "A court paragraph follows. The garden again, and a rocket.")


def _record(k: int) -> dict:
    """Documents of 1 to 4 paragraphs of 1 to 5 sentences; doc-17 repeats doc-5's text (a duplicate: equal
    scores, ranked by id in every path)."""
    n = 5 if k == 17 else k
    t, u = TOPICS[n % len(TOPICS)], TOPICS[(n * 5 + 1) % len(TOPICS)]
    paragraphs = [f"The {t} story {n} begins. It is about the {t} and the {u}.",
                  f"A {u} paragraph of document {n}. The {t} again, {n}.",
                  f"Closing words on the {t}. Number {n} ends here. The {u} stays. Then {n} more. And the {t}.",
                  f"One more {u} line for {n}."]
    if n % 8 == 4:
        paragraphs = [f"Only the {t} for {n}."]  # one sentence
    return {"id": f"doc-{k}", "title": f"On the {t} ({n})", "topic": t, "group": k % 3,
            "paragraphs": paragraphs[: 1 + n % 4]}


@pytest.fixture(scope="module", params=[1, 2], ids=["1-shard", "2-shards"])
def stores(request, opensearch_url, tmp_path_factory):
    """``{"embedded", "plugin", "python"}``: the corpus indexed into each (module scope); the OpenSearch
    indices with one shard, then two (each shard runs the candidate stage and SDR on its own documents)."""
    client = OpenSearch([opensearch_url], timeout=60)
    try:
        has = any(p["component"] == "sdr" for p in client.cat.plugins(params={"h": "component", "format": "json"}))
    finally:
        client.close()
    if not has:
        if os.environ.get("SDR_NODE_PLUGIN", "1") == "0":
            pytest.skip("SDR_NODE_PLUGIN=0: this run uses a node without the sdr plugin")
        pytest.fail(f"the node at {opensearch_url} has no sdr plugin; scripts/opensearch-node.sh installs it", pytrace=False)
    docs = [parse_record(_record(k), settings=AS_GIVEN) for k in range(N_DOCS)]
    name = f"sdr-test-paths-{uuid.uuid4().hex[:8]}"
    made = {
        "embedded": EmbeddedStore(tmp_path_factory.mktemp("paths") / "s", create=True),
        "plugin": OpenSearchStore(opensearch_url, index=f"{name}-plugin",
                                  settings=OpenSearchSettings(plugin="on", shards=request.param)),
        "python": OpenSearchStore(opensearch_url, index=f"{name}-python",
                                  settings=OpenSearchSettings(plugin="off", shards=request.param)),
    }
    try:
        for store in made.values():
            index_documents(store, docs, FakeEncoder())
            refresh_stats(store, exact=True, sample_size=SAMPLE, seed=0)
        plugin, python = made["plugin"], made["python"]
        # several shards: the candidate stage is per-sentence searches merged by the coordinator (docs/opensearch.md)
        assert plugin.capabilities.exact_sdr and plugin.capabilities.sdr_candidates == (request.param == 1)
        assert not python.capabilities.exact_sdr and not python.capabilities.sdr_candidates
        assert plugin._indices.read().vectors == "index" and python._indices.read().vectors == "b64"
        yield made
    finally:
        for key in ("plugin", "python"):
            made[key].drop()
        for store in made.values():
            store.close()


def _run(store, **query):
    engine = MoreLikeThis(store=store, encoder=FakeEncoder(), settings=MLTSettings())
    return engine.run(Query(candidates=N_DOCS, size=N_DOCS, explain=True, **query))


QUERIES = {
    "id": dict(id="doc-3"),
    "text": dict(text=TEXT),
    "like-unlike": dict(like=["doc-2", {"text": TEXT}], unlike=["doc-7"]),
    "filter": dict(id="doc-4", filter={"group": 1}),
    "filter-text": dict(text=TEXT, filter={"topic": ["river", "court", "garden"]}),
}


def _assert_close_explanations(a, b, what: str) -> None:
    """Two hits' explanations: the same paragraph and sentence pairs, scores within TOL."""
    assert a.score == pytest.approx(b.score, abs=TOL), what
    assert len(a.paragraph_pairs) == len(b.paragraph_pairs), what
    for pa, pb in zip(a.paragraph_pairs, b.paragraph_pairs):
        da, db = pa.model_dump(), pb.model_dump()
        for key in ("paragraph_score", "normalised_score"):
            assert da.pop(key) == pytest.approx(db.pop(key), abs=TOL), (what, key)
        sa, sb = da.pop("sentence_pairs"), db.pop("sentence_pairs")
        assert da == db, what
        assert len(sa) == len(sb), what
        for xa, xb in zip(sa, sb):
            assert xa.pop("cosine") == pytest.approx(xb.pop("cosine"), abs=TOL), what
            assert xa == xb, what


def _assert_same_hits(a, b, what: str, *, hybrid_scores: bool = True) -> None:
    """Same ids in the same order; scores, sources, signals (hybrid) and explanations within TOL."""
    assert [h.id for h in a.hits] == [h.id for h in b.hits], what
    assert a.candidates == b.candidates, what
    assert a.stats_origin == b.stats_origin, what
    for ha, hb in zip(a.hits, b.hits):
        at = f"{what}: {ha.id}"
        if hybrid_scores:
            assert ha.score == pytest.approx(hb.score, abs=TOL), at
            assert [s.score for s in ha.sources or []] == pytest.approx([s.score for s in hb.sources or []], abs=TOL), at
        assert (ha.title, ha.metadata) == (hb.title, hb.metadata), at
        assert ha.snippet.model_dump(exclude={"cosine"}) == hb.snippet.model_dump(exclude={"cosine"}), at
        _assert_close_explanations(ha.explanation, hb.explanation, at)


@pytest.mark.parametrize("query", list(QUERIES), ids=list(QUERIES))
def test_method_sdr_agrees_through_every_path(stores, query):
    results = {k: _run(s, method="sdr", **QUERIES[query]) for k, s in stores.items()}
    emb = results["embedded"]
    assert emb.hits and emb.candidates == len(emb.hits)  # every candidate returned
    if "filter" not in QUERIES[query]:
        assert emb.candidates == N_DOCS - len([i for i in (QUERIES[query].get("id"), "doc-2", "doc-7")
                                              if i and i in str(QUERIES[query])])
    for key in ("plugin", "python"):
        _assert_same_hits(results[key], emb, f"{query}: {key} vs embedded")
    _assert_same_hits(results["plugin"], results["python"], f"{query}: plugin vs python")
    # the plugin path fetched no vector for the ranking (only the returned hits' for the explanation)
    assert "fetch" not in results["plugin"].timings_ms and "fetch" in results["python"].timings_ms


@pytest.mark.parametrize("query", list(QUERIES), ids=list(QUERIES))
def test_hybrid_with_feedback_agrees_through_every_path(stores, query):
    results = {k: _run(s, method="hybrid", **QUERIES[query]) for k, s in stores.items()}
    plugin, python, emb = results["plugin"], results["python"], results["embedded"]
    assert plugin.hybrid["fusion"] == "adaptive"
    assert not [t for t in plugin.timings_ms if t.endswith("fetch")]  # features and SDR from the node, both rounds
    assert "fetch" in python.timings_ms
    if "like" not in QUERIES[query]:  # one short source: document feedback applies
        assert plugin.hybrid["feedback"]["ids"], plugin.hybrid
    # the two OpenSearch paths: one node, one BM25; everything equal
    ha, hb = dict(plugin.hybrid), dict(python.hybrid)
    assert ha.pop("weights_applied") == pytest.approx(hb.pop("weights_applied"), abs=TOL)
    assert ha == hb  # the fusion, and the feedback documents and their share
    _assert_same_hits(plugin, python, f"{query}: plugin vs python")
    for ha, hb in zip(plugin.hits, python.hits):
        for name, sa in ha.signals.items():
            sb = hb.signals[name]
            assert sa.raw == pytest.approx(sb.raw, abs=TOL), (query, ha.id, name)
            assert sa.weight == pytest.approx(sb.weight, abs=TOL), (query, ha.id, name)
    # the embedded store: its BM25 (bm25s, with OpenSearch 2.x's (k1 + 1) divided out of the node's) agrees
    # on this plain English corpus, so the whole ranking does: the same hits, feedback documents and signals
    assert [h.id for h in emb.hits] == [h.id for h in plugin.hits]
    assert emb.hybrid.get("feedback") == plugin.hybrid.get("feedback")
    by_id = {h.id: h for h in emb.hits}
    for key in ("plugin", "python"):
        _assert_same_hits(results[key], emb, f"{query}: {key} vs embedded")
        for h in results[key].hits:
            e = by_id[h.id]
            for name in ("sdr", "mean", "bm25"):
                assert h.signals[name].raw == pytest.approx(e.signals[name].raw, abs=TOL), (query, key, h.id, name)


@pytest.mark.parametrize("method", ["sdr", "hybrid"])
def test_a_filtered_candidate_stage_smaller_than_the_corpus(stores, method):
    """K below the filter's matches, so the candidate stage runs, filtered inside each store (the plugin's
    ``sdr_candidates`` with the filter, the nested k-NN's filter, the embedded store's filtered k-NN), and no
    pre-rank (``prerank_factor`` 1: the top K by aggregation, the same in every path since knn_k covers the
    corpus), then a pool of 2K narrowed by the centroid pre-rank (on the node through the plugin, in Python on
    the others): the same K in every path."""
    K = 5
    for factor in (1.0, 2.0):
        _filtered_stage(stores, method, K, factor)


def _filtered_stage(stores, method: str, K: int, factor: float) -> None:
    query = Query(text=TEXT, method=method, filter={"group": [0, 1]}, candidates=K, size=K, explain=True)
    results = {k: MoreLikeThis(store=s, encoder=FakeEncoder(), settings=MLTSettings(prerank_factor=factor)).run(query)
               for k, s in stores.items()}
    plugin, python, emb = results["plugin"], results["python"], results["embedded"]
    assert "candidates" in plugin.timings_ms and "fetch" not in plugin.timings_ms  # searched, on the node
    assert all(h.metadata["group"] in (0, 1) for h in plugin.hits)
    _assert_same_hits(plugin, python, f"{method}, pool {factor}K: plugin vs python")
    if method == "sdr":
        assert len(plugin.hits) == K
        _assert_same_hits(plugin, emb, f"sdr, pool {factor}K: plugin vs embedded")
    else:  # the vector candidates are the same; the lexical ones are each BM25's own
        vector_ids = {h.id for h in emb.hits} & {h.id for h in plugin.hits}
        assert len(vector_ids) >= K
        by_id = {h.id: h for h in emb.hits}
        for h in plugin.hits:
            if h.id in by_id:
                assert h.signals["sdr"].raw == pytest.approx(by_id[h.id].signals["sdr"].raw, abs=TOL), h.id


@pytest.mark.parametrize("method", ["sdr", "hybrid"])
@pytest.mark.parametrize("source", [dict(id="doc-3"), dict(text=TEXT)], ids=["id", "text"])
def test_the_pool_scored_on_the_node_is_not_scored_again(stores, monkeypatch, method, source):
    """With a pool larger than K the plugin path runs the centroid pre-rank on the node (the pool's centroid
    rows, brought by the candidate search itself), keeps K and scores them exactly there; the ranking reuses those scores (one request for the K; for
    hybrid a second one only for the lexical candidates outside them), and every SDR score still equals the
    embedded store's exact SDR of that document. The presented hits are explained by the node too: in the same
    request as the K's scores (``explain_top``: their best ``size``), and a second request with ``explain`` only
    for presented hits outside those (hybrid's lexical ones); no document's vectors are read."""
    plugin, emb = stores["plugin"], stores["embedded"]
    asked: list[list[str]] = []
    tops: list[int] = []
    with_scores: list[set[str]] = []  # the ids explained with the K's scores
    explained: list[list[str]] = []
    real = plugin.sdr_scores

    def spy(sources, ids, explain=False, explain_top=0, documents=False):
        (explained if explain else asked).append(list(ids))
        got = real(sources, ids, explain=explain, explain_top=explain_top, documents=documents)
        if not explain:
            assert documents == (explain_top > 0)  # the presented hits' documents asked with their breakdowns
            assert set(got.documents) == {i for i, why in zip(got.ids, got.explanations) if why is not None}
        if not explain:
            tops.append(explain_top)
            with_scores.append({i for i, why in zip(got.ids, got.explanations) if why is not None})
        return got

    read: list[str] = []
    real_get = plugin.get

    def no_vectors(ids):
        raise AssertionError(f"vectors of {ids} fetched on the plugin path")

    def get(doc_id):
        read.append(doc_id)
        return real_get(doc_id)

    pooled: list[list[str]] = []
    real_pool, real_rows = plugin.sdr_candidate_pool, plugin.centroid_rows

    def candidate_pool(*args, **kwargs):
        got = real_pool(*args, **kwargs)
        if got.centroid_rows is not None:  # the pool's centroid rows came with it (issue 44: one request)
            pooled.append(list(got.ids))
        return got

    def centroid_rows(source_centroids, ids):  # apart only where the candidate stage is not one request (shards)
        assert not plugin.capabilities.sdr_candidates, f"centroid rows of {ids} asked for apart from the candidate pool"
        pooled.append(list(ids))
        return real_rows(source_centroids, ids)

    monkeypatch.setattr(plugin, "fetch_documents", no_vectors)
    monkeypatch.setattr(plugin, "get", get)
    monkeypatch.setattr(plugin, "centroid_rows", centroid_rows)
    monkeypatch.setattr(plugin, "sdr_candidate_pool", candidate_pool)

    monkeypatch.setattr(plugin, "sdr_scores", spy)
    documents_read: list[list[str]] = []
    real_documents = plugin.documents_of

    def documents_of(ids):
        documents_read.append(list(ids))
        return real_documents(ids)

    monkeypatch.setattr(plugin, "documents_of", documents_of)
    K = 4
    query = dict(method=method, candidates=K, size=K, feedback=False) if method == "hybrid" else dict(method=method, candidates=K, size=K)
    got = MoreLikeThis(store=plugin, encoder=FakeEncoder(), settings=MLTSettings(prerank_factor=2.0)).run(
        Query(**source, **query))
    assert len(pooled) == 1 and len(pooled[0]) == 2 * K  # the pool pre-ranked on the node
    assert len(asked[0]) == K and set(asked[0]) <= set(pooled[0])  # its K scored exactly, once
    assert len(asked) == 1 if method == "sdr" else len(asked) <= 2
    if len(asked) == 2:
        assert not set(asked[1]) & set(asked[0]), "a document was scored twice"
    ids = [h.id for h in got.hits]
    # the K scored with the breakdown of their best K (offset + size) where the index has one shard (the plugin
    # keeps it for a fetch phase in the same pass); over two shards none comes back and the store stops asking
    one_shard = plugin.settings.shards == 1
    assert tops[0] == K and len(with_scores[0]) == (K if one_shard else 0)
    if method == "sdr" and one_shard:
        assert set(ids) == with_scores[0]  # the presented hits are the K's best
    rest = [i for i in ids if i not in with_scores[0]]
    assert explained == ([rest] if rest else [])  # one request for the presented hits not explained yet, if any
    assert documents_read == ([rest] if rest else [])  # and only their documents read: the others came with the scores
    assert not read  # no document read whole (the source by id is read with the query's state)
    assert all(h.snippet is not None for h in got.hits)
    exact = MoreLikeThis(store=emb, encoder=FakeEncoder(), settings=MLTSettings()).run(
        Query(**source, method="sdr", candidate_ids=ids, size=len(ids)))
    want = {h.id: h.score for h in exact.hits}
    for h in got.hits:
        sdr = h.score if method == "sdr" else h.signals["sdr"].raw
        assert sdr == pytest.approx(want[h.id], abs=TOL), h.id


@pytest.mark.parametrize("candidates", [N_DOCS, 4], ids=["explained-apart", "explained-with-scores"])
def test_a_hit_rewritten_before_the_node_explains_it_is_read_again(stores, monkeypatch, candidates):
    """A presented hit rewritten (other paragraphs) between two reads of the query. Rewritten after its text
    was read and before the breakdown request (no pre-rank: the hits explained in a request of their own),
    the breakdown no longer fits the text read, so the hit is read again whole (``get``), and its title,
    snippet and explanation come from the document as it is now, as on the fetched path. Rewritten after the
    exact scores came (``explain_top``), it is presented as it was scored: its breakdown and its text came
    in the same request (since session 52), so they fit each other and its score. Runs last in the module:
    it restores the document it rewrote."""
    plugin = stores["plugin"]
    real = plugin.sdr_scores
    rewritten: list[str] = []
    when: list[str] = []  # the breakdown request the rewrite preceded or followed
    new_text = [f"The rewritten {t} paragraph stands here. It talks of the {t} and nothing else." for t in TOPICS[:5]]

    def rewrite(doc_id):
        rewritten.append(doc_id)
        new = parse_record({"id": doc_id, "title": "Rewritten", "paragraphs": new_text}, settings=AS_GIVEN)
        index_documents(plugin, [new], FakeEncoder())

    def spy(sources, ids, explain=False, explain_top=0, documents=False):
        if explain and not rewritten:
            when.append("apart")
            rewrite(ids[0])
        got = real(sources, ids, explain=explain, explain_top=explain_top, documents=documents)
        explained = [i for i, why in zip(got.ids, got.explanations) if why is not None]
        if explain_top and explained and not rewritten:
            when.append("with the scores")
            rewrite(explained[0])
        return got

    engine = MoreLikeThis(store=plugin, encoder=FakeEncoder(), settings=MLTSettings())
    monkeypatch.setattr(plugin, "sdr_scores", spy)
    try:
        got = engine.run(Query(candidates=candidates, size=4, explain=True, method="sdr", text=TEXT))
        assert rewritten
        hit = next(h for h in got.hits if h.id == rewritten[0])
        if when == ["apart"]:  # explained apart: read again, as it is now
            assert hit.title == "Rewritten"
            assert hit.snippet.candidate_sentence in " ".join(new_text)
            assert all(p.candidate_paragraph < len(new_text) for p in hit.explanation.paragraph_pairs)
        else:  # explained with the scores: as scored, text and breakdown of one snapshot
            old = parse_record(_record(int(rewritten[0].split("-")[1])), settings=AS_GIVEN)
            assert hit.title == old.title and hit.title != "Rewritten"
            assert hit.snippet.candidate_sentence in " ".join(" ".join(p) for p in old.paragraphs)
            assert all(p.candidate_paragraph < len(old.paragraphs) for p in hit.explanation.paragraph_pairs)
    finally:
        monkeypatch.undo()
        if rewritten:
            k = int(rewritten[0].split("-")[1])
            index_documents(plugin, [parse_record(_record(k), settings=AS_GIVEN)], FakeEncoder())
            refresh_stats(plugin, exact=True, sample_size=SAMPLE, seed=0)
