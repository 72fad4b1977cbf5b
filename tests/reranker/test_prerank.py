"""Centroid pre-rank (sdr_search.reranker.prerank) against plain loops, and its use in the engine."""

import numpy as np
import pytest

from factories import doc_vectors, unit
from sdr_search.core.scoring import paragraph_centroids
from sdr_search.reranker.prerank import centroid_scores, prerank_order
from sdr_search.core.fusion import zscore
from sdr_search.core.scoring import rank
from sdr_search.core.vectors import DocVectors


def _plain_centroid_scores(source: DocVectors, docs: list[DocVectors]) -> np.ndarray:
    """The module docstring's definition, one loop per level."""
    def centroid(rows):
        m = np.mean(rows, axis=0, dtype=np.float64)
        return m / np.linalg.norm(m)

    M = np.zeros((source.n_paragraphs, len(docs)))
    for i in range(source.n_paragraphs):
        ci = centroid(source.paragraph(i))
        for c, doc in enumerate(docs):
            M[i, c] = max(float(ci @ centroid(doc.paragraph(j))) for j in range(doc.n_paragraphs))
    out = np.zeros(len(docs))
    for i in range(source.n_paragraphs):
        sd = M[i].std()
        out += (M[i] - M[i].mean()) / (sd if sd >= 1e-6 else 1.0)
    return out / source.n_paragraphs


@pytest.mark.unit
def test_paragraph_centroids_are_normalised_paragraph_means():
    rng = np.random.default_rng(0)
    doc = doc_vectors(rng, [3, 1, 5])
    C = paragraph_centroids(doc)
    assert C.shape == (3, 16) and C.dtype == np.float32
    for j in range(3):
        m = doc.paragraph(j).mean(axis=0)
        np.testing.assert_allclose(C[j], m / np.linalg.norm(m), atol=1e-6)


@pytest.mark.unit
def test_centroid_scores_equal_the_plain_definition():
    rng = np.random.default_rng(1)
    source = doc_vectors(rng, [2, 4, 1])
    docs = [doc_vectors(rng, sizes) for sizes in ([1], [3, 2], [5, 1, 1, 2], [2, 2])]
    cents = [paragraph_centroids(d) for d in docs]
    for block_rows in (1, 3, 5, 4096):  # a block per document, several, one
        np.testing.assert_allclose(centroid_scores(source, cents, block_rows=block_rows),
                                   _plain_centroid_scores(source, docs), atol=1e-5)
    assert centroid_scores(source, []).shape == (0,)
    with pytest.raises(ValueError, match="dimension"):
        centroid_scores(source, [paragraph_centroids(doc_vectors(rng, [2], dim=8))])


@pytest.mark.unit
def test_centroids_prefer_one_coherent_paragraph_over_matches_scattered_across_paragraphs():
    """The case the pre-rank exists for: a document max finds every source sentence exactly in
    the long document (one per paragraph); SDR and the centroids prefer the short document whose
    one paragraph matches the whole source paragraph."""
    rng = np.random.default_rng(2)
    a, b, c = np.eye(16, dtype=np.float32)[:3]
    source = DocVectors.from_paragraphs([np.stack([a, b, c])])
    near = [v * 0.9 + 0.1 * unit(rng, 1)[0] for v in (a, b, c)]
    short = DocVectors.from_paragraphs([np.stack([x / np.linalg.norm(x) for x in near])])
    long = DocVectors.from_paragraphs([np.stack([v, *unit(rng, 2)]) for v in (a, b, c)])
    noise = [doc_vectors(rng, [3, 3]) for _ in range(3)]
    scores = centroid_scores(source, [paragraph_centroids(d) for d in (long, short, *noise)])
    assert scores[1] > scores[0] > max(scores[2:])


@pytest.mark.unit
def test_zscore():
    np.testing.assert_allclose(zscore(np.array([1.0, 2.0, 3.0])), [-1.2247449, 0.0, 1.2247449], atol=1e-6)
    assert np.all(zscore(np.full(4, 0.3)) == 0.0)
    assert zscore(np.zeros(0)).shape == (0,)


@pytest.mark.unit
def test_prerank_order_fuses_both_z_scores_and_weight_ends_reduce_to_one_signal():
    rng = np.random.default_rng(3)
    source = doc_vectors(rng, [3, 2])
    docs = [paragraph_centroids(doc_vectors(rng, [2, 3, 1])) for _ in range(7)]
    ids = [f"d{k}" for k in range(7)]
    agg = rng.random(7)
    cent = centroid_scores(source, docs)
    assert prerank_order(ids, agg, source, docs) == rank(ids, 0.5 * zscore(agg) + 0.5 * zscore(cent))
    assert prerank_order(ids, agg, source, docs, weight=1.0) == rank(ids, agg)
    assert prerank_order(ids, agg, source, docs, weight=0.0) == rank(ids, cent)
    with pytest.raises(ValueError):
        prerank_order(ids[:3], agg, source, docs)
    with pytest.raises(ValueError):
        prerank_order(ids, agg, source, docs, weight=1.5)


@pytest.mark.integration
def test_engine_reranks_the_prerank_pick_from_a_pool_of_factor_times_k(tmp_path, encoder):
    from sdr_search.indexer.embedded import EmbeddedStore
    from sdr_search.indexer.pipeline import index_documents
    from sdr_search.indexer.stats_job import refresh_stats
    from sdr_search.reranker.engine import MLTSettings, MoreLikeThis, Query
    from sdr_search.core.documents import parse_record

    topics = ["The court dismissed the appeal.", "The land was acquired by the State.", "The tax was assessed.",
              "The accused was convicted.", "The employee was reinstated.", "The contract was breached."]
    docs = [parse_record({"id": f"doc{k}", "paragraphs": [topics[k % 6] + " " + topics[(k * 5 + 1) % 6],
                                                           topics[(k + 2) % 6], topics[(k * 7 + 3) % 6]]})
            for k in range(12)]
    with EmbeddedStore(tmp_path / "s", create=True) as store:
        index_documents(store, docs, encoder)
        refresh_stats(store, exact=True, sample_size=20, seed=0)
        on = MoreLikeThis(store=store, settings=MLTSettings(candidates=3, knn_k=12, prerank_factor=2, method="sdr"))
        off = MoreLikeThis(store=store, settings=MLTSettings(candidates=3, knn_k=12, prerank_factor=1, method="sdr"))
        # the first source whose pre-rank changes the pick, so this test sees it work (which one
        # depends on the encoder's exact vectors, so it is found rather than assumed)
        for source_id in (d.id for d in docs):
            src = on.source_from_id(source_id)
            pool, scores = on.stage.aggregated(src, 6, [source_id])
            computed = [paragraph_centroids(d) for d in store.fetch_documents(pool)]
            ids = [pool[i] for i in prerank_order(pool, scores, src.vectors, computed)[:3]]
            if ids != pool[:3]:
                break
        else:
            pytest.fail("no source of the corpus has a pre-rank that changes its pick: the corpus no longer tests it")
        off_res = off.run(Query(id=source_id, size=3))
        assert off_res.candidates == 3 and {h.id for h in off_res.hits} == set(pool[:3])
        for kept, fresh in zip(store.paragraph_centroids(pool), computed):  # the store's cached centroids
            np.testing.assert_allclose(kept, fresh, atol=1e-6)
        res = on.run(Query(id=source_id, size=3))
        assert res.candidates == 3 and {h.id for h in res.hits} == set(ids)
        assert "prerank" in res.timings_ms
