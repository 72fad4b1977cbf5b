"""The OpenSearch store's document reads and writes: ``put`` and ``delete`` (with the statistics they
make stale), reads by id (``_mget``, real-time: a document, content keys, vectors; a search: the
documents and metadata of many ids that searches found) and scans of every document (ids, vectors).

Vectors are read from the base64 copy ``vectors_b64`` (``_meta.sdr.vectors`` :data:`VECTORS_B64`),
or, in an index that keeps them only in the k-NN field (:data:`VECTORS_INDEX`), through the sdr
plugin's ``sdr_vectors`` fetch, or, on a node without the plugin, from the vectors that derived
source rebuilds into ``_source`` (JSON floats: slow).
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from sdr_search.core.cache import document_key
from sdr_search.core.documents import Document
from sdr_search.core.errors import DocumentNotFoundError, InvalidInputError, StoreError
from sdr_search.core.scoring import NormStats
from sdr_search.core.vectors import CorpusVectors, DocVectors
from sdr_search.indexer.store import StoredDocument
from sdr_search.indexer.validation import check_put_items

from .indices import Indices, Target
from .plugin import SdrPlugin
from .requests import (
    CENTROIDS_FIELD,
    PRESENTED_FIELDS,
    VECTORS_B64,
    build_bulk_actions,
    build_counts_query,
    build_delete_actions,
    build_mget_body,
    build_stats_delete_actions,
    build_vectors_search,
    error_from_response,
    hit_doc_id,
    parse_b64_vectors,
    parse_derived_vectors,
    parse_presented_document,
    parse_stored_paragraphs,
    parse_vector_hit,
    stats_os_id,
)
from .settings import OpenSearchSettings
from .state import SMALL_DOCS_PER_BULK, StateIndex
from .transport import Transport

__all__ = ["Documents", "StoredReads"]

logger = logging.getLogger(__name__)

# what stored_from reads of a document's _source (its text and metadata; par_sizes checks the vectors)
_STORED_FIELDS = ("doc_id", "title", "metadata", "paragraphs", "par_sizes", "n_sentences")


@dataclass(frozen=True)
class StoredReads:
    """The requests that read stored documents together (:meth:`Documents.stored_reads`): ``ids`` (distinct,
    in order), whether their fields come by search (``by_search``), the ``_mget`` ``items`` and the ``searches``."""

    ids: list[str]
    by_search: bool
    items: list[dict[str, Any]]
    searches: list[dict[str, Any]]


class Documents:
    """The documents of the store's target (``indices``): written through ``transport`` with their
    statistics in ``state``, their vectors read through ``plugin`` where the index needs it."""

    def __init__(self, transport: Transport, indices: Indices, state: StateIndex, plugin: SdrPlugin,
                 settings: OpenSearchSettings) -> None:
        self._transport = transport
        self._indices = indices
        self._state = state
        self._plugin = plugin
        self.settings = settings

    def counts(self) -> dict[str, int]:
        target = self._indices.read()
        r = self._transport.call("counting documents", lambda: self._transport.os().search(
            index=target.name, body=build_counts_query(), params=self._transport.search_params()), index=target.name)
        aggs = r.get("aggregations", {})
        return {
            "documents": int(r["hits"]["total"]["value"]),
            "paragraphs": int(aggs.get("paragraphs", {}).get("value") or 0),
            "sentences": int(aggs.get("sentences", {}).get("value") or 0),
        }

    # -- writes -----------------------------------------------------------------------------------
    def _bulk(self, target: Target, actions: list[dict[str, Any]], keys: Sequence[str], what: str,
              **options: Any) -> dict[str, str]:
        return self._transport.bulk(target.name, actions, keys, what, engine=target.engine, **options)

    def put(self, items: Sequence[tuple[Document, DocVectors]]) -> None:
        """Insert or replace documents (one ``index`` action each; see :mod:`.store`).

        Raises :class:`BulkWriteError` naming the documents not written (the others are)."""
        items = list(items)
        if not items:
            return
        target = self._indices.writable()
        meta = target.recorded
        check_put_items(items, meta, where=f"OpenSearch index {target.name!r}",
                        max_sentences=self.settings.max_sentences)
        if target.legacy_metadata:
            raise target.legacy("written to")
        ids = [doc.id for doc, _ in items]
        actions = build_bulk_actions(items, index=target.name, encoder_tag=meta.encoder_tag, model_id=meta.model_id,
                                     vector_copy=target.vectors == VECTORS_B64, centroids=target.stored_centroids)
        # a document written again with the same content keeps its statistics, and alone makes none stale
        stored = self.content_keys(ids)
        changed = [doc.id for doc, _ in items if stored.get(doc.id) != document_key(meta.encoder_tag, doc.paragraphs)]
        if changed:
            self._state.mark_stale(target)
            self._bulk(target, build_stats_delete_actions(changed, index=target.state), changed,
                       "deleting replaced statistics", accept=(404,), max_items=SMALL_DOCS_PER_BULK)
        self._bulk(target, actions, ids, "writing documents")

    def delete(self, ids: Sequence[str]) -> int:
        ids = list(dict.fromkeys(str(i) for i in ids))
        if not ids:
            return 0
        target = self._indices.read()
        self._bulk(target, build_stats_delete_actions(ids, index=target.state), ids, "deleting statistics", accept=(404,),
                   max_items=SMALL_DOCS_PER_BULK)
        results = self._bulk(target, build_delete_actions(ids, index=target.name), ids, "deleting documents", accept=(404,))
        deleted = sum(1 for r in results.values() if r == "deleted")
        if deleted:
            self._state.mark_stale(target)
        return deleted

    # -- reads by id ------------------------------------------------------------------------------
    def _vectors_of(self, target: Target, ids: Sequence[str], what: str, *,
                    values: Mapping[str, int] | None = None) -> dict[str, DocVectors]:
        """``id -> DocVectors`` for the ids that exist, in an index that keeps its vectors only in the
        k-NN field (``_meta.sdr.vectors`` :data:`VECTORS_INDEX`): through the sdr plugin's
        ``sdr_vectors`` fetch (:meth:`SdrPlugin.vectors`; ``values``: their sentence counts when known,
        else read first), or, on a node without the plugin, from the vectors that derived source rebuilds
        into ``_source`` (JSON floats: slow)."""
        dim = target.recorded.dim
        unique = list(dict.fromkeys(str(i) for i in ids))
        found: dict[str, DocVectors] = {}
        if not unique:
            return found
        if self._plugin.available():
            return self._plugin.vectors(target, unique, what, values=values)
        if not target.derived_source:
            raise self._plugin.unreadable(target)
        for doc_id, src in self._transport.mget_sources(target.name, unique, ["doc_id", "par_sizes", "sentences"],
                                                        what).items():
            found[doc_id] = parse_derived_vectors(src, dim)
        return found

    def get(self, doc_id: str) -> StoredDocument:
        target = self._indices.read()
        main, stats_doc = self._transport.mget("reading a document", {"docs": self.stored_items(target, doc_id)})
        return self.stored_from(target, doc_id, main, stats_doc)

    @staticmethod
    def stored_items(target: Target, doc_id: str, *, main: bool = True) -> list[dict[str, Any]]:
        """The ``_mget`` items :meth:`stored_from` reads a document from: the document without its sentence
        vectors and text (unless ``main`` is False: then a search reads it, :meth:`stored_reads`), and its
        statistics; sent alone by :meth:`get`, or with others (:meth:`stored_reads`)."""
        docs = build_mget_body([doc_id], {"excludes": ["sentences", "text", CENTROIDS_FIELD]},
                               index=target.name)["docs"] if main else []
        docs.append({"_index": target.state, "_id": stats_os_id(doc_id), "_source": ["stats_mu", "stats_sigma"]})
        return docs

    def read_by_search(self, target: Target) -> bool:
        """Whether stored documents read together (:meth:`stored_reads`) come by search (their
        fields and vectors in one hit of the plugin's vector fetch) rather than by ``_mget``: an index that keeps
        its vectors only in the k-NN field, on a node with the plugin. The vectors come from a search there in
        any case, and a ``GET`` of a derived-source index (3.x) rebuilds every sentence vector into ``_source``
        before any filter (about 20 ms per document on the demo corpus)."""
        return target.vectors != VECTORS_B64 and self._plugin.available()

    def stored_reads(self, target: Target, ids: Sequence[str]) -> StoredReads:
        """How to read the stored documents ``ids`` together (the query's indexed sources, document feedback's
        sources): the ``_mget`` items (their statistics; the documents too unless :meth:`read_by_search`) and the
        searches of their fields and vectors, to send alone (:meth:`stored_documents`) or with other items and
        searches (:meth:`.state.StateIndex.query_state`); :meth:`stored_of` reads the answers."""
        ids = list(dict.fromkeys(str(i) for i in ids))
        by_search = bool(ids) and self.read_by_search(target)
        items = [item for d in ids for item in self.stored_items(target, d, main=not by_search)]
        searches = [build_vectors_search([d], fields=_STORED_FIELDS) for d in ids] if by_search else []
        return StoredReads(ids, by_search, items, searches)

    def stored_of(self, target: Target, reads: StoredReads, got: Sequence[Mapping[str, Any]],
                  answers: Sequence[Mapping[str, Any]]) -> dict[str, StoredDocument]:
        """The documents of ``reads`` that exist (as :meth:`get` reads each), from the answers to its ``_mget``
        items (``got``) and its searches (``answers``). With the searches, one document per search (the plugin
        serves one whatever its size); a document they do not see is left out."""
        dim = int(target.recorded.dim)
        hits = {str(hit_doc_id(h)): h for a in answers for h in a.get("hits", {}).get("hits", [])}
        out: dict[str, StoredDocument] = {}
        for k, doc_id in enumerate(reads.ids):
            if reads.by_search:  # _mget items: the statistics alone; the document is its search's hit
                hit = hits.get(doc_id)
                main = {"found": hit is not None, "_source": (hit or {}).get("_source") or {}}
                stats_doc, vectors = got[k], None if hit is None else parse_vector_hit(hit, dim)
            else:  # _mget items: the document, then its statistics
                main, stats_doc, vectors = got[2 * k], got[2 * k + 1], None
            try:
                out[doc_id] = self.stored_from(target, doc_id, main, stats_doc, vectors)
            except DocumentNotFoundError:
                pass
        return out

    def stored_documents(self, ids: Sequence[str]) -> dict[str, StoredDocument]:
        """:meth:`get` of those ``ids`` that exist, in two requests whatever their number (:meth:`stored_reads`)."""
        target = self._indices.read()
        reads = self.stored_reads(target, ids)
        if not reads.ids:
            return {}
        got = self._transport.mget("reading documents", {"docs": reads.items})
        answers = self._transport.msearch("reading documents", [(target.name, b) for b in reads.searches])
        return self.stored_of(target, reads, got, answers)

    def stored_from(self, target: Target, doc_id: str, main: Mapping[str, Any],
                    stats_doc: Mapping[str, Any], vectors: DocVectors | None = None) -> StoredDocument:
        """The :class:`StoredDocument` of the answers to :meth:`stored_items` (its vectors: ``vectors`` when
        fetched already, else from the ``_source`` read, or fetched through the plugin sized by the sentence
        count read). Raises :class:`DocumentNotFoundError` when it does not exist."""
        if "error" in main:
            raise error_from_response(404, main, what="reading a document", index=target.name)
        if not main.get("found"):
            raise DocumentNotFoundError(doc_id)
        src = main["_source"]
        document = Document(
            str(src["doc_id"]), parse_stored_paragraphs(src, doc_id), src.get("title"), src.get("metadata") or {}
        )
        # the sentence count the document was written with sizes the plugin's vector fetch (no search for it)
        counts = {doc_id: int(src["n_sentences"])} if "n_sentences" in src else None
        if vectors is None:
            vectors = (parse_b64_vectors(src, target.recorded.dim) if target.vectors == VECTORS_B64
                       else self._vectors_of(target, [doc_id], "reading a document", values=counts).get(doc_id))
        if vectors is None:
            raise DocumentNotFoundError(doc_id)
        stats = None
        if stats_doc.get("found"):
            s = stats_doc["_source"]
            if len(s.get("stats_mu", ())) == vectors.n_paragraphs:
                try:
                    stats = NormStats(np.asarray(s["stats_mu"]), np.asarray(s["stats_sigma"]))
                except (KeyError, ValueError) as e:
                    raise StoreError(f"stored statistics of document {doc_id!r} are damaged: {e}") from e
        elif "error" in stats_doc:
            logger.warning("statistics of %r unreadable: %s", doc_id, stats_doc["error"])
        return StoredDocument(document, vectors, stats)

    def content_keys(self, ids: Sequence[str]) -> dict[str, str]:
        target = self._indices.read()
        ids = [str(i) for i in ids]
        if target.stored_content_key:  # no _source: on a derived-source index it would rebuild every vector first
            return self._transport.mget_stored(target.name, ids, "content_key", "reading content keys")
        found = self._transport.mget_sources(target.name, ids, ["content_key"], "reading content keys")
        return {doc_id: src["content_key"] for doc_id, src in found.items()}

    def metadata_of(self, ids: Sequence[str]) -> dict[str, Mapping[str, Any]]:
        """Metadata of those ``ids`` that searches see, with one search per 500 ids and no vectors (what
        metadata filters need; cheaper than :meth:`get` per document; ``capabilities.metadata_lookup``;
        :meth:`documents_of`)."""
        target = self._indices.read()
        found = self._transport.search_sources(target.name, [str(i) for i in ids], ["metadata"], "reading metadata")
        return {doc_id: src.get("metadata") or {} for doc_id, src in found.items()}

    def documents_of(self, ids: Sequence[str]) -> dict[str, Document]:
        """The documents of those ``ids`` that searches see (in the order asked), with one search per
        500 ids and no vectors (``capabilities.metadata_lookup``; :meth:`.transport.Transport.search_sources`:
        on a derived-source index an ``_mget`` would rebuild every sentence vector of each document first)."""
        target = self._indices.read()
        found = self._transport.search_sources(target.name, [str(i) for i in ids], PRESENTED_FIELDS, "reading documents")
        return {doc_id: parse_presented_document(src, doc_id) for doc_id, src in found.items()}

    def fetch(self, ids: Sequence[str]) -> CorpusVectors:
        """Sentence vectors of ``ids`` in that order: from ``vectors_b64`` with ``_mget``, or, in an
        index without that copy, from the k-NN field (:meth:`_vectors_of`)."""
        ids = [str(i) for i in ids]
        if not ids:
            raise InvalidInputError("fetch() needs at least one document id")
        target = self._indices.read()
        if target.vectors == VECTORS_B64:
            found = self._transport.mget_sources(target.name, ids, ["doc_id", "par_sizes", "vectors_b64"],
                                                 "fetching vectors")
            decoded = {doc_id: parse_b64_vectors(src, target.recorded.dim) for doc_id, src in found.items()}
        else:
            decoded = self._vectors_of(target, ids, "fetching vectors")
        for doc_id in ids:
            if doc_id not in decoded:
                raise DocumentNotFoundError(doc_id)
        return CorpusVectors.from_docs(ids, [decoded[i] for i in ids])

    # -- scans ------------------------------------------------------------------------------------
    def iter_ids(self) -> Iterator[str]:
        """Document ids in ``doc_id`` order (stable; fetched page by page while iterating)."""
        target = self._indices.read()
        return (str(h["fields"]["doc_id"][0])
                for h in self._transport.scan(target.name, False, 10 * self.settings.scan_page_size))

    def all_vectors(self) -> CorpusVectors:
        """Every document in ``doc_id`` order (in memory). Raises :class:`StoreError` when empty."""
        target = self._indices.read()
        ids: list[str] = []
        docs: list[DocVectors] = []
        dim = target.recorded.dim
        if target.vectors == VECTORS_B64:
            hits = self._transport.scan(target.name, ["doc_id", "par_sizes", "vectors_b64"], self.settings.scan_page_size)
            read = lambda hit: parse_b64_vectors(hit["_source"], dim)  # noqa: E731
        elif self._plugin.available():  # a page of ids and sentence counts, then their vectors within the fetch limit
            page_size = self.settings.scan_page_size
            scanned = self._transport.scan(target.name, ["doc_id", "n_sentences"], page_size)
            for page in iter(lambda: list(itertools.islice(scanned, page_size)), []):
                page_ids = [str(h["_source"]["doc_id"]) for h in page]
                sentences = {str(h["_source"]["doc_id"]): int(h["_source"].get("n_sentences") or 0) for h in page}
                found = self._plugin.vectors(target, page_ids, "reading all vectors", values=sentences)
                for doc_id in page_ids:
                    if doc_id in found:  # one deleted since the page was read is gone
                        ids.append(doc_id)
                        docs.append(found[doc_id])
            if not ids:
                raise StoreError(f"OpenSearch index {target.name!r} has no documents")
            return CorpusVectors.from_docs(ids, docs)
        else:
            if not target.derived_source:
                raise self._plugin.unreadable(target)
            hits = self._transport.scan(target.name, ["doc_id", "par_sizes", "sentences"], self.settings.scan_page_size)
            read = lambda hit: parse_derived_vectors(hit["_source"], dim)  # noqa: E731
        for hit in hits:
            ids.append(str(hit["_source"]["doc_id"]))
            docs.append(read(hit))
        if not ids:
            raise StoreError(f"OpenSearch index {target.name!r} has no documents")
        return CorpusVectors.from_docs(ids, docs)
