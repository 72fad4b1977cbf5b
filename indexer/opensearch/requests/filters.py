"""Metadata filters, inside the k-NN search and the lexical search.

Pure functions: see :mod:`sdr_search.indexer.opensearch.requests`."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from sdr_search.core.errors import (
    StoreError,
)


from .layout import MATCH_NONE, MAX_ALLOWED_IDS


# metadata filters (inside the k-NN search and the lexical search)
# =============================================================================================
_INTEGER_TYPES = {"long": (-2**63, 2**63 - 1), "integer": (-2**31, 2**31 - 1), "short": (-2**15, 2**15 - 1),
                  "byte": (-2**7, 2**7 - 1), "unsigned_long": (0, 2**64 - 1)}
_FLOAT_TYPES = frozenset({"double", "float", "half_float", "scaled_float"})


@dataclass(frozen=True)
class MetadataField:
    """How one metadata field is mapped, for exact-value filters.

    ``kind``: ``string`` (a ``keyword``, or the ``keyword`` sub-field of a ``text`` field, as
    OpenSearch's dynamic mapping makes for JSON strings), ``integer``, ``float``, ``boolean``,
    ``object``, or ``other`` (a mapping no exact filter can use: ``text`` without a ``keyword``
    sub-field, dates, ...). ``path`` is the full field name that holds exact values;
    ``ignore_above`` the longest string it indexes (longer values are not indexed)."""

    kind: str
    path: str | None = None
    ignore_above: int | None = None
    type: str = ""  # the OpenSearch field type, as mapped


def metadata_fields(mapping: Mapping[str, Any]) -> dict[str, MetadataField]:
    """``name -> MetadataField`` for every field under ``metadata`` in an index mapping (the
    ``mappings`` of a ``GET _mapping`` answer, or the whole index body). A field inside a metadata
    object is named with dots (``a.b``), as OpenSearch names it."""
    mappings = mapping.get("mappings", mapping)
    root = (mappings.get("properties") or {}).get("metadata") or {}
    out: dict[str, MetadataField] = {}

    def walk(props: Mapping[str, Any], prefix: str) -> None:
        for name, spec in props.items():
            full = f"{prefix}{name}"
            ftype = str(spec.get("type", "object"))
            path = f"metadata.{full}"
            if ftype in ("object", "nested") or "properties" in spec:
                out[full] = MetadataField("object", None, None, ftype)
                walk(spec.get("properties") or {}, f"{full}.")
            elif ftype == "keyword":
                out[full] = MetadataField("string", path, spec.get("ignore_above"), ftype)
            elif ftype in ("text", "match_only_text"):
                sub = next(((n, f) for n, f in (spec.get("fields") or {}).items() if f.get("type") == "keyword"), None)
                out[full] = (MetadataField("string", f"{path}.{sub[0]}", sub[1].get("ignore_above"), ftype) if sub
                             else MetadataField("other", None, None, ftype))
            elif ftype in _INTEGER_TYPES:
                out[full] = MetadataField("integer", path, None, ftype)
            elif ftype in _FLOAT_TYPES:
                out[full] = MetadataField("float", path, None, ftype)
            elif ftype == "boolean":
                out[full] = MetadataField("boolean", path, None, ftype)
            else:
                out[full] = MetadataField("other", None, None, ftype)

    walk(root.get("properties") or {}, "")
    return out


def _exact_values(field: MetadataField, wanted: Sequence[Any]) -> list[Any]:
    """The filter values that can equal a stored value of ``field`` under the filter semantics
    (:mod:`sdr_search.core.filters`: a boolean only equals a boolean, ``1`` equals ``1.0``,
    otherwise same type and value), as the JSON values a ``term`` query on ``field.path`` takes.
    Values of another type, and strings longer than ``ignore_above`` (never indexed), are dropped."""
    out: list[Any] = []
    for v in wanted:
        if field.kind == "boolean":
            keep = v if isinstance(v, bool) else None
        elif field.kind == "string":
            keep = v if isinstance(v, str) and (field.ignore_above is None or len(v) <= int(field.ignore_above)) else None
        elif field.kind in ("integer", "float") and isinstance(v, (int, float)) and not isinstance(v, bool):
            if field.kind == "float":
                keep = float(v)
            elif isinstance(v, int) or (np.isfinite(v) and float(v).is_integer()):
                lo, hi = _INTEGER_TYPES[field.type]
                keep = int(v) if lo <= int(v) <= hi else None
            else:
                keep = None
        else:
            keep = None
        if keep is not None and not any(type(keep) is type(o) and keep == o for o in out):
            out.append(keep)
    return out


def build_metadata_filter(flt: Mapping[str, Any], fields: Mapping[str, MetadataField]) -> dict[str, Any] | None:
    """The OpenSearch query of a metadata equality filter (``{field: scalar or list}``: every field
    must match, a list matches any of its items; :mod:`sdr_search.core.filters`), for the
    document index: ``None`` for an empty filter (no restriction), :data:`MATCH_NONE` when no stored
    document can match (a field no document has, or values of another type than the field's).

    Each value is a ``term`` query on the field's exact-value path (``fields``: the index mapping,
    :func:`metadata_fields`), the values of one field OR-ed in a ``bool.should``, the fields AND-ed
    in a ``bool.filter``. Never a ``terms`` query: inside a nested k-NN query the k-NN plugin
    (2.19) joins a filter on the parent document's fields down to the sentences only when it
    recognises every required clause as a parent-field query, and a ``terms`` query on a numeric
    field (a point-set query) is not recognised: it is then applied to the sentences themselves
    and matches nothing (measured on a 2.19.1 node). A field mapped in a way no exact filter can
    use (``text`` without a ``keyword`` sub-field) raises :class:`StoreError`."""
    if not flt:
        return None
    clauses: list[dict[str, Any]] = []
    for name, wanted in flt.items():
        field = fields.get(str(name))
        if field is None:
            return copy.deepcopy(MATCH_NONE)  # no stored document has the field
        if field.kind == "other":
            raise StoreError(
                f"metadata field {name!r} is mapped as {field.type!r}, which has no exact values to filter on "
                "inside OpenSearch (a text field needs a keyword sub-field)"
            )
        values = _exact_values(field, wanted if isinstance(wanted, list) else [wanted])
        if not values:
            return copy.deepcopy(MATCH_NONE)
        terms = [{"term": {field.path: v}} for v in values]
        clauses.append(terms[0] if len(terms) == 1 else {"bool": {"should": terms, "minimum_should_match": 1}})
    return {"bool": {"filter": clauses}}


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


# =============================================================================================
