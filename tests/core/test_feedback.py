"""Document feedback in adaptive fusion (issue 25; docs/scoring.md "Document feedback"): the pure
functions (:func:`feedback_share`, :func:`without_own`, :func:`with_feedback`), the switch on the
spec and the settings, and :func:`hybrid_ranking` with feedback checked against the fusion done by
hand. The engine's feedback is checked against single-source queries in tests/reranker/test_like.py."""

from __future__ import annotations

import numpy as np
import pytest

from sdr_search.core.errors import InvalidInputError
from sdr_search.core.evaluation import candidate_set, hybrid_ranking
from sdr_search.core.fusion import (
    ADAPTIVE_HYBRID, FEEDBACK_MIN_SHARE, AdaptiveParams, HybridSpec, SourceShape, feedback_share, fuse,
    with_feedback, without_own,
)
from sdr_search.core.settings import HybridSettings

pytestmark = pytest.mark.unit

PARAMS = AdaptiveParams(feedback_docs=2, feedback_weight=0.8, feedback_half=10)


def test_feedback_share_falls_with_the_source_length():
    assert feedback_share(SourceShape(10, 1), PARAMS) == pytest.approx(0.4)  # f h / (h + n) = 0.8 * 10 / 20
    assert feedback_share(SourceShape(0, 0), PARAMS) == pytest.approx(0.8)
    assert feedback_share(None, PARAMS) == pytest.approx(0.4)  # unknown shape: n = h
    long = SourceShape(1000, 80)
    assert 0.8 * 10 / 1010 < FEEDBACK_MIN_SHARE and feedback_share(long, PARAMS) == 0.0  # not worth a second search
    assert feedback_share(SourceShape(3, 1), PARAMS.without_feedback()) == 0.0
    assert feedback_share(SourceShape(3, 1), AdaptiveParams(feedback_weight=0.0)) == 0.0


def test_feedback_params_are_validated_and_switched():
    for bad in (dict(feedback_docs=-1), dict(feedback_docs=11), dict(feedback_docs=True), dict(feedback_docs=2.0),
                dict(feedback_weight=1.5), dict(feedback_weight=-0.1), dict(feedback_half=0),
                dict(feedback_half=float("nan"))):
        with pytest.raises(InvalidInputError):
            AdaptiveParams(**bad)
    assert ADAPTIVE_HYBRID.feedback and not ADAPTIVE_HYBRID.replace(feedback=False).feedback
    off = ADAPTIVE_HYBRID.replace(feedback=False)
    assert off.adaptive.feedback_docs == 0 and off.replace(feedback=True).adaptive == ADAPTIVE_HYBRID.adaptive
    assert not HybridSpec("zscore").feedback  # feedback belongs to adaptive fusion
    assert HybridSettings().spec().feedback and not HybridSettings(feedback=False).spec().feedback
    assert "k=0" in str(off.adaptive) and off.adaptive.to_dict()["feedback_docs"] == 0


def test_without_own_marks_the_document_missing_and_copies():
    sig = {"bm25": np.array([1.0, 2.0, 3.0]), "sdr": np.array([0.1, 0.2, 0.3])}
    out = without_own(sig, 1)
    assert np.isnan(out["bm25"][1]) and np.isnan(out["sdr"][1]) and not np.isnan(sig["bm25"][1])
    assert out["bm25"][[0, 2]].tolist() == [1.0, 3.0]
    assert np.array_equal(without_own(sig, None)["sdr"], sig["sdr"])


def test_with_feedback_by_hand():
    first = np.array([1.0, 0.0, -1.0, 0.5])
    a = np.array([9.0, 2.0, 0.0, 1.0])  # feedback document at position 0: its own score is the row's best other, 2
    b = np.array([1.0, 3.0, 1.0, -1.0])  # a feedback document outside the set
    out = with_feedback(first, [a, b], 0.25, [0, None])
    expected = 0.75 * first + 0.25 * np.array([(2 + 1) / 2, (2 + 3) / 2, (0 + 1) / 2, (1 - 1) / 2])
    np.testing.assert_allclose(out, expected)
    np.testing.assert_allclose(with_feedback(first, [a], 0.0, [0]), first)
    np.testing.assert_allclose(with_feedback(first, [], 0.5, []), first)
    with pytest.raises(ValueError):
        with_feedback(first, [a], 0.5, [0, 1])
    with pytest.raises(ValueError):
        with_feedback(first, [a[:3]], 0.5, [None])


