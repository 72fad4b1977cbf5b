"""The FAISS HNSW index ``faiss.index`` (inner product) over every row of the vector file; row =
FAISS id, dead rows included.

The graph's nodes hold a copy of each row in one of three codes (``SDR_STORE_ANN_CODES``,
recorded at creation): ``float32`` (1,536 bytes a row at dim 384), ``fp16`` (768) or ``sq8`` (384:
FAISS's 8-bit scalar quantiser, one byte per dimension over the range each dimension spans in
the rows it was trained on). With ``fp16`` or ``sq8`` the graph only chooses the sentence hits:
their scores are computed again from the float rows of the memory-mapped vector file
(:func:`exact_hit_scores`), so every score the store returns is exact, as with ``float32``.
An ``sq8`` index is trained on the rows present when it is built (:func:`add_rows`); while it
holds fewer than ``SQ_TRAIN_ROWS`` rows it is rebuilt, and so retrained, whenever the store has
grown to twice its rows (:meth:`AnnIndex.current`): a store grown from a few documents does not
keep the value ranges of its first put.

The index is a cache of the vector file (crash safety): it is saved with write-temp +
``os.replace`` (:meth:`AnnIndex.save`); on load it is caught up when it has fewer rows than
committed and rebuilt when it has more (written after a transaction that was lost) or cannot be
read (:meth:`AnnIndex.current`).

Nested k-NN (:func:`knn_rounds`) fetches ``k * oversample`` sentence hits per query row
(optionally adding the twins of each hit: identical rows, :mod:`.twins`), drops dead rows and
excluded documents and keeps each document's best hit: the top ``k`` documents and any tied with
the k-th (IRLeD's boilerplate sentences tie across many documents; cutting such a tie at an
arbitrary k cost top-10 fidelity: docs/results/two-stage.md, "Ties, twins and aggregations"). A row
whose hits hold fewer than k documents keeps those, or is searched again with 4x the hits when
more rounds are allowed (``SDR_STORE_KNN_ROUNDS``; one by default: the same fidelity, half the
candidate time on the wiki latency store).
"""

from __future__ import annotations

import logging
import os
import sqlite3
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from sdr_search.core.errors import InvalidInputError, ModelMismatchError

from .catalog import meta_set
from .durable import fsync_path
from .twins import TwinGroups
from .vectorfile import CHUNK_ROWS, VectorFile

__all__ = ["FAISS", "FAISS_TMP", "ANN_CODES", "SQ_TRAIN_ROWS", "faiss_module", "AnnIndex", "add_rows", "write_index",
           "query_matrix", "knn_rounds", "exact_hit_scores", "index_codes"]

logger = logging.getLogger(__package__)  # "sdr_search.indexer.embedded", one logger for the whole store

FAISS = "faiss.index"
FAISS_TMP = "faiss.index.tmp"
_SERIAL_ADD_ROWS = 4_096  # FAISS additions up to this many rows run single-threaded
_ROUND_GROWTH = 4  # each follow-up search round fetches this many times more hits
ANN_CODES = ("float32", "fp16", "sq8")
SQ_TRAIN_ROWS = 65_536  # an sq8 quantiser is trained on at most this many rows (evenly spaced)
_SQ_MARGIN = 0.05  # each dimension's trained range is widened by this fraction on either side


def faiss_module():
    """The ``faiss`` module, imported without its loader's INFO lines: on a CPU without AVX512 the
    loader logs each variant it tries, with ``ModuleNotFoundError(... swigfaiss_avx512)``, on
    every command. The ``faiss.loader`` logger is raised to WARNING unless someone set its level
    (``sdr --log-level DEBUG`` sets it to DEBUG and shows them)."""
    loader = logging.getLogger("faiss.loader")
    if loader.level == logging.NOTSET:
        loader.setLevel(logging.WARNING)
    import faiss

    return faiss


@contextmanager
def _serial_faiss(enabled: bool) -> Iterator[None]:
    """Run the enclosed FAISS calls on one OpenMP thread (when ``enabled``)."""
    if not enabled:
        yield
        return
    faiss = faiss_module()
    previous = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        yield
    finally:
        faiss.omp_set_num_threads(previous)


