"""Vectorised exact SDR scoring (SPEC "Two-stage score").

Everything here is a pure function on :mod:`sdr_search.core.vectors` containers: no I/O, no logging,
no global state. Sentence-level similarities are float32 matrix products; the two reductions of
stage 1 (max over a candidate paragraph's sentences, mean over a source paragraph's sentences)
are ``np.maximum.reduceat`` / ``np.add.reduceat`` over paragraph segments. Normalisation
statistics and the final document scores are computed in float64.

The slow, obviously-correct oracle these functions are tested against is
:mod:`sdr_search.core.reference`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Literal, Sequence

import numpy as np

from sdr_search.core.errors import NoComparisonError
from sdr_search.core.vectors import CorpusVectors, DocVectors

__all__ = [
    "SIGMA_FLOOR",
    "NormStats",
    "IfEmpty",
    "NO_COMPARISON",
    "clamp_sigma",
    "column_blocks",
    "segment_max_rows",
    "segment_sum_rows",
    "iter_paragraph_score_tiles",
    "paragraph_scores",
    "document_max",
    "stats_from_paragraph_scores",
    "sdr_scores",
    "score_candidates",
    "score_documents",
    "document_best",
    "part_scores",
    "like_unlike",
    "rank",
    "top_of",
    "paragraph_centroids",
    "mean_vectors",
]

SIGMA_FLOOR = 1e-6
"""A standard deviation below this is replaced by 1 (SPEC)."""


NO_COMPARISON = (
    "no paragraph of another document to compute normalisation statistics over (a store of one "
    "document: statistics against itself are not defined)"
)
"""Why statistics are unavailable when every paragraph is the source's own."""

IfEmpty = Literal["raise", "identity"]
"""What statistics are when no paragraph of another document is left: ``"raise"``
(:class:`NoComparisonError`) or ``"identity"`` (``mu`` 0, ``sigma`` 1: scores used unnormalised,
as :meth:`NormStats.identity`)."""


def clamp_sigma(sigma: np.ndarray) -> np.ndarray:
    """Return ``sigma`` as float64 with every value below :data:`SIGMA_FLOOR` replaced by 1."""
    sigma = np.asarray(sigma, dtype=np.float64)
    return np.where(sigma < SIGMA_FLOOR, 1.0, sigma)


@dataclass(frozen=True)
class NormStats:
    """Per-source-paragraph normalisation statistics ``mu_i`` and ``sigma_i``.

    ``sigma`` must already be clamped (see :func:`clamp_sigma`): every value is finite and
    positive, which is what makes ``max_j`` commute with the normalisation.
    """

    mu: np.ndarray  # (n,) float64
    sigma: np.ndarray  # (n,) float64, > 0

    def __post_init__(self) -> None:
        mu = np.asarray(self.mu, dtype=np.float64)
        sigma = np.asarray(self.sigma, dtype=np.float64)
        if mu.ndim != 1 or sigma.shape != mu.shape:
            raise ValueError(f"mu and sigma must be 1-D of equal length, got {mu.shape} and {sigma.shape}")
        if not (np.all(np.isfinite(mu)) and np.all(np.isfinite(sigma))):
            raise ValueError("mu and sigma must be finite")
        if np.any(sigma <= 0):
            raise ValueError("sigma must be positive (clamp it with clamp_sigma first)")
        object.__setattr__(self, "mu", mu)
        object.__setattr__(self, "sigma", sigma)

    def __len__(self) -> int:
        return int(self.mu.size)

    @classmethod
    def identity(cls, n: int) -> "NormStats":
        """Statistics that leave scores as they are (``mu`` 0, ``sigma`` 1), for ``n`` paragraphs
        with no paragraph of another document to compare against (a store of one document):
        :func:`sdr_scores` with them equals ``sdr_scores(best, None)``."""
        return cls(np.zeros(n, dtype=np.float64), np.ones(n, dtype=np.float64))

    def take(self, indices: np.ndarray | slice) -> "NormStats":
        """Statistics of the paragraphs at ``indices`` (e.g. one document's slice of corpus stats)."""
        return NormStats(self.mu[indices], self.sigma[indices])


