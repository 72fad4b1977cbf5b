"""Exhaustive ranking of a whole corpus for every query, with the methods of ``sdr eval``.

Methods:

- ``sdr``: exact SDR (SPEC eq. 4-6) against every corpus document, each source paragraph
  normalised with statistics over all corpus paragraphs (``stats="exact"``, which comes for free
  here since the query is scored against every paragraph anyway) or over a recorded reference
  sample (``stats="sampled"``).
- ``sdr-nonorm``: the paper's "No normalization" ablation.
- ``mean``: one vector per document, the mean of its sentence vectors; cosine.
- ``bm25``: BM25 (bm25s), the whole query document as the query.
- ``hybrid``: BM25, SDR and the single-vector cosine fused per query (:mod:`sdr_search.core.fusion`) over
  the candidate set the engine would rerank: the union of each signal's top K (BM25 top K u SDR
  top K u mean top K). The set is ranked by the fused score; the documents outside it follow,
  fused among themselves (:func:`hybrid_ranking`). Adaptive fusion's document feedback scores a
  short query's top documents as further sources, with every corpus paragraph but their own in
  their statistics (docs/scoring.md "Document feedback").

A query whose id is also in the corpus is removed from its own ranking, and its own paragraphs are
left out of its normalisation statistics.

Short sources (``sdr eval --source-cut``): :func:`cut_source` cuts every query document to its
first N sentences, as one paragraph (``sentences:N``), or to its first N SDR paragraphs
(``paragraphs:N``), after segmentation; the qrels stay the same. ``sentences:9`` (the median SDR
paragraph of the IRLeD corpus under the default segmentation has 9 sentences) is the short-source
dev set of docs/results/relevance.md.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Callable, Mapping, Sequence

import numpy as np

from .documents import Document
from .errors import InvalidInputError
from .fusion import DEFAULT_HYBRID, SIGNALS, HybridSpec, SourceShape, feedback_share, fuse, with_feedback, without_own
from .scoring import NormStats, document_max, paragraph_scores, rank, sdr_scores, stats_from_paragraph_scores
from .stats import ReferenceSample, SampledParagraphs, draw_reference_sample, sample_vectors, stats_against_sample
from .vectors import CorpusVectors, DocVectors

__all__ = [
    "METHODS", "VECTOR_METHODS", "HYBRID_SIGNALS", "Ranking", "sdr_rank_scores", "mean_vectors", "candidate_set",
    "FeedbackSignals", "hybrid_ranking", "signal_scorers", "rank_all", "SOURCE_CUT_UNITS", "SourceCut", "parse_source_cut", "cut_source", "weights_by_kind",
]

logger = logging.getLogger(__name__)

METHODS = ("sdr", "sdr-nonorm", "mean", "bm25", "hybrid")
VECTOR_METHODS = ("sdr", "sdr-nonorm", "mean", "hybrid")
HYBRID_SIGNALS = ("bm25", "sdr", "mean")  # every one of them feeds the candidate set

Ranking = list[tuple[str, float]]

SOURCE_CUT_UNITS = ("sentences", "paragraphs")


@dataclass(frozen=True)
class SourceCut:
    """Keep a source's first ``n`` sentences (as one paragraph) or its first ``n`` SDR paragraphs."""

    unit: str
    n: int

    def __post_init__(self) -> None:
        if self.unit not in SOURCE_CUT_UNITS:
            raise InvalidInputError(f"unknown source cut unit {self.unit!r}; choose from {', '.join(SOURCE_CUT_UNITS)}")
        if isinstance(self.n, bool) or not isinstance(self.n, int) or self.n < 1:
            raise InvalidInputError(f"a source cut keeps at least 1 {self.unit[:-1]}, got {self.n!r}")

    def __str__(self) -> str:
        return f"{self.unit}:{self.n}"


def parse_source_cut(text: str | None) -> SourceCut | None:
    """``"sentences:9"`` / ``"paragraphs:1"`` -> :class:`SourceCut`; ``None``, ``""`` or ``"full"``
    -> ``None`` (the whole source). Raises :class:`InvalidInputError`."""
    if text is None or str(text).strip() in ("", "full"):
        return None
    unit, sep, n = str(text).strip().partition(":")
    if not sep or not n.strip().isdigit():
        raise InvalidInputError(f"a source cut looks like 'sentences:9' or 'paragraphs:1', got {text!r}")
    return SourceCut(unit.strip(), int(n))


