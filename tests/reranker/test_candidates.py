import numpy as np
import pytest

from factories import doc_vectors
from sdr_search.reranker.candidates import aggregate_hits, top_candidates
from sdr_search.indexer.store import SentenceHits
from sdr_search.core.reference import reference_sdr_score
from sdr_search.core.scoring import NormStats
from sdr_search.core.vectors import CorpusVectors, DocVectors

pytestmark = pytest.mark.unit


def exact_nested_knn(source: DocVectors, corpus: CorpusVectors, k: int) -> SentenceHits:
    """Brute-force nested k-NN: per source sentence, top-k documents by best sentence."""
    sims = source.vectors @ corpus.vectors.T
    sent_doc_off = corpus.par_offsets[corpus.doc_par_offsets]
    best = np.maximum.reduceat(sims, sent_doc_off[:-1], axis=1)  # (S, D)
    ids, scores = [], []
    for row in best:
        order = sorted(range(len(row)), key=lambda j: (-row[j], corpus.ids[j]))[:k]
        ids.append([corpus.ids[j] for j in order])
        scores.append(row[order].astype(np.float32))
    return SentenceHits(ids, scores)


@pytest.fixture()
def setup():
    rng = np.random.default_rng(7)
    docs = [doc_vectors(rng, rng.integers(1, 6, size=rng.integers(1, 5))) for _ in range(40)]
    corpus = CorpusVectors.from_docs([f"d{i:02d}" for i in range(40)], docs)
    source = doc_vectors(rng, [3, 1, 4])
    stats = NormStats(np.array([0.1, 0.2, 0.15]), np.array([0.5, 1.0, 0.25]))
    return corpus, source, stats


def test_sdr_bound_is_an_upper_bound_of_exact_sdr(setup):
    corpus, source, stats = setup
    hits = exact_nested_knn(source, corpus, k=8)
    ids, bound = aggregate_hits(hits, source.par_offsets, method="sdr-bound", stats=stats)
    src_paras = [source.paragraph(i) for i in range(source.n_paragraphs)]
    for doc_id, b in zip(ids, bound):
        c = corpus.doc(corpus.ids.index(doc_id))
        exact_raw = reference_sdr_score(src_paras, [c.paragraph(j) for j in range(c.n_paragraphs)], None)
        # normalised exact score from the raw per-paragraph maxima
        from sdr_search.core.scoring import document_max, paragraph_scores, sdr_scores

        cv = CorpusVectors.from_docs([doc_id], [c])
        exact = sdr_scores(document_max(paragraph_scores(source, cv), cv.doc_par_offsets), stats)[0]
        assert b >= exact - 1e-5
        assert np.isfinite(exact_raw)


def test_bound_without_stats_and_all_documents_found_equals_doc_level_relaxation(setup):
    corpus, source, _ = setup
    hits = exact_nested_knn(source, corpus, k=corpus.n_docs)  # every doc in every row: no imputation
    ids, bound = aggregate_hits(hits, source.par_offsets, method="sdr-bound")
    k = ids.index("d05")
    c = corpus.doc(5)
    best = (source.vectors @ c.vectors.T).max(axis=1)  # per source sentence, doc-level max
    expected = np.mean([best[source.par_offsets[i] : source.par_offsets[i + 1]].mean() for i in range(3)])
    assert bound[k] == pytest.approx(expected, abs=1e-6)


def test_votes_and_sum():
    hits = SentenceHits([["a", "b"], ["b"], []], [np.array([0.9, 0.5]), np.array([0.7]), np.array([])])
    ids, votes = aggregate_hits(hits, np.array([0, 2, 3]), method="votes")
    assert dict(zip(ids, votes)) == {"a": 1, "b": 2}
    ids, sums = aggregate_hits(hits, np.array([0, 2, 3]), method="sum")
    assert dict(zip(ids, sums.round(6))) == {"a": 0.9, "b": pytest.approx(1.2)}
    ids, bound = aggregate_hits(hits, np.array([0, 2, 3]), method="sdr-bound")
    # row0: a=.9 b=.5; row1: b=.7, a imputed .7; row2 empty -> 0. paragraphs [0,1] and [2]
    d = dict(zip(ids, bound))
    assert d["a"] == pytest.approx(((0.9 + 0.7) / 2 + 0.0) / 2)
    assert d["b"] == pytest.approx(((0.5 + 0.7) / 2 + 0.0) / 2)


