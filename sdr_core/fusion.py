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

The final ranking is by fused score descending, ties by id ascending (:func:`sdr_search.core.scoring.rank`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from .errors import InvalidInputError
from .scoring import rank

__all__ = [
    "SIGNALS",
    "FUSIONS",
    "RRF_RANK_CONSTANT",
    "DEFAULT_HYBRID",
    "HybridSpec",
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
FUSIONS = ("zscore", "minmax", "rrf")
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
class HybridSpec:
    """How to fuse: a normalisation (``zscore``, ``minmax``) or ``rrf``, and a weight per signal.

    Signals left out of ``weights`` weigh 0. Raises :class:`InvalidInputError` for an unknown
    fusion or signal, a negative or non-finite weight, or no positive weight.
    """

    fusion: str = "zscore"
    weights: Mapping[str, float] = field(default_factory=lambda: {"bm25": 1.0, "sdr": 1.0, "mean": 1.0})
    rank_constant: int = RRF_RANK_CONSTANT

    def __post_init__(self) -> None:
        if self.fusion not in FUSIONS:
            raise InvalidInputError(f"unknown fusion {self.fusion!r}; choose from {', '.join(FUSIONS)}")
        if isinstance(self.rank_constant, bool) or not isinstance(self.rank_constant, int) or self.rank_constant < 1:
            raise InvalidInputError(f"rank_constant must be an integer >= 1, got {self.rank_constant!r}")
        object.__setattr__(self, "weights", _check_weights(dict(self.weights)))

    @property
    def active(self) -> tuple[str, ...]:
        """Signals with a weight > 0, in :data:`SIGNALS` order."""
        return tuple(s for s in SIGNALS if self.weights[s] > 0)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"fusion": self.fusion, "weights": dict(self.weights)}
        if self.fusion == "rrf":
            d["rank_constant"] = self.rank_constant
        return d

    def replace(self, *, fusion: str | None = None, weights: Mapping[str, float] | None = None,
                rank_constant: int | None = None) -> "HybridSpec":
        return HybridSpec(
            fusion if fusion is not None else self.fusion,
            weights if weights is not None else self.weights,
            rank_constant if rank_constant is not None else self.rank_constant,
        )


DEFAULT_HYBRID = HybridSpec("zscore", {"bm25": 1.0, "sdr": 1.0, "mean": 1.0})
"""The default hybrid spec (``sdr mlt/eval --method hybrid`` without ``--fusion``/``--weights``,
and the default of ``SDR_FUSION``/``SDR_HYBRID_WEIGHTS``). All three signals, z-scored, at equal
(untuned) weights: on IRLeD dev with the default segmentation this scores above BM25 alone and
above BM25 + mean, and keeps BM25 in the mix for corpora where the encoder is weak (docs/results/relevance.md,
"Which default"). Change it here when a measurement says otherwise."""


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
    ``rrf``: its reciprocal-rank contribution before weighting) and raw score."""

    scores: np.ndarray  # (n,) float64
    normalised: dict[str, np.ndarray]
    raw: dict[str, np.ndarray]

    def order(self, ids: Sequence[str]) -> list[int]:
        """Indices by fused score descending, ties by id ascending."""
        return rank(ids, self.scores)


def fuse(ids: Sequence[str], signals: Mapping[str, np.ndarray | Sequence[float]], spec: HybridSpec) -> Fused:
    """Fuse the ``signals`` (name -> one score per id, NaN = missing) of one query's set.

    Every active signal of ``spec`` must be given; the others are ignored.
    """
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
        else:
            normalised[s] = normalise(x, spec.fusion)
    if spec.fusion == "rrf":  # sum of weighted reciprocal ranks (OpenSearch's RRF), not a mean
        scores = np.zeros(n, dtype=np.float64)
        for s in spec.active:
            scores += spec.weights[s] * normalised[s]
    else:
        scores = combine(normalised, {s: spec.weights[s] for s in spec.active})
    return Fused(scores, normalised, raw)


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
