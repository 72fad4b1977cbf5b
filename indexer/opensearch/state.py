"""The OpenSearch store's state index ``<concrete index>-sdr-state``: the ``state`` document
(statistics version, mode, stale flag, reference header, search defaults), every document's
statistics, and the reference sample (one document per sampled paragraph with its own vectors,
under a generation number).

The state document is only read by id (``GET`` is real-time), so its writes need no refresh. A
statistics refresh replaces the state's statistics info guarded by its sequence number; a new
reference sample is written under a new generation before the header names it, and the old
generation is deleted after (a reader never sees a half-written sample).
"""

from __future__ import annotations

import logging
from typing import Any, Mapping, Sequence

import numpy as np

from sdr_search.core.errors import IndexNotFoundError, InvalidInputError, StoreError
from sdr_search.core.fusion import check_search_defaults
from sdr_search.core.scoring import NormStats
from sdr_search.core.vectors import CorpusVectors
from sdr_search.indexer.store import QueryState, ReferenceParagraphs, StatsInfo, query_state_of
from sdr_search.indexer.validation import check_reference

from .indices import Indices, Target, now
from .requests import (
    STATE_DOC_ID,
    build_reference_actions,
    build_reference_delete_actions,
    build_stats_count_query,
    build_stats_update_actions,
    decode_vectors_b64,
    error_from_response,
    initial_state,
    reference_os_id,
    sentence_offsets,
)
from .transport import Transport, chunks

__all__ = ["SMALL_DOCS_PER_BULK", "StateIndex"]

logger = logging.getLogger(__name__)

SMALL_DOCS_PER_BULK = 2_000  # statistics documents and deletes are a few hundred bytes each
_MGET_CHUNK = 500
_STATE_CAS_ATTEMPTS = 5


