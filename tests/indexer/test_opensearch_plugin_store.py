"""The OpenSearch store's sdr-plugin path on a real node (issue 33, items 2 and 3): the capabilities
detected from the node's plugins, ``sdr_candidates`` (the candidate stage in one search) equal to the
Python path (``sentence_knn`` + ``aggregate_hits`` + ``top_of``) for every aggregation, with exclusions
and a metadata filter; ``sdr_scores`` equal to the reference SDR (``sdr_core/reference.py``) within 1e-4
for several sources, with its explanation; and an index that keeps the vectors once (no ``vectors_b64``,
read back through the plugin) giving back exactly the vectors written.

The node must have the plugin (``scripts/opensearch-node.sh`` installs it); as in
``test_opensearch_plugin.py`` a node without it fails these tests unless the run asks for one
(``SDR_NODE_PLUGIN=0``), which skips them.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from opensearchpy import OpenSearch

from sdr_search.core.documents import Document
from sdr_search.core.errors import DocumentNotFoundError, InvalidInputError, StoreError
from sdr_search.core.reference import reference_paragraph_score
from sdr_search.core.scoring import NormStats, top_of
from sdr_search.core.vectors import DocVectors
from sdr_search.indexer.opensearch import OpenSearchSettings, OpenSearchStore
from sdr_search.indexer.store import IndexMeta
from sdr_search.reranker.candidates import AGGREGATIONS, aggregate_hits

pytestmark = pytest.mark.integration

DIM = 16
META = IndexMeta("model-a", "tag-a", DIM, {"paragraph_unit": "paragraph"}, {"numpy": np.__version__})
TOL = 1e-4


@pytest.fixture(scope="module")
def plugin_url(opensearch_url) -> str:
    from sdr_search.indexer.opensearch.plugin_version import PLUGIN_VERSION

    client = OpenSearch([opensearch_url], timeout=60)
    try:
        plugins = client.cat.plugins(params={"h": "component,version", "format": "json"})
    finally:
        client.close()
    versions = {p["version"] for p in plugins if p["component"] == "sdr"}
    if versions == {PLUGIN_VERSION}:
        return opensearch_url
    if versions:  # the store would not use it: say why rather than fail on has_plugin()
        pytest.fail(f"the node at {opensearch_url} runs sdr plugin {sorted(versions)}, this checkout speaks "
                    f"{PLUGIN_VERSION}: scripts/opensearch-node.sh restart loads the current build", pytrace=False)
    if os.environ.get("SDR_NODE_PLUGIN", "1") == "0":
        pytest.skip("SDR_NODE_PLUGIN=0: this run uses a node without the sdr plugin")
    pytest.fail(f"the node at {opensearch_url} has no sdr plugin; scripts/opensearch-node.sh installs it", pytrace=False)


def unit(rng: np.random.Generator, n: int) -> np.ndarray:
    x = rng.standard_normal((n, DIM)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def item(doc_id: str, rng: np.random.Generator, sizes: list[int], group: int):
    paragraphs = tuple(tuple(f"Sentence {s} of paragraph {p} of {doc_id}." for s in range(n)) for p, n in enumerate(sizes))
    return (Document(doc_id, paragraphs, f"Title {doc_id}", {"group": group}),
            DocVectors(unit(rng, sum(sizes)), np.concatenate([[0], np.cumsum(sizes)])))


@pytest.fixture(scope="module")
def filled(plugin_url):
    """A store on the plugin node (module scope) with 40 documents of 1-4 paragraphs of 1-6 sentences."""
    import uuid

    rng = np.random.default_rng(33)
    items = [item(f"d{k:02d}", rng, list(rng.integers(1, 7, size=rng.integers(1, 5))), k % 3) for k in range(40)]
    store = OpenSearchStore(plugin_url, index=f"sdr-test-plugin-store-{uuid.uuid4().hex[:10]}")
    try:
        store.ensure_meta(META)
        store.put(items)
        yield store, {d.id: v for d, v in items}
    finally:
        store.drop()
        store.close()


def test_capabilities_follow_the_node_and_the_setting(filled, plugin_url):
    store, _ = filled
    assert store.has_plugin()
    caps = store.capabilities
    assert caps.sdr_candidates and caps.exact_sdr and caps.filtered_knn and caps.metadata_lookup
    off = OpenSearchStore(plugin_url, index=store.index, settings=OpenSearchSettings(plugin="off"))
    try:
        assert not off.capabilities.sdr_candidates and not off.capabilities.exact_sdr
        with pytest.raises(StoreError, match="sdr plugin"):
            off.sdr_candidates(next(iter(filled[1].values())), 5, 10)
    finally:
        off.close()


def test_vectors_are_stored_once_and_read_back_exactly(filled):
    store, vectors = filled
    client = store._os()
    mapping = client.indices.get_mapping(index=store.index_name)[store.index_name]["mappings"]
    assert mapping["_meta"]["sdr"]["vectors"] == "index"
    raw = client.get(index=store.index_name, id="d03")["_source"]
    assert "vectors_b64" not in raw
    if not mapping["_meta"]["sdr"]["derived_source"]:  # 2.x: excluded from _source (3.x rebuilds them on read)
        assert "vector" not in raw["sentences"][0]
    cv = store.fetch(["d07", "d03"])
    for k, doc_id in enumerate(["d07", "d03"]):
        np.testing.assert_array_equal(cv.doc(k).vectors, vectors[doc_id].vectors)
        np.testing.assert_array_equal(cv.doc(k).par_offsets, vectors[doc_id].par_offsets)
    got = store.get("d11")
    np.testing.assert_array_equal(got.vectors.vectors, vectors["d11"].vectors)
    every = store.all_vectors()
    assert list(every.ids) == sorted(vectors)
    for k, doc_id in enumerate(every.ids):
        np.testing.assert_array_equal(every.doc(k).vectors, vectors[doc_id].vectors)
    with pytest.raises(DocumentNotFoundError):
        store.fetch(["d01", "nope"])


def test_an_index_without_the_copy_needs_the_plugin_to_be_read(filled, plugin_url):
    store, _ = filled
    off = OpenSearchStore(plugin_url, index=store.index, settings=OpenSearchSettings(plugin="off"))
    try:
        derived = off._indices.read().derived_source
        if derived:  # 3.x: derived source rebuilds the vectors into _source (slow, exact)
            np.testing.assert_array_equal(off.fetch(["d05"]).doc(0).vectors, filled[1]["d05"].vectors)
        else:
            with pytest.raises(StoreError, match="no sdr plugin to read them"):
                off.fetch(["d05"])
    finally:
        off.close()


@pytest.mark.parametrize("aggregation", AGGREGATIONS)
@pytest.mark.parametrize("with_stats", [True, False], ids=["stats", "no-stats"])
def test_candidates_equal_the_python_path(filled, plugin_url, aggregation, with_stats):
    """search 'documents': the same nested k-NN as sentence_knn, so the same candidates and scores."""
    store = OpenSearchStore(plugin_url, index=filled[0].index, settings=OpenSearchSettings(candidate_search="documents"))
    rng = np.random.default_rng(5)
    source = DocVectors(unit(rng, 9), np.array([0, 1, 6, 9]))
    stats = NormStats(np.array([0.05, 0.1, 0.0]), np.array([0.2, 0.5, 1.0])) if with_stats else None
    k, size = 7, 15
    ids, scores = store.sdr_candidates(source, k, size, stats=stats, aggregation=aggregation, exclude_ids=["d02", "d09"])
    hits = store.sentence_knn(source.vectors, k, exclude_ids=["d02", "d09"])
    want_ids, want_scores = top_of(*aggregate_hits(hits, source.par_offsets, method=aggregation, stats=stats), size)
    assert ids == want_ids
    np.testing.assert_allclose(scores, want_scores, rtol=1e-5, atol=1e-5)
    assert "d02" not in ids and "d09" not in ids
    store.close()


def test_sentence_search_keeps_the_documents_of_the_top_sentences(filled):
    """search 'sentences' (the default): per source sentence the top max(k x 4, ef_search 100) sentences,
    each document once, the first k, as the embedded store's nested k-NN (exact on this small index)."""
    store, vectors = filled
    assert store.settings.candidate_search == "sentences"
    rng = np.random.default_rng(9)
    source = DocVectors(unit(rng, 5), np.array([0, 2, 5]))
    k = 6
    ids, scores = store.sdr_candidates(source, k, 100, aggregation="sum", exclude_ids=["d04"])
    rows_ids, rows_cos = [], []
    every = [(d, v) for d, dv in vectors.items() for v in dv.vectors]
    for q in source.vectors:
        ranked = sorted(every, key=lambda t: -float(t[1] @ q))[:max(k * 4, 100)]
        kept: dict[str, float] = {}
        for d, v in ranked:
            if d != "d04" and d not in kept and len(kept) < k:
                kept[d] = float(v @ q)
        rows_ids.append(list(kept))
        rows_cos.append(np.asarray(list(kept.values()), np.float32))
    from sdr_search.indexer.store import SentenceHits

    want_ids, want_scores = top_of(*aggregate_hits(SentenceHits(rows_ids, rows_cos), source.par_offsets, method="sum"), 100)
    assert ids == want_ids
    np.testing.assert_allclose(scores, want_scores, rtol=1e-5, atol=1e-5)


