"""Score fusion for hybrid "more like this": per-query normalisation, weighted combination, and
reciprocal-rank fusion. Pure functions on numpy arrays (no I/O, no logging).

A query's *set* is the documents being fused (the union of the lexical and the vector
candidates). Each *signal* gives one score per document of the set:

- ``bm25``: the lexical BM25 score of the whole source text;
- ``sdr``: the exact SDR score;
- ``mean``: the cosine of the source's and the document's mean sentence vectors (one vector per
  document).

Normalisations, per query and per signal, over the set (as OpenSearch's
``normalization-processor`` defines ``min_max`` and ``z_score``, with the differences noted):

- ``minmax``: ``(s - min) / (max - min)``. OpenSearch turns a normalised 0 into 0.001 and gives
  1.0 when ``max == min``; here 0 stays 0 and a constant signal normalises to 0 everywhere.
- ``zscore``: ``(s - mean) / std`` with the population std (``ddof=0``). OpenSearch uses the
  sample std (Apache Commons ``DescriptiveStatistics``) and floors negative z-scores at 0.001,
  because its ``arithmetic_mean`` skips negative scores; here negative z-scores are kept, so a
  document far below average on one signal is penalised. Every signal is normalised over the same
  set, so ``n`` vs ``n - 1`` scales all signals alike and does not change the ranking. A
  constant signal (std 0) normalises to 0 everywhere: it cannot tell documents apart, so it adds
  nothing.
- combination: the weighted arithmetic mean ``sum_i w_i x_i / sum_i w_i`` over signals with
  ``w_i > 0`` (OpenSearch's ``arithmetic_mean`` with ``weights``; OpenSearch requires weights that
  sum to 1, here they are divided by their sum).
- ``rrf``: reciprocal-rank fusion, ``sum_i w_i / (rank_constant + rank_i(d))``, ``rank_i`` the
  1-based rank of ``d`` in signal ``i`` over the set (score descending, ties by id ascending),
  ``rank_constant`` 60 by default (Cormack et al. 2009; OpenSearch's default).

Missing scores: NaN means "this signal has no score for this document" (e.g. a lexical backend
that only reports its top hits). For ``minmax``/``zscore`` the statistics use the present scores,
and a missing document gets the normalised value of the signal's lowest present score (it ranks
as the worst document that signal saw; OpenSearch uses 0, which is the minimum for ``min_max`` and
the mean for ``z_score``). For ``rrf`` a missing document gets no contribution from that signal
(standard RRF over ranked lists). A signal with no present score contributes 0 everywhere. In the
engine every signal is computed for every document of the set, so NaN only appears when a
backend cannot score a document.

Adaptive fusion (``fusion="adaptive"``): z-score normalisation as above, with weights set per
query from the source's shape (its number of sentences, :class:`SourceShape`) and each signal's own
evidence over the set (how far its top documents stand out), by :func:`adaptive_weights` with the
few parameters of :class:`AdaptiveParams`; the spec's weights multiply the adaptive ones (0 still
leaves a signal out). docs/scoring.md ("Adaptive fusion") gives the formula and why.

The final ranking is by fused score descending, ties by id ascending (:func:`sdr_search.core.scoring.rank`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

import numpy as np

from .errors import InvalidInputError
from .scoring import rank

__all__ = [
    "SIGNALS",
    "FUSIONS",
    "RRF_RANK_CONSTANT",
    "DEFAULT_HYBRID",
    "DEFAULT_FIXED_HYBRID",
    "ADAPTIVE_HYBRID",
    "HybridSpec",
    "SourceShape",
    "AdaptiveParams",
    "adaptive_weights",
    "length_corrected",
    "FEEDBACK_MIN_SHARE",
    "feedback_share",
    "without_own",
    "with_feedback",
    "Fused",
    "parse_weights",
    "format_weights",
    "minmax",
    "zscore",
    "normalise",
    "ranks",
    "rrf_scores",
    "combine",
    "fuse",
    "METHODS",
    "check_search_defaults",
]

SIGNALS = ("bm25", "sdr", "mean")
METHODS = ("sdr", "hybrid")
"""Ranking methods of the engine: exact SDR over the vector candidates, or hybrid fusion."""
FUSIONS = ("zscore", "minmax", "rrf", "adaptive")
RRF_RANK_CONSTANT = 60


def _check_weights(weights: Mapping[str, Any]) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, value in weights.items():
        if name not in SIGNALS:
            raise InvalidInputError(f"unknown hybrid signal {name!r}; choose from {', '.join(SIGNALS)}")
        try:
            w = float(value)
        except (TypeError, ValueError) as e:
            raise InvalidInputError(f"weight of {name!r} must be a number, got {value!r}") from e
        if not math.isfinite(w) or w < 0:
            raise InvalidInputError(f"weight of {name!r} must be a finite number >= 0, got {value!r}")
        out[name] = w
    if not any(w > 0 for w in out.values()):
        raise InvalidInputError(f"hybrid weights need at least one signal with a weight > 0 (signals: {', '.join(SIGNALS)})")
    return {s: out.get(s, 0.0) for s in SIGNALS}


@dataclass(frozen=True)
class SourceShape:
    """What the source of a query is: its number of sentences and of SDR paragraphs."""

    sentences: int
    paragraphs: int = 1

    def __post_init__(self) -> None:
        for name in ("sentences", "paragraphs"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"{name} must be an integer >= 0, got {v!r}")

    @classmethod
    def of(cls, doc: Any) -> "SourceShape":
        """The shape of a segmented document (anything with ``paragraphs``, a sequence of
        sentence sequences, e.g. :class:`sdr_search.core.documents.Document`)."""
        paragraphs = [p for p in doc.paragraphs if len(p)]
        return cls(sentences=sum(len(p) for p in paragraphs), paragraphs=len(paragraphs))

    @property
    def kind(self) -> str:
        """``"one paragraph"`` or ``"several paragraphs"``: how ``sdr eval`` groups queries when it
        reports the weights it used."""
        return "one paragraph" if self.paragraphs <= 1 else "several paragraphs"


@dataclass(frozen=True)
class AdaptiveParams:
    """The parameters of :func:`adaptive_weights` (docs/scoring.md, "Adaptive fusion").

    - ``half_sentences`` (``n0``): the source length, in sentences, at which BM25 and SDR get the
      same prior weight; shorter sources lean to BM25, longer ones to SDR;
    - ``mean_weight`` (``m``): the prior share of the single-vector cosine;
    - ``evidence_power`` (``g``): how much each signal's evidence (the mean z-score of its top
      ``evidence_top`` documents over the set) scales its weight; 0 ignores the evidence;
    - ``length_correction`` (``c``): before it is normalised, the SDR signal of a candidate of
      ``n`` paragraphs becomes ``SDR - c sqrt(2 ln n)`` (:func:`length_corrected`); 0 leaves SDR
      as it is;
    - document feedback: ``feedback_docs`` (``k``), ``feedback_weight`` (``f``) and
      ``feedback_half`` (``h``): the top ``k`` documents of the query's ranking become further
      sources, whose fused scores take the share ``f h / (h + n)`` of the final score
      (:func:`feedback_share`, :func:`with_feedback`); a short source leans on them, a long one
      hardly (below :data:`FEEDBACK_MIN_SHARE` not at all). ``k = 0`` or ``f = 0`` turns it off.
    """

    half_sentences: float = 32.0
    mean_weight: float = 0.0
    evidence_power: float = 0.0
    evidence_top: int = 10
    length_correction: float = 0.375
    feedback_docs: int = 3
    feedback_weight: float = 1.0
    feedback_half: float = 8.0

    def __post_init__(self) -> None:
        for name in ("half_sentences", "mean_weight", "evidence_power", "length_correction", "feedback_weight",
                     "feedback_half"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise InvalidInputError(f"adaptive {name} must be a finite number >= 0, got {v!r}")
            object.__setattr__(self, name, float(v))
        if self.half_sentences <= 0:
            raise InvalidInputError(f"adaptive half_sentences must be > 0, got {self.half_sentences!r}")
        if self.mean_weight >= 1:
            raise InvalidInputError(f"adaptive mean_weight must be < 1, got {self.mean_weight!r}")
        if isinstance(self.evidence_top, bool) or not isinstance(self.evidence_top, int) or self.evidence_top < 1:
            raise InvalidInputError(f"adaptive evidence_top must be an integer >= 1, got {self.evidence_top!r}")
        if isinstance(self.feedback_docs, bool) or not isinstance(self.feedback_docs, int) or not 0 <= self.feedback_docs <= 10:
            raise InvalidInputError(f"adaptive feedback_docs must be an integer from 0 to 10, got {self.feedback_docs!r}")
        if self.feedback_weight > 1:
            raise InvalidInputError(f"adaptive feedback_weight must be <= 1, got {self.feedback_weight!r}")
        if self.feedback_half <= 0:
            raise InvalidInputError(f"adaptive feedback_half must be > 0, got {self.feedback_half!r}")

    def __str__(self) -> str:
        return (f"n0={self.half_sentences:g},m={self.mean_weight:g},g={self.evidence_power:g}"
                + (f",top={self.evidence_top}" if self.evidence_top != 10 else "")
                + f",c={self.length_correction:g}"
                + (f",k={self.feedback_docs},f={self.feedback_weight:g},h={self.feedback_half:g}"
                   if self.has_feedback else ",k=0"))

    def to_dict(self) -> dict[str, float]:
        return {"half_sentences": self.half_sentences, "mean_weight": self.mean_weight,
                "evidence_power": self.evidence_power, "evidence_top": self.evidence_top,
                "length_correction": self.length_correction, "feedback_docs": self.feedback_docs,
                "feedback_weight": self.feedback_weight, "feedback_half": self.feedback_half}

    @property
    def has_feedback(self) -> bool:
        """Whether document feedback is on: ``feedback_docs`` and ``feedback_weight`` above 0."""
        return self.feedback_docs > 0 and self.feedback_weight > 0

    def without_feedback(self) -> "AdaptiveParams":
        """These parameters with document feedback off (``feedback_docs = 0``)."""
        return replace(self, feedback_docs=0)

    @staticmethod
    def grid(length_correction: float = 0.375) -> list["AdaptiveParams"]:
        """The candidates the cross-validation of ``bench/adaptive_fusion.py`` chooses from (45),
        each with ``length_correction`` and without document feedback (``bench/experiments/feedback.py``
        chooses that on top of the chosen weights)."""
        return [AdaptiveParams(n0, m, g, length_correction=length_correction, feedback_docs=0) for n0 in (8.0, 16.0, 32.0, 64.0, 128.0)
                for m in (0.0, 0.1, 0.25) for g in (0.0, 1.0, 2.0)]


def length_corrected(sdr: np.ndarray | Sequence[float], paragraphs: np.ndarray | Sequence[int], c: float) -> np.ndarray:
    """``sdr - c * sqrt(2 ln n)`` per candidate, ``n`` its number of paragraphs (at least 1).

    An SDR score averages, over the source's paragraphs, the best z-scored match among the
    candidate's paragraphs; a maximum over ``n`` draws grows like ``sqrt(2 ln n)`` (the expected
    maximum of ``n`` standard normal scores), so a long candidate scores higher by chance alone.
    BM25 normalises for document length; SDR as defined does not. ``c`` scales the correction
    (0: none). Pure; NaN (a missing score) stays NaN."""
    x = np.asarray(sdr, dtype=np.float64)
    n = np.asarray(paragraphs, dtype=np.float64)
    if n.shape != x.shape:
        raise ValueError(f"{x.size} SDR scores but {n.size} paragraph counts")
    return x - float(c) * np.sqrt(2.0 * np.log(np.maximum(n, 1.0)))


FEEDBACK_MIN_SHARE = 0.2
"""Below this share the feedback documents are not searched at all. With the shipped ``f = 1,
h = 8`` that is a source of more than 32 sentences: there document feedback gained nothing on
IRLeD dev (full sources 0.402 with it, 0.403 without), while the second search more than doubled
a query's time (docs/results/relevance.md, "Document feedback for short sources")."""


