"""Document metadata: what every store accepts, and the typed terms a filter matches (one contract
for the embedded store and OpenSearch; docs/http-api.md "Metadata and filters").

Metadata is a JSON object whose values may be strings, numbers, booleans, null, lists and objects,
nested. Every value is named by its *path*: the keys from the metadata object down to it, joined
by ``.``. A nested object and a dotted key are the same path: ``{"a": {"b": 1}}`` and
``{"a.b": 1}`` both hold the value 1 at ``a.b`` (a document with both holds two values there). A
list gives each of its items to the path that holds it (a list of objects: each object's values
under ``path.key``; a list in a list: its items). null and an empty list hold no value. Metadata
is stored and returned exactly as given (a dotted key is not expanded).

Limits, checked by :func:`check_metadata` before any write on every store (a 422 naming the key or
path): at most :data:`MAX_KEYS` keys in all (each key of each object, nested ones and those of
objects in lists included), :data:`MAX_VALUES` values in all (each list item counts),
:data:`MAX_DEPTH` levels (a value sits inside at most that many objects and lists, the metadata
object included: ``{"a": {"b": 1}}`` and ``{"tags": ["x"]}`` are two levels), keys of 1 to
:data:`MAX_KEY_LENGTH` characters, paths of at most :data:`MAX_PATH_LENGTH` characters, finite
numbers. Strings have no length limit of their own.

Terms (:func:`value_term`, :func:`metadata_terms`): each value at a path is one string,
``json.dumps([path, canonical value])``. Equal terms are exactly equal values in the filter
semantics (:mod:`sdr_search.core.filters`): a boolean is ``true``/``false`` (never equal to a
number or a string), a number whose value is an integer is that integer (``5``, ``5.0`` and
``-0.0``/``0`` are equal), any other number its shortest float form, a string itself (``"5"`` is
not ``5``) or, over :data:`HASHED_STRING_CHARS` characters, ``{"sha256": <hex of its UTF-8>}``,
which keeps a term under Lucene's 32,766-byte limit whatever the string's length. The embedded
store matches filters on these terms, and OpenSearch indexes them in one ``keyword`` field
(``metadata_terms``): one field for any number of keys, no type fixed by a first writer.
"""

from __future__ import annotations

import hashlib
import math
from json.encoder import encode_basestring as _json_string  # a JSON string as json.dumps(ensure_ascii=False) writes it
from collections.abc import Mapping as _AbcMapping
from typing import Any, Iterator, Mapping

from .errors import InvalidDocumentError

__all__ = [
    "MAX_KEYS", "MAX_VALUES", "MAX_DEPTH", "MAX_KEY_LENGTH", "MAX_PATH_LENGTH", "HASHED_STRING_CHARS",
    "check_metadata", "metadata_leaves", "value_term", "metadata_terms", "shorten",
]

MAX_KEYS = 1_000
"""Most keys in one document's metadata, every key of every object counted where it occurs."""
MAX_VALUES = 10_000
"""Most values (strings, numbers, booleans, nulls; each list item) in one document's metadata."""
MAX_DEPTH = 8
"""Most objects and lists a value sits inside, the metadata object included."""
MAX_KEY_LENGTH = 256
"""Longest key, in characters."""
MAX_PATH_LENGTH = 1_024
"""Longest path (the keys down to a value joined by dots), in characters; also the longest filter field."""
HASHED_STRING_CHARS = 256
"""A string longer than this is represented in its term by its SHA-256 (equality stays exact)."""

_SCALARS = (str, int, float, bool, type(None))