def cut_source(doc: Document, cut: SourceCut | None) -> Document:
    """``doc`` cut to a short source (pure; same id, title and metadata).

    ``sentences:N``: its first N sentences in reading order, as one paragraph (a single-paragraph
    source, whatever the segmentation merged). ``paragraphs:N``: its first N SDR paragraphs. A
    document already within the cut is returned as is; ``cut=None`` returns ``doc``.
    """
    if cut is None:
        return doc
    if cut.unit == "paragraphs":
        if len(doc.paragraphs) <= cut.n:
            return doc
        return replace(doc, paragraphs=tuple(doc.paragraphs[: cut.n]))
    sentences = doc.sentences[: cut.n]
    if len(doc.paragraphs) == 1 and len(sentences) == doc.n_sentences:
        return doc
    return replace(doc, paragraphs=(tuple(sentences),))


def sdr_rank_scores(
    source: DocVectors,
    corpus: CorpusVectors,
    *,
    normalise: bool = True,
    sample: SampledParagraphs | None = None,
    exclude_doc: int | None = None,
) -> np.ndarray:
    """Exact SDR score of ``source`` against every corpus document (shape ``(D,)``).

    With ``sample`` (built once by :func:`sample_vectors`) the statistics come from the reference
    sample; otherwise from every corpus
    paragraph except those of ``exclude_doc``.
    """
    P = paragraph_scores(source, corpus)
    stats: NormStats | None = None
    if normalise:
        if sample is not None:
            stats = stats_against_sample(source, sample, exclude_doc=exclude_doc)
        else:
            exclude = None
            if exclude_doc is not None:
                exclude = corpus.paragraph_doc() == exclude_doc
            stats = stats_from_paragraph_scores(P, exclude=exclude)
    return sdr_scores(document_max(P, corpus.doc_par_offsets), stats)


def mean_vectors(corpus: CorpusVectors) -> np.ndarray:
    """One L2-normalised vector per document: the mean of its sentence vectors."""
    sent_doc_offsets = corpus.par_offsets[corpus.doc_par_offsets]
    sums = np.add.reduceat(corpus.vectors, sent_doc_offsets[:-1], axis=0)
    norms = np.linalg.norm(sums, axis=1, keepdims=True)
    return (sums / np.maximum(norms, 1e-12)).astype(np.float32)


def _ranking(ids: Sequence[str], scores: np.ndarray, exclude: int | None, depth: int | None) -> Ranking:
    order = rank(ids, scores)
    out = [(ids[i], float(scores[i])) for i in order if i != exclude]
    return out[:depth] if depth else out