def test_candidates_with_a_metadata_filter(filled):
    store, _ = filled
    rng = np.random.default_rng(6)
    source = DocVectors(unit(rng, 4), np.array([0, 4]))
    ids, _ = store.sdr_candidates(source, 5, 40, filter={"group": 1}, exclude_ids=["d01"])
    assert ids and all(int(i[1:]) % 3 == 1 for i in ids) and "d01" not in ids
    hits = store.sentence_knn(source.vectors, 5, filter={"group": 1}, exclude_ids=["d01"])
    assert set(ids) >= {row[0] for row in hits.doc_ids}  # every sentence's nearest document is a candidate
    none, scores = store.sdr_candidates(source, 5, 40, filter={"group": 99})
    assert none == [] and scores.size == 0
    assert store.sdr_candidates(source, 5, 0)[0] == []


def _reference(source: DocVectors, stats: NormStats, doc: DocVectors) -> float:
    sp = [source.vectors[a:b] for a, b in zip(source.par_offsets[:-1], source.par_offsets[1:])]
    cp = [doc.vectors[a:b] for a, b in zip(doc.par_offsets[:-1], doc.par_offsets[1:])]
    return float(np.mean([max((reference_paragraph_score(s, c) - stats.mu[i]) / stats.sigma[i] for c in cp)
                          for i, s in enumerate(sp)]))