def feedback_share(source: SourceShape | None, params: AdaptiveParams) -> float:
    """The share of the final score that the feedback documents take for a source of ``n``
    sentences: ``f h / (h + n)`` (``f`` = ``feedback_weight``, ``h`` = ``feedback_half``; an
    unknown shape counts as ``n = h``); 0 when feedback is off or the share is below
    :data:`FEEDBACK_MIN_SHARE`."""
    if not params.has_feedback:
        return 0.0
    h = params.feedback_half
    n = float(source.sentences) if source is not None else h
    share = params.feedback_weight * h / (h + n)
    return share if share >= FEEDBACK_MIN_SHARE else 0.0


def without_own(signals: Mapping[str, np.ndarray | Sequence[float]], own: int | None) -> dict[str, np.ndarray]:
    """``signals`` with position ``own`` missing (NaN): a feedback document's scores against
    itself say nothing about it, and its outlying self-scores would flatten everyone else's
    normalised scores."""
    out = {s: np.array(v, dtype=np.float64) for s, v in signals.items()}
    if own is not None:
        for v in out.values():
            v[own] = np.nan
    return out


def with_feedback(first: np.ndarray | Sequence[float], feedback: Sequence[np.ndarray | Sequence[float]], share: float,
                  own: Sequence[int | None]) -> np.ndarray:
    """The final scores of a query with document feedback: ``(1 - share) * first + share *`` the
    mean of the feedback documents' fused scores ``feedback`` (one row each, over the same set as
    ``first``). A feedback document's own row has no score for itself (``own[j]``, its position in
    the set, or None when it is not in the set); there it counts as that row's best other document,
    so the feedback neither sinks it nor lifts it above the others. Pure."""
    first = np.asarray(first, dtype=np.float64)
    if len(feedback) == 0 or share <= 0:
        return first.copy()
    if len(own) != len(feedback):
        raise ValueError(f"{len(feedback)} feedback rows but {len(own)} own positions")
    rows = []
    for row, at in zip(feedback, own):
        row = np.array(row, dtype=np.float64)
        if row.shape != first.shape:
            raise ValueError(f"a feedback row has {row.size} scores for {first.size} documents")
        if at is not None and row.size > 1:
            row[at] = np.max(np.delete(row, at))
        rows.append(row)
    return (1.0 - share) * first + share * np.mean(rows, axis=0)


