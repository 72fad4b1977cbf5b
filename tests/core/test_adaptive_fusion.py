"""Adaptive fusion (sdr_search.core.fusion.adaptive_weights, fusion="adaptive") and the short-source
cut of `sdr eval --source-cut` (sdr_search.core.evaluation.cut_source): pure functions."""

from __future__ import annotations

import numpy as np
import pytest

from sdr_search.core.documents import Document
from sdr_search.core.errors import InvalidInputError
from sdr_search.core.evaluation import (
    SourceCut, cut_source, hybrid_ranking, parse_source_cut, weights_by_kind,
)
from sdr_search.core.fusion import (
    ADAPTIVE_HYBRID, FUSIONS, AdaptiveParams, HybridSpec, SourceShape, adaptive_weights, check_search_defaults, fuse,
    length_corrected,
)

pytestmark = pytest.mark.unit

IDS = [f"d{i}" for i in range(6)]
FLAT_EVIDENCE = AdaptiveParams(half_sentences=10, mean_weight=0.2, evidence_power=0, length_correction=0)


def _signals(rng=None):
    rng = rng or np.random.default_rng(0)
    return {s: rng.normal(size=len(IDS)) for s in ("bm25", "sdr", "mean")}


# -- adaptive weights -------------------------------------------------------------------------
def test_length_prior_by_hand():
    sig = _signals()
    # n0 = 10, m = 0.2: bm25 0.8 * 10 / (10 + n), sdr 0.8 * n / (10 + n), mean 0.2
    w = adaptive_weights(sig, SourceShape(10, 1), FLAT_EVIDENCE)
    assert w == pytest.approx({"bm25": 0.4, "sdr": 0.4, "mean": 0.2})
    w = adaptive_weights(sig, SourceShape(30, 3), FLAT_EVIDENCE)
    assert w == pytest.approx({"bm25": 0.2, "sdr": 0.6, "mean": 0.2})
    # unknown shape: a neutral prior (n = n0)
    assert adaptive_weights(sig, None, FLAT_EVIDENCE) == pytest.approx({"bm25": 0.4, "sdr": 0.4, "mean": 0.2})


def test_longer_sources_lean_to_sdr_shorter_to_bm25():
    sig = _signals()
    for params in (AdaptiveParams(), FLAT_EVIDENCE, AdaptiveParams(8, 0.1, 2.0)):
        ws = [adaptive_weights(sig, SourceShape(n, 1), params) for n in (1, 5, 9, 40, 250, 2000)]
        assert all(sum(w.values()) == pytest.approx(1.0) for w in ws)
        assert [w["sdr"] for w in ws] == sorted(w["sdr"] for w in ws)
        assert [w["bm25"] for w in ws] == sorted((w["bm25"] for w in ws), reverse=True)


def test_evidence_scales_each_prior():
    # a signal whose top documents stand far above the rest gains weight over a flat one
    bm25 = np.array([10.0, 0, 0, 0, 0, 0])  # one outlier: top-1 z = sqrt(5)
    sdr = np.array([1.0, 1.0, 1.0, 0.0, 0.0, 0.0])  # top-1 z = 1
    params = AdaptiveParams(half_sentences=10, mean_weight=0.0, evidence_power=1.0, evidence_top=1)
    w = adaptive_weights({"bm25": bm25, "sdr": sdr}, SourceShape(10, 1), params)
    assert w["bm25"] / w["sdr"] == pytest.approx(np.sqrt(5.0))
    assert w["mean"] == 0.0  # not given
    # evidence power 2 squares the ratio; 0 ignores it
    w2 = adaptive_weights({"bm25": bm25, "sdr": sdr}, SourceShape(10, 1), AdaptiveParams(10, 0.0, 2.0, 1))
    assert w2["bm25"] / w2["sdr"] == pytest.approx(5.0)
    w0 = adaptive_weights({"bm25": bm25, "sdr": sdr}, SourceShape(10, 1), AdaptiveParams(10, 0.0, 0.0, 1))
    assert w0["bm25"] == pytest.approx(0.5)


def test_constant_signals_fall_back_to_the_prior():
    flat = {s: np.ones(len(IDS)) for s in ("bm25", "sdr", "mean")}  # no evidence anywhere
    w = adaptive_weights(flat, SourceShape(30, 2), AdaptiveParams(10, 0.2, 1.0))
    assert w == pytest.approx({"bm25": 0.2, "sdr": 0.6, "mean": 0.2})