def test_exact_scores_equal_the_reference(filled):
    store, vectors = filled
    rng = np.random.default_rng(8)
    one = DocVectors(unit(rng, 6), np.array([0, 2, 6]))
    two = DocVectors(unit(rng, 1), np.array([0, 1]))
    s1 = NormStats(np.array([0.1, 0.2]), np.array([0.3, 0.25]))
    s2 = NormStats(np.array([0.0]), np.array([1.0]))
    ids = ["d05", "d17", "d00", "d33"]
    res = store.sdr_scores([(one, s1), (two, s2)], ids, explain=True)
    assert res.ids == ids and res.scores.shape == (2, 4)
    for c, doc_id in enumerate(ids):
        assert res.scores[0, c] == pytest.approx(_reference(one, s1, vectors[doc_id]), abs=TOL)
        assert res.scores[1, c] == pytest.approx(_reference(two, s2, vectors[doc_id]), abs=TOL)
        assert res.explanations[c]["score"] == pytest.approx(res.scores[0, c], abs=TOL)
        assert len(res.explanations[c]["source_paragraphs"]) == 2
    assert store.sdr_scores([(one, s1)], ids).explanations == []
    with pytest.raises(DocumentNotFoundError):
        store.sdr_scores([(one, s1)], ["d05", "missing"])


