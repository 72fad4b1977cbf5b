"""The metadata contract's pure parts (sdr_search.core.metadata, sdr_search.core.filters): the typed
terms against a reference written with ``json.dumps``, equal terms exactly for equal values, the
paths of nested objects, dotted keys and lists, and the limits at their boundaries. (Both stores
against the same contract: tests/store_contract.py.)"""

from __future__ import annotations

import hashlib
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sdr_search.core.errors import InvalidDocumentError, InvalidInputError
from sdr_search.core.filters import MAX_FILTER_FIELDS, MAX_FILTER_VALUES, check_filter, compile_filter, matches
from sdr_search.core.metadata import (
    MAX_DEPTH,
    MAX_KEY_LENGTH,
    MAX_KEYS,
    MAX_PATH_LENGTH,
    MAX_VALUES,
    check_metadata,
    metadata_leaves,
    metadata_terms,
    value_term,
)

pytestmark = pytest.mark.unit

scalars = st.one_of(st.booleans(), st.integers(min_value=-2**80, max_value=2**80),
                    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=300))


def reference_term(path: str, value) -> str:
    """The term as the module docstring defines it, written the slow, obvious way."""
    if isinstance(value, bool):
        canonical = value
    elif isinstance(value, int):
        canonical = value
    elif isinstance(value, float):
        canonical = int(value) if value.is_integer() else value
    elif len(value) > 256:
        canonical = {"sha256": hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()}
    else:
        canonical = value
    return json.dumps([path, canonical], ensure_ascii=False, separators=(",", ":"))


def contract_equal(a, b) -> bool:
    """Equality of the filter semantics: a boolean only equals a boolean, numbers by value, strings
    only strings."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    return type(a) is type(b) and a == b


@settings(max_examples=300, deadline=None)
@given(path=st.text(min_size=1, max_size=40), value=scalars)
def test_a_term_is_the_json_of_path_and_canonical_value(path, value):
    assert value_term(path, value) == reference_term(path, value)
    assert json.loads(value_term(path, value))[0] == path


@settings(max_examples=300, deadline=None)
@given(a=scalars, b=scalars)
def test_equal_terms_exactly_for_equal_values(a, b):
    assert (value_term("k", a) == value_term("k", b)) == contract_equal(a, b)


def test_equal_terms_at_the_edges():
    assert value_term("k", 5) == value_term("k", 5.0) == value_term("k", -0.0 + 5)
    assert value_term("k", 0) == value_term("k", -0.0)
    assert value_term("k", 2**53 + 1) != value_term("k", float(2**53 + 1))  # 9007199254740993 != 9007199254740992.0
    assert len({value_term("k", v) for v in (1, True, "1", "true", 1.5)}) == 5
    long = "é" * 300  # hashed past 256 characters: fixed size, still exact
    assert value_term("k", long) != value_term("k", long[:-1] + "e") and len(value_term("k", long)) < 90


def test_paths_of_nested_objects_dotted_keys_and_lists():
    meta = {"a": {"b": [1, {"c": "x"}, [2, [3]]], "e": {}}, "a.b": 4, "n": None, "l": [], "t": (True,)}
    assert sorted(metadata_leaves(meta)) == [("a.b", 1), ("a.b", 2), ("a.b", 3), ("a.b", 4), ("a.b.c", "x"), ("t", True)]
    assert metadata_terms(meta) == sorted({value_term(p, v) for p, v in metadata_leaves(meta)})
    assert matches(meta, {"a.b": [3, 9], "a.b.c": "x"}) and not matches(meta, {"a": 1}) and not matches(meta, {"n": 0})
    assert compile_filter({}).matches({}) and not compile_filter({"x": []}).matches({"x": 1})


def _refused(metadata, match: str) -> None:
    with pytest.raises(InvalidDocumentError, match=match):
        check_metadata(metadata, "d")


def test_metadata_limits_at_their_boundaries():
    check_metadata({f"k{i}": i for i in range(MAX_KEYS)})
    _refused({f"k{i}": i for i in range(MAX_KEYS + 1)}, f"'k{MAX_KEYS}': over the limit of 1,000 keys")
    check_metadata({"v": list(range(MAX_VALUES))})
    _refused({"v": list(range(MAX_VALUES)), "w": None}, "'w': over the limit of 10,000 values")
    deep: object = 1
    for _ in range(MAX_DEPTH - 1):
        deep = [deep]
    check_metadata({"a": deep})  # 1 inside the metadata object and 7 lists: 8 levels
    _refused({"a": [deep]}, "'a': nested 9 levels deep, over the limit of 8")
    check_metadata({"k" * MAX_KEY_LENGTH: 1})
    _refused({"k" * (MAX_KEY_LENGTH + 1): 1}, "a key of 257 characters")
    check_metadata({"a" * 256: {"b" * 256: {"c" * 256: {"d" * 253: 1}}}})  # 1,024 characters
    _refused({"a" * 256: {"b" * 256: {"c" * 256: {"d" * 254: 1}}}}, "a path .* of 1025 characters")
    _refused({"a": {"": 1}}, "'a.': a key must not be empty")
    _refused({"a": {2: 1}}, "metadata key 2 under 'a': a key must be a string")
    _refused({"a": float("inf")}, "'a': inf is not a JSON number")
    _refused({"a": [b"x"]}, "'a': a bytes is not a JSON value")
    _refused(["not", "an", "object"], "'metadata' must be an object")
    check_metadata({"a.b": {"c.d": [None, True, 1.5, "x" * 100_000, {}]}})  # dotted keys, long strings: fine


def test_filter_limits_at_their_boundaries():
    assert check_filter({"a": 1, "b": [1, "x", True]}) == {"a": [1], "b": [1, "x", True]}
    check_filter({f"f{i}": 1 for i in range(MAX_FILTER_FIELDS)})
    check_filter({"y": list(range(MAX_FILTER_VALUES)), "p" * MAX_PATH_LENGTH: "x"})
    for flt, match in (({f"f{i}": 1 for i in range(MAX_FILTER_FIELDS + 1)}, "17 fields, over the limit of 16"),
                       ({"y": list(range(MAX_FILTER_VALUES + 1))}, "'y': 1,001 values, over the limit of 1,000"),
                       ({"p" * (MAX_PATH_LENGTH + 1): 1}, "1025 characters, over the limit of 1,024"),
                       ({"y": None}, "'y': null matches nothing"), ({"y": [1, None]}, "'y': null"),
                       ({"y": {"a": 1}}, "dotted path"), ({"y": float("nan")}, "'y': nan is not a finite number"),
                       ({"": 1}, "non-empty"), ({3: 1}, "field 3"), ([("y", 1)], "expected an object")):
        with pytest.raises(InvalidInputError, match=match):
            check_filter(flt)
