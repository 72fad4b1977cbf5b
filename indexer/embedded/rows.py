"""Row bookkeeping: which row of the vector file belongs to which live document.

A document owns rows ``[row_start, row_start + n_sentences)`` of the vector file. Replacing or
deleting a document leaves its rows *dead*; they stay in the vector file and in the FAISS index
and are filtered out at query time through an in-memory row -> document-seq array (``-1`` =
dead), :class:`RowMap`. Compaction (:mod:`.compaction`) rewrites both files without dead rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from .integrity import damaged

__all__ = ["offsets", "gather_index", "RowMap"]


def offsets(sizes: Sequence[int] | np.ndarray) -> np.ndarray:
    """``[0, s0, s0 + s1, ...]``: where each of the consecutive ranges of ``sizes`` starts (and the total)."""
    return np.concatenate([[0], np.cumsum(np.asarray(sizes, dtype=np.int64))]).astype(np.int64)


def gather_index(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Row numbers of the concatenated ranges ``[starts[i], starts[i] + lengths[i])``."""
    starts = np.asarray(starts, dtype=np.int64)
    lengths = np.asarray(lengths, dtype=np.int64)
    ends = offsets(lengths)
    return np.repeat(starts - ends[:-1], lengths) + np.arange(ends[-1], dtype=np.int64)


@dataclass
class RowMap:
    """In-memory view of the store at one generation: which row belongs to which live document."""

    generation: int
    epoch: int
    committed: int
    row_seq: np.ndarray  # capacity >= committed; [:committed] valid, -1 = dead row
    seq_ids: dict[int, str] = field(default_factory=dict)

    @classmethod
    def from_documents(
        cls, generation: int, epoch: int, committed: int, docs: Sequence[tuple[int, str, int, int]], directory: Path
    ) -> "RowMap":
        """The map of ``committed`` rows owned by ``docs`` (``(seq, doc_id, row_start, n_sentences)``
        rows); a document past the committed rows means the store in ``directory`` is damaged."""
        rows = cls(generation, epoch, 0, np.full(0, -1, dtype=np.int64))
        rows.grow(committed)
        if docs:
            seqs = np.fromiter((d[0] for d in docs), dtype=np.int64, count=len(docs))
            starts = np.fromiter((d[2] for d in docs), dtype=np.int64, count=len(docs))
            lengths = np.fromiter((d[3] for d in docs), dtype=np.int64, count=len(docs))
            if np.any(starts + lengths > committed) or np.any(starts < 0):
                raise damaged(directory, "store.sqlite", "a document refers to rows past the committed count")
            rows.row_seq[gather_index(starts, lengths)] = np.repeat(seqs, lengths)
            rows.seq_ids = {int(s): d[1] for s, d in zip(seqs, docs)}
        return rows

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

    def place(
        self, placed: Sequence[tuple[int, str, int, int]], old_ranges: Sequence[tuple[int, int, int]], generation: int
    ) -> None:
        """Apply a committed ``put``: the replaced documents' ``(seq, row_start, n)`` ranges die, the
        ``(seq, doc_id, row_start, n)`` ranges of ``placed`` (appended, in row order) go live."""
        self.grow(placed[-1][2] + placed[-1][3])
        for _, row_start, n in old_ranges:
            self.row_seq[row_start : row_start + n] = -1
        for seq, doc_id, row_start, n in placed:
            self.row_seq[row_start : row_start + n] = seq
            self.seq_ids[seq] = doc_id
        self.generation = generation

    def remove(self, found: Sequence[tuple[int, int, int]], generation: int) -> None:
        """Apply a committed delete of the documents ``(seq, row_start, n)``: their rows die."""
        for seq, row_start, n in found:
            self.row_seq[row_start : row_start + n] = -1
            self.seq_ids.pop(seq, None)
        self.generation = generation