@pytest.mark.parametrize("top", [1, 3, 40])
def test_explain_top_explains_the_best_hits_in_the_same_request(filled, top):
    """``explain_top``: the scores of every document, as without it, and the breakdown of the best ``top``
    only (the hits the engine presents), each equal to the one ``explain`` gives; the second source unexplained."""
    store, vectors = filled
    rng = np.random.default_rng(9)
    one = DocVectors(unit(rng, 5), np.array([0, 3, 5]))
    s1 = NormStats(np.array([0.1, 0.2]), np.array([0.3, 0.25]))
    two = DocVectors(unit(rng, 2), np.array([0, 2]))
    ids = sorted(vectors)[:12]
    sources = [(one, s1), (two, NormStats(np.zeros(1), np.ones(1)))]
    plain = store.sdr_scores(sources, ids)
    res = store.sdr_scores(sources, ids, explain_top=top)
    np.testing.assert_array_equal(res.scores, plain.scores)
    best = [ids[c] for c in np.argsort(-res.scores[0], kind="stable")[:top]]
    full = dict(zip(ids, store.sdr_scores([(one, s1)], ids, explain=True).explanations))
    explained = {i for i, why in zip(res.ids, res.explanations) if why is not None}
    assert explained == set(best)
    for doc_id in best:
        assert res.explanations[ids.index(doc_id)] == full[doc_id]
    with pytest.raises(InvalidInputError):
        store.sdr_scores([(one, s1)], ids, explain_top=-1)


@pytest.mark.parametrize("derived", ["on", "off"])
def test_the_explained_hits_come_with_their_documents(plugin_url, derived):
    """``documents``: the hits the exact search explains (the ones the engine presents) come with their
    documents, read in its fetch phase (``explain_source``) and equal to what ``documents_of`` reads: on a
    derived-source index too (the vector field excluded by name: no vector rebuilt into them). Only the
    explained ones; none without ``documents``; every hit with ``explain``. An id over the ``_id`` limit."""
    import uuid

    rng = np.random.default_rng(52)
    long_id = "long-" + "é" * 300
    items = [item(f"e{k}", rng, [2, 3], k) for k in range(6)] + [item(long_id, rng, [1, 2], 9)]
    store = OpenSearchStore(plugin_url, index=f"sdr-test-presented-{uuid.uuid4().hex[:10]}",
                            settings=OpenSearchSettings(derived_source=derived))
    try:
        store.ensure_meta(META)
        store.put(items)
        ids = [d.id for d, _ in items]
        source = (DocVectors(unit(rng, 4), np.array([0, 2, 4])), NormStats(np.array([0.1, 0.2]), np.array([0.3, 0.25])))
        want = store.documents_of(ids)
        assert len(want) == len(ids)
        res = store.sdr_scores([source], ids, explain_top=3, documents=True)
        explained = {i for i, why in zip(res.ids, res.explanations) if why is not None}
        assert len(explained) == 3 and set(res.documents) == explained
        for doc_id, doc in res.documents.items():
            assert doc == want[doc_id]
        assert store.sdr_scores([source], ids, explain_top=3).documents == {}
        everything = store.sdr_scores([source], ids, explain=True, documents=True)
        assert everything.documents == want
        np.testing.assert_array_equal(everything.scores, res.scores)
    finally:
        store.drop()
        store.close()


def test_candidate_features_from_the_node(filled):
    """The paragraph counts and mean vectors hybrid ranking reads, computed on the node (no vector fetched)."""
    from sdr_search.indexer.store import CandidateFeatures

    store, vectors = filled
    ids = ["d13", "d02", "d13", "d27"]
    got = store.candidate_features(ids)
    want = CandidateFeatures.of([vectors[i] for i in ids])
    np.testing.assert_array_equal(got.n_paragraphs, want.n_paragraphs)
    np.testing.assert_allclose(got.mean_vectors, want.mean_vectors, atol=1e-6)
    with pytest.raises(DocumentNotFoundError):
        store.candidate_features(["d01", "nope"])


