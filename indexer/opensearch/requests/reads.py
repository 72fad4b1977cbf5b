"""Reads: mget, counts, scans, the alias swap, and the stored documents' paragraphs and vectors.

Pure functions: see :mod:`sdr_search.indexer.opensearch.requests`."""

from __future__ import annotations

import copy
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from sdr_search.core.documents import Document
from sdr_search.core.errors import StoreError
from sdr_search.core.vectors import DocVectors

from .layout import KNN_FIELD, decode_vectors_b64, document_os_id


# reads
# =============================================================================================
def build_mget_body(ids: Iterable[str], fields: Sequence[str] | Mapping[str, Any] | bool, *, index: str | None = None) -> dict[str, Any]:
    """``_mget`` body for documents ``ids`` (by stable ``_id``) with ``_source`` filter ``fields``
    (a list of fields, an ``{"includes"/"excludes"}`` dict, or a bool). ``index`` names the
    index in every entry (for a request spanning indices); otherwise the path names it."""
    source: Any = fields if isinstance(fields, bool) else (dict(fields) if isinstance(fields, Mapping) else list(fields))
    docs = []
    for i in ids:
        entry: dict[str, Any] = {"_id": document_os_id(i), "_source": copy.deepcopy(source)}
        if index is not None:
            entry = {"_index": index, **entry}
        docs.append(entry)
    return {"docs": docs}


def build_mget_stored_body(ids: Iterable[str], fields: Sequence[str]) -> dict[str, Any]:
    """``_mget`` body for the stored fields ``fields`` of documents ``ids`` (by stable ``_id``), without
    ``_source``: still real time, and a derived-source index (3.x) rebuilds no sentence vector for it."""
    return {"docs": [{"_id": document_os_id(i), "_source": False, "stored_fields": list(fields)} for i in ids]}


def build_sources_search(ids: Sequence[str], fields: Sequence[str]) -> dict[str, Any]:
    """A search for the documents ``ids`` (by stable ``_id``, at most one page: the caller chunks) with
    ``_source`` filtered to ``fields``, the sentence vectors excluded by name: the cheap way to read many
    documents' text and metadata. A ``GET``/``_mget`` of a derived-source index (3.x) rebuilds every
    sentence vector into each document's ``_source`` before any filter applies (about 25 ms per document
    on the demo corpus); a search's fetch skips that when the vector field is excluded by name.
    What it sees is the index as of its last refresh, as the searches that found the ids saw it."""
    os_ids = list(dict.fromkeys(document_os_id(str(i)) for i in ids))
    return {
        "size": len(os_ids),
        "track_total_hits": False,
        "query": {"ids": {"values": os_ids}},
        "_source": {"includes": list(fields), "excludes": [KNN_FIELD]},
    }


def build_counts_query() -> dict[str, Any]:
    """Documents (exact total), paragraphs and sentences (sums) in one search."""
    return {
        "size": 0,
        "track_total_hits": True,
        "aggs": {"paragraphs": {"sum": {"field": "n_paragraphs"}}, "sentences": {"sum": {"field": "n_sentences"}}},
    }


def build_stats_count_query(version: int | None = None) -> dict[str, Any]:
    """``_count`` body over the state index: statistics documents (of ``version`` if given)."""
    filters: list[dict[str, Any]] = [{"term": {"kind": "stats"}}]
    if version is not None:
        filters.append({"term": {"stats_version": int(version)}})
    return {"query": {"bool": {"filter": filters}}}