def _evidence(z: np.ndarray, top: int) -> float:
    """The mean of the ``top`` highest z-scores, floored at 0."""
    if z.size == 0:
        return 0.0
    k = min(top, z.size)
    return max(0.0, float(np.mean(np.partition(z, z.size - k)[z.size - k:])))


def adaptive_weights(
    signals: Mapping[str, np.ndarray | Sequence[float]], source: SourceShape | None, params: AdaptiveParams,
    base: Mapping[str, float] | None = None,
) -> dict[str, float]:
    """The per-query weights of adaptive fusion (they sum to 1), from the raw ``signals`` over the
    fused set (name -> one score per document, NaN = missing), the ``source``'s shape and ``params``:

    - prior, from the source's ``n`` sentences: ``bm25 (1 - m) n0 / (n0 + n)``,
      ``sdr (1 - m) n / (n0 + n)``, ``mean m``; without a ``source`` (unknown shape) ``n = n0``;
    - evidence: each prior times ``e_i ** g``, ``e_i`` the mean z-score of signal ``i``'s top
      ``evidence_top`` documents over the set (floored at 0);
    - times ``base`` (the spec's weights; 0 leaves a signal out), then divided by the sum. If
      every evidence is 0, the evidence is ignored.

    Signals missing from ``signals`` (or with base weight 0) get weight 0.
    """
    n0 = params.half_sentences
    n = float(source.sentences) if source is not None else n0
    m = params.mean_weight
    prior = {"bm25": (1 - m) * n0 / (n0 + n), "sdr": (1 - m) * n / (n0 + n), "mean": m}
    base = {s: 1.0 for s in SIGNALS} if base is None else base
    present = [s for s in SIGNALS if s in signals and float(base.get(s, 0.0)) > 0]
    w = {s: prior[s] * float(base.get(s, 0.0)) if s in present else 0.0 for s in SIGNALS}
    if params.evidence_power > 0:
        ev = {s: _evidence(zscore(signals[s]), params.evidence_top) for s in present}
        scaled = {s: w[s] * ev.get(s, 0.0) ** params.evidence_power for s in SIGNALS}
        if sum(scaled.values()) > 0:
            w = scaled
    total = sum(w.values())
    if total <= 0:  # e.g. only mean present with m = 0: fall back to equal weights
        w = {s: (1.0 if s in present else 0.0) for s in SIGNALS}
        total = sum(w.values()) or 1.0
    return {s: w[s] / total for s in SIGNALS}


