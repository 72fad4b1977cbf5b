"""BM25 ranking of whole documents with bm25s."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from sdr_search.core.lexical import BM25Ranker

pytestmark = pytest.mark.unit

IDS = ["cooking", "astronomy", "football", "gardening"]
TEXTS = [
    "The chef simmered the risotto with saffron and parmesan for twenty minutes.",
    "The telescope observed a quasar and the nebula beyond the spiral galaxy.",
    "The striker scored a late goal and the goalkeeper could not reach the ball.",
    "Prune the roses in spring and mulch the vegetable beds with compost.",
]


@pytest.fixture()
def ranker() -> BM25Ranker:
    return BM25Ranker(stem=False).fit(IDS, TEXTS)


def test_doc_sharing_rare_terms_ranks_first(ranker):
    query = "Astronomers pointed a new telescope at a distant quasar inside a faint nebula. " * 20
    s = ranker.scores(query)
    assert s.shape == (4,) and s.dtype == np.float32
    assert int(np.argmax(s)) == IDS.index("astronomy")
    assert s[IDS.index("astronomy")] > 0
    # The other documents share none of those terms.
    assert np.all(np.delete(s, IDS.index("astronomy")) == 0)


def test_unknown_and_stopword_only_queries_score_zero(ranker):
    np.testing.assert_array_equal(ranker.scores("xylophone zeppelin quokka"), np.zeros(4, np.float32))
    np.testing.assert_array_equal(ranker.scores("the and of a"), np.zeros(4, np.float32))
    np.testing.assert_array_equal(ranker.scores(""), np.zeros(4, np.float32))


def test_scores_follow_fit_order():
    query = "saffron risotto compost roses"
    forward = BM25Ranker(stem=False).fit(IDS, TEXTS).scores(query)
    rev = BM25Ranker(stem=False).fit(IDS[::-1], TEXTS[::-1])
    assert rev.ids == tuple(IDS[::-1])
    np.testing.assert_allclose(rev.scores(query), forward[::-1], rtol=1e-6)
    assert forward[IDS.index("cooking")] > 0 and forward[IDS.index("gardening")] > 0
    assert forward[IDS.index("football")] == 0


def test_query_term_frequency_counts(ranker):
    # Repeating the query term multiplies its contribution (per-occurrence sum, as bm25s get_scores).
    once = ranker.scores("quasar")
    thrice = ranker.scores("quasar quasar quasar")
    np.testing.assert_allclose(thrice, 3 * once, rtol=1e-6)
    both = ranker.scores("quasar quasar saffron")
    np.testing.assert_allclose(both, 2 * once + ranker.scores("saffron"), rtol=1e-6)


def test_matches_bm25s_get_scores_on_the_full_token_list(ranker):
    query = " ".join(TEXTS * 3) + " telescope telescope goal unknownterm"
    tokens = ranker._tokenize([query])[0]
    expected = ranker._model.get_scores(tokens)
    np.testing.assert_allclose(ranker.scores(query), expected, rtol=1e-5)


def test_empty_corpus_and_bad_fit_input():
    with pytest.raises(ValueError, match="empty"):
        BM25Ranker().fit([], [])
    with pytest.raises(ValueError):
        BM25Ranker().fit(["a", "b"], ["one text"])
    with pytest.raises(ValueError, match="duplicate"):
        BM25Ranker().fit(["a", "a"], ["x y", "z w"])


def test_scores_before_fit_is_an_error():
    with pytest.raises(ValueError, match="fit"):
        BM25Ranker().scores("anything")


def test_constructor_is_keyword_only_and_validates():
    with pytest.raises(TypeError):
        BM25Ranker(1.2)  # type: ignore[misc]
    with pytest.raises(ValueError):
        BM25Ranker(b=1.5)
    with pytest.raises(ValueError):
        BM25Ranker(k1=-1)


def test_fit_and_score_print_and_log_nothing(capsys, caplog):
    with caplog.at_level(logging.DEBUG, logger="bm25s"):
        r = BM25Ranker(stem=False).fit(IDS, TEXTS)
        r.scores("telescope goal")
    out, err = capsys.readouterr()
    assert out == "" and err == ""
    assert [rec for rec in caplog.records if rec.name == "bm25s"] == []


def test_bm25s_logger_level_is_restored():
    bm = logging.getLogger("bm25s")
    original = bm.level
    bm.setLevel(logging.INFO)
    try:
        BM25Ranker(stem=False).fit(IDS, TEXTS).scores("goal")
        assert bm.level == logging.INFO
    finally:
        bm.setLevel(original)


# -- analysis, persistence, top-k ---------------------------------------------------------------
def test_analyze_is_the_bm25s_tokenisation(ranker):
    from sdr_search.core.lexical import analyze

    text = "The Appellant's counsel, Mr. X.Y. Rao, cited Section 302 IPC (1860); naïve café — 2nd-hand e-mail."
    assert analyze(text) == ranker._tokenize([text])[0]
    assert analyze("The and of a I") == []


def test_query_terms_keeps_the_most_frequent():
    from sdr_search.core.lexical import query_terms

    text = "quasar nebula quasar galaxy quasar nebula the the the"
    assert query_terms(text) == {"quasar": 3, "nebula": 2, "galaxy": 1}
    assert query_terms(text, 2) == {"quasar": 3, "nebula": 2}
    assert query_terms("beta alpha", 1) == {"alpha": 1}  # ties by term
    with pytest.raises(ValueError):
        query_terms(text, 0)


def test_save_and_load_round_trip(ranker, tmp_path):
    ranker.save(tmp_path / "bm25")
    loaded = BM25Ranker.load(tmp_path / "bm25")
    assert loaded.ids == ranker.ids and loaded.params == ranker.params
    query = "telescope goal saffron roses goal"
    np.testing.assert_array_equal(loaded.scores(query), ranker.scores(query))
    with pytest.raises(ValueError, match="saved BM25"):
        BM25Ranker.load(tmp_path / "missing")
    with pytest.raises(ValueError, match="fit"):
        BM25Ranker().save(tmp_path / "unfitted")


def test_top_matches_only_and_breaks_ties_by_id():
    from sdr_search.core.scoring import top_of

    r = BM25Ranker(stem=False).fit(["b", "a", "c", "d"], ["red fox", "red fox", "blue whale", "red whale"])
    ids, scores = r.top("red fox", 10)
    assert ids == ["a", "b", "d"] and scores[0] == scores[1] > scores[2] > 0  # "c" shares no term
    assert r.top("red fox", 10, exclude_ids=["a"])[0] == ["b", "d"]
    assert r.top("red fox", 1)[0] == ["a"]
    assert r.top("red fox", 0)[0] == []
    # top_of over awkward sizes equals a full sort
    rng = np.random.default_rng(0)
    ids = [f"x{i:03d}" for i in range(57)]
    s = np.round(rng.random(57), 1)  # many ties
    for k in (1, 5, 17, 57, 80):
        got, _ = top_of(ids, s, k)
        assert got == sorted(ids, key=lambda i: (-s[ids.index(i)], i))[:k]