def shorten(text: str, keep: int = 60) -> str:
    """``text`` as named in a message: itself, or its first ``keep`` characters and its length."""
    return text if len(text) <= keep + 20 else f"{text[:keep]}... ({len(text)} characters)"


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def check_metadata(metadata: Any, doc_id: str | None = None) -> None:
    """Raise :class:`InvalidDocumentError` (for ``doc_id``) naming the first key or path of
    ``metadata`` that breaks the contract (see the module docstring), in document order."""
    if not isinstance(metadata, Mapping):
        raise InvalidDocumentError(doc_id, f"'metadata' must be an object, got {type(metadata).__name__}")
    counts = {"keys": 0, "values": 0}

    def refuse(path: str, why: str) -> InvalidDocumentError:
        return InvalidDocumentError(doc_id, f"metadata key {shorten(path)!r}: {why}")

    def visit(value: Any, path: str, depth: int) -> None:  # depth: the objects and lists around value
        if depth > MAX_DEPTH:
            raise refuse(path, f"nested {depth} levels deep, over the limit of {MAX_DEPTH} levels (objects and "
                               "lists, the metadata object included)")
        if isinstance(value, Mapping):
            for key, item in value.items():
                if not isinstance(key, str):
                    raise InvalidDocumentError(doc_id, f"metadata key {key!r}{f' under {shorten(path)!r}' if path else ''}: "
                                                       f"a key must be a string, not {type(key).__name__}")
                child = _join(path, key)
                if not key:
                    raise refuse(child, "a key must not be empty")
                if len(key) > MAX_KEY_LENGTH:
                    raise refuse(child, f"a key of {len(key)} characters, over the limit of {MAX_KEY_LENGTH}")
                if len(child) > MAX_PATH_LENGTH:
                    raise refuse(child, f"a path (keys joined by dots) of {len(child)} characters, over the limit of "
                                        f"{MAX_PATH_LENGTH:,}")
                counts["keys"] += 1
                if counts["keys"] > MAX_KEYS:
                    raise refuse(child, f"over the limit of {MAX_KEYS:,} keys per document (the keys of nested "
                                        "objects count)")
                visit(item, child, depth + 1)
        elif isinstance(value, (list, tuple)):
            for item in value:
                visit(item, path, depth + 1)
        elif isinstance(value, _SCALARS):
            if isinstance(value, float) and not math.isfinite(value):
                raise refuse(path, f"{value} is not a JSON number (JSON has no NaN or infinity)")
            counts["values"] += 1
            if counts["values"] > MAX_VALUES:
                raise refuse(path, f"over the limit of {MAX_VALUES:,} values per document (each list item counts)")
        else:
            raise refuse(path, f"a {type(value).__name__} is not a JSON value")

    visit(metadata, "", 0)


def metadata_leaves(metadata: Mapping[str, Any]) -> Iterator[tuple[str, Any]]:
    """Every ``(path, value)`` of ``metadata`` that holds a value: strings, numbers and booleans
    (null and empty lists hold none), lists and objects walked as the module docstring says. Walks
    stored metadata of any shape (no limit is checked here: :func:`check_metadata` does that)."""
    stack: list[tuple[str, Any]] = [("", metadata)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, (str, int, float)):  # bool is an int
            yield path, value
        elif isinstance(value, (dict, _AbcMapping)):
            stack.extend((f"{path}.{k}" if path else str(k), v) for k, v in value.items())
        elif isinstance(value, (list, tuple)):
            stack.extend((path, v) for v in value)


def _canonical(value: Any) -> str:
    """The JSON text that stands for ``value`` in a term (see the module docstring), as
    ``json.dumps(..., ensure_ascii=False)`` writes it (built directly: a filter over a large
    embedded store makes millions of terms)."""
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return int.__repr__(int(value))
    if isinstance(value, float):
        return int.__repr__(int(value)) if value.is_integer() else float.__repr__(value)
    if len(value) > HASHED_STRING_CHARS:
        return '{"sha256":"' + hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest() + '"}'
    return _json_string(value)


def value_term(path: str, value: Any) -> str:
    """The term of a string, number or boolean ``value`` at ``path``: the JSON text
    ``json.dumps([path, canonical], ensure_ascii=False, separators=(",", ":"))``."""
    return "[" + _json_string(path) + "," + _canonical(value) + "]"


def metadata_terms(metadata: Mapping[str, Any]) -> list[str]:
    """The distinct terms of every value of ``metadata``, sorted (what OpenSearch indexes in
    ``metadata_terms``, and what the embedded store matches a filter against)."""
    return sorted({"[" + _json_string(path) + "," + _canonical(value) + "]" for path, value in metadata_leaves(metadata)})