def index_codes(index) -> str | None:
    """The codes (:data:`ANN_CODES`) of a FAISS HNSW index; ``None`` for any other kind of index."""
    faiss = faiss_module()

    typed = faiss.downcast_index(index)  # a second wrapper: ``index`` keeps owning the C++ object
    if isinstance(typed, faiss.IndexHNSWFlat):
        return "float32"
    if isinstance(typed, faiss.IndexHNSWSQ):
        qtype = faiss.downcast_index(typed.storage).sq.qtype
        return {faiss.ScalarQuantizer.QT_fp16: "fp16", faiss.ScalarQuantizer.QT_8bit: "sq8"}.get(qtype)
    return None


def _train(index, stop: int, source: np.ndarray) -> None:
    """Train ``index``'s quantiser on up to :data:`SQ_TRAIN_ROWS` rows of ``source[:stop]``, evenly spaced."""
    rows = np.unique(np.linspace(0, stop - 1, num=min(stop, SQ_TRAIN_ROWS)).astype(np.int64))
    index.train(np.ascontiguousarray(source[rows], dtype=np.float32))


def add_rows(index, start: int, stop: int, source: np.ndarray) -> None:
    """Add rows ``[start, stop)`` of ``source`` (the vector file's rows) to ``index``; an untrained
    (``sq8``) index is first trained on ``source[:stop]``.

    Small additions (one ``put``) run on one OpenMP thread: for a few hundred rows the thread
    start-up of HNSW's parallel insert costs more than it saves (docs/results/indexing.md,
    "The FAISS index").
    """
    if stop > start and not index.is_trained:
        _train(index, stop, source)
    with _serial_faiss(stop - start <= _SERIAL_ADD_ROWS):
        for a in range(start, stop, CHUNK_ROWS):
            b = min(stop, a + CHUNK_ROWS)
            index.add(np.ascontiguousarray(source[a:b], dtype=np.float32))


def write_index(index, path: Path) -> None:
    """Write ``index`` to ``path`` and fsync it."""
    faiss = faiss_module()

    faiss.write_index(index, str(path))
    fsync_path(path)


