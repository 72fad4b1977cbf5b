import numpy as np
import pytest

from indexer.candidates import aggregate_hits, top_candidates
from indexer.store import SentenceHits
from sdr_core.reference import reference_sdr_score
from sdr_core.scoring import NormStats
from sdr_core.vectors import CorpusVectors, DocVectors

pytestmark = pytest.mark.unit


def _unit(rng, n, d=16):
    v = rng.standard_normal((n, d)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def _doc(rng, sizes, d=16):
    return DocVectors.from_paragraphs([_unit(rng, s, d) for s in sizes])


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
    docs = [_doc(rng, rng.integers(1, 6, size=rng.integers(1, 5))) for _ in range(40)]
    corpus = CorpusVectors.from_docs([f"d{i:02d}" for i in range(40)], docs)
    source = _doc(rng, [3, 1, 4])
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
        from sdr_core.scoring import document_max, paragraph_scores, sdr_scores

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


def test_errors_and_empty():
    with pytest.raises(ValueError, match="unknown aggregation"):
        aggregate_hits(SentenceHits([[]], [np.array([])]), np.array([0, 1]), method="max")
    with pytest.raises(ValueError, match="hit rows"):
        aggregate_hits(SentenceHits([[]], [np.array([])]), np.array([0, 2]))
    ids, s = aggregate_hits(SentenceHits([[]], [np.array([])]), np.array([0, 1]))
    assert ids == [] and s.size == 0


def test_top_candidates_ties_by_id():
    assert top_candidates(["c", "a", "b"], np.array([1.0, 1.0, 2.0]), 2) == ["b", "a"]
