"""The embedded store: a :class:`DocumentStore` in one directory (SQLite + vector file + FAISS).

Layout of the directory::

    store.sqlite        SQLite (WAL): meta (JSON values), documents, reference sample
    vectors.<dtype>     append-only row-major matrix of sentence vectors (float32 or float16)
    faiss.index         HNSW (inner product) over every row of the vector file; row = faiss id
    .lock               fcntl.flock: exclusive for writers, shared while a reader reloads

A document owns rows ``[row_start, row_start + n_sentences)`` of the vector file. Replacing or
deleting a document leaves its rows *dead*; they stay in the vector file and in the FAISS index
and are filtered out at query time through an in-memory row -> document-seq array (``-1`` =
dead). :meth:`EmbeddedStore.compact` rewrites both files without dead rows.

Crash safety (a ``kill -9`` at any moment leaves a store that opens and resumes):

* ``put`` appends the vectors, fsyncs them, then commits every document row and the new
  *committed row count* in one SQLite transaction. Rows past the committed count are a torn or
  abandoned append; they are truncated on open and before every append.
* the FAISS index is a cache of the vector file: saved with write-temp + ``os.replace``; on load
  it is caught up when it has fewer rows than committed and rebuilt when it has more (written
  after a transaction that was lost) or cannot be read.
* ``compact`` writes new files under temporary names, then commits the new layout together with
  a *pending compaction* record, then renames; an interrupted rename is rolled forward on open.

Several processes may open one store: writers serialise on the lock file, and every operation
first checks the store's generation counter and reloads its in-memory view when another
process changed the store. Within a process, one store object is safe to share between threads
(operations are serialised by a lock).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import sqlite3
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence, cast

import numpy as np

from sdr_core.cache import document_key
from sdr_core.documents import Document
from sdr_core.errors import (
    DocumentNotFoundError,
    DuplicateIdError,
    IndexNotFoundError,
    InvalidDocumentError,
    InvalidInputError,
    ModelMismatchError,
    StoreError,
)
from sdr_core.scoring import NormStats
from sdr_core.vectors import CorpusVectors, DocVectors

from .provenance import library_versions
from .settings import EmbeddedStoreSettings
from .store import (
    DocumentStore,
    IndexMeta,
    ReferenceParagraphs,
    SentenceHits,
    StatsInfo,
    StoredDocument,
)

__all__ = ["EmbeddedStore", "FORMAT_VERSION", "library_versions"]

logger = logging.getLogger(__name__)

FORMAT_VERSION = 1
"""Version of the on-disk layout; a store written by a newer layout is refused."""

_SQLITE = "store.sqlite"
_FAISS = "faiss.index"
_LOCK = ".lock"
_FAISS_TMP = "faiss.index.tmp"
_COMPACT_SUFFIX = ".compact.tmp"
_SQL_CHUNK = 500  # ids per "IN (...)" query
_ADD_CHUNK = 32_768  # rows per FAISS add / file copy
_SERIAL_ADD_ROWS = 4_096  # FAISS additions up to this many rows run single-threaded
_KNN_ROUNDS = 3  # search rounds (x4 hits each) when a row lacks k distinct documents

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS documents (
    doc_id TEXT PRIMARY KEY,
    seq INTEGER NOT NULL UNIQUE,
    title TEXT,
    metadata TEXT NOT NULL,
    paragraphs TEXT NOT NULL,
    content_key TEXT NOT NULL,
    row_start INTEGER NOT NULL,
    n_sentences INTEGER NOT NULL,
    n_paragraphs INTEGER NOT NULL,
    par_sizes TEXT NOT NULL,
    stats BLOB,
    stats_version INTEGER
);
CREATE INDEX IF NOT EXISTS documents_without_stats ON documents(seq) WHERE stats IS NULL;
CREATE TABLE IF NOT EXISTS reference (
    position INTEGER PRIMARY KEY,
    doc_id TEXT NOT NULL,
    paragraph_index INTEGER NOT NULL,
    label TEXT NOT NULL,
    n_sentences INTEGER NOT NULL,
    vectors BLOB NOT NULL
);
"""

_EMPTY_STATS = {"version": 0, "mode": None, "sample_size": None, "seed": None, "computed_at": None, "stale": False}


# -- small helpers ----------------------------------------------------------------------------
def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _fsync_dir(path: Path) -> None:
    """Make renames and file creations in ``path`` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _chunks(seq: Sequence[Any], n: int = _SQL_CHUNK) -> Iterator[Sequence[Any]]:
    for i in range(0, len(seq), n):
        yield seq[i : i + n]


def _placeholders(n: int) -> str:
    return ",".join("?" * n)


def _gather_index(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Row numbers of the concatenated ranges ``[starts[i], starts[i] + lengths[i])``."""
    starts = np.asarray(starts, dtype=np.int64)
    lengths = np.asarray(lengths, dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    return np.repeat(starts - offsets[:-1], lengths) + np.arange(offsets[-1], dtype=np.int64)


def _encode_stats(stats: NormStats) -> bytes:
    return np.concatenate([stats.mu, stats.sigma]).astype("<f8").tobytes()


def _decode_stats(blob: bytes | None, doc_id: str) -> NormStats | None:
    if blob is None:
        return None
    arr = np.frombuffer(blob, dtype="<f8")
    n = arr.size // 2
    try:
        return NormStats(arr[:n].copy(), arr[n:].copy())
    except ValueError as e:
        raise StoreError(f"stored statistics of document {doc_id!r} are damaged: {e}") from e


@contextmanager
def _serial_faiss(enabled: bool) -> Iterator[None]:
    """Run the enclosed FAISS calls on one OpenMP thread (when ``enabled``)."""
    if not enabled:
        yield
        return
    import faiss

    previous = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        yield
    finally:
        faiss.omp_set_num_threads(previous)


def _offsets(par_sizes: Sequence[int]) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(np.asarray(par_sizes, dtype=np.int64))]).astype(np.int64)


@dataclass
class _Catalog:
    """In-memory view of the store at one generation: which row belongs to which live document."""

    generation: int
    epoch: int
    committed: int
    row_seq: np.ndarray  # capacity >= committed; [:committed] valid, -1 = dead row
    seq_ids: dict[int, str] = field(default_factory=dict)

    @property
    def rows(self) -> np.ndarray:
        return self.row_seq[: self.committed]

    def grow(self, committed: int) -> None:
        """Extend to ``committed`` rows (new rows dead until assigned), doubling capacity."""
        if committed > self.row_seq.size:
            cap = max(committed, 2 * self.row_seq.size, 1024)
            grown = np.full(cap, -1, dtype=np.int64)
            grown[: self.committed] = self.row_seq[: self.committed]
            self.row_seq = grown
        self.committed = committed


