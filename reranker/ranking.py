"""The exact stage: every candidate scored by exact SDR against each source, and for hybrid the
signals (BM25 of the source's text, SDR, the mean-vector cosine) fused per query; several sources
combined as the like mean minus the weighted unlike mean; document feedback mixed in by its share.
Pure but for the lexical scores of several sources, which the store computes."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np

from sdr_search.core.fusion import SIGNALS, HybridSpec, SourceShape, fuse, with_feedback, without_own
from sdr_search.core.scoring import like_unlike, mean_vectors, rank
from sdr_search.core.vectors import DocVectors
from sdr_search.indexer.store import DocumentStore, LexicalHits

from .results import Hit, SignalScore, part_scores_of
from .scoring import Scoring
from .sources import Source

__all__ = ["Candidates", "mean_cosines", "rank_hits"]


@dataclass(frozen=True)
class Candidates:
    """The documents to score exactly: their ids (the vector candidates, then the lexical-only
    ones), who scores them (:mod:`.scoring`: from their fetched vectors, or the store next to its
    data), and the BM25 hits of the source's text (None when each source is searched on its own, as
    several sources are)."""

    ids: list[str]
    scoring: Scoring
    lexical: LexicalHits | None = None

    def without(self, doc_id: str) -> "Candidates":
        """These candidates but ``doc_id`` (deleted since it was found: skipped)."""
        return replace(self, ids=[i for i in self.ids if i != doc_id])


def mean_cosines(source: DocVectors, candidates: Sequence[DocVectors] | np.ndarray) -> np.ndarray:
    """Cosine of the source's mean sentence vector with each candidate's (the ``mean`` signal),
    float64, shape ``(D,)``. ``candidates``: their vectors, or their mean vectors already
    (:func:`sdr_search.core.scoring.mean_vectors`, as :meth:`DocumentStore.candidate_features` gives them)."""
    means = candidates if isinstance(candidates, np.ndarray) else mean_vectors(candidates)
    if len(means) == 0:
        return np.zeros(0, dtype=np.float64)
    return (means @ mean_vectors([source])[0]).astype(np.float64)


def rank_hits(
    store: DocumentStore, every: Source, candidates: Candidates, *, n_like: int, unlike_weight: float,
    spec: HybridSpec | None, offset: int, size: int, feedback: int = 0, share: float = 0.0,
) -> list[Hit]:
    """Score the candidates exactly and return the hits ``offset:offset + size``. Each source of
    ``every`` (the ``n_like`` like sources, then the unlike ones) gets its own score, SDR, or
    hybrid: BM25 of its text, its SDR and its mean-vector cosine fused over the candidates; the
    hit's score is :func:`like_unlike` of them (one source: its score). ``feedback``: the last
    that many like sources are feedback documents (hybrid only): the like score is then
    :func:`with_feedback` of the first like source's fused scores and theirs, with ``share``,
    each feedback document's own signals left out of its fusion (:func:`without_own`)."""
    cand_ids, lexical = candidates.ids, candidates.lexical
    if not cand_ids:
        return []
    parts = every.members
    sdr_rows = candidates.scoring.sdr_rows(every, cand_ids)
    if spec is None:
        scores = like_unlike(sdr_rows, n_like, unlike_weight)
        order = rank(cand_ids, scores)[offset : offset + size]
        return [Hit(id=cand_ids[i], score=float(scores[i]), sources=part_scores_of(sdr_rows[:, i], n_like, len(parts)))
                for i in order]
    lexicals = [lexical] if len(parts) == 1 else [
        store.lexical_search(m.document.text, 0, score_ids=cand_ids) for m in parts
    ]
    signals, fused = [], []
    features = candidates.scoring.features(cand_ids)  # paragraph counts and mean vectors
    paragraphs, means = features.n_paragraphs, features.mean_vectors
    user = n_like - feedback  # the like sources the query named
    at = {c: i for i, c in enumerate(cand_ids)}
    own = [at.get(m.indexed_id) for m in parts[user:n_like]]  # a feedback document's place among the candidates
    for p, (m, lex, sdr) in enumerate(zip(parts, lexicals, sdr_rows)):
        part_signals = {
            "bm25": np.asarray([lex.score_of(i) if lex is not None else 0.0 for i in cand_ids], dtype=np.float64),
            "sdr": sdr,
            "mean": mean_cosines(m.vectors, means),
        }
        signals.append(part_signals)
        fused.append(fuse(cand_ids, without_own(part_signals, own[p - user]) if user <= p < n_like else part_signals,
                          spec, source=SourceShape.of(m.document), paragraphs=paragraphs))
    rows = np.stack([f.scores for f in fused])
    liked = with_feedback(rows[:user].mean(axis=0), rows[user:n_like], share, own)  # no feedback: the like mean
    scores = like_unlike(np.vstack([liked[None, :], rows[n_like:]]), 1, unlike_weight)
    hits = []
    for i in rank(cand_ids, scores)[offset : offset + size]:
        detail = {  # each signal of the named like sources (their mean with several); adaptive: the weights used
            name: SignalScore(
                raw=float(np.mean([sig[name][i] for sig in signals[:user]])),
                weight=float(np.mean([f.weights.get(name, 0.0) for f in fused[:user]]))
                if spec.fusion == "adaptive" else float(spec.weights[name]),
                normalised=float(np.mean([f.normalised[name][i] for f in fused[:user]]))
                if name in fused[0].normalised else None)
            for name in SIGNALS
        }
        hits.append(Hit(id=cand_ids[i], score=float(scores[i]), signals=detail,
                        sources=part_scores_of([f.scores[i] for p, f in enumerate(fused) if not user <= p < n_like],
                                               user, len(parts) - feedback)))
    return hits