def test_weighted_sum_weighs_sentences_like_sdr_normalisation():
    hits = SentenceHits([["a", "b"], ["b"], ["a"]], [np.array([0.9, 0.5]), np.array([0.7]), np.array([0.6])])
    par = np.array([0, 2, 3])  # paragraph 0: sentences 0-1, paragraph 1: sentence 2
    stats = NormStats(np.array([0.3, 0.3]), np.array([0.5, 0.1]))
    ids, w = aggregate_hits(hits, par, method="weighted-sum", stats=stats)
    d = dict(zip(ids, w))
    # weight 1 / (n_i * sigma_i): paragraph 0 -> 1 / (2 * 0.5) = 1, paragraph 1 -> 1 / 0.1 = 10
    assert d["a"] == pytest.approx(0.9 * 1 + 0.6 * 10)
    assert d["b"] == pytest.approx((0.5 + 0.7) * 1)
    # without statistics: 1 / n_i
    ids, w = aggregate_hits(hits, par, method="weighted-sum")
    d = dict(zip(ids, w))
    assert d["a"] == pytest.approx(0.9 / 2 + 0.6) and d["b"] == pytest.approx(1.2 / 2)
    # with equal sigma and equal paragraph sizes it ranks like "sum"
    even = np.array([0, 1, 2, 3])
    _, plain = aggregate_hits(hits, even, method="sum")
    _, weighted = aggregate_hits(hits, even, method="weighted-sum", stats=NormStats(np.zeros(3), np.full(3, 0.2)))
    assert np.allclose(weighted, plain / 0.2)


def test_weighted_sum_equals_relaxed_sdr_when_every_document_is_hit():
    rng = np.random.default_rng(3)
    # with every document in every hit list, weighted-sum is mean_i mean_s best / sigma_i, i.e. the
    # relaxed SDR score up to the constant mean_i mu_i / sigma_i: the same order
    corpus = CorpusVectors.from_docs([f"d{k}" for k in range(6)], [doc_vectors(rng, [2, 3]) for _ in range(6)])
    source = doc_vectors(rng, [2, 1, 3])
    stats = NormStats(rng.uniform(0.1, 0.3, 3), rng.uniform(0.05, 0.2, 3))
    best = np.stack([(source.vectors @ corpus.doc(k).vectors.T).max(axis=1) for k in range(6)], axis=1)  # (s, D)
    order = np.argsort(-best, axis=1, kind="stable")
    hits = SentenceHits([[f"d{k}" for k in row] for row in order], [best[s, row] for s, row in enumerate(order)])
    ids, w = aggregate_hits(hits, source.par_offsets, method="weighted-sum", stats=stats)
    A = np.add.reduceat(best, source.par_offsets[:-1], axis=0) / np.diff(source.par_offsets)[:, None]
    relaxed = ((A - stats.mu[:, None]) / stats.sigma[:, None]).mean(axis=0)
    got = dict(zip(ids, w))
    assert [f"d{k}" for k in np.argsort(-relaxed)] == sorted(got, key=lambda d: -got[d])


def test_errors_and_empty():
    with pytest.raises(ValueError, match="unknown aggregation"):
        aggregate_hits(SentenceHits([[]], [np.array([])]), np.array([0, 1]), method="max")
    with pytest.raises(ValueError, match="hit rows"):
        aggregate_hits(SentenceHits([[]], [np.array([])]), np.array([0, 2]))
    ids, s = aggregate_hits(SentenceHits([[]], [np.array([])]), np.array([0, 1]))
    assert ids == [] and s.size == 0


def test_top_candidates_ties_by_id():
    assert top_candidates(["c", "a", "b"], np.array([1.0, 1.0, 2.0]), 2) == ["b", "a"]