class AnnIndex:
    """The FAISS index of the store directory ``directory``, over the rows of ``vectors``.

    The store sets :attr:`hnsw` (``m``, ``ef_construction``) and :attr:`codes` (:data:`ANN_CODES`)
    from what it recorded and, read-only, :attr:`read_path` while a compaction is unfinished. :attr:`index` is the loaded index
    (``None`` until needed); :attr:`base` counts its rows when it was last loaded or saved.
    """

    def __init__(self, directory: Path, vectors: VectorFile) -> None:
        self.directory = directory
        self.hnsw: dict[str, int] = {}
        self.codes = "float32"
        self.read_path: Path | None = None  # read-only view of an interrupted compaction
        self.index = None  # faiss.IndexHNSWFlat or IndexHNSWSQ
        self.base = 0  # rows in the index when it was last loaded or saved
        self._vectors = vectors

    @property
    def path(self) -> Path:
        return self.read_path if self.read_path is not None else self.directory / FAISS

    @property
    def compressed(self) -> bool:
        """Whether the graph holds codes other than float32 (hit scores then come from the vector file)."""
        return self.codes != "float32"

    def new_index(self):
        """An empty HNSW index of the recorded shape and codes (an ``sq8`` one still untrained)."""
        faiss = faiss_module()

        dim, m = int(self._vectors.dim or 0), int(self.hnsw["m"])
        if self.codes == "float32":
            index = faiss.IndexHNSWFlat(dim, m, faiss.METRIC_INNER_PRODUCT)
        else:
            qtype = faiss.ScalarQuantizer.QT_fp16 if self.codes == "fp16" else faiss.ScalarQuantizer.QT_8bit
            index = faiss.IndexHNSWSQ(dim, qtype, m, faiss.METRIC_INNER_PRODUCT)
            sq = faiss.downcast_index(index.storage).sq
            sq.rangestat, sq.rangestat_arg = faiss.ScalarQuantizer.RS_minmax, _SQ_MARGIN
        index.hnsw.efConstruction = int(self.hnsw["ef_construction"])
        return index

    def _load(self, committed: int, prior_rows: int):
        """Read ``faiss.index`` if usable, else ``None`` (logging why).

        ``prior_rows``: rows that should already be in a saved index (committed before the
        current operation); a missing file is only worth a warning when there are some.
        """
        faiss = faiss_module()

        path = self.path
        if not path.exists():
            if prior_rows:
                logger.warning("store %s: no FAISS index file; rebuilding it from the vector file", self.directory)
            return None
        try:
            index = faiss.read_index(str(path))
        except RuntimeError as e:
            logger.warning("store %s: FAISS index unreadable (%s); rebuilding it", self.directory, str(e).splitlines()[0])
            return None
        if index.d != self._vectors.dim or index.metric_type != faiss.METRIC_INNER_PRODUCT:
            logger.warning("store %s: FAISS index has the wrong shape; rebuilding it", self.directory)
            return None
        if index_codes(index) != self.codes:
            logger.warning("store %s: FAISS index holds %s codes, the store records %s; rebuilding it",
                           self.directory, index_codes(index), self.codes)
            return None
        if index.ntotal > committed:
            logger.warning(
                "store %s: FAISS index has %d rows but only %d are committed (written after a lost "
                "transaction); rebuilding it", self.directory, index.ntotal, committed,
            )
            return None
        if index.ntotal < prior_rows:
            logger.warning("store %s: FAISS index catching up %d rows", self.directory, prior_rows - index.ntotal)
        return index

    def current(self, committed: int, prior_rows: int | None = None):
        """The FAISS index, loaded or rebuilt, caught up with all ``committed`` rows.

        ``prior_rows`` (default: all committed rows) is only used to decide what to log.
        """
        if self.index is None:
            index = self._load(committed, committed if prior_rows is None else prior_rows)
            if index is None:
                index = self.new_index()
            self.index = index
            self.base = int(index.ntotal)
        if self.codes == "sq8" and 0 < self.index.ntotal < SQ_TRAIN_ROWS and committed >= 2 * self.index.ntotal:
            logger.info("store %s: retraining the sq8 index (%d rows, trained on %d)", self.directory, committed,
                        self.index.ntotal)
            self.index = self.new_index()
        if self.index.ntotal < committed:
            add_rows(self.index, int(self.index.ntotal), committed, self._vectors.matrix(committed))
        return self.index

    def save(self, conn: sqlite3.Connection) -> None:
        """Write the index atomically and record its rows in ``meta`` (exclusive lock held, index
        matches this epoch, store writable)."""
        index = self.index
        if index is None:
            return
        tmp = self.directory / FAISS_TMP
        write_index(index, tmp)
        os.replace(tmp, self.directory / FAISS)
        fsync_path(self.directory)
        meta_set(conn, "faiss_rows", int(index.ntotal))  # autocommit
        self.base = int(index.ntotal)
        logger.debug("store %s: saved FAISS index (%d rows)", self.directory, index.ntotal)


# -- nested k-NN ------------------------------------------------------------------------------
def query_matrix(vectors: np.ndarray, dim: int | None, directory: Path) -> np.ndarray:
    """Query vectors as a C-contiguous float32 matrix of the store's dimension ``dim``."""
    q = np.atleast_2d(np.asarray(vectors, dtype=np.float32))
    if q.ndim != 2:
        raise InvalidInputError(f"query vectors must be a 2-D array, got shape {np.shape(vectors)}")
    if dim is not None and q.shape[1] != dim:
        raise ModelMismatchError(
            f"query vectors have dimension {q.shape[1]}, store {directory} holds dimension {dim}"
        )
    return np.ascontiguousarray(q)


