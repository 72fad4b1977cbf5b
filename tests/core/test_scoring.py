"""Vectorised SDR scoring (sdr_search.core.scoring) against the brute-force oracle (sdr_search.core.reference)."""

from __future__ import annotations

import numpy as np
import pytest

from factories import DIM, make_corpus, make_paragraphs, unit
from sdr_search.core.reference import (
    reference_corpus_scores,
    reference_paragraph_score,
    reference_paragraph_stats,
    reference_sdr_score,
)
from sdr_search.core.scoring import (
    NormStats,
    clamp_sigma,
    column_blocks,
    document_max,
    paragraph_scores,
    rank,
    document_blocks,
    score_candidates,
    score_documents,
    sdr_scores,
    segment_max_rows,
    stats_from_paragraph_scores,
)
from sdr_search.core.vectors import DocVectors

pytestmark = pytest.mark.unit

TOL = 1e-4

# Awkward paragraph sizes: one-sentence paragraphs, one-paragraph documents, a 30-sentence
# paragraph (larger than blocks of 5 and 17), very unequal documents.
CORPUS_SIZES = [[1], [3, 1, 4], [30], [1, 1, 1, 1], [5, 17, 2], [12], [2, 2]]
SOURCE_SIZES = [2, 1, 6]


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)


@pytest.fixture
def awkward(rng: np.random.Generator) -> tuple[list[np.ndarray], list[list[np.ndarray]]]:
    source = make_paragraphs(rng, SOURCE_SIZES)
    docs = [make_paragraphs(rng, sizes) for sizes in CORPUS_SIZES]
    return source, docs


# ---------------------------------------------------------------- stage 1: paragraph scores


@pytest.mark.parametrize("block_sentences", [1, 5, 17, 29, 65536])
def test_paragraph_scores_match_reference(awkward, block_sentences: int) -> None:
    source, docs = awkward
    corpus = make_corpus(docs)
    P = paragraph_scores(DocVectors.from_paragraphs(source), corpus, block_sentences=block_sentences)
    flat = [p for d in docs for p in d]
    expected = np.array([[reference_paragraph_score(s, q) for q in flat] for s in source])
    assert P.shape == (len(SOURCE_SIZES), sum(len(s) for s in CORPUS_SIZES))
    assert P.dtype == np.float32
    np.testing.assert_allclose(P, expected, atol=TOL, rtol=0)


def test_paragraph_scores_very_unequal_lengths(rng) -> None:
    short, long = make_paragraphs(rng, [1]), make_paragraphs(rng, [300])
    for src, cand in [(short, long), (long, short)]:
        P = paragraph_scores(DocVectors.from_paragraphs(src), make_corpus([cand]), block_sentences=17)
        assert P.shape == (1, 1)
        assert abs(P[0, 0] - reference_paragraph_score(src[0], cand[0])) < TOL


@pytest.mark.parametrize("block_sentences", [1, 5, 17, 100])
def test_column_blocks_cover_paragraphs_within_budget(block_sentences: int) -> None:
    sizes = np.array([3, 1, 30, 1, 1, 5, 17, 2, 12])
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    blocks = column_blocks(offsets, block_sentences)
    assert blocks[0][0] == 0 and blocks[-1][1] == sizes.size
    assert all(b[1] == c[0] for b, c in zip(blocks, blocks[1:]))
    for p0, p1 in blocks:
        assert p1 > p0
        width = offsets[p1] - offsets[p0]
        assert width <= block_sentences or p1 - p0 == 1  # only a lone oversized paragraph may exceed
        if p1 < sizes.size:  # greedy: the next paragraph would not have fitted
            assert offsets[p1 + 1] - offsets[p0] > block_sentences


def test_column_blocks_rejects_bad_block() -> None:
    with pytest.raises(ValueError):
        column_blocks(np.array([0, 2, 3]), 0)


def test_dimension_mismatch_is_rejected(rng) -> None:
    src = DocVectors.from_paragraphs([unit(rng, 2, dim=8)])
    with pytest.raises(ValueError, match="dimension"):
        paragraph_scores(src, make_corpus([[unit(rng, 2)]]))


