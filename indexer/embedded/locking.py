"""The lock file ``.lock`` of a store directory (``fcntl.flock``).

Several processes may open one store: writers serialise on the lock file (exclusive), a reader
holds it shared while it reloads, and every operation first checks the store's generation counter
and reloads its in-memory view when another process changed the store (see
:class:`~sdr_search.indexer.embedded.store.EmbeddedStore`). Within a process, one store object is safe to
share between threads: its operations are serialised by a mutex, which must be held around
:meth:`DirectoryLock.hold`.
"""

from __future__ import annotations

import fcntl
import logging
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from sdr_search.core.errors import StoreError

__all__ = ["LOCK", "DirectoryLock"]

logger = logging.getLogger(__package__)  # "sdr_search.indexer.embedded", one logger for the whole store

LOCK = ".lock"


class DirectoryLock:
    """The lock of the store directory ``directory``; re-entrant within this object.

    A read-only store opens the lock file read-only and never creates it (a store without one is
    read without locking).
    """

    def __init__(self, directory: Path, read_only: bool) -> None:
        self.directory = directory
        self.read_only = read_only
        self._fd: int | None = None
        self._mode: int | None = None

    def open(self) -> None:
        """Open (a writer: create) the lock file, once."""
        if self._fd is not None:
            return
        lock = self.directory / LOCK
        try:
            self._fd = os.open(lock, os.O_RDONLY if self.read_only else os.O_RDWR | os.O_CREAT, 0o644)
        except FileNotFoundError:
            logger.warning("store %s has no lock file; reading without locking", self.directory)
        except OSError as e:
            raise StoreError(f"cannot open the lock file {lock}: {e}") from e

    @contextmanager
    def hold(self, mode: int) -> Iterator[None]:
        """Hold the directory lock in ``mode`` (``fcntl.LOCK_SH`` or ``LOCK_EX``; re-entrant within
        this object; the store's mutex must be held)."""
        if self._mode is not None or self._fd is None:
            if self._mode == fcntl.LOCK_SH and mode == fcntl.LOCK_EX:
                raise StoreError("internal error: exclusive lock requested under a shared lock")
            yield
            return
        fcntl.flock(self._fd, mode)
        self._mode = mode
        try:
            yield
        finally:
            self._mode = None
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        """Close the lock file (any lock held through it is released)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
