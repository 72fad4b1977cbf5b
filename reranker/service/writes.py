"""Writes over HTTP: add or replace one document, delete one, a bulk NDJSON batch; and the
background statistics refresh that writes make necessary.

A document written over HTTP goes through the one indexing path (segmented as the index's
documents were, :func:`sdr_search.indexer.pipeline.write_documents`, encoded by the server's shared
encoder) and is visible to the next query. Writes take the same compute slots as queries (bounded
concurrency; a bulk request is bounded by ``SDR_SERVICE_MAX_BULK_DOCUMENTS`` and the body size
limit). Every write makes the index's normalisation statistics stale; :class:`StatsRefresher`
recomputes them (sampled, as ``sdr index`` does) in one background thread per index, once the index
has had no write for ``SDR_SERVICE_STATS_REFRESH_DELAY_S`` seconds (0: never on its own), and on
demand.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from sdr_search.core.documents import Document, check_id, parse_record, text_problem
from sdr_search.core.errors import DocumentNotFoundError, InvalidInputError, SDRError
from sdr_search.core.metadata import MAX_DEPTH, MAX_KEY_LENGTH, MAX_KEYS, MAX_PATH_LENGTH, MAX_VALUES
from sdr_search.core.ndjson import ndjson_objects
from sdr_search.indexer.pipeline import WriteReport, write_documents
from sdr_search.indexer.stats_job import refresh_stats
from sdr_search.indexer.store import DocumentStore

from ..query import NonBlank, Section, _drop_null_defaults

__all__ = ["DocumentBody", "WriteResponse", "BulkResponse", "StatsResponse", "StatsRefresher", "put_document",
           "delete_document", "bulk", "bulk_actions", "BulkItem"]

logger = logging.getLogger(__name__)

def _body_schema(schema: dict[str, Any]) -> None:
    _drop_null_defaults(schema)
    schema["oneOf"] = [{"required": [k]} for k in ("text", "paragraphs", "sections")]


class DocumentBody(BaseModel):
    """A document to add or replace (its id is the URL's): exactly one of ``text``,
    ``paragraphs``, ``sections``; optional ``title`` and ``metadata`` (filterable fields)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=lambda schema, cls: _body_schema(schema))

    title: str = Field(None, max_length=10_000)  # type: ignore[assignment]
    metadata: dict[str, Any] = Field(  # type: ignore[assignment]
        None, description="Stored with the document as given; a query's `filter` matches its values by path (a key, or "
        "keys joined by dots: nested objects and dotted keys alike). Any JSON value under any key; at most "
        f"{MAX_KEYS:,} keys (nested ones included), {MAX_VALUES:,} values, {MAX_DEPTH} levels, keys of {MAX_KEY_LENGTH} "
        f"and paths of {MAX_PATH_LENGTH:,} characters (docs/http-api.md).")
    text: NonBlank = Field(None, description="Raw text: paragraphs separated by blank lines.")  # type: ignore[assignment]
    paragraphs: list[NonBlank] = Field(None, min_length=1)  # type: ignore[assignment]
    sections: list[Section] = Field(None, min_length=1)  # type: ignore[assignment]

    @model_validator(mode="after")
    def _one_body(self) -> "DocumentBody":
        given = [k for k in ("text", "paragraphs", "sections") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of 'text', 'paragraphs', 'sections' (found: {', '.join(given) or 'none'})")
        return self

    def record(self, doc_id: str) -> dict[str, Any]:
        out: dict[str, Any] = {"id": doc_id}
        for key in ("title", "metadata", "text", "paragraphs"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        if self.sections is not None:
            out["sections"] = [s.model_dump(exclude_none=True) for s in self.sections]
        return out


class WriteResponse(BaseModel):
    index: str
    id: str
    result: Literal["created", "updated", "deleted"]
    sentences: int | None = Field(None, description="Sentences encoded (created/updated).")
    stats_stale: bool = Field(..., description="The index's statistics need a refresh (scheduled in the background).")


class BulkFailure(BaseModel):
    id: str | None
    line: int
    error: str


class BulkItem(BaseModel):
    """What one line of a bulk request did, in line order."""

    line: int
    id: str | None
    result: Literal["created", "updated", "deleted", "not_found", "failed"] = Field(
        ..., description="created / updated: the document was written (it was absent / present just before this "
        "line); deleted: it was removed; not_found: a delete of an id that named no document at that point; "
        "failed: the line was refused (see error) and changed nothing.")
    error: str | None = None


class BulkResponse(BaseModel):
    index: str
    written: int = Field(..., description="Documents (distinct ids) this request leaves written: their last line "
                         "in the request is a write that was applied.")
    deleted: int = Field(..., description="Documents (distinct ids) that existed before the request and that it "
                         "leaves deleted.")
    missing: list[str] = Field(..., description="Ids of delete lines that named no document at that point, in "
                               "line order (as DELETE answers 404 and `sdr delete` reports them).")
    failed: list[BulkFailure] = Field(..., description="Lines refused, with their reason; the other lines were "
                                      "applied.")
    sentences: int = Field(..., description="Sentences encoded for the lines written.")
    items: list[BulkItem] = Field(..., description="Every line's result, in line order.")
    stats_stale: bool


class StatsResponse(BaseModel):
    index: str
    version: int
    stale: bool
    documents: int


def _document(record: dict[str, Any], engine) -> Document:
    return parse_record(record, settings=engine.segmentation())


def _written(report: WriteReport, doc_id: str) -> None:
    if report.failed:
        raise InvalidInputError(f"document {doc_id!r} was not written: {report.failed[0][1]}")


def _require_encoder(engine, encoder) -> None:
    if encoder is None:
        raise InvalidInputError("this server has no encoder: it cannot encode documents to write")
    engine.check_encoder()


def put_document(store: DocumentStore, engine, encoder, doc_id: str, body: DocumentBody) -> tuple[str, int]:
    """Add or replace ``doc_id``; returns ("created" | "updated", sentences encoded)."""
    _require_encoder(engine, encoder)
    doc = _document(body.record(doc_id), engine)
    existed = bool(store.content_keys([doc.id]))
    report = write_documents(store, [doc], encoder)
    _written(report, doc.id)
    return ("updated" if existed else "created"), doc.n_sentences


def delete_document(store: DocumentStore, doc_id: str) -> None:
    if not store.delete([doc_id]):
        raise DocumentNotFoundError(doc_id)


def bulk_actions(raw: bytes, *, max_documents: int) -> list[tuple[int, dict[str, Any]]]:
    """The actions of a bulk body: one JSON object per line, a document record to add or replace
    (``{"id": ..., "text" | "paragraphs" | "sections": ..., "title"?, "metadata"?}``) or
    ``{"delete": <id>}``. Blank lines are skipped; a line that is not a JSON object is refused
    with its line number, before anything is written (a well-formed line with a bad id or body is
    refused alone, by :func:`bulk`)."""
    actions: list[tuple[int, dict[str, Any]]] = []
    for n, obj in ndjson_objects(raw, name="the bulk body", line=lambda i: f"bulk line {i}"):
        if "delete" in obj and len(obj) != 1:
            raise InvalidInputError(f"bulk line {n}: a delete is {{\"delete\": \"<id>\"}} and nothing else")
        actions.append((n, obj))
    if not actions:
        raise InvalidInputError("the bulk body has no action")
    if len(actions) > max_documents:
        raise InvalidInputError(f"the bulk body has {len(actions)} actions, over the limit of {max_documents} "
                                "(SDR_SERVICE_MAX_BULK_DOCUMENTS)")
    return actions


@dataclass(frozen=True)
class _Op:
    line: int
    id: str
    doc: Document | None  # None: a delete


def _ops(actions: list[tuple[int, dict[str, Any]]], engine) -> tuple[list[_Op], list[dict[str, Any]]]:
    """The valid operations in line order, and the refused lines (``failed`` items)."""
    ops: list[_Op] = []
    failed: list[dict[str, Any]] = []
    for n, obj in actions:
        if "delete" in obj:
            try:
                ops.append(_Op(n, check_id(obj["delete"]), None))
            except InvalidInputError as e:
                failed.append({"line": n, "id": None, "result": "failed", "error": f"invalid delete id: {e}"})
            continue
        try:
            doc = _document(obj, engine)
        except SDRError as e:
            shown = obj.get("id")  # as sent, unless it could not be sent back (not a string, or not valid Unicode)
            failed.append({"line": n, "id": shown if isinstance(shown, str) and text_problem(shown, "id") is None
                           else None, "result": "failed", "error": str(e)})
            continue
        ops.append(_Op(n, doc.id, doc))
    return ops, failed


def _runs(ops: list[_Op]) -> list[list[_Op]]:
    """``ops`` cut into runs of the same kind (writes or deletes) with distinct ids: applying the runs
    one after the other is applying the lines in order, and each run is one store call."""
    runs: list[list[_Op]] = []
    ids: set[str] = set()
    for op in ops:
        run = runs[-1] if runs else None
        if run is None or (run[0].doc is None) != (op.doc is None) or op.id in ids:
            runs.append([])
            ids = set()
        runs[-1].append(op)
        ids.add(op.id)
    return runs


def bulk(store: DocumentStore, engine, encoder, actions: list[tuple[int, dict[str, Any]]]) -> dict[str, Any]:
    """Apply ``actions`` in line order: a delete followed by a write of the same id leaves the new
    document, a write followed by a delete leaves none. Consecutive lines of one kind on distinct ids
    go to the store together. A line that is invalid, or a document that fails to encode, is reported
    with its line and changes nothing; the others are applied. Counts are of documents (distinct
    ids) by what the request leaves behind; ``items`` gives every line's own result."""
    ops, items = _ops(actions, engine)
    if any(op.doc is not None for op in ops):
        _require_encoder(engine, encoder)
    before = set(store.content_keys(list(dict.fromkeys(op.id for op in ops)))) if ops else set()
    present = set(before)
    last_write: dict[str, Document] = {}  # id -> the document its last applied line wrote
    deleted_now: set[str] = set()
    sentences = 0
    for run in _runs(ops):
        if run[0].doc is None:
            found = [op.id for op in run if op.id in present]
            if found:
                store.delete(found)
            for op in run:
                hit = op.id in present
                items.append({"line": op.line, "id": op.id, "result": "deleted" if hit else "not_found"})
                present.discard(op.id)
                last_write.pop(op.id, None)
                deleted_now.add(op.id)
            continue
        report = write_documents(store, [op.doc for op in run], encoder)
        bad = {d.id: reason for d, reason in report.failed}
        for op in run:
            if op.id in bad:
                items.append({"line": op.line, "id": op.id, "result": "failed", "error": bad[op.id]})
                continue
            items.append({"line": op.line, "id": op.id, "result": "updated" if op.id in present else "created"})
            present.add(op.id)
            last_write[op.id] = op.doc  # type: ignore[assignment]
            sentences += op.doc.n_sentences  # type: ignore[union-attr]
            deleted_now.discard(op.id)
    items.sort(key=lambda item: item["line"])
    failed = [{"id": i["id"], "line": i["line"], "error": i["error"]} for i in items if i["result"] == "failed"]
    return {
        "written": len(last_write),
        "deleted": len(deleted_now & before),
        "missing": [i["id"] for i in items if i["result"] == "not_found"],
        "failed": failed,
        "sentences": sentences,
        "items": items,
    }


class StatsRefresher:
    """One background statistics refresh per index: :meth:`written` after each write schedules a
    refresh ``delay_s`` after the last write (debounced; at most one running per index);
    :meth:`refresh_now` runs one at once (waiting for a running one)."""

    def __init__(self, *, delay_s: float, sample_size: int = 5000, seed: int = 0) -> None:
        self.delay_s = delay_s
        self.sample_size = sample_size
        self.seed = seed
        self._lock = threading.Lock()
        self._timers: dict[str, threading.Timer] = {}
        self._running: dict[str, threading.Lock] = {}
        self.refreshes = 0

    def written(self, name: str, store: DocumentStore) -> None:
        if self.delay_s <= 0:
            return
        with self._lock:
            old = self._timers.pop(name, None)
            if old is not None:
                old.cancel()
            timer = threading.Timer(self.delay_s, self._background, args=(name, store))
            timer.daemon = True
            self._timers[name] = timer
            timer.start()

    def _background(self, name: str, store: DocumentStore) -> None:
        with self._lock:
            self._timers.pop(name, None)
        try:
            self.refresh_now(name, store)
        except Exception as e:  # a failed background refresh is logged; the next write schedules another
            logger.warning("index %s: background statistics refresh failed: %s", name, e)

    def refresh_now(self, name: str, store: DocumentStore):
        with self._lock:
            running = self._running.setdefault(name, threading.Lock())
        with running:
            info = store.stats_info()
            if not info.stale:
                return info
            info = refresh_stats(store, exact=False, sample_size=self.sample_size, seed=self.seed)
            self.refreshes += 1
            logger.info("index %s: statistics refreshed (version %d)", name, info.version)
            return info

    def cancel(self) -> None:
        with self._lock:
            for timer in self._timers.values():
                timer.cancel()
            self._timers.clear()
