"""A request's deadline, carried to every store request made on its behalf.

The HTTP service gives each read (more like this, a document, a search for a source) a deadline
(``SDR_SERVICE_REQUEST_TIMEOUT_S``) and runs it inside :func:`within`. Everything below reads it
from a context variable instead of taking it as an argument: the OpenSearch store's connection cuts
each request's socket timeout to the time left and refuses to send one past it, the one retry policy
(:mod:`.retry`) does not sleep past it, and the engine checks it between stages. So a hung node (a
long GC pause, a frozen process) costs a call its deadline, not the store's timeout once per node and
per retry, and the worker thread is free again when the caller is answered. Outside :func:`within`
there is no deadline and nothing changes.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Iterator

from .errors import DeadlineExceededError

__all__ = ["within", "at", "remaining", "check", "cap", "message"]

_REQUEST = "SDR_SERVICE_REQUEST_TIMEOUT_S"
# (monotonic end, the seconds it stands for, the setting that gave them)
_DEADLINE: ContextVar[tuple[float, float, str] | None] = ContextVar("sdr_deadline", default=None)


@contextmanager
def within(seconds: float | None, setting: str = _REQUEST) -> Iterator[None]:
    """Run the body with a deadline ``seconds`` from now (None or <= 0: none; an outer, earlier deadline
    stays the one that counts); ``setting`` (named in the error) is where the seconds come from."""
    with at(None if not seconds or seconds <= 0 else time.monotonic() + seconds, seconds or 0.0, setting):
        yield


@contextmanager
def at(end: float | None, seconds: float, setting: str = _REQUEST) -> Iterator[None]:
    """Run the body with the deadline ``end`` (``time.monotonic()`` clock; ``seconds`` is the budget it
    stands for, named in the error). For a worker thread, which does not inherit the caller's context."""
    outer = _DEADLINE.get()
    if end is None or (outer is not None and outer[0] <= end):
        token = None
    else:
        token = _DEADLINE.set((end, seconds, setting))
    try:
        yield
    finally:
        if token is not None:
            _DEADLINE.reset(token)


def remaining() -> float | None:
    """Seconds left before the deadline (may be <= 0), or None when there is none."""
    current = _DEADLINE.get()
    return None if current is None else current[0] - time.monotonic()


def check(what: str) -> None:
    """Raise :class:`DeadlineExceededError` naming ``what`` when the deadline has passed."""
    current = _DEADLINE.get()
    if current is not None and time.monotonic() >= current[0]:
        raise DeadlineExceededError(_message(what, current[1], current[2]))


def cap(timeout: float | None, what: str) -> tuple[float | None, bool]:
    """``(timeout cut to the time left, whether the deadline cut it)``; raises
    :class:`DeadlineExceededError` when no time is left."""
    current = _DEADLINE.get()
    if current is None:
        return timeout, False
    left = current[0] - time.monotonic()
    if left <= 0:
        raise DeadlineExceededError(_message(what, current[1], current[2]))
    if timeout is None or left < timeout:
        return left, True
    return timeout, False


def message(what: str, seconds: float | None = None) -> str:
    """The error message for ``what`` under the current deadline (or one of ``seconds``)."""
    current = _DEADLINE.get()
    if seconds is not None or current is None:
        return _message(what, seconds or 0.0, _REQUEST)
    return _message(what, current[1], current[2])


def _message(what: str, seconds: float, setting: str) -> str:
    return (f"no answer within the request's deadline of {seconds:g} s ({setting}) while "
            f"{what}; a node of the cluster may be hung or overloaded: retry later")