def _corpus(rng, n=40):
    ids = [f"d{i:02d}" for i in range(n)]
    sources = {i: {s: rng.normal(size=n) for s in ("bm25", "sdr", "mean")} for i in range(n)}
    for i in range(n):  # a document is most like itself
        for v in sources[i].values():
            v[i] = 10.0
    return ids, sources


def test_hybrid_ranking_with_feedback_matches_the_fusion_by_hand():
    rng = np.random.default_rng(7)
    ids, sources = _corpus(rng)
    paragraphs = rng.integers(1, 30, size=len(ids))
    query = {s: rng.normal(size=len(ids)) for s in ("bm25", "sdr", "mean")}
    spec = HybridSpec("adaptive", adaptive=PARAMS)
    shape = SourceShape(6, 1)
    calls = []

    def feedback(i):
        calls.append(i)
        return sources[i], SourceShape(20, 3)

    used = {}
    got = hybrid_ranking(ids, query, spec, 5, exclude=3, source=shape, paragraphs=paragraphs, feedback=feedback, used=used)
    plain = hybrid_ranking(ids, query, spec.replace(feedback=False), 5, exclude=3, source=shape, paragraphs=paragraphs)
    top = [ids.index(d) for d, _ in plain[:2]]
    assert calls == top and used["feedback"] == {"ids": [ids[i] for i in top], "share": pytest.approx(0.8 * 10 / 16)}
    # by hand: the set grows by each feedback document's top 5; each source fused over it
    head = sorted(set(candidate_set(ids, query, 5, exclude=3)) | {int(j) for i in top
                                                                   for j in candidate_set(ids, sources[i], 5, exclude=3)})
    hid = [ids[i] for i in head]
    sub = lambda sig: {s: v[head] for s, v in sig.items()}  # noqa: E731
    first = fuse(hid, sub(query), spec, source=shape, paragraphs=paragraphs[head]).scores
    rows, own = [], []
    for i in top:
        at = head.index(i) if i in head else None
        rows.append(fuse(hid, without_own(sub(sources[i]), at), spec, source=SourceShape(20, 3),
                         paragraphs=paragraphs[head]).scores)
        own.append(at)
    expected = with_feedback(first, rows, 0.8 * 10 / 16, own)
    by_id = dict(got)
    assert [d for d, _ in got[: len(head)]] == sorted(hid, key=lambda d: (-expected[hid.index(d)], d))
    np.testing.assert_allclose([by_id[d] for d in hid], expected)
    assert len(got) == len(ids) - 1 and ids[3] not in by_id  # every document but the excluded one
    # a long source: no second search at all, the ranking without feedback
    calls.clear()
    long = SourceShape(2000, 100)
    assert hybrid_ranking(ids, query, spec, 5, exclude=3, source=long, paragraphs=paragraphs, feedback=feedback) == \
        hybrid_ranking(ids, query, spec.replace(feedback=False), 5, exclude=3, source=long, paragraphs=paragraphs)
    assert calls == []


def test_turning_feedback_on_restores_what_is_off():
    for off in (AdaptiveParams(feedback_docs=0), AdaptiveParams(feedback_weight=0.0),
                AdaptiveParams(feedback_docs=0, feedback_weight=0.0, feedback_half=4)):
        on = HybridSpec("adaptive", adaptive=off).replace(feedback=True)
        assert on.feedback and on.adaptive.feedback_half == off.feedback_half
        assert on.adaptive.feedback_docs == (off.feedback_docs or ADAPTIVE_HYBRID.adaptive.feedback_docs)
    kept = HybridSpec("adaptive", adaptive=PARAMS).replace(feedback=True)
    assert kept.adaptive == PARAMS  # already on: the spec's own feedback parameters stay
    assert HybridSpec("adaptive", adaptive=PARAMS).replace().adaptive == PARAMS
