"""Durability of the store directory's files: fsync a file's bytes or a directory's entries."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["fsync_path"]


def fsync_path(path: Path) -> None:
    """fsync ``path``: a file's contents, or, for a directory, the renames and file creations in it."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
