"""The embedded store itself: :class:`EmbeddedStore` composes the SQLite catalogue
(:mod:`.catalog`, rows converted by :mod:`.records`), the vector file (:mod:`.vectorfile`), the
FAISS index (:mod:`.ann`), the row map (:mod:`.rows`), compaction (:mod:`.compaction`) and the
directory lock (:mod:`.locking`).

Consistency: every operation runs under the object's mutex (so one store object is safe to share
between threads) and first compares the store's generation counter with its in-memory view,
reloading the view when another process changed the store. Reads run in one SQLite read
transaction that matches the view (:meth:`EmbeddedStore._snapshot`); writes hold the exclusive
directory lock (:meth:`EmbeddedStore._writing`).

Crash safety of ``put``: the vectors are appended and fsynced first, then every document row and
the new committed row count are committed in one transaction; a failed commit cuts the append
again. The FAISS index is caught up afterwards and saved every ``faiss_save_every`` rows and on
close; it is only a cache of the vector file. The lexical (BM25) index (:mod:`.lexical`) is
another cache, of the documents' texts: a saved base segment plus the documents written since,
merged into a new base in bounded steps, never rebuilt whole because of a write.
"""

from __future__ import annotations

import fcntl
import itertools
import json
import logging
import os
import shutil
import sqlite3
import threading
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence, cast

import numpy as np

from sdr_search.core.documents import Document
from sdr_search.core.errors import (
    DocumentNotFoundError,
    IndexNotFoundError,
    InvalidInputError,
    ModelMismatchError,
    StoreDamagedError,
    StoreError,
)
from sdr_search.core.filters import compile_filter
from sdr_search.core.metadata import metadata_terms
from sdr_search.core.fusion import check_search_defaults
from sdr_search.core.scoring import NormStats
from sdr_search.core.vectors import CorpusVectors, DocVectors

from ..settings import EmbeddedStoreSettings
from ..store import (
    DocumentStore,
    IndexMeta,
    LexicalHits,
    QueryState,
    ReferenceParagraphs,
    SentenceHits,
    StatsInfo,
    StoreCapabilities,
    StoredDocument,
    query_state_of,
)
from . import catalog, compaction, integrity, records
from .ann import FAISS, FAISS_TMP, AnnIndex, exact_doc_hits, knn_rounds, query_matrix
from .centroids import CentroidCache
from .catalog import SQLITE, Location, transaction
from .durable import fsync_path
from .lexical import LexicalIndex, Segments
from .locking import LOCK, DirectoryLock
from .rows import RowMap, offsets
from .twins import Twins
from .vectorfile import VectorFile

__all__ = ["EmbeddedStore", "remove_unused_store"]

_MAX_FILTER_OVERSAMPLE = 2  # a broad filter's masked graph search fetches at most this many times the hits

logger = logging.getLogger(__package__)  # "sdr_search.indexer.embedded", one logger for the whole store


_GUARDED = (
    "meta", "ensure_meta", "counts", "generation", "storage_info", "put", "delete", "get", "content_keys",
    "metadata_of", "documents_of", "iter_ids", "sentence_knn", "ids_matching", "refresh_lexical", "lexical_search",
    "fetch", "fetch_documents", "paragraph_centroids", "all_vectors", "stats_info", "write_stats", "reference",
    "set_reference", "search_defaults", "query_state", "set_search_defaults", "compact", "verify",
)


