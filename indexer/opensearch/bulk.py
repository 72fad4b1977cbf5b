"""The bulk write loop: chunking, item-level error handling, 429 retries with backoff.

Actions are sent in chunks bounded by count and bytes; each response is read item by item
(:func:`~sdr_search.indexer.opensearch.requests.process_bulk_response`); only items rejected with 429 (and
whole requests answered 429) are sent again, with the one retry policy
(:func:`~sdr_search.core.retry.retry_call` and its :class:`~sdr_search.core.retry.Backoff`); any
other item error fails at once. The failures become one domain error,
:class:`~sdr_search.core.errors.BulkWriteError`, naming every document that was not written.
opensearch-py's ``helpers.streaming_bulk`` is not used: docs/design.md says why.

The loop does no I/O itself: ``send`` posts one NDJSON body and returns the parsed response (it
raises :class:`~sdr_search.core.errors.OverloadedError` for a request-level 429), ``sleep`` waits.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Mapping, Sequence

from sdr_search.core.errors import BulkWriteError, OverloadedError
from sdr_search.core.retry import Backoff, retry_call

from .requests import chunk_by_size, process_bulk_response

__all__ = ["run_bulk"]

logger = logging.getLogger(__name__)


class _Rejected(Exception):
    """Actions rejected with 429, to send again (the retry condition of :func:`run_bulk`)."""


def run_bulk(
    send: Callable[[bytes], Mapping[str, Any]],
    lines: Sequence[bytes],
    keys: Sequence[str],
    *,
    what: str,
    max_items: int,
    max_bytes: int,
    backoff: Backoff,
    accept: Sequence[int] = (),
    sleep: Callable[[float], None] | None = None,
) -> dict[str, str]:
    """Send the actions ``lines`` (from :func:`~sdr_search.indexer.opensearch.requests.bulk_lines`),
    named ``keys``; return ``key -> result`` for every action written.

    Raises :class:`BulkWriteError` after the first chunk with a failure; ``failed`` then names
    every document not written, including those of later chunks, which are not attempted (a
    write is idempotent: sending the whole batch again is safe).
    """
    if len(lines) != len(keys):
        raise ValueError("one key per action is required")
    results: dict[str, str] = {}
    chunks = chunk_by_size([len(b) for b in lines], max_items=max_items, max_bytes=max_bytes)
    for c, chunk in enumerate(chunks):
        failed = _write_chunk(send, [lines[i] for i in chunk], [keys[i] for i in chunk], results, what=what,
                              backoff=backoff, accept=accept, sleep=sleep)
        if failed:
            later = [keys[i] for rest in chunks[c + 1 :] for i in rest]
            failed.update({k: "not attempted (an earlier chunk failed)" for k in later})
            raise BulkWriteError(what, failed)
    return results


def _write_chunk(send: Callable[[bytes], Mapping[str, Any]], lines: Sequence[bytes], keys: Sequence[str],
                 results: dict[str, str], *, what: str, backoff: Backoff, accept: Sequence[int],
                 sleep: Callable[[float], None] | None) -> dict[str, str]:
    """One request of ``lines``, then of those rejected with 429 while the policy allows; adds the
    written actions to ``results`` and returns ``key -> error`` for the others."""
    failed: dict[str, str] = {}
    pending = list(range(len(lines)))

    def attempt() -> None:
        nonlocal pending
        try:
            response = send(b"".join(lines[i] for i in pending))
        except OverloadedError as e:  # the whole request was answered 429
            raise _Rejected(f"{len(pending)} action(s) rejected with 429 (the whole request: {e})") from e
        outcome = process_bulk_response(response, [keys[i] for i in pending], accept=accept)
        results.update(outcome.results)
        failed.update(outcome.failed)
        pending = [pending[p] for p in outcome.retry]
        if pending:
            raise _Rejected(f"{len(pending)} action(s) rejected with 429")

    try:
        retry_call(attempt, backoff=backoff, retry_if=lambda e: isinstance(e, _Rejected), what=what, sleep=sleep,
                   log=logger)
    except _Rejected as e:
        why = f"429 rejected after {backoff.max_retries} retries" + (f": {e.__cause__}" if e.__cause__ else "")
        failed.update({keys[i]: why for i in pending})
    return failed
