"""NDJSON read whole from bytes (sdr_search.core.ndjson): the one reader of the HTTP bulk body and
of the Dashboards saved objects."""

from __future__ import annotations

import pytest

from sdr_search.core.errors import InvalidInputError
from sdr_search.core.ndjson import ndjson_objects

pytestmark = pytest.mark.unit


def _read(raw: bytes) -> list:
    return list(ndjson_objects(raw, name="the body", line=lambda n: f"line {n}"))


def test_objects_come_with_their_line_numbers_and_blank_lines_are_skipped():
    raw = b'{"a": 1}\n\n   \n{"b": [1, {"c": null}]}\r\n{"d": "\xc3\xa9"}'
    assert _read(raw) == [(1, {"a": 1}), (4, {"b": [1, {"c": None}]}), (5, {"d": "é"})]
    assert _read(b"") == [] and _read(b"\n \n") == []  # what an empty input means is the caller's to say


@pytest.mark.parametrize("raw, message", [
    (b'{"a": 1}\n\xff{"b": 2}\n', "the body is not UTF-8 (byte 9)"),
    (b'{"a": 1}\n\n{oops\n', "line 3: invalid JSON (Expecting property name enclosed in double quotes)"),
    (b'{"a": 1}\n[1, 2]\n', "line 2: expected a JSON object"),
    (b'"text"\n', "line 1: expected a JSON object"),
    (b'{"n": ' + b"1" * 5000 + b"}\n", "line 1: invalid JSON (Exceeds the limit (4300 digits)"),
    (b"[" * 100_000 + b"\n", "line 1: invalid JSON (maximum recursion depth exceeded"),
])
def test_a_bad_input_is_refused_naming_its_line(raw, message):
    with pytest.raises(InvalidInputError) as e:
        _read(raw)
    assert str(e.value).startswith(message), str(e.value)


def test_objects_before_the_bad_line_reach_the_caller_first():
    """Lazy: a caller that checks each object as it comes reports the first bad line, its own check
    or the reader's."""
    seen = []
    with pytest.raises(InvalidInputError, match="line 3"):
        for n, obj in ndjson_objects(b'{"a": 1}\n{"b": 2}\nnot json\n', name="x", line=lambda n: f"line {n}"):
            seen.append((n, obj))
    assert seen == [(1, {"a": 1}), (2, {"b": 2})]