ADAPTIVE_PARAMS = AdaptiveParams()
"""The shipped adaptive parameters: ``n0 = 32`` sentences, no mean-vector share, no evidence term.
Every fold of the 5-fold cross-validation on IRLeD dev (full and short sources) chose ``n0 = 32,
m = 0``; the evidence power (0, 1 or 2) changed nothing measurable, so it is left out
(docs/results/relevance.md, "Adaptive fusion: full and short sources"). Document feedback
``k = 3, f = 1, h = 8``: the best point of ``bench/experiments/feedback.py``'s grid on all queries and the
choice of most folds (better on short sources, full sources level: docs/results/relevance.md,
"Document feedback for short sources")."""


@dataclass(frozen=True)
class HybridSpec:
    """How to fuse: a normalisation (``zscore``, ``minmax``), ``rrf``, or ``adaptive`` (z-score with
    per-query weights, :func:`adaptive_weights` with ``adaptive``), and a weight per signal (for
    ``adaptive``: a multiplier of the adaptive weight).

    Signals left out of ``weights`` weigh 0. Raises :class:`InvalidInputError` for an unknown
    fusion or signal, a negative or non-finite weight, or no positive weight.
    """

    fusion: str = "zscore"
    weights: Mapping[str, float] = field(default_factory=lambda: {"bm25": 1.0, "sdr": 1.0, "mean": 1.0})
    rank_constant: int = RRF_RANK_CONSTANT
    adaptive: AdaptiveParams = ADAPTIVE_PARAMS

    def __post_init__(self) -> None:
        if self.fusion not in FUSIONS:
            raise InvalidInputError(f"unknown fusion {self.fusion!r}; choose from {', '.join(FUSIONS)}")
        if isinstance(self.rank_constant, bool) or not isinstance(self.rank_constant, int) or self.rank_constant < 1:
            raise InvalidInputError(f"rank_constant must be an integer >= 1, got {self.rank_constant!r}")
        if not isinstance(self.adaptive, AdaptiveParams):
            raise InvalidInputError(f"adaptive must be AdaptiveParams, got {self.adaptive!r}")
        object.__setattr__(self, "weights", _check_weights(dict(self.weights)))

    @property
    def active(self) -> tuple[str, ...]:
        """Signals with a weight > 0, in :data:`SIGNALS` order."""
        return tuple(s for s in SIGNALS if self.weights[s] > 0)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"fusion": self.fusion, "weights": dict(self.weights)}
        if self.fusion == "rrf":
            d["rank_constant"] = self.rank_constant
        if self.fusion == "adaptive":
            d["adaptive"] = self.adaptive.to_dict()
        return d

    def replace(self, *, fusion: str | None = None, weights: Mapping[str, float] | None = None,
                rank_constant: int | None = None, adaptive: AdaptiveParams | None = None,
                feedback: bool | None = None) -> "HybridSpec":
        """A copy with the given values; ``feedback`` turns adaptive fusion's document feedback
        off (False) or on with the shipped feedback parameters (True); None keeps it as it is."""
        adaptive = adaptive if adaptive is not None else self.adaptive
        if feedback is False:
            adaptive = adaptive.without_feedback()
        elif feedback is True and not adaptive.has_feedback:
            adaptive = replace(adaptive, feedback_docs=adaptive.feedback_docs or ADAPTIVE_PARAMS.feedback_docs,
                               feedback_weight=adaptive.feedback_weight or ADAPTIVE_PARAMS.feedback_weight)
        return HybridSpec(
            fusion if fusion is not None else self.fusion,
            weights if weights is not None else self.weights,
            rank_constant if rank_constant is not None else self.rank_constant,
            adaptive,
        )

    @property
    def feedback(self) -> bool:
        """Whether this spec applies document feedback (adaptive fusion with ``feedback_docs``
        and ``feedback_weight`` above 0)."""
        return self.fusion == "adaptive" and self.adaptive.has_feedback