def candidate_set(ids: Sequence[str], signals: Mapping[str, np.ndarray], k: int, *, exclude: int | None = None) -> np.ndarray:
    """Sorted indices of the union of every signal's top ``k`` (score descending, ties by id),
    without ``exclude``."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    pool = np.asarray([i for i in range(len(ids)) if i != exclude], dtype=np.int64)
    chosen: set[int] = set()
    for scores in signals.values():
        sub = np.asarray(scores, dtype=np.float64)[pool]
        chosen.update(int(pool[i]) for i in rank([ids[j] for j in pool], sub)[:k])
    return np.asarray(sorted(chosen), dtype=np.int64)


FeedbackSignals = Callable[[int], tuple[Mapping[str, np.ndarray], SourceShape]]
"""A corpus position -> that document's signals as a source (one score per corpus document) and
its shape: what document feedback needs of a feedback document."""


def hybrid_ranking(
    ids: Sequence[str], signals: Mapping[str, np.ndarray], spec: HybridSpec, k: int, *,
    exclude: int | None = None, depth: int | None = None, source: SourceShape | None = None,
    used: dict | None = None, paragraphs: np.ndarray | Sequence[int] | None = None,
    feedback: FeedbackSignals | None = None,
) -> Ranking:
    """Rank every document (but ``exclude``) for one query by fusing ``signals`` (name -> one
    score per id) as the hybrid engine does: the candidate set is the union of each signal's top
    ``k`` (:func:`candidate_set`), normalised and fused over itself; the other documents follow,
    fused among themselves. Their scores are shifted below the set's lowest so that the scores of
    the ranking descend (a TREC run file is sorted by score).

    ``source``: the query source's shape (for ``adaptive`` fusion). The weights are those of the
    candidate set, and the documents outside it are fused with the same weights. ``used``, when
    given, receives them (``used["weights"]``: signal -> weight, summing to 1; with document
    feedback also ``used["feedback"]``: the feedback ids and their share). ``paragraphs``: each
    document's number of paragraphs (for adaptive fusion's length correction of SDR).

    ``feedback``: adaptive fusion's document feedback (:func:`sdr_search.core.fusion.feedback_share`),
    as the engine applies it: the top ``feedback_docs`` of the ranking without feedback become
    further sources (``feedback(position)`` gives their signals); the candidate set grows by each
    one's top ``k``, each is fused over the set with its own shape, and the set is ranked by
    :func:`sdr_search.core.fusion.with_feedback`. The documents outside the set keep the order of
    the query's own fusion."""
    share = feedback_share(source, spec.adaptive) if feedback is not None and spec.fusion == "adaptive" else 0.0
    plain = spec.replace(adaptive=spec.adaptive.without_feedback()) if spec.fusion == "adaptive" else spec
    head = candidate_set(ids, signals, k, exclude=exclude)
    fb: list[tuple[int, Mapping[str, np.ndarray], SourceShape]] = []
    if share > 0:
        first = hybrid_ranking(ids, signals, plain, k, exclude=exclude, depth=spec.adaptive.feedback_docs,
                               source=source, paragraphs=paragraphs)
        position = {d: i for i, d in enumerate(ids)}
        for doc_id, _ in first:
            fb_signals, fb_shape = feedback(position[doc_id])
            fb.append((position[doc_id], fb_signals, fb_shape))
        head = np.union1d(head, np.concatenate([candidate_set(ids, x, k, exclude=exclude) for _, x, _ in fb]))
    in_head = np.zeros(len(ids), dtype=bool)
    in_head[head] = True
    if exclude is not None:
        in_head[exclude] = True  # neither head nor tail
    tail = np.flatnonzero(~in_head)
    lengths = None if paragraphs is None else np.asarray(paragraphs)
    out: Ranking = []
    floor = None
    weights = None
    for block in (head, tail):
        if block.size == 0:
            continue
        block_ids = [ids[i] for i in block]
        fused = fuse(block_ids, {s: np.asarray(v, dtype=np.float64)[block] for s, v in signals.items()}, plain,
                     source=source, weights=weights, paragraphs=None if lengths is None else lengths[block])
        scores = fused.scores
        if weights is None:
            weights = fused.weights
            if used is not None:
                used["weights"] = dict(weights)
            if fb:
                at = {int(i): j for j, i in enumerate(block)}
                rows = [fuse(block_ids, without_own({s: np.asarray(v, dtype=np.float64)[block] for s, v in x.items()},
                                                    at.get(pos)),
                             plain, source=shape, paragraphs=None if lengths is None else lengths[block]).scores
                        for pos, x, shape in fb]
                scores = with_feedback(scores, rows, share, [at.get(pos) for pos, _, _ in fb])
                if used is not None:
                    used["feedback"] = {"ids": [ids[pos] for pos, _, _ in fb], "share": share}
        if floor is not None:  # the tail goes below the head
            scores = scores - scores.max() + floor - 1.0
        order = rank(block_ids, scores)
        out += [(block_ids[i], float(scores[i])) for i in order]
        floor = float(scores.min())
        if depth and len(out) >= depth:
            break
    return out[:depth] if depth else out


@dataclass
class EvalInputs:
    corpus_docs: list[Document]
    query_docs: list[Document]
    corpus_vectors: CorpusVectors | None = None
    query_vectors: list[DocVectors] | None = None


def signal_scorers(
    names: Sequence[str],
    inputs: EvalInputs,
    *,
    stats: str = "exact",
    sample_size: int = 5000,
    seed: int = 0,
    on_sample: Callable[[ReferenceSample], None] | None = None,
) -> dict[str, Callable[[int, Document], np.ndarray]]:
    """For each method or signal in ``names`` (``sdr``, ``sdr-nonorm``, ``mean``, ``bm25``) a
    function ``(query position, query document) -> one score per corpus document``. A position of
    None scores a corpus document as the source (``q`` one of ``inputs.corpus_docs``; document
    feedback), with its own vectors and without its own paragraphs in the statistics."""
    ids = [d.id for d in inputs.corpus_docs]
    position = {doc_id: k for k, doc_id in enumerate(ids)}
    scorers: dict[str, Callable[[int, Document], np.ndarray]] = {}
    if stats not in ("exact", "sampled"):
        raise ValueError(f"unknown stats mode {stats!r}")
    if "bm25" in names:
        from .lexical import BM25Ranker

        ranker = BM25Ranker()
        ranker.fit(ids, [d.text for d in inputs.corpus_docs])
        scorers["bm25"] = lambda k, q: ranker.scores(q.text)
    vector_names = [n for n in names if n != "bm25"]
    if not vector_names:
        return scorers
    corpus = inputs.corpus_vectors
    if corpus is None or inputs.query_vectors is None:
        raise ValueError(f"{', '.join(vector_names)} need corpus and query vectors")
    if tuple(ids) != corpus.ids:
        raise ValueError("corpus vectors do not match the corpus documents")
    query_vectors = inputs.query_vectors
    if "mean" in names:
        doc_means = mean_vectors(corpus)
        q_means = [mean_vectors(CorpusVectors.from_docs(["q"], [qv]))[0] for qv in query_vectors]
        scorers["mean"] = lambda k, q: doc_means @ (q_means[k] if k is not None else doc_means[position[q.id]])
    sample = None
    if "sdr" in names and stats == "sampled":
        drawn = draw_reference_sample(corpus, sample_size, seed=seed)
        if on_sample:
            on_sample(drawn)
        sample = sample_vectors(corpus, drawn)
    for name, normalise in (("sdr", True), ("sdr-nonorm", False)):
        if name in names:
            def score(k: int, q: Document, normalise: bool = normalise) -> np.ndarray:
                vectors = query_vectors[k] if k is not None else corpus.doc(position[q.id])
                return sdr_rank_scores(vectors, corpus, normalise=normalise,
                                       sample=sample if normalise else None, exclude_doc=position.get(q.id))
            scorers[name] = score
    unknown = set(names) - set(scorers)
    if unknown:
        raise ValueError(f"unknown signal {sorted(unknown)[0]!r}")
    return scorers


