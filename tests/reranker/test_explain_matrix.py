"""The whole paragraph-pair matrix of an explanation (``explain_matrix``, issue 45): every source
paragraph against every paragraph of a hit, N_ij, and each cell's best sentence pair with character
offsets. The matrix against the brute force of :mod:`sdr_search.core.reference`; through the engine
on an embedded store (the deterministic fake encoder, no model): its shape, its row maxima are the
explanation's paragraph pairs and its mean of row maxima the score, the offsets index the texts the
answer names (stored, request, several sources), and the cells limit. The OpenSearch paths (the
Python rerank and the sdr plugin) are in ``test_explain_matrix_opensearch.py``.
"""

from __future__ import annotations

import numpy as np
import pytest

from factories import AS_GIVEN, FakeEncoder, doc_vectors
from sdr_search.core.documents import parse_record
from sdr_search.core.errors import ExplanationTooLargeError, InvalidInputError
from sdr_search.core.reference import reference_cosine, reference_paragraph_score
from sdr_search.core.scoring import NormStats
from sdr_search.indexer.embedded import EmbeddedStore
from sdr_search.indexer.pipeline import index_documents
from sdr_search.indexer.stats_job import refresh_stats
from sdr_search.reranker.engine import MLTSettings, MoreLikeThis, Query
from sdr_search.reranker.matrix import paragraph_matrix

pytestmark = pytest.mark.unit

TOPICS = ["court", "river", "music", "rocket", "garden", "bridge"]


def _record(k: int) -> dict:
    t, u = TOPICS[k % len(TOPICS)], TOPICS[(k * 5 + 1) % len(TOPICS)]
    paragraphs = [f"The {t} story {k} begins. It is about the {t} and the {u}.",
                  f"A {u} paragraph of document {k}. The {t} again, {k}.",
                  f"Closing words on the {t}. Number {k} ends here. The {u} stays.",
                  f"One more {u} line for {k}."]
    return {"id": f"doc-{k}", "title": f"On the {t} ({k})", "topic": t, "paragraphs": paragraphs[: 1 + k % 4]}


def _brute(source, stats, candidate):
    """P, N and each cell's best sentence pair (k, r, cosine), loop by loop from the SPEC's formulas."""
    n, m = source.n_paragraphs, candidate.n_paragraphs
    P, N = np.zeros((n, m)), np.zeros((n, m))
    pairs = {}
    for i in range(n):
        for j in range(m):
            a, b = source.paragraph(i), candidate.paragraph(j)
            P[i, j] = reference_paragraph_score(a, b)
            N[i, j] = (P[i, j] - stats.mu[i]) / stats.sigma[i]
            best = max(((reference_cosine(a[k], b[r]), -k, -r) for k in range(len(a)) for r in range(len(b))))
            pairs[i, j] = (-best[1], -best[2], best[0])
    return P, N, pairs


def test_the_matrix_equals_the_brute_force():
    rng = np.random.default_rng(7)
    for sizes_s, sizes_c in [([3, 1, 4], [2, 5]), ([1], [1]), ([2, 2, 2, 6], [1, 3, 1, 7, 2])]:
        source, candidate = doc_vectors(rng, sizes_s), doc_vectors(rng, sizes_c)
        stats = NormStats(rng.normal(0.2, 0.05, len(sizes_s)), rng.uniform(0.05, 0.3, len(sizes_s)))
        got = paragraph_matrix(source, stats, candidate)
        P, N, pairs = _brute(source, stats, candidate)
        assert got.normalised.shape == (len(sizes_s), len(sizes_c))
        np.testing.assert_allclose(got.raw, P, atol=1e-6)
        np.testing.assert_allclose(got.normalised, N, atol=1e-4)
        for (i, j), (k, r, c) in pairs.items():
            assert (got.source_sentence[i, j], got.candidate_sentence[i, j]) == (k, r), (i, j)
            assert got.cosine[i, j] == pytest.approx(c, abs=1e-6)


def test_a_tie_takes_the_first_sentences_as_argmax_does():
    """Two equal candidate sentences: the first is the pair's sentence (what the explanation's argmax finds)."""
    rng = np.random.default_rng(1)
    source = doc_vectors(rng, [2])
    v = source.vectors[0]
    from sdr_search.core.vectors import DocVectors

    candidate = DocVectors(np.stack([-v, v, v]), np.array([0, 1, 3]))
    got = paragraph_matrix(source, NormStats(np.zeros(1), np.ones(1)), candidate)
    assert (got.source_sentence[0, 1], got.candidate_sentence[0, 1]) == (0, 0)
    assert got.cosine[0, 1] == pytest.approx(1.0, abs=1e-6)


def test_explain_matrix_needs_explain():
    with pytest.raises(InvalidInputError, match="explain_matrix applies with explain: true"):
        Query(id="doc-1", explain_matrix=True)
    assert Query(id="doc-1", explain=True, explain_matrix=True).explain_matrix


# -- through the engine, embedded store ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("matrix") / "s"
    with EmbeddedStore(path, create=True) as s:
        index_documents(s, [parse_record(_record(k), settings=AS_GIVEN) for k in range(12)], FakeEncoder())
        refresh_stats(s, exact=True, sample_size=60, seed=0)
    with EmbeddedStore(path) as s:
        yield s


def _engine(store, **settings):
    return MoreLikeThis(store=store, encoder=FakeEncoder(), settings=MLTSettings(**settings))