DEFAULT_FIXED_HYBRID = HybridSpec("zscore", {"bm25": 1.0, "sdr": 1.0, "mean": 1.0})
"""The fixed-weight hybrid: all three signals, z-scored, at equal (untuned) weights
(``--fusion zscore``; the default before adaptive fusion)."""

ADAPTIVE_HYBRID = HybridSpec("adaptive", {"bm25": 1.0, "sdr": 1.0, "mean": 1.0})
"""Adaptive fusion of all three signals with the cross-validated :data:`ADAPTIVE_PARAMS`."""

DEFAULT_HYBRID = ADAPTIVE_HYBRID
"""The default hybrid spec (``sdr mlt/eval --method hybrid`` without ``--fusion``/``--weights``,
and the default of ``SDR_FUSION``/``SDR_HYBRID_WEIGHTS``). docs/results/relevance.md ("Which
default", "Adaptive fusion: full and short sources") gives the measurements behind it. Change it
here when a measurement says otherwise."""


def parse_weights(text: str) -> dict[str, float]:
    """``"bm25=1,mean=1,sdr=0.5"`` -> ``{"bm25": 1.0, "mean": 1.0, "sdr": 0.5}`` (validated)."""
    out: dict[str, float] = {}
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        name, sep, value = part.partition("=")
        name = name.strip()
        if not sep:
            raise InvalidInputError(f"weights must look like 'bm25=1,mean=1,sdr=0.5', got {text!r}")
        if name in out:
            raise InvalidInputError(f"weight of {name!r} given twice in {text!r}")
        try:
            out[name] = float(value)
        except ValueError as e:
            raise InvalidInputError(f"weight of {name!r} must be a number, got {value.strip()!r}") from e
    if not out:
        raise InvalidInputError("weights are empty; give e.g. 'bm25=1,mean=1'")
    return _check_weights(out)