def test_centroid_rows_from_the_node_equal_the_pre_rank(filled):
    """The centroid pre-rank's rows computed on the node (``sdr_vectors`` with the source's paragraph
    centroids: a few floats per document back) equal :func:`prerank.centroid_rows` of the documents'
    vectors; bad input is refused by name."""
    from sdr_search.core.errors import InvalidInputError, ModelMismatchError
    from sdr_search.core.scoring import paragraph_centroids
    from sdr_search.reranker.prerank import centroid_rows

    store, vectors = filled
    rng = np.random.default_rng(12)
    source = DocVectors(unit(rng, 7), np.array([0, 1, 4, 7]))
    ids = ["d21", "d03", "d38", "d10", "d00"]
    got = store.centroid_rows(paragraph_centroids(source), ids)
    want = centroid_rows(source, [paragraph_centroids(vectors[i]) for i in ids])
    assert got.shape == want.shape == (3, 5)
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert store.centroid_rows(paragraph_centroids(source), []).shape == (3, 0)
    with pytest.raises(DocumentNotFoundError):
        store.centroid_rows(paragraph_centroids(source), ["d01", "nope"])
    with pytest.raises(ModelMismatchError, match="dimension 5"):
        store.centroid_rows(np.ones((2, 5), dtype=np.float32), ids)
    with pytest.raises(InvalidInputError, match="finite"):
        store.centroid_rows(np.full((1, DIM), np.nan, dtype=np.float32), ids)


def test_the_node_reads_the_centroids_stored_at_index_time(plugin_url, monkeypatch):
    """Issue 44 (round trips): a new index keeps each document's paragraph centroids (``par_centroids``: binary doc
    values, out of 2.x's ``_source``) and the node's centroid rows read them instead of the sentences. Proved by a
    document whose stored centroids were written apart from its sentences (the rows follow the stored ones); a
    document written without them, and an index whose mapping predates the field (the store then writes none), give
    the rows of the sentences."""
    import uuid

    from sdr_search.core.scoring import paragraph_centroids
    from sdr_search.indexer.opensearch.requests import CENTROIDS_FIELD, build_bulk_actions, decode_vectors_b64, layout
    from sdr_search.reranker.prerank import centroid_rows

    rng = np.random.default_rng(444)
    items = [item(f"s{k}", rng, [3, 1, 4], 0) for k in range(4)]
    vectors = {d.id: v for d, v in items}
    source = DocVectors(unit(rng, 5), np.array([0, 2, 5]))
    centroids = paragraph_centroids(source)
    want = centroid_rows(source, [paragraph_centroids(vectors[i]) for i in sorted(vectors)])

    store = OpenSearchStore(plugin_url, index=f"sdr-test-stored-centroids-{uuid.uuid4().hex[:10]}")
    try:
        store.ensure_meta(META)
        store.put(items)
        client = store._os()
        mapping = client.indices.get_mapping(index=store.index_name)[store.index_name]["mappings"]
        assert mapping["properties"][CENTROIDS_FIELD] == {"type": "binary", "doc_values": True}
        raw = client.get(index=store.index_name, id="s1")["_source"]
        if not mapping["_meta"]["sdr"]["derived_source"]:
            assert CENTROIDS_FIELD not in raw  # doc values only
        (action,) = build_bulk_actions([items[1]], index=store.index_name, encoder_tag=META.encoder_tag,
                                       model_id=META.model_id, centroids=True)
        np.testing.assert_array_equal(decode_vectors_b64(action["_source"][CENTROIDS_FIELD], DIM),
                                      paragraph_centroids(vectors["s1"]))
        np.testing.assert_allclose(store.centroid_rows(centroids, sorted(vectors)), want, atol=1e-5)

        # s2's stored centroids made different from its sentences: two unit rows of our choosing
        crafted = np.zeros((2, DIM), dtype=np.float32)
        crafted[0, 0] = crafted[1, 1] = 1.0
        (action,) = build_bulk_actions([items[2]], index=store.index_name, encoder_tag=META.encoder_tag,
                                       model_id=META.model_id, centroids=True)
        action["_source"][CENTROIDS_FIELD] = layout.encode_vectors_b64(crafted)
        client.index(index=store.index_name, id=action["_id"], body=action["_source"], refresh=True)
        got = store.centroid_rows(centroids, ["s2"])[:, 0]
        np.testing.assert_allclose(got, (centroids @ crafted.T).max(axis=1), atol=1e-6)
        assert not np.allclose(got, want[:, 2], atol=1e-3)
        # s3 written without them: its sentences
        (action,) = build_bulk_actions([items[3]], index=store.index_name, encoder_tag=META.encoder_tag,
                                       model_id=META.model_id, centroids=False)
        client.index(index=store.index_name, id=action["_id"], body=action["_source"], refresh=True)
        np.testing.assert_allclose(store.centroid_rows(centroids, ["s3", "s0"]), want[:, [3, 0]], atol=1e-5)
    finally:
        store.drop()
        store.close()

    real = layout.load_mapping

    def before_the_field(name):
        body = real(name)
        if name == "index.json":
            body["mappings"]["properties"].pop(CENTROIDS_FIELD)
            body["mappings"]["_source"]["excludes"].remove(CENTROIDS_FIELD)
        return body

    monkeypatch.setattr(layout, "load_mapping", before_the_field)
    old = OpenSearchStore(plugin_url, index=f"sdr-test-no-stored-centroids-{uuid.uuid4().hex[:10]}")
    try:
        old.ensure_meta(META)
        monkeypatch.setattr(layout, "load_mapping", real)
        old.put(items)  # a strict mapping without the field: the store writes none
        mapping = old._os().indices.get_mapping(index=old.index_name)[old.index_name]["mappings"]
        assert CENTROIDS_FIELD not in mapping["properties"]
        np.testing.assert_allclose(old.centroid_rows(centroids, sorted(vectors)), want, atol=1e-5)
    finally:
        old.drop()
        old.close()