def _check_hit(hit, source_texts, stored_text, n_rows):
    """What the matrix of one hit must hold: rows x columns, row maxima = the explanation's pairs,
    the score = the mean of the row maxima (of each source's, several), each cell's best pair by
    offsets into the named texts."""
    ex = hit.explanation
    mx = ex.matrix
    N = np.asarray(mx.normalised)
    assert N.shape == (n_rows, len(mx.columns))
    owners = np.asarray([r.source or 0 for r in mx.rows])  # several sources: the mean of each one's own score
    assert ex.score == pytest.approx(np.mean([N[owners == p].max(axis=1).mean() for p in np.unique(owners)]), abs=1e-5)
    for pair in ex.paragraph_pairs:
        row = next(i for i, r in enumerate(mx.rows) if r.paragraph == pair.source_paragraph and r.source == pair.source)
        assert N[row].max() == pytest.approx(pair.normalised_score, abs=1e-6)
        assert N[row, pair.candidate_paragraph] == pytest.approx(pair.normalised_score, abs=1e-6)
        assert mx.rows[row].mu + mx.rows[row].sigma * N[row, pair.candidate_paragraph] == pytest.approx(
            pair.paragraph_score, abs=1e-5)
        k, r, cos = mx.sentence_pairs[row][pair.candidate_paragraph]
        first = pair.sentence_pairs[0]
        assert cos == pytest.approx(first.cosine, abs=1e-6)
        assert mx.columns[pair.candidate_paragraph].sentences[r] == [first.candidate_start, first.candidate_end]
        span = mx.rows[row].sentences[k]
        assert span == [first.source_start, first.source_end]
    for i, row in enumerate(mx.rows):
        for j, column in enumerate(mx.columns):
            k, r, _ = mx.sentence_pairs[i][j]
            a, b = row.sentences[k], column.sentences[r]
            assert source_texts[row.source or 0][a[0]:a[1]].strip()
            assert stored_text[b[0]:b[1]].strip()


def test_by_id_each_hit_has_its_whole_matrix(store):
    res = _engine(store).run(Query(id="doc-3", size=5, explain=True, explain_matrix=True, method="sdr"))
    source = store.get("doc-3").document
    assert len(res.hits) == 5
    for hit in res.hits:
        doc = store.get(hit.id).document
        assert len(hit.explanation.matrix.columns) == len(doc.paragraphs)
        assert [len(c.sentences) for c in hit.explanation.matrix.columns] == [len(p) for p in doc.paragraphs]
        _check_hit(hit, [source.text], doc.text, len(source.paragraphs))
        # the cell's best sentences are whole sentences of the two documents
        mx = hit.explanation.matrix
        for i in range(len(mx.rows)):
            for j in range(len(mx.columns)):
                k, r, _ = mx.sentence_pairs[i][j]
                a, b = mx.rows[i].sentences[k], mx.columns[j].sentences[r]
                assert source.text[a[0]:a[1]] == source.paragraphs[i][k]
                assert doc.text[b[0]:b[1]] == doc.paragraphs[j][r]
    plain = _engine(store).run(Query(id="doc-3", size=5, explain=True, method="sdr"))
    assert [h.id for h in plain.hits] == [h.id for h in res.hits]
    assert all(h.explanation.matrix is None for h in plain.hits)
    # the explanation's paragraph pairs are the same with the matrix or without
    assert [h.explanation.paragraph_pairs for h in plain.hits] == [h.explanation.paragraph_pairs for h in res.hits]


def test_hybrid_a_text_and_several_sources(store):
    text = "The river story 1 begins.   It is about the river and the music.\n\nClosing words on the river."
    engine = _engine(store)
    res = engine.run(Query(text=text, size=3, explain=True, explain_matrix=True))
    assert res.method == "hybrid" and res.source_offsets == "request"
    segmented = engine.source(Query(text=text)).document  # as the store's documents were segmented
    n = len(segmented.paragraphs)
    assert [len(r.sentences) for r in res.hits[0].explanation.matrix.rows] == [len(p) for p in segmented.paragraphs]
    for hit in res.hits:
        _check_hit(hit, [text], store.get(hit.id).document.text, n)

    res = _engine(store).run(Query(like=["doc-1", {"text": text}], unlike=["doc-2"], size=3, explain=True,
                                   explain_matrix=True, method="sdr"))
    assert res.source_offsets == "mixed"
    first = store.get("doc-1").document
    for hit in res.hits:
        rows = hit.explanation.matrix.rows
        assert [(r.source, r.paragraph) for r in rows] == [(0, p) for p in range(len(first.paragraphs))] + [(1, p) for p in range(n)]
        _check_hit(hit, [first.text, text], store.get(hit.id).document.text, len(rows))


def test_the_cells_limit_refuses_before_computing(store):
    source = store.get("doc-3").document
    res = _engine(store).run(Query(id="doc-3", size=2, explain=True, explain_matrix=True, method="sdr"))
    cells = len(source.paragraphs) * sum(len(h.explanation.matrix.columns) for h in res.hits)
    assert _engine(store, max_matrix_cells=cells).run(
        Query(id="doc-3", size=2, explain=True, explain_matrix=True, method="sdr")).hits
    with pytest.raises(ExplanationTooLargeError, match=f"{cells:,} cells.*over the limit of {cells - 1:,} "
                       r"\(SDR_MAX_MATRIX_CELLS\)"):
        _engine(store, max_matrix_cells=cells - 1).run(
            Query(id="doc-3", size=2, explain=True, explain_matrix=True, method="sdr"))
    # one hit at a time (from = its rank, size 1) fits, and is the same hit with the same matrix
    one = _engine(store, max_matrix_cells=cells - 1).run(
        Query(id="doc-3", size=1, offset=1, explain=True, explain_matrix=True, method="sdr")).hits[0]
    assert one.id == res.hits[1].id and one.explanation.matrix == res.hits[1].explanation.matrix
