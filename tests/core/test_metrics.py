"""Metrics of ``sdr eval`` against hand-computed values, plus TREC qrels/run file helpers."""

from __future__ import annotations

import math
import random

import pytest

from sdr_search.core.errors import InputReadError
from sdr_search.core.metrics import (
    average_precision,
    evaluate,
    hit_rate_at,
    mean_percentile_rank,
    mpr_terms,
    ndcg_at,
    precision_at,
    read_qrels,
    read_run,
    recall_at,
    reciprocal_rank,
    write_run,
)

pytestmark = pytest.mark.unit

# Query A: N = 5; G = {d2 (grade 1), d4 (grade 2), d9 (grade 1, never ranked)}; d3 judged 0 (not
# relevant). d2 has rank0 1 (1-based rank 2), d4 has rank0 3 (rank 4).
RANK_A = ["d1", "d2", "d3", "d4", "d5"]
REL_A = {"d2": 1, "d4": 2, "d9": 1, "d3": 0}
# Query B: N = 3; G = {x}, ranked first.
RANK_B = ["x", "y", "z"]
REL_B = {"x": 1}

L3 = math.log2(3)
L5 = math.log2(5)


def test_mpr_terms_pool_found_and_missing_documents():
    # d2: 1/5 = 0.2; d4: 3/5 = 0.6; d9 missing -> rank0 = N -> 5/5 = 1.0; sum 1.8 over 3 docs.
    s, c = mpr_terms(RANK_A, REL_A)
    assert c == 3
    assert s == pytest.approx(1.8)
    # B: x at rank0 0 -> 0/3 = 0, one doc.
    assert mpr_terms(RANK_B, REL_B) == (0.0, 1)


def test_mean_percentile_rank_pools_over_documents_not_queries():
    # Pooled: 1 - (1.8 + 0) / (3 + 1) = 0.55. (A mean of per-query MPRs would be
    # ((1 - 0.6) + (1 - 0)) / 2 = 0.7.)
    assert mean_percentile_rank([mpr_terms(RANK_A, REL_A), mpr_terms(RANK_B, REL_B)]) == pytest.approx(0.55)


def test_mpr_with_empty_ranking_is_worst_and_without_relevant_is_an_error():
    # Empty ranking: every relevant doc is missing -> term 1 each -> MPR = 1 - 2/2 = 0.
    assert mpr_terms([], {"a": 1, "b": 3}) == (2.0, 2)
    assert mean_percentile_rank([mpr_terms([], {"a": 1, "b": 3})]) == 0.0
    with pytest.raises(ValueError):
        mean_percentile_rank([(0.0, 0)])


def test_reciprocal_rank():
    # Best-ranked relevant doc of A is d2 at rank0 1 -> 1 / (1 + 1) = 0.5.
    assert reciprocal_rank(RANK_A, REL_A) == pytest.approx(0.5)
    assert reciprocal_rank(RANK_B, REL_B) == 1.0
    # The only judged doc has grade 0 -> nothing relevant ranked -> 0.
    assert reciprocal_rank(RANK_A, {"d1": 0, "zz": 1}) == 0.0


def test_hit_rate_and_recall():
    # top-2 = {d1, d2}: 1 of |G| = 3 -> 1/3; top-4 adds d4 -> 2/3; d9 never found.
    assert hit_rate_at(RANK_A, REL_A, 2) == pytest.approx(1 / 3)
    assert hit_rate_at(RANK_A, REL_A, 4) == pytest.approx(2 / 3)
    assert hit_rate_at(RANK_A, REL_A, 1) == 0.0
    assert recall_at(RANK_A, REL_A, 3) == pytest.approx(1 / 3)
    assert recall_at(RANK_A, REL_A, 100) == pytest.approx(2 / 3)


def test_average_precision_divides_by_all_relevant():
    # Precision at d2 (rank 2) = 1/2, at d4 (rank 4) = 2/4; sum 1.0; / |G| = 3 -> 1/3.
    assert average_precision(RANK_A, REL_A) == pytest.approx(1 / 3)
    # Ranking [r, n, r] with G = {r1, r2}: (1/1 + 2/3) / 2 = 5/6.
    assert average_precision(["r1", "n", "r2"], {"r1": 1, "r2": 1}) == pytest.approx(5 / 6)


def test_precision_divides_by_k_even_for_short_rankings():
    # P@2: {d2} -> 1/2. P@10 with only 5 ranked: 2 found / 10 = 0.2 (trec_eval convention).
    assert precision_at(RANK_A, REL_A, 2) == pytest.approx(0.5)
    assert precision_at(RANK_A, REL_A, 10) == pytest.approx(0.2)


