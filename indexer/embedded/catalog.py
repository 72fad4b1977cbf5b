"""The SQLite catalogue of an embedded store (``store.sqlite``, WAL): schema, connection,
transactions, and the meta, document, statistics and reference rows.

Tables: ``meta`` (key -> JSON value: format version, the layout recorded at creation, committed
row count, FAISS rows saved, generation, epoch, next seq, statistics info, reference info, a
pending compaction), ``documents`` (one row per live document: its text, its row range in the
vector file, its statistics) and ``reference`` (the reference sample with its own vectors).

Every committed change bumps the *generation* counter; a process compares it with its in-memory
view to notice that another process changed the store. Functions here take a connection and run
inside the caller's transaction (:func:`transaction`) unless their docstring says they commit;
converting values to and from rows is :mod:`.records`' job.
"""

from __future__ import annotations

import json
import sqlite3
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from sdr_search.core.errors import InvalidInputError, StoreError
from sdr_search.core.scoring import NormStats

from ..provenance import library_versions
from ..settings import EmbeddedStoreSettings
from ..store import IndexMeta, ReferenceParagraphs, StatsInfo
from .integrity import damaged, is_damage
from .records import Prepared, encode_stats

__all__ = [
    "FORMAT_VERSION", "SQLITE", "Location", "connect", "initialise", "recorded_meta", "recorded_dim",
    "required_meta", "meta_all", "meta_get", "meta_set", "meta_delete", "bump_generation", "transaction",
    "read_layout", "select_by_ids", "in_seq_order", "locate", "locate_all", "seqs_of", "content_keys",
    "document", "counts", "commit_put", "delete_documents", "set_row_starts", "stats_info", "write_stats",
    "read_reference", "replace_reference",
]

FORMAT_VERSION = 1
"""Version of the on-disk layout; a store written by a newer layout is refused."""

SQLITE = "store.sqlite"
_SQL_CHUNK = 500  # ids per "IN (...)" query

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

_LOCATION = "doc_id, row_start, n_sentences, par_sizes"
Location = tuple[int, int, str]
"""Where a document's vectors are: ``(row_start, n_sentences, par_sizes as JSON)``."""


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


# -- connection, creation, recorded layout ----------------------------------------------------
def connect(db: Path, read_only: bool) -> sqlite3.Connection:
    """Connect in autocommit mode (transactions are explicit); a writer switches to WAL."""
    if read_only:
        conn = sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True, timeout=60,
                               isolation_level=None, check_same_thread=False)
    else:
        conn = sqlite3.connect(db, timeout=60, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
    return conn


def initialise(conn: sqlite3.Connection, settings: EmbeddedStoreSettings) -> bool:
    """Create the schema and the initial meta of a new store (one transaction, committed here).

    Returns ``False`` (and does nothing) when the store exists already.
    """
    has_meta = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type='table' AND name='meta'"
    ).fetchone()
    if has_meta and conn.execute("SELECT 1 FROM meta WHERE key='format_version'").fetchone():
        return False
    s = settings
    conn.execute("BEGIN IMMEDIATE")
    try:
        for stmt in filter(str.strip, _SCHEMA.split(";")):
            conn.execute(stmt)
        initial = {
            "format_version": FORMAT_VERSION,
            "vector_dtype": s.vector_dtype,
            "hnsw": {"m": s.hnsw_m, "ef_construction": s.hnsw_ef_construction},
            "ann_codes": s.ann_codes,
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
    return True


def recorded_meta(conn: sqlite3.Connection, directory: Path) -> dict[str, Any]:
    """Every meta value of the store in ``directory``, after checking that it is an sdr store of a
    format version this code reads."""
    try:
        meta = meta_all(conn)
    except (sqlite3.Error, ValueError) as e:
        if is_damage(e):
            raise damaged(directory, SQLITE, e) from e
        raise StoreError(f"{directory} is not an sdr store ({e})") from e
    version = meta.get("format_version")
    if version is None:
        raise StoreError(f"{directory / SQLITE} is not an sdr store (no format version); re-create it")
    if int(version) > FORMAT_VERSION:
        raise StoreError(
            f"store {directory} has format version {version}; this sdr-search reads up to "
            f"version {FORMAT_VERSION}. Upgrade sdr-search."
        )
    return meta


def recorded_dim(meta: Mapping[str, Any]) -> int | None:
    """The vector dimension recorded with the model, ``None`` before a model is recorded."""
    index_meta = meta.get("index_meta")
    return int(index_meta["dim"]) if index_meta else None


def required_meta(conn: sqlite3.Connection, directory: Path) -> IndexMeta:
    raw = meta_get(conn, "index_meta")
    if raw is None:
        raise StoreError(f"store {directory} has no model recorded; call ensure_meta() before put()")
    return IndexMeta.from_dict(raw)


# -- meta table and transactions --------------------------------------------------------------
def meta_all(conn: sqlite3.Connection) -> dict[str, Any]:
    return {k: json.loads(v) for k, v in conn.execute("SELECT key, value FROM meta")}


def meta_get(conn: sqlite3.Connection, key: str, default: Any = None) -> Any:
    row = conn.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
    return default if row is None else json.loads(row[0])


def meta_set(conn: sqlite3.Connection, key: str, value: Any) -> None:
    conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, json.dumps(value)))