def test_the_candidate_pool_brings_its_centroid_rows_in_the_same_search(filled, plugin_url):
    """Issue 44: ``sdr_candidate_pool`` with the source's paragraph centroids answers the candidate stage and
    the pool's centroid rows in one request (the ``sdr_vectors`` fetch on the candidate search's hits): the
    pool equals ``sdr_candidates``, the rows equal ``centroid_rows`` of it; with the node's
    ``sdr.limits.max_fetch_values`` below the pool's rows, they are read apart, and equal."""
    from sdr_search.core.scoring import paragraph_centroids

    store, vectors = filled
    rng = np.random.default_rng(44)
    source = DocVectors(unit(rng, 6), np.array([0, 2, 6]))
    centroids = paragraph_centroids(source)
    ids, scores = store.sdr_candidates(source, 5, 20, exclude_ids=["d03"])
    requests: list[str] = []
    client = store._os()
    real_search, real_msearch = client.search, client.msearch
    client.search = lambda *a, **kw: (requests.append("search"), real_search(*a, **kw))[1]
    client.msearch = lambda *a, **kw: (requests.append("msearch"), real_msearch(*a, **kw))[1]
    try:
        pool = store.sdr_candidate_pool(source, 5, 20, centroids=centroids, exclude_ids=["d03"])
    finally:
        client.search, client.msearch = real_search, real_msearch
    assert requests == ["search"]
    assert pool.ids == ids and len(ids) > 15
    np.testing.assert_array_equal(pool.scores, scores)
    np.testing.assert_allclose(pool.centroid_rows, store.centroid_rows(centroids, ids), atol=1e-6)
    assert store.sdr_candidate_pool(source, 5, 20).centroid_rows is None
    settings = OpenSearch([plugin_url], timeout=60)
    try:  # over 15 hits x 2 rows: more values than a limit of 30: the rows are read apart (pages of 15 documents)
        settings.cluster.put_settings(body={"transient": {"sdr.limits.max_fetch_values": 30}})
        limited = OpenSearchStore(plugin_url, index=store.index)
        try:
            apart = limited.sdr_candidate_pool(source, 5, 20, centroids=centroids, exclude_ids=["d03"])
        finally:
            limited.close()
    finally:
        settings.cluster.put_settings(body={"transient": {"sdr.limits.max_fetch_values": None}})
        settings.close()
    assert apart.ids == ids
    np.testing.assert_allclose(apart.centroid_rows, pool.centroid_rows, atol=1e-6)


