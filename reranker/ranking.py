"""The exact stage: every candidate scored by exact SDR against each source, and for hybrid the
signals (BM25 of the source's text, SDR, the mean-vector cosine) fused per query; several sources
combined as the like mean minus the weighted unlike mean; document feedback mixed in by its share.
Pure but for the lexical scores of several sources, which the store computes."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping, Sequence

import numpy as np

from sdr_search.core.fusion import SIGNALS, HybridSpec, SourceShape, fuse, with_feedback, without_own
from sdr_search.core.scoring import document_best, like_unlike, mean_vectors, part_scores, rank, sdr_scores
from sdr_search.core.vectors import DocVectors
from sdr_search.indexer.store import CandidateFeatures, DocumentStore, LexicalHits

from .results import Hit, SignalScore, part_scores_of
from .sources import Source

__all__ = ["Candidates", "mean_cosines", "rank_hits"]


@dataclass(frozen=True)
class Candidates:
    """The documents to score exactly: their ids (the vector candidates, then the lexical-only
    ones), their vectors (same order; None when the store scores them itself, ``capabilities.exact_sdr``:
    nothing was fetched), and the BM25 hits of the source's text (None when each source is searched
    on its own, as several sources are)."""

    ids: list[str]
    docs: list[DocVectors] | None
    lexical: LexicalHits | None = None
    exact: Mapping[str, float] | None = None
    """Exact SDR scores the store computed already (the in-store pre-rank of the pool), of source ``exact_for``."""
    exact_for: Any = None
    explained: Mapping[str, Mapping[str, Any]] | None = None
    """Breakdowns of source ``exact_for`` the store returned with those scores (its best hits, those to
    present: ``DocumentStore.sdr_scores`` with ``explain_top``), by id."""

    def breakdowns_for(self, source: Any) -> Mapping[str, Mapping[str, Any]]:
        """The breakdowns of ``source`` the store computed already (empty for another source)."""
        return (self.explained or {}) if source is self.exact_for else {}

    def without(self, doc_id: str) -> "Candidates":
        """These candidates but ``doc_id`` (deleted since it was found: skipped)."""
        kept = [k for k, i in enumerate(self.ids) if i != doc_id]
        return replace(
            self, ids=[self.ids[k] for k in kept], docs=None if self.docs is None else [self.docs[k] for k in kept],
            exact=None if self.exact is None else {i: v for i, v in self.exact.items() if i != doc_id},
            explained=None if self.explained is None else {i: v for i, v in self.explained.items() if i != doc_id})

    def vectors_of(self, ids: Sequence[str]) -> list[DocVectors] | None:
        """The fetched vectors of some of the candidates (the hits to present); None when nothing
        was fetched (the store scores them itself and explains them the same way)."""
        if self.docs is None:
            return None
        fetched = dict(zip(self.ids, self.docs))
        return [fetched[i] for i in ids]


def _sdr_rows(store: DocumentStore, every: Source, candidates: Candidates) -> np.ndarray:
    """Each source's exact SDR score of every candidate, ``(sources, candidates)``: from the
    fetched vectors (one product for every source's paragraphs), or computed by the store next to
    its data (the sdr plugin on OpenSearch) when nothing was fetched."""
    parts = every.members
    if candidates.docs is None:
        return _store_sdr_rows(store, parts, candidates)
    best = document_best(every.vectors, candidates.docs)
    if len(parts) == 1:
        return sdr_scores(best, every.stats)[None, :]
    return part_scores(best, every.stats, every.part_offsets)


def _store_sdr_rows(store: DocumentStore, parts: Sequence[Source], candidates: Candidates) -> np.ndarray:
    """:func:`_sdr_rows` computed by the store: one request for the sources, but the source whose
    scores of the pool the candidate stage has already (``candidates.exact``) asks only for the
    candidates outside the pool (lexical ones)."""
    ids, known = candidates.ids, candidates.exact or {}
    reused = [k for k, m in enumerate(parts) if known and m is candidates.exact_for]
    if not reused:
        return store.sdr_scores([(m.vectors, m.stats) for m in parts], ids).scores
    rows = np.empty((len(parts), len(ids)))
    asked = [k for k in range(len(parts)) if k not in reused]
    if asked:
        rows[asked] = store.sdr_scores([(parts[k].vectors, parts[k].stats) for k in asked], ids).scores
    missing = [i for i in ids if i not in known]
    m = parts[reused[0]]
    more = dict(zip(missing, store.sdr_scores([(m.vectors, m.stats)], missing).scores[0])) if missing else {}
    rows[reused] = [known[i] if i in known else more[i] for i in ids]
    return rows


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
    cand_ids, docs, lexical = candidates.ids, candidates.docs, candidates.lexical
    if not cand_ids:
        return []
    parts = every.members
    sdr_rows = _sdr_rows(store, every, candidates)
    if spec is None:
        scores = like_unlike(sdr_rows, n_like, unlike_weight)
        order = rank(cand_ids, scores)[offset : offset + size]
        return [Hit(id=cand_ids[i], score=float(scores[i]), sources=part_scores_of(sdr_rows[:, i], n_like, len(parts)))
                for i in order]
    lexicals = [lexical] if len(parts) == 1 else [
        store.lexical_search(m.document.text, 0, score_ids=cand_ids) for m in parts
    ]
    signals, fused = [], []
    # paragraph counts and mean vectors: of the fetched vectors, or read alone when the store scored them itself
    features = store.candidate_features(cand_ids) if docs is None else CandidateFeatures.of(docs)
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