def rank_all(
    method: str,
    inputs: EvalInputs,
    *,
    stats: str = "exact",
    sample_size: int = 5000,
    seed: int = 0,
    depth: int | None = None,
    progress: bool = False,
    on_sample: Callable[[ReferenceSample], None] | None = None,
    hybrid: HybridSpec | None = None,
    candidates: int = 100,
    weights_used: dict[str, dict[str, float]] | None = None,
) -> dict[str, Ranking]:
    """Rank every corpus document for every query with ``method``; returns ``{qid: ranking}``.

    ``hybrid`` (default :data:`sdr_search.core.fusion.DEFAULT_HYBRID`) and ``candidates`` (K, the top K
    of each signal that make the candidate set) apply to ``method="hybrid"``; the fusion gets each
    query's shape (:meth:`SourceShape.of`), and ``weights_used``, when given, receives each
    query's fusion weights (qid -> signal -> weight; see :func:`weights_by_kind`).
    """
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose from {', '.join(METHODS)}")
    ids = [d.id for d in inputs.corpus_docs]
    position = {doc_id: k for k, doc_id in enumerate(ids)}
    names = HYBRID_SIGNALS if method == "hybrid" else (method,)
    scorers = signal_scorers(names, inputs, stats=stats, sample_size=sample_size, seed=seed, on_sample=on_sample)
    spec = hybrid or DEFAULT_HYBRID
    paragraphs = np.asarray([len(d.paragraphs) for d in inputs.corpus_docs], dtype=np.int64)

    def feedback(i: int) -> tuple[dict[str, np.ndarray], SourceShape]:  # corpus document i as a source
        doc = inputs.corpus_docs[i]
        return {name: np.asarray(fn(None, doc), dtype=np.float64) for name, fn in scorers.items()}, SourceShape.of(doc)

    runs: dict[str, Ranking] = {}
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(inputs.query_docs), unit="query", desc=f"ranking ({method})")
    try:
        for k, q in enumerate(inputs.query_docs):
            own = position.get(q.id)
            if method == "hybrid":
                signals = {name: np.asarray(fn(k, q), dtype=np.float64) for name, fn in scorers.items()}
                used: dict = {}
                runs[q.id] = hybrid_ranking(ids, signals, spec, candidates, exclude=own, depth=depth,
                                            source=SourceShape.of(q), used=used, paragraphs=paragraphs,
                                            feedback=feedback)
                if weights_used is not None and "weights" in used:
                    weights_used[q.id] = {**used["weights"], **(
                        {"feedback": used.get("feedback", {}).get("share", 0.0)} if spec.feedback else {})}
            else:
                scores = np.asarray(scorers[method](k, q), dtype=np.float64)
                runs[q.id] = _ranking(ids, scores, own, depth)
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    return runs


def weights_by_kind(weights_used: Mapping[str, Mapping[str, float]], shapes: Mapping[str, SourceShape]) -> dict:
    """The fusion weights per query kind (:attr:`SourceShape.kind`): for each kind, the number of
    queries, their sentences (min and max), and the mean, min and max weight of each signal, and
    of the document feedback's share when the queries report one (``feedback``; 0: none)."""
    out: dict = {}
    for kind in ("one paragraph", "several paragraphs"):
        qids = [q for q in weights_used if q in shapes and shapes[q].kind == kind]
        if not qids:
            continue
        sentences = [shapes[q].sentences for q in qids]
        entry: dict = {"queries": len(qids), "sentences": [min(sentences), max(sentences)]}
        for s in (*SIGNALS, *(("feedback",) if any("feedback" in weights_used[q] for q in qids) else ())):
            w = np.asarray([float(weights_used[q].get(s, 0.0)) for q in qids])
            entry[s] = {"mean": round(float(w.mean()), 3), "min": round(float(w.min()), 3), "max": round(float(w.max()), 3)}
        out[kind] = entry
    return out