# ---------------------------------------------------------------- document max


def test_document_max_matches_loop(rng) -> None:
    P = rng.standard_normal((4, 9)).astype(np.float32)
    doc_offsets = np.array([0, 1, 4, 5, 9])
    expected = np.stack([P[:, a:b].max(axis=1) for a, b in zip(doc_offsets[:-1], doc_offsets[1:])], axis=1)
    np.testing.assert_array_equal(document_max(P, doc_offsets), expected)


@pytest.mark.parametrize("offsets", [[0, 2, 8], [0, 3, 3, 9], [1, 9]])
def test_document_max_rejects_bad_offsets(offsets) -> None:
    with pytest.raises(ValueError):
        document_max(np.zeros((2, 9), dtype=np.float32), np.array(offsets))


# ---------------------------------------------------------------- statistics from P


def test_stats_from_paragraph_scores_exclude_and_population_std(rng) -> None:
    P = rng.standard_normal((3, 8)).astype(np.float32)
    exclude = np.array([False, True, True, False, False, False, True, False])
    stats = stats_from_paragraph_scores(P, exclude=exclude)
    kept = P[:, ~exclude].astype(np.float64)
    np.testing.assert_allclose(stats.mu, kept.mean(axis=1), rtol=1e-12)
    np.testing.assert_allclose(stats.sigma, kept.std(axis=1, ddof=0), rtol=1e-12)
    assert not np.allclose(stats.mu, P.astype(np.float64).mean(axis=1))  # exclusion did something


def test_stats_all_excluded_raises() -> None:
    with pytest.raises(ValueError):
        stats_from_paragraph_scores(np.ones((2, 3), dtype=np.float32), exclude=np.ones(3, dtype=bool))


def test_sigma_clamping() -> None:
    P = np.array([[0.5, 0.5, 0.5], [0.1, 0.3, 0.5]], dtype=np.float32)
    stats = stats_from_paragraph_scores(P)
    assert stats.sigma[0] == 1.0
    assert stats.sigma[1] == pytest.approx(np.std([0.1, 0.3, 0.5]), rel=1e-6)
    np.testing.assert_array_equal(clamp_sigma(np.array([0.0, 5e-7, 1e-6, 0.2])), [1.0, 1.0, 1e-6, 0.2])


@pytest.mark.parametrize(
    "mu,sigma", [([0.0, 1.0], [1.0]), ([0.0], [0.0]), ([0.0], [-1.0]), ([np.nan], [1.0]), ([[0.0]], [[1.0]])]
)
def test_norm_stats_validation(mu, sigma) -> None:
    with pytest.raises(ValueError):
        NormStats(np.array(mu), np.array(sigma))


# ---------------------------------------------------------------- stage 2: document scores