def meta_delete(conn: sqlite3.Connection, key: str) -> None:
    conn.execute("DELETE FROM meta WHERE key=?", (key,))


def bump_generation(conn: sqlite3.Connection) -> int:
    gen = int(meta_get(conn, "generation", 0)) + 1
    meta_set(conn, "generation", gen)
    return gen


@contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """A write transaction: committed when the block ends, rolled back when it raises."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def read_layout(conn: sqlite3.Connection) -> tuple[dict[str, Any], list[tuple[int, str, int, int]]]:
    """Meta and every document's ``(seq, doc_id, row_start, n_sentences)``, read in one read
    transaction (committed here)."""
    conn.execute("BEGIN")
    try:
        meta = meta_all(conn)
        docs = conn.execute("SELECT seq, doc_id, row_start, n_sentences FROM documents").fetchall()
    finally:
        conn.execute("COMMIT")
    return meta, docs


# -- document rows ----------------------------------------------------------------------------
def _chunks(seq: Sequence[Any], n: int = _SQL_CHUNK) -> Iterator[Sequence[Any]]:
    for i in range(0, len(seq), n):
        yield seq[i : i + n]


def _placeholders(n: int) -> str:
    return ",".join("?" * n)


def select_by_ids(conn: sqlite3.Connection, columns: str, ids: Sequence[str]) -> list[tuple[Any, ...]]:
    """``columns`` of the documents ``ids`` (each once; missing ids give no row), in chunked queries."""
    rows: list[tuple[Any, ...]] = []
    for chunk in _chunks(list(dict.fromkeys(ids))):
        q = f"SELECT {columns} FROM documents WHERE doc_id IN ({_placeholders(len(chunk))})"
        rows += conn.execute(q, list(chunk)).fetchall()
    return rows


def in_seq_order(conn: sqlite3.Connection, columns: str) -> list[tuple[Any, ...]]:
    """``columns`` of every document in insertion (``seq``) order."""
    return conn.execute(f"SELECT {columns} FROM documents ORDER BY seq").fetchall()


def locate(conn: sqlite3.Connection, ids: Sequence[str]) -> dict[str, Location]:
    """Where the stored ones of the documents ``ids`` are."""
    return {r[0]: (r[1], r[2], r[3]) for r in select_by_ids(conn, _LOCATION, ids)}


def locate_all(conn: sqlite3.Connection) -> dict[str, Location]:
    """Where every document is, in ``seq`` order."""
    return {r[0]: (r[1], r[2], r[3]) for r in in_seq_order(conn, _LOCATION)}


def seqs_of(conn: sqlite3.Connection, ids: Sequence[str]) -> np.ndarray:
    """The sorted seqs of the stored ones of the documents ``ids``."""
    seqs = [r[0] for r in select_by_ids(conn, "seq", ids)]
    return np.asarray(sorted(seqs), dtype=np.int64)


def content_keys(conn: sqlite3.Connection, ids: Sequence[str]) -> dict[str, str]:
    return dict(select_by_ids(conn, "doc_id, content_key", ids))


def metadata_json(conn: sqlite3.Connection, ids: Sequence[str]) -> dict[str, str]:
    """The stored metadata (JSON text) of those documents ``ids`` that exist."""
    return dict(select_by_ids(conn, "doc_id, metadata", ids))


def document(conn: sqlite3.Connection, doc_id: str) -> tuple[Any, ...] | None:
    """``(title, metadata, paragraphs, row_start, n_sentences, par_sizes, stats)`` of one document."""
    return conn.execute(
        "SELECT title, metadata, paragraphs, row_start, n_sentences, par_sizes, stats "
        "FROM documents WHERE doc_id=?", (doc_id,),
    ).fetchone()


def counts(conn: sqlite3.Connection) -> dict[str, int]:
    n_docs, n_par, n_sent = conn.execute(
        "SELECT COUNT(*), COALESCE(SUM(n_paragraphs), 0), COALESCE(SUM(n_sentences), 0) FROM documents"
    ).fetchone()
    return {"documents": int(n_docs), "paragraphs": int(n_par), "sentences": int(n_sent)}


def commit_put(
    conn: sqlite3.Connection, prepared: list[Prepared], start: int
) -> tuple[list[tuple[int, str, int, int]], list[tuple[int, int, int]], int]:
    """One transaction (committed here): upsert every document with its rows from row ``start``
    on, advance the committed row count, and mark stats stale when a document is new or its content
    changed (a document written again with the same content key keeps its statistics: a new title
    or metadata changes no score).

    Returns the placed ``(seq, doc_id, row_start, n)``, the replaced ``(seq, row_start, n)`` and
    the new generation.
    """
    ids = [p.doc.id for p in prepared]
    with transaction(conn):
        existing: dict[str, tuple[int, int, int]] = {}
        old_keys: dict[str, str] = {}
        for r in select_by_ids(conn, "doc_id, seq, row_start, n_sentences, content_key", ids):
            existing[r[0]] = (r[1], r[2], r[3])
            old_keys[r[0]] = r[4]
        changed = any(old_keys.get(p.doc.id) != p.content_key for p in prepared)
        next_seq = int(meta_get(conn, "next_seq", 0))
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
            "par_sizes=excluded.par_sizes, "
            "stats=CASE WHEN documents.content_key = excluded.content_key THEN documents.stats END, "
            "stats_version=CASE WHEN documents.content_key = excluded.content_key THEN documents.stats_version END",
            rows,
        )
        meta_set(conn, "committed_rows", row)
        meta_set(conn, "next_seq", next_seq)
        if changed:
            _mark_stale(conn)
        gen = bump_generation(conn)
    return placed, list(existing.values()), gen


def delete_documents(conn: sqlite3.Connection, ids: Sequence[str]) -> tuple[list[tuple[int, int, int]], int | None]:
    """One transaction (committed here): delete the documents ``ids`` (unique).

    Returns the deleted ``(seq, row_start, n)`` and the new generation (``None`` if none was stored).
    """
    found: list[tuple[int, int, int]] = []
    gen = None
    with transaction(conn):
        for chunk in _chunks(ids):
            marks = _placeholders(len(chunk))
            found += conn.execute(
                f"SELECT seq, row_start, n_sentences FROM documents WHERE doc_id IN ({marks})", list(chunk)
            ).fetchall()
            conn.execute(f"DELETE FROM documents WHERE doc_id IN ({marks})", list(chunk))
        if found:
            _mark_stale(conn)
            gen = bump_generation(conn)
    return found, gen


def set_row_starts(conn: sqlite3.Connection, starts: Sequence[tuple[int, str]]) -> None:
    """Move documents: ``(row_start, doc_id)`` pairs."""
    conn.executemany("UPDATE documents SET row_start=? WHERE doc_id=?", starts)


# -- statistics -------------------------------------------------------------------------------
def _mark_stale(conn: sqlite3.Connection) -> None:
    info = meta_get(conn, "stats", dict(_EMPTY_STATS))
    if not info.get("stale"):
        info["stale"] = True
        meta_set(conn, "stats", info)


def stats_info(conn: sqlite3.Connection) -> StatsInfo:
    info = meta_get(conn, "stats", dict(_EMPTY_STATS))
    without = conn.execute("SELECT COUNT(*) FROM documents WHERE stats IS NULL").fetchone()[0]
    return StatsInfo(
        version=int(info["version"]), mode=info["mode"], sample_size=info["sample_size"],
        seed=info["seed"], stale=bool(info["stale"]), computed_at=info["computed_at"],
        docs_without_stats=int(without),
    )


def write_stats(
    conn: sqlite3.Connection, stats: Mapping[str, NormStats], *, mode: str, sample_size: int | None, seed: int | None
) -> list[str]:
    """Write each document's statistics with version + 1 and the new statistics info.

    Ids that are no longer stored are skipped and returned (the result stays stale). A statistics
    length that differs from the document's paragraph count raises :class:`InvalidInputError`.
    The info is not stale only if every stored document now has statistics of this version.
    """
    info = meta_get(conn, "stats", dict(_EMPTY_STATS))
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
        updates.append((encode_stats(s), version, doc_id))
    conn.executemany("UPDATE documents SET stats=?, stats_version=? WHERE doc_id=?", updates)
    behind = conn.execute(
        "SELECT COUNT(*) FROM documents WHERE stats IS NULL OR stats_version != ?", (version,)
    ).fetchone()[0]
    new_info = {"version": version, "mode": mode, "sample_size": sample_size, "seed": seed,
                "computed_at": _now(), "stale": bool(behind or unknown)}
    meta_set(conn, "stats", new_info)
    return unknown


# -- reference sample -------------------------------------------------------------------------
def read_reference(conn: sqlite3.Connection) -> tuple[dict[str, Any], list[tuple[Any, ...]]] | None:
    """The reference info and rows (for :func:`.records.decode_reference`), ``None`` when no
    sample is stored."""
    info = meta_get(conn, "reference")
    if info is None:
        return None
    rows = conn.execute(
        "SELECT doc_id, paragraph_index, label, n_sentences, vectors FROM reference ORDER BY position"
    ).fetchall()
    return info, rows


def replace_reference(conn: sqlite3.Connection, reference: ReferenceParagraphs, rows: Sequence[tuple[Any, ...]]) -> None:
    """Replace the stored sample by ``reference`` (``rows``: its :func:`.records.encode_reference`)."""
    conn.execute("DELETE FROM reference")
    conn.executemany(
        "INSERT INTO reference (position, doc_id, paragraph_index, label, n_sentences, vectors) "
        "VALUES (?, ?, ?, ?, ?, ?)", rows,
    )
    meta_set(conn, "reference", {"seed": int(reference.seed), "size": int(reference.size),
                                 "dim": reference.vectors.dim, "paragraphs": len(rows), "at": _now()})
