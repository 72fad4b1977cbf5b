"""bench/experiments/paragraph_lexical.py: the paragraph-level lexical matrix against a brute-force loop, its
SDR-style aggregation against the definition, and the fourth-signal fusion wrapper (issue 35)."""

from __future__ import annotations

import importlib.util
import math
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import sdr_search.core.evaluation as evaluation
from sdr_search.core.documents import Document
from sdr_search.core.fusion import ADAPTIVE_HYBRID, SourceShape, zscore
from sdr_search.core.lexical import analyze

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(ROOT / "bench"))
    spec = importlib.util.spec_from_file_location("paragraph_lexical_bench", ROOT / "bench" / "experiments" / "paragraph_lexical.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CORPUS = [
    Document("a", (("The appellant filed an appeal under section 302 of the Penal Code.", "The appeal was heard."),
                   ("Murder charges were framed against the appellant.",))),
    Document("b", (("The contract of sale was void for want of consideration.",),
                   ("Section 302 does not apply to a contract.", "Consideration consideration consideration."))),
    Document("c", (("Land acquisition compensation under the Act was enhanced.",),)),
    Document("d", (("The tenant was evicted; the landlord sought arrears of rent.", "Rent control applies."),
                   ("Appeal dismissed.",), ("The the and of",))),  # a paragraph of stopwords only
]
SOURCE = (("The appellant was charged with murder under section 302.", "The appeal is allowed."),
          ("Rent arrears and eviction of a tenant; unknownword.",), ("of the and",))


def brute_force_matrix(source, corpus, scorer, *, k1=1.5, b=0.75):
    """``L`` by loops over terms, from the definitions: IDF ``ln(1 + (N - df + 0.5) / (df + 0.5))``
    over documents; BM25 with the source paragraph's counts against a corpus paragraph (length
    normalised over the corpus's paragraphs); the cosine of ``(1 + ln tf) idf`` vectors."""
    def words(paragraph):
        return analyze(" ".join(paragraph))

    paras = [p for d in corpus for p in d.paragraphs]
    tokens = [words(p) for p in paras]
    doc_terms = [{t for p in d.paragraphs for t in words(p)} for d in corpus]
    n = len(corpus)
    avg = sum(len(t) for t in tokens) / len(tokens)

    def idf(term):
        df = sum(term in s for s in doc_terms)
        return math.log(1 + (n - df + 0.5) / (df + 0.5))

    out = np.zeros((len(source), len(paras)))
    for i, para in enumerate(source):
        q = Counter(t for t in words(para) if any(t in s for s in doc_terms))
        for j, toks in enumerate(tokens):
            c = Counter(toks)
            if scorer == "bm25":
                out[i, j] = sum(qc * idf(t) * c[t] * (k1 + 1) / (c[t] + k1 * (1 - b + b * len(toks) / avg))
                                for t, qc in q.items() if c[t])
            else:
                qv = {t: (1 + math.log(v)) * idf(t) for t, v in q.items()}
                cv = {t: (1 + math.log(v)) * idf(t) for t, v in c.items()}
                dot = sum(w * cv.get(t, 0.0) for t, w in qv.items())
                nq, nc = math.sqrt(sum(w * w for w in qv.values())), math.sqrt(sum(w * w for w in cv.values()))
                out[i, j] = dot / (nq * nc) if nq > 0 and nc > 0 else 0.0
    return out



@pytest.mark.parametrize("scorer", ["tfidf", "bm25"])
def test_matrix_equals_the_brute_force_loop(bench, scorer):
    lexicon = bench.ParagraphLexicon(CORPUS)
    got = lexicon.matrix(SOURCE, scorer)
    want = brute_force_matrix(SOURCE, CORPUS, scorer)
    assert got.shape == (3, 8)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    assert np.all(got[2] == 0)  # a source paragraph with no indexed term matches nothing
    assert np.all(got[:, 7] == 0)  # nor does a corpus paragraph of stopwords
    if scorer == "tfidf":
        assert got.max() <= 1 + 1e-12
        assert np.isclose(lexicon.matrix([CORPUS[0].paragraphs[0]], "tfidf")[0, 0], 1.0)  # a paragraph against itself
    assert got[0, 0] > 0 and got[0, 3] > 0  # "section 302" in a and in b
    assert got[1, 5] > 0 and got[1, 0] == 0  # rent and a tenant in d, not in a


def test_the_scorers_by_hand(bench):
    """Worked out on paper. N = 2 documents; "alpha" is in both (idf ln 1.2), "beta" and "delta" in
    one (idf ln 2); paragraph lengths 2, 1, 3, mean 2."""
    corpus = [Document("x", (("alpha beta",), ("gamma",))), Document("y", (("alpha alpha delta",),))]
    lexicon = bench.ParagraphLexicon(corpus)
    a, d = math.log(1.2), math.log(2.0)
    bm25 = lexicon.matrix([("Alpha.",)], "bm25")[0]
    # tf 1 at the mean length: idf (k1 + 1) / (1 + k1); tf 2 at length 3: 2 (k1 + 1) / (2 + k1 (0.25 + 0.75 * 1.5))
    np.testing.assert_allclose(bm25, [a, 0.0, a * 5.0 / (2.0 + 1.5 * 1.375)], rtol=1e-12)
    cos = lexicon.matrix([("Alpha.",)], "tfidf")[0]
    w = (1 + math.log(2)) * a
    np.testing.assert_allclose(cos, [a / math.hypot(a, d), 0.0, w / math.hypot(w, d)], rtol=1e-12)


