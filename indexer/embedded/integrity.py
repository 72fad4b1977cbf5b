"""Telling a damaged embedded store from a working one.

A store whose files were overwritten or cut short must say so, once and clearly, instead of
answering some calls and failing others with a trace: :func:`guard` turns the errors that mean
damage (SQLite's "malformed" and "not a database", a stored value that no longer parses, a vector
file shorter than its rows) into one :class:`StoreDamagedError` naming the store and the file, and
the store keeps that verdict (a later call fails at once with the same message). :func:`quick_check`
is the thorough check ``sdr info``, ``sdr serve`` and ``/health`` run: SQLite's ``quick_check``
over every page, which the sticky verdict then remembers.
"""

from __future__ import annotations

import functools
import inspect
import json
import sqlite3
from pathlib import Path
from typing import Any, Callable, Iterable

from sdr_search.core.errors import StoreDamagedError

__all__ = ["is_damage", "damaged", "guard", "quick_check"]

_DAMAGE_CODES = ("SQLITE_CORRUPT", "SQLITE_NOTADB")

ADVICE = "restore the store from a copy, or build it again (sdr index / sdr reindex)"


def is_damage(exc: BaseException) -> bool:
    """Whether ``exc`` means the store's files are damaged (not a lock, a full disk or a bug)."""
    if isinstance(exc, StoreDamagedError):
        return True
    if isinstance(exc, sqlite3.DatabaseError):
        name = getattr(exc, "sqlite_errorname", "") or ""
        if name.startswith(_DAMAGE_CODES):
            return True
        text = str(exc)
        return "malformed" in text or "not a database" in text
    return isinstance(exc, (json.JSONDecodeError, UnicodeDecodeError))


def damaged(directory: Path, file: str, cause: BaseException | str) -> StoreDamagedError:
    reason = cause if isinstance(cause, str) else (str(cause) or type(cause).__name__)
    return StoreDamagedError(f"store {directory} is damaged: {file}: {reason}; {ADVICE}")


def quick_check(conn: sqlite3.Connection, limit: int = 5) -> list[str]:
    """SQLite's ``PRAGMA quick_check``: every page read and checked (no index cross-check); the
    problems it lists (at most ``limit``), empty when the database is sound."""
    rows = [r[0] for r in conn.execute(f"PRAGMA quick_check({int(limit)})")]
    return [] if rows == ["ok"] else rows


def guard(names: Iterable[str]) -> Callable[[type], type]:
    """A class decorator: the methods ``names`` of a store turn damage (:func:`is_damage`) into
    :class:`StoreDamagedError` and record it on the instance (``_damage``); once recorded, every
    guarded call raises it at once. The class provides ``path`` and ``_damage``."""

    def wrap(cls: type) -> type:
        for name in names:
            setattr(cls, name, _guarded(getattr(cls, name)))
        return cls

    return wrap


def _verdict(store: Any, exc: BaseException) -> StoreDamagedError:
    if isinstance(exc, StoreDamagedError):
        found = exc
    elif isinstance(exc, sqlite3.DatabaseError):
        found = damaged(store.path, "store.sqlite", exc)
    else:
        found = damaged(store.path, "store.sqlite", f"a stored value cannot be read ({type(exc).__name__}: {exc})")
    if store._damage is None:
        store._damage = found
    return found


def _guarded(method: Callable[..., Any]) -> Callable[..., Any]:
    if inspect.isgeneratorfunction(method):
        @functools.wraps(method)
        def generator(self: Any, *args: Any, **kwargs: Any) -> Any:
            if self._damage is not None:
                raise StoreDamagedError(str(self._damage))
            try:
                yield from method(self, *args, **kwargs)
            except Exception as e:
                if not is_damage(e):
                    raise
                raise _verdict(self, e) from e

        return generator

    @functools.wraps(method)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        if self._damage is not None:
            raise StoreDamagedError(str(self._damage))
        try:
            return method(self, *args, **kwargs)
        except Exception as e:
            if not is_damage(e):
                raise
            raise _verdict(self, e) from e

    return call