def _search(index, q: np.ndarray, n_hits: int, ef_search: int) -> tuple[np.ndarray, np.ndarray]:
    faiss = faiss_module()

    params = faiss.SearchParametersHNSW()
    params.efSearch = max(ef_search, n_hits)
    return index.search(q, n_hits, params=params)


def exact_hit_scores(q: np.ndarray, rows: np.ndarray, matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The hits ``rows`` (``(n, hits)``, ``-1`` = none) of the query rows ``q`` scored exactly:
    ``(scores, rows)``, each row sorted best first by the inner product of ``q`` with the float rows
    of ``matrix`` (the vector file; float16 files are widened), missing hits last at ``-inf``.

    Reads each distinct hit row once, in row order (sequential within the memory map)."""
    n, width = rows.shape
    if n == 0 or width == 0:
        return np.zeros((n, width), np.float32), rows
    valid = rows >= 0
    unique, inverse = np.unique(np.where(valid, rows, 0), return_inverse=True)
    vecs = np.asarray(matrix[unique], dtype=np.float32)
    scores = np.einsum("nhd,nd->nh", vecs[inverse.reshape(n, width)], q, dtype=np.float32)
    scores[~valid] = -np.inf
    order = np.argsort(-scores, axis=1, kind="stable")
    return np.take_along_axis(scores, order, axis=1), np.take_along_axis(rows, order, axis=1)


def exact_doc_hits(
    q: np.ndarray, matrix: np.ndarray, docs: Sequence[tuple[int, int, int]], k: int, *, block_rows: int = 64,
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Exact nested k-NN over ``docs`` (``(seq, row_start, n_sentences)``, rows of ``matrix``):
    for each query row, the ``(seqs, scores)`` of the top ``k`` documents by their best sentence
    (inner product), best first, and every further document tied with the k-th. The fallback of
    a filtered search when the filter leaves few rows (brute force is then cheaper than a graph
    search that skips most of what it visits)."""
    n = q.shape[0]
    if not docs or n == 0:
        return [(np.zeros(0, np.int64), np.zeros(0, np.float32)) for _ in range(n)]
    seqs = np.asarray([d[0] for d in docs], dtype=np.int64)
    lengths = np.asarray([d[2] for d in docs], dtype=np.int64)
    rows = np.concatenate([np.arange(d[1], d[1] + d[2], dtype=np.int64) for d in docs])
    seg = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    vectors = np.ascontiguousarray(matrix[rows], dtype=np.float32)
    k = min(k, seqs.size)
    out: list[tuple[np.ndarray, np.ndarray]] = []
    for a in range(0, n, block_rows):
        best = np.maximum.reduceat(q[a : a + block_rows] @ vectors.T, seg, axis=1)  # (b, documents)
        for row in best:
            kth = np.partition(row, row.size - k)[row.size - k]
            keep = np.nonzero(row >= kth)[0]
            order = keep[np.lexsort((seqs[keep], -row[keep]))]
            out.append((seqs[order], row[order].astype(np.float32)))
    return out


def _first_hits(
    dist: np.ndarray, rows: np.ndarray, row_seq: np.ndarray, exclude: np.ndarray, k: int, twins: TwinGroups | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Best hit per live, non-excluded document, best first: the top ``k`` and every further
    document tied with the k-th. With ``twins``, each hit row brings its twins (identical
    vectors) at the same similarity, so a sentence shared by many documents reaches all of them."""
    if twins is not None:
        rows, dist = twins.expand(rows, dist)
    valid = rows >= 0
    rows, dist = rows[valid], dist[valid]
    if twins is not None:
        order = np.argsort(-dist, kind="stable")
        rows, dist = rows[order], dist[order]
    seqs = row_seq[rows]
    keep = seqs >= 0
    if exclude.size:
        keep &= ~np.isin(seqs, exclude)
    seqs, dist = seqs[keep], dist[keep]
    _, first = np.unique(seqs, return_index=True)
    first = np.sort(first)
    if first.size > k:
        first = first[dist[first] >= dist[first[k - 1]]]
    return seqs[first], dist[first]


def _first_hits_rows(
    dist: np.ndarray, rows: np.ndarray, row_seq: np.ndarray, exclude: np.ndarray, k: int
) -> list[tuple[np.ndarray, np.ndarray]]:
    """:func:`_first_hits` (without twins) for every query row of a search result at once.

    ``dist``, ``rows``: ``(n, hits)``, each row best first (FAISS order). Vectorised over the rows
    (one stable sort of the document numbers per row): calling :func:`_first_hits` row by row
    was most of the candidate stage's time outside FAISS (docs/results/two-stage.md, "Latency").
    """
    n, width = rows.shape
    if n == 0 or width == 0:
        return [(np.zeros(0, np.int64), np.zeros(0, np.float32)) for _ in range(n)]
    seqs = np.where(rows >= 0, row_seq[np.maximum(rows, 0)], -1)
    if exclude.size:
        seqs[np.isin(seqs, exclude)] = -1
    order = np.argsort(seqs, axis=1, kind="stable")  # by document, hits of one document best first
    by_doc = np.take_along_axis(seqs, order, axis=1)
    first_sorted = by_doc >= 0
    first_sorted[:, 1:] &= by_doc[:, 1:] != by_doc[:, :-1]
    first = np.zeros((n, width), dtype=bool)
    np.put_along_axis(first, order, first_sorted, axis=1)  # each document's best hit, in hit order
    count = np.cumsum(first, axis=1)
    over = count[:, -1] > k
    if over.any():  # keep the top k documents and those tied with the k-th
        kth = np.argmax(first & (count == k), axis=1)
        threshold = np.where(over, dist[np.arange(n), kth], -np.inf)
        first &= dist >= threshold[:, None]
    r, c = np.nonzero(first)
    bounds = np.searchsorted(r, np.arange(n + 1))
    kept_seqs, kept_dist = seqs[r, c], dist[r, c]
    return [(kept_seqs[a:b], kept_dist[a:b]) for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist())]


def knn_rounds(
    index, q: np.ndarray, k: int, want: int, row_seq: np.ndarray, exclude: np.ndarray, *,
    oversample: int, ef_search: int, rounds: int, twins: TwinGroups | None = None, exact: np.ndarray | None = None,
) -> list[tuple[np.ndarray, np.ndarray]]:
    """For each query row, the ``(seqs, scores)`` of its top-``k`` documents by best sentence
    (more when documents tie at the k-th place; ``twins`` adds the identical rows of every hit).

    ``row_seq``: row -> document seq (``-1`` = dead); ``exclude``: sorted seqs to leave out;
    ``want``: how many documents a row can get at most. Fetches ``k * oversample`` sentence hits
    per row in one batched search (``efSearch`` at least ``ef_search``); rows left with fewer than
    ``want`` documents are searched again with 4x as many hits, up to ``rounds`` searches in all.
    ``exact``: the vector file's rows, to score the hits from (an index of compressed codes).
    """
    total = int(index.ntotal)
    n_hits = min(total, k * oversample)
    results: list[tuple[np.ndarray, np.ndarray]] = [(np.zeros(0, np.int64), np.zeros(0, np.float32))] * q.shape[0]
    pending = np.arange(q.shape[0])
    for round_ in range(rounds):
        dist, rows = _search(index, q[pending], n_hits, ef_search)
        if exact is not None:
            dist, rows = exact_hit_scores(q[pending], rows, exact)
        if twins is None:
            found = _first_hits_rows(dist, rows, row_seq, exclude, k)
        else:
            found = [_first_hits(dist[j], rows[j], row_seq, exclude, k, twins) for j in range(len(pending))]
        short = []
        for r, hit in zip(pending.tolist(), found):
            results[r] = hit
            if hit[0].size < want:
                short.append(r)
        if not short or n_hits >= total:
            break
        if round_ == rounds - 1:
            logger.debug("nested k-NN: %d query rows got fewer than %d documents", len(short), want)
            break
        pending = np.asarray(short)
        n_hits = min(total, n_hits * _ROUND_GROWTH)
    return results