@integrity.guard(_GUARDED)
class EmbeddedStore(DocumentStore):
    """A persistent :class:`DocumentStore` in the directory ``path`` (see :mod:`sdr_search.indexer.embedded`).

    ``create=True`` creates the store on first use if it does not exist; otherwise a missing store
    raises :class:`IndexNotFoundError`. ``read_only=True`` never writes (no repair, no FAISS save;
    write methods raise :class:`StoreError`). Nothing is opened in ``__init__``: SQLite, the vector
    file and the FAISS index are opened on first use; :meth:`close` releases them.
    """

    # metadata from SQLite without vectors; a BM25 index built ahead of the first query; paragraph
    # centroids cached in memory (:mod:`.centroids`)
    capabilities = StoreCapabilities(metadata_lookup=True, lexical_refresh=True, cheap_centroids=True,
                                     filtered_knn=True)

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        create: bool = False,
        settings: EmbeddedStoreSettings | None = None,
        read_only: bool = False,
    ) -> None:
        # Resolved once: a store opened through an alias symlink (sdr reindex) keeps reading the
        # directory the link pointed to when it was opened, even after the link is switched.
        self.path = Path(path).resolve()
        self.settings = settings or EmbeddedStoreSettings()
        self.read_only = read_only
        self._create = create
        if create and read_only:
            raise InvalidInputError("a store cannot be created read-only")
        if create and self.path.exists() and not self.path.is_dir():
            raise InvalidInputError(f"{self.path} is a file, not a store directory; name a directory for the store")
        if not create:
            self._require_database()
        self._mutex = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._lock = DirectoryLock(self.path, read_only)
        self._vectors = VectorFile(self.path)  # dtype and dim as recorded in the store
        self._ann = AnnIndex(self.path, self._vectors)
        self._twins = Twins()
        self._centroids = CentroidCache()
        self._lexical = LexicalIndex(self.path, read_only=read_only,
                                     merge_fraction=self.settings.lexical_merge_fraction,
                                     merge_min_docs=self.settings.lexical_merge_min_docs)
        self._map: RowMap | None = None
        self._cache: dict[str, Any] = {}  # per-generation caches (counts, stats info, meta)
        # doc_id -> (metadata JSON, its terms): kept across generations, so a filter after a write
        # parses and encodes only the documents whose metadata changed (ids_matching)
        self._terms_memo: dict[str, tuple[str, frozenset[str]]] = {}
        self._damage: StoreDamagedError | None = None  # set once damage is seen (.integrity)
        self._checked_pages = False  # the thorough check passed once in this process

    # =========================================================================================
    # opening, locking, repair
    # =========================================================================================
    @property
    def vector_path(self) -> Path:
        """The vector file (``vectors.<dtype>``, dtype as recorded in the store)."""
        self._db()
        return self._vectors.path

    @property
    def faiss_path(self) -> Path:
        return self._ann.path

    @property
    def vector_dtype(self) -> str:
        """The recorded on-disk vector dtype (``float32`` or ``float16``)."""
        self._db()
        return self._vectors.dtype

    def _require_database(self) -> None:
        if self.path.exists() and not self.path.is_dir():
            raise IndexNotFoundError(f"{self.path} is a file, not an sdr store directory")
        if not (self.path / SQLITE).is_file():
            raise IndexNotFoundError(f"no sdr store at {self.path} (missing {SQLITE}); run `sdr index` to build one")

    def _db(self) -> sqlite3.Connection:
        """The SQLite connection, opening (creating, repairing) the store on first use."""
        conn = self._conn
        if conn is None:
            with self._mutex:
                if self._conn is None:
                    self._open()  # sets self._conn or raises
                conn = self._conn
        return cast(sqlite3.Connection, conn)

    def _open(self) -> None:
        if self._create:
            if self.path.exists() and not self.path.is_dir():
                raise InvalidInputError(f"{self.path} is a file, not a store directory; name a directory for the store")
            try:
                self.path.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise StoreError(f"cannot create the store directory {self.path}: {e.strerror or e}") from e
        else:
            self._require_database()
        self._lock.open()
        mode = fcntl.LOCK_SH if self.read_only else fcntl.LOCK_EX
        with self._lock.hold(mode):
            try:
                conn = catalog.connect(self.path / SQLITE, self.read_only)
            except sqlite3.Error as e:
                if integrity.is_damage(e):
                    raise integrity.damaged(self.path, SQLITE, e) from e
                raise StoreError(f"cannot open the store database {self.path / SQLITE}: {e}") from e
            try:
                self._conn = conn
                if self._create:
                    self._initialise(conn)
                self._read_recorded(conn)
                if self.read_only:
                    self._check_read_only_layout(conn)
                else:
                    self._repair(conn)
            except BaseException:
                self._conn = None
                conn.close()
                raise

    def _initialise(self, conn: sqlite3.Connection) -> None:
        """Create the catalogue and the empty vector file of a new store."""
        s = self.settings
        if not catalog.initialise(conn, s):
            return
        (self.path / f"vectors.{s.vector_dtype}").touch()
        fsync_path(self.path)
        logger.info("created store %s (vectors %s, HNSW M=%d, %s codes)", self.path, s.vector_dtype, s.hnsw_m, s.ann_codes)

    def _read_recorded(self, conn: sqlite3.Connection) -> None:
        """Read the settings recorded at creation (they win over the environment)."""
        meta = catalog.recorded_meta(conn, self.path)
        self._vectors.dtype = meta["vector_dtype"]
        self._ann.hnsw = {k: int(v) for k, v in meta["hnsw"].items()}
        self._ann.codes = meta.get("ann_codes", "float32")  # stores made before issue 44: float32 graphs
        self._vectors.dim = catalog.recorded_dim(meta)
        if self.settings.vector_dtype != self._vectors.dtype:
            logger.info("store %s records vectors as %s; using that (setting says %s)",
                        self.path, self._vectors.dtype, self.settings.vector_dtype)

    def _repair(self, conn: sqlite3.Connection) -> None:
        """Roll forward an interrupted compaction, drop stray temp files, cut a torn vector tail."""
        meta = catalog.meta_all(conn)
        if meta.get("pending_compaction"):
            compaction.roll_forward(self.path, conn, meta["pending_compaction"])
        for stray in [self.path / FAISS_TMP, *self.path.glob(f"*{compaction.COMPACT_SUFFIX}")]:
            if stray.exists():
                stray.unlink()
                logger.warning("store %s: removed %s left by an interrupted write", self.path, stray.name)
        self._vectors.truncate_tail(int(meta["committed_rows"]))

    def _check_read_only_layout(self, conn: sqlite3.Connection) -> None:
        meta = catalog.meta_all(conn)
        self._use_read_paths(meta.get("pending_compaction"))
        self._vectors.check_length(int(meta["committed_rows"]))

    def _use_read_paths(self, pending: Mapping[str, Any] | None) -> None:
        """Read-only: read the not-yet-renamed files of an interrupted compaction in place."""
        paths = compaction.read_paths(self.path, pending)
        self._vectors.read_path = paths.get("vectors")
        self._ann.read_path = paths.get("faiss")

    # -- consistent views ---------------------------------------------------------------------
    @contextmanager
    def _snapshot(self) -> Iterator[sqlite3.Connection]:
        """A read transaction whose data matches the in-memory catalogue (reloaded if needed)."""
        with self._mutex:
            conn = self._db()
            while True:
                conn.execute("BEGIN")
                gen = catalog.meta_get(conn, "generation", 0)
                if self._map is not None and gen == self._map.generation:
                    break
                conn.execute("COMMIT")
                self._reload()
            try:
                yield conn
            finally:
                conn.execute("COMMIT")

    @contextmanager
    def _writing(self) -> Iterator[sqlite3.Connection]:
        """Exclusive access for a write: directory lock held, catalogue up to date."""
        if self.read_only:
            raise StoreError(f"store {self.path} is open read-only")
        with self._mutex:
            conn = self._db()
            with self._lock.hold(fcntl.LOCK_EX):
                gen = catalog.meta_get(conn, "generation", 0)
                if self._map is None or gen != self._map.generation:
                    self._reload()
                yield conn

    def _reload(self) -> None:
        """Rebuild the in-memory catalogue from SQLite (after another process wrote).

        A compaction left half-renamed by a writer that died is finished first (or, read-only,
        read in place), so the files always match the committed layout.
        """
        meta, docs = self._read_catalog(fcntl.LOCK_SH)
        if meta.get("pending_compaction"):
            if self.read_only:
                self._use_read_paths(meta["pending_compaction"])
            else:
                with self._lock.hold(fcntl.LOCK_EX):
                    pending = catalog.meta_get(self._db(), "pending_compaction")
                    if pending:
                        compaction.roll_forward(self.path, self._db(), pending)
                    meta, docs = self._read_catalog(fcntl.LOCK_EX)
        elif self.read_only:
            self._use_read_paths(None)
        committed = int(meta["committed_rows"])
        rows = RowMap.from_documents(int(meta["generation"]), int(meta["epoch"]), committed, docs, self.path)
        self._vectors.dim = catalog.recorded_dim(meta)
        old = self._map
        if old is None or old.epoch != rows.epoch:
            self._drop_files()
        else:
            if old.committed != rows.committed:
                self._vectors.forget_map()
            if self._ann.index is not None and self._ann.index.ntotal > rows.committed:
                self._ann.index = None
        self._map = rows
        self._cache.clear()

    def _read_catalog(self, mode: int) -> tuple[dict[str, Any], list[tuple[int, str, int, int]]]:
        """Meta and every document's rows, read in one transaction under the lock ``mode``."""
        conn = self._db()
        with self._lock.hold(mode):
            return catalog.read_layout(conn)

    def _drop_files(self) -> None:
        """Forget file handles and maps (after a compaction replaced the files)."""
        self._ann.index = None
        self._vectors.close()

    def _row_map(self) -> RowMap:
        if self._map is None:
            raise StoreError("internal error: catalogue not loaded")
        return self._map

    # -- vectors and FAISS --------------------------------------------------------------------
    def _matrix(self) -> np.ndarray:
        """The committed rows of the vector file, memory-mapped, shape ``(committed, dim)``."""
        return self._vectors.matrix(self._row_map().committed)

    def _faiss(self, prior_rows: int | None = None):
        """The FAISS index, loaded or rebuilt, caught up with every committed row.

        ``prior_rows`` (default: all committed rows) is only used to decide what to log.
        """
        return self._ann.current(self._row_map().committed, prior_rows)

    def _exact_rows(self) -> np.ndarray | None:
        """The vector file's rows when the graph holds compressed codes and hits are scored exactly from
        them (``hit_scores`` 'exact'); None: the graph's own scores."""
        return self._matrix() if self._ann.compressed and self.settings.hit_scores == "exact" else None

    @property
    def ann_codes(self) -> str:
        """The recorded codes of the FAISS graph (``float32``, ``fp16`` or ``sq8``)."""
        self._db()
        return self._ann.codes

    def _save_faiss(self, conn: sqlite3.Connection) -> None:
        """Write the FAISS index atomically (exclusive lock held, index matches this epoch)."""
        if self.read_only:
            return
        self._ann.save(conn)

    # =========================================================================================
    # metadata
    # =========================================================================================
    def meta(self) -> IndexMeta | None:
        with self._snapshot() as conn:
            return self._meta(conn)

    def _meta(self, conn: sqlite3.Connection) -> IndexMeta | None:
        """The recorded meta (cached per generation; inside a snapshot)."""
        if "meta" not in self._cache:
            raw = catalog.meta_get(conn, "index_meta")
            self._cache["meta"] = IndexMeta.from_dict(raw) if raw else None
        return self._cache["meta"]

    def ensure_meta(self, meta: IndexMeta) -> IndexMeta:
        stored = self.meta()
        if stored is None and not self.read_only:
            stored = self._record_meta(meta)
        if stored is None:  # a read-only store with no model recorded yet
            return meta
        if stored.encoder_tag != meta.encoder_tag or int(stored.dim) != int(meta.dim):
            raise ModelMismatchError(
                f"store {self.path} was built with model {stored.model_id} (tag {stored.encoder_tag}, "
                f"dim {stored.dim}); it cannot be queried with model {meta.model_id} (tag "
                f"{meta.encoder_tag}, dim {meta.dim}). Use --model {stored.model_id} or re-index into a new store."
            )
        return stored

    def _record_meta(self, meta: IndexMeta) -> IndexMeta:
        """Record ``meta`` unless another writer recorded one first; returns the recorded meta."""
        with self._writing() as conn:
            with transaction(conn):
                raw = catalog.meta_get(conn, "index_meta")
                if raw is not None:
                    return IndexMeta.from_dict(raw)
                catalog.meta_set(conn, "index_meta", meta.to_dict())
                gen = catalog.bump_generation(conn)
            self._vectors.dim = int(meta.dim)
            self._row_map().generation = gen
            self._cache.clear()
        logger.info("store %s: recorded model %s (dim %d)", self.path, meta.model_id, meta.dim)
        return meta

    def counts(self) -> dict[str, int]:
        with self._snapshot() as conn:
            if "counts" not in self._cache:
                self._cache["counts"] = catalog.counts(conn)
            return dict(self._cache["counts"])

    def verify(self, *, thorough: bool = False) -> dict[str, int]:
        """The counts, after checking that the catalogue reads, that the vector file holds every
        committed row and, ``thorough`` (once per process; later calls rely on the damage being
        remembered), that SQLite's ``quick_check`` passes over every page."""
        with self._snapshot() as conn:
            out = catalog.counts(conn)  # read again, not from the cache: it walks the documents table
            if self._vectors.size() < self._row_map().committed * self._vectors.row_bytes():
                raise self._vectors._damaged()
            if thorough and not self._checked_pages:
                problems = integrity.quick_check(conn)
                if problems:
                    raise integrity.damaged(self.path, SQLITE, "; ".join(problems))
                self._checked_pages = True
        return out

    def generation(self) -> int:
        """Counter bumped by every committed change (documents, stats, reference, meta)."""
        with self._snapshot():
            return self._row_map().generation

    def storage_info(self) -> dict[str, int]:
        """Rows in the vector file (live and dead), its size in bytes, and rows in the FAISS file."""
        with self._snapshot() as conn:
            rows = self._row_map().rows
            live = int(np.count_nonzero(rows >= 0))
            return {
                "rows": int(rows.size),
                "live_rows": live,
                "dead_rows": int(rows.size) - live,
                "vector_bytes": self._vectors.size(),
                "faiss_rows_saved": int(catalog.meta_get(conn, "faiss_rows", 0)),
            }

    # =========================================================================================
    # documents
    # =========================================================================================
    def put(self, items: Sequence[tuple[Document, DocVectors]]) -> None:
        items = list(items)
        if not items:
            return
        with self._writing() as conn:
            meta = catalog.required_meta(conn, self.path)
            prepared = records.prepare_all(items, meta, self.path)
            start = self._row_map().committed
            before = self._row_map().generation
            self._vectors.append(start, np.concatenate([p.vectors for p in prepared]))
            try:
                placed, old_ranges, gen = catalog.commit_put(conn, prepared, start)
            except BaseException:
                self._vectors.cut(start)
                raise
            self._row_map().place(placed, old_ranges, gen)
            self._lexical.note_put(before, gen, prepared)  # the next lexical search indexes just these
            self._vectors.forget_map()
            self._cache.clear()
            self._after_append(conn, start)

    def _after_append(self, conn: sqlite3.Connection, start: int) -> None:
        """Add the new rows (from row ``start``) to FAISS; save it every ``faiss_save_every`` rows."""
        index = self._faiss(prior_rows=start)
        if index.ntotal - self._ann.base >= self.settings.faiss_save_every:
            self._save_faiss(conn)

    def delete(self, ids: Sequence[str]) -> int:
        ids = list(dict.fromkeys(str(i) for i in ids))
        if not ids:
            return 0
        with self._writing() as conn:
            before = self._row_map().generation
            found, gen = catalog.delete_documents(conn, ids)
            if found:
                self._row_map().remove(found, cast(int, gen))
                self._lexical.note_delete(before, cast(int, gen), ids)
                self._cache.clear()
            return len(found)

    def get(self, doc_id: str) -> StoredDocument:
        with self._snapshot() as conn:
            row = catalog.document(conn, doc_id)
            if row is None:
                raise DocumentNotFoundError(doc_id)
            title, metadata, paragraphs, row_start, n, par_sizes, stats = row
            vectors = np.asarray(self._matrix()[row_start : row_start + n], dtype=np.float32).copy()
        document = Document(doc_id, tuple(tuple(p) for p in json.loads(paragraphs)), title, json.loads(metadata))
        return StoredDocument(
            document, DocVectors(vectors, offsets(json.loads(par_sizes))), records.decode_stats(stats, doc_id)
        )

    def content_keys(self, ids: Sequence[str]) -> dict[str, str]:
        with self._snapshot() as conn:
            return catalog.content_keys(conn, ids)

    def metadata_of(self, ids: Sequence[str]) -> dict[str, Mapping[str, Any]]:
        """Metadata of those ``ids`` that exist (in the order asked), from SQLite alone."""
        ids = [str(i) for i in ids]
        with self._snapshot() as conn:
            found = catalog.metadata_json(conn, ids)
        return {i: json.loads(found[i]) for i in dict.fromkeys(ids) if i in found}

    def documents_of(self, ids: Sequence[str]) -> dict[str, Document]:
        """The documents of those ``ids`` that exist (in the order asked), from SQLite alone."""
        ids = [str(i) for i in ids]
        with self._snapshot() as conn:
            rows = catalog.select_by_ids(conn, "doc_id, title, metadata, paragraphs", ids)
        found = {r[0]: r for r in rows}
        return {
            i: Document(i, tuple(tuple(p) for p in json.loads(found[i][3])), found[i][1], json.loads(found[i][2]))
            for i in dict.fromkeys(ids) if i in found
        }

    def iter_ids(self) -> Iterator[str]:
        """Document ids in insertion order (a replaced document keeps its place)."""
        with self._snapshot() as conn:
            ids = [r[0] for r in catalog.in_seq_order(conn, "doc_id")]
        return iter(ids)

    # =========================================================================================
    # retrieval
    # =========================================================================================
    def sentence_knn(
        self, vectors: np.ndarray, k: int, *, exclude_ids: Sequence[str] = (), allowed_ids: Sequence[str] | None = None,
        filter: Mapping[str, Any] | None = None,
    ) -> SentenceHits:
        """Nested k-NN: for each query row the top-``k`` documents by their best sentence, and any
        further documents tied with the k-th.

        Fetches ``k * knn_oversample`` sentence hits per row in one batched FAISS search (with
        ``knn_twins``, adds every hit's twins: byte-identical rows of other documents,
        :mod:`.twins`), drops dead rows and excluded documents, keeps each document's best hit.
        A row whose hits hold fewer than ``k`` documents (while more exist) keeps those, or, with
        ``knn_rounds`` > 1, is searched again with 4x as many hits, up to ``knn_rounds`` searches.

        ``allowed_ids`` restricts the search to those documents: exact (brute force over their
        rows) when they hold at most ``filter_exact_rows`` sentences, else the HNSW search with the
        other documents' rows masked out, fetching ``1 / selectivity`` times as many hits (and up
        to 4x more in up to three rounds for rows left short). A FAISS ID selector was measured
        slower: a graph search that skips 90 % of what it visits (docs/results/filters.md). ``filter``
        (a metadata filter) is the same restriction to :meth:`ids_matching` (with ``allowed_ids``
        too: the documents in both).
        """
        if k < 1:
            raise InvalidInputError(f"k must be >= 1, got {k}")
        allowed_ids = self._restriction(allowed_ids, filter)
        with self._snapshot() as conn:
            q = query_matrix(vectors, self._vectors.dim, self.path)
            rows = self._row_map()
            exclude = catalog.seqs_of(conn, exclude_ids) if len(exclude_ids) else np.zeros(0, dtype=np.int64)
            if allowed_ids is not None:
                return self._filtered_knn(conn, q, k, exclude, allowed_ids)
            want = min(k, len(rows.seq_ids) - exclude.size)
            if q.shape[0] == 0 or want <= 0 or self._vectors.dim is None:
                return SentenceHits([[] for _ in range(q.shape[0])], [np.zeros(0, np.float32) for _ in range(q.shape[0])])
            index = self._faiss()
            twins = self._twins.current(rows.epoch, rows.committed, self._matrix()) if self.settings.knn_twins else None
            results = knn_rounds(index, q, k, want, rows.rows, exclude, oversample=self.settings.knn_oversample,
                                 ef_search=self.settings.hnsw_ef_search, rounds=self.settings.knn_rounds, twins=twins,
                                 exact=self._exact_rows())
            ids = [[rows.seq_ids[int(s)] for s in seqs] for seqs, _ in results]
        return SentenceHits(ids, [np.asarray(d, dtype=np.float32) for _, d in results])

    def _filtered_knn(self, conn, q: np.ndarray, k: int, exclude: np.ndarray, allowed_ids: Sequence[str]) -> SentenceHits:
        rows = self._row_map()
        skip = set(exclude.tolist())
        docs = sorted((int(seq), int(start), int(n)) for seq, start, n in
                      catalog.select_by_ids(conn, "seq, row_start, n_sentences", list(allowed_ids)) if int(seq) not in skip)
        if not docs or q.shape[0] == 0 or self._vectors.dim is None:
            return SentenceHits([[] for _ in range(q.shape[0])], [np.zeros(0, np.float32) for _ in range(q.shape[0])])
        n_rows = sum(n for _, _, n in docs)
        if n_rows <= self.settings.filter_exact_rows:
            results = exact_doc_hits(q, self._matrix(), docs, k)
        else:  # a broad filter: the graph search, other documents' rows masked out, over-fetched by 1/selectivity
            masked = np.full(rows.rows.shape, -1, dtype=np.int64)
            for seq, start, n in docs:
                masked[start : start + n] = seq
            selectivity = n_rows / max(1, rows.committed)
            oversample = int(np.ceil(self.settings.knn_oversample * min(_MAX_FILTER_OVERSAMPLE, 1 / selectivity)))
            results = knn_rounds(self._faiss(), q, k, min(k, len(docs)), masked, exclude,
                                 oversample=oversample, ef_search=self.settings.hnsw_ef_search,
                                 rounds=self.settings.knn_rounds, exact=self._exact_rows())
        ids = [[rows.seq_ids[int(s)] for s in seqs] for seqs, _ in results]
        return SentenceHits(ids, [np.asarray(d, dtype=np.float32) for _, d in results])

    def _restriction(self, allowed_ids: Sequence[str] | None, flt: Mapping[str, Any] | None) -> Sequence[str] | None:
        """The documents a search is restricted to: ``allowed_ids``, those ``flt`` matches, or
        both (None: no restriction; an empty filter restricts nothing)."""
        if not flt:
            return allowed_ids
        matching = self.ids_matching(flt)
        if allowed_ids is None:
            return matching
        wanted = {str(i) for i in allowed_ids}
        return [i for i in matching if i in wanted]

    def ids_matching(self, flt: Mapping[str, Any], *, limit: int | None = None) -> list[str]:
        """Every document whose metadata matches ``flt``, at most ``limit`` (the scan stops there;
        the metadata's terms, :func:`sdr_search.core.metadata.metadata_terms`, are kept per store
        generation, so repeated filtered queries do not re-read them, and across generations per
        document, so after a write only changed metadata is parsed again). Raises
        :class:`InvalidInputError` for a filter over the limits (:func:`sdr_search.core.filters.check_filter`)."""
        wanted = compile_filter(flt)  # checked before anything is read
        with self._snapshot() as conn:
            if "metadata_terms" not in self._cache:
                memo, fresh, rows = self._terms_memo, {}, []
                for doc_id, text in catalog.in_seq_order(conn, "doc_id, metadata"):
                    known = memo.get(doc_id)
                    if known is None or known[0] != text:
                        known = (text, frozenset(metadata_terms(json.loads(text))) if text else frozenset())
                    fresh[doc_id] = known
                    rows.append((doc_id, known[1]))
                self._terms_memo = fresh
                self._cache["metadata_terms"] = rows
            found = (doc_id for doc_id, terms in self._cache["metadata_terms"] if wanted.matches_terms(terms))
            return list(itertools.islice(found, limit))

    def _lexical_ranker(self) -> Segments:
        """The BM25 index over every live document, brought up to date with the catalogue: the
        queued writes of this process applied, or the catalogue compared with what it covers (see
        :mod:`.lexical`); never rebuilt whole because of a write."""
        lex = self._lexical
        with lex.lock:
            lex.load_saved()  # a saved base, once per process (outside the store's mutex)
            with self._snapshot() as conn:
                generation = self._row_map().generation

                def read_rows(ids):
                    columns = "doc_id, content_key, title, paragraphs"
                    if ids is None:
                        return catalog.in_seq_order(conn, columns)
                    return catalog.select_by_ids(conn, columns, ids)

                update = lex.plan(generation, lambda: catalog.in_seq_order(conn, "doc_id, content_key, title"),
                                  read_rows)
            # tokenised outside the snapshot: other readers and writers go on meanwhile
            return lex.apply(update)

    def refresh_lexical(self) -> int:
        """Bring the lexical index up to date now and fold its delta into a saved base (as at the
        end of ``sdr index``) instead of at the first lexical search; returns the number of
        documents it covers."""
        index = self._lexical_ranker()
        lex = self._lexical
        with lex.lock:
            if lex.index is index and index.pending:
                index = lex.merge(index)
        return index.size

    def lexical_search(
        self, text: str, k: int, *, exclude_ids: Sequence[str] = (), score_ids: Sequence[str] = (),
        filter: Mapping[str, Any] | None = None,
    ) -> LexicalHits:
        """BM25 (bm25s, Lucene variant; :class:`sdr_search.core.lexical.BM25Ranker`) of ``text`` against
        every live document's text; exact, the same scores as ``sdr eval --method bm25`` over the
        live texts, whatever writes came before. With ``filter``, the top ``k`` are the best
        documents it matches (score > 0, ties by id): every matching document is scored."""
        if k < 0:
            raise InvalidInputError(f"k must be >= 0, got {k}")
        if not isinstance(text, str):
            raise InvalidInputError("the lexical query must be a string")
        index = self._lexical_ranker()
        if index.size == 0:
            return LexicalHits([], np.zeros(0, dtype=np.float32), {str(i): 0.0 for i in score_ids})
        exclude = [str(i) for i in exclude_ids]
        if not filter:
            ids, top, scored = index.search(text, k, exclude_ids=exclude, score_ids=score_ids)
            return LexicalHits(ids, top, scored)
        matching = self.ids_matching(filter)
        wanted = [str(i) for i in score_ids]
        _, _, scored = index.search(text, 0, score_ids=list(dict.fromkeys(wanted + matching)))
        skip = set(exclude)
        ranked = sorted((i for i in matching if scored[i] > 0 and i not in skip), key=lambda i: (-scored[i], i))[:k]
        return LexicalHits(ranked, np.asarray([scored[i] for i in ranked], dtype=np.float32),
                           {i: scored[i] for i in wanted})

    def _corpus(self, ids: Sequence[str], located: Mapping[str, Location], *, view: bool = False) -> CorpusVectors:
        """Gather the documents ``ids`` (in that order) into one float32 CorpusVectors.

        Documents that lie back to back in a float32 file are one slice: a view of the memory map
        when ``view`` (read-only, no copy), else one copy. Otherwise one sorted gather.
        """
        starts = np.asarray([located[i][0] for i in ids], dtype=np.int64)
        lengths = np.asarray([located[i][1] for i in ids], dtype=np.int64)
        sizes = [json.loads(located[i][2]) for i in ids]
        par_offsets = offsets([s for doc in sizes for s in doc])
        doc_par = offsets([len(doc) for doc in sizes])
        vectors = self._vectors.gather(starts, lengths, self._row_map().committed, view=view)
        return CorpusVectors(tuple(ids), vectors, par_offsets, doc_par)

    def _located(self, conn: sqlite3.Connection, ids: list[str], what: str) -> dict[str, Location]:
        """Where the documents ``ids`` are; every one must be stored (and at least one asked for)."""
        if not ids:
            raise InvalidInputError(f"{what}() needs at least one document id")
        located = catalog.locate(conn, ids)
        for doc_id in ids:
            if doc_id not in located:
                raise DocumentNotFoundError(doc_id)
        return located

    def fetch(self, ids: Sequence[str]) -> CorpusVectors:
        ids = [str(i) for i in ids]
        with self._snapshot() as conn:
            return self._corpus(ids, self._located(conn, ids, "fetch"))

    def fetch_documents(self, ids: Sequence[str]) -> list[DocVectors]:
        """Read-only views of the memory-mapped vector file, one per document (float32 files; a
        float16 file gives converted copies): the rerank reads the page cache directly instead of
        first copying every candidate into one fresh array (docs/results/two-stage.md, "Latency")."""
        ids = [str(i) for i in ids]
        with self._snapshot() as conn:
            located = self._located(conn, ids, "fetch_documents")
            places = [located[i] for i in ids]
            views = self._vectors.ranges([p[0] for p in places], [p[1] for p in places], self._row_map().committed)
        return [DocVectors(v, offsets(json.loads(p[2]))) for v, p in zip(views, places)]

    def paragraph_centroids(self, ids: Sequence[str]) -> list[np.ndarray]:
        """Paragraph centroids (read-only float32) from the in-memory cache (:mod:`.centroids`): the first
        call after opening computes them for every live document."""
        ids = [str(i) for i in ids]
        with self._snapshot() as conn:
            located = self._located(conn, ids, "paragraph_centroids")
            rows = self._row_map()

            def views(starts: list[int], lengths: list[int]) -> list[np.ndarray]:  # read, not mapped: RSS
                return self._vectors.read_ranges(starts, lengths, rows.committed)

            return self._centroids.get(rows.epoch, [located[i] for i in ids], views,
                                       lambda: list(catalog.locate_all(conn).values()), len(rows.seq_ids))

    def all_vectors(self) -> CorpusVectors:
        """Every live document in ``seq`` order, float32 (a memory-map view when the file is
        float32 and compact, a gathered copy otherwise). Raises :class:`StoreError` when empty."""
        with self._snapshot() as conn:
            located = catalog.locate_all(conn)
            if not located:
                raise StoreError(f"store {self.path} has no documents")
            return self._corpus(list(located), located, view=True)

    # =========================================================================================
    # statistics and reference sample
    # =========================================================================================
    def stats_info(self) -> StatsInfo:
        with self._snapshot() as conn:
            return self._stats_info(conn)

    def _stats_info(self, conn: sqlite3.Connection) -> StatsInfo:
        if "stats" not in self._cache:
            self._cache["stats"] = catalog.stats_info(conn)
        return self._cache["stats"]

    def write_stats(
        self, stats: Mapping[str, NormStats], *, mode: str, sample_size: int | None, seed: int | None
    ) -> StatsInfo:
        """One refresh: write each document's statistics with version + 1 in one transaction.

        Ids that are no longer stored are skipped (logged; the result stays stale). A statistics
        length that differs from the document's paragraph count raises :class:`InvalidInputError`.
        The result is not stale only if every stored document now has statistics of this version.
        """
        with self._writing() as conn:
            with transaction(conn):
                unknown = catalog.write_stats(conn, stats, mode=mode, sample_size=sample_size, seed=seed)
                self._row_map().generation = catalog.bump_generation(conn)
            if unknown:
                logger.warning("store %s: statistics for %d unknown documents skipped (e.g. %r); stats stay stale",
                               self.path, len(unknown), unknown[0])
            self._cache.clear()
        return self.stats_info()

    def reference(self) -> ReferenceParagraphs | None:
        with self._snapshot() as conn:
            return self._reference(conn)

    @staticmethod
    def _reference(conn: sqlite3.Connection) -> ReferenceParagraphs | None:
        stored = catalog.read_reference(conn)
        return None if stored is None else records.decode_reference(*stored)

    def set_reference(self, reference: ReferenceParagraphs) -> None:
        """Persist the reference sample (ids, paragraph positions, seed, size and its own vectors)."""
        rows = records.encode_reference(reference)
        with self._writing() as conn, transaction(conn):
            catalog.replace_reference(conn, reference, rows)
            self._row_map().generation = catalog.bump_generation(conn)
            self._cache.clear()

    # =========================================================================================
    # search defaults
    # =========================================================================================
    def search_defaults(self) -> dict[str, Any]:
        with self._snapshot() as conn:
            return self._search_defaults(conn)

    def _search_defaults(self, conn: sqlite3.Connection) -> dict[str, Any]:
        if "search_defaults" not in self._cache:
            self._cache["search_defaults"] = dict(catalog.meta_get(conn, "search_defaults") or {})
        return dict(self._cache["search_defaults"])

    # =========================================================================================
    # one read per query
    # =========================================================================================
    def query_state(self, *, reference_version: int | None = None, ids: Sequence[str] = ()) -> QueryState:
        """Meta, search defaults, statistics info and (unless ``reference_version`` is current)
        the reference sample, from one SQLite read transaction (the first three cached per
        generation), and the documents ``ids`` (:meth:`get`, those that exist)."""
        with self._snapshot() as conn:
            state = query_state_of(self._meta(conn), self._search_defaults(conn), self._stats_info(conn),
                                   lambda: self._reference(conn), reference_version)
        return replace(state, documents=self.stored_documents(ids)) if ids else state

    def set_search_defaults(self, defaults: Mapping[str, Any]) -> dict[str, Any]:
        """Record the index's search defaults in ``meta`` (validated; ``{}`` clears them)."""
        checked = check_search_defaults(defaults)
        with self._writing() as conn, transaction(conn):
            if checked:
                catalog.meta_set(conn, "search_defaults", checked)
            else:
                catalog.meta_delete(conn, "search_defaults")
            self._row_map().generation = catalog.bump_generation(conn)
            self._cache.clear()
        return checked

    # =========================================================================================
    # maintenance and lifecycle
    # =========================================================================================
    def compact(self) -> dict[str, int]:
        """Rewrite the vector file and the FAISS index without dead rows, documents in ``seq`` order.

        Atomic: the new files are written under temporary names, the new row layout is committed
        in one transaction (with a record of the pending renames), then the files are renamed into
        place; a crash after the commit is finished on the next open. Returns row and byte counts
        before and after.
        """
        with self._writing() as conn:
            committed = self._row_map().committed
            before = {"rows": committed, "bytes": self.vector_path.stat().st_size}
            layout = compaction.plan(catalog.in_seq_order(conn, "doc_id, row_start, n_sentences"))
            if layout.is_noop(before["rows"]):
                logger.info("store %s: nothing to compact", self.path)
                return {"rows_before": before["rows"], "rows_after": before["rows"],
                        "bytes_before": before["bytes"], "bytes_after": before["bytes"]}
            vec_tmp, faiss_tmp = compaction.temp_paths(self.path, self.vector_path.name)
            index = compaction.write_files(self._vectors, self._ann, committed, layout, vec_tmp, faiss_tmp)
            renames = [[vec_tmp.name, self.vector_path.name], [faiss_tmp.name, FAISS]]
            compaction.commit_layout(conn, layout, renames)
            compaction.finish(self.path, conn, renames)
            self._reload()
            self._ann.index, self._ann.base = index, int(index.ntotal)
            after = self.vector_path.stat().st_size
            logger.info("store %s: compacted %d -> %d rows (%d -> %d bytes)",
                        self.path, before["rows"], layout.total, before["bytes"], after)
            return {"rows_before": before["rows"], "rows_after": layout.total,
                    "bytes_before": before["bytes"], "bytes_after": after}

    def close(self) -> None:
        """Save the FAISS index if it has unsaved rows, then release every file and connection
        (after a background lexical merge in progress has finished)."""
        self._lexical.wait_merge()
        with self._mutex:
            if self._conn is not None and self._ann.index is not None and not self.read_only:
                try:
                    self._save_on_close(self._conn)
                except (OSError, RuntimeError, sqlite3.Error) as e:
                    logger.warning("store %s: could not save the FAISS index on close (%s); it is rebuilt on open", self.path, e)
            self._drop_files()
            if self._conn is not None:
                self._conn.close()
                self._conn = None
            self._lock.close()
            self._map = None
            self._cache.clear()

    def _save_on_close(self, conn: sqlite3.Connection) -> None:
        with self._lock.hold(fcntl.LOCK_EX):
            meta = catalog.meta_all(conn)
            rows = self._row_map()
            index = self._ann.index
            if int(meta["epoch"]) != rows.epoch or index.ntotal > int(meta["committed_rows"]):
                return  # another process compacted or the index is not a prefix any more
            if index.ntotal > int(meta.get("faiss_rows", 0)):
                self._save_faiss(conn)

    def __repr__(self) -> str:
        return f"EmbeddedStore({str(self.path)!r}, read_only={self.read_only})"