def _check_dims(source: DocVectors, corpus: CorpusVectors) -> None:
    if source.dim != corpus.dim:
        raise ValueError(f"dimension mismatch: source has {source.dim}, corpus has {corpus.dim}")


def column_blocks(par_offsets: np.ndarray, block_sentences: int) -> list[tuple[int, int]]:
    """Split paragraphs into consecutive ``[p0, p1)`` blocks of at most ``block_sentences`` rows.

    Blocks are aligned to paragraph boundaries; a paragraph longer than ``block_sentences`` gets
    a block of its own (a block always holds at least one whole paragraph).
    """
    if block_sentences < 1:
        raise ValueError(f"block_sentences must be >= 1, got {block_sentences}")
    par_offsets = np.asarray(par_offsets, dtype=np.int64)
    n = par_offsets.size - 1
    blocks: list[tuple[int, int]] = []
    p0 = 0
    while p0 < n:
        p1 = int(np.searchsorted(par_offsets, par_offsets[p0] + block_sentences, side="right")) - 1
        p1 = min(max(p1, p0 + 1), n)
        blocks.append((p0, p1))
        p0 = p1
    return blocks


def _segment_max_rows_permuted(
    values: np.ndarray, starts: np.ndarray, lengths: np.ndarray, scratch: np.ndarray, fold: np.ufunc = np.maximum,
) -> tuple[np.ndarray, np.ndarray | None]:
    """Row-segment maxima (or another ``fold``: ``np.add`` for sums) in a permuted order:
    ``(maxima, order)``, ``maxima[j]`` is segment ``order[j]``.

    ``order`` None means the natural order. Segments are consecutive and non-empty. The maxima
    may be ``values`` itself (every segment one row long).
    """
    if lengths.size == values.shape[0]:  # every segment is a single row
        return values, None
    order: np.ndarray | None = None
    if np.any(lengths[1:] > lengths[:-1]):
        order = np.argsort(-lengths, kind="stable")
        starts, lengths = starts[order], lengths[order]
    out = values[starts]
    # n_longer[o - 1] = number of segments longer than o (lengths sorted descending)
    n_longer = np.searchsorted(-lengths, -np.arange(1, int(lengths[0])), side="left")
    for o, m in enumerate(n_longer.tolist(), start=1):
        rows = np.take(values, starts[:m] + o, axis=0, out=scratch[:m], mode="clip")
        fold(out[:m], rows, out=out[:m])
    return out, order


def _segment_rows(values: np.ndarray, starts: np.ndarray, lengths: np.ndarray, scratch: np.ndarray,
                  fold: np.ufunc) -> np.ndarray:
    folded, order = _segment_max_rows_permuted(values, starts, lengths, scratch, fold)
    if order is None:
        return folded.copy() if folded is values else folded
    result = np.empty_like(folded)
    result[order] = folded
    return result


def segment_sum_rows(values: np.ndarray, starts: np.ndarray, lengths: np.ndarray, scratch: np.ndarray) -> np.ndarray:
    """Row-segment sums, ``out[j] = values[starts[j] : starts[j] + lengths[j]].sum(axis=0)``, the
    same way as :func:`segment_max_rows` (``np.add.reduceat`` was slower on candidate documents'
    paragraphs: docs/results/two-stage.md, "Rerank kernel")."""
    return _segment_rows(values, starts, lengths, scratch, np.add)


def segment_max_rows(values: np.ndarray, starts: np.ndarray, lengths: np.ndarray, scratch: np.ndarray) -> np.ndarray:
    """Row-segment maxima: ``out[j] = values[starts[j] : starts[j] + lengths[j]].max(axis=0)``.

    Equivalent to ``np.maximum.reduceat(values, starts, axis=0)`` for consecutive non-empty
    segments, but fast for short segments: segments are sorted by length (descending), so step
    ``o`` folds row ``o`` of every segment longer than ``o`` into a contiguous prefix of the
    output with one row gather and one ``np.maximum`` (``reduceat`` pays a call per output
    element). ``scratch`` is a float32 buffer of at least ``(len(starts), values.shape[1])``.
    """
    return _segment_rows(values, starts, lengths, scratch, np.maximum)