def test_base_weights_multiply_and_zero_leaves_a_signal_out():
    sig = _signals()
    w = adaptive_weights(sig, SourceShape(10, 1), FLAT_EVIDENCE, base={"bm25": 1, "sdr": 0, "mean": 1})
    assert w == pytest.approx({"bm25": 2 / 3, "sdr": 0.0, "mean": 1 / 3})  # 0.4 and 0.2, divided by their sum
    w = adaptive_weights(sig, SourceShape(10, 1), FLAT_EVIDENCE, base={"bm25": 3, "sdr": 1, "mean": 0})
    assert w == pytest.approx({"bm25": 0.75, "sdr": 0.25, "mean": 0.0})


def test_params_validation_and_grid():
    for bad in (dict(half_sentences=0), dict(half_sentences=-1), dict(mean_weight=1.0), dict(mean_weight=-0.1),
                dict(evidence_power=float("nan")), dict(evidence_top=0), dict(length_correction=-0.1),
                dict(length_correction=float("inf"))):
        with pytest.raises(InvalidInputError):
            AdaptiveParams(**bad)
    grid = AdaptiveParams.grid()
    assert len(grid) == len(set(grid)) == 45 and AdaptiveParams().without_feedback() in grid
    assert str(AdaptiveParams(16, 0.1, 1, feedback_docs=0)) == "n0=16,m=0.1,g=1,c=0.375,k=0"
    assert str(AdaptiveParams(16, feedback_docs=2, feedback_weight=0.5, feedback_half=8)) == "n0=16,m=0,g=0,c=0.375,k=2,f=0.5,h=8"
    assert AdaptiveParams() == AdaptiveParams(32, 0.0, 0.0, length_correction=0.375)  # the shipped parameters
    assert {p.length_correction for p in AdaptiveParams.grid(0.0)} == {0.0}
    with pytest.raises(ValueError):
        SourceShape(-1, 1)


# -- fuse with fusion="adaptive" --------------------------------------------------------------
def test_adaptive_fuse_is_zscore_with_the_adaptive_weights():
    sig = _signals()
    spec = HybridSpec("adaptive", adaptive=FLAT_EVIDENCE)
    short = fuse(IDS, sig, spec, source=SourceShape(5, 1))
    long = fuse(IDS, sig, spec, source=SourceShape(500, 40))
    for out, n in ((short, 5), (long, 500)):
        w = adaptive_weights(sig, SourceShape(n, 1), FLAT_EVIDENCE)
        assert out.weights == pytest.approx(w)
        fixed = fuse(IDS, sig, HybridSpec("zscore", w))
        np.testing.assert_allclose(out.scores, fixed.scores)
        assert fixed.weights == pytest.approx(w)
    assert short.weights["bm25"] > long.weights["bm25"] and short.weights["sdr"] < long.weights["sdr"]
    # given weights are used as they are (the tail of a ranking reuses its head's)
    given = fuse(IDS, sig, spec, source=SourceShape(5, 1), weights=long.weights)
    np.testing.assert_allclose(given.scores, long.scores)


def test_length_correction_of_sdr():
    sdr = np.array([2.0, 2.0, 2.0, np.nan])
    out = length_corrected(sdr, [1, 10, 100, 5], 0.5)
    assert out[0] == 2.0 and out[1] == pytest.approx(2.0 - 0.5 * np.sqrt(2 * np.log(10)))
    assert out[1] > out[2] and np.isnan(out[3])  # more paragraphs, a larger correction; NaN stays missing
    assert length_corrected(sdr[:3], [0, 1, 2], 0.0).tolist() == [2.0, 2.0, 2.0]
    with pytest.raises(ValueError):
        length_corrected(sdr, [1, 2], 0.5)
    # in adaptive fusion: SDR is corrected before it is normalised; raw keeps the exact SDR
    ids = ["long", "short", "mid"]
    sig = {"bm25": np.array([1.0, 1.0, 1.0]), "sdr": np.array([3.0, 2.9, 1.0])}
    paragraphs = [400, 2, 10]
    spec = HybridSpec("adaptive", {"bm25": 1, "sdr": 1})
    out = fuse(ids, sig, spec, source=SourceShape(100, 10), paragraphs=paragraphs)
    assert [ids[i] for i in out.order(ids)][0] == "short" and out.raw["sdr"].tolist() == [3.0, 2.9, 1.0]
    off = spec.replace(adaptive=AdaptiveParams(length_correction=0))
    assert [ids[i] for i in fuse(ids, sig, off, source=SourceShape(100, 10)).order(ids)][0] == "long"
    with pytest.raises(ValueError, match="paragraph count"):
        fuse(ids, sig, spec, source=SourceShape(100, 10))
    # a fixed fusion, or adaptive without SDR, needs no paragraph counts
    fuse(ids, sig, HybridSpec("zscore", {"bm25": 1, "sdr": 1}))
    fuse(ids, {"bm25": sig["bm25"]}, HybridSpec("adaptive", {"bm25": 1}), source=SourceShape(100, 10))


