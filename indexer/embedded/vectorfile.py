"""The append-only vector file ``vectors.<dtype>``: a row-major matrix of sentence vectors
(float32 or float16), one row per sentence, read through a memory map.

Crash safety: ``put`` appends the vectors and fsyncs them (:meth:`VectorFile.append`) *before*
it commits every document row and the new *committed row count* in one SQLite transaction
(:mod:`.catalog`). Rows past the committed count are a torn or abandoned append; they are
truncated on open (:meth:`VectorFile.truncate_tail`) and before every append.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Sequence

import numpy as np

from sdr_search.core.errors import StoreDamagedError

from .integrity import damaged


__all__ = ["CHUNK_ROWS", "VectorFile"]

logger = logging.getLogger(__package__)  # "sdr_search.indexer.embedded", one logger for the whole store

CHUNK_ROWS = 32_768  # rows per FAISS add / file copy


class VectorFile:
    """The vector file of the store directory ``directory``.

    The store sets :attr:`dtype` and :attr:`dim` from what it recorded (``dim`` is ``None`` until
    a model is recorded) and, read-only, :attr:`read_path` while a compaction is unfinished. Reads
    take ``committed``, the number of committed rows.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.dtype = "float32"
        self.dim: int | None = None
        self.read_path: Path | None = None  # read-only view of an interrupted compaction
        self._fh = None
        self._mm: np.ndarray | None = None

    @property
    def own_path(self) -> Path:
        """``vectors.<dtype>`` in the store directory."""
        return self.directory / f"vectors.{self.dtype}"

    @property
    def path(self) -> Path:
        """The file to read: :attr:`own_path`, or :attr:`read_path` when set."""
        return self.read_path if self.read_path is not None else self.own_path

    @property
    def np_dtype(self) -> np.dtype:
        return np.dtype("<f2" if self.dtype == "float16" else "<f4")

    def row_bytes(self) -> int:
        if self.dim is None:
            return 0
        return self.dim * self.np_dtype.itemsize

    def size(self) -> int:
        """Bytes in :attr:`path` (0 when it does not exist)."""
        return self.path.stat().st_size if self.path.exists() else 0

    def _damaged(self) -> StoreDamagedError:
        return damaged(self.directory, self.path.name, "shorter than its committed rows")

    # -- checks and repair (the store's lock held) --------------------------------------------
    def truncate_tail(self, committed: int) -> None:
        """Cut the vector file to ``committed`` rows (the exclusive lock must be held)."""
        path = self.own_path
        want = committed * self.row_bytes()
        size = path.stat().st_size if path.exists() else 0
        if not path.exists():
            if committed:
                raise damaged(self.directory, path.name, "missing")
            path.touch()
            return
        if size < want:
            raise damaged(self.directory, path.name, f"holds {size} bytes but {committed} committed rows need {want}")
        if size > want:
            if self._fh is not None:
                self._fh.flush()
            os.truncate(path, want)
            logger.warning("store %s: dropped %d bytes of an unfinished append from %s",
                           self.directory, size - want, path.name)

    def check_length(self, committed: int) -> None:
        """Read-only: refuse a file shorter than ``committed`` rows."""
        if self.size() < committed * self.row_bytes():
            raise self._damaged()

    # -- reads --------------------------------------------------------------------------------
    def _map(self, path: Path, n_rows: int) -> np.ndarray:
        return np.memmap(path, dtype=self.np_dtype, mode="r", shape=(n_rows, self.dim or 0))

    def matrix(self, committed: int) -> np.ndarray:
        """The committed rows of the vector file, memory-mapped, shape ``(committed, dim)``."""
        if self._mm is not None and self._mm.shape[0] == committed:
            return self._mm
        dim = self.dim or 0
        if committed == 0 or dim == 0:
            self._mm = np.zeros((0, dim), dtype=self.np_dtype)
        else:
            self._mm = self._map(self.path, committed)
        return self._mm

    def ranges(self, starts: Sequence[int], lengths: Sequence[int], committed: int) -> list[np.ndarray]:
        """The row ranges ``[starts[i], starts[i] + lengths[i])`` one by one, as float32: read-only
        views of the memory map for a float32 file (no copy), converted copies for float16."""
        mm = self.matrix(committed)
        if self.dtype == "float32":
            return [mm[a : a + n] for a, n in zip(starts, lengths)]
        return [np.asarray(mm[a : a + n], dtype=np.float32) for a, n in zip(starts, lengths)]

    def read_ranges(self, starts: Sequence[int], lengths: Sequence[int], committed: int) -> list[np.ndarray]:
        """The row ranges as :meth:`ranges` gives them, but read with ``pread`` into float32 copies,
        not through the memory map: a pass over the whole file (filling the paragraph centroids
        at the first query) then leaves no file pages mapped into the process, so its RSS stays
        what it needs (the pages stay in the page cache, which the kernel reclaims as it likes;
        docs/results/scale.md)."""
        if committed * self.row_bytes() > self.size():
            raise self._damaged()
        row, dim = self.row_bytes(), self.dim or 0
        out = []
        with open(self.path, "rb") as fh:
            fd = fh.fileno()
            for a, n in zip(starts, lengths):
                buf = os.pread(fd, int(n) * row, int(a) * row)
                if len(buf) != int(n) * row:
                    raise self._damaged()
                out.append(np.frombuffer(buf, dtype=self.np_dtype).reshape(int(n), dim).astype(np.float32, copy=False))
        return out

    def gather(self, starts: np.ndarray, lengths: np.ndarray, committed: int, *, view: bool = False) -> np.ndarray:
        """The row ranges ``[starts[i], starts[i] + lengths[i])``, concatenated, as float32.

        Ranges that lie back to back in a float32 file are one slice: a view of the memory map
        when ``view`` (read-only, no copy), else one copy. Otherwise each range is copied (and
        converted) straight into one preallocated float32 buffer: one ``memcpy``-like slice copy
        per document, not a gather of every row (faster: docs/results/two-stage.md, "Rerank kernel").
        """
        starts = np.asarray(starts, dtype=np.int64)
        lengths = np.asarray(lengths, dtype=np.int64)
        contiguous = self.dtype == "float32" and np.array_equal(starts[1:], starts[:-1] + lengths[:-1])
        mm = self.matrix(committed)
        if contiguous and starts.size:
            block = mm[int(starts[0]) : int(starts[0] + lengths.sum())]
            return block if view else np.array(block, dtype=np.float32)
        out = np.empty((int(lengths.sum()), self.dim or 0), dtype=np.float32)
        at = 0
        for a, n in zip(starts.tolist(), lengths.tolist()):
            out[at : at + n] = mm[a : a + n]
            at += n
        return out

    # -- writes -------------------------------------------------------------------------------
    def append(self, start_row: int, block: np.ndarray) -> None:
        """Write ``block`` at row ``start_row`` (cutting anything after it) and fsync."""
        if self._fh is None:
            self._fh = open(self.path, "r+b")
        fh = self._fh
        offset = start_row * self.row_bytes()
        fh.seek(0, os.SEEK_END)
        if fh.tell() != offset:
            if fh.tell() < offset:
                raise self._damaged()
            logger.warning("store %s: dropped %d bytes of an unfinished append", self.directory, fh.tell() - offset)
            fh.truncate(offset)
        fh.seek(offset)
        fh.write(np.ascontiguousarray(block, dtype=self.np_dtype).tobytes())
        fh.flush()
        os.fsync(fh.fileno())

    def cut(self, start_row: int) -> None:
        """Undo an append whose transaction failed."""
        try:
            if self._fh is not None:
                self._fh.truncate(start_row * self.row_bytes())
                self._fh.flush()
        except OSError as e:  # the next append or open cuts it anyway
            logger.warning("store %s: could not cut an abandoned append: %s", self.directory, e)

    def copy_rows(self, dest: Path, rows: np.ndarray, committed: int) -> np.ndarray | None:
        """Write rows ``rows`` to a new file ``dest`` in this dtype, fsync it, and return it
        memory-mapped (``None`` when there are no rows)."""
        mm = self.matrix(committed)
        with open(dest, "wb") as fh:
            for a in range(0, rows.size, CHUNK_ROWS):
                fh.write(np.ascontiguousarray(mm[rows[a : a + CHUNK_ROWS]], dtype=self.np_dtype).tobytes())
            fh.flush()
            os.fsync(fh.fileno())
        return self._map(dest, rows.size) if rows.size else None

    # -- lifecycle ----------------------------------------------------------------------------
    def forget_map(self) -> None:
        """Drop the memory map (the committed row count changed)."""
        self._mm = None

    def close(self) -> None:
        """Forget the map and close the append handle (after a compaction replaced the file)."""
        self._mm = None
        if self._fh is not None:
            self._fh.close()
            self._fh = None