def test_ndcg_uses_grades_and_ideal_from_qrels():
    # @3: DCG = d2 (grade 1, rank 2) = 1/log2(3); d4 is at rank 4, cut off.
    #     IDCG over grades [2, 1, 1] = 2/log2(2) + 1/log2(3) + 1/log2(4) = 2 + 1/log2(3) + 0.5.
    idcg = 2 + 1 / L3 + 0.5
    assert ndcg_at(RANK_A, REL_A, 3) == pytest.approx((1 / L3) / idcg)
    # @5: DCG = 1/log2(3) + 2/log2(5) (d4 grade 2 at rank 4); same IDCG (only 3 relevant).
    assert ndcg_at(RANK_A, REL_A, 5) == pytest.approx((1 / L3 + 2 / L5) / idcg)
    assert ndcg_at(RANK_A, REL_A, 5) == pytest.approx(0.476626, abs=1e-6)  # 1.49228 / 3.13093
    # Perfect order of B -> 1.
    assert ndcg_at(RANK_B, REL_B, 10) == 1.0
    # Swapping grades: grade-2 doc first beats grade-1 doc first.
    assert ndcg_at(["a", "b"], {"a": 2, "b": 1}, 2) == 1.0
    assert ndcg_at(["b", "a"], {"a": 2, "b": 1}, 2) < 1.0


@pytest.mark.parametrize("k", [0, -1, 2.5, True])
def test_bad_cutoff_is_rejected(k):
    with pytest.raises(ValueError):
        precision_at(RANK_A, REL_A, k)


def test_duplicate_in_ranking_is_rejected():
    with pytest.raises(ValueError, match="twice"):
        average_precision(["a", "b", "a"], {"a": 1})


def test_evaluate_hand_computed_two_queries():
    out = evaluate({"A": RANK_A, "B": RANK_B}, {"A": REL_A, "B": REL_B})
    assert set(out) == {"queries", "MPR", "MRR", "HR@10", "MAP", "P@10", "Recall@100", "nDCG@10"}
    assert out["queries"] == 2 and isinstance(out["queries"], int)
    assert out["MPR"] == pytest.approx(0.55)  # pooled, see above
    assert out["MRR"] == pytest.approx((0.5 + 1) / 2)  # 0.75
    assert out["HR@10"] == pytest.approx((2 / 3 + 1) / 2)  # A finds 2 of 3 in its 5 ranked
    assert out["MAP"] == pytest.approx((1 / 3 + 1) / 2)
    assert out["P@10"] == pytest.approx((2 / 10 + 1 / 10) / 2)  # 0.15
    assert out["Recall@100"] == pytest.approx((2 / 3 + 1) / 2)
    ndcg_a = (1 / L3 + 2 / L5) / (2 + 1 / L3 + 0.5)
    assert out["nDCG@10"] == pytest.approx((ndcg_a + 1) / 2)
    for key in out:
        if key != "queries":
            assert isinstance(out[key], float)


def test_evaluate_skips_outside_the_intersection_and_counts_them():
    runs = {"A": RANK_A, "B": RANK_B, "no-qrels": ["x"], "zero-only": ["x", "y"]}
    qrels = {"A": REL_A, "B": REL_B, "no-run": {"x": 1}, "zero-only": {"x": 0}}
    out = evaluate(runs, qrels)
    assert out["queries"] == 2
    # no-qrels (run only) + zero-only (no grade > 0) + no-run (qrels only) = 3
    assert out["skipped_queries"] == 3
    assert out["MAP"] == pytest.approx(evaluate({"A": RANK_A, "B": RANK_B}, {"A": REL_A, "B": REL_B})["MAP"])


def test_evaluate_empty_intersection_is_an_error():
    with pytest.raises(ValueError, match="no query"):
        evaluate({"A": RANK_A}, {"B": REL_B})
    with pytest.raises(ValueError):
        evaluate({}, {})


def test_evaluate_names_the_query_with_a_duplicate():
    with pytest.raises(ValueError, match="'B'"):
        evaluate({"A": RANK_A, "B": ["x", "x"]}, {"A": REL_A, "B": REL_B})


# --------------------------------------------------------------------------- files


def test_read_qrels(tmp_path):
    p = tmp_path / "qrels.txt"
    p.write_text("q1 0 d1 1\n\nq1 0 d2 0\n  \nq2 0 d3 2\nq1 0 d1 1\n", encoding="utf-8")
    assert read_qrels(p) == {"q1": {"d1": 1, "d2": 0}, "q2": {"d3": 2}}


@pytest.mark.parametrize(
    "bad",
    ["q1 0 d1\n", "q1 0 d1 1 extra\n", "q1 0 d1 yes\n", "q1 0 d1 1.5\n", "q1 0 d1 2\n"],
)
def test_read_qrels_malformed_line_names_path_and_line(tmp_path, bad):
    p = tmp_path / "qrels.txt"
    p.write_text("q1 0 d1 1\n\n" + bad, encoding="utf-8")  # bad line is line 3
    with pytest.raises(InputReadError) as ei:
        read_qrels(p)
    assert f"{p}:3" in str(ei.value)