def build_scan_query(
    *, size: int, source: Sequence[str] | bool, search_after: Sequence[Any] | None = None,
    pit_id: str | None = None, keep_alive: str = "2m", query: Mapping[str, Any] | None = None,
    ext: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One page of a scan over all documents in ``doc_id`` order (unique, so ``search_after``
    pages neither repeat nor skip a document). With ``pit_id`` the page reads that point in time
    (the request then names no index). ``query`` (a filter: it does not score) restricts the
    scan to the documents it matches."""
    body: dict[str, Any] = {
        "size": int(size),
        "_source": source if isinstance(source, bool) else list(source),
        "sort": [{"doc_id": "asc"}],
        "track_total_hits": False,
    }
    if query is not None:
        body["query"] = {"bool": {"filter": [copy.deepcopy(dict(query))]}}
    if source is False:
        body["docvalue_fields"] = ["doc_id"]
    if search_after is not None:
        body["search_after"] = list(search_after)
    if pit_id is not None:
        body["pit"] = {"id": pit_id, "keep_alive": keep_alive}
    if ext is not None:
        body["ext"] = copy.deepcopy(dict(ext))
    return body


def build_alias_swap(alias: str, new_index: str, old_indices: Iterable[str]) -> dict[str, Any]:
    """``_aliases`` body moving ``alias`` to ``new_index`` atomically (one request)."""
    actions: list[dict[str, Any]] = [{"remove": {"index": old, "alias": alias}} for old in old_indices if old != new_index]
    actions.append({"add": {"index": new_index, "alias": alias}})
    return {"actions": actions}



# stored documents (a _source read back)
# =============================================================================================
def sentence_offsets(par_sizes: Sequence[int]) -> np.ndarray:
    """``[0, s0, s0 + s1, ...]``: where the sentences of each paragraph of these sizes start (and the total)."""
    return np.concatenate([[0], np.cumsum(np.asarray(par_sizes, dtype=np.int64))]).astype(np.int64)


def parse_stored_paragraphs(src: Mapping[str, Any], doc_id: str) -> tuple[tuple[str, ...], ...]:
    """A stored document's paragraphs; :class:`StoreError` naming it when its ``_source`` has none (a
    document written around the store)."""
    try:
        return tuple(tuple(str(s) for s in p) for p in src["paragraphs"])
    except (KeyError, TypeError) as e:
        raise StoreError(f"stored document {doc_id!r} is damaged: its _source has no paragraphs ({e!r})") from e


PRESENTED_FIELDS = ("doc_id", "title", "metadata", "paragraphs")
"""The ``_source`` fields of a document to present (:func:`parse_presented_document`): no vectors."""


def parse_presented_document(src: Mapping[str, Any], doc_id: str) -> Document:
    """A document to present from its ``_source`` filtered to :data:`PRESENTED_FIELDS`."""
    return Document(str(src.get("doc_id", doc_id)), parse_stored_paragraphs(src, doc_id), src.get("title"),
                    src.get("metadata") or {})


def parse_b64_vectors(src: Mapping[str, Any], dim: int) -> DocVectors:
    """A document's vectors from its ``_source``'s base64 copy ``vectors_b64`` and ``par_sizes``."""
    if "vectors_b64" not in src:  # written around the store: the plugin path says the same (sdr_scores)
        raise StoreError(f"stored vectors of document {src.get('doc_id')!r} are missing: its _source has no "
                         "vectors_b64 (the base64 copy)")
    try:
        return DocVectors(decode_vectors_b64(src["vectors_b64"], dim), sentence_offsets(src["par_sizes"]))
    except (KeyError, ValueError) as e:
        raise StoreError(f"stored vectors of document {src.get('doc_id')!r} are damaged: {e}") from e


def parse_derived_vectors(src: Mapping[str, Any], dim: int) -> DocVectors:
    """A document's vectors from the ``sentences`` that derived source rebuilds (JSON floats)."""
    try:
        rows = sorted(src["sentences"], key=lambda r: int(r["position"]))
        vectors = np.asarray([r["vector"] for r in rows], dtype=np.float32).reshape(-1, dim)
        offsets = sentence_offsets(src["par_sizes"])
    except (KeyError, TypeError, ValueError) as e:
        raise StoreError(f"stored vectors of document {src.get('doc_id')!r} are damaged: {e}") from e
    if vectors.shape[0] != offsets[-1]:
        raise StoreError(f"stored vectors of document {src.get('doc_id')!r} are damaged: {vectors.shape[0]} "
                         f"sentence vectors for {offsets[-1]} sentences")
    return DocVectors(vectors, offsets)

# =============================================================================================
