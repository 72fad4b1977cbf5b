"""Score fusion math (sdr_search.core.fusion): hand-computed examples and properties."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sdr_search.core.errors import InvalidInputError
from sdr_search.core.fusion import (
    DEFAULT_HYBRID,
    FLAT_TOLERANCE,
    HybridSpec,
    format_weights,
    fuse,
    minmax,
    normalise,
    parse_weights,
    ranks,
    rrf_scores,
    zscore,
)
from sdr_search.core.scoring import rank

pytestmark = pytest.mark.unit


# -- hand-computed examples -------------------------------------------------------------------
def test_minmax_by_hand():
    np.testing.assert_allclose(minmax([1.0, 2.0, 3.0]), [0.0, 0.5, 1.0])
    np.testing.assert_allclose(minmax([4.0, 4.0]), [0.0, 0.0])  # constant: no information
    np.testing.assert_allclose(minmax([1.0, np.nan, 3.0]), [0.0, 0.0, 1.0])  # missing = the worst seen
    np.testing.assert_allclose(minmax([np.nan, np.nan]), [0.0, 0.0])
    assert minmax([]).shape == (0,)


def test_zscore_by_hand():
    sd = math.sqrt(2 / 3)  # population std of 1, 2, 3
    np.testing.assert_allclose(zscore([1.0, 2.0, 3.0]), [-1 / sd, 0.0, 1 / sd])
    np.testing.assert_allclose(zscore([5.0, 5.0, 5.0]), [0.0, 0.0, 0.0])
    # statistics over the present scores (1 and 3: mean 2, std 1); missing gets the lowest's z
    np.testing.assert_allclose(zscore([1.0, np.nan, 3.0]), [-1.0, -1.0, 1.0])
    np.testing.assert_allclose(zscore([np.nan]), [0.0])
    with pytest.raises(ValueError):
        zscore([1.0, np.inf])


def test_zscore_fusion_by_hand():
    ids = ["a", "b", "c"]
    bm25 = [10.0, 0.0, 5.0]  # mean 5, std sqrt(50/3)
    mean = [0.2, 0.9, 0.5]
    out = fuse(ids, {"bm25": bm25, "mean": mean}, HybridSpec("zscore", {"bm25": 1, "mean": 1}))
    zb = np.array([5.0, -5.0, 0.0]) / math.sqrt(50 / 3)
    m = np.array(mean)
    zm = (m - m.mean()) / m.std()
    np.testing.assert_allclose(out.normalised["bm25"], zb)
    np.testing.assert_allclose(out.normalised["mean"], zm)
    np.testing.assert_allclose(out.scores, (zb + zm) / 2)
    np.testing.assert_allclose(out.scores, [0.0311342, 0.0269896, -0.0581238], atol=1e-6)
    assert [ids[i] for i in out.order(ids)] == ["a", "b", "c"]
    # weights are divided by their sum: 3:1 is the same as 0.75:0.25
    w31 = fuse(ids, {"bm25": bm25, "mean": mean}, HybridSpec("zscore", {"bm25": 3, "mean": 1}))
    np.testing.assert_allclose(w31.scores, 0.75 * zb + 0.25 * zm)
    assert set(out.normalised) == {"bm25", "mean"} and out.raw["bm25"].tolist() == bm25


def test_minmax_fusion_by_hand():
    ids = ["a", "b", "c"]
    out = fuse(ids, {"bm25": [10.0, 0.0, 5.0], "sdr": [1.0, 3.0, 2.0]}, HybridSpec("minmax", {"bm25": 1, "sdr": 3}))
    np.testing.assert_allclose(out.scores, [(1.0 + 0.0) / 4, (0.0 + 3.0) / 4, (0.5 + 1.5) / 4])
    assert [ids[i] for i in out.order(ids)] == ["b", "c", "a"]


def test_rrf_by_hand():
    ids = ["a", "b", "c"]
    out = fuse(ids, {"bm25": [3.0, 2.0, 1.0], "mean": [1.0, 3.0, 2.0]}, HybridSpec("rrf", {"bm25": 1, "mean": 1}))
    expected = [1 / 61 + 1 / 63, 1 / 62 + 1 / 61, 1 / 63 + 1 / 62]
    np.testing.assert_allclose(out.scores, expected)
    assert [ids[i] for i in out.order(ids)] == ["b", "a", "c"]
    weighted = fuse(ids, {"bm25": [3.0, 2.0, 1.0], "mean": [1.0, 3.0, 2.0]},
                    HybridSpec("rrf", {"bm25": 2, "mean": 1}, rank_constant=1))
    np.testing.assert_allclose(weighted.scores, [2 / 2 + 1 / 4, 2 / 3 + 1 / 2, 2 / 4 + 1 / 3])
    # a document missing from one list gets nothing from it
    np.testing.assert_allclose(rrf_scores(ids, [np.nan, 5.0, 1.0]), [0.0, 1 / 61, 1 / 62])


def test_ranks_break_ties_by_id_and_skip_missing():
    assert ranks(["b", "a", "c", "d"], [1.0, 1.0, 2.0, np.nan]).tolist() == [3, 2, 1, 0]


def test_a_document_only_one_side_found_can_win():
    # "x" is far ahead lexically and missing from the vector side; "y" leads the vector side
    ids = ["x", "y", "z", "w"]
    bm25 = [50.0, 1.0, 2.0, 1.5]
    vec = [np.nan, 0.9, 0.8, 0.85]
    for fusion in ("zscore", "minmax", "rrf"):
        out = fuse(ids, {"bm25": bm25, "mean": vec}, HybridSpec(fusion, {"bm25": 1, "mean": 1}))
        top = ids[out.order(ids)[0]]
        assert top in ("x", "y"), fusion
    out = fuse(ids, {"bm25": bm25, "mean": vec}, HybridSpec("zscore", {"bm25": 2, "mean": 1}))
    assert ids[out.order(ids)[0]] == "x"


def test_constant_signal_leaves_the_other_to_decide():
    ids = ["c", "a", "b"]
    out = fuse(ids, {"bm25": [7.0, 7.0, 7.0], "mean": [0.1, 0.3, 0.2]}, HybridSpec("zscore", {"bm25": 1, "mean": 1}))
    assert [ids[i] for i in out.order(ids)] == ["a", "b", "c"]
    flat = fuse(ids, {"bm25": [7.0, 7.0, 7.0]}, HybridSpec("minmax", {"bm25": 1}))
    assert [ids[i] for i in flat.order(ids)] == ["a", "b", "c"]  # all tied: by id


def test_fuse_checks_its_inputs():
    spec = HybridSpec("zscore", {"bm25": 1, "sdr": 1})
    with pytest.raises(ValueError, match="sdr"):
        fuse(["a"], {"bm25": [1.0]}, spec)
    with pytest.raises(ValueError, match="2 scores for 1"):
        fuse(["a"], {"bm25": [1.0, 2.0], "sdr": [1.0]}, spec)
    assert fuse([], {"bm25": [], "sdr": []}, spec).scores.shape == (0,)
    # signals with weight 0 are not needed
    assert fuse(["a"], {"bm25": [1.0], "sdr": [2.0]}, HybridSpec("zscore", {"bm25": 1})).normalised.keys() == {"bm25"}


# -- specs and weights ------------------------------------------------------------------------
def test_spec_validation():
    assert HybridSpec().weights == {"bm25": 1.0, "sdr": 1.0, "mean": 1.0} == DEFAULT_HYBRID.weights
    assert DEFAULT_HYBRID.active == ("bm25", "sdr", "mean") and DEFAULT_HYBRID.fusion == "adaptive"
    assert HybridSpec().fusion == "zscore"  # a spec names its fusion; the default spec is adaptive
    with pytest.raises(InvalidInputError, match="fusion"):
        HybridSpec("borda", {"bm25": 1})
    with pytest.raises(InvalidInputError, match="unknown hybrid signal"):
        HybridSpec("zscore", {"tfidf": 1})
    with pytest.raises(InvalidInputError, match=">= 0"):
        HybridSpec("zscore", {"bm25": -1})
    with pytest.raises(InvalidInputError, match=">= 0"):
        HybridSpec("zscore", {"bm25": float("nan")})
    with pytest.raises(InvalidInputError, match="at least one"):
        HybridSpec("zscore", {"bm25": 0, "sdr": 0})
    with pytest.raises(InvalidInputError, match="rank_constant"):
        HybridSpec("rrf", {"bm25": 1}, rank_constant=0)
    assert HybridSpec("rrf", {"sdr": 1}).to_dict() == {"fusion": "rrf", "weights": {"bm25": 0.0, "sdr": 1.0, "mean": 0.0},
                                                       "rank_constant": 60}
    assert DEFAULT_HYBRID.replace(fusion="minmax").weights == DEFAULT_HYBRID.weights


def test_parse_and_format_weights():
    assert parse_weights("bm25=1,mean=1,sdr=0.5") == {"bm25": 1.0, "sdr": 0.5, "mean": 1.0}
    assert parse_weights(" sdr = 2 ") == {"bm25": 0.0, "sdr": 2.0, "mean": 0.0}
    assert parse_weights(format_weights({"bm25": 0.25, "mean": 3})) == {"bm25": 0.25, "sdr": 0.0, "mean": 3.0}
    for bad in ("bm25", "bm25=x", "bm25=1,bm25=2", "", "foo=1", "bm25=-1", "bm25=0"):
        with pytest.raises(InvalidInputError):
            parse_weights(bad)


# -- properties -------------------------------------------------------------------------------
_scores = st.lists(st.floats(-1e3, 1e3, allow_nan=False, width=32), min_size=2, max_size=30)


def _ids(n: int) -> list[str]:
    return [f"d{i:02d}" for i in range(n)]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-1000, 1000), min_size=2, max_size=30), st.floats(0.01, 100), st.floats(-100, 100),
       st.sampled_from(["zscore", "minmax"]), st.data())
def test_normalisation_is_invariant_to_affine_rescaling(x, a, b, method, data):
    x = np.asarray(x, dtype=np.float64) / 4  # well-separated values: rescaling cannot merge them
    y = np.asarray(data.draw(st.lists(st.floats(-1, 1, width=32), min_size=len(x), max_size=len(x))))
    spec = HybridSpec(method, {"bm25": 1.0, "sdr": 0.7})
    ids = _ids(len(x))
    base = fuse(ids, {"bm25": x, "sdr": y}, spec)
    scaled = fuse(ids, {"bm25": a * x + b, "sdr": y}, spec)
    np.testing.assert_allclose(scaled.scores, base.scores, atol=1e-6)


@settings(max_examples=200, deadline=None)
@given(_scores)
def test_minmax_and_zscore_ranges(x):
    x = np.asarray(x, dtype=np.float64)
    mm, z = minmax(x), zscore(x)
    assert np.all((mm >= 0) & (mm <= 1))
    if np.ptp(x) > 1e-6 * max(1.0, np.abs(x).max()):
        assert mm.max() == pytest.approx(1.0) and mm.min() == pytest.approx(0.0)
        assert z.mean() == pytest.approx(0.0, abs=1e-7) and z.std() == pytest.approx(1.0, rel=1e-6)
    # order preserving
    assert np.all(np.diff(mm[np.argsort(x, kind="stable")]) >= -1e-12)
    assert np.all(np.diff(z[np.argsort(x, kind="stable")]) >= -1e-12)


@settings(max_examples=200, deadline=None)
@given(_scores, st.data())
def test_rrf_is_invariant_to_monotone_transforms(x, data):
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(data.draw(st.lists(st.floats(-1, 1, width=32), min_size=len(x), max_size=len(x))))
    ids = _ids(len(x))
    spec = HybridSpec("rrf", {"bm25": 1.0, "mean": 2.0})
    base = fuse(ids, {"bm25": x, "mean": y}, spec)
    warped = fuse(ids, {"bm25": np.arctan(x / 100) * 7 + 3, "mean": y}, spec)
    # arctan may merge nearly-equal floats into ties, so compare only where the ranks survive
    if np.array_equal(ranks(ids, x), ranks(ids, np.arctan(x / 100) * 7 + 3)):
        np.testing.assert_allclose(warped.scores, base.scores)


@settings(max_examples=150, deadline=None)
@given(_scores, st.sampled_from(["zscore", "minmax", "rrf"]), st.floats(0.1, 10))
def test_a_single_signal_ranks_as_itself_and_weight_scale_does_not_matter(x, fusion, c):
    x = np.asarray(x, dtype=np.float64)
    ids = _ids(len(x))
    out = fuse(ids, {"sdr": x}, HybridSpec(fusion, {"sdr": c}))
    expected = rank(ids, x)
    got = out.order(ids)
    # equal up to ties that normalisation may create between nearly-equal floats, and a spread
    # within FLAT_TOLERANCE is no spread (the signal is constant: ties, by id)
    assert np.all(np.diff(x[got]) <= FLAT_TOLERANCE * max(1.0, np.abs(x).max())) and sorted(got) == sorted(expected)


@settings(max_examples=100, deadline=None)
@given(_scores, st.sampled_from(["zscore", "minmax"]))
def test_missing_scores_rank_at_the_bottom_of_their_signal(x, method):
    x = np.asarray(x, dtype=np.float64)
    x[0] = np.nan
    n = normalise(x, method)
    assert n[0] == pytest.approx(np.nanmin(n[1:]) if len(x) > 1 else 0.0)


def test_float32_rounding_is_no_spread():
    # two copies of one document: cosines 1.0 and 1.0000001 (float32 rounding) carry no information
    noisy = np.array([1.0000001192092896, 1.0, 1.0000001192092896])
    np.testing.assert_array_equal(zscore(noisy), np.zeros(3))
    np.testing.assert_array_equal(minmax(noisy), np.zeros(3))
    # a real spread of the same size relative to small scores still counts
    assert zscore([1e-3, 2e-3])[1] == pytest.approx(1.0)
    assert minmax([0.5, 0.5 + 1e-5])[1] == pytest.approx(1.0)
