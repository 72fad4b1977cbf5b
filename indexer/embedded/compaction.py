"""Compaction: rewrite the vector file and the FAISS index without dead rows, documents in
``seq`` order; and finishing a compaction that a crash interrupted.

Crash safety: the new files are written under temporary names (``<name>.compact.tmp``,
:func:`write_files`), then the new layout is committed together with a *pending compaction*
record of the renames (:func:`commit_layout`), then the files are renamed (:func:`finish`). An
interrupted rename is rolled forward on open or reload (:func:`roll_forward`); a read-only store
reads the not-yet-renamed files in place (:func:`read_paths`). Temporary files without a
committed record are dropped on open.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from .ann import FAISS, AnnIndex, add_rows, write_index
from .catalog import bump_generation, meta_delete, meta_get, meta_set, set_row_starts, transaction
from .durable import fsync_path
from .rows import gather_index, offsets
from .vectorfile import VectorFile

__all__ = ["COMPACT_SUFFIX", "Plan", "plan", "temp_paths", "write_files", "commit_layout", "finish",
           "roll_forward", "read_paths"]

logger = logging.getLogger(__package__)  # "sdr_search.indexer.embedded", one logger for the whole store

COMPACT_SUFFIX = ".compact.tmp"


@dataclass(frozen=True)
class Plan:
    """The live documents' rows now (``starts``, ``lengths``) and once compacted (``new_starts``)."""

    doc_ids: list[str]
    starts: np.ndarray
    lengths: np.ndarray
    new_starts: np.ndarray

    @property
    def total(self) -> int:
        """Rows after compaction."""
        return int(self.lengths.sum())

    def is_noop(self, committed: int) -> bool:
        """Whether the ``committed`` rows are already compact (no dead row, ``seq`` order)."""
        return np.array_equal(self.starts, self.new_starts) and self.total == committed


def plan(docs: Sequence[tuple[str, int, int]]) -> Plan:
    """The plan for the documents ``(doc_id, row_start, n_sentences)``, in ``seq`` order."""
    lengths = np.asarray([d[2] for d in docs], dtype=np.int64)
    return Plan([d[0] for d in docs], np.asarray([d[1] for d in docs], dtype=np.int64), lengths, offsets(lengths)[:-1])


def temp_paths(directory: Path, vector_name: str) -> tuple[Path, Path]:
    """Where the compacted vector file and FAISS index are written before the renames."""
    return directory / (vector_name + COMPACT_SUFFIX), directory / (FAISS + COMPACT_SUFFIX)


def write_files(
    vectors: VectorFile, ann: AnnIndex, committed: int, layout: Plan, vec_tmp: Path, faiss_tmp: Path
):
    """Write the live rows to ``vec_tmp`` and a fresh FAISS index over them to ``faiss_tmp``
    (both fsynced); returns the index."""
    index = ann.new_index()  # first: without FAISS, fail before any file is written
    rows = gather_index(layout.starts, layout.lengths)
    compacted = vectors.copy_rows(vec_tmp, rows, committed)
    if compacted is not None:
        add_rows(index, 0, rows.size, compacted)
        del compacted
    write_index(index, faiss_tmp)
    return index


def commit_layout(conn: sqlite3.Connection, layout: Plan, renames: list[list[str]]) -> None:
    """One transaction (committed here): the compacted rows of every document, the new committed
    and FAISS row counts, a new epoch and the pending ``renames`` (``[temp name, final name]``)."""
    with transaction(conn):
        set_row_starts(conn, [(int(s), d) for s, d in zip(layout.new_starts, layout.doc_ids)])
        meta_set(conn, "committed_rows", layout.total)
        meta_set(conn, "faiss_rows", layout.total)
        meta_set(conn, "epoch", int(meta_get(conn, "epoch", 0)) + 1)
        meta_set(conn, "pending_compaction", {"renames": renames})
        bump_generation(conn)


def finish(directory: Path, conn: sqlite3.Connection, renames: Sequence[Sequence[str]], *,
           interrupted: bool = False) -> None:
    """Rename the compacted files into place, make it durable and drop the pending record.

    ``interrupted``: finishing after a crash, where some renames may be done already (a missing
    temporary file is skipped, a rename logged).
    """
    for tmp_name, final_name in renames:
        tmp = directory / tmp_name
        if interrupted and not tmp.exists():
            continue
        os.replace(tmp, directory / final_name)
        if interrupted:
            logger.warning("store %s: finished an interrupted compaction (%s)", directory, final_name)
    fsync_path(directory)
    meta_delete(conn, "pending_compaction")


def roll_forward(directory: Path, conn: sqlite3.Connection, pending: Mapping[str, Any]) -> None:
    """Finish a compaction whose new layout is committed but whose files were not all renamed
    (the exclusive lock must be held)."""
    finish(directory, conn, pending["renames"], interrupted=True)


def read_paths(directory: Path, pending: Mapping[str, Any] | None) -> dict[str, Path]:
    """Read-only: the not-yet-renamed files of an interrupted compaction, to read in place
    (``"vectors"`` and/or ``"faiss"``)."""
    paths: dict[str, Path] = {}
    for tmp_name, final_name in (pending or {}).get("renames", []):
        if (directory / tmp_name).exists():
            paths["faiss" if final_name == FAISS else "vectors"] = directory / tmp_name
    if pending:
        logger.warning("store %s has an interrupted compaction; open it writable once to finish it", directory)
    return paths
