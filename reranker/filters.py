"""Metadata equality filters over candidate documents.

Semantics (also in the API schema): every field of the filter must match the document's stored
metadata (top-level keys). A filter value matches a stored value when they are equal (a boolean
only equals a boolean; ``1`` equals ``1.0``); a list filter value matches when any of its items
matches; a stored list matches when any of its items matches. A document without the field does
not match.

Look-ups: a store may offer ``metadata_of(ids) -> {id: metadata}`` (one round trip, no vectors);
otherwise each candidate's metadata is read with ``store.get`` (which also reads its vectors).
Candidates are looked up in order, in chunks, and the look-ups stop as soon as ``limit`` match.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from sdr_search.indexer.store import DocumentStore
from sdr_search.core.errors import DocumentNotFoundError

__all__ = ["matches", "filter_candidates"]


def _equal(stored: Any, wanted: Any) -> bool:
    if isinstance(stored, bool) or isinstance(wanted, bool):
        return type(stored) is type(wanted) and stored == wanted
    if isinstance(stored, (int, float)) and isinstance(wanted, (int, float)):
        return stored == wanted
    return type(stored) is type(wanted) and stored == wanted


def _value_matches(stored: Any, wanted: Any) -> bool:
    wanted_items = wanted if isinstance(wanted, list) else [wanted]
    stored_items = stored if isinstance(stored, list) else [stored]
    return any(_equal(s, w) for s in stored_items for w in wanted_items)


def matches(metadata: Mapping[str, Any], flt: Mapping[str, Any]) -> bool:
    """Whether ``metadata`` satisfies every field of ``flt`` (see the module docstring)."""
    for field, wanted in flt.items():
        if field not in metadata or not _value_matches(metadata[field], wanted):
            return False
    return True


def _metadata(store: DocumentStore, ids: Sequence[str]) -> dict[str, Mapping[str, Any]]:
    bulk = getattr(store, "metadata_of", None)
    if callable(bulk):
        return dict(bulk(ids))
    out: dict[str, Mapping[str, Any]] = {}
    for doc_id in ids:
        try:
            out[doc_id] = store.get(doc_id).document.metadata
        except DocumentNotFoundError:
            continue  # deleted since stage 1
    return out


def filter_candidates(
    store: DocumentStore, ids: Sequence[str], flt: Mapping[str, Any], *, limit: int, chunk: int | None = None
) -> list[str]:
    """The first ``limit`` of ``ids`` (in their order) whose metadata matches ``flt``. Looked up in
    chunks (default: 500 with ``metadata_of``, one round trip each; 64 with ``get``)."""
    if chunk is None:
        chunk = 500 if callable(getattr(store, "metadata_of", None)) else 64
    kept: list[str] = []
    for start in range(0, len(ids), chunk):
        part = list(ids[start : start + chunk])
        meta = _metadata(store, part)
        kept.extend(i for i in part if i in meta and matches(meta[i], flt))
        if len(kept) >= limit:
            return kept[:limit]
    return kept
