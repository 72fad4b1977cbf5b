"""Metadata equality filter semantics, shared by the stores (a filter applied inside the candidate
stage) and the engine (a filter applied to candidates); docs/http-api.md "Metadata and filters".

A filter is ``{field: value}``. A field names a metadata path (a key, or keys joined by dots: a
nested object and a dotted key alike, :mod:`sdr_search.core.metadata`). Every field must match: a
document matches a field when one of the values it holds at that path equals the filter value, or
one of its items when the filter value is a list. Equality is typed: a boolean only equals a
boolean, numbers are equal when their values are (``1`` equals ``1.0``), a string only equals the
same string (``"5"`` is not ``5``). A document without the path does not match; null and an empty
list hold no value and match nothing. Both stores compare the same terms
(:func:`sdr_search.core.metadata.value_term`), so they agree by construction.

Limits (:func:`check_filter`, applied by every store and the HTTP API before any work; an
:class:`InvalidInputError`, a 422, naming the field): at most :data:`MAX_FILTER_FIELDS` fields and
:data:`MAX_FILTER_VALUES` values per field; a field is a non-empty string of at most
:data:`~sdr_search.core.metadata.MAX_PATH_LENGTH` characters; a value is a string, a finite number
or a boolean, or a list of them (not null, not an object: a nested value is named by its path).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Collection, Mapping

from .errors import InvalidInputError
from .metadata import MAX_PATH_LENGTH, metadata_terms, shorten, value_term

__all__ = ["MAX_FILTER_FIELDS", "MAX_FILTER_VALUES", "CompiledFilter", "check_filter", "compile_filter", "matches"]

MAX_FILTER_FIELDS = 16
"""Most fields in one filter."""
MAX_FILTER_VALUES = 1_000
"""Most values in one filter field's list. OpenSearch sends them as one ``terms`` query per field
(under ``index.max_terms_count``, 65,536, and ``indices.query.bool.max_clause_count``, 1,024, for
the 16 fields), once per source sentence on the k-NN path without the sdr plugin."""

_VALUE_RULE = "a filter value is a string, a number or a boolean, or a list of them"


def _checked_value(field: str, value: Any) -> Any:
    if value is None:
        raise InvalidInputError(f"filter field {shorten(field)!r}: null matches nothing ({_VALUE_RULE})")
    if isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidInputError(f"filter field {shorten(field)!r}: {value} is not a finite number")
        return value
    hint = "; a nested metadata value is named by its dotted path, e.g. {\"a.b\": 1}" if isinstance(value, Mapping) else ""
    raise InvalidInputError(f"filter field {shorten(field)!r}: {shorten(repr(value))} is not a filter value "
                            f"({_VALUE_RULE}{hint})")


def check_filter(flt: Any) -> dict[str, list[Any]]:
    """``flt`` as ``{field: [values]}`` (a single value as a list of one), or
    :class:`InvalidInputError` naming the first field that breaks the limits (module docstring)."""
    if not isinstance(flt, Mapping):
        raise InvalidInputError(f"filter: expected an object {{field: value}}, got {type(flt).__name__}")
    if len(flt) > MAX_FILTER_FIELDS:
        raise InvalidInputError(f"filter: {len(flt)} fields, over the limit of {MAX_FILTER_FIELDS}")
    out: dict[str, list[Any]] = {}
    for field, wanted in flt.items():
        if not isinstance(field, str) or not field:
            raise InvalidInputError(f"filter field {field!r}: a field is a non-empty string (a metadata key or "
                                    "a dotted path)")
        if len(field) > MAX_PATH_LENGTH:
            raise InvalidInputError(f"filter field {shorten(field)!r}: {len(field)} characters, over the limit of "
                                    f"{MAX_PATH_LENGTH:,} (the longest metadata path)")
        if isinstance(wanted, (list, tuple)):
            if len(wanted) > MAX_FILTER_VALUES:
                raise InvalidInputError(f"filter field {shorten(field)!r}: {len(wanted):,} values, over the limit of "
                                        f"{MAX_FILTER_VALUES:,} values per field")
            out[field] = [_checked_value(field, v) for v in wanted]
        else:
            out[field] = [_checked_value(field, wanted)]
    return out


@dataclass(frozen=True)
class CompiledFilter:
    """A checked filter as terms: per field, the terms of its values (:func:`compile_filter`)."""

    fields: tuple[tuple[str, frozenset[str]], ...]

    def matches_terms(self, terms: Collection[str]) -> bool:
        """Whether a document whose metadata has ``terms`` (:func:`~sdr_search.core.metadata.metadata_terms`,
        as a set) matches."""
        return all(not wanted.isdisjoint(terms) for _, wanted in self.fields)

    def matches(self, metadata: Mapping[str, Any]) -> bool:
        """Whether ``metadata`` matches."""
        return self.matches_terms(set(metadata_terms(metadata))) if self.fields else True


def compile_filter(flt: Mapping[str, Any]) -> CompiledFilter:
    """``flt`` checked (:func:`check_filter`) and turned into terms, once for any number of documents."""
    return CompiledFilter(tuple((field, frozenset(value_term(field, v) for v in values))
                                for field, values in check_filter(flt).items()))


def matches(metadata: Mapping[str, Any], flt: Mapping[str, Any]) -> bool:
    """Whether ``metadata`` satisfies every field of ``flt`` (see the module docstring)."""
    return compile_filter(flt).matches(metadata)