def test_the_store_keeps_within_the_nodes_limits_and_answers_the_same(filled, plugin_url):
    """Issue 41: the store learns the node's ``sdr.limits.*`` (cluster settings, once per store) and never sends a
    request over them: set tight on the node (the plugin refuses any request over them with a 400, so an answer
    proves the store stayed within), every plugin call answers as with the defaults, in more requests: exact
    scores with explanations paged, ``explain_top`` narrowed to what one search may explain (the engine asks for
    the rest), vector, mean and centroid-row fetches packed by their float values; a source or a candidate stage
    over a limit that cannot be paged is refused by name before anything is sent."""
    from sdr_search.core.scoring import paragraph_centroids

    store, vectors = filled
    rng = np.random.default_rng(21)
    one = DocVectors(unit(rng, 5), np.array([0, 3, 5]))
    s1 = NormStats(np.array([0.1, 0.2]), np.array([0.3, 0.25]))
    ids = sorted(vectors)[:30]
    want = store.sdr_scores([(one, s1)], ids, explain=True)
    want_top = store.sdr_scores([(one, s1)], ids, explain_top=12)
    want_fetch = store.fetch(ids)
    want_all = store.all_vectors()
    want_rows = store.centroid_rows(paragraph_centroids(one), ids)
    want_features = store.candidate_features(ids)
    client = OpenSearch([plugin_url], timeout=60)
    tight = {"sdr.limits.max_explain_pairs": 10, "sdr.limits.max_fetch_values": 400, "sdr.limits.max_candidate_hits": 400}
    try:
        client.cluster.put_settings(body={"transient": tight})
        limited = OpenSearchStore(plugin_url, index=store.index)
        sent: list[int] = []
        real = limited._os().msearch

        def counting(*args, **kw):
            sent.append(len(kw.get("body") or args[0]) // 2)
            return real(*args, **kw)

        limited._os().msearch = counting
        try:
            got = limited.sdr_scores([(one, s1)], ids, explain=True)
            assert len(sent) == 15  # two hits of 5 source sentences per search
            np.testing.assert_array_equal(got.scores, want.scores)
            assert got.explanations == want.explanations
            top = limited.sdr_scores([(one, s1)], ids, explain_top=12)
            np.testing.assert_array_equal(top.scores, want_top.scores)
            best = [ids[c] for c in np.argsort(-top.scores[0], kind="stable")[:2]]  # narrowed to 2
            assert {i for i, why in zip(top.ids, top.explanations) if why is not None} == set(best)
            assert all(top.explanations[ids.index(i)] == want.explanations[ids.index(i)] for i in best)
            sent.clear()
            fetched = limited.fetch(ids)
            assert len(sent) > 1  # documents of up to 24 x 16 values: one or two per search
            for k in range(len(ids)):
                np.testing.assert_array_equal(fetched.doc(k).vectors, want_fetch.doc(k).vectors)
            every = limited.all_vectors()
            assert every.ids == want_all.ids
            np.testing.assert_array_equal(every.vectors, want_all.vectors)
            np.testing.assert_array_equal(limited.centroid_rows(paragraph_centroids(one), ids), want_rows)
            features = limited.candidate_features(ids)
            np.testing.assert_array_equal(features.mean_vectors, want_features.mean_vectors)
            with pytest.raises(InvalidInputError, match=r"5 x 100 = 500 hits, more than the 400 .*max_candidate_hits"):
                limited.sdr_candidates(one, 10, 10)
        finally:
            limited.close()
        client.cluster.put_settings(body={"transient": {"sdr.limits.max_source_sentences": 4}})
        small = OpenSearchStore(plugin_url, index=store.index)
        try:
            with pytest.raises(InvalidInputError, match=r"5 sentences, more than the 4 .*sdr.limits.max_source_sentences"):
                small.sdr_scores([(one, s1)], ids)
        finally:
            small.close()
    finally:
        client.cluster.put_settings(body={"transient": {k: None for k in [*tight, "sdr.limits.max_source_sentences"]}})
        client.close()
