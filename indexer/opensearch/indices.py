"""The OpenSearch store's indices: which concrete document index the configured name means (an
alias of exactly one index), its recorded provenance (:class:`Target`), creating it and its state
index, moving an alias to it, and deleting both.

The target is read once (``GET <index>/_mapping``) and kept until :meth:`Indices.forget` (a
request that finds the index missing, :meth:`~sdr_search.indexer.opensearch.OpenSearchStore.drop`,
:meth:`~sdr_search.indexer.opensearch.OpenSearchStore.close`).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import metadata as importlib_metadata
from typing import Any, Callable, Mapping

from sdr_search.core.errors import IndexLayoutError, IndexNotFoundError, ModelMismatchError, StoreError
from sdr_search.indexer.provenance import library_versions
from sdr_search.indexer.store import IndexMeta

from .requests import (
    FORMAT_VERSION,
    STATE_DOC_ID,
    VECTORS_B64,
    VECTORS_INDEX,
    build_alias_swap,
    build_index_body,
    build_meta,
    build_state_index_body,
    bm25_k1,
    index_meta_from_meta,
    initial_state,
    knn_method,
    legacy_metadata,
    state_index_name,
    stored_centroids,
    stored_content_key,
)
from .settings import OpenSearchSettings
from .transport import Transport

__all__ = ["Indices", "Target", "now"]

logger = logging.getLogger(__name__)


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _bm25_factor(recorded: Mapping[str, Any]) -> float:
    """How much larger the node's BM25 is than bm25s's for an index with this ``_meta.sdr``: indices
    created on 2.x score with LegacyBM25Similarity, ``(k1 + 1)`` times bm25s; 3.x with Lucene's
    BM25Similarity, the same as bm25s (both measured, 3 shards, dfs). ``k1``: the mapping's, 1.5."""
    version = str((recorded.get("versions") or {}).get("opensearch", "2"))
    try:
        major = int(version.split(".")[0])
    except ValueError:
        major = 2
    return 1.0 + float(recorded.get("bm25_k1", 1.5)) if major < 3 else 1.0


@dataclass(frozen=True)
class Target:
    """The concrete indices behind the configured name, and the recorded provenance."""

    name: str  # concrete document index
    state: str  # its state index
    meta: IndexMeta | None
    engine: str = "faiss"  # k-NN engine recorded in _meta (indices from before the setting: faiss)
    space_type: str = "innerproduct"  # k-NN space type recorded in _meta
    bm25_factor: float = 2.5  # what the node's BM25 multiplies bm25s's by: 1 + k1 on 2.x, 1 on 3.x
    vectors: str = VECTORS_B64  # where readers find the vectors (_meta.sdr.vectors; indices from before: b64)
    derived_source: bool = False  # k-NN derived source (vectors rebuilt into _source on read)
    legacy_metadata: bool = False  # metadata mapped field by field (layout 1): read only, no filter (legacy_metadata)
    stored_centroids: bool = False  # the mapping has the paragraph centroids' field: writes fill it (stored_centroids)
    stored_content_key: bool = False  # content_key is a stored field: puts read it without _source (stored_content_key)

    @property
    def recorded(self) -> IndexMeta:
        """The recorded provenance (a target returned by :meth:`Indices.read` always has one)."""
        if self.meta is None:
            raise StoreError(f"OpenSearch index {self.name!r} has no model recorded")
        return self.meta

    def legacy(self, what: str) -> IndexLayoutError:
        """The error refusing ``what`` (e.g. 'filtered by metadata') on an index of the old metadata mapping."""
        return IndexLayoutError(
            f"OpenSearch index {self.name!r} maps its documents' metadata field by field (made by an sdr-search "
            f"before index layout {FORMAT_VERSION}): it can be read and searched without a filter, but not {what}. "
            "Rebuild it with `sdr reindex` (docs/opensearch.md, 'Metadata')")

    def filterable(self, flt: Mapping[str, Any] | None) -> None:
        """Refuse a metadata filter on an index of the old metadata mapping (:func:`legacy_metadata`)."""
        if flt and self.legacy_metadata:
            raise self.legacy("filtered by metadata")


