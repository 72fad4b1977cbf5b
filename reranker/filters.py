"""Metadata equality filters over candidate documents.

Semantics and limits: :mod:`sdr_search.core.filters` (the one contract of both stores; also in the
API schema and docs/http-api.md): every field of the filter names a metadata path (a key, or keys
joined by dots) and must match; values compare typed (a boolean only equals a boolean; ``1``
equals ``1.0``; ``"5"`` is not ``5``); a list filter value matches when any of its items matches; a
document matches when any value it holds at the path does. A document without the path does not
match.

Look-ups: :meth:`~sdr_search.indexer.store.DocumentStore.metadata_of`, in chunks: 500 ids a chunk
for a store that declares ``capabilities.metadata_lookup`` (one round trip, no vectors), 64 for
one that does not (the interface's default reads each candidate with ``get``, vectors included).
Candidates are looked up in order and the look-ups stop as soon as ``limit`` match.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from sdr_search.core.filters import compile_filter, matches
from sdr_search.indexer.store import DocumentStore

__all__ = ["matches", "filter_candidates"]

BULK_CHUNK = 500  # ids per metadata look-up on a store with bulk metadata (one round trip each)
SINGLE_CHUNK = 64  # ids per look-up on a store that reads each document with get()


def filter_candidates(
    store: DocumentStore, ids: Sequence[str], flt: Mapping[str, Any], *, limit: int, chunk: int | None = None
) -> list[str]:
    """The first ``limit`` of ``ids`` (in their order) whose metadata matches ``flt``. Looked up in
    chunks (default: see the module docstring)."""
    wanted = compile_filter(flt)  # checked before any look-up
    if chunk is None:
        chunk = BULK_CHUNK if store.capabilities.metadata_lookup else SINGLE_CHUNK
    kept: list[str] = []
    for start in range(0, len(ids), chunk):
        part = list(ids[start : start + chunk])
        meta = store.metadata_of(part)
        kept.extend(i for i in part if i in meta and wanted.matches(meta[i]))
        if len(kept) >= limit:
            return kept[:limit]
    return kept
