"""The one retry policy: exponential backoff, capped, for every retry loop of sdr-search (the
OpenSearch store's requests, its bulk writes' rejected items, the workers' tasks), on tenacity.

A retry waits ``initial * 2**attempt`` seconds before retry number ``attempt + 1``, at most
``maximum``; no jitter (the delays are predictable, and the few concurrent writers of one index do
not synchronise). Celery tasks pass :meth:`Backoff.delay` as ``self.retry``'s countdown: Celery's
own ``autoretry_for``/``retry_backoff`` would round the factor to a whole number of seconds, at
least 1 (``int(max(1.0, retry_backoff))`` in ``celery/app/autoretry.py``).

Inside a request's deadline (:mod:`.deadline`) no retry waits past it: the last error is raised instead.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable, TypeVar

from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt

from . import deadline

__all__ = ["Backoff", "retry_call"]

T = TypeVar("T")

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Backoff:
    """``max_retries`` retries, waiting ``initial * 2**attempt`` seconds before each (capped at
    ``maximum``)."""

    max_retries: int
    initial: float
    maximum: float

    def delay(self, attempt: int) -> float:
        """Seconds to wait before retry number ``attempt + 1`` (``attempt`` counts from 0)."""
        return float(min(self.maximum, self.initial * (2 ** max(0, attempt))))


def retry_call(
    fn: Callable[[], T],
    *,
    backoff: Backoff,
    retry_if: Callable[[BaseException], bool],
    what: str,
    sleep: Callable[[float], None] | None = None,
    log: logging.Logger | None = None,
) -> T:
    """``fn()``, called again after :class:`Backoff`'s delays while it raises an exception that
    ``retry_if`` accepts, at most ``backoff.max_retries`` times; then (or for any other exception)
    the exception is raised as it is (also when the next delay would end past the request's deadline,
    :mod:`.deadline`). Each retry is logged as a warning naming ``what``, on ``log``
    (the caller's logger; this module's by default)."""
    log = log or logger

    def wait(state: RetryCallState) -> float:
        return backoff.delay(state.attempt_number - 1)

    def before_sleep(state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome is not None else None
        log.warning("%s: %s; retry %d of %d in %.1f s", what, error, state.attempt_number, backoff.max_retries,
                       state.next_action.sleep if state.next_action is not None else 0.0)

    options: dict[str, Any] = {}
    if sleep is not None:
        options["sleep"] = sleep
    attempts = stop_after_attempt(backoff.max_retries + 1)

    def stop(state: RetryCallState) -> bool:
        left = deadline.remaining()
        return attempts(state) or (left is not None and backoff.delay(state.attempt_number - 1) >= left)

    retrying = Retrying(stop=stop, wait=wait,
                        retry=retry_if_exception(retry_if), before_sleep=before_sleep, reraise=True, **options)
    return retrying(fn)