def format_weights(weights: Mapping[str, float]) -> str:
    """Inverse of :func:`parse_weights` (``"bm25=1,sdr=0,mean=1"``)."""
    return ",".join(f"{s}={float(weights.get(s, 0.0)):g}" for s in SIGNALS)


# -- normalisation ------------------------------------------------------------------------------
def _as_scores(scores: np.ndarray | Sequence[float]) -> np.ndarray:
    x = np.asarray(scores, dtype=np.float64)
    if x.ndim != 1:
        raise ValueError(f"scores must be 1-D, got shape {x.shape}")
    if np.any(np.isinf(x)):
        raise ValueError("scores must be finite (NaN marks a missing score)")
    return x


FLAT_TOLERANCE = 1e-6
"""A signal whose spread over a set is at most this much relative to its size is constant there.
Signals come from float32 vectors (rounding near 1.2e-7 relative): two copies of one document can
get cosines of 1.0 and 1.0000001, and normalising that spread would turn rounding into a full-scale
difference between them."""


def _flat(spread: float, *levels: float) -> bool:
    return spread <= FLAT_TOLERANCE * max(1.0, *(abs(v) for v in levels))


def minmax(scores: np.ndarray | Sequence[float]) -> np.ndarray:
    """``(s - min) / (max - min)`` over the present scores; missing (NaN) -> 0; constant (within
    :data:`FLAT_TOLERANCE`) -> 0."""
    x = _as_scores(scores)
    present = ~np.isnan(x)
    out = np.zeros_like(x)
    if not present.any():
        return out
    lo, hi = float(x[present].min()), float(x[present].max())
    if not _flat(hi - lo, lo, hi):
        out[present] = (x[present] - lo) / (hi - lo)
    return out


