"""A metadata filter inside the candidate stage (embedded store): exact nested k-NN over the
matching documents, the HNSW search with the other rows masked out, and the engine's filtered
ranking against exhaustive SDR over the filtered set."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from factories import make_docs, unit
from sdr_search.indexer.embedded import EmbeddedStore
from sdr_search.indexer.embedded.ann import exact_doc_hits
from sdr_search.indexer.settings import EmbeddedStoreSettings
from sdr_search.indexer.stats_job import refresh_stats
from sdr_search.indexer.store import IndexMeta
from sdr_search.reranker.engine import MLTSettings, MoreLikeThis, Query

pytestmark = pytest.mark.unit

N_DOCS = 400


def _group(i: int) -> dict:
    return {"one_pct": i % 100 == 7, "ten_pct": i % 10 == 3, "year": 2000 + i % 4}


@pytest.fixture(scope="module")
def store_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("filtered") / "s"
    items = [(dataclasses.replace(d, metadata=_group(i)), v)
             for i, (d, v) in enumerate(make_docs(N_DOCS, seed=11, n_pars=3, n_sents=4))]
    with EmbeddedStore(path, create=True) as store:
        store.ensure_meta(IndexMeta("m", "tag", items[0][1].vectors.shape[1], {}))
        store.put(items)
        refresh_stats(store, exact=True, sample_size=200, seed=0)
    return path


def _brute_force(store, q, k, allowed):
    """Top-k documents per query row by best sentence over ``allowed`` (ties with the k-th kept)."""
    out = []
    vecs = {i: store.get(i).vectors.vectors for i in allowed}
    for row in q:
        best = {i: float((v @ row).max()) for i, v in vecs.items()}
        ranked = sorted(best, key=lambda i: (-best[i], i))
        kth = best[ranked[min(k, len(ranked)) - 1]]
        out.append([i for i in ranked if best[i] >= kth - 1e-6])
    return out


def test_exact_doc_hits_equal_brute_force():
    rng = np.random.default_rng(0)
    matrix = unit(rng, 60)
    docs = [(s, start, n) for s, (start, n) in enumerate([(0, 5), (5, 3), (8, 10), (18, 2), (20, 40)])]
    q = unit(rng, 7)
    for k in (1, 2, 5, 9):
        got = exact_doc_hits(q, matrix, docs, k, block_rows=3)
        for row, (seqs, scores) in zip(q, got):
            best = np.array([(matrix[a : a + n] @ row).max() for _, a, n in docs])
            assert len(seqs) == min(k, len(docs))  # no ties among random vectors
            assert list(seqs) == list(np.argsort(-best, kind="stable")[: len(seqs)])
            np.testing.assert_allclose(scores, best[seqs], rtol=1e-5)


@pytest.mark.parametrize("field", ["one_pct", "ten_pct"])
def test_filtered_sentence_knn_is_exact_over_few_matching_rows(store_path, field):
    with EmbeddedStore(store_path) as store:
        assert store.capabilities.filtered_knn
        allowed = store.ids_matching({field: True})
        assert len(allowed) == N_DOCS // (100 if field == "one_pct" else 10)
        q = store.get(allowed[0]).vectors.vectors
        hits = store.sentence_knn(q, 5, allowed_ids=allowed, exclude_ids=[allowed[0]])
        truth = _brute_force(store, q, 5, [i for i in allowed if i != allowed[0]])
        for got, want in zip(hits.doc_ids, truth):
            assert got == want


def test_a_broad_filter_searches_the_graph_with_the_other_rows_masked(store_path):
    with EmbeddedStore(store_path, settings=EmbeddedStoreSettings(filter_exact_rows=0)) as store:
        allowed = store.ids_matching({"year": [2000, 2001]})  # half the documents
        q = store.get(allowed[0]).vectors.vectors
        hits = store.sentence_knn(q, 5, allowed_ids=allowed, exclude_ids=[allowed[0]])
        truth = _brute_force(store, q, 5, [i for i in allowed if i != allowed[0]])
        assert all(set(got) <= set(allowed) - {allowed[0]} for got in hits.doc_ids)
        top_agree = [bool(got) and got[0] == want[0] for got, want in zip(hits.doc_ids, truth)]
        assert np.mean(top_agree) >= 0.9, top_agree


def test_ids_matching_follows_the_filter_rules(store_path):
    with EmbeddedStore(store_path) as store:
        assert len(store.ids_matching({"year": [2000, 2001]})) == N_DOCS // 2
        assert len(store.ids_matching({"year": 2001.0, "ten_pct": True})) == N_DOCS // 20  # i = 13 (mod 20); 1 equals 1.0
        assert store.ids_matching({"missing": 1}) == []
        assert store.ids_matching({"one_pct": 1}) == []  # a boolean only equals a boolean


@pytest.mark.parametrize("field,size", [("one_pct", 10), ("ten_pct", 10)])
def test_a_rare_filter_still_returns_size_hits_ranked_as_exhaustive_sdr(store_path, field, size):
    with EmbeddedStore(store_path) as store:
        # K covers the 10 % set (40 documents): random vectors give the candidate stage no signal, so
        # this checks that the filtered path finds and ranks exactly the matching documents
        engine = MoreLikeThis(store=store, settings=MLTSettings(method="sdr", candidates=40, knn_k=10))
        allowed = store.ids_matching({field: True})
        sources = [i for i in store.iter_ids() if i not in set(allowed)][:10]
        agree = []
        for src in sources:
            res = engine.run(Query(id=src, size=size, filter={field: True}))
            exhaustive = engine.run(Query(id=src, size=size, candidate_ids=allowed))
            assert len(res.hits) == min(size, len(allowed))
            assert all(h.id in set(allowed) for h in res.hits)
            agree.append(len({h.id for h in res.hits} & {h.id for h in exhaustive.hits}) / len(exhaustive.hits))
        assert np.mean(agree) >= 0.99, agree
        hybrid = MoreLikeThis(store=store, settings=MLTSettings(candidates=20, knn_k=10))
        res = hybrid.run(Query(id=sources[0], size=size, filter={field: True}))
        assert len(res.hits) == min(size, len(allowed)) and all(h.id in set(allowed) for h in res.hits)
        assert engine.run(Query(id=sources[0], filter={"year": 1999})).hits == []
