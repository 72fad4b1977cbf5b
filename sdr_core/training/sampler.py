"""Sentence-pair sampling for self-supervised SDR training (paper section 3.2), pure numpy.

- **Positive** (intra-sample, label 1): two different sentences of the same paragraph.
- **Negative** (inter-sample, label 0): one sentence from each of two different documents.

A pair is positive with probability ``positive_fraction`` (0.5 in the paper). A positive picks a
document uniformly among those with a paragraph of two or more eligible sentences, then such a
paragraph uniformly, then two distinct sentences; a negative picks two distinct documents
uniformly, then one eligible sentence of each. Eligible: at least ``min_chars`` characters and among
the first ``max_sentences_per_paragraph`` sentences of its paragraph.

For the triplet objective :meth:`PairSampler.anchor_positive_batch` returns anchor-positive pairs
with their document index, so that in-batch negatives can be restricted to other documents.

The sampler's whole state is its numpy ``Generator``; :meth:`state` / :meth:`set_state` make a
resumed run draw exactly the pairs an uninterrupted run would.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ..documents import Document
from ..errors import InvalidInputError

__all__ = ["SentencePool", "PairBatch", "PairSampler", "corpus_fingerprint"]


@dataclass(frozen=True)
class SentencePool:
    """Eligible sentences, flat, with their paragraph and document structure."""

    sentences: tuple[str, ...]
    par_offsets: np.ndarray  # (n_paragraphs + 1,) into sentences
    par_doc: np.ndarray  # (n_paragraphs,) document index of each paragraph
    n_docs: int

    @classmethod
    def from_documents(
        cls, docs: Sequence[Document], *, max_sentences_per_paragraph: int = 32, min_chars: int = 20
    ) -> "SentencePool":
        sentences: list[str] = []
        offsets = [0]
        par_doc: list[int] = []
        n_docs = 0
        for doc in docs:
            added = False
            for par in doc.paragraphs:
                kept = [s for s in par[:max_sentences_per_paragraph] if len(s.strip()) >= min_chars]
                if not kept:
                    continue
                sentences.extend(kept)
                offsets.append(len(sentences))
                par_doc.append(n_docs)
                added = True
            if added:
                n_docs += 1
        return cls(tuple(sentences), np.asarray(offsets, dtype=np.int64), np.asarray(par_doc, dtype=np.int64), n_docs)

    @property
    def par_sizes(self) -> np.ndarray:
        return np.diff(self.par_offsets)


@dataclass(frozen=True)
class PairBatch:
    """``left[i]``, ``right[i]`` with ``labels[i]`` (1 = same paragraph, 0 = different documents);
    ``left_doc``/``right_doc`` are document indices (for tests and in-batch negative masks)."""

    left: list[str]
    right: list[str]
    labels: np.ndarray
    left_doc: np.ndarray
    right_doc: np.ndarray


class PairSampler:
    """Draw training pairs from a :class:`SentencePool` (see module docstring)."""

    def __init__(self, pool: SentencePool, *, seed: int = 0, positive_fraction: float = 0.5) -> None:
        if not 0.0 < positive_fraction < 1.0:
            raise InvalidInputError(f"positive_fraction must be in (0, 1), got {positive_fraction}")
        if pool.n_docs < 2:
            raise InvalidInputError(
                f"training needs at least 2 documents with usable sentences, got {pool.n_docs}"
            )
        self.pool = pool
        self.positive_fraction = positive_fraction
        self.rng = np.random.default_rng(seed)
        sizes = pool.par_sizes
        multi = np.flatnonzero(sizes >= 2)
        if multi.size == 0:
            raise InvalidInputError("training needs at least one paragraph with 2 or more usable sentences")
        # Documents with a multi-sentence paragraph, and for each its multi-sentence paragraphs.
        docs_of_multi = pool.par_doc[multi]
        self._pos_docs = np.unique(docs_of_multi)
        order = np.argsort(docs_of_multi, kind="stable")
        self._multi_sorted = multi[order]
        bounds = np.searchsorted(docs_of_multi[order], self._pos_docs, side="left")
        self._multi_bounds = np.append(bounds, multi.size)
        # Every document's sentence range (its paragraphs are contiguous in the pool).
        first_par = np.searchsorted(pool.par_doc, np.arange(pool.n_docs), side="left")
        last_par = np.searchsorted(pool.par_doc, np.arange(pool.n_docs), side="right")
        self._doc_sent_lo = pool.par_offsets[first_par]
        self._doc_sent_hi = pool.par_offsets[last_par]

    # -- state -----------------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        return self.rng.bit_generator.state

    def set_state(self, state: dict[str, Any]) -> None:
        self.rng.bit_generator.state = state

    # -- draws -----------------------------------------------------------------------------------
    def _positive(self) -> tuple[int, int, int]:
        k = int(self.rng.integers(len(self._pos_docs)))
        lo, hi = self._multi_bounds[k], self._multi_bounds[k + 1]
        par = int(self._multi_sorted[int(self.rng.integers(lo, hi))])
        start, end = int(self.pool.par_offsets[par]), int(self.pool.par_offsets[par + 1])
        a, b = self.rng.choice(end - start, size=2, replace=False)
        return start + int(a), start + int(b), int(self.pool.par_doc[par])

    def _sentence_of(self, doc: int) -> int:
        return int(self.rng.integers(self._doc_sent_lo[doc], self._doc_sent_hi[doc]))

    def _negative(self) -> tuple[int, int, int, int]:
        d1, d2 = self.rng.choice(self.pool.n_docs, size=2, replace=False)
        return self._sentence_of(int(d1)), self._sentence_of(int(d2)), int(d1), int(d2)

    def pair_batch(self, size: int) -> PairBatch:
        """``size`` pairs for the 'sdr' objective, each positive with probability ``positive_fraction``."""
        left, right, labels, ld, rd = [], [], [], [], []
        for _ in range(size):
            if self.rng.random() < self.positive_fraction:
                a, b, d = self._positive()
                left.append(a), right.append(b), labels.append(1), ld.append(d), rd.append(d)
            else:
                a, b, d1, d2 = self._negative()
                left.append(a), right.append(b), labels.append(0), ld.append(d1), rd.append(d2)
        s = self.pool.sentences
        return PairBatch([s[i] for i in left], [s[i] for i in right], np.asarray(labels, dtype=np.int64),
                         np.asarray(ld, dtype=np.int64), np.asarray(rd, dtype=np.int64))

    def anchor_positive_batch(self, size: int) -> PairBatch:
        """``size`` anchor-positive pairs (all label 1) for the triplet objective."""
        left, right, docs = [], [], []
        for _ in range(size):
            a, b, d = self._positive()
            left.append(a), right.append(b), docs.append(d)
        s = self.pool.sentences
        d = np.asarray(docs, dtype=np.int64)
        return PairBatch([s[i] for i in left], [s[i] for i in right], np.ones(size, dtype=np.int64), d, d.copy())


def corpus_fingerprint(docs: Sequence[Document]) -> str:
    """Content hash of the training corpus (ids and sentences, in order), for provenance."""
    h = hashlib.sha256()
    for doc in docs:
        h.update(doc.id.encode("utf-8") + b"\x00")
        for par in doc.paragraphs:
            for s in par:
                h.update(s.encode("utf-8") + b"\x01")
            h.update(b"\x02")
    return h.hexdigest()[:32]