def test_adaptive_spec_round_trips():
    assert "adaptive" in FUSIONS
    assert ADAPTIVE_HYBRID.to_dict()["adaptive"] == AdaptiveParams().to_dict()
    assert ADAPTIVE_HYBRID.replace(weights={"bm25": 1}).adaptive == ADAPTIVE_HYBRID.adaptive
    assert HybridSpec("zscore").replace(fusion="adaptive") == ADAPTIVE_HYBRID
    assert check_search_defaults({"fusion": "adaptive"}) == {"fusion": "adaptive"}
    with pytest.raises(InvalidInputError):
        HybridSpec("adaptive", adaptive={"half_sentences": 3})


def test_hybrid_ranking_reports_and_reuses_the_head_weights():
    rng = np.random.default_rng(1)
    ids = [f"d{i:02d}" for i in range(40)]
    sig = {s: rng.normal(size=40) for s in ("bm25", "sdr", "mean")}
    used: dict = {}
    paragraphs = rng.integers(1, 50, size=40)
    ranking = hybrid_ranking(ids, sig, ADAPTIVE_HYBRID, 5, source=SourceShape(9, 1), used=used, paragraphs=paragraphs)
    assert len(ranking) == 40 and sum(used["weights"].values()) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="paragraph count"):
        hybrid_ranking(ids, sig, ADAPTIVE_HYBRID, 5, source=SourceShape(9, 1))
    scores = [s for _, s in ranking]
    assert scores == sorted(scores, reverse=True)
    fixed: dict = {}
    hybrid_ranking(ids, sig, HybridSpec("zscore", {"bm25": 2, "sdr": 1, "mean": 1}), 5, used=fixed)
    assert fixed["weights"] == pytest.approx({"bm25": 0.5, "sdr": 0.25, "mean": 0.25})


def test_weights_by_kind():
    used = {"a": {"bm25": 0.7, "sdr": 0.2, "mean": 0.1}, "b": {"bm25": 0.5, "sdr": 0.4, "mean": 0.1},
            "c": {"bm25": 0.1, "sdr": 0.8, "mean": 0.1}}
    shapes = {"a": SourceShape(9, 1), "b": SourceShape(5, 1), "c": SourceShape(300, 30)}
    out = weights_by_kind(used, shapes)
    assert out["one paragraph"]["queries"] == 2 and out["one paragraph"]["sentences"] == [5, 9]
    assert out["one paragraph"]["bm25"] == {"mean": 0.6, "min": 0.5, "max": 0.7}
    assert out["several paragraphs"]["sdr"]["mean"] == 0.8


# -- the short-source cut -----------------------------------------------------------------------
DOC = Document("q1", (("s1", "s2", "s3"), ("s4", "s5"), ("s6",)), title="T", metadata={"k": 1})


def test_parse_source_cut():
    assert parse_source_cut("sentences:9") == SourceCut("sentences", 9)
    assert parse_source_cut(" paragraphs:1 ") == SourceCut("paragraphs", 1)
    assert str(parse_source_cut("sentences:12")) == "sentences:12"
    for whole in (None, "", "full"):
        assert parse_source_cut(whole) is None
    for bad in ("sentences", "sentences:0", "sentences:-3", "words:5", "sentences:x", "sentences:1.5"):
        with pytest.raises(InvalidInputError):
            parse_source_cut(bad)


def test_cut_to_sentences_is_one_paragraph_of_the_first_n():
    out = cut_source(DOC, SourceCut("sentences", 4))
    assert out.paragraphs == (("s1", "s2", "s3", "s4"),)
    assert (out.id, out.title, out.metadata) == (DOC.id, DOC.title, DOC.metadata)
    assert SourceShape.of(out) == SourceShape(4, 1) and SourceShape.of(out).kind == "one paragraph"
    # more sentences than the document has: all of them, still as one paragraph
    assert cut_source(DOC, SourceCut("sentences", 50)).paragraphs == (("s1", "s2", "s3", "s4", "s5", "s6"),)
    assert DOC.paragraphs == (("s1", "s2", "s3"), ("s4", "s5"), ("s6",))  # pure


def test_cut_to_paragraphs_and_no_cut():
    assert cut_source(DOC, SourceCut("paragraphs", 2)).paragraphs == (("s1", "s2", "s3"), ("s4", "s5"))
    assert cut_source(DOC, SourceCut("paragraphs", 5)) is DOC
    assert cut_source(DOC, None) is DOC
    assert SourceShape.of(DOC) == SourceShape(6, 3) and SourceShape.of(DOC).kind == "several paragraphs"
