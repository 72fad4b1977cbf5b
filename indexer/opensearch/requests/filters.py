"""Metadata filters, inside the k-NN search and the lexical search.

Pure functions: see :mod:`sdr_search.indexer.opensearch.requests`."""

from __future__ import annotations

import copy
from typing import Any, Mapping, Sequence

from sdr_search.core.errors import InvalidInputError
from sdr_search.core.filters import compile_filter

from .layout import MATCH_NONE, MAX_ALLOWED_IDS, METADATA_TERMS_FIELD


# metadata filters (inside the k-NN search and the lexical search)
# =============================================================================================
def build_metadata_filter(flt: Mapping[str, Any]) -> dict[str, Any] | None:
    """The OpenSearch query of a metadata equality filter (:mod:`sdr_search.core.filters`: every
    field must match, a list matches any of its items) for the document index: ``None`` for an
    empty filter (no restriction), :data:`MATCH_NONE` when nothing can match (a field given an
    empty list). Raises :class:`InvalidInputError` for a filter over the limits
    (:func:`sdr_search.core.filters.check_filter`), before any request.

    One ``terms`` query per field on the ``keyword`` field :data:`METADATA_TERMS_FIELD`, which
    holds each document's typed metadata terms (:func:`sdr_search.core.metadata.metadata_terms`):
    a filter value matches when its term (:func:`~sdr_search.core.metadata.value_term`) is one of
    the document's, the same comparison the embedded store makes. The fields are AND-ed in a
    ``bool.filter``. A ``terms`` query on a keyword field is one the k-NN plugin (2.19) recognises
    as a parent-field query inside a nested k-NN query, so it joins it down to the sentences (a
    ``terms`` query on a numeric field, a point-set query, it does not recognise: measured on a
    2.19.1 node when metadata was mapped field by field)."""
    compiled = compile_filter(flt)
    if not compiled.fields:
        return None
    if any(not terms for _, terms in compiled.fields):
        return copy.deepcopy(MATCH_NONE)
    return {"bool": {"filter": [{"terms": {METADATA_TERMS_FIELD: sorted(terms)}} for _, terms in compiled.fields]}}


def build_candidate_filter(
    metadata_filter: Mapping[str, Any] | None, allowed_ids: Sequence[str] | None = None,
) -> dict[str, Any] | None:
    """The restriction of a candidate search (document level): a metadata filter
    (:func:`build_metadata_filter`) AND-ed with a list of allowed document ids (``terms`` on
    ``doc_id``, at most :data:`MAX_ALLOWED_IDS`); ``None`` when there is neither, :data:`MATCH_NONE`
    when nothing can match (an empty id list, or a filter no document matches)."""
    if allowed_ids is not None:
        allowed = list(dict.fromkeys(str(i) for i in allowed_ids))
        if not allowed:
            return copy.deepcopy(MATCH_NONE)
        if len(allowed) > MAX_ALLOWED_IDS:
            raise ValueError(f"at most {MAX_ALLOWED_IDS} allowed ids per search, got {len(allowed)}; "
                             "give the metadata filter itself (filter=)")
        by_id: dict[str, Any] | None = {"terms": {"doc_id": allowed}}
    else:
        by_id = None
    if metadata_filter == MATCH_NONE:
        return copy.deepcopy(MATCH_NONE)
    parts = [q for q in (metadata_filter, by_id) if q is not None]
    if not parts:
        return None
    if len(parts) == 1:
        return copy.deepcopy(dict(parts[0]))
    return {"bool": {"filter": [copy.deepcopy(dict(q)) for q in parts]}}


def build_restriction(flt: Mapping[str, Any] | None, allowed_ids: Sequence[str] | None) -> dict[str, Any] | None:
    """The document-level query of a metadata filter and allowed ids (None: no restriction;
    :data:`MATCH_NONE`: nothing can match). It checks both (a filter over the limits of
    :func:`sdr_search.core.filters.check_filter`, too many ids) before any request is sent."""
    metadata = build_metadata_filter(flt) if flt else None
    if allowed_ids is not None and len(set(map(str, allowed_ids))) > MAX_ALLOWED_IDS:
        raise InvalidInputError(f"the OpenSearch store takes at most {MAX_ALLOWED_IDS} allowed_ids per search, "
                                f"got {len(allowed_ids)}; pass the metadata filter itself (filter=)")
    return build_candidate_filter(metadata, allowed_ids)


# =============================================================================================