def test_read_qrels_missing_file(tmp_path):
    with pytest.raises(InputReadError, match="missing"):
        read_qrels(tmp_path / "missing.txt")


def test_write_run_format_and_round_trip(tmp_path):
    p = tmp_path / "run.txt"
    # Order given is kept even though scores are not sorted.
    run = {"q1": [("d2", 0.9), ("d1", 0.95), ("d3", -1.25)], "q2": [("x", 1)]}
    write_run(p, run, "sdr")
    assert p.read_text(encoding="utf-8").splitlines() == [
        "q1 Q0 d2 1 0.9 sdr",
        "q1 Q0 d1 2 0.95 sdr",
        "q1 Q0 d3 3 -1.25 sdr",
        "q2 Q0 x 1 1.0 sdr",
    ]
    assert read_run(p) == {"q1": [("d2", 0.9), ("d1", 0.95), ("d3", -1.25)], "q2": [("x", 1.0)]}


def test_write_run_keeps_full_score_precision(tmp_path):
    p = tmp_path / "run.txt"
    score = 0.1234567890123
    write_run(p, {"q": [("a", score)]}, "t")
    assert read_run(p)["q"][0][1] == score


def test_read_run_orders_by_rank_column(tmp_path):
    p = tmp_path / "run.txt"
    p.write_text("q Q0 b 2 0.5 t\nq Q0 c 3 0.1 t\n\nq Q0 a 1 0.9 t\n", encoding="utf-8")
    assert [d for d, _ in read_run(p)["q"]] == ["a", "b", "c"]


@pytest.mark.parametrize("bad", ["q Q0 a 1 0.5\n", "q Q0 a one 0.5 t\n", "q Q0 a 1 high t\n", "q Q0 z 2 0.1 t\n"])
def test_read_run_malformed_line(tmp_path, bad):
    p = tmp_path / "run.txt"
    p.write_text("q Q0 z 1 0.9 t\n" + bad, encoding="utf-8")  # bad line is line 2
    with pytest.raises(InputReadError, match=":2:"):
        read_run(p)


@pytest.mark.parametrize(
    "run, tag",
    [
        ({"q": [("a b", 1.0)]}, "t"),
        ({"q 1": [("a", 1.0)]}, "t"),
        ({"q": [("", 1.0)]}, "t"),
        ({"q": [("a", 1.0)]}, "my tag"),
        ({"q": [("a", float("nan"))]}, "t"),
    ],
)
def test_write_run_rejects_unwritable_values(tmp_path, run, tag):
    p = tmp_path / "run.txt"
    with pytest.raises(ValueError):
        write_run(p, run, tag)


# --------------------------------------------------------------------------- cross-check


def _random_case(seed: int):
    rng = random.Random(seed)
    docs = [f"D{i:03d}" for i in range(300)]
    qrels, runs = {}, {}
    for q in range(25):
        qid = f"Q{q}"
        judged = rng.sample(docs, 30)
        rel = {d: rng.choice([0, 0, 1, 2, 3]) for d in judged}
        rel[judged[0]] = rng.choice([1, 2, 3])  # at least one relevant
        qrels[qid] = rel
        # Rank a random subset so some relevant documents are never retrieved.
        runs[qid] = rng.sample(docs, rng.randint(50, 280))
    return runs, qrels


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_trec_measures_match_pytrec_eval(seed):
    pytrec_eval = pytest.importorskip("pytrec_eval")
    runs, qrels = _random_case(seed)
    # Strictly decreasing scores, so trec_eval's score sort reproduces the given order.
    scored = {q: {d: float(len(r) - i) for i, d in enumerate(r)} for q, r in runs.items()}
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, {"map", "P_10", "recall_100", "ndcg_cut_10", "recip_rank"})
    ref = evaluator.evaluate(scored)
    for q in runs:
        assert average_precision(runs[q], qrels[q]) == pytest.approx(ref[q]["map"], abs=1e-9)
        assert precision_at(runs[q], qrels[q], 10) == pytest.approx(ref[q]["P_10"], abs=1e-9)
        assert recall_at(runs[q], qrels[q], 100) == pytest.approx(ref[q]["recall_100"], abs=1e-9)
        assert ndcg_at(runs[q], qrels[q], 10) == pytest.approx(ref[q]["ndcg_cut_10"], abs=1e-9)
        assert reciprocal_rank(runs[q], qrels[q]) == pytest.approx(ref[q]["recip_rank"], abs=1e-9)
    out = evaluate(runs, qrels)
    n = len(runs)
    assert out["MAP"] == pytest.approx(sum(v["map"] for v in ref.values()) / n, abs=1e-9)
    assert out["nDCG@10"] == pytest.approx(sum(v["ndcg_cut_10"] for v in ref.values()) / n, abs=1e-9)