def test_aggregation_is_sdr_over_the_lexical_matrix(bench):
    lexicon = bench.ParagraphLexicon(CORPUS)
    L = lexicon.matrix(SOURCE, "tfidf")
    offsets = lexicon.doc_par_offsets
    own = 0
    exclude = np.repeat(np.arange(len(CORPUS)), np.diff(offsets)) == own
    got = bench.aggregated(L, offsets, exclude)
    want = np.zeros(len(CORPUS))
    for c in range(len(CORPUS)):
        terms = []
        for i in range(L.shape[0]):
            others = L[i][~exclude]
            mu, sd = others.mean(), others.std()
            sd = sd if sd >= 1e-6 else 1.0
            terms.append((L[i, offsets[c]:offsets[c + 1]].max() - mu) / sd)
        want[c] = np.mean(terms)
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_fourth_signal_fuses_at_its_share_and_brings_no_candidates(bench):
    rng = np.random.default_rng(0)
    ids = [f"d{i:02d}" for i in range(30)]
    signals = {s: rng.normal(size=30) for s in ("bm25", "sdr", "mean")}
    paragraphs = rng.integers(1, 40, size=30)
    shape = SourceShape(sentences=9, paragraphs=1)
    plain = evaluation.hybrid_ranking(ids, signals, ADAPTIVE_HYBRID, 5, source=shape, paragraphs=paragraphs)
    extra = {**signals, "plex": rng.normal(size=30)}
    with bench.fourth_signal(0.0, 0.0):
        assert evaluation.hybrid_ranking(ids, extra, ADAPTIVE_HYBRID, 5, source=shape, paragraphs=paragraphs) == plain
    with bench.fourth_signal(0.3, 0.375):
        mixed = evaluation.hybrid_ranking(ids, extra, ADAPTIVE_HYBRID, 5, source=shape, paragraphs=paragraphs)
        head = evaluation.candidate_set(ids, extra, 5)
    assert evaluation.fuse is not None and evaluation.candidate_set.__name__ == "candidate_set"  # restored
    np.testing.assert_array_equal(head, evaluation.candidate_set(ids, signals, 5))
    assert [d for d, _ in mixed] != [d for d, _ in plain]
    assert sorted(d for d, _ in mixed) == sorted(ids)


def test_a_share_of_sdrs_weight_at_one_puts_the_signal_in_sdrs_place(bench):
    rng = np.random.default_rng(1)
    ids = [f"d{i:02d}" for i in range(20)]
    signals = {s: rng.normal(size=20) for s in ("bm25", "sdr", "mean", "plex")}
    paragraphs = rng.integers(1, 40, size=20)
    shape = SourceShape(sentences=60, paragraphs=6)
    swapped = {"bm25": signals["bm25"], "sdr": signals["plex"], "mean": signals["mean"]}
    want = evaluation.fuse(ids, swapped, ADAPTIVE_HYBRID, source=shape, paragraphs=paragraphs)
    with bench.fourth_signal(1.0, ADAPTIVE_HYBRID.adaptive.length_correction, "sdr"):
        got = evaluation.fuse(ids, signals, ADAPTIVE_HYBRID, source=shape, paragraphs=paragraphs)
    np.testing.assert_allclose(got.scores, want.scores, rtol=1e-12, atol=1e-12)
    assert got.weights["sdr"] == 0 and got.weights["plex"] == pytest.approx(want.weights["sdr"])
    with bench.fourth_signal(0.5, 0.0, "all"):
        half = evaluation.fuse(ids, signals, ADAPTIVE_HYBRID, source=shape, paragraphs=paragraphs)
    base = evaluation.fuse(ids, {s: signals[s] for s in ("bm25", "sdr", "mean")}, ADAPTIVE_HYBRID, source=shape,
                           paragraphs=paragraphs)
    np.testing.assert_allclose(half.scores, 0.5 * base.scores + 0.5 * zscore(signals["plex"]), rtol=1e-12)
    assert sum(half.weights.values()) == pytest.approx(1.0)


def test_the_documents_outside_the_set_get_the_sets_weights(bench):
    """With SDR's whole weight moved to the signal, the ranking is the product's with the signal in
    SDR's place, the documents outside the candidate set (fused with the set's weights) included. The
    signal is a monotone function of SDR, so both candidate sets are the same."""
    rng = np.random.default_rng(2)
    ids = [f"d{i:02d}" for i in range(40)]
    signals = {s: rng.normal(size=40) for s in ("bm25", "sdr", "mean")}
    signals["plex"] = 2 * signals["sdr"] + signals["sdr"] ** 3
    paragraphs = rng.integers(1, 40, size=40)
    shape = SourceShape(sentences=60, paragraphs=6)
    swapped = {"bm25": signals["bm25"], "sdr": signals["plex"], "mean": signals["mean"]}
    want = evaluation.hybrid_ranking(ids, swapped, ADAPTIVE_HYBRID, 5, source=shape, paragraphs=paragraphs)
    with bench.fourth_signal(1.0, ADAPTIVE_HYBRID.adaptive.length_correction, "sdr"):
        got = evaluation.hybrid_ranking(ids, signals, ADAPTIVE_HYBRID, 5, source=shape, paragraphs=paragraphs)
    assert [d for d, _ in got] == [d for d, _ in want]
    np.testing.assert_allclose([s for _, s in got], [s for _, s in want], rtol=1e-12, atol=1e-12)
