"""The embedded store's lexical index: BM25 (:class:`sdr_search.core.lexical.BM25Ranker`, bm25s, the
same ranker as ``sdr eval --method bm25``) over every live document's text, kept in the store
directory as ``lexical-<fingerprint>/``.

Freshness: the index is tagged with a *fingerprint* of what it covers: SHA-256 over every live
document's ``(doc_id, content_key, title)`` in ``seq`` order and the ranker's settings. The store
recomputes the fingerprint when its generation counter moved (any committed change; statistics
refreshes do not change the fingerprint, so they cause no rebuild), and a search with a
fingerprint that no index on disk carries rebuilds the index from the catalogue (read in the same
snapshot as the fingerprint). bm25s has no incremental update, so every ``put``/``delete``
invalidates the whole index: the first lexical search afterwards pays a full rebuild (mostly
tokenising every text; ``sdr index`` builds it at the end so queries do not). A store under
constant writes is better served by OpenSearch, whose inverted index is incremental.

Crash safety: an index is written into ``lexical-<fp>.tmp-<pid>-<random>/``, every file and the
directory are fsynced, and the directory is renamed to ``lexical-<fp>`` (one rename). A crash
leaves at most a temp directory, removed by the next build once its process is gone; indexes for
other fingerprints are removed after a successful build. Two processes that build the same
fingerprint race harmlessly: the second rename fails and its copy is dropped. A read-only store
builds in memory only.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import secrets
import shutil
import threading
import time
from pathlib import Path
from typing import Callable, Iterable, Sequence

from sdr_search.core.documents import Document
from sdr_search.core.lexical import BM25Ranker

from .durable import fsync_path

__all__ = ["LEXICAL_PREFIX", "fingerprint", "document_texts", "LexicalIndex"]

logger = logging.getLogger(__package__)  # "sdr_search.indexer.embedded", one logger for the whole store

LEXICAL_PREFIX = "lexical-"
_TMP = ".tmp-"


def fingerprint(rows: Iterable[tuple[str, str, str | None]], params: dict) -> str:
    """SHA-256 (hex) of the documents ``(doc_id, content_key, title)`` in order and the ranker
    ``params``: equal fingerprints mean equal BM25 indexes."""
    h = hashlib.sha256(json.dumps(params, sort_keys=True).encode("utf-8"))
    for doc_id, key, title in rows:
        h.update(b"\x1d")
        h.update(doc_id.encode("utf-8"))
        h.update(b"\x1e")
        h.update(key.encode("utf-8"))
        h.update(b"\x1e")
        h.update((title or "").encode("utf-8"))
        h.update(b"\x1f" if title is None else b"\x1e")
    return h.hexdigest()


def document_texts(rows: Iterable[tuple[str, str | None, str]]) -> tuple[list[str], list[str]]:
    """Ids and texts (:attr:`Document.text`: title and paragraphs) of catalogue rows
    ``(doc_id, title, paragraphs JSON)``."""
    ids: list[str] = []
    texts: list[str] = []
    for doc_id, title, paragraphs in rows:
        doc = Document(doc_id, tuple(tuple(p) for p in json.loads(paragraphs)), title)
        ids.append(doc_id)
        texts.append(doc.text)
    return ids, texts


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _fsync_tree(directory: Path) -> None:
    for f in directory.iterdir():
        if f.is_file():
            fsync_path(f)
    fsync_path(directory)


class LexicalIndex:
    """The lexical index of the store directory ``directory`` (see the module docstring).

    :meth:`ranker` returns the BM25 ranker for a fingerprint: the one in memory, the one saved on
    disk, or a new one built from ``read_texts()``. The caller serialises calls (one lock).
    """

    def __init__(self, directory: Path, *, read_only: bool, make_ranker: Callable[[], BM25Ranker] = BM25Ranker) -> None:
        self.directory = directory
        self.read_only = read_only
        self.lock = threading.Lock()
        self.make_ranker = make_ranker
        self.generation: int | None = None  # store generation the in-memory ranker was checked at
        self._fingerprint: str | None = None
        self._ranker: BM25Ranker | None = None
        self._params: dict | None = None

    @property
    def params(self) -> dict:
        """The settings of the rankers this index builds (part of the fingerprint)."""
        if self._params is None:
            self._params = self.make_ranker().params
        return self._params

    def path_for(self, fp: str) -> Path:
        return self.directory / f"{LEXICAL_PREFIX}{fp[:24]}"

    def current(self, generation: int) -> BM25Ranker | None:
        """The in-memory ranker if it was checked at store ``generation``."""
        return self._ranker if self._ranker is not None and self.generation == generation else None

    def has(self, fp: str) -> bool:
        return self._ranker is not None and self._fingerprint == fp

    def ranker(self, fp: str, generation: int, read_texts: Callable[[], tuple[Sequence[str], Sequence[str]]]) -> BM25Ranker:
        """The ranker for fingerprint ``fp`` (in memory, else loaded, else built and saved)."""
        if not self.has(fp):
            ranker = self._load(fp)
            if ranker is None:
                ids, texts = read_texts()
                ranker = self._build(fp, ids, texts)
            self._ranker, self._fingerprint = ranker, fp
        self.generation = generation
        assert self._ranker is not None
        return self._ranker

    def forget(self) -> None:
        self._ranker = self._fingerprint = self.generation = None

    # -- disk ---------------------------------------------------------------------------------
    def _load(self, fp: str) -> BM25Ranker | None:
        path = self.path_for(fp)
        if not path.is_dir():
            return None
        try:
            ranker = BM25Ranker.load(path)
        except ValueError as e:
            logger.warning("store %s: lexical index %s unreadable (%s); rebuilding it", self.directory, path.name, e)
            self._discard(path)
            return None
        if ranker.params != self.params:
            logger.info("store %s: lexical index %s has other BM25 settings; rebuilding it", self.directory, path.name)
            self._discard(path)
            return None
        logger.debug("store %s: loaded lexical index %s (%d documents)", self.directory, path.name, len(ranker.ids))
        return ranker

    def _discard(self, path: Path) -> None:
        """Remove an unusable saved index (so the rebuilt one can take its name)."""
        if not self.read_only:
            shutil.rmtree(path, ignore_errors=True)

    def _build(self, fp: str, ids: Sequence[str], texts: Sequence[str]) -> BM25Ranker:
        t0 = time.perf_counter()
        ranker = self.make_ranker().fit(ids, texts)
        logger.info("store %s: built the lexical index over %d documents in %.1f s",
                    self.directory, len(ids), time.perf_counter() - t0)
        if not self.read_only:
            try:
                self._save(fp, ranker)
            except OSError as e:  # the index still serves from memory; the next process rebuilds it
                logger.warning("store %s: could not save the lexical index (%s)", self.directory, e)
        return ranker

    def _save(self, fp: str, ranker: BM25Ranker) -> None:
        final = self.path_for(fp)
        tmp = self.directory / f"{final.name}{_TMP}{os.getpid()}-{secrets.token_hex(4)}"
        try:
            ranker.save(tmp)
            _fsync_tree(tmp)
            try:
                os.rename(tmp, final)
            except OSError:
                if not final.is_dir():
                    raise
                logger.debug("store %s: lexical index %s was saved by another process", self.directory, final.name)
                shutil.rmtree(tmp, ignore_errors=True)
            fsync_path(self.directory)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        self._remove_others(final.name)

    def _remove_others(self, keep: str) -> None:
        """Remove indexes of other fingerprints and temp directories of dead processes."""
        for path in self.directory.glob(f"{LEXICAL_PREFIX}*"):
            if not path.is_dir() or path.name == keep:
                continue
            if _TMP in path.name:
                try:
                    pid = int(path.name.split(_TMP, 1)[1].split("-", 1)[0])
                except ValueError:
                    pid = -1
                if pid > 0 and _pid_alive(pid):
                    continue  # another process is building it right now
            shutil.rmtree(path, ignore_errors=True)
            logger.debug("store %s: removed old lexical index %s", self.directory, path.name)
