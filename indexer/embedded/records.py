"""Pure conversions between the store's domain objects and its catalogue rows: documents
checked (:mod:`sdr_search.indexer.validation`) and encoded for a ``put`` (:class:`Prepared`), per-paragraph statistics as blobs, and
the reference sample as ``reference`` table rows.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from sdr_search.core.cache import document_key
from sdr_search.core.documents import Document
from sdr_search.core.errors import StoreDamagedError
from sdr_search.core.scoring import NormStats
from sdr_search.core.vectors import CorpusVectors, DocVectors

from ..store import IndexMeta, ReferenceParagraphs
from ..validation import check_put_items, check_reference
from .rows import offsets

__all__ = ["Prepared", "prepare", "prepare_all", "encode_stats", "decode_stats", "encode_reference",
           "decode_reference"]


# -- documents --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Prepared:
    """A validated document ready to be written."""

    doc: Document
    vectors: np.ndarray
    par_sizes: list[int]
    content_key: str
    metadata_json: str
    paragraphs_json: str


def prepare(doc: Document, vectors: DocVectors, meta: IndexMeta) -> Prepared:
    """The rows of one ``put()`` item already checked by :func:`~sdr_search.indexer.validation.check_put_items`."""
    return Prepared(
        doc, vectors.vectors, [len(p) for p in doc.paragraphs], document_key(meta.encoder_tag, doc.paragraphs),
        json.dumps(dict(doc.metadata), ensure_ascii=False),
        json.dumps([list(p) for p in doc.paragraphs], ensure_ascii=False),
    )


def prepare_all(
    items: Sequence[tuple[Document, DocVectors]], meta: IndexMeta, directory: Path
) -> list[Prepared]:
    """Check every item against the recorded model ``meta`` of the store in ``directory`` (the
    checks every store makes: :func:`~sdr_search.indexer.validation.check_put_items`), then
    :func:`prepare` each."""
    check_put_items(items, meta, where=f"store {directory}")
    return [prepare(doc, vec, meta) for doc, vec in items]


# -- statistics -------------------------------------------------------------------------------
def encode_stats(stats: NormStats) -> bytes:
    return np.concatenate([stats.mu, stats.sigma]).astype("<f8").tobytes()


def decode_stats(blob: bytes | None, doc_id: str) -> NormStats | None:
    if blob is None:
        return None
    arr = np.frombuffer(blob, dtype="<f8")
    n = arr.size // 2
    try:
        return NormStats(arr[:n].copy(), arr[n:].copy())
    except ValueError as e:
        raise StoreDamagedError(f"stored statistics of document {doc_id!r} are damaged: {e}") from e


# -- reference sample -------------------------------------------------------------------------
def decode_reference(info: Mapping[str, Any], rows: Sequence[tuple[Any, ...]]) -> ReferenceParagraphs:
    """The sample of :func:`.catalog.read_reference`'s info and rows."""
    dim = int(info["dim"])
    vectors = np.frombuffer(b"".join(r[4] for r in rows), dtype="<f4").reshape(-1, dim)
    lengths = [r[3] for r in rows]
    corpus = CorpusVectors(
        tuple(r[2] for r in rows), vectors.astype(np.float32), offsets(lengths),
        np.arange(len(rows) + 1, dtype=np.int64),
    )
    return ReferenceParagraphs(
        tuple(r[0] for r in rows), np.asarray([r[1] for r in rows], dtype=np.int64), corpus,
        int(info["seed"]), int(info["size"]),
    )


def encode_reference(reference: ReferenceParagraphs) -> list[tuple[Any, ...]]:
    """The reference table rows of ``reference`` (one per sampled paragraph, with its own vectors;
    checked by :func:`~sdr_search.indexer.validation.check_reference`)."""
    check_reference(reference)
    cv = reference.vectors
    n = len(reference.doc_ids)
    lengths = np.diff(cv.par_offsets)
    return [
        (pos, str(reference.doc_ids[pos]), int(reference.paragraph_index[pos]), cv.ids[pos], int(lengths[pos]),
         np.ascontiguousarray(cv.vectors[cv.par_offsets[pos] : cv.par_offsets[pos + 1]], dtype="<f4").tobytes())
        for pos in range(n)
    ]
