"""Building a new index next to the live one and switching readers over atomically.

Embedded stores: the live name ``DIR`` is a symbolic link to a concrete directory
``DIR-<timestamp>``. A reindex builds a new concrete directory beside it, then creates a temporary
link to it and renames that link over ``DIR`` (``os.replace``: one atomic ``rename(2)``), so a
process that resolves ``DIR`` gets the old store or the new one, never a half-built one. The first
reindex of a store that is a plain directory exchanges it with the link in one
``renameat2(RENAME_EXCHANGE)`` where the kernel offers it (Linux >= 3.15), else in two renames
(a window of microseconds where ``DIR`` does not exist, logged). The previous directory is kept
(readers may still have it open); delete it when they are gone.

OpenSearch: a new concrete index ``ALIAS-<timestamp>``, then one ``_aliases`` request moves the
alias from the old indices to it.

Resuming: the target name is recorded in a small JSON state file before any work starts; a
re-run finds it and continues into the same target (documents already there are skipped by
content key). The file is removed after the switch.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import hashlib
import json
import logging
import os
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from sdr_search.core.errors import InvalidInputError, StoreError

__all__ = [
    "ReindexState",
    "timestamped_name",
    "embedded_state_path",
    "opensearch_state_path",
    "switch_symlink",
    "swap_opensearch_alias",
]

logger = logging.getLogger(__name__)

STATE_VERSION = 1


def timestamped_name(base: str, now: datetime | None = None) -> str:
    """``base-YYYYmmdd-HHMMSS`` (UTC; lower case and digits, valid for OpenSearch index names)."""
    now = now or datetime.now(timezone.utc)
    return f"{base}-{now:%Y%m%d-%H%M%S}"


@dataclass
class ReindexState:
    """What a reindex records before it starts: where it writes, so a re-run continues there."""

    target: str  # embedded: absolute directory; opensearch: concrete index name
    live: str  # embedded: the link path; opensearch: the alias
    kind: str
    started_at: str
    inputs: list[str]
    version: int = STATE_VERSION

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + f".tmp-{os.getpid()}")
        tmp.write_text(json.dumps(asdict(self), indent=1) + "\n", encoding="utf-8")
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: Path) -> "ReindexState | None":
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as e:
            raise StoreError(f"cannot read the reindex state file {path}: {e} (delete it to start over)") from e
        if not isinstance(data, dict) or data.get("version") != STATE_VERSION:
            raise StoreError(f"{path} is not a reindex state file of this version (delete it to start over)")
        return cls(**{k: data[k] for k in ("target", "live", "kind", "started_at", "inputs")})


def embedded_state_path(link: Path) -> Path:
    return link.parent / f".{link.name}.reindex.json"


def opensearch_state_path(cache_dir: Path, url: str, alias: str) -> Path:
    digest = hashlib.sha256(url.rstrip("/").encode("utf-8")).hexdigest()[:12]
    return cache_dir / "reindex" / f"{alias}@{digest}.json"


# =============================================================================================
# embedded: symlink switch
# =============================================================================================
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> bool:
    """Atomically exchange two paths (Linux ``renameat2``); False where unsupported."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    libc = ctypes.CDLL(name, use_errno=True)
    fn = getattr(libc, "renameat2", None)
    if fn is None:
        return False
    rc = fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    if rc == 0:
        return True
    err = ctypes.get_errno()
    logger.debug("renameat2(RENAME_EXCHANGE) failed: %s", os.strerror(err))
    return False


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def switch_symlink(link: Path, target: Path, *, now: datetime | None = None) -> Path | None:
    """Make ``link`` a symlink to ``target`` atomically; returns the directory it named before
    (None if it did not exist). A plain directory at ``link`` is kept as ``<link>-<ts>-orig``."""
    link = Path(link)
    target = Path(target)
    if not target.is_dir():
        raise StoreError(f"cannot switch {link} to {target}: not a directory")
    if link.exists() and link.resolve() == target.resolve():
        raise StoreError(f"{link} already is {target}: a reindex must build a new directory")
    parent = link.parent
    tmp = parent / f".{link.name}.switch-{os.getpid()}"
    if tmp.is_symlink() or tmp.exists():
        tmp.unlink()
    os.symlink(os.path.relpath(target, parent), tmp)
    previous: Path | None = None
    try:
        if link.is_symlink():
            previous = (parent / os.readlink(link)).resolve()
            os.replace(tmp, link)
        elif not link.exists():
            os.replace(tmp, link)
        elif link.is_dir():
            kept = parent / (timestamped_name(link.name, now) + "-orig")
            if _exchange(tmp, link):  # link is now the symlink; tmp the old directory
                os.rename(tmp, kept)
            else:
                logger.warning("atomic exchange unavailable: %s is missing for an instant while it becomes a link", link)
                os.rename(link, kept)
                os.replace(tmp, link)
            previous = kept
        else:
            raise StoreError(f"{link} exists and is neither a directory nor a symbolic link")
    finally:
        if tmp.is_symlink():
            tmp.unlink()
    _fsync_dir(parent)
    return previous


# =============================================================================================
# opensearch: alias swap
# =============================================================================================
def swap_opensearch_alias(url: str, alias: str, new_index: str, settings: Any = None) -> str | None:
    """Point ``alias`` at ``new_index`` only, in one ``_aliases`` request (the backend's
    :meth:`~sdr_search.indexer.opensearch.OpenSearchStore.point_alias`); returns the index it named before.

    Raises :class:`InvalidInputError` when ``alias`` is a concrete index (an index built by
    ``sdr index --index NAME``): OpenSearch cannot give an alias the name of an index.
    """
    from sdr_search.indexer.opensearch import OpenSearchSettings, OpenSearchStore

    settings = settings or OpenSearchSettings()
    with OpenSearchStore(url, index=alias, settings=settings) as live:
        try:
            previous = live.index_name
        except StoreError as e:  # an alias over several indices: point_alias moves it off all of them
            logger.warning("%s", e)
            previous = None
    if previous == alias:
        raise InvalidInputError(
            f"{alias!r} is a concrete index, not an alias, so it cannot be switched; reindex under a new alias "
            f"name, or delete the index {alias!r} first (the new index {new_index!r} is kept)"
        )
    with OpenSearchStore(url, index=new_index, settings=settings) as new:
        new.point_alias(alias)
    return previous