class _TileWorkspace:
    """Buffers for :meth:`tile`, allocated once per scoring call and reused for every block
    (a fresh product buffer per block costs page faults, as much as the product itself on a VM:
    docs/results/two-stage.md, "Rerank kernel")."""

    def __init__(self, source: DocVectors, rows: int, paragraphs: int) -> None:
        self.src_t = source.vectors.T
        self.n_src = source.n_sentences
        self.src_starts = source.par_offsets[:-1]
        self.inv_counts = (1.0 / np.diff(source.par_offsets)).astype(np.float32)
        self.n_paragraphs = source.n_paragraphs
        self.product = np.empty(rows * self.n_src, dtype=np.float32)
        self.scratch = np.empty((paragraphs, self.n_src), dtype=np.float32)

    def sims(self, rows: int) -> np.ndarray:
        """The product buffer as a ``(rows, source sentences)`` matrix."""
        return self.product[: rows * self.n_src].reshape(rows, self.n_src)

    def tile(self, sims: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """``P`` for a block of candidate paragraphs from their sentence similarities ``sims``
        (rows: the block's sentences; ``starts``/``lengths``: its paragraphs' rows in ``sims``):
        max over each candidate paragraph's rows, mean over each source paragraph's columns.
        Shape ``(source paragraphs, block paragraphs)``, a fresh array."""
        colmax, order = _segment_max_rows_permuted(sims, starts, lengths, self.scratch)
        permuted = np.add.reduceat(colmax, self.src_starts, axis=1)  # (block paragraphs, n_paragraphs)
        permuted *= self.inv_counts
        tile = np.empty((self.n_paragraphs, lengths.size), dtype=np.float32)
        if order is None:
            tile[...] = permuted.T
        else:
            tile[:, order] = permuted.T
        return tile


def iter_paragraph_score_tiles(
    source: DocVectors, corpus: CorpusVectors, *, block_sentences: int = 65536
) -> Iterator[tuple[int, int, np.ndarray]]:
    """Yield ``(p0, p1, tile)`` with ``tile == paragraph_scores(source, corpus)[:, p0:p1]``.

    One matrix product per block of corpus paragraphs (corpus rows x source sentences), then the
    max over each corpus paragraph's rows (:func:`segment_max_rows`) and the mean over each
    source paragraph's columns (``np.add.reduceat``). The product buffer is reused between
    blocks, so peak memory is about ``source.n_sentences * block_sentences`` float32 (more when
    a single paragraph is longer than the block), plus two ``(paragraphs in block,
    source.n_sentences)`` buffers for the maxima. Each yielded tile is a fresh array.
    """
    _check_dims(source, corpus)
    blocks = column_blocks(corpus.par_offsets, block_sentences)
    offsets = corpus.par_offsets
    lengths = np.diff(offsets)
    widest = max(int(offsets[p1] - offsets[p0]) for p0, p1 in blocks)
    work = _TileWorkspace(source, widest, max(p1 - p0 for p0, p1 in blocks))
    for p0, p1 in blocks:
        s0, s1 = int(offsets[p0]), int(offsets[p1])
        sims = work.sims(s1 - s0)
        np.matmul(corpus.vectors[s0:s1], work.src_t, out=sims)
        yield p0, p1, work.tile(sims, offsets[p0:p1] - s0, lengths[p0:p1])


def paragraph_scores(source: DocVectors, corpus: CorpusVectors, *, block_sentences: int = 65536) -> np.ndarray:
    """Stage-1 paragraph-pair scores ``P`` of shape ``(source.n_paragraphs, corpus.n_paragraphs)``.

    ``P[i, q]`` is the mean over the sentences of source paragraph ``i`` of the maximum cosine
    similarity to the sentences of corpus paragraph ``q`` (float32).
    """
    out = np.empty((source.n_paragraphs, corpus.n_paragraphs), dtype=np.float32)
    for p0, p1, tile in iter_paragraph_score_tiles(source, corpus, block_sentences=block_sentences):
        out[:, p0:p1] = tile
    return out


def document_max(P: np.ndarray, doc_par_offsets: np.ndarray) -> np.ndarray:
    """Max of ``P`` over each document's paragraph columns: shape ``(n, D)``."""
    P = np.asarray(P)
    doc_par_offsets = np.asarray(doc_par_offsets, dtype=np.int64)
    if P.ndim != 2:
        raise ValueError(f"P must be 2-D, got shape {P.shape}")
    if doc_par_offsets.ndim != 1 or doc_par_offsets.size < 2:
        raise ValueError("doc_par_offsets needs at least one document")
    if doc_par_offsets[0] != 0 or doc_par_offsets[-1] != P.shape[1]:
        raise ValueError(f"doc_par_offsets must run from 0 to {P.shape[1]} (the columns of P)")
    if np.any(np.diff(doc_par_offsets) <= 0):
        raise ValueError("every document needs at least one paragraph")
    return np.maximum.reduceat(P, doc_par_offsets[:-1], axis=1)


def stats_from_paragraph_scores(
    P: np.ndarray, *, exclude: np.ndarray | None = None, if_empty: IfEmpty = "raise"
) -> NormStats:
    """Mean and population std of each row of ``P`` over the columns not excluded.

    ``exclude`` is a boolean mask over the columns (True = leave out), used to leave out the
    source document's own paragraphs. Accumulated in float64; sigma is clamped. No column left
    (every paragraph is the source's own): :class:`NoComparisonError` (a ``ValueError``), or with
    ``if_empty="identity"`` :meth:`NormStats.identity`.
    """
    P = np.asarray(P)
    if P.ndim != 2:
        raise ValueError(f"P must be 2-D, got shape {P.shape}")
    if exclude is not None:
        exclude = np.asarray(exclude, dtype=bool)
        if exclude.shape != (P.shape[1],):
            raise ValueError(f"exclude must be a boolean mask of shape ({P.shape[1]},), got {exclude.shape}")
        if np.any(exclude):
            P = P[:, ~exclude]
    if P.shape[1] == 0:
        if if_empty == "identity":
            return NormStats.identity(P.shape[0])
        raise NoComparisonError(NO_COMPARISON)
    mu = P.mean(axis=1, dtype=np.float64)
    var = np.square(P - mu[:, None]).mean(axis=1)
    return NormStats(mu, clamp_sigma(np.sqrt(var)))


def sdr_scores(best: np.ndarray, stats: NormStats | None) -> np.ndarray:
    """Stage-2 document scores ``S`` of shape ``(D,)`` (float64) from ``best = document_max(P)``.

    ``S[c] = mean_i (best[i, c] - mu_i) / sigma_i``; with ``stats`` None, no normalisation
    (the paper's "No normalization" ablation): ``S[c] = mean_i best[i, c]``. Since every
    ``sigma_i > 0``, the max over a document's paragraphs of the normalised scores equals the
    normalised max, so normalising ``best`` is exact.
    """
    best = np.asarray(best)
    if best.ndim != 2 or best.shape[0] == 0:
        raise ValueError(f"best must be 2-D with at least one row, got shape {best.shape}")
    if stats is None:
        return best.mean(axis=0, dtype=np.float64)
    if len(stats) != best.shape[0]:
        raise ValueError(f"stats cover {len(stats)} source paragraphs, best has {best.shape[0]} rows")
    normalised = (best - stats.mu[:, None]) / stats.sigma[:, None]  # float64
    return normalised.mean(axis=0)


def score_candidates(
    source: DocVectors,
    candidates: CorpusVectors,
    stats: NormStats | None,
    *,
    block_sentences: int = 65536,
) -> np.ndarray:
    """SDR scores of ``source`` against every document of ``candidates``, shape ``(D,)``.

    This is the reranker's path: ``stats`` must be precomputed over the corpus (or a reference
    sample of it), never over the candidates themselves (SPEC).
    """
    if stats is not None and len(stats) != source.n_paragraphs:
        raise ValueError(f"stats cover {len(stats)} paragraphs, the source has {source.n_paragraphs}")
    P = paragraph_scores(source, candidates, block_sentences=block_sentences)
    return sdr_scores(document_max(P, candidates.doc_par_offsets), stats)


def document_blocks(rows: Sequence[int], block_rows: int) -> list[tuple[int, int]]:
    """Split documents of ``rows`` sentences each into consecutive ``[d0, d1)`` blocks of at most
    ``block_rows`` sentences (a longer document gets a block of its own)."""
    if block_rows < 1:
        raise ValueError(f"block_rows must be >= 1, got {block_rows}")
    blocks: list[tuple[int, int]] = []
    d0, total = 0, 0
    for d, n in enumerate(rows):
        if d > d0 and total + n > block_rows:
            blocks.append((d0, d))
            d0, total = d, 0
        total += n
    if d0 < len(rows):
        blocks.append((d0, len(rows)))
    return blocks


def score_documents(
    source: DocVectors,
    documents: Sequence[DocVectors],
    stats: NormStats | None,
    *,
    block_rows: int = 8192,
) -> np.ndarray:
    """:func:`score_candidates` for documents given one by one, shape ``(D,)`` (float64).

    The documents' vectors are never concatenated: each document's product with the source is
    written straight into a block of one reused buffer, so they can be read-only views of a
    memory-mapped store (:meth:`sdr_search.indexer.store.DocumentStore.fetch_documents`). Blocks of about
    ``block_rows`` candidate sentences keep the product in cache while it is reduced.
    """
    if not documents:
        return np.zeros(0, dtype=np.float64)
    if stats is not None and len(stats) != source.n_paragraphs:
        raise ValueError(f"stats cover {len(stats)} paragraphs, the source has {source.n_paragraphs}")
    return sdr_scores(document_best(source, documents, block_rows=block_rows), stats)


def part_scores(best: np.ndarray, stats: NormStats, part_offsets: Sequence[int]) -> np.ndarray:
    """SDR scores of several sources scored as one (their paragraphs concatenated), shape
    ``(parts, D)`` (float64): ``best`` is :func:`document_best` of the concatenated source,
    ``stats`` its per-paragraph statistics (each source's own, concatenated), and source ``p`` owns
    rows ``part_offsets[p]:part_offsets[p + 1]``. Row ``p`` equals :func:`score_documents` of
    source ``p`` alone: the row maxima of a paragraph do not depend on the other paragraphs."""
    offsets = np.asarray(part_offsets, dtype=np.int64)
    best = np.asarray(best)
    if offsets.ndim != 1 or offsets.size < 2 or offsets[0] != 0 or offsets[-1] != best.shape[0] or np.any(np.diff(offsets) <= 0):
        raise ValueError(f"part_offsets must rise from 0 to {best.shape[0]} (the rows of best), got {offsets.tolist()}")
    if len(stats) != best.shape[0]:
        raise ValueError(f"stats cover {len(stats)} source paragraphs, best has {best.shape[0]} rows")
    normalised = (best - stats.mu[:, None]) / stats.sigma[:, None]  # float64
    sums = np.add.reduceat(normalised, offsets[:-1], axis=0)
    return sums / np.diff(offsets)[:, None]


def like_unlike(rows: np.ndarray, n_like: int, unlike_weight: float) -> np.ndarray:
    """The score of a query with several sources from each source's own scores ``rows``
    ``(sources, D)``, the ``n_like`` like sources first: the mean of the like rows minus
    ``unlike_weight`` times the mean of the unlike rows (none: the like mean; one like source and
    no unlike: its row as it is)."""
    rows = np.asarray(rows, dtype=np.float64)
    if rows.ndim != 2 or not 1 <= n_like <= rows.shape[0]:
        raise ValueError(f"need (sources, D) rows with 1 <= n_like <= sources, got {rows.shape} and n_like={n_like}")
    score = rows[0].copy() if n_like == 1 else rows[:n_like].mean(axis=0)
    if rows.shape[0] > n_like:
        score -= unlike_weight * rows[n_like:].mean(axis=0)
    return score


def document_best(source: DocVectors, documents: Sequence[DocVectors], *, block_rows: int = 8192) -> np.ndarray:
    """``best[i, c]``, the best paragraph score of source paragraph ``i`` in document ``c`` (the
    document maxima :func:`document_max` gives), shape ``(n, D)`` float32, computed as
    :func:`score_documents` does (one reused buffer, blocks of about ``block_rows`` sentences)."""
    if not documents:
        return np.zeros((source.n_paragraphs, 0), dtype=np.float32)
    for doc in documents:
        if doc.dim != source.dim:
            raise ValueError(f"dimension mismatch: source has {source.dim}, a document has {doc.dim}")
    rows = [doc.n_sentences for doc in documents]
    blocks = document_blocks(rows, block_rows)
    widest = max(sum(rows[d0:d1]) for d0, d1 in blocks)
    most = max(sum(documents[d].n_paragraphs for d in range(d0, d1)) for d0, d1 in blocks)
    work = _TileWorkspace(source, widest, most)
    best = np.empty((source.n_paragraphs, len(documents)), dtype=np.float32)
    for d0, d1 in blocks:
        block = documents[d0:d1]
        sims = work.sims(sum(rows[d0:d1]))
        starts, doc_starts, at, par = [], [], 0, 0
        for doc in block:
            n = doc.n_sentences
            np.matmul(doc.vectors, work.src_t, out=sims[at : at + n])
            starts.append(doc.par_offsets[:-1] + at)
            doc_starts.append(par)
            at += n
            par += doc.n_paragraphs
        starts_all = np.concatenate(starts)
        lengths = np.diff(np.append(starts_all, at))
        tile = work.tile(sims, starts_all, lengths)
        best[:, d0:d1] = np.maximum.reduceat(tile, np.asarray(doc_starts, dtype=np.int64), axis=1)
    return best


def rank(ids: Sequence[str], scores: np.ndarray) -> list[int]:
    """Indices ordered by score descending, ties broken by id ascending (SPEC)."""
    scores = np.asarray(scores, dtype=np.float64)
    if scores.ndim != 1 or scores.size != len(ids):
        raise ValueError(f"need one score per id: {len(ids)} ids, scores of shape {scores.shape}")
    if not np.all(np.isfinite(scores)):
        raise ValueError("scores must be finite")
    if scores.size == 0:
        return []
    # lexsort: last key is primary. Ranks of the ids keep Python's str ordering exactly.
    id_order = sorted(range(len(ids)), key=ids.__getitem__)
    id_rank = np.empty(len(ids), dtype=np.int64)
    id_rank[id_order] = np.arange(len(ids))
    return np.lexsort((id_rank, -scores)).tolist()


def top_of(
    ids: Sequence[str], scores: np.ndarray, k: int, *, exclude_ids: Sequence[str] = (), positive: bool = False
) -> tuple[list[str], np.ndarray]:
    """The ``k`` best of ``ids`` by ``scores`` (descending, ties by id ascending) without
    ``exclude_ids`` (and, with ``positive``, without scores <= 0): ``(ids, scores)``."""
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    scores = np.asarray(scores, dtype=np.float64)
    excluded = set(exclude_ids)
    keep = np.asarray([i not in excluded for i in ids], dtype=bool) if excluded else np.ones(len(ids), dtype=bool)
    if positive:
        keep &= scores > 0
    if k == 0 or not keep.any():
        return [], np.zeros(0, dtype=np.float32)
    # preselect with a partition, then order the survivors exactly (ties by id)
    candidates = np.flatnonzero(keep)
    if candidates.size > k:
        kth = np.partition(-scores[candidates], k - 1)[k - 1]
        candidates = candidates[-scores[candidates] <= kth]
    sub_ids = [ids[i] for i in candidates]
    order = rank(sub_ids, scores[candidates])[:k]
    chosen = candidates[order]
    return [ids[i] for i in chosen], scores[chosen].astype(np.float32)


def paragraph_centroids(doc: DocVectors) -> np.ndarray:
    """``(n_paragraphs, dim)`` float32: each paragraph's normalised mean sentence vector."""
    vectors = np.asarray(doc.vectors, dtype=np.float32)
    lengths = np.diff(doc.par_offsets)
    scratch = np.empty((lengths.size, vectors.shape[1]), dtype=np.float32)
    sums = segment_sum_rows(vectors, np.asarray(doc.par_offsets[:-1], dtype=np.int64), lengths, scratch)
    return sums / np.maximum(np.linalg.norm(sums, axis=1, keepdims=True), 1e-12)


def mean_vectors(docs: Sequence[DocVectors]) -> np.ndarray:
    """Each document's mean sentence vector, L2-normalised, ``(n, dim)`` float32: the vectors of the
    hybrid ``mean`` signal (its score is the cosine of a candidate's with the source's)."""
    sums = np.stack([np.asarray(d.vectors).sum(axis=0) for d in docs])
    return sums / np.maximum(np.linalg.norm(sums, axis=1, keepdims=True), 1e-12)
