"""NDJSON read whole from bytes: one JSON object per line, blank lines skipped, a bad line refused
with its number. The one reader of the HTTP bulk body (:mod:`sdr_search.reranker.service.writes`)
and of the Dashboards saved objects (:mod:`sdr_search.indexer.dashboards`). Document files
(``.jsonl``) are streamed by :mod:`sdr_search.core.documents`, which skips a bad line and goes on."""

from __future__ import annotations

import json
from typing import Any, Callable, Iterator

from .errors import InvalidInputError

__all__ = ["ndjson_objects"]


def ndjson_objects(raw: bytes, *, name: str, line: Callable[[int], str]) -> Iterator[tuple[int, dict[str, Any]]]:
    """The objects of ``raw`` with their line numbers (from 1), in order; blank lines are skipped.

    Raises :class:`InvalidInputError`, when the iteration reaches it, for bytes that are not UTF-8
    (``"<name> is not UTF-8 (byte <offset>)"``, before any object) and for a line that is not JSON
    (an integer of over 4,300 digits and nesting too deep included) or not a JSON object:
    ``"<line(n)>: invalid JSON (...)"``, ``"<line(n)>: expected a JSON object"``. A caller checks each
    object as it comes, so the first bad line is the one reported. An input without an object yields
    nothing: what an empty input means is the caller's to say."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InvalidInputError(f"{name} is not UTF-8 (byte {e.start})") from e
    for n, text_line in enumerate(text.splitlines(), 1):
        if not text_line.strip():
            continue
        try:
            obj = json.loads(text_line)
        except json.JSONDecodeError as e:
            raise InvalidInputError(f"{line(n)}: invalid JSON ({e.msg})") from e
        except (ValueError, RecursionError) as e:  # an integer of > 4300 digits, nesting too deep
            raise InvalidInputError(f"{line(n)}: invalid JSON ({e})") from e
        if not isinstance(obj, dict):
            raise InvalidInputError(f"{line(n)}: expected a JSON object")
        yield n, obj