def zscore(scores: np.ndarray | Sequence[float]) -> np.ndarray:
    """``(s - mean) / std`` (population std) over the present scores; missing (NaN) -> the
    z-score of the lowest present score; constant (within :data:`FLAT_TOLERANCE`) -> 0."""
    x = _as_scores(scores)
    present = ~np.isnan(x)
    out = np.zeros_like(x)
    if not present.any():
        return out
    v = x[present]
    mu = float(v.mean())
    sd = float(np.sqrt(np.mean(np.square(v - mu))))
    if _flat(sd, mu):
        return out
    out[present] = (v - mu) / sd
    out[~present] = (float(v.min()) - mu) / sd
    return out


def normalise(scores: np.ndarray | Sequence[float], method: str) -> np.ndarray:
    """:func:`zscore` or :func:`minmax` by name."""
    if method == "zscore":
        return zscore(scores)
    if method == "minmax":
        return minmax(scores)
    raise InvalidInputError(f"unknown normalisation {method!r}; choose zscore or minmax")


def ranks(ids: Sequence[str], scores: np.ndarray | Sequence[float]) -> np.ndarray:
    """1-based rank of each document by score descending, ties by id ascending; missing (NaN)
    documents get rank 0 (unranked)."""
    x = _as_scores(scores)
    if len(ids) != x.size:
        raise ValueError(f"need one score per id: {len(ids)} ids, {x.size} scores")
    present = np.flatnonzero(~np.isnan(x))
    out = np.zeros(x.size, dtype=np.int64)
    order = rank([ids[i] for i in present], x[present])
    out[present[order]] = np.arange(1, len(order) + 1)
    return out


def rrf_scores(ids: Sequence[str], scores: np.ndarray | Sequence[float], rank_constant: int = RRF_RANK_CONSTANT) -> np.ndarray:
    """``1 / (rank_constant + rank)`` per document; 0 for a missing (NaN) one."""
    r = ranks(ids, scores)
    return np.where(r > 0, 1.0 / (rank_constant + np.maximum(r, 1)), 0.0)


def combine(normalised: Mapping[str, np.ndarray], weights: Mapping[str, float]) -> np.ndarray:
    """Weighted arithmetic mean of the normalised signals with a weight > 0."""
    active = [s for s, w in weights.items() if w > 0]
    if not active:
        raise InvalidInputError("no signal has a weight > 0")
    total = float(sum(weights[s] for s in active))
    out = np.zeros_like(np.asarray(normalised[active[0]], dtype=np.float64))
    for s in active:
        out += float(weights[s]) * np.asarray(normalised[s], dtype=np.float64)
    return out / total


@dataclass(frozen=True)
class Fused:
    """The fused score of every document and, per active signal, its normalised score (for
    ``rrf``: its reciprocal-rank contribution before weighting) and raw score; ``weights``: the
    weight each signal got, divided by their sum (for ``adaptive``: this query's weights)."""

    scores: np.ndarray  # (n,) float64
    normalised: dict[str, np.ndarray]
    raw: dict[str, np.ndarray]
    weights: dict[str, float] = field(default_factory=dict)

    def order(self, ids: Sequence[str]) -> list[int]:
        """Indices by fused score descending, ties by id ascending."""
        return rank(ids, self.scores)


