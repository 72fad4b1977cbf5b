"""Normalisation statistics (sdr_search.core.stats) against the brute-force oracle (sdr_search.core.reference)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from factories import make_corpus, make_paragraphs, unit
from sdr_search.core.reference import reference_corpus_scores, reference_paragraph_stats
from sdr_search.core.scoring import paragraph_scores, score_candidates, stats_from_paragraph_scores
from sdr_search.core.stats import (
    ReferenceSample,
    draw_reference_sample,
    exact_corpus_stats,
    sample_vectors,
    sampled_stats,
    source_stats_exact,
    stats_against_sample,
)
from sdr_search.core.vectors import CorpusVectors, DocVectors

pytestmark = pytest.mark.unit

TOL = 1e-4
CORPUS_SIZES = [[1], [3, 1, 4], [30], [1, 1, 1, 1], [5, 17, 2], [12], [2, 2], [6, 1]]


@pytest.fixture
def docs() -> list[list[np.ndarray]]:
    rng = np.random.default_rng(99)
    return [make_paragraphs(rng, sizes) for sizes in CORPUS_SIZES]


@pytest.fixture
def corpus(docs) -> CorpusVectors:
    return make_corpus(docs)


def reference_corpus_stats(docs: list[list[np.ndarray]]) -> np.ndarray:
    """(P_total, 2) array of reference (mu, sigma), each paragraph against all other documents."""
    rows = []
    for k, doc in enumerate(docs):
        others = [p for j, d in enumerate(docs) if j != k for p in d]
        rows.extend(reference_paragraph_stats(p, others) for p in doc)
    return np.array(rows)


@pytest.fixture
def reference_stats(docs) -> np.ndarray:
    return reference_corpus_stats(docs)


# ---------------------------------------------------------------- exact corpus stats


@pytest.mark.parametrize(
    "block_docs,block_sentences,max_tile_floats",
    [(64, 65536, 1 << 25), (1, 5, 1 << 25), (3, 17, 1 << 25), (2, 65536, 7), (5, 1, 1 << 25)],
)
def test_exact_corpus_stats_match_reference(corpus, reference_stats, block_docs, block_sentences, max_tile_floats):
    stats = exact_corpus_stats(
        corpus, block_docs=block_docs, block_sentences=block_sentences, max_tile_floats=max_tile_floats
    )
    assert len(stats) == corpus.n_paragraphs
    np.testing.assert_allclose(stats.mu, reference_stats[:, 0], atol=TOL, rtol=0)
    np.testing.assert_allclose(stats.sigma, reference_stats[:, 1], atol=TOL, rtol=0)


def test_exact_corpus_stats_respects_tile_budget(corpus, reference_stats, monkeypatch) -> None:
    import sdr_search.core.stats as stats_module

    seen: list[tuple[int, int]] = []
    original = stats_module.iter_paragraph_score_tiles

    def spy(source, corpus_, *, block_sentences):
        seen.append((source.n_sentences, block_sentences))
        return original(source, corpus_, block_sentences=block_sentences)

    monkeypatch.setattr(stats_module, "iter_paragraph_score_tiles", spy)
    stats = exact_corpus_stats(corpus, block_docs=2, block_sentences=65536, max_tile_floats=100)
    assert seen and all(rows * cols <= 100 or cols == 1 for rows, cols in seen)
    np.testing.assert_allclose(stats.mu, reference_stats[:, 0], atol=TOL, rtol=0)


def test_exact_corpus_stats_leave_out_own_document(corpus, docs) -> None:
    stats = exact_corpus_stats(corpus, block_docs=3, block_sentences=17)
    offsets = corpus.doc_par_offsets
    for k in range(corpus.n_docs):
        own = source_stats_exact(corpus.doc(k), corpus, exclude_doc=k)
        np.testing.assert_allclose(stats.mu[offsets[k] : offsets[k + 1]], own.mu, atol=1e-6, rtol=0)
        np.testing.assert_allclose(stats.sigma[offsets[k] : offsets[k + 1]], own.sigma, atol=1e-6, rtol=0)
    # including the own document gives different numbers (a paragraph matches itself perfectly)
    with_self = source_stats_exact(corpus.doc(2), corpus)
    assert not np.allclose(with_self.mu, stats.mu[offsets[2] : offsets[3]], atol=1e-3)


def test_exact_corpus_stats_clamps_sigma() -> None:
    rng = np.random.default_rng(5)
    paragraph = unit(rng, 3)
    corpus = make_corpus([[paragraph], [paragraph], [paragraph.copy()]])  # every score is 1
    stats = exact_corpus_stats(corpus)
    np.testing.assert_allclose(stats.mu, 1.0, atol=1e-6)
    np.testing.assert_array_equal(stats.sigma, 1.0)


def test_exact_corpus_stats_progress_bar(corpus, capsys) -> None:
    exact_corpus_stats(corpus, block_docs=3, progress=True)
    captured = capsys.readouterr()
    assert "exact stats" in captured.err and captured.out == ""
    exact_corpus_stats(corpus, block_docs=3)
    assert capsys.readouterr().err == ""


def test_exact_corpus_stats_bad_arguments(corpus, docs) -> None:
    with pytest.raises(ValueError):
        exact_corpus_stats(make_corpus(docs[:1]))  # nothing left once the own document is excluded
    with pytest.raises(ValueError):
        exact_corpus_stats(corpus, block_docs=0)
    with pytest.raises(ValueError):
        exact_corpus_stats(corpus, block_sentences=0)


# ---------------------------------------------------------------- one source, exact


def test_source_stats_exact_external_source(corpus, docs) -> None:
    rng = np.random.default_rng(7)
    source = make_paragraphs(rng, [4, 1, 9])
    stats = source_stats_exact(DocVectors.from_paragraphs(source), corpus)
    everything = [p for d in docs for p in d]
    expected = np.array([reference_paragraph_stats(s, everything) for s in source])
    np.testing.assert_allclose(stats.mu, expected[:, 0], atol=TOL, rtol=0)
    np.testing.assert_allclose(stats.sigma, expected[:, 1], atol=TOL, rtol=0)


def test_source_stats_exact_rejects_bad_doc_index(corpus) -> None:
    with pytest.raises(ValueError):
        source_stats_exact(corpus.doc(0), corpus, exclude_doc=corpus.n_docs)


# ---------------------------------------------------------------- reference sample


def test_sample_is_deterministic_sorted_and_distinct(corpus) -> None:
    a = draw_reference_sample(corpus, 7, seed=3)
    b = draw_reference_sample(corpus, 7, seed=3)
    c = draw_reference_sample(corpus, 7, seed=4)
    np.testing.assert_array_equal(a.paragraph_indices, b.paragraph_indices)
    assert not np.array_equal(a.paragraph_indices, c.paragraph_indices)
    idx = a.paragraph_indices
    assert idx.dtype == np.int64 and idx.size == 7 and a.size == 7 and a.seed == 3
    assert np.all(np.diff(idx) > 0) and idx[0] >= 0 and idx[-1] < corpus.n_paragraphs


def test_sample_at_least_corpus_takes_all(corpus) -> None:
    for size in (corpus.n_paragraphs, corpus.n_paragraphs + 10):
        sample = draw_reference_sample(corpus, size, seed=1)
        np.testing.assert_array_equal(sample.paragraph_indices, np.arange(corpus.n_paragraphs))
    with pytest.raises(ValueError):
        draw_reference_sample(corpus, 0)


def test_sample_dict_round_trip(corpus) -> None:
    sample = draw_reference_sample(corpus, 9, seed=11)
    data = json.loads(json.dumps(sample.to_dict()))
    back = ReferenceSample.from_dict(data)
    np.testing.assert_array_equal(back.paragraph_indices, sample.paragraph_indices)
    assert (back.seed, back.size) == (11, 9)
    assert back.paragraph_indices.dtype == np.int64
    with pytest.raises(ValueError):
        ReferenceSample.from_dict({"seed": 1, "size": 2})


@pytest.mark.parametrize("indices,size", [([3, 1], 5), ([1, 1], 5), ([-1, 2], 5), ([], 5), ([1, 2, 3], 2)])
def test_reference_sample_validation(indices, size) -> None:
    with pytest.raises(ValueError):
        ReferenceSample(np.array(indices, dtype=np.int64), 0, size)


def test_stale_sample_is_rejected(corpus) -> None:
    sample = ReferenceSample(np.array([0, corpus.n_paragraphs]), 0, 2)
    with pytest.raises(ValueError, match="stale"):
        sample_vectors(corpus, sample)


def test_sample_vectors_gather_the_right_paragraphs(corpus, docs) -> None:
    sample = draw_reference_sample(corpus, 8, seed=2)
    sampled = sample_vectors(corpus, sample)
    flat = [p for d in docs for p in d]
    owner = [k for k, d in enumerate(docs) for _ in d]
    assert sampled.vectors.n_docs == sampled.vectors.n_paragraphs == 8
    for j, q in enumerate(sample.paragraph_indices):
        np.testing.assert_array_equal(sampled.vectors.doc(j).vectors, flat[q])
        assert sampled.doc_index[j] == owner[q]


def test_sampled_stats_with_full_sample_equal_exact(corpus) -> None:
    full = draw_reference_sample(corpus, corpus.n_paragraphs * 2, seed=0)
    exact = exact_corpus_stats(corpus)
    offsets = corpus.doc_par_offsets
    for k in range(corpus.n_docs):
        got = sampled_stats(corpus.doc(k), corpus, full, exclude_doc=k)
        np.testing.assert_allclose(got.mu, exact.mu[offsets[k] : offsets[k + 1]], atol=1e-6, rtol=0)
        np.testing.assert_allclose(got.sigma, exact.sigma[offsets[k] : offsets[k + 1]], atol=1e-6, rtol=0)
    external = DocVectors.from_paragraphs(make_paragraphs(np.random.default_rng(8), [3, 5]))
    a, b = sampled_stats(external, corpus, full), source_stats_exact(external, corpus)
    np.testing.assert_allclose(a.mu, b.mu, atol=1e-6)
    np.testing.assert_allclose(a.sigma, b.sigma, atol=1e-6)


def test_sampled_stats_partial_sample_match_reference(corpus, docs) -> None:
    sample = draw_reference_sample(corpus, 10, seed=21)
    flat = [p for d in docs for p in d]
    owner = np.array([k for k, d in enumerate(docs) for _ in d])
    source_doc = int(owner[sample.paragraph_indices[0]])  # make sure something is excluded
    got = sampled_stats(corpus.doc(source_doc), corpus, sample, exclude_doc=source_doc)
    kept = [flat[q] for q in sample.paragraph_indices if owner[q] != source_doc]
    assert 0 < len(kept) < 10
    expected = np.array([reference_paragraph_stats(p, kept) for p in docs[source_doc]])
    np.testing.assert_allclose(got.mu, expected[:, 0], atol=TOL, rtol=0)
    np.testing.assert_allclose(got.sigma, expected[:, 1], atol=TOL, rtol=0)
    # the prebuilt path gives the same numbers
    again = stats_against_sample(corpus.doc(source_doc), sample_vectors(corpus, sample), exclude_doc=source_doc)
    np.testing.assert_array_equal(again.mu, got.mu)


def test_sampled_stats_everything_excluded_raises(corpus) -> None:
    sample = ReferenceSample(np.array([1, 2, 3]), 0, 3)  # all paragraphs of document 1
    with pytest.raises(ValueError):
        sampled_stats(corpus.doc(1), corpus, sample, exclude_doc=1)
    with pytest.raises(ValueError):
        sampled_stats(corpus.doc(1), corpus, sample, exclude_doc=-1)


# ---------------------------------------------------------------- why stats are precomputed


def test_stats_from_candidates_subset_differ_from_corpus_stats(corpus, docs) -> None:
    source_index = 4
    source = corpus.doc(source_index)
    corpus_stats = source_stats_exact(source, corpus, exclude_doc=source_index)
    candidates = [1, 2, 5]  # e.g. a first-stage top-K
    subset = corpus.subset(candidates)
    subset_stats = stats_from_paragraph_scores(paragraph_scores(source, subset))
    assert np.max(np.abs(subset_stats.mu - corpus_stats.mu)) > 1e-2
    assert np.max(np.abs(subset_stats.sigma / corpus_stats.sigma - 1)) > 1e-2

    exhaustive = np.array(reference_corpus_scores(docs[source_index], docs, source_index=source_index))
    right = score_candidates(source, subset, corpus_stats)
    wrong = score_candidates(source, subset, subset_stats)
    np.testing.assert_allclose(right, exhaustive[candidates], atol=TOL, rtol=0)
    assert np.max(np.abs(wrong - exhaustive[candidates])) > 1e-2
