"""The checks every store makes on the items of a ``put()`` before it writes anything (pure).

Both stores call :func:`check_put_items`, so a document one store refuses the other refuses too,
with the same error: a pair that is not ``(Document, DocVectors)``, vectors of another dimension
than the store's model (:class:`ModelMismatchError`), vectors grouped otherwise than the
document's paragraphs, NaN or infinite vectors, more sentences than the store's limit (OpenSearch:
the nested field's limit), metadata outside the metadata contract (strict JSON within the limits of
:mod:`sdr_search.core.metadata`; :class:`InvalidDocumentError` naming the key), text that breaks the
text rule (a lone surrogate in the title, a sentence or metadata:
:func:`sdr_search.core.documents.text_problem`; :class:`InvalidDocumentError`), and an id twice in
one ``put()`` (:class:`DuplicateIdError`). The first invalid item, in order, raises.

Both stores also call :func:`check_reference` on a reference sample before recording it.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from sdr_search.core.documents import Document, check_id, text_problem
from sdr_search.core.metadata import check_metadata
from sdr_search.core.errors import DuplicateIdError, InvalidDocumentError, InvalidInputError, ModelMismatchError
from sdr_search.core.vectors import DocVectors

from .store import IndexMeta, ReferenceParagraphs

__all__ = ["check_put_item", "check_put_items", "check_reference"]


def check_put_item(doc: Document, vectors: DocVectors, meta: IndexMeta, *, where: str,
                   max_sentences: int | None = None) -> None:
    """Raise unless ``(doc, vectors)`` may be written into the store ``where`` (named in messages,
    e.g. ``"store /data/s"``) that holds model ``meta``; ``max_sentences``: the store's limit of
    sentences per document (None: none)."""
    if not isinstance(doc, Document) or not isinstance(vectors, DocVectors):
        raise InvalidInputError("put() takes (Document, DocVectors) pairs")
    check_id(doc.id)  # the one id rule, also for a Document built without parse_record
    for name, value in (("title", doc.title), ("paragraphs", doc.paragraphs), ("metadata", doc.metadata)):
        problem = text_problem(value, name)  # the one text rule, also for a Document built in code
        if problem is not None:
            raise InvalidDocumentError(doc.id, problem)
    if vectors.dim != int(meta.dim):
        raise ModelMismatchError(
            f"document {doc.id!r}: vectors have dimension {vectors.dim}, but {where} holds "
            f"dimension {meta.dim} (model {meta.model_id})"
        )
    sizes = [len(p) for p in doc.paragraphs]
    grouped = np.diff(vectors.par_offsets).tolist()
    if sizes != grouped:
        raise InvalidDocumentError(
            doc.id, f"vectors are grouped as {grouped} sentences per paragraph but the document has {sizes}"
        )
    if not np.all(np.isfinite(vectors.vectors)):
        raise InvalidDocumentError(doc.id, "vectors contain NaN or infinity")
    if max_sentences is not None and vectors.n_sentences > max_sentences:
        raise InvalidDocumentError(doc.id, f"{vectors.n_sentences} sentences, over the index limit of {max_sentences}")
    check_metadata(doc.metadata, doc.id)


def check_put_items(items: Sequence[tuple[Document, DocVectors]], meta: IndexMeta, *, where: str,
                    max_sentences: int | None = None) -> None:
    """:func:`check_put_item` for each item in order, and no id twice (:class:`DuplicateIdError`)."""
    seen: set[str] = set()
    for item in items:
        try:
            doc, vectors = item
        except (TypeError, ValueError) as e:
            raise InvalidInputError("put() takes (Document, DocVectors) pairs") from e
        check_put_item(doc, vectors, meta, where=where, max_sentences=max_sentences)
        if doc.id in seen:
            raise DuplicateIdError(doc.id, "appears twice in one put()")
        seen.add(doc.id)


def check_reference(reference: ReferenceParagraphs) -> None:
    """Raise :class:`InvalidInputError` unless ``reference`` has one owner, paragraph index and
    vectors "document" per sampled paragraph (each sampled paragraph its own document in
    ``reference.vectors``), as a store records it."""
    cv = reference.vectors
    n = len(reference.doc_ids)
    if np.asarray(reference.paragraph_index).shape != (n,) or cv.n_docs != n:
        raise InvalidInputError("reference sample: doc_ids, paragraph_index and vectors must have one entry per paragraph")
    if not np.array_equal(cv.doc_par_offsets, np.arange(n + 1)):
        raise InvalidInputError("reference sample: each sampled paragraph must be its own document in vectors")
