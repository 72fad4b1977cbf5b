"""Relevance metrics of ``sdr eval`` (SPEC "Evaluation metrics") and TREC qrels/run file helpers.

A *ranking* is the sequence of corpus document ids for one query, best first (for ``sdr eval``:
every other corpus document). *relevant* maps document ids to integer grades as in a TREC qrels
file; only grades ``> 0`` are relevant (the ground-truth set ``G``), other grades are ignored.

Conventions:

- ``rank0`` is the 0-based position in the ranking, ``N`` the ranking's length.
- A relevant document missing from the ranking counts as never retrieved: it adds nothing to
  RR/HR/AP/P/Recall/nDCG, but still counts in their denominators (``|G|``, ideal DCG). For MPR it
  is given ``rank0 = N``, the worst possible percentile (term ``rank0 / N = 1``); with an empty
  ranking every relevant document gets term 1.
- MPR is ``1 - mean(rank0(g) / N)`` over all relevant documents of all queries pooled, not a mean
  of per-query means: :func:`mpr_terms` gives each query's ``(sum, count)`` and
  :func:`mean_percentile_rank` combines them.
- The TREC measures follow trec_eval: AP divides by the number of relevant documents, P@k divides
  by ``k`` even when fewer documents were ranked, nDCG@k uses the grade as gain with discount
  ``log2(rank + 1)`` (1-based rank) and the ideal ranking built from the qrels grades. Unlike
  trec_eval, which sorts a run by score, the given order of the ranking is used as is.
- A ranking must not contain the same id twice (``ValueError``).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from .errors import InputReadError

__all__ = [
    "Qrels",
    "Run",
    "mpr_terms",
    "mean_percentile_rank",
    "reciprocal_rank",
    "hit_rate_at",
    "average_precision",
    "precision_at",
    "recall_at",
    "ndcg_at",
    "evaluate",
    "read_qrels",
    "write_run",
    "read_run",
]

logger = logging.getLogger(__name__)

Qrels = dict[str, dict[str, int]]
Run = dict[str, list[tuple[str, float]]]


# --------------------------------------------------------------------------- per-query core


@dataclass(frozen=True)
class _Judged:
    """A ranking reduced to what the metrics need."""

    n: int  # ranking length N
    hits: tuple[tuple[int, int], ...]  # (rank0, grade) of each relevant doc found, by rank
    ideal: tuple[int, ...]  # positive grades of all relevant docs, highest first

    @property
    def n_relevant(self) -> int:
        return len(self.ideal)


def _judge(ranking: Sequence[str], relevant: Mapping[str, int]) -> _Judged:
    positive = {d: int(g) for d, g in relevant.items() if g > 0}
    n = len(ranking)
    seen: set[str] = set()
    hits: list[tuple[int, int]] = []
    for r0, doc in enumerate(ranking):
        if doc in seen:
            raise ValueError(f"document {doc!r} appears twice in the ranking")
        seen.add(doc)
        grade = positive.get(doc)
        if grade is not None:
            hits.append((r0, grade))
    return _Judged(n=n, hits=tuple(hits), ideal=tuple(sorted(positive.values(), reverse=True)))


def _check_k(k: int) -> int:
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"cutoff k must be an integer >= 1, got {k!r}")
    return k


def _mpr_terms(j: _Judged) -> tuple[float, int]:
    missing = j.n_relevant - len(j.hits)
    total = sum(r0 / j.n for r0, _ in j.hits) + float(missing)
    return total, j.n_relevant


def _rr(j: _Judged) -> float:
    return 1.0 / (1 + j.hits[0][0]) if j.hits else 0.0


def _found_at(j: _Judged, k: int) -> int:
    return sum(1 for r0, _ in j.hits if r0 < k)


def _recall(j: _Judged, k: int) -> float:
    return _found_at(j, k) / j.n_relevant if j.n_relevant else 0.0


def _ap(j: _Judged) -> float:
    if not j.n_relevant:
        return 0.0
    return sum((i + 1) / (r0 + 1) for i, (r0, _) in enumerate(j.hits)) / j.n_relevant


def _precision(j: _Judged, k: int) -> float:
    return _found_at(j, k) / k


def _ndcg(j: _Judged, k: int) -> float:
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(j.ideal[:k]))
    if idcg == 0:
        return 0.0
    dcg = sum(g / math.log2(r0 + 2) for r0, g in j.hits if r0 < k)
    return dcg / idcg


def mpr_terms(ranking: Sequence[str], relevant: Mapping[str, int]) -> tuple[float, int]:
    """One query's share of MPR: ``(sum of rank0(g) / N over relevant g, number of relevant g)``.

    A relevant document missing from the ranking contributes ``1`` (``rank0 = N``, the worst).
    Combine queries with :func:`mean_percentile_rank`.
    """
    return _mpr_terms(_judge(ranking, relevant))


def mean_percentile_rank(terms: Iterable[tuple[float, int]]) -> float:
    """MPR from per-query :func:`mpr_terms`: ``1 - (sum of sums) / (sum of counts)``.

    Raises:
        ValueError: when there is no relevant document at all.
    """
    total, count = 0.0, 0
    for s, c in terms:
        total += s
        count += c
    if count == 0:
        raise ValueError("MPR is undefined without any relevant document")
    return 1.0 - total / count


def reciprocal_rank(ranking: Sequence[str], relevant: Mapping[str, int]) -> float:
    """``1 / (1 + rank0)`` of the best-ranked relevant document; 0 when none is ranked."""
    return _rr(_judge(ranking, relevant))


def hit_rate_at(ranking: Sequence[str], relevant: Mapping[str, int], k: int) -> float:
    """HR@k: ``|G ∩ top-k| / |G|`` (0 when ``G`` is empty)."""
    return _recall(_judge(ranking, relevant), _check_k(k))


def recall_at(ranking: Sequence[str], relevant: Mapping[str, int], k: int) -> float:
    """Recall@k as trec_eval ``recall_k``: ``|G ∩ top-k| / |G|`` (the same quantity as HR@k)."""
    return _recall(_judge(ranking, relevant), _check_k(k))


def average_precision(ranking: Sequence[str], relevant: Mapping[str, int]) -> float:
    """TREC AP: sum of precision at the rank of each retrieved relevant document, over ``|G|``."""
    return _ap(_judge(ranking, relevant))


def precision_at(ranking: Sequence[str], relevant: Mapping[str, int], k: int) -> float:
    """P@k: relevant documents in the top ``k`` over ``k`` (trec_eval divides by ``k`` always)."""
    return _precision(_judge(ranking, relevant), _check_k(k))


def ndcg_at(ranking: Sequence[str], relevant: Mapping[str, int], k: int) -> float:
    """nDCG@k (trec_eval ``ndcg_cut``): gain = grade, discount ``log2(rank + 1)`` with 1-based rank,
    ideal DCG from the positive qrels grades sorted high to low. 0 when ``G`` is empty."""
    return _ndcg(_judge(ranking, relevant), _check_k(k))


# --------------------------------------------------------------------------- whole evaluation


def evaluate(runs: Mapping[str, Sequence[str]], qrels: Mapping[str, Mapping[str, int]]) -> dict:
    """Evaluate rankings ``{qid: [docid, ...]}`` (best first) against ``qrels``.

    Only queries that have both a ranking and at least one relevant document (grade > 0) are
    evaluated; the others are logged and counted in ``skipped_queries`` (present only when > 0):
    run queries without relevant judgments plus judged queries without a ranking.

    Returns:
        ``{"queries": int, "MPR", "MRR", "HR@10", "MAP", "P@10", "Recall@100", "nDCG@10": float}``
        (MPR pooled over all relevant documents, the others means over queries), plus
        ``"skipped_queries": int`` when some were skipped.

    Raises:
        ValueError: no query can be evaluated, or a ranking holds an id twice.
    """
    judged = {q for q, rel in qrels.items() if any(g > 0 for g in rel.values())}
    evaluated = [q for q in runs if q in judged]
    no_qrels = [q for q in runs if q not in judged]
    no_run = sorted(judged.difference(runs))
    if no_qrels:
        logger.warning("%d ranked queries have no relevant judgment and are skipped (e.g. %r)",
                       len(no_qrels), no_qrels[0])
    if no_run:
        logger.warning("%d judged queries have no ranking and are skipped (e.g. %r)", len(no_run), no_run[0])
    if not evaluated:
        raise ValueError(
            f"no query to evaluate: {len(runs)} ranked queries, {len(judged)} judged queries, none in common"
        )

    mpr: list[tuple[float, int]] = []
    sums = {"MRR": 0.0, "HR@10": 0.0, "MAP": 0.0, "P@10": 0.0, "Recall@100": 0.0, "nDCG@10": 0.0}
    for q in evaluated:
        try:
            j = _judge(runs[q], qrels[q])
        except ValueError as e:
            raise ValueError(f"query {q!r}: {e}") from e
        mpr.append(_mpr_terms(j))
        sums["MRR"] += _rr(j)
        sums["HR@10"] += _recall(j, 10)
        sums["MAP"] += _ap(j)
        sums["P@10"] += _precision(j, 10)
        sums["Recall@100"] += _recall(j, 100)
        sums["nDCG@10"] += _ndcg(j, 10)
    n = len(evaluated)
    out: dict = {"queries": n, "MPR": mean_percentile_rank(mpr)}
    out.update({name: total / n for name, total in sums.items()})
    skipped = len(no_qrels) + len(no_run)
    if skipped:
        out["skipped_queries"] = skipped
    return out


# --------------------------------------------------------------------------- files


def _lines(path: str | Path) -> Iterable[tuple[int, str]]:
    try:
        with open(path, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                yield lineno, line
    except UnicodeDecodeError as e:
        raise InputReadError(f"{path}: not UTF-8 text ({e})") from e
    except OSError as e:
        raise InputReadError(f"cannot read {path}: {e.strerror or e}") from e


def read_qrels(path: str | Path) -> Qrels:
    """Read a TREC qrels file (``qid iter docid rel`` per line, whitespace separated).

    Every judgment is kept with its integer grade (only grades > 0 count as relevant in the
    metrics). Blank lines are ignored; the same judgment repeated with the same grade is accepted.

    Raises:
        InputReadError: the file cannot be read, or a line (path and line number in the message)
            does not have four fields, has a non-integer grade, or re-judges a document with a
            different grade.
    """
    qrels: Qrels = {}
    for lineno, line in _lines(path):
        fields = line.split()
        if not fields:
            continue
        if len(fields) != 4:
            raise InputReadError(f"{path}:{lineno}: expected 'qid iter docid rel', got {line.strip()!r}")
        qid, _, docid, rel_text = fields
        try:
            rel = int(rel_text)
        except ValueError:
            raise InputReadError(f"{path}:{lineno}: relevance {rel_text!r} is not an integer") from None
        judged = qrels.setdefault(qid, {})
        if judged.get(docid, rel) != rel:
            raise InputReadError(
                f"{path}:{lineno}: query {qid!r} document {docid!r} judged again with a different grade"
            )
        judged[docid] = rel
    return qrels


def _check_token(kind: str, value: str) -> str:
    if not isinstance(value, str) or not value or any(c.isspace() for c in value):
        raise ValueError(f"{kind} {value!r} cannot be written in a TREC run (empty or with whitespace)")
    return value


def write_run(path: str | Path, run: Mapping[str, Sequence[tuple[str, float]]], tag: str) -> None:
    """Write ``{qid: [(docid, score), ...]}`` as TREC run lines ``qid Q0 docid rank score tag``.

    Ranks are 1-based in the order given (not re-sorted by score); scores are written with full
    float precision. Queries are written in mapping order.

    Raises:
        ValueError: a qid, docid or tag is empty or contains whitespace, or a score is not finite.
    """
    _check_token("tag", tag)
    lines: list[str] = []
    for qid, ranking in run.items():
        _check_token("query id", qid)
        for rank, (docid, score) in enumerate(ranking, 1):
            _check_token("document id", docid)
            score = float(score)
            if not math.isfinite(score):
                raise ValueError(f"query {qid!r} document {docid!r}: score {score} is not finite")
            lines.append(f"{qid} Q0 {docid} {rank} {score!r} {tag}\n")
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(lines)


def read_run(path: str | Path) -> Run:
    """Read a TREC run file into ``{qid: [(docid, score), ...]}``, each list in rank-column order.

    Ties in the rank column keep file order. (trec_eval itself orders by score; files written by
    :func:`write_run` are in the same order either way when scores are non-increasing.) Blank
    lines are ignored.

    Raises:
        InputReadError: the file cannot be read, or a line (path and line number in the message)
            does not have six fields, has a non-integer rank or non-numeric score, or repeats a
            document for the same query.
    """
    rows: dict[str, list[tuple[int, int, str, float]]] = {}
    seen: set[tuple[str, str]] = set()
    for lineno, line in _lines(path):
        fields = line.split()
        if not fields:
            continue
        if len(fields) != 6:
            raise InputReadError(
                f"{path}:{lineno}: expected 'qid Q0 docid rank score tag', got {line.strip()!r}"
            )
        qid, _, docid, rank_text, score_text, _ = fields
        try:
            rank = int(rank_text)
            score = float(score_text)
        except ValueError:
            raise InputReadError(f"{path}:{lineno}: bad rank {rank_text!r} or score {score_text!r}") from None
        if (qid, docid) in seen:
            raise InputReadError(f"{path}:{lineno}: query {qid!r} lists document {docid!r} twice")
        seen.add((qid, docid))
        rows.setdefault(qid, []).append((rank, lineno, docid, score))
    return {qid: [(d, s) for _, _, d, s in sorted(r)] for qid, r in rows.items()}