_FRESH_FILES = frozenset({SQLITE, f"{SQLITE}-wal", f"{SQLITE}-shm", f"{SQLITE}-journal", LOCK, FAISS, FAISS_TMP})


def remove_unused_store(path: str | os.PathLike[str]) -> bool:
    """Remove the store directory ``path`` when it holds nothing but a store that never held a
    document (what a run that failed before writing leaves): only the store's own files, an
    empty vector file, no document row, and no other process holding its lock. Returns whether
    it was removed. For a directory the caller itself created (``sdr index`` after a failed
    start): a store whose documents were all deleted also looks like this."""
    path = Path(path)
    if not path.is_dir():
        return False
    names = {p.name for p in path.iterdir()}
    vectors = {n for n in names if n.startswith("vectors.")}
    if names - _FRESH_FILES - vectors or any((path / n).stat().st_size for n in vectors):
        return False
    if SQLITE in names:
        try:
            conn = sqlite3.connect(f"file:{path / SQLITE}?mode=ro", uri=True)
            try:
                if conn.execute("SELECT 1 FROM documents LIMIT 1").fetchone() is not None:
                    return False
            finally:
                conn.close()
        except sqlite3.OperationalError:  # no documents table yet: created, never initialised
            pass
    fd = os.open(path / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False  # another process has it open for writing
        shutil.rmtree(path)
        return True
    finally:
        os.close(fd)
