"""Metadata equality filter semantics, shared by the stores (a filter applied inside the candidate
stage) and the engine (a filter applied to candidates).

Every field of the filter must match the document's stored metadata (top-level keys). A filter
value matches a stored value when they are equal (a boolean only equals a boolean; ``1`` equals
``1.0``); a list filter value matches when any of its items matches; a stored list matches when
any of its items matches. A document without the field does not match.
"""

from __future__ import annotations

from typing import Any, Mapping

__all__ = ["matches"]


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
