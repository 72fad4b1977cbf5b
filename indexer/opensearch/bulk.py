"""The bulk write loop: chunking, item-level error handling, 429 retries with backoff.

Modelled on opensearch-py's ``helpers.streaming_bulk`` (``helpers/actions.py``): actions are sent
in chunks bounded by count and bytes; each response is read item by item
(:func:`~sdr_search.indexer.opensearch.requests.process_bulk_response`); only items rejected with 429 (and
whole requests answered 429) are sent again, after ``initial * 2**attempt`` seconds (capped);
any other item error fails at once. Unlike ``streaming_bulk`` the failures become one domain
error, :class:`~sdr_search.core.errors.BulkWriteError`, naming every document that was not written.

The loop does no I/O itself: ``send`` posts one NDJSON body and returns the parsed response (it
raises :class:`~sdr_search.core.errors.OverloadedError` for a request-level 429), ``sleep`` waits.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, Mapping, Sequence

from sdr_search.core.errors import BulkWriteError, OverloadedError

from .requests import backoff_delay, chunk_by_size, process_bulk_response, should_retry

__all__ = ["run_bulk"]

logger = logging.getLogger(__name__)


def run_bulk(
    send: Callable[[bytes], Mapping[str, Any]],
    lines: Sequence[bytes],
    keys: Sequence[str],
    *,
    what: str,
    max_items: int,
    max_bytes: int,
    max_retries: int,
    initial_backoff: float,
    max_backoff: float,
    accept: Sequence[int] = (),
    sleep: Callable[[float], None] = time.sleep,
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
        pending = list(chunk)
        failed: dict[str, str] = {}
        attempt = 0
        while pending:
            try:
                response = send(b"".join(lines[i] for i in pending))
            except OverloadedError as e:  # the whole request was answered 429
                if not should_retry(429, attempt, max_retries):
                    failed.update({keys[i]: f"429 rejected after {attempt} retries: {e}" for i in pending})
                    break
                retry_positions: Sequence[int] = range(len(pending))
            else:
                outcome = process_bulk_response(response, [keys[i] for i in pending], accept=accept)
                results.update(outcome.results)
                failed.update(outcome.failed)
                retry_positions = outcome.retry
                if retry_positions and not should_retry(429, attempt, max_retries):
                    failed.update({keys[pending[p]]: f"429 rejected after {attempt} retries" for p in retry_positions})
                    break
            pending = [pending[p] for p in retry_positions]
            if pending:
                delay = backoff_delay(attempt, initial=initial_backoff, maximum=max_backoff)
                logger.warning("%s: %d action(s) rejected with 429; retry %d in %.1f s",
                               what, len(pending), attempt + 1, delay)
                sleep(delay)
                attempt += 1
        if failed:
            later = [keys[i] for rest in chunks[c + 1 :] for i in rest]
            failed.update({k: "not attempted (an earlier chunk failed)" for k in later})
            raise BulkWriteError(what, failed)
    return results