def fuse(ids: Sequence[str], signals: Mapping[str, np.ndarray | Sequence[float]], spec: HybridSpec, *,
         source: SourceShape | None = None, weights: Mapping[str, float] | None = None,
         paragraphs: np.ndarray | Sequence[int] | None = None) -> Fused:
    """Fuse the ``signals`` (name -> one score per id, NaN = missing) of one query's set.

    Every active signal of ``spec`` must be given; the others are ignored. ``source``: the shape
    of the query's source, used by ``adaptive`` fusion (None: unknown, a neutral length prior).
    ``weights``: for ``adaptive``, use these weights instead of computing them (e.g. the weights
    of the query's candidate set, reused for the documents outside it). ``paragraphs``: each
    document's number of paragraphs, which ``adaptive`` fusion with a ``length_correction``
    needs for SDR (:func:`length_corrected`; ``raw`` keeps the uncorrected SDR).
    """
    correction = spec.adaptive.length_correction if spec.fusion == "adaptive" and "sdr" in spec.active else 0.0
    if correction > 0 and paragraphs is None:
        raise ValueError("adaptive fusion with a length correction needs each document's paragraph count")
    n = len(ids)
    normalised: dict[str, np.ndarray] = {}
    raw: dict[str, np.ndarray] = {}
    for s in spec.active:
        if s not in signals:
            raise ValueError(f"signal {s!r} has weight {spec.weights[s]} but was not computed")
        x = _as_scores(signals[s])
        if x.size != n:
            raise ValueError(f"signal {s!r} has {x.size} scores for {n} documents")
        raw[s] = x
        if spec.fusion == "rrf":
            normalised[s] = rrf_scores(ids, x, spec.rank_constant)
        elif spec.fusion == "adaptive":
            normalised[s] = zscore(length_corrected(x, paragraphs, correction) if s == "sdr" and correction > 0 else x)
        else:
            normalised[s] = normalise(x, spec.fusion)
    if spec.fusion == "adaptive":
        if weights is None:
            weights = adaptive_weights(raw, source, spec.adaptive, base=spec.weights)
        used = {s: float(weights.get(s, 0.0)) for s in spec.active}
        if not any(w > 0 for w in used.values()):
            used = {s: 1.0 for s in spec.active}
    else:
        used = {s: float(spec.weights[s]) for s in spec.active}
    total = sum(used.values())
    shares = {s: used.get(s, 0.0) / total for s in SIGNALS}
    if spec.fusion == "rrf":  # sum of weighted reciprocal ranks (OpenSearch's RRF), not a mean
        scores = np.zeros(n, dtype=np.float64)
        for s in spec.active:
            scores += spec.weights[s] * normalised[s]
    else:
        scores = combine(normalised, {s: w for s, w in used.items() if w > 0} or used)
    return Fused(scores, normalised, raw, shares)


def check_search_defaults(defaults: Mapping[str, Any]) -> dict[str, Any]:
    """Validate an index's search defaults (any of ``method``, ``fusion``, ``weights`` (signal ->
    weight), ``rank_constant``) and return them normalised (weights with every signal).
    Raises :class:`InvalidInputError`."""
    allowed = {"method", "fusion", "weights", "rank_constant"}
    unknown = set(defaults) - allowed
    if unknown:
        raise InvalidInputError(f"unknown search default {sorted(unknown)[0]!r}; choose from {', '.join(sorted(allowed))}")
    if defaults.get("weights") is not None and not isinstance(defaults["weights"], Mapping):
        raise InvalidInputError(f"weights must map signals to numbers, got {defaults['weights']!r}")
    out: dict[str, Any] = {}
    if defaults.get("method") is not None:
        if defaults["method"] not in METHODS:
            raise InvalidInputError(f"unknown method {defaults['method']!r}; choose from {', '.join(METHODS)}")
        out["method"] = defaults["method"]
    probe = DEFAULT_HYBRID.replace(
        fusion=defaults.get("fusion"),
        weights=_check_weights(dict(defaults["weights"])) if defaults.get("weights") is not None else None,
        rank_constant=defaults.get("rank_constant"),
    )  # validates fusion and rank_constant
    for key in ("fusion", "weights", "rank_constant"):
        if defaults.get(key) is not None:
            out[key] = probe.to_dict()[key] if key != "rank_constant" else probe.rank_constant
    return out
