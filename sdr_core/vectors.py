"""Containers for sentence vectors laid out by paragraph and by document.

A document's sentence vectors are one ``(S, d)`` float32 array, L2-normalised row by row, plus
``par_offsets`` of length ``n + 1``: paragraph ``i`` owns rows ``par_offsets[i]:par_offsets[i+1]``.
A corpus concatenates documents: ``vectors`` ``(S_total, d)``, ``par_offsets`` over all
paragraphs ``(P_total + 1,)`` and ``doc_par_offsets`` ``(D + 1,)`` giving each document's range
of paragraphs. Every paragraph has at least one sentence.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

__all__ = ["DocVectors", "CorpusVectors"]


def _check_offsets(offsets: np.ndarray, total: int, what: str) -> None:
    if offsets.ndim != 1 or offsets.size < 2:
        raise ValueError(f"{what}: need at least one segment")
    if offsets[0] != 0 or offsets[-1] != total:
        raise ValueError(f"{what}: offsets must start at 0 and end at {total}")
    if np.any(np.diff(offsets) <= 0):
        raise ValueError(f"{what}: every segment must be non-empty")


@dataclass(frozen=True)
class DocVectors:
    """Sentence vectors of one document, grouped into paragraphs."""

    vectors: np.ndarray  # (S, d) float32, rows L2-normalised
    par_offsets: np.ndarray  # (n + 1,) int64

    def __post_init__(self) -> None:
        object.__setattr__(self, "vectors", np.ascontiguousarray(self.vectors, dtype=np.float32))
        object.__setattr__(self, "par_offsets", np.asarray(self.par_offsets, dtype=np.int64))
        if self.vectors.ndim != 2:
            raise ValueError("vectors must be a 2-D array")
        _check_offsets(self.par_offsets, self.vectors.shape[0], "par_offsets")

    @classmethod
    def from_paragraphs(cls, paragraphs: Sequence[np.ndarray]) -> "DocVectors":
        """Build from a list of ``(s_i, d)`` arrays, one per paragraph."""
        if not paragraphs:
            raise ValueError("a document needs at least one paragraph")
        sizes = [len(p) for p in paragraphs]
        offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        return cls(np.concatenate([np.asarray(p, dtype=np.float32) for p in paragraphs]), offsets)

    @property
    def n_paragraphs(self) -> int:
        return int(self.par_offsets.size - 1)

    @property
    def n_sentences(self) -> int:
        return int(self.vectors.shape[0])

    @property
    def dim(self) -> int:
        return int(self.vectors.shape[1])

    def paragraph(self, i: int) -> np.ndarray:
        return self.vectors[self.par_offsets[i] : self.par_offsets[i + 1]]


@dataclass(frozen=True)
class CorpusVectors:
    """Sentence vectors of many documents in one contiguous block."""

    ids: tuple[str, ...]
    vectors: np.ndarray  # (S_total, d) float32
    par_offsets: np.ndarray  # (P_total + 1,) int64, sentence offsets of paragraphs
    doc_par_offsets: np.ndarray  # (D + 1,) int64, paragraph offsets of documents

    def __post_init__(self) -> None:
        object.__setattr__(self, "ids", tuple(self.ids))
        object.__setattr__(self, "vectors", np.ascontiguousarray(self.vectors, dtype=np.float32))
        object.__setattr__(self, "par_offsets", np.asarray(self.par_offsets, dtype=np.int64))
        object.__setattr__(self, "doc_par_offsets", np.asarray(self.doc_par_offsets, dtype=np.int64))
        _check_offsets(self.par_offsets, self.vectors.shape[0], "par_offsets")
        _check_offsets(self.doc_par_offsets, self.par_offsets.size - 1, "doc_par_offsets")
        if len(self.ids) != self.doc_par_offsets.size - 1:
            raise ValueError("one id per document is required")

    @classmethod
    def from_docs(cls, ids: Sequence[str], docs: Sequence[DocVectors]) -> "CorpusVectors":
        if len(ids) != len(docs) or not docs:
            raise ValueError("need one id per document and at least one document")
        vectors = np.concatenate([d.vectors for d in docs])
        par_offsets = [np.zeros(1, dtype=np.int64)]
        doc_par_offsets = [0]
        base = 0
        for d in docs:
            par_offsets.append(d.par_offsets[1:] + base)
            base += d.n_sentences
            doc_par_offsets.append(doc_par_offsets[-1] + d.n_paragraphs)
        return cls(tuple(ids), vectors, np.concatenate(par_offsets), np.asarray(doc_par_offsets))

    @property
    def n_docs(self) -> int:
        return len(self.ids)

    @property
    def n_paragraphs(self) -> int:
        return int(self.par_offsets.size - 1)

    @property
    def n_sentences(self) -> int:
        return int(self.vectors.shape[0])

    @property
    def dim(self) -> int:
        return int(self.vectors.shape[1])

    def paragraph_doc(self) -> np.ndarray:
        """Index of the owning document for every paragraph, shape ``(P_total,)``."""
        counts = np.diff(self.doc_par_offsets)
        return np.repeat(np.arange(self.n_docs, dtype=np.int64), counts)

    def doc(self, k: int) -> DocVectors:
        p0, p1 = self.doc_par_offsets[k], self.doc_par_offsets[k + 1]
        s0, s1 = self.par_offsets[p0], self.par_offsets[p1]
        return DocVectors(self.vectors[s0:s1], self.par_offsets[p0 : p1 + 1] - s0)

    def subset(self, indices: Sequence[int]) -> "CorpusVectors":
        """A new corpus made of the documents at ``indices`` (in that order)."""
        return CorpusVectors.from_docs([self.ids[i] for i in indices], [self.doc(i) for i in indices])