class Indices:
    """The document index named ``index`` (or the one index an alias of that name points to) and its
    state index, through ``transport``. ``has_plugin`` tells whether the node has the sdr plugin (a new
    index then keeps its vectors only in the k-NN field, ``settings.vector_copy`` 'auto')."""

    def __init__(self, transport: Transport, settings: OpenSearchSettings, index: str, *,
                 has_plugin: Callable[[], bool]) -> None:
        self._transport = transport
        self.settings = settings
        self.index = index
        self._has_plugin = has_plugin
        self._target: Target | None = None
        self._state_checked = False

    def forget(self) -> None:
        """Read the target again next time (the index was deleted, or the store closed)."""
        self._target = None

    def reset(self) -> None:
        """Forget the target and whether the state index was checked (the indices were deleted, or the
        store closed)."""
        self._target = None
        self._state_checked = False

    def resolve(self) -> Target | None:
        """The concrete index behind ``self.index`` and its provenance; None if it does not exist."""
        target = self._target
        if target is not None:
            return target
        from opensearchpy import exceptions as ox

        def read() -> Mapping[str, Any] | None:
            try:
                return self._transport.os().indices.get_mapping(index=self.index)
            except ox.NotFoundError as e:
                if e.error == "index_not_found_exception":
                    return None
                raise

        # retried like every read: it is the first request of a store, often made while a node restarts
        mappings = self._transport.call("reading the index mapping", read)
        if not mappings:
            return None
        if len(mappings) > 1:
            raise StoreError(
                f"{self.index!r} names {len(mappings)} indices ({', '.join(sorted(mappings))}); an sdr store "
                "needs one index (an alias must point to exactly one)"
            )
        (name, body), = mappings.items()
        meta = body.get("mappings", {}).get("_meta") or {}
        recorded = meta.get("sdr") if isinstance(meta.get("sdr"), Mapping) else {}
        target = Target(name, state_index_name(name), index_meta_from_meta(meta),
                        str(recorded.get("engine", "faiss")), str(recorded.get("space_type", "innerproduct")),
                        _bm25_factor(recorded), str(recorded.get("vectors", VECTORS_B64)),
                        bool(recorded.get("derived_source", False)), legacy_metadata(body.get("mappings", {})),
                        stored_centroids(body.get("mappings", {})), stored_content_key(body.get("mappings", {})))
        if target.meta is not None:
            self._target = target
        return target

    def read(self) -> Target:
        """The target of a read: :class:`IndexNotFoundError` when the index does not exist."""
        target = self.resolve()
        if target is None:
            raise IndexNotFoundError(
                f"OpenSearch index {self.index!r} does not exist at {self._transport.url}; run `sdr index` to build it"
            )
        if target.meta is None:
            raise StoreError(
                f"OpenSearch index {target.name!r} was not created by sdr-search (no _meta.sdr in its mapping)"
            )
        return target

    def writable(self) -> Target:
        """The target of a write: the index must exist with a model recorded (:meth:`ensure_meta`)."""
        target = self.resolve()
        if target is None or target.meta is None:
            raise StoreError(f"OpenSearch index {self.index!r} has no model recorded; call ensure_meta() before put()")
        return target

    # -- creation ---------------------------------------------------------------------------------
    def _cluster_version(self) -> str:
        info = self._transport.call("reading the cluster version", lambda: self._transport.os().info())
        return str(info.get("version", {}).get("number", "unknown"))

    def _use_derived_source(self, cluster_version: str) -> bool:
        mode = self.settings.derived_source
        if mode != "auto":
            return mode == "on"
        try:
            return int(cluster_version.split(".")[0]) >= 3
        except ValueError:
            return False

    def _vector_layout(self) -> str:
        """Where a new index keeps the vectors: only in the k-NN field when the node has the sdr plugin
        (``settings.vector_copy`` 'auto') or when asked ('off'), else also as base64 in ``_source``."""
        mode = self.settings.vector_copy
        if mode == "on":
            return VECTORS_B64
        if mode == "off":
            return VECTORS_INDEX
        return VECTORS_INDEX if self._has_plugin() else VECTORS_B64

    def create_state(self, state: str) -> None:
        """Create the state index ``state`` with its ``state`` document (either may exist already)."""
        from opensearchpy import exceptions as ox

        def create() -> None:
            try:
                self._transport.os().indices.create(index=state, body=build_state_index_body(replicas=self.settings.replicas))
            except ox.RequestError as e:
                if e.error != "resource_already_exists_exception":
                    raise
            try:
                self._transport.os().index(index=state, id=STATE_DOC_ID, body=initial_state(now()),
                                           params={"op_type": "create"})
            except ox.ConflictError:
                pass  # another process (or a retried request) created it first

        self._transport.call("creating the state index", create, index=state)

    def _create(self, meta: IndexMeta) -> None:
        """Create the state index, then the document index with provenance in ``_meta``."""
        from opensearchpy import exceptions as ox

        s = self.settings
        cluster = self._cluster_version()
        derived = self._use_derived_source(cluster)
        versions = {**library_versions(), "opensearch": cluster}
        try:
            versions["opensearch-py"] = importlib_metadata.version("opensearch-py")
        except importlib_metadata.PackageNotFoundError:  # pragma: no cover - a client was passed in
            pass
        hnsw = {"m": s.hnsw_m, "ef_construction": s.hnsw_ef_construction}
        vectors = self._vector_layout()
        recovery = not derived and (s.recovery_source == "without-vectors"
                                    or (s.recovery_source == "auto" and s.replicas == 0))
        body = build_index_body(
            meta.dim, m=s.hnsw_m, ef_construction=s.hnsw_ef_construction, engine=s.engine,
            shards=s.shards, replicas=s.replicas, derived_source=derived, max_sentences=s.max_sentences, meta={},
            recovery_source_excludes=recovery, knn_encoder=s.knn_encoder,
        )
        engine, space_type = knn_method(body)
        body["mappings"]["_meta"] = build_meta(meta, versions=versions, hnsw=hnsw, derived_source=derived,
                                               created_at=now(), engine=engine, space_type=space_type,
                                               vectors=vectors, recovery_source_excludes=recovery)
        body["mappings"]["_meta"]["sdr"]["bm25_k1"] = bm25_k1(body)
        self.create_state(state_index_name(self.index))
        def create() -> bool:
            try:
                self._transport.os().indices.create(index=self.index, body=body)
                return True
            except ox.RequestError as e:
                if e.error != "resource_already_exists_exception":
                    raise
                return False  # another process created it first; its meta is compared by the caller

        if not self._transport.call("creating the index", create):
            return
        self._state_checked = True
        logger.info("created OpenSearch index %s (dim %d, %s HNSW M=%d, %s, derived source %s, vectors %s, recovery "
                    "source %s, cluster %s)", self.index, meta.dim, engine, s.hnsw_m, space_type, derived,
                    "once (k-NN field, read through the sdr plugin)" if vectors == VECTORS_INDEX else "with a base64 copy",
                    "without vectors" if recovery else "full", cluster)

    def ensure_meta(self, meta: IndexMeta) -> IndexMeta:
        """:meth:`DocumentStore.ensure_meta`: create the indices when missing, else compare the model."""
        with self._transport.lock:
            target = self.resolve()
            if target is None:
                self._create(meta)
                target = self.resolve()
                if target is None:
                    raise StoreError(f"OpenSearch index {self.index!r} could not be created")
            if target.meta is None:
                raise StoreError(
                    f"OpenSearch index {target.name!r} exists but was not created by sdr-search (no _meta.sdr in "
                    "its mapping); choose another index name or delete it"
                )
            stored = target.meta
            if stored.encoder_tag != meta.encoder_tag or int(stored.dim) != int(meta.dim):
                raise ModelMismatchError(
                    f"OpenSearch index {target.name!r} was built with model {stored.model_id} (tag "
                    f"{stored.encoder_tag}, dim {stored.dim}); it cannot be queried with model {meta.model_id} (tag "
                    f"{meta.encoder_tag}, dim {meta.dim}). Use --model {stored.model_id} or re-index into a new index."
                )
            if not self._state_checked:
                exists = bool(self._transport.call("checking the state index", lambda: self._transport.os().indices.exists(
                    index=target.state), index=target.state))
                if not exists:
                    logger.warning("OpenSearch index %s had no state index; creating %s", target.name, target.state)
                    self.create_state(target.state)
                self._state_checked = True
            return stored

    # -- administration ---------------------------------------------------------------------------
    def point_alias(self, alias: str) -> None:
        """Point ``alias`` at this store's index, removing it from any other index (atomic)."""
        from opensearchpy import exceptions as ox

        target = self.read()
        def move() -> None:
            try:
                current = list(self._transport.os().indices.get_alias(name=alias))
            except ox.NotFoundError:
                current = []
            self._transport.os().indices.update_aliases(body=build_alias_swap(alias, target.name, current))

        self._transport.call("moving an alias", move, index=target.name)

    def segments(self) -> tuple[int, int]:
        """The document index's primary segments and primary shards."""
        target = self.read()
        stats = self._transport.call("reading the index's segments", lambda: self._transport.os().indices.stats(
            index=target.name, metric="segments", params={"level": "shards"}), index=target.name)
        shards = stats["indices"][target.name]["shards"]
        primaries = [copy for copies in shards.values() for copy in copies if copy["routing"]["primary"]]
        return sum(int(c["segments"]["count"]) for c in primaries), len(primaries)

    def merge_segments(self, max_segments: int, *, poll_s: float = 5.0,
                       progress: Callable[[int, float], None] | None = None) -> tuple[int, int]:
        """Force-merge the document index to at most ``max_segments`` segments per shard; returns the
        primary segments before and after. The merge runs as a node task (``wait_for_completion=false``):
        this polls the segment count every ``poll_s``, calling ``progress(segments, seconds)`` after each
        poll, and asks again when the task is gone with the count still over (a node that restarted
        drops it; at most 5 times). A merge that ended with the count still over (writes came in) is
        not asked for again: a warning says so."""
        target = self.read()
        before, shards = self.segments()
        count, t0, asked = before, time.monotonic(), 0
        while count > max_segments * shards and asked < 5:
            asked += 1
            task = self._transport.call("force-merging the index", lambda: self._transport.os().indices.forcemerge(
                index=target.name, max_num_segments=max_segments, wait_for_completion=False), index=target.name)
            task_id = (task or {}).get("task")
            while True:
                time.sleep(poll_s)
                # a merged segment replaces the old ones in what searches (and the segment stats) see at a refresh
                self._transport.call("refreshing the index", lambda: self._transport.os().indices.refresh(
                    index=target.name), index=target.name)
                count, shards = self.segments()
                if progress is not None:
                    progress(count, time.monotonic() - t0)
                state = self._task_state(task_id) if task_id else "gone"
                if count <= max_segments * shards or state != "running":
                    break
            if count > max_segments * shards and state == "completed":
                break
        if count > max_segments * shards:
            logger.warning("force-merging %s left %d segments (asked: %d per shard of %d)", target.name, count,
                           max_segments, shards)
        return before, count

    def _task_state(self, task_id: str) -> str:
        """``running``, ``completed`` or ``gone`` (unknown to the node, as after a restart, or not readable)."""
        from opensearchpy import exceptions as ox

        try:
            r = self._transport.os().tasks.get(task_id=task_id)
        except ox.TransportError:  # not found, or the node cannot be reached (a ConnectionError is one)
            return "gone"
        return "completed" if r.get("completed", False) else "running"

    def drop(self) -> bool:
        """Delete the document index and its state index; False when there was nothing to delete."""
        target = self.resolve()
        name = target.name if target else self.index
        def delete() -> list[str]:
            existing = [i for i in (name, state_index_name(name)) if self._transport.os().indices.exists(index=i)]
            if existing:
                self._transport.os().indices.delete(index=",".join(existing))
            return existing

        existing = self._transport.call("deleting the index", delete, index=name)
        self.reset()
        return bool(existing)