class StateIndex:
    """The state index of the store's target (``indices``), through ``transport``."""

    def __init__(self, transport: Transport, indices: Indices) -> None:
        self._transport = transport
        self._indices = indices

    def _bulk(self, target: Target, actions: list[dict[str, Any]], what: str, **options: Any) -> dict[str, str]:
        return self._transport.bulk(target.name, actions, [a["_id"] for a in actions], what, engine=target.engine,
                                    **options)

    @staticmethod
    def state_item(target: Target) -> dict[str, Any]:
        """The ``_mget`` item of the state document (read with the query's documents: one round trip)."""
        return {"_index": target.state, "_id": STATE_DOC_ID}

    def state_from(self, target: Target, item: Mapping[str, Any]) -> dict[str, Any]:
        """The ``state`` of the state document's ``_mget`` answer ``item`` (:meth:`state_item`; the
        initial state when it does not exist yet); a missing state index raises as :meth:`read` does."""
        if "error" in item:
            err = error_from_response(404, item, what="reading the store state", index=target.state)
            if isinstance(err, IndexNotFoundError):
                self._transport.index_missing()
            raise err
        return item["_source"]["state"] if item.get("found") else initial_state(now())["state"]

    def read(self, target: Target) -> tuple[dict[str, Any], tuple[int, int] | None]:
        """The state document's ``state`` and its ``(seq_no, primary_term)`` (None if missing)."""
        from opensearchpy import exceptions as ox

        def read() -> Mapping[str, Any] | None:
            try:
                return self._transport.os().get(index=target.state, id=STATE_DOC_ID)
            except ox.NotFoundError as e:
                if e.error == "index_not_found_exception":
                    raise
                return None

        r = self._transport.call("reading the store state", read, index=target.state)
        if r is None:
            return initial_state(now())["state"], None
        return r["_source"]["state"], (int(r["_seq_no"]), int(r["_primary_term"]))

    def mark_stale(self, target: Target) -> None:
        """Mark the statistics stale (a document was written or deleted)."""
        stale = initial_state(now())
        stale["state"]["stats"]["stale"] = True
        body = {"doc": {"state": {"stats": {"stale": True}}}, "upsert": stale}
        self._transport.call("marking statistics stale", lambda: self._transport.os().update(
            index=target.state, id=STATE_DOC_ID, body=body, params={"retry_on_conflict": 5}), index=target.state)

    # -- statistics -------------------------------------------------------------------------------
    def stats_info(self) -> StatsInfo:
        target = self._indices.read()
        state, _ = self.read(target)
        return self._stats_info(target, state)

    @staticmethod
    def _stats_counts(target: Target) -> list[tuple[str, dict[str, Any] | None]]:
        """The two counts of the statistics info: the documents, and those with statistics."""
        return [(target.name, None), (target.state, build_stats_count_query())]

    def _stats_info(self, target: Target, state: Mapping[str, Any], counts: Sequence[int] | None = None) -> StatsInfo:
        """The statistics info of the state document's ``state`` (the two counts in one ``_msearch``, unless
        ``counts`` has them)."""
        s = state["stats"]
        if counts is not None:
            documents, with_stats = counts
        else:
            (documents, with_stats), _ = self._transport.counts(self._stats_counts(target))
        return StatsInfo(
            version=int(s["version"]), mode=s["mode"], sample_size=s["sample_size"], seed=s["seed"],
            stale=bool(s["stale"]), computed_at=s["computed_at"], docs_without_stats=max(0, documents - with_stats),
        )

    def write_stats(
        self, stats: Mapping[str, NormStats], *, mode: str, sample_size: int | None, seed: int | None
    ) -> StatsInfo:
        """One refresh: every document's statistics with version + 1 (state index, bulk).

        Ids no longer stored are skipped (logged; the result stays stale). A statistics length
        that differs from the document's paragraph count raises :class:`InvalidInputError`
        before anything is written. The result is not stale only if every stored document now
        has statistics of this version. One refresh at a time per store.
        """
        target = self._indices.writable()
        ids = [str(i) for i in stats]
        n_pars = {d: int(src["n_paragraphs"]) for d, src in
                  self._transport.mget_sources(target.name, ids, ["n_paragraphs"], "reading paragraph counts").items()}
        for doc_id in ids:
            if doc_id in n_pars and len(stats[doc_id]) != n_pars[doc_id]:
                raise InvalidInputError(
                    f"statistics of document {doc_id!r} have {len(stats[doc_id])} paragraphs, the document has "
                    f"{n_pars[doc_id]}"
                )
        unknown = [d for d in ids if d not in n_pars]
        state, seq = self.read(target)
        version = int(state["stats"]["version"]) + 1
        known = {d: stats[d] for d in ids if d in n_pars}
        if known:
            self._transport.bulk(target.name, build_stats_update_actions(known, version, index=target.state), list(known),
                                 "writing statistics", engine=target.engine, refresh="false",
                                 max_items=SMALL_DOCS_PER_BULK)
        self._transport.call("refreshing the indices", lambda: self._transport.os().indices.refresh(
            index=f"{target.name},{target.state}"), index=target.name)  # count what was just written
        (documents, current), _ = self._transport.counts([(target.name, None),
                                                          (target.state, build_stats_count_query(version))])
        behind = documents - current
        info = {"version": version, "mode": mode, "sample_size": sample_size, "seed": seed,
                "computed_at": now(), "stale": bool(behind > 0 or unknown)}
        self._write_stats_state(target, state, seq, info)
        if unknown:
            logger.warning("OpenSearch index %s: statistics for %d unknown documents skipped (e.g. %r); stats stay stale",
                           target.name, len(unknown), unknown[0])
        return self.stats_info()

    def _write_stats_state(self, target: Target, state: dict[str, Any], seq: tuple[int, int] | None,
                           info: dict[str, Any]) -> None:
        """Replace the state's statistics info, guarded by the state's sequence number; a write that
        happened meanwhile (a put marking stale) makes this refresh stale."""
        from opensearchpy import exceptions as ox

        for _ in range(_STATE_CAS_ATTEMPTS):
            state = {**state, "stats": info}
            params: dict[str, Any] = {"op_type": "create"} if seq is None else {"if_seq_no": seq[0], "if_primary_term": seq[1]}
            def write(state: dict[str, Any] = state, params: dict[str, Any] = params) -> bool:
                try:
                    self._transport.os().index(index=target.state, id=STATE_DOC_ID, body={"kind": "state", "state": state},
                                               params=params)
                    return True
                except ox.ConflictError:
                    return False

            if self._transport.call("writing the store state", write, index=target.state):
                return
            state, seq = self.read(target)
            info = {**info, "stale": True}
        raise StoreError(f"the state of OpenSearch index {target.name!r} changed {_STATE_CAS_ATTEMPTS} times during "
                         "one statistics refresh; run it again")

    # -- reference sample -------------------------------------------------------------------------
    def reference(self) -> ReferenceParagraphs | None:
        target = self._indices.read()
        state, _ = self.read(target)
        return self._reference(target, state)

    def _reference(self, target: Target, state: Mapping[str, Any]) -> ReferenceParagraphs | None:
        """The sample the state document's ``state`` names (``_mget`` of its paragraphs)."""
        header = state.get("reference")
        if not header:
            return None
        generation, n, dim = int(header["generation"]), int(header["paragraphs"]), int(header["dim"])
        rows: list[dict[str, Any]] = []
        fields = ["doc_id", "paragraph_index", "label", "n_sentences", "vectors_b64"]
        for chunk in chunks(range(n), _MGET_CHUNK):
            body = {"docs": [{"_id": reference_os_id(generation, p), "_source": fields} for p in chunk]}
            docs = self._transport.mget("reading the reference sample", body, index=target.state)
            for p, d in zip(chunk, docs):
                if not d.get("found"):
                    raise StoreError(f"the reference sample of OpenSearch index {target.name!r} lacks paragraph {p}; "
                                     "run `sdr stats` to record a new one")
                rows.append(d["_source"])
        vectors = np.concatenate([decode_vectors_b64(r["vectors_b64"], dim) for r in rows])
        corpus = CorpusVectors(
            tuple(str(r["label"]) for r in rows), vectors, sentence_offsets([int(r["n_sentences"]) for r in rows]),
            np.arange(n + 1, dtype=np.int64),
        )
        return ReferenceParagraphs(
            tuple(str(r["doc_id"]) for r in rows), np.asarray([int(r["paragraph_index"]) for r in rows], dtype=np.int64),
            corpus, int(header["seed"]), int(header["size"]),
        )

    def set_reference(self, reference: ReferenceParagraphs) -> None:
        """Record a new reference sample: its documents under a new generation, then the header,
        then the old generation is deleted (a reader never sees a half-written sample)."""
        check_reference(reference)
        cv = reference.vectors
        n = len(reference.doc_ids)
        target = self._indices.writable()
        state, _ = self.read(target)
        old = state.get("reference")
        generation = int(old["generation"]) + 1 if old else 1
        actions = build_reference_actions(reference, generation, index=target.state)
        self._bulk(target, actions, "writing the reference sample", refresh="false")
        header = {"generation": generation, "seed": int(reference.seed), "size": int(reference.size),
                  "dim": cv.dim, "paragraphs": n, "at": now()}
        self._transport.call("writing the store state", lambda: self._transport.os().update(
            index=target.state, id=STATE_DOC_ID, body={"doc": {"state": {"reference": header}}},
            params={"retry_on_conflict": 5}), index=target.state)
        if old:
            stale = build_reference_delete_actions(int(old["generation"]), int(old["paragraphs"]), index=target.state)
            self._bulk(target, stale, "deleting the previous reference sample", accept=(404,), refresh="false",
                       max_items=SMALL_DOCS_PER_BULK)

    # -- search defaults and the query's state ----------------------------------------------------
    def search_defaults(self) -> dict[str, Any]:
        """The search defaults recorded in the state document (``{}`` when none)."""
        state, _ = self.read(self._indices.read())
        return dict(state.get("search_defaults") or {})

    def set_search_defaults(self, defaults: Mapping[str, Any]) -> dict[str, Any]:
        """Record the search defaults in the state document (validated; ``{}`` clears them)."""
        checked = check_search_defaults(defaults)
        target = self._indices.read()
        body = {"script": {"source": "ctx._source.state.search_defaults = params.d", "lang": "painless",
                           "params": {"d": checked or None}}}
        self._transport.call("recording search defaults", lambda: self._transport.os().update(
            index=target.state, id=STATE_DOC_ID, body=body, params={"retry_on_conflict": 5}), index=target.state)
        return checked

    def query_state(self, *, reference_version: int | None = None, documents: Any = None,
                    ids: Sequence[str] = ()) -> QueryState:
        """Meta (the mapping's, cached with the target), search defaults, statistics info and
        (unless ``reference_version`` is current) the reference sample from one real-time read of the
        state document, plus the statistics info's two counts (one ``_msearch``) and the reference's
        ``_mget``. With ``ids`` (the query's indexed sources) the same ``_mget`` reads their statistics, and
        the documents themselves are read there too or, where the plugin reads their vectors, by the same
        ``_msearch`` with their vectors, as searches see them (``documents``: the store's
        :class:`.documents.Documents`, which chooses and parses them; :meth:`~.documents.Documents.read_by_search`)."""
        target = self._indices.read()
        reads = documents.stored_reads(target, ids)  # the sources: statistics in the _mget, fields and vectors by search
        got = self._transport.mget("reading the store state", {"docs": [self.state_item(target), *reads.items]})
        state = self.state_from(target, got[0])
        # the counts, and the sources where the plugin reads them, in one _msearch
        counts, answers = self._transport.counts(self._stats_counts(target), [(target.name, b) for b in reads.searches])
        stored = documents.stored_of(target, reads, got[1:], answers)
        return query_state_of(target.meta, state.get("search_defaults"), self._stats_info(target, state, counts),
                              lambda: self._reference(target, state), reference_version, stored)