def test_normalising_best_equals_max_of_normalised(rng) -> None:
    P = rng.standard_normal((3, 10)).astype(np.float32)
    doc_offsets = np.array([0, 2, 3, 7, 10])
    stats = NormStats(np.array([0.1, -0.2, 0.3]), np.array([0.5, 2.0, 0.05]))
    N = (P - stats.mu[:, None]) / stats.sigma[:, None]
    expected = document_max(N, doc_offsets).mean(axis=0)
    np.testing.assert_allclose(sdr_scores(document_max(P, doc_offsets), stats), expected, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(sdr_scores(document_max(P, doc_offsets), None), document_max(P, doc_offsets).mean(0), rtol=1e-6)


def test_sdr_scores_rejects_wrong_stats_length() -> None:
    with pytest.raises(ValueError):
        sdr_scores(np.zeros((3, 2)), NormStats(np.zeros(2), np.ones(2)))


@pytest.mark.parametrize("source_index", [None, 1, 2])
@pytest.mark.parametrize("block_rows", [1, 5, 31, 8192])
def test_score_documents_match_exhaustive_reference(awkward, source_index, block_rows: int) -> None:
    """Documents scored one by one (as views, never concatenated) give the exhaustive SDR scores,
    with blocks smaller than a paragraph, than a document, and holding every document."""
    source, docs = awkward
    if source_index is not None:
        source = docs[source_index]
    corpus = make_corpus(docs)
    src = DocVectors.from_paragraphs(source)
    P = paragraph_scores(src, corpus)
    exclude = None if source_index is None else corpus.paragraph_doc() == source_index
    stats = stats_from_paragraph_scores(P, exclude=exclude)
    documents = [corpus.doc(k) for k in range(corpus.n_docs)]
    assert all(np.shares_memory(d.vectors, corpus.vectors) for d in documents)  # views, no copies
    got = score_documents(src, documents, stats, block_rows=block_rows)
    np.testing.assert_allclose(got, reference_corpus_scores(source, docs, source_index=source_index), atol=TOL, rtol=0)
    np.testing.assert_allclose(got, score_candidates(src, corpus, stats), atol=1e-6, rtol=0)  # BLAS rounding only
    reversed_docs = score_documents(src, documents[::-1], None, block_rows=block_rows)
    np.testing.assert_allclose(reversed_docs[::-1], score_candidates(src, corpus, None), atol=1e-6, rtol=0)


def test_score_documents_edge_cases(awkward) -> None:
    source, docs = awkward
    src = DocVectors.from_paragraphs(source)
    assert score_documents(src, [], None).shape == (0,)
    with pytest.raises(ValueError, match="dimension mismatch"):
        score_documents(src, [DocVectors(np.ones((2, DIM + 1), np.float32), np.array([0, 2]))], None)
    with pytest.raises(ValueError, match="stats cover 1 paragraphs"):
        score_documents(src, [DocVectors.from_paragraphs(docs[0])], NormStats(np.zeros(1), np.ones(1)))


def test_document_blocks() -> None:
    assert document_blocks([3, 4, 2, 9, 1], 7) == [(0, 2), (2, 3), (3, 4), (4, 5)]
    assert document_blocks([3, 4, 2, 9, 1], 100) == [(0, 5)]
    assert document_blocks([5, 5], 1) == [(0, 1), (1, 2)]
    assert document_blocks([], 10) == []
    with pytest.raises(ValueError):
        document_blocks([1], 0)


@pytest.mark.parametrize("source_index", [None, 1, 2])
@pytest.mark.parametrize("block_sentences", [5, 17, 65536])
def test_score_candidates_match_exhaustive_reference(awkward, source_index, block_sentences: int) -> None:
    source, docs = awkward
    if source_index is not None:  # the source is a corpus document (self-similarity included)
        source = docs[source_index]
    corpus = make_corpus(docs)
    src = DocVectors.from_paragraphs(source)
    P = paragraph_scores(src, corpus, block_sentences=block_sentences)
    exclude = None if source_index is None else corpus.paragraph_doc() == source_index
    stats = stats_from_paragraph_scores(P, exclude=exclude)
    got = score_candidates(src, corpus, stats, block_sentences=block_sentences)
    expected = reference_corpus_scores(source, docs, source_index=source_index)
    np.testing.assert_allclose(got, expected, atol=TOL, rtol=0)
    # and the stats themselves
    stat_pars = [p for k, d in enumerate(docs) if k != source_index for p in d]
    ref_stats = np.array([reference_paragraph_stats(s, stat_pars) for s in source])
    np.testing.assert_allclose(stats.mu, ref_stats[:, 0], atol=TOL, rtol=0)
    np.testing.assert_allclose(stats.sigma, ref_stats[:, 1], atol=TOL, rtol=0)


@pytest.mark.parametrize("block_sentences", [5, 65536])
def test_score_candidates_without_normalisation(awkward, block_sentences: int) -> None:
    source, docs = awkward
    got = score_candidates(DocVectors.from_paragraphs(source), make_corpus(docs), None, block_sentences=block_sentences)
    expected = [reference_sdr_score(source, d, None) for d in docs]
    np.testing.assert_allclose(got, expected, atol=TOL, rtol=0)
    assert got.shape == (len(docs),)


def test_unequal_documents_with_normalisation(rng) -> None:
    docs = [make_paragraphs(rng, [1]), make_paragraphs(rng, [300]), make_paragraphs(rng, [150, 1, 149])]
    corpus = make_corpus(docs)
    for k, source in enumerate(docs):
        src = DocVectors.from_paragraphs(source)
        stats = stats_from_paragraph_scores(paragraph_scores(src, corpus), exclude=corpus.paragraph_doc() == k)
        got = score_candidates(src, corpus, stats, block_sentences=17)
        expected = reference_corpus_scores(source, docs, source_index=k)
        np.testing.assert_allclose(got, expected, atol=TOL, rtol=0)


def test_identical_document_scores_one_and_ranks_first(awkward) -> None:
    _, docs = awkward
    corpus = make_corpus(docs)
    source = DocVectors.from_paragraphs(docs[4])
    plain = score_candidates(source, corpus, None)
    assert plain[4] == pytest.approx(1.0, abs=1e-6)
    assert np.all(plain[np.arange(len(docs)) != 4] < 1.0 - 1e-3)
    stats = stats_from_paragraph_scores(paragraph_scores(source, corpus), exclude=corpus.paragraph_doc() == 4)
    assert rank(corpus.ids, score_candidates(source, corpus, stats))[0] == 4


def test_stats_must_match_source(awkward) -> None:
    source, docs = awkward
    with pytest.raises(ValueError):
        score_candidates(DocVectors.from_paragraphs(source), make_corpus(docs), NormStats(np.zeros(2), np.ones(2)))


# ---------------------------------------------------------------- ranking


def test_rank_orders_by_score_then_id() -> None:
    ids = ["c", "a", "b", "d", "aa"]
    scores = np.array([0.5, 0.5, 0.9, 0.1, 0.5])
    assert rank(ids, scores) == [2, 1, 4, 0, 3]
    assert rank([], np.array([])) == []


@pytest.mark.parametrize("ids,scores", [(["a", "b"], [1.0]), (["a"], [np.nan]), (["a", "b"], [[1.0, 2.0]])])
def test_rank_rejects_bad_input(ids, scores) -> None:
    with pytest.raises(ValueError):
        rank(ids, np.array(scores))


@pytest.mark.parametrize("block_sentences", [3, 65536])
def test_duplicate_candidates_tie_and_rank_by_id(rng, block_sentences: int) -> None:
    dup = make_paragraphs(rng, [4, 2, 7])
    other = make_paragraphs(rng, [5, 1])
    source = DocVectors.from_paragraphs([dup[0][:2], unit(rng, 3), dup[2]])  # close to dup
    docs = [other, dup, make_paragraphs(rng, [2]), dup, dup]
    ids = ["x", "m", "y", "b", "k"]
    corpus = make_corpus(docs, ids)
    stats = stats_from_paragraph_scores(paragraph_scores(source, corpus))
    scores = score_candidates(source, corpus, stats, block_sentences=block_sentences)
    # BLAS may round a row differently depending on its position in the product, so identical
    # documents agree to float32 noise, not always bit for bit.
    np.testing.assert_allclose(scores[[3, 4]], scores[1], rtol=0, atol=1e-5)
    assert np.all(scores[[0, 2]] < scores[1] - 1e-3)
    tied = scores.copy()
    tied[[3, 4]] = tied[1]
    assert rank(ids, tied)[:3] == [3, 4, 1]  # exact ties: "b" < "k" < "m"


@pytest.mark.parametrize("lengths", [[1], [1, 1, 1], [3, 1, 40, 2, 2, 7], [5] * 9, [1, 17, 1, 30, 1]])
def test_segment_max_rows_matches_reduceat(rng, lengths) -> None:
    lengths = np.array(lengths, dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    values = rng.standard_normal((int(lengths.sum()), 6)).astype(np.float32)
    scratch = np.empty((lengths.size, 6), dtype=np.float32)
    got = segment_max_rows(values, starts, lengths, scratch)
    np.testing.assert_array_equal(got, np.maximum.reduceat(values, starts, axis=0))