@dataclass(frozen=True)
class _Prepared:
    """A validated document ready to be written."""

    doc: Document
    vectors: np.ndarray
    par_sizes: list[int]
    content_key: str
    metadata_json: str
    paragraphs_json: str


class EmbeddedStore(DocumentStore):
    """A persistent :class:`DocumentStore` in the directory ``path`` (see the module docstring).

    ``create=True`` creates the store on first use if it does not exist; otherwise a missing store
    raises :class:`IndexNotFoundError`. ``read_only=True`` never writes (no repair, no FAISS save;
    write methods raise :class:`StoreError`). Nothing is opened in ``__init__``: SQLite, the vector
    file and the FAISS index are opened on first use; :meth:`close` releases them.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        create: bool = False,
        settings: EmbeddedStoreSettings | None = None,
        read_only: bool = False,
    ) -> None:
        self.path = Path(path)
        self.settings = settings or EmbeddedStoreSettings()
        self.read_only = read_only
        self._create = create
        if create and read_only:
            raise InvalidInputError("a store cannot be created read-only")
        if not create and not (self.path / _SQLITE).is_file():
            raise IndexNotFoundError(
                f"no sdr store at {self.path} (missing {_SQLITE}); run `sdr index` to build one"
            )
        self._mutex = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._lock_fd: int | None = None
        self._lock_mode: int | None = None
        self._vec_fh = None
        self._mm: np.ndarray | None = None
        self._index = None  # faiss.IndexHNSWFlat
        self._faiss_base = 0  # rows in the index when it was last loaded or saved
        self._cat: _Catalog | None = None
        self._cache: dict[str, Any] = {}  # per-generation caches (counts, stats info, meta)
        self._dtype = "float32"
        self._dim: int | None = None
        self._hnsw: dict[str, int] = {}
        self._read_paths: dict[str, Path] = {}  # read-only view of an interrupted compaction

    # =========================================================================================
    # opening, locking, repair
    # =========================================================================================
    @property
    def vector_path(self) -> Path:
        """The vector file (``vectors.<dtype>``, dtype as recorded in the store)."""
        self._db()
        return self._read_paths.get("vectors", self.path / f"vectors.{self._dtype}")

    @property
    def faiss_path(self) -> Path:
        return self._read_paths.get("faiss", self.path / _FAISS)

    @property
    def vector_dtype(self) -> str:
        """The recorded on-disk vector dtype (``float32`` or ``float16``)."""
        self._db()
        return self._dtype

    def _np_dtype(self) -> np.dtype:
        return np.dtype("<f2" if self._dtype == "float16" else "<f4")

    def _row_bytes(self) -> int:
        if self._dim is None:
            return 0
        return self._dim * self._np_dtype().itemsize

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
            self.path.mkdir(parents=True, exist_ok=True)
        elif not (self.path / _SQLITE).is_file():
            raise IndexNotFoundError(f"no sdr store at {self.path} (missing {_SQLITE}); run `sdr index` to build one")
        self._open_lock_file()
        mode = fcntl.LOCK_SH if self.read_only else fcntl.LOCK_EX
        with self._flock(mode):
            try:
                conn = self._connect()
            except sqlite3.Error as e:
                raise StoreError(f"cannot open the store database {self.path / _SQLITE}: {e}") from e
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

    def _open_lock_file(self) -> None:
        if self._lock_fd is not None:
            return
        lock = self.path / _LOCK
        try:
            self._lock_fd = os.open(lock, os.O_RDONLY if self.read_only else os.O_RDWR | os.O_CREAT, 0o644)
        except FileNotFoundError:
            logger.warning("store %s has no lock file; reading without locking", self.path)
        except OSError as e:
            raise StoreError(f"cannot open the lock file {lock}: {e}") from e

    @contextmanager
    def _flock(self, mode: int) -> Iterator[None]:
        """Hold the directory lock (re-entrant within this object; the mutex must be held)."""
        if self._lock_mode is not None or self._lock_fd is None:
            if self._lock_mode == fcntl.LOCK_SH and mode == fcntl.LOCK_EX:
                raise StoreError("internal error: exclusive lock requested under a shared lock")
            yield
            return
        fcntl.flock(self._lock_fd, mode)
        self._lock_mode = mode
        try:
            yield
        finally:
            self._lock_mode = None
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    def _connect(self) -> sqlite3.Connection:
        db = self.path / _SQLITE
        if self.read_only:
            conn = sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True, timeout=60,
                                   isolation_level=None, check_same_thread=False)
        else:
            conn = sqlite3.connect(db, timeout=60, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
        return conn

    def _initialise(self, conn: sqlite3.Connection) -> None:
        """Create the schema and the initial meta of a new store (one transaction)."""
        has_meta = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type='table' AND name='meta'"
        ).fetchone()
        if has_meta and conn.execute("SELECT 1 FROM meta WHERE key='format_version'").fetchone():
            return
        s = self.settings
        conn.execute("BEGIN IMMEDIATE")
        try:
            for stmt in filter(str.strip, _SCHEMA.split(";")):
                conn.execute(stmt)
            initial = {
                "format_version": FORMAT_VERSION,
                "vector_dtype": s.vector_dtype,
                "hnsw": {"m": s.hnsw_m, "ef_construction": s.hnsw_ef_construction},
                "committed_rows": 0,
                "faiss_rows": 0,
                "generation": 0,
                "epoch": 0,
                "next_seq": 0,
                "stats": dict(_EMPTY_STATS),
                "created": {"at": _now(), "versions": library_versions()},
            }
            conn.executemany(
                "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
                [(k, json.dumps(v)) for k, v in initial.items()],
            )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        (self.path / f"vectors.{s.vector_dtype}").touch()
        _fsync_dir(self.path)
        logger.info("created store %s (vectors %s, HNSW M=%d)", self.path, s.vector_dtype, s.hnsw_m)

    def _read_recorded(self, conn: sqlite3.Connection) -> None:
        """Read the settings recorded at creation (they win over the environment)."""
        try:
            meta = self._meta_all(conn)
        except sqlite3.Error as e:
            raise StoreError(f"{self.path} is not an sdr store ({e})") from e
        version = meta.get("format_version")
        if version is None:
            raise StoreError(f"{self.path / _SQLITE} is not an sdr store (no format version); re-create it")
        if int(version) > FORMAT_VERSION:
            raise StoreError(
                f"store {self.path} has format version {version}; this sdr-search reads up to "
                f"version {FORMAT_VERSION}. Upgrade sdr-search."
            )
        self._dtype = meta["vector_dtype"]
        self._hnsw = {k: int(v) for k, v in meta["hnsw"].items()}
        index_meta = meta.get("index_meta")
        self._dim = int(index_meta["dim"]) if index_meta else None
        if self.settings.vector_dtype != self._dtype:
            logger.info("store %s records vectors as %s; using that (setting says %s)",
                        self.path, self._dtype, self.settings.vector_dtype)

    def _repair(self, conn: sqlite3.Connection) -> None:
        """Roll forward an interrupted compaction, drop stray temp files, cut a torn vector tail."""
        meta = self._meta_all(conn)
        if meta.get("pending_compaction"):
            self._roll_forward(conn, meta["pending_compaction"])
        for stray in [self.path / _FAISS_TMP, *self.path.glob(f"*{_COMPACT_SUFFIX}")]:
            if stray.exists():
                stray.unlink()
                logger.warning("store %s: removed %s left by an interrupted write", self.path, stray.name)
        self._truncate_tail(int(meta["committed_rows"]))

    def _roll_forward(self, conn: sqlite3.Connection, pending: Mapping[str, Any]) -> None:
        """Finish a compaction whose new layout is committed but whose files were not all renamed
        (the exclusive lock must be held)."""
        for tmp_name, final_name in pending["renames"]:
            tmp = self.path / tmp_name
            if tmp.exists():
                os.replace(tmp, self.path / final_name)
                logger.warning("store %s: finished an interrupted compaction (%s)", self.path, final_name)
        _fsync_dir(self.path)
        conn.execute("DELETE FROM meta WHERE key='pending_compaction'")

    def _pending_read_paths(self, pending: Mapping[str, Any] | None) -> None:
        """Read-only: read the not-yet-renamed files of an interrupted compaction in place."""
        self._read_paths = {}
        for tmp_name, final_name in (pending or {}).get("renames", []):
            if (self.path / tmp_name).exists():
                self._read_paths["faiss" if final_name == _FAISS else "vectors"] = self.path / tmp_name
        if pending:
            logger.warning("store %s has an interrupted compaction; open it writable once to finish it", self.path)

    def _truncate_tail(self, committed: int) -> None:
        """Cut the vector file to ``committed`` rows (the exclusive lock must be held)."""
        path = self.path / f"vectors.{self._dtype}"
        want = committed * self._row_bytes()
        size = path.stat().st_size if path.exists() else 0
        if not path.exists():
            if committed:
                raise StoreError(f"store {self.path}: the vector file {path.name} is missing")
            path.touch()
            return
        if size < want:
            raise StoreError(
                f"store {self.path}: the vector file holds {size} bytes but {committed} committed rows "
                f"need {want}; the store is damaged"
            )
        if size > want:
            if self._vec_fh is not None:
                self._vec_fh.flush()
            os.truncate(path, want)
            logger.warning("store %s: dropped %d bytes of an unfinished append from %s", self.path, size - want, path.name)

    def _check_read_only_layout(self, conn: sqlite3.Connection) -> None:
        meta = self._meta_all(conn)
        self._pending_read_paths(meta.get("pending_compaction"))
        need = int(meta["committed_rows"]) * self._row_bytes()
        path = self._read_paths.get("vectors", self.path / f"vectors.{self._dtype}")
        size = path.stat().st_size if path.exists() else 0
        if size < need:
            raise StoreError(f"store {self.path}: the vector file is shorter than its committed rows; damaged")

    # -- meta table -----------------------------------------------------------------------------
    @staticmethod
    def _meta_all(conn: sqlite3.Connection) -> dict[str, Any]:
        return {k: json.loads(v) for k, v in conn.execute("SELECT key, value FROM meta")}

    @staticmethod
    def _meta_get(conn: sqlite3.Connection, key: str, default: Any = None) -> Any:
        row = conn.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return default if row is None else json.loads(row[0])

    @staticmethod
    def _meta_set(conn: sqlite3.Connection, key: str, value: Any) -> None:
        conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, json.dumps(value)))

    def _bump_generation(self, conn: sqlite3.Connection) -> int:
        gen = int(self._meta_get(conn, "generation", 0)) + 1
        self._meta_set(conn, "generation", gen)
        return gen

    # -- consistent views ---------------------------------------------------------------------
    @contextmanager
    def _snapshot(self) -> Iterator[sqlite3.Connection]:
        """A read transaction whose data matches the in-memory catalogue (reloaded if needed)."""
        with self._mutex:
            conn = self._db()
            while True:
                conn.execute("BEGIN")
                gen = self._meta_get(conn, "generation", 0)
                if self._cat is not None and gen == self._cat.generation:
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
            with self._flock(fcntl.LOCK_EX):
                gen = self._meta_get(conn, "generation", 0)
                if self._cat is None or gen != self._cat.generation:
                    self._reload()
                yield conn

    @contextmanager
    def _transaction(self, conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def _reload(self) -> None:
        """Rebuild the in-memory catalogue from SQLite (after another process wrote).

        A compaction left half-renamed by a writer that died is finished first (or, read-only,
        read in place), so the files always match the committed layout.
        """
        meta, docs = self._read_catalog(fcntl.LOCK_SH)
        if meta.get("pending_compaction"):
            if self.read_only:
                self._pending_read_paths(meta["pending_compaction"])
            else:
                with self._flock(fcntl.LOCK_EX):
                    pending = self._meta_get(self._db(), "pending_compaction")
                    if pending:
                        self._roll_forward(self._db(), pending)
                    meta, docs = self._read_catalog(fcntl.LOCK_EX)
        elif self.read_only:
            self._pending_read_paths(None)
        committed = int(meta["committed_rows"])
        cat = _Catalog(int(meta["generation"]), int(meta["epoch"]), 0, np.full(0, -1, dtype=np.int64))
        cat.grow(committed)
        if docs:
            seqs = np.fromiter((d[0] for d in docs), dtype=np.int64, count=len(docs))
            starts = np.fromiter((d[2] for d in docs), dtype=np.int64, count=len(docs))
            lengths = np.fromiter((d[3] for d in docs), dtype=np.int64, count=len(docs))
            if np.any(starts + lengths > committed) or np.any(starts < 0):
                raise StoreError(f"store {self.path}: a document refers to rows past the committed count; damaged")
            cat.row_seq[_gather_index(starts, lengths)] = np.repeat(seqs, lengths)
            cat.seq_ids = {int(s): d[1] for s, d in zip(seqs, docs)}
        index_meta = meta.get("index_meta")
        self._dim = int(index_meta["dim"]) if index_meta else None
        old = self._cat
        if old is None or old.epoch != cat.epoch:
            self._drop_files()
        else:
            if old.committed != cat.committed:
                self._mm = None
            if self._index is not None and self._index.ntotal > cat.committed:
                self._index = None
        self._cat = cat
        self._cache.clear()

    def _read_catalog(self, mode: int) -> tuple[dict[str, Any], list[tuple[int, str, int, int]]]:
        """Meta and every document's rows, read in one transaction under the lock ``mode``."""
        conn = self._db()
        with self._flock(mode):
            conn.execute("BEGIN")
            try:
                meta = self._meta_all(conn)
                docs = conn.execute("SELECT seq, doc_id, row_start, n_sentences FROM documents").fetchall()
            finally:
                conn.execute("COMMIT")
        return meta, docs

    def _drop_files(self) -> None:
        """Forget file handles and maps (after a compaction replaced the files)."""
        self._mm = None
        self._index = None
        if self._vec_fh is not None:
            self._vec_fh.close()
            self._vec_fh = None

    def _catalog(self) -> _Catalog:
        if self._cat is None:
            raise StoreError("internal error: catalogue not loaded")
        return self._cat

    # -- vectors on disk ------------------------------------------------------------------------
    def _matrix(self) -> np.ndarray:
        """The committed rows of the vector file, memory-mapped, shape ``(committed, dim)``."""
        cat = self._catalog()
        if self._mm is not None and self._mm.shape[0] == cat.committed:
            return self._mm
        dim = self._dim or 0
        if cat.committed == 0 or dim == 0:
            self._mm = np.zeros((0, dim), dtype=self._np_dtype())
        else:
            self._mm = np.memmap(self.vector_path, dtype=self._np_dtype(), mode="r", shape=(cat.committed, dim))
        return self._mm

    def _rows_f32(self, rows: np.ndarray) -> np.ndarray:
        """Rows ``rows`` as float32, read with one sorted gather."""
        mm = self._matrix()
        if rows.size == 0:
            return np.zeros((0, self._dim or 0), dtype=np.float32)
        uniq, inverse = np.unique(rows, return_inverse=True)
        block = np.asarray(mm[uniq], dtype=np.float32)
        return block[inverse]

    def _append_vectors(self, start_row: int, block: np.ndarray) -> None:
        """Write ``block`` at row ``start_row`` (cutting anything after it) and fsync."""
        if self._vec_fh is None:
            self._vec_fh = open(self.vector_path, "r+b")
        fh = self._vec_fh
        offset = start_row * self._row_bytes()
        fh.seek(0, os.SEEK_END)
        if fh.tell() != offset:
            if fh.tell() < offset:
                raise StoreError(f"store {self.path}: the vector file is shorter than its committed rows; damaged")
            logger.warning("store %s: dropped %d bytes of an unfinished append", self.path, fh.tell() - offset)
            fh.truncate(offset)
        fh.seek(offset)
        fh.write(np.ascontiguousarray(block, dtype=self._np_dtype()).tobytes())
        fh.flush()
        os.fsync(fh.fileno())

    def _cut_vectors(self, start_row: int) -> None:
        """Undo an append whose transaction failed."""
        try:
            if self._vec_fh is not None:
                self._vec_fh.truncate(start_row * self._row_bytes())
                self._vec_fh.flush()
        except OSError as e:  # the next append or open cuts it anyway
            logger.warning("store %s: could not cut an abandoned append: %s", self.path, e)

    # -- FAISS ------------------------------------------------------------------------------------
    def _new_index(self):
        import faiss

        index = faiss.IndexHNSWFlat(int(self._dim or 0), int(self._hnsw["m"]), faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = int(self._hnsw["ef_construction"])
        return index

    def _add_rows(self, index, start: int, stop: int, source: np.ndarray | None = None) -> None:
        """Add rows ``[start, stop)`` of the vector file (or ``source``) to ``index``.

        Small additions (one ``put``) run on one OpenMP thread: for a few hundred rows the thread
        start-up of HNSW's parallel insert costs more than it saves (measured 10x slower).
        """
        mm = self._matrix() if source is None else source
        with _serial_faiss(stop - start <= _SERIAL_ADD_ROWS):
            for a in range(start, stop, _ADD_CHUNK):
                b = min(stop, a + _ADD_CHUNK)
                index.add(np.ascontiguousarray(mm[a:b], dtype=np.float32))

    def _load_index(self, prior_rows: int):
        """Read ``faiss.index`` if usable, else ``None`` (logging why).

        ``prior_rows``: rows that should already be in a saved index (committed before the
        current operation); a missing file is only worth a warning when there are some.
        """
        import faiss

        path = self.faiss_path
        if not path.exists():
            if prior_rows:
                logger.warning("store %s: no FAISS index file; rebuilding it from the vector file", self.path)
            return None
        try:
            index = faiss.read_index(str(path))
        except RuntimeError as e:
            logger.warning("store %s: FAISS index unreadable (%s); rebuilding it", self.path, str(e).splitlines()[0])
            return None
        if index.d != self._dim or index.metric_type != faiss.METRIC_INNER_PRODUCT:
            logger.warning("store %s: FAISS index has the wrong shape; rebuilding it", self.path)
            return None
        committed = self._catalog().committed
        if index.ntotal > committed:
            logger.warning(
                "store %s: FAISS index has %d rows but only %d are committed (written after a lost "
                "transaction); rebuilding it", self.path, index.ntotal, committed,
            )
            return None
        if index.ntotal < prior_rows:
            logger.warning("store %s: FAISS index catching up %d rows", self.path, prior_rows - index.ntotal)
        return index

    def _faiss(self, prior_rows: int | None = None):
        """The FAISS index, loaded or rebuilt, caught up with every committed row.

        ``prior_rows`` (default: all committed rows) is only used to decide what to log.
        """
        committed = self._catalog().committed
        if self._index is None:
            index = self._load_index(committed if prior_rows is None else prior_rows)
            if index is None:
                index = self._new_index()
            self._index = index
            self._faiss_base = int(index.ntotal)
        if self._index.ntotal < committed:
            self._add_rows(self._index, int(self._index.ntotal), committed)
        return self._index

    def _save_faiss(self, conn: sqlite3.Connection) -> None:
        """Write the FAISS index atomically (exclusive lock held, index matches this epoch)."""
        import faiss

        index = self._index
        if index is None or self.read_only:
            return
        tmp = self.path / _FAISS_TMP
        faiss.write_index(index, str(tmp))
        _fsync_file(tmp)
        os.replace(tmp, self.path / _FAISS)
        _fsync_dir(self.path)
        self._meta_set(conn, "faiss_rows", int(index.ntotal))  # autocommit
        self._faiss_base = int(index.ntotal)
        logger.debug("store %s: saved FAISS index (%d rows)", self.path, index.ntotal)

    # =========================================================================================
    # metadata
    # =========================================================================================
    def meta(self) -> IndexMeta | None:
        with self._snapshot() as conn:
            if "meta" not in self._cache:
                raw = self._meta_get(conn, "index_meta")
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
            with self._transaction(conn):
                raw = self._meta_get(conn, "index_meta")
                if raw is not None:
                    return IndexMeta.from_dict(raw)
                self._meta_set(conn, "index_meta", meta.to_dict())
                gen = self._bump_generation(conn)
            self._dim = int(meta.dim)
            self._catalog().generation = gen
            self._cache.clear()
        logger.info("store %s: recorded model %s (dim %d)", self.path, meta.model_id, meta.dim)
        return meta

    def counts(self) -> dict[str, int]:
        with self._snapshot() as conn:
            if "counts" not in self._cache:
                n_docs, n_par, n_sent = conn.execute(
                    "SELECT COUNT(*), COALESCE(SUM(n_paragraphs), 0), COALESCE(SUM(n_sentences), 0) FROM documents"
                ).fetchone()
                self._cache["counts"] = {"documents": int(n_docs), "paragraphs": int(n_par), "sentences": int(n_sent)}
            return dict(self._cache["counts"])

    def generation(self) -> int:
        """Counter bumped by every committed change (documents, stats, reference, meta)."""
        with self._snapshot():
            return self._catalog().generation

    def storage_info(self) -> dict[str, int]:
        """Rows in the vector file (live and dead), its size in bytes, and rows in the FAISS file."""
        with self._snapshot() as conn:
            rows = self._catalog().rows
            live = int(np.count_nonzero(rows >= 0))
            path = self.vector_path
            return {
                "rows": int(rows.size),
                "live_rows": live,
                "dead_rows": int(rows.size) - live,
                "vector_bytes": path.stat().st_size if path.exists() else 0,
                "faiss_rows_saved": int(self._meta_get(conn, "faiss_rows", 0)),
            }

    # =========================================================================================
    # documents
    # =========================================================================================
    def _prepare(self, doc: Document, vectors: DocVectors, meta: IndexMeta) -> _Prepared:
        if not isinstance(doc, Document) or not isinstance(vectors, DocVectors):
            raise InvalidInputError("put() takes (Document, DocVectors) pairs")
        if vectors.dim != int(meta.dim):
            raise ModelMismatchError(
                f"document {doc.id!r}: vectors have dimension {vectors.dim}, but store {self.path} holds "
                f"dimension {meta.dim} (model {meta.model_id})"
            )
        sizes = [len(p) for p in doc.paragraphs]
        if sizes != np.diff(vectors.par_offsets).tolist():
            raise InvalidDocumentError(
                doc.id, f"vectors are grouped as {np.diff(vectors.par_offsets).tolist()} sentences per "
                f"paragraph but the document has {sizes}"
            )
        if not np.all(np.isfinite(vectors.vectors)):
            raise InvalidDocumentError(doc.id, "vectors contain NaN or infinity")
        try:
            metadata_json = json.dumps(dict(doc.metadata), ensure_ascii=False)
        except (TypeError, ValueError) as e:
            raise InvalidDocumentError(doc.id, f"metadata is not JSON-serialisable: {e}") from e
        return _Prepared(
            doc, vectors.vectors, sizes, document_key(meta.encoder_tag, doc.paragraphs), metadata_json,
            json.dumps([list(p) for p in doc.paragraphs], ensure_ascii=False),
        )

    def _required_meta(self, conn: sqlite3.Connection) -> IndexMeta:
        raw = self._meta_get(conn, "index_meta")
        if raw is None:
            raise StoreError(f"store {self.path} has no model recorded; call ensure_meta() before put()")
        return IndexMeta.from_dict(raw)

    def put(self, items: Sequence[tuple[Document, DocVectors]]) -> None:
        items = list(items)
        if not items:
            return
        with self._writing() as conn:
            meta = self._required_meta(conn)
            prepared = [self._prepare(doc, vec, meta) for doc, vec in items]
            seen: set[str] = set()
            for p in prepared:
                if p.doc.id in seen:
                    raise DuplicateIdError(p.doc.id, "appears twice in one put()")
                seen.add(p.doc.id)
            cat = self._catalog()
            start = cat.committed
            self._append_vectors(start, np.concatenate([p.vectors for p in prepared]))
            try:
                placed, old_ranges, gen = self._commit_put(conn, prepared, start)
            except BaseException:
                self._cut_vectors(start)
                raise
            self._apply_put(placed, old_ranges, gen)
            self._after_append(conn, start)

    def _commit_put(
        self, conn: sqlite3.Connection, prepared: list[_Prepared], start: int
    ) -> tuple[list[tuple[int, str, int, int]], list[tuple[int, int, int]], int]:
        """One transaction: upsert every document, advance the committed row count, mark stats stale."""
        ids = [p.doc.id for p in prepared]
        with self._transaction(conn):
            existing: dict[str, tuple[int, int, int]] = {}
            for chunk in _chunks(ids):
                q = f"SELECT doc_id, seq, row_start, n_sentences FROM documents WHERE doc_id IN ({_placeholders(len(chunk))})"
                existing.update({r[0]: (r[1], r[2], r[3]) for r in conn.execute(q, list(chunk))})
            next_seq = int(self._meta_get(conn, "next_seq", 0))
            row = start
            placed, rows = [], []
            for p in prepared:
                old = existing.get(p.doc.id)
                seq = old[0] if old else next_seq
                next_seq += 0 if old else 1
                n = int(p.vectors.shape[0])
                placed.append((seq, p.doc.id, row, n))
                rows.append((p.doc.id, seq, p.doc.title, p.metadata_json, p.paragraphs_json, p.content_key,
                             row, n, len(p.par_sizes), json.dumps(p.par_sizes)))
                row += n
            conn.executemany(
                "INSERT INTO documents (doc_id, seq, title, metadata, paragraphs, content_key, row_start, "
                "n_sentences, n_paragraphs, par_sizes, stats, stats_version) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, NULL) "
                "ON CONFLICT(doc_id) DO UPDATE SET title=excluded.title, metadata=excluded.metadata, "
                "paragraphs=excluded.paragraphs, content_key=excluded.content_key, row_start=excluded.row_start, "
                "n_sentences=excluded.n_sentences, n_paragraphs=excluded.n_paragraphs, "
                "par_sizes=excluded.par_sizes, stats=NULL, stats_version=NULL",
                rows,
            )
            self._meta_set(conn, "committed_rows", row)
            self._meta_set(conn, "next_seq", next_seq)
            self._mark_stale(conn)
            gen = self._bump_generation(conn)
        return placed, list(existing.values()), gen

    def _mark_stale(self, conn: sqlite3.Connection) -> None:
        info = self._meta_get(conn, "stats", dict(_EMPTY_STATS))
        if not info.get("stale"):
            info["stale"] = True
            self._meta_set(conn, "stats", info)

    def _apply_put(
        self, placed: list[tuple[int, str, int, int]], old_ranges: list[tuple[int, int, int]], gen: int
    ) -> None:
        cat = self._catalog()
        cat.grow(placed[-1][2] + placed[-1][3])
        for _, row_start, n in old_ranges:
            cat.row_seq[row_start : row_start + n] = -1
        for seq, doc_id, row_start, n in placed:
            cat.row_seq[row_start : row_start + n] = seq
            cat.seq_ids[seq] = doc_id
        cat.generation = gen
        self._mm = None
        self._cache.clear()

    def _after_append(self, conn: sqlite3.Connection, start: int) -> None:
        """Add the new rows (from row ``start``) to FAISS; save it every ``faiss_save_every`` rows."""
        index = self._faiss(prior_rows=start)
        if index.ntotal - self._faiss_base >= self.settings.faiss_save_every:
            self._save_faiss(conn)

    def delete(self, ids: Sequence[str]) -> int:
        ids = list(dict.fromkeys(str(i) for i in ids))
        if not ids:
            return 0
        with self._writing() as conn:
            found: list[tuple[int, int, int]] = []
            with self._transaction(conn):
                for chunk in _chunks(ids):
                    marks = _placeholders(len(chunk))
                    found += conn.execute(
                        f"SELECT seq, row_start, n_sentences FROM documents WHERE doc_id IN ({marks})", list(chunk)
                    ).fetchall()
                    conn.execute(f"DELETE FROM documents WHERE doc_id IN ({marks})", list(chunk))
                if found:
                    self._mark_stale(conn)
                    gen = self._bump_generation(conn)
            if found:
                cat = self._catalog()
                for seq, row_start, n in found:
                    cat.row_seq[row_start : row_start + n] = -1
                    cat.seq_ids.pop(seq, None)
                cat.generation = gen
                self._cache.clear()
            return len(found)

    def get(self, doc_id: str) -> StoredDocument:
        with self._snapshot() as conn:
            row = conn.execute(
                "SELECT title, metadata, paragraphs, row_start, n_sentences, par_sizes, stats "
                "FROM documents WHERE doc_id=?", (doc_id,),
            ).fetchone()
            if row is None:
                raise DocumentNotFoundError(doc_id)
            title, metadata, paragraphs, row_start, n, par_sizes, stats = row
            vectors = np.asarray(self._matrix()[row_start : row_start + n], dtype=np.float32).copy()
        document = Document(doc_id, tuple(tuple(p) for p in json.loads(paragraphs)), title, json.loads(metadata))
        return StoredDocument(document, DocVectors(vectors, _offsets(json.loads(par_sizes))), _decode_stats(stats, doc_id))

    def content_keys(self, ids: Sequence[str]) -> dict[str, str]:
        ids = list(dict.fromkeys(ids))
        out: dict[str, str] = {}
        with self._snapshot() as conn:
            for chunk in _chunks(ids):
                q = f"SELECT doc_id, content_key FROM documents WHERE doc_id IN ({_placeholders(len(chunk))})"
                out.update(conn.execute(q, list(chunk)).fetchall())
        return out

    def iter_ids(self) -> Iterator[str]:
        """Document ids in insertion order (a replaced document keeps its place)."""
        with self._snapshot() as conn:
            ids = [r[0] for r in conn.execute("SELECT doc_id FROM documents ORDER BY seq")]
        return iter(ids)

    # =========================================================================================
    # retrieval
    # =========================================================================================
    def _query_matrix(self, vectors: np.ndarray) -> np.ndarray:
        q = np.atleast_2d(np.asarray(vectors, dtype=np.float32))
        if q.ndim != 2:
            raise InvalidInputError(f"query vectors must be a 2-D array, got shape {np.shape(vectors)}")
        if self._dim is not None and q.shape[1] != self._dim:
            raise ModelMismatchError(
                f"query vectors have dimension {q.shape[1]}, store {self.path} holds dimension {self._dim}"
            )
        return np.ascontiguousarray(q)

    def _seqs_of(self, conn: sqlite3.Connection, ids: Sequence[str]) -> np.ndarray:
        seqs: list[int] = []
        ids = list(dict.fromkeys(ids))
        for chunk in _chunks(ids):
            q = f"SELECT seq FROM documents WHERE doc_id IN ({_placeholders(len(chunk))})"
            seqs += [r[0] for r in conn.execute(q, list(chunk))]
        return np.asarray(sorted(seqs), dtype=np.int64)

    def _search(self, index, q: np.ndarray, n_hits: int) -> tuple[np.ndarray, np.ndarray]:
        import faiss

        params = faiss.SearchParametersHNSW()
        params.efSearch = max(self.settings.hnsw_ef_search, n_hits)
        return index.search(q, n_hits, params=params)

    @staticmethod
    def _first_hits(
        dist: np.ndarray, rows: np.ndarray, row_seq: np.ndarray, exclude: np.ndarray, k: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Best hit per live, non-excluded document, best first, at most ``k``."""
        valid = rows >= 0
        rows, dist = rows[valid], dist[valid]
        seqs = row_seq[rows]
        keep = seqs >= 0
        if exclude.size:
            keep &= ~np.isin(seqs, exclude)
        seqs, dist = seqs[keep], dist[keep]
        _, first = np.unique(seqs, return_index=True)
        first = np.sort(first)[:k]
        return seqs[first], dist[first]

    def sentence_knn(self, vectors: np.ndarray, k: int, *, exclude_ids: Sequence[str] = ()) -> SentenceHits:
        """Nested k-NN: for each query row the top-``k`` documents by their best sentence.

        Fetches ``k * knn_oversample`` sentence hits per row in one batched FAISS search, drops dead
        rows and excluded documents, keeps each document's best hit; rows left with fewer than
        ``k`` documents (while more exist) are searched again with 4x as many hits, up to 3 rounds.
        """
        if k < 1:
            raise InvalidInputError(f"k must be >= 1, got {k}")
        with self._snapshot() as conn:
            q = self._query_matrix(vectors)
            cat = self._catalog()
            exclude = self._seqs_of(conn, exclude_ids) if len(exclude_ids) else np.zeros(0, dtype=np.int64)
            want = min(k, len(cat.seq_ids) - exclude.size)
            if q.shape[0] == 0 or want <= 0 or self._dim is None:
                return SentenceHits([[] for _ in range(q.shape[0])], [np.zeros(0, np.float32) for _ in range(q.shape[0])])
            index = self._faiss()
            results = self._knn_rounds(index, q, k, want, cat.rows, exclude)
            ids = [[cat.seq_ids[int(s)] for s in seqs] for seqs, _ in results]
        return SentenceHits(ids, [np.asarray(d, dtype=np.float32) for _, d in results])

    def _knn_rounds(
        self, index, q: np.ndarray, k: int, want: int, row_seq: np.ndarray, exclude: np.ndarray
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        total = int(index.ntotal)
        n_hits = min(total, k * self.settings.knn_oversample)
        results: list[tuple[np.ndarray, np.ndarray]] = [(np.zeros(0, np.int64), np.zeros(0, np.float32))] * q.shape[0]
        pending = np.arange(q.shape[0])
        for round_ in range(_KNN_ROUNDS):
            dist, rows = self._search(index, q[pending], n_hits)
            short = []
            for j, r in enumerate(pending):
                results[r] = self._first_hits(dist[j], rows[j], row_seq, exclude, k)
                if results[r][0].size < want:
                    short.append(r)
            if not short or n_hits >= total:
                break
            if round_ == _KNN_ROUNDS - 1:
                logger.debug("nested k-NN: %d query rows got fewer than %d documents", len(short), want)
                break
            pending = np.asarray(short)
            n_hits = min(total, n_hits * 4)
        return results

    def _locate(self, conn: sqlite3.Connection, ids: Sequence[str]) -> dict[str, tuple[int, int, str]]:
        found: dict[str, tuple[int, int, str]] = {}
        uniq = list(dict.fromkeys(ids))
        for chunk in _chunks(uniq):
            q = f"SELECT doc_id, row_start, n_sentences, par_sizes FROM documents WHERE doc_id IN ({_placeholders(len(chunk))})"
            found.update({r[0]: (r[1], r[2], r[3]) for r in conn.execute(q, list(chunk))})
        return found

    def _corpus(
        self, ids: Sequence[str], located: Mapping[str, tuple[int, int, str]], *, view: bool = False
    ) -> CorpusVectors:
        """Gather the documents ``ids`` (in that order) into one float32 CorpusVectors.

        Documents that lie back to back in a float32 file are one slice: a view of the memory map
        when ``view`` (read-only, no copy), else one copy. Otherwise one sorted gather.
        """
        starts = np.asarray([located[i][0] for i in ids], dtype=np.int64)
        lengths = np.asarray([located[i][1] for i in ids], dtype=np.int64)
        sizes = [json.loads(located[i][2]) for i in ids]
        par_offsets = _offsets([s for doc in sizes for s in doc])
        doc_par = _offsets([len(doc) for doc in sizes])
        contiguous = self._dtype == "float32" and np.array_equal(starts[1:], starts[:-1] + lengths[:-1])
        if contiguous:
            block = self._matrix()[int(starts[0]) : int(starts[0] + lengths.sum())]
            vectors = block if view else np.array(block, dtype=np.float32)
        else:
            vectors = self._rows_f32(_gather_index(starts, lengths))
        return CorpusVectors(tuple(ids), vectors, par_offsets, doc_par)

    def fetch(self, ids: Sequence[str]) -> CorpusVectors:
        ids = [str(i) for i in ids]
        if not ids:
            raise InvalidInputError("fetch() needs at least one document id")
        with self._snapshot() as conn:
            located = self._locate(conn, ids)
            for doc_id in ids:
                if doc_id not in located:
                    raise DocumentNotFoundError(doc_id)
            return self._corpus(ids, located)

    def all_vectors(self) -> CorpusVectors:
        """Every live document in ``seq`` order, float32 (a memory-map view when the file is
        float32 and compact, a gathered copy otherwise). Raises :class:`StoreError` when empty."""
        with self._snapshot() as conn:
            rows = conn.execute("SELECT doc_id, row_start, n_sentences, par_sizes FROM documents ORDER BY seq").fetchall()
            if not rows:
                raise StoreError(f"store {self.path} has no documents")
            located = {r[0]: (r[1], r[2], r[3]) for r in rows}
            return self._corpus([r[0] for r in rows], located, view=True)

    # =========================================================================================
    # statistics and reference sample
    # =========================================================================================
    def stats_info(self) -> StatsInfo:
        with self._snapshot() as conn:
            if "stats" not in self._cache:
                info = self._meta_get(conn, "stats", dict(_EMPTY_STATS))
                without = conn.execute("SELECT COUNT(*) FROM documents WHERE stats IS NULL").fetchone()[0]
                self._cache["stats"] = StatsInfo(
                    version=int(info["version"]), mode=info["mode"], sample_size=info["sample_size"],
                    seed=info["seed"], stale=bool(info["stale"]), computed_at=info["computed_at"],
                    docs_without_stats=int(without),
                )
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
            with self._transaction(conn):
                info = self._meta_get(conn, "stats", dict(_EMPTY_STATS))
                version = int(info["version"]) + 1
                n_pars = dict(conn.execute("SELECT doc_id, n_paragraphs FROM documents"))
                unknown = [d for d in stats if d not in n_pars]
                updates = []
                for doc_id, s in stats.items():
                    if doc_id not in n_pars:
                        continue
                    if len(s) != n_pars[doc_id]:
                        raise InvalidInputError(
                            f"statistics of document {doc_id!r} have {len(s)} paragraphs, the document has {n_pars[doc_id]}"
                        )
                    updates.append((_encode_stats(s), version, doc_id))
                conn.executemany("UPDATE documents SET stats=?, stats_version=? WHERE doc_id=?", updates)
                behind = conn.execute(
                    "SELECT COUNT(*) FROM documents WHERE stats IS NULL OR stats_version != ?", (version,)
                ).fetchone()[0]
                new_info = {"version": version, "mode": mode, "sample_size": sample_size, "seed": seed,
                            "computed_at": _now(), "stale": bool(behind or unknown)}
                self._meta_set(conn, "stats", new_info)
                self._catalog().generation = self._bump_generation(conn)
            if unknown:
                logger.warning("store %s: statistics for %d unknown documents skipped (e.g. %r); stats stay stale",
                               self.path, len(unknown), unknown[0])
            self._cache.clear()
        return self.stats_info()

    def reference(self) -> ReferenceParagraphs | None:
        with self._snapshot() as conn:
            info = self._meta_get(conn, "reference")
            if info is None:
                return None
            rows = conn.execute(
                "SELECT doc_id, paragraph_index, label, n_sentences, vectors FROM reference ORDER BY position"
            ).fetchall()
        dim = int(info["dim"])
        vectors = np.frombuffer(b"".join(r[4] for r in rows), dtype="<f4").reshape(-1, dim)
        lengths = [r[3] for r in rows]
        corpus = CorpusVectors(
            tuple(r[2] for r in rows), vectors.astype(np.float32), _offsets(lengths),
            np.arange(len(rows) + 1, dtype=np.int64),
        )
        return ReferenceParagraphs(
            tuple(r[0] for r in rows), np.asarray([r[1] for r in rows], dtype=np.int64), corpus,
            int(info["seed"]), int(info["size"]),
        )

    def set_reference(self, reference: ReferenceParagraphs) -> None:
        """Persist the reference sample (ids, paragraph positions, seed, size and its own vectors)."""
        cv = reference.vectors
        n = len(reference.doc_ids)
        if np.asarray(reference.paragraph_index).shape != (n,) or cv.n_docs != n:
            raise InvalidInputError("reference sample: doc_ids, paragraph_index and vectors must have one entry per paragraph")
        if not np.array_equal(cv.doc_par_offsets, np.arange(n + 1)):
            raise InvalidInputError("reference sample: each sampled paragraph must be its own document in vectors")
        lengths = np.diff(cv.par_offsets)
        rows = [
            (pos, str(reference.doc_ids[pos]), int(reference.paragraph_index[pos]), cv.ids[pos], int(lengths[pos]),
             np.ascontiguousarray(cv.vectors[cv.par_offsets[pos] : cv.par_offsets[pos + 1]], dtype="<f4").tobytes())
            for pos in range(n)
        ]
        with self._writing() as conn, self._transaction(conn):
            conn.execute("DELETE FROM reference")
            conn.executemany(
                "INSERT INTO reference (position, doc_id, paragraph_index, label, n_sentences, vectors) "
                "VALUES (?, ?, ?, ?, ?, ?)", rows,
            )
            self._meta_set(conn, "reference", {"seed": int(reference.seed), "size": int(reference.size),
                                               "dim": cv.dim, "paragraphs": n, "at": _now()})
            self._catalog().generation = self._bump_generation(conn)
            self._cache.clear()

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
            before = {"rows": self._catalog().committed, "bytes": self.vector_path.stat().st_size}
            docs = conn.execute("SELECT doc_id, row_start, n_sentences FROM documents ORDER BY seq").fetchall()
            starts = np.asarray([d[1] for d in docs], dtype=np.int64)
            lengths = np.asarray([d[2] for d in docs], dtype=np.int64)
            new_starts = np.concatenate([[0], np.cumsum(lengths)])[:-1].astype(np.int64)
            if np.array_equal(starts, new_starts) and int(lengths.sum()) == before["rows"]:
                logger.info("store %s: nothing to compact", self.path)
                return {"rows_before": before["rows"], "rows_after": before["rows"],
                        "bytes_before": before["bytes"], "bytes_after": before["bytes"]}
            vec_tmp = self.path / (self.vector_path.name + _COMPACT_SUFFIX)
            faiss_tmp = self.path / (_FAISS + _COMPACT_SUFFIX)
            index = self._write_compacted(vec_tmp, faiss_tmp, starts, lengths)
            total = int(lengths.sum())
            with self._transaction(conn):
                conn.executemany("UPDATE documents SET row_start=? WHERE doc_id=?",
                                 [(int(s), d[0]) for s, d in zip(new_starts, docs)])
                self._meta_set(conn, "committed_rows", total)
                self._meta_set(conn, "faiss_rows", total)
                self._meta_set(conn, "epoch", int(self._meta_get(conn, "epoch", 0)) + 1)
                self._meta_set(conn, "pending_compaction",
                               {"renames": [[vec_tmp.name, self.vector_path.name], [faiss_tmp.name, _FAISS]]})
                self._bump_generation(conn)
            os.replace(vec_tmp, self.vector_path)
            os.replace(faiss_tmp, self.path / _FAISS)
            _fsync_dir(self.path)
            conn.execute("DELETE FROM meta WHERE key='pending_compaction'")
            self._reload()
            self._index, self._faiss_base = index, int(index.ntotal)
            after = self.vector_path.stat().st_size
            logger.info("store %s: compacted %d -> %d rows (%d -> %d bytes)",
                        self.path, before["rows"], total, before["bytes"], after)
            return {"rows_before": before["rows"], "rows_after": total, "bytes_before": before["bytes"], "bytes_after": after}

    def _write_compacted(self, vec_tmp: Path, faiss_tmp: Path, starts: np.ndarray, lengths: np.ndarray):
        """Write the live rows to ``vec_tmp`` and a fresh FAISS index over them to ``faiss_tmp``."""
        import faiss

        mm = self._matrix()
        rows = _gather_index(starts, lengths)
        with open(vec_tmp, "wb") as fh:
            for a in range(0, rows.size, _ADD_CHUNK):
                fh.write(np.ascontiguousarray(mm[rows[a : a + _ADD_CHUNK]], dtype=self._np_dtype()).tobytes())
            fh.flush()
            os.fsync(fh.fileno())
        index = self._new_index()
        if rows.size:
            compacted = np.memmap(vec_tmp, dtype=self._np_dtype(), mode="r", shape=(rows.size, self._dim or 0))
            self._add_rows(index, 0, rows.size, source=compacted)
            del compacted
        faiss.write_index(index, str(faiss_tmp))
        _fsync_file(faiss_tmp)
        return index

    def close(self) -> None:
        """Save the FAISS index if it has unsaved rows, then release every file and connection."""
        with self._mutex:
            if self._conn is not None and self._index is not None and not self.read_only:
                try:
                    self._save_on_close(self._conn)
                except (OSError, RuntimeError, sqlite3.Error) as e:
                    logger.warning("store %s: could not save the FAISS index on close (%s); it is rebuilt on open", self.path, e)
            self._drop_files()
            if self._conn is not None:
                self._conn.close()
                self._conn = None
            if self._lock_fd is not None:
                os.close(self._lock_fd)
                self._lock_fd = None
            self._cat = None
            self._cache.clear()

    def _save_on_close(self, conn: sqlite3.Connection) -> None:
        with self._flock(fcntl.LOCK_EX):
            meta = self._meta_all(conn)
            cat = self._catalog()
            if int(meta["epoch"]) != cat.epoch or self._index.ntotal > int(meta["committed_rows"]):
                return  # another process compacted or the index is not a prefix any more
            if self._index.ntotal > int(meta.get("faiss_rows", 0)):
                self._save_faiss(conn)

    def __repr__(self) -> str:
        return f"EmbeddedStore({str(self.path)!r}, read_only={self.read_only})"
