"""The embedded store's lexical index: BM25 over every live document's text, with exactly the
scores of :class:`sdr_search.core.lexical.BM25Ranker` (bm25s, Lucene variant, the ranker of
``sdr eval --method bm25``) fitted on the live texts, kept up to date by segments instead of
rebuilt per write.

Segments (as a search engine keeps them). :class:`Segments` holds

- a *base* segment: an inverted index (per term, the documents that hold it and the term
  frequency in each) plus every document's length in tokens, built at ``sdr index`` /
  :meth:`~sdr_search.indexer.embedded.EmbeddedStore.refresh_lexical` time (or at the first lexical
  search) and saved in the store directory as ``lexical-<fingerprint>/``;
- a *delta* segment in memory: the documents put since (new or replaced), each tokenised once,
  at the first search after its ``put``;
- a *deletion mask*: base (and delta) documents that were deleted or replaced.

Raw term frequencies are stored, not BM25 weights, so a query is scored with the statistics of the
live corpus as a whole: the number of live documents, each term's live document frequency (base
postings minus masked ones, plus delta postings) and the live average document length. The
per-(term, document) weight is computed at query time with the same floating-point operations, in
the same types and order, as bm25s uses when it indexes (``float32(float64(idf32) * tf / (k1 *
((1 - b) + b * dl / avgdl) + tf))``), and the weights are summed as :meth:`BM25Ranker.scores`
sums them (float32 per group of query terms with the same count, in query order, then float64
times the count): the scores are *bit for bit* those of a ranker fitted on the live texts, in
any order (``tests/indexer/test_lexical_segments.py`` checks this after random puts, replacements and
deletes).

Merging. When the delta's documents plus the masked ones exceed the bound
``max(lexical_merge_min_docs, lexical_merge_fraction x base documents)`` (settings
``SDR_STORE_LEXICAL_MERGE_MIN_DOCS``, default 500, and ``SDR_STORE_LEXICAL_MERGE_FRACTION``,
default 0.05), the next search starts a background thread that merges delta and base into a new
base (postings are moved, no text is tokenised again), saves it and swaps it in; that search and
the ones after it answer from base + delta meanwhile, exactly. Only a delta over
:data:`HARD_BOUND_FACTOR` times the bound (a bulk load) is merged by the search itself before it
answers. So a write costs tokenising that one document; a search after it
scores base + delta (weights computed at query time, cached until the next change); the index is
never rebuilt whole because of a write. A full build (every text
tokenised) happens only when no usable base exists: a new store, a damaged or missing
``lexical-*`` directory, other BM25 settings.

Freshness. The index is known to equal the catalogue at a store *generation*. ``put``/``delete``
in this process queue their change (the documents put, the ids deleted, with the generation
before and after the commit; :meth:`LexicalIndex.note_put`, :meth:`LexicalIndex.note_delete`), and
the next search applies the queued changes that lead without a gap from the index's generation to
the store's. Any other generation change (another process wrote, a statistics refresh, a
compaction, a queue dropped because it grew past the merge bound) makes the search compare the
catalogue's ``(doc_id, content_key, title)`` rows with what the index covers, and apply the
difference: removed documents masked, changed or new ones read from the catalogue (in the same
read transaction) and tokenised into the delta. The catalogue is always the reference, so a
reader that sees a generation it has no segment for catches up exactly; a process with no index
in memory loads the newest saved base and catches up the same way (at most the unsaved delta is
tokenised again).

Crash safety: only bases are saved. A base is written into ``lexical-<fp>.tmp-<pid>-<random>/``,
every file and the directory are fsynced, and the directory is renamed to ``lexical-<fp>`` (one
rename; ``<fp>``: SHA-256 of the covered ``(doc_id, content_key, title)`` rows and the BM25
settings). A crash leaves at most a temp directory, removed by the next save once its process is
gone; the delta lives in memory only and is rebuilt from the catalogue. A base that cannot be read
is removed and rebuilt. Other saved bases are removed after a successful save; two processes that
save the same fingerprint race harmlessly (the second rename fails and its copy is dropped). A
read-only store builds and merges in memory only.

Threads: the caller serialises :meth:`LexicalIndex.plan` / :meth:`LexicalIndex.apply` (one lock,
:attr:`LexicalIndex.lock`); searches run concurrently with each other and wait only while a batch
of changes is applied (a readers-writer lock per :class:`Segments`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import secrets
import shutil
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from sdr_search.core.documents import Document
from sdr_search.core.lexical import RANKER_FILE, BM25Ranker
from sdr_search.core.locks import ReadWriteLock
from sdr_search.core.scoring import top_of

from .durable import fsync_path

__all__ = ["LEXICAL_PREFIX", "FORMAT", "fingerprint", "document_texts", "Segments", "LexicalIndex"]

logger = logging.getLogger(__package__)  # "sdr_search.indexer.embedded", one logger for the whole store

LEXICAL_PREFIX = "lexical-"
FORMAT = 2
"""Version of a saved base (format 1, bm25s's own files, is rebuilt)."""

_TMP = ".tmp-"
_SEGMENT = "segment.json"  # written last: format, settings, sizes
_DOCS = "documents.json"  # ids, content keys, titles
_TERMS = "terms.json"
_ARRAYS = ("indptr", "docs", "tfs", "lengths")


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
        ids.append(doc_id)
        texts.append(_text(doc_id, title, paragraphs))
    return ids, texts


def _text(doc_id: str, title: str | None, paragraphs: str) -> str:
    return Document(doc_id, tuple(tuple(p) for p in json.loads(paragraphs)), title).text


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


Key = tuple[str, "str | None"]
"""What identifies a document's text in the catalogue: ``(content_key, title)``."""


class Segments:
    """BM25 over a base segment, a delta segment and a deletion mask (see the module docstring).

    Documents live in *slots*: the base's documents first, then one new slot per document put
    since (a replaced document gets a new slot, its old one is masked). ``analyzer`` is an
    unfitted :class:`BM25Ranker` that gives the tokeniser and the settings (k1, b). Build one with
    :meth:`build`, :meth:`load` or :meth:`merged`.
    """

    def __init__(self, analyzer: BM25Ranker, terms: list[str], indptr: np.ndarray, docs: np.ndarray,
                 tfs: np.ndarray, ids: list[str], keys: list[Key], lengths: np.ndarray) -> None:
        self.analyzer = analyzer
        self.params = analyzer.params
        self._k1, self._b = analyzer.k1, analyzer.b
        # base segment (immutable): CSC postings, slots as int32, term frequencies as int32
        self._terms = list(terms)
        self._vocab = {t: i for i, t in enumerate(self._terms)}
        self._n_base_terms = len(self._terms)
        self._indptr = np.asarray(indptr, dtype=np.int64)
        self._docs = np.asarray(docs, dtype=np.int32)
        self._tfs = np.asarray(tfs, dtype=np.int32)
        n = len(ids)
        self.n_base = n
        # per slot (grow by appending)
        self._ids: list[str] = list(ids)
        cap = max(64, n + n // 8)
        self._lengths = np.zeros(cap, dtype=np.int64)
        self._lengths[:n] = lengths
        self._alive = np.zeros(cap, dtype=bool)
        self._alive[:n] = True
        self._n_slots = n
        self._slot_of: dict[str, int] = {d: i for i, d in enumerate(self._ids)}
        if len(self._slot_of) != n:
            raise ValueError("duplicate document id in a lexical segment")
        self._key_of: dict[str, Key] = {d: (k[0], k[1]) for d, k in zip(self._ids, keys)}
        self._total = int(np.sum(self._lengths[:n]))  # live tokens
        self._dead = 0  # masked slots
        self._deleted_base = 0
        # delta segment: term id -> (slots, term frequencies), appended per document put
        self._delta: dict[int, tuple[list[int], list[int]]] = {}
        self._delta_arrays: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._delta_docs = 0
        self._norms: tuple[tuple[int, int, int], np.ndarray] | None = None
        # term id -> its postings' (slots, weights) under the current statistics (masked slots
        # weigh 0; None: no live document holds the term); any change empties it (every weight
        # depends on N and the average length)
        self._wcache: dict[int, tuple[np.ndarray, np.ndarray] | None] = {}
        self._rw = ReadWriteLock()
        # the changes made since a background merge read this index (merged(journal=True)),
        # replayed onto the merged base before it replaces this one; None: not recorded
        self._journal: list[tuple[Any, ...]] | None = None

    # -- construction ---------------------------------------------------------------------------
    @classmethod
    def build(cls, analyzer: BM25Ranker, ids: Sequence[str], keys: Sequence[Key],
              tokens: Sequence[Sequence[str]]) -> "Segments":
        """A base segment over the documents ``ids`` with their catalogue ``keys`` and ``tokens``
        (:meth:`BM25Ranker.tokenize` of their texts)."""
        vocab: dict[str, int] = {}
        term_ids: list[int] = []
        freqs: list[int] = []
        per_doc: list[int] = []
        lengths: list[int] = []
        for toks in tokens:
            counts = Counter(toks)
            lengths.append(len(toks))
            per_doc.append(len(counts))
            term_ids.extend([vocab.setdefault(t, len(vocab)) for t in counts])
            freqs.extend(counts.values())
        t = np.asarray(term_ids, dtype=np.int64)
        order = np.argsort(t, kind="stable")  # by term, documents ascending within a term
        docs = np.repeat(np.arange(len(per_doc), dtype=np.int32), per_doc)[order]
        tfs = np.asarray(freqs, dtype=np.int32)[order]
        indptr = np.zeros(len(vocab) + 1, dtype=np.int64)
        np.cumsum(np.bincount(t, minlength=len(vocab)), out=indptr[1:])
        return cls(analyzer, list(vocab), indptr, docs, tfs, list(ids), list(keys),
                   np.asarray(lengths, dtype=np.int64))

    @classmethod
    def empty(cls, analyzer: BM25Ranker) -> "Segments":
        return cls.build(analyzer, [], [], [])

    # -- what it covers -------------------------------------------------------------------------
    @property
    def size(self) -> int:
        """Live documents."""
        return len(self._slot_of)

    @property
    def covered(self) -> Mapping[str, Key]:
        """Live document id -> ``(content_key, title)`` it was indexed with."""
        return self._key_of

    @property
    def pending(self) -> int:
        """Documents in the delta segment (live or masked) plus masked base documents: what a merge
        folds into a new base."""
        return self._delta_docs + self._deleted_base

    # -- changes ------------------------------------------------------------------------------
    def update(self, removed: Iterable[str], added: Iterable[tuple[str, Key, Sequence[str]]]) -> None:
        """Mask the documents ``removed`` (unknown ids are ignored), then add ``(id, key, tokens)``
        (replacing a document of the same id), as one change that searches see whole."""
        with self._rw.write():
            for doc_id in removed:
                self._remove(doc_id)
            for doc_id, key, toks in added:
                self._add(doc_id, key, toks)
            self._wcache = {}

    def _remove(self, doc_id: str) -> None:
        slot = self._slot_of.pop(doc_id, None)
        if slot is None:
            return
        if self._journal is not None:
            self._journal.append(("remove", doc_id))
        del self._key_of[doc_id]
        self._alive[slot] = False
        self._wcache = {}
        self._total -= int(self._lengths[slot])
        self._dead += 1
        if slot < self.n_base:
            self._deleted_base += 1

    def _add(self, doc_id: str, key: Key, toks: Sequence[str]) -> None:
        self._remove(doc_id)
        if self._journal is not None:
            self._journal.append(("add", doc_id, key, list(toks)))
        slot = self._n_slots
        if slot == self._lengths.size:
            grow = max(64, slot // 2)
            self._lengths = np.concatenate([self._lengths, np.zeros(grow, dtype=np.int64)])
            self._alive = np.concatenate([self._alive, np.zeros(grow, dtype=bool)])
        self._n_slots += 1
        self._ids.append(doc_id)
        self._lengths[slot] = len(toks)
        self._alive[slot] = True
        self._slot_of[doc_id] = slot
        self._key_of[doc_id] = (key[0], key[1])
        self._total += len(toks)
        self._delta_docs += 1
        self._wcache = {}
        vocab, terms, delta, cached = self._vocab, self._terms, self._delta, self._delta_arrays
        for term, tf in Counter(toks).items():
            tid = vocab.get(term)
            if tid is None:
                tid = vocab[term] = len(terms)
                terms.append(term)
            postings = delta.get(tid)
            if postings is None:
                delta[tid] = ([slot], [tf])
            else:
                postings[0].append(slot)
                postings[1].append(tf)
                cached.pop(tid, None)

    # -- scoring ------------------------------------------------------------------------------
    def _delta_postings(self, tid: int) -> tuple[np.ndarray, np.ndarray]:
        """The delta segment's slots and term frequencies for term ``tid`` (masked ones included)."""
        extra = self._delta[tid]
        arrays = self._delta_arrays.get(tid)
        if arrays is None or arrays[0].size != len(extra[0]):
            arrays = (np.asarray(extra[0], dtype=np.int32), np.asarray(extra[1], dtype=np.int32))
            self._delta_arrays[tid] = arrays  # a benign race between readers: the same value
        return arrays

    def _length_norms(self, n_live: int) -> np.ndarray:
        """``k1 * ((1 - b) + b * dl / avgdl)`` per slot, as bm25s computes it (float64)."""
        state = (self._total, n_live, self._n_slots)
        if self._norms is None or self._norms[0] != state:
            # bm25s: avgdl = np.array(lengths).mean(), exact integer sum / N in float64
            # no live document holds a word (tiny documents: ".", a lone NUL): no live posting is scored,
            # and any avgdl gives the same scores; 1 keeps the masked slots' norms finite (0 / 0 warned)
            avgdl = np.float64(self._total) / n_live if self._total else np.float64(1.0)
            norms = self._k1 * ((1 - self._b) + self._b * self._lengths[: self._n_slots] / avgdl)
            self._norms = (state, norms)
        return self._norms[1]

    def _weights(self, tids: list[int], n_live: int) -> None:
        """Compute the BM25 weight of every posting of the terms ``tids`` under the current corpus
        statistics into the weight cache (term id -> its ``(slots, weights)``, or None for a term
        no live document holds), vectorised over all the terms at once. Masked slots get weight 0,
        which leaves every float32 sum as it was."""
        pieces: list[tuple[int, np.ndarray, np.ndarray]] = []  # (term's position in tids, slots, tfs)
        indptr, base_docs, base_tfs, n_base_terms = self._indptr, self._docs, self._tfs, self._n_base_terms
        bounds = indptr[[t for t in tids if t < n_base_terms]].tolist()
        ends = indptr[[t + 1 for t in tids if t < n_base_terms]].tolist()
        i = 0
        delta, delta_arrays = self._delta, self._delta_arrays
        for q, tid in enumerate(tids):
            if tid < n_base_terms:
                lo, hi = bounds[i], ends[i]
                i += 1
                if hi > lo:
                    pieces.append((q, base_docs[lo:hi], base_tfs[lo:hi]))
            if tid in delta:
                arrays = delta_arrays.get(tid)
                if arrays is None or arrays[0].size != len(delta[tid][0]):
                    arrays = self._delta_postings(tid)
                pieces.append((q, arrays[0], arrays[1]))
        cache = self._wcache
        if not pieces:
            for tid in tids:
                cache[tid] = None
            return
        sizes = np.fromiter((p[1].size for p in pieces), dtype=np.int64, count=len(pieces))
        at = np.concatenate([[0], np.cumsum(sizes)])
        docs = np.concatenate([p[1] for p in pieces])
        tfs = np.concatenate([p[2] for p in pieces])
        owner = np.fromiter((p[0] for p in pieces), dtype=np.int64, count=len(pieces))
        if self._dead:
            keep = self._alive[docs]
            kept = np.concatenate([[0], np.cumsum(keep, dtype=np.int64)])
            live_sizes = kept[at[1:]] - kept[at[:-1]]
        else:
            keep = None
            live_sizes = sizes
        df = np.bincount(owner, weights=live_sizes, minlength=len(tids)).astype(np.int64)
        # bm25s's arithmetic: idf = float32(log(1 + (N - df + 0.5) / (df + 0.5))) with Python's log;
        # weight = float32(idf * (tf / (k1 * ((1 - b) + b * dl / avgdl) + tf))) in float64
        ratio = 1 + (n_live - df + 0.5) / (df + 0.5)
        idf = np.asarray([math.log(x) for x in ratio.tolist()], dtype=np.float32).astype(np.float64)
        tf = tfs.astype(np.float64)
        w = self._length_norms(n_live)[docs]
        w += tf
        np.divide(tf, w, out=w)
        w *= np.repeat(idf[owner], sizes)
        weights = w.astype(np.float32)
        if keep is not None:
            weights *= keep  # masked slots: 0
        # a term's pieces are adjacent (base, then delta): one slice per term
        lo = np.full(len(tids), -1, dtype=np.int64)
        hi = np.zeros(len(tids), dtype=np.int64)
        first = np.ones(len(pieces), dtype=bool)
        first[1:] = owner[1:] != owner[:-1]
        lo[owner[first]] = at[:-1][first]
        last = np.ones(len(pieces), dtype=bool)
        last[:-1] = owner[:-1] != owner[1:]
        hi[owner[last]] = at[1:][last]
        for tid, n, a, z in zip(tids, df.tolist(), lo.tolist(), hi.tolist()):
            cache[tid] = (docs[a:z], weights[a:z]) if n else None

    def _scores(self, tokens: Sequence[str]) -> np.ndarray:
        """BM25 of the query ``tokens`` per slot, bit for bit :meth:`BM25Ranker.scores` over the
        live documents (masked slots score 0)."""
        n_slots, n_live = self._n_slots, len(self._slot_of)
        total = np.zeros(n_slots, dtype=np.float64)
        if n_live == 0:
            return total.astype(np.float32)
        vocab, cache = self._vocab, self._wcache
        query: list[tuple[int, int]] = []  # (term id, count), first occurrence order
        for term, c in Counter(tokens).items():
            tid = vocab.get(term)
            if tid is not None:
                query.append((tid, c))
        missing = [tid for tid, _ in query if tid not in cache]
        if missing:
            self._weights(missing, n_live)
        # Terms a live document holds (BM25Ranker's vocabulary), grouped by query count, groups in
        # the order of their first term, each summed in float32 in query order, as
        # BM25Ranker.scores sums them (one bm25s call per group).
        groups: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {}
        for tid, c in query:
            postings = cache[tid]
            if postings is not None:
                groups.setdefault(c, []).append(postings)
        for c, postings in groups.items():
            part = np.zeros(n_slots, dtype=np.float32)
            # in query order: the float32 sums bm25s's np.add.at makes, term after term
            if len(postings) == 1:
                np.add.at(part, postings[0][0], postings[0][1])
            else:
                np.add.at(part, np.concatenate([p[0] for p in postings]), np.concatenate([p[1] for p in postings]))
            total += c * part.astype(np.float64)
        return total.astype(np.float32)

    def scores(self, text: str) -> tuple[list[str], np.ndarray]:
        """``(slot ids, BM25 score per slot)`` of ``text``; masked slots score 0."""
        tokens = self.analyzer.tokenize([text])[0]
        with self._rw.read():
            return list(self._ids), self._scores(tokens)

    def search(self, text: str, k: int, *, exclude_ids: Sequence[str] = (),
               score_ids: Sequence[str] = ()) -> tuple[list[str], np.ndarray, dict[str, float]]:
        """The ``k`` best live documents for ``text`` (score > 0, best first, ties by id) without
        ``exclude_ids``, and the scores of ``score_ids`` (0 for an unknown id)."""
        tokens = self.analyzer.tokenize([text])[0]
        with self._rw.read():
            scores = self._scores(tokens)
            ids, top = top_of(self._ids, scores, k, exclude_ids=exclude_ids, positive=True)
            slot_of = self._slot_of
            scored = {}
            for i in score_ids:
                slot = slot_of.get(str(i))
                scored[str(i)] = 0.0 if slot is None else float(scores[slot])
        return ids, top, scored

    # -- merging ------------------------------------------------------------------------------
    def merged(self, *, journal: bool = False) -> "Segments":
        """A new base over the live documents (base postings moved, delta postings sorted in; no
        text is tokenised again). The live documents keep their relative slot order. The index is
        read under its read lock only long enough to copy what changes (the delta's postings, the
        mask, the ids); the merge itself runs on that copy, so writes wait milliseconds, not the
        merge. With ``journal``, the changes made to this index from then on are recorded
        (:meth:`replay` brings the merged base up to date with them)."""
        with self._rw.read():
            if journal:  # under the read lock: no change falls between what is merged and the journal
                self._journal = []
            n = self._n_slots
            alive = self._alive[:n].copy()
            deleted_base = self._deleted_base
            terms = list(self._terms)
            delta = [(tid, list(v[0]), list(v[1])) for tid, v in self._delta.items()]
            ids_all = list(self._ids)
            key_of = dict(self._key_of)
            lengths_all = self._lengths[:n].copy()
        nb = self._n_base_terms  # the base segment (indptr, docs, tfs) never changes
        new_of = np.cumsum(alive, dtype=np.int64) - 1
        n_terms = len(terms)
        # base postings, masked ones dropped, already in (term, slot) order
        if deleted_base:
            keep = alive[self._docs]
            kept = np.concatenate([[0], np.cumsum(keep, dtype=np.int64)])
            cb = kept[self._indptr[1:]] - kept[self._indptr[:-1]]
            b_docs = new_of[self._docs[keep]]
            b_tfs = self._tfs[keep]
        else:
            cb = np.diff(self._indptr)
            b_docs, b_tfs = self._docs, self._tfs  # base slots keep their numbers
        count_b = np.zeros(n_terms, dtype=np.int64)
        count_b[:nb] = cb
        # delta postings, masked ones dropped, sorted by (term, slot)
        if delta:
            tids = np.fromiter((t for t, _, _ in delta), dtype=np.int64, count=len(delta))
            sizes = np.fromiter((len(sl) for _, sl, _ in delta), dtype=np.int64, count=len(delta))
            d_t = np.repeat(tids, sizes)
            d_docs = np.fromiter((x for _, sl, _ in delta for x in sl), dtype=np.int64, count=int(sizes.sum()))
            d_tfs = np.fromiter((f for _, _, tf in delta for f in tf), dtype=np.int32, count=int(sizes.sum()))
            keep = alive[d_docs]
            d_t, d_docs, d_tfs = d_t[keep], new_of[d_docs[keep]], d_tfs[keep]
            order = np.lexsort((d_docs, d_t))
            d_t, d_docs, d_tfs = d_t[order], d_docs[order], d_tfs[order]
        else:
            d_t = d_docs = np.zeros(0, dtype=np.int64)
            d_tfs = np.zeros(0, dtype=np.int32)
        count_d = np.bincount(d_t, minlength=n_terms).astype(np.int64)
        counts = count_b + count_d
        indptr = np.zeros(n_terms + 1, dtype=np.int64)
        np.cumsum(counts, out=indptr[1:])
        start_d = np.zeros(n_terms + 1, dtype=np.int64)  # exclusive cumulative delta counts
        np.cumsum(count_d, out=start_d[1:])
        docs = np.empty(int(indptr[-1]), dtype=np.int32)
        tfs = np.empty(int(indptr[-1]), dtype=np.int32)
        # a term's base postings first, then its delta postings (higher slots)
        pos_b = np.arange(b_docs.size, dtype=np.int64) + np.repeat(start_d[:nb], cb)
        docs[pos_b], tfs[pos_b] = b_docs, b_tfs
        pos_d = np.arange(d_docs.size, dtype=np.int64) - start_d[d_t] + indptr[d_t] + count_b[d_t]
        docs[pos_d], tfs[pos_d] = d_docs, d_tfs
        used = counts > 0  # terms whose documents are all gone leave the vocabulary
        terms = [t for t, u in zip(terms, used.tolist()) if u]
        indptr = np.concatenate([[0], np.cumsum(counts[used])]).astype(np.int64)
        live = np.flatnonzero(alive)
        ids = [ids_all[s] for s in live.tolist()]
        keys = [key_of[i] for i in ids]
        lengths = lengths_all[alive].copy()
        return Segments(self.analyzer, terms, indptr, docs, tfs, ids, keys, lengths)

    def take_journal(self) -> list[tuple[Any, ...]]:
        """The changes recorded since :meth:`merged` ``(journal=True)``; stops recording."""
        with self._rw.write():
            ops, self._journal = self._journal or [], None
        return ops

    def replay(self, ops: Sequence[tuple[Any, ...]]) -> None:
        """Apply changes recorded by another index's journal (``remove`` and ``add`` in order),
        as one change that searches see whole."""
        with self._rw.write():
            for op in ops:
                if op[0] == "remove":
                    self._remove(op[1])
                else:
                    self._add(op[1], op[2], op[3])
            self._wcache = {}

    # -- persistence (bases only) -------------------------------------------------------------
    def fingerprint(self) -> str:
        """:func:`fingerprint` of the covered documents (by id) and the settings."""
        rows = sorted((d, k[0], k[1]) for d, k in self._key_of.items())
        return fingerprint(rows, self.params)

    def save(self, directory: Path) -> None:
        """Write this base (no delta, nothing masked) into ``directory`` (created)."""
        if self.pending:
            raise ValueError("only a base segment without changes can be saved; merge first")
        directory.mkdir(parents=True)
        arrays = {"indptr": self._indptr, "docs": self._docs, "tfs": self._tfs,
                  "lengths": self._lengths[: self._n_slots]}
        for name in _ARRAYS:
            np.save(directory / f"{name}.npy", arrays[name], allow_pickle=False)
        (directory / _TERMS).write_text(json.dumps(self._terms, ensure_ascii=False), encoding="utf-8")
        docs = [[d, *self._key_of[d]] for d in self._ids]
        (directory / _DOCS).write_text(json.dumps(docs, ensure_ascii=False), encoding="utf-8")
        info = {"format": FORMAT, "params": self.params, "documents": self.n_base,
                "terms": len(self._terms), "postings": int(self._docs.size)}
        (directory / _SEGMENT).write_text(json.dumps(info), encoding="utf-8")

    @classmethod
    def load(cls, analyzer: BM25Ranker, directory: Path) -> "Segments":
        """A base saved by :meth:`save`. Raises ``ValueError`` when ``directory`` does not hold a
        readable one of this format and ``analyzer``'s settings (the message says which)."""
        if not (directory / _SEGMENT).exists() and (directory / RANKER_FILE).exists():
            raise _Outdated("format 1 (bm25s files)")
        try:
            info = json.loads((directory / _SEGMENT).read_text(encoding="utf-8"))
            if not isinstance(info, dict) or info.get("format") != FORMAT:
                raise ValueError(f"format {info.get('format') if isinstance(info, dict) else None!r}, not {FORMAT}")
            if info.get("params") != analyzer.params:
                raise _Outdated(f"BM25 settings {info.get('params')} instead of {analyzer.params}")
            terms = json.loads((directory / _TERMS).read_text(encoding="utf-8"))
            docs_info = json.loads((directory / _DOCS).read_text(encoding="utf-8"))
            arrays = {name: np.load(directory / f"{name}.npy", allow_pickle=False) for name in _ARRAYS}
            ids = [str(r[0]) for r in docs_info]
            keys = [(str(r[1]), None if r[2] is None else str(r[2])) for r in docs_info]
        except _Outdated:
            raise
        except (OSError, EOFError, KeyError, IndexError, TypeError, ValueError) as e:
            raise ValueError(f"{directory.name}: {e}") from e
        indptr, docs, tfs, lengths = (arrays[n] for n in _ARRAYS)
        n, n_terms, n_post = len(ids), len(terms), int(docs.size)
        ok = (
            isinstance(terms, list) and all(isinstance(t, str) for t in terms)
            and indptr.ndim == docs.ndim == tfs.ndim == lengths.ndim == 1
            and indptr.size == n_terms + 1 and tfs.size == n_post and lengths.size == n
            and info.get("documents") == n and info.get("terms") == n_terms and info.get("postings") == n_post
            and all(a.dtype.kind == "i" for a in (indptr, docs, tfs, lengths))
            and int(indptr[0]) == 0 and int(indptr[-1]) == n_post and bool(np.all(np.diff(indptr) >= 0))
            and (n_post == 0 or (int(docs.min()) >= 0 and int(docs.max()) < n and int(tfs.min()) >= 1))
            and (n == 0 or int(lengths.min()) >= 0)
        )
        if not ok:
            raise ValueError(f"{directory.name}: inconsistent segment files")
        return cls(analyzer, terms, indptr, docs, tfs, ids, keys, lengths)


class _Outdated(ValueError):
    """A saved base of an older format or made with other BM25 settings."""


@dataclass
class _Change:
    """A committed ``put`` or ``delete`` of this process: the store went from generation
    ``before`` to ``after`` by putting ``docs`` ``(id, content_key, title, Document)`` or deleting
    ``deleted``."""

    before: int
    after: int
    docs: list[tuple[str, str, str | None, Document]] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)


@dataclass
class Update:
    """What :meth:`LexicalIndex.apply` does to reach the store at ``generation`` (from
    :meth:`LexicalIndex.plan`): apply queued ``changes``, or build from ``rows`` (``full``), or
    mask ``removed`` and (re)index ``rows`` ``(doc_id, content_key, title, paragraphs JSON)``."""

    generation: int
    changes: list[_Change] | None = None
    full: bool = False
    removed: list[str] = field(default_factory=list)
    rows: list[tuple[Any, ...]] = field(default_factory=list)


HARD_BOUND_FACTOR = 4
"""A search merges in the background past the merge bound, and itself (before answering) only
past this many times the bound."""


class LexicalIndex:
    """The lexical index of the store directory ``directory`` (see the module docstring).

    The store calls :meth:`note_put` / :meth:`note_delete` after each committed write, and, under
    :attr:`lock`, :meth:`load_saved`, then :meth:`plan` inside a catalogue read transaction, then
    :meth:`apply` outside it, which returns the up-to-date :class:`Segments`.
    """

    def __init__(self, directory: Path, *, read_only: bool, merge_fraction: float = 0.05,
                 merge_min_docs: int = 500, make_ranker: Callable[[], BM25Ranker] = BM25Ranker) -> None:
        self.directory = directory
        self.read_only = read_only
        self.merge_fraction = float(merge_fraction)
        self.merge_min_docs = int(merge_min_docs)
        self.lock = threading.Lock()
        self.make_ranker = make_ranker
        self.generation: int | None = None  # store generation the index equals
        self.index: Segments | None = None
        self._analyzer: BM25Ranker | None = None
        self._queue: list[_Change] = []
        self._queued = 0  # documents and ids held by the queue
        self._qlock = threading.Lock()  # a leaf lock: nothing is acquired while holding it
        self._looked_on_disk = False
        self._merging: threading.Thread | None = None

    @property
    def analyzer(self) -> BM25Ranker:
        if self._analyzer is None:
            self._analyzer = self.make_ranker()
        return self._analyzer

    @property
    def params(self) -> dict:
        """The settings of the rankers this index builds (part of the fingerprint)."""
        return self.analyzer.params

    def path_for(self, fp: str) -> Path:
        return self.directory / f"{LEXICAL_PREFIX}{fp[:24]}"

    def merge_bound(self, index: Segments | None = None) -> int:
        """Pending documents (:attr:`Segments.pending`) beyond which the delta is merged:
        ``max(merge_min_docs, merge_fraction x base documents)``."""
        index = index if index is not None else self.index
        base = index.n_base if index is not None else 0
        return max(self.merge_min_docs, math.ceil(self.merge_fraction * base))

    def forget(self) -> None:
        with self._qlock:
            self.index = self.generation = None
            self._queue, self._queued = [], 0

    # -- write notes (called under the store's mutex, after the commit) ------------------------
    def note_put(self, before: int, after: int, prepared: Sequence[Any]) -> None:
        """The store went from ``before`` to ``after`` by putting ``prepared`` (records with
        ``doc`` and ``content_key``)."""
        if self.generation is None:
            return  # no index in memory to keep up to date
        docs = [(p.doc.id, p.content_key, p.doc.title, p.doc) for p in prepared]
        self._push(_Change(before, after, docs=docs))

    def note_delete(self, before: int, after: int, ids: Sequence[str]) -> None:
        """The store went from ``before`` to ``after`` by deleting those of ``ids`` it held."""
        if self.generation is None:
            return
        self._push(_Change(before, after, deleted=list(ids)))

    def _push(self, change: _Change) -> None:
        with self._qlock:
            self._queue.append(change)
            self._queued += len(change.docs) + len(change.deleted)
            if self._queued > self.merge_bound():
                # a bulk load: the next search compares with the catalogue instead
                self._queue, self._queued = [], 0

    def _chain(self, generation: int) -> list[_Change] | None:
        """The queued changes leading from :attr:`generation` to ``generation`` without a gap
        (None if there is a gap); drops every queued change up to ``generation``."""
        with self._qlock:
            g = self.generation
            chain: list[_Change] = []
            for change in self._queue:
                if g is None or g == generation:
                    break
                if change.after <= g:
                    continue
                if change.before != g:
                    break
                chain.append(change)
                g = change.after
            self._queue = [c for c in self._queue if c.after > generation]
            self._queued = sum(len(c.docs) + len(c.deleted) for c in self._queue)
        return chain if g == generation and g is not None else None

    # -- catching up ------------------------------------------------------------------------
    def load_saved(self) -> None:
        """With no index in memory, load the newest usable saved base (once per process)."""
        if self.index is not None or self._looked_on_disk:
            return
        self._looked_on_disk = True
        candidates = [p for p in self.directory.glob(f"{LEXICAL_PREFIX}*") if p.is_dir() and _TMP not in p.name]
        candidates.sort(key=lambda p: p.stat().st_mtime_ns, reverse=True)
        for path in candidates:
            try:
                index = Segments.load(self.analyzer, path)
            except _Outdated as e:
                logger.info("store %s: lexical index %s is outdated (%s); rebuilding it", self.directory, path.name, e)
                self._discard(path)
                continue
            except ValueError as e:
                logger.warning("store %s: lexical index %s unreadable (%s); rebuilding it", self.directory, path.name, e)
                self._discard(path)
                continue
            logger.debug("store %s: loaded lexical index %s (%d documents)", self.directory, path.name, index.size)
            self.index = index
            return

    def plan(self, generation: int, read_keys: Callable[[], list[tuple[str, str, str | None]]],
             read_rows: Callable[[Sequence[str] | None], list[tuple[Any, ...]]]) -> Update | None:
        """What brings the index to the store's ``generation`` (None: it is there). Called inside
        the catalogue read transaction of ``generation``: ``read_keys()`` gives every document's
        ``(doc_id, content_key, title)``, ``read_rows(ids)`` (None: all) their
        ``(doc_id, content_key, title, paragraphs JSON)``."""
        if self.index is not None and self.generation == generation:
            return None
        if self.index is not None:
            chain = self._chain(generation)
            if chain is not None:
                return Update(generation, changes=chain)
        keys = read_keys()
        if self.index is None:
            return Update(generation, full=True, rows=read_rows(None) if keys else [])
        covered = self.index.covered
        live = {d: (k, t) for d, k, t in keys}
        removed = [d for d in covered if d not in live]
        changed = [d for d, kt in live.items() if covered.get(d) != kt]
        return Update(generation, removed=removed, rows=read_rows(changed) if changed else [])

    def apply(self, update: Update | None) -> Segments:
        """Carry out ``update`` (from :meth:`plan`), merge when the delta is over the bound, and
        return the index."""
        if update is None:
            assert self.index is not None
            if self.index.pending > self.merge_bound(self.index):  # a dropped background merge: again
                self._merge_soon()
            return self.index
        t0 = time.perf_counter()
        if update.full:
            index = self._build(update.rows)
        else:
            index = self.index
            assert index is not None
            if update.changes is not None:
                docs = [d for c in update.changes for d in c.docs]
                tokens = iter(self.analyzer.tokenize([doc.text for _, _, _, doc in docs]) if docs else [])
                with index._rw.write():
                    for change in update.changes:
                        for doc_id in change.deleted:
                            index._remove(doc_id)
                        for doc_id, key, title, _ in change.docs:
                            index._add(doc_id, (key, title), next(tokens))
            else:
                texts = [_text(r[0], r[2], r[3]) for r in update.rows]
                tokens = self.analyzer.tokenize(texts) if texts else []
                index.update(update.removed, ((r[0], (r[1], r[2]), toks) for r, toks in zip(update.rows, tokens)))
                if update.removed or update.rows:
                    logger.debug("store %s: lexical index caught up with the catalogue: %d removed, %d (re)indexed "
                                 "in %.3f s", self.directory, len(update.removed), len(update.rows),
                                 time.perf_counter() - t0)
        pending, bound = index.pending, self.merge_bound(index)
        if pending > HARD_BOUND_FACTOR * bound:  # too far behind (a bulk load): merge before answering
            index = self.merge(index)
        with self._qlock:
            self.index, self.generation = index, update.generation
        if bound < pending <= HARD_BOUND_FACTOR * bound:
            self._merge_soon()  # this search goes on with base + delta (exact); a thread folds them
        return index

    def _merge_soon(self) -> None:
        """Start :meth:`merge_concurrently` in a daemon thread unless one is running."""
        with self._qlock:
            if self._merging is not None and self._merging.is_alive():
                return
            self._merging = threading.Thread(target=self._merge_quietly, name="sdr-lexical-merge", daemon=True)
            self._merging.start()

    def wait_merge(self, timeout: float = 60.0) -> None:
        """Wait for a background merge in progress (at most ``timeout`` seconds)."""
        thread = self._merging
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _merge_quietly(self) -> None:
        try:
            self.merge_concurrently()
        except Exception as e:  # the next search over the bound tries again; scores stay exact meanwhile
            logger.warning("store %s: background lexical merge failed: %s", self.directory, e)

    def merge_concurrently(self) -> Segments | None:
        """Merge the current index's delta into a new base while searches and writes go on
        (searches read base + delta; a write applied meanwhile waits only for the merge's read of
        the index, and is recorded), save the base, then, under :attr:`lock`, replay the recorded
        writes onto it and swap it in. Dropped (None) only when the index was replaced meanwhile
        (a merge of its own, or a rebuild). Returns the new index."""
        with self.lock:
            index = self.index
        if index is None or not index.pending:
            return index
        t0 = time.perf_counter()
        pending = index.pending
        merged = index.merged(journal=True)
        self._save(merged)  # outside the lock: searches go on meanwhile
        with self.lock:
            ops = index.take_journal()
            if self.index is not index:
                logger.debug("store %s: lexical index replaced during a background merge; merge dropped", self.directory)
                return None
            merged.replay(ops)  # the writes applied since the merge read the index
            with self._qlock:
                self.index = merged
        logger.info("store %s: merged %d pending changes into the lexical index (%d documents) in %.2f s, in the "
                    "background (%d changes replayed)", self.directory, pending, merged.size, time.perf_counter() - t0,
                    len(ops))
        return merged

    def merge(self, index: Segments | None = None) -> Segments:
        """Fold ``index``'s delta and deletions into a new base and save it (becomes :attr:`index`
        when ``index`` is the current one)."""
        index = index or self.index
        assert index is not None
        t0 = time.perf_counter()
        pending = index.pending
        merged = index.merged()
        logger.info("store %s: merged %d pending changes into the lexical index (%d documents) in %.2f s",
                    self.directory, pending, merged.size, time.perf_counter() - t0)
        self._save(merged)
        with self._qlock:
            if self.index is index:
                self.index = merged
        return merged

    def _build(self, rows: list[tuple[Any, ...]]) -> Segments:
        t0 = time.perf_counter()
        ids = [r[0] for r in rows]
        tokens = self.analyzer.tokenize([_text(r[0], r[2], r[3]) for r in rows]) if rows else []
        index = Segments.build(self.analyzer, ids, [(r[1], r[2]) for r in rows], tokens)
        if rows:
            logger.info("store %s: built the lexical index over %d documents in %.1f s",
                        self.directory, len(ids), time.perf_counter() - t0)
            self._save(index)
        return index

    # -- disk ---------------------------------------------------------------------------------
    def _discard(self, path: Path) -> None:
        """Remove an unusable saved index (so the rebuilt one can take its name)."""
        if not self.read_only:
            shutil.rmtree(path, ignore_errors=True)

    def _save(self, index: Segments) -> None:
        if self.read_only or index.size == 0:
            return
        try:
            self._write(index.fingerprint(), index)
        except OSError as e:  # the index still serves from memory; the next process rebuilds it
            logger.warning("store %s: could not save the lexical index (%s)", self.directory, e)

    def _write(self, fp: str, index: Segments) -> None:
        final = self.path_for(fp)
        tmp = self.directory / f"{final.name}{_TMP}{os.getpid()}-{secrets.token_hex(4)}"
        try:
            index.save(tmp)
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
