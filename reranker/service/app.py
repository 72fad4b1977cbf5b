"""The HTTP "more like this" service: :func:`create_app` builds a FastAPI app over one or more
:class:`~sdr_search.indexer.store.DocumentStore` (embedded or OpenSearch alike).

Routes (the OpenAPI spec is served at ``/openapi.json`` and committed as ``openapi.json``)::

    POST /v1/indices/{index}/more_like_this      two-stage SDR more-like-this (by id or new text)
    GET  /v1/indices/{index}/documents/{id}      a stored document (no vectors)
    PUT  /v1/indices/{index}/documents/{id}      add or replace a document (encoded now)
    DELETE /v1/indices/{index}/documents/{id}    delete a document
    POST /v1/indices/{index}/_bulk               NDJSON: documents to write, ids to delete
    POST /v1/indices/{index}/_refresh_stats      refresh the statistics now (writes make them stale)
    GET  /v1/indices                             the indices served
    GET  /v1/indices/{index}/_find?q=            a document by id, or by words of its text (BM25)
    GET  /ui                                     the "more like this" page (static files; its data through /v1)
    GET  /health                                 every store answers and the encoder loads (else 503); clusters' health
    GET  /metrics                                Prometheus text format

Nothing is loaded or connected at import or in :func:`create_app`: stores open on first use and
the encoder loads on the first new-text request (or the first ``/health``). CPU work (sentence
splitting, encoding, the k-NN stage and the exact rerank) runs in worker threads so the event
loop stays responsive. At most ``max_concurrency`` (default: the CPU cores) more-like-this requests
compute at once, each with ``threads_per_request`` BLAS/FAISS threads (threads x requests <= cores,
:mod:`.compute`); at most ``max_queue`` wait (each at most ``queue_timeout_s``); any more answer 429
at once. The encoder runs one call at a time, with the sentences of every new-text request waiting
for it batched into that call (:class:`~.compute.BatchingEncoder`).
"""

from __future__ import annotations

import hmac
import logging
import threading
import time
from contextlib import asynccontextmanager
from typing import Annotated, Any, Callable, Mapping, Union

from urllib.parse import unquote_to_bytes

import anyio
from fastapi import APIRouter, Depends, FastAPI, Path, Query as QueryParam, Request, Security
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.security import APIKeyHeader
from starlette.convertors import Convertor, register_url_convertor

from sdr_search.indexer.store import DocumentStore
from pydantic import BeforeValidator

from sdr_search.core.documents import ID_PATTERN, ID_RULE, MAX_ID_LENGTH, check_id
from sdr_search.core import deadline
from sdr_search.core.errors import DeadlineExceededError, IndexNotFoundError, InvalidInputError, SDRError

from ..engine import MLTResult, MLTSettings, MoreLikeThis
from ..query import Query
from . import api_models as m
from . import writes
from .compute import BatchingEncoder, CpuGate, ThreadBudget
from .errors import AuthenticationError, error_body, install_error_handlers
from .limits import BodyLimitMiddleware, ConcurrencyLimiter
from .prometheus import CONTENT_TYPE_LATEST, MetricsMiddleware, ServiceMetrics
from .settings import ServiceSettings
from .ui import mount_ui

__all__ = ["create_app", "StoreFactory", "API_KEY_HEADER"]

logger = logging.getLogger(__name__)

API_KEY_HEADER = "X-API-Key"
StoreFactory = Callable[[str], DocumentStore]

_ERRORS = {
    401: "No or wrong X-API-Key (only when the server has an API key).",
    404: "Unknown index or document.",
    409: "The index was built with another model, or has no normalisation statistics yet (`sdr stats`).",
    413: "Request body or source document over the server's limits.",
    422: "Invalid request (every problem is listed).",
    429: "Too many concurrent requests; retry after the Retry-After header's seconds.",
    500: "Internal error.",
    503: "The store's backend cannot be reached.",
    504: "No answer within the request's deadline (SDR_SERVICE_REQUEST_TIMEOUT_S), e.g. while a node is hung.",
}


def _responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    return {c: {"model": m.ErrorResponse, "description": _ERRORS[c]} for c in codes}


class _Index:
    def __init__(self, name: str, store: DocumentStore, engine: MoreLikeThis) -> None:
        self.name = name
        self.store = store
        self.engine = engine


class _Indices:
    """Index name -> store and engine. A mapping is served as given (the caller owns and closes its
    stores); a factory opens stores on demand, keeps only those that answer, and closes them."""

    def __init__(self, stores: Union[Mapping[str, DocumentStore], StoreFactory], encoder: BatchingEncoder | None,
                 mlt_settings: MLTSettings) -> None:
        self._factory: StoreFactory | None = None if isinstance(stores, Mapping) else stores
        self._mlt = mlt_settings
        self._encoder = encoder
        self._lock = threading.Lock()
        self._open: dict[str, _Index] = {}
        if isinstance(stores, Mapping):
            for name, store in stores.items():
                self._open[name] = self._make(name, store)

    def _make(self, name: str, store: DocumentStore) -> _Index:
        return _Index(name, store, MoreLikeThis(store=store, encoder=self._encoder, settings=self._mlt))

    def names(self) -> list[str]:
        return sorted(self._open)

    def items(self) -> list[_Index]:
        return [self._open[k] for k in self.names()]

    def get(self, name: str) -> _Index:
        """Blocking (a factory may connect): call from a worker thread."""
        found = self._open.get(name)
        if found is not None:
            return found
        if self._factory is None:
            served = ", ".join(self.names()) or "none"
            raise IndexNotFoundError(f"no index named {name!r} (this server serves: {served})")
        with self._lock:
            found = self._open.get(name)
            if found is not None:
                return found
            store = self._factory(name)
            try:
                store.counts()  # the index exists and answers; otherwise it is not kept
            except BaseException:
                store.close()
                raise
            self._open[name] = found = self._make(name, store)
            return found

    def close_owned(self) -> None:
        if self._factory is None:
            return
        with self._lock:
            for index in self._open.values():
                try:
                    index.store.close()
                except (OSError, SDRError) as e:
                    logger.warning("closing index %s: %s", index.name, e)
            self._open.clear()


class _Service:
    """What the routes share: settings, indices, encoder, limiter, metrics."""

    def __init__(self, *, indices: _Indices, encoder: BatchingEncoder | None, settings: ServiceSettings,
                 metrics: ServiceMetrics) -> None:
        self.indices = indices
        self.encoder = encoder
        self.settings = settings
        self.metrics = metrics
        self.limiter = ConcurrencyLimiter(
            settings.concurrency(), max_queue=settings.max_queue, timeout_s=settings.queue_timeout_s
        )
        self.budget = ThreadBudget(settings.threads())
        self.refresher = writes.StatsRefresher(delay_s=settings.stats_refresh_delay_s)
        key = settings.api_key.get_secret_value() if settings.api_key is not None else None
        self.api_key: bytes | None = key.encode("utf-8") if key else None

    # -- more like this (runs in a worker thread) ----------------------------------------------
    def more_like_this(self, index_name: str, req: m.MoreLikeThisRequest) -> MLTResult:
        self.budget.apply()
        return self.indices.get(index_name).engine.run(Query.from_request(req))

    # -- writes (run in a worker thread) ----------------------------------------------------------
    def put_document(self, index_name: str, doc_id: str, body: writes.DocumentBody) -> writes.WriteResponse:
        self.budget.apply()
        index = self.indices.get(index_name)
        result, sentences = writes.put_document(index.store, index.engine, self.encoder, doc_id, body)
        self.refresher.written(index_name, index.store)
        return writes.WriteResponse(index=index_name, id=doc_id, result=result, sentences=sentences,
                                    stats_stale=index.store.stats_info().stale)

    def delete_document(self, index_name: str, doc_id: str) -> writes.WriteResponse:
        index = self.indices.get(index_name)
        writes.delete_document(index.store, doc_id)
        self.refresher.written(index_name, index.store)
        return writes.WriteResponse(index=index_name, id=doc_id, result="deleted",
                                    stats_stale=index.store.stats_info().stale)

    def bulk(self, index_name: str, raw: bytes) -> writes.BulkResponse:
        self.budget.apply()
        actions = writes.bulk_actions(raw, max_documents=self.settings.max_bulk_documents)
        index = self.indices.get(index_name)
        out = writes.bulk(index.store, index.engine, self.encoder, actions)
        if any(item["result"] in ("created", "updated", "deleted") for item in out["items"]):
            self.refresher.written(index_name, index.store)
        return writes.BulkResponse(index=index_name, stats_stale=index.store.stats_info().stale, **out)

    def refresh_stats(self, index_name: str) -> writes.StatsResponse:
        self.budget.apply()
        index = self.indices.get(index_name)
        info = self.refresher.refresh_now(index_name, index.store)
        return writes.StatsResponse(index=index_name, version=info.version, stale=info.stale,
                                    documents=int(index.store.counts().get("documents", 0)))

    def find(self, index_name: str, q: str, size: int) -> m.FindResponse:
        """Documents to start from (the page's source picker): the document whose id is ``q``, then
        the best BM25 matches of ``q`` against the documents' text (title and paragraphs)."""
        store = self.indices.get(index_name).store
        hits: list[m.FoundDocument] = []
        try:
            exact = store.documents_of([check_id(q.strip())])
        except InvalidInputError:  # not an id: text only
            exact = {}
        for doc in exact.values():
            hits.append(m.FoundDocument(id=doc.id, title=doc.title, match="id"))
        lexical = store.lexical_search(q, size, exclude_ids=list(exact))
        titles = store.documents_of(lexical.ids) if lexical.ids else {}
        for doc_id, score in zip(lexical.ids, lexical.scores):
            if doc_id in titles and float(score) > 0:
                hits.append(m.FoundDocument(id=doc_id, title=titles[doc_id].title, match="text", score=float(score)))
        return m.FindResponse(index=index_name, hits=hits[:size])

    def get_document(self, index_name: str, doc_id: str) -> m.DocumentResponse:
        index = self.indices.get(index_name)
        doc = index.store.get(doc_id).document
        return m.DocumentResponse(
            id=doc.id, title=doc.title, metadata=dict(doc.metadata), paragraphs=[list(p) for p in doc.paragraphs]
        )

    # -- health ---------------------------------------------------------------------------------
    async def health(self) -> tuple[int, dict[str, Any]]:
        indices: dict[str, dict[str, Any]] = {}
        ok = True
        degraded = False
        for index in self.indices.items():
            cluster = await self._cluster_health(index)
            # degraded: the index itself is not green (another index's missing replica does not count), or a
            # node does not answer (hung: the cluster has not dropped it yet, and reads meeting it wait)
            hung = bool(cluster and cluster.get("unanswering_nodes"))
            worse = cluster is not None and (hung or (cluster.get("index_status") or cluster["status"]) != "green")
            degraded = degraded or worse
            try:
                with anyio.fail_after(self.settings.health_timeout_s):
                    counts = await anyio.to_thread.run_sync(_within_s, self.settings.health_timeout_s,
                                                            index.store.verify, abandon_on_cancel=True)
                indices[index.name] = {"status": "degraded" if worse else "ok", "documents": int(counts.get("documents", 0))}
            except (TimeoutError, DeadlineExceededError):
                # with a hung node known, a read that waited on one of its shard copies: the cluster serves
                # reads that meet its other copies, and drops the node within its fault detection
                ok = ok and hung
                indices[index.name] = {"status": "degraded" if hung else "unavailable",
                                       "error": f"no answer within {self.settings.health_timeout_s} s"}
            except SDRError as e:
                ok = False
                indices[index.name] = {"status": "unavailable", "error": f"{type(e).__name__}: {e}"}
            except Exception as e:  # a health check reports every failure instead of raising
                ok = False
                logger.warning("health: index %s failed", index.name, exc_info=e)
                indices[index.name] = {"status": "unavailable", "error": type(e).__name__}
            if cluster is not None:
                indices[index.name]["cluster"] = cluster
        if self.encoder is None:
            encoder: dict[str, Any] = {"status": "absent"}
        else:
            try:
                model = await anyio.to_thread.run_sync(self.encoder.ensure_loaded)
                encoder = {"status": "ok", "model": model}
            except SDRError as e:
                ok = False
                encoder = {"status": "unavailable", "error": f"{type(e).__name__}: {e}"}
            except Exception as e:  # e.g. a torch error while loading weights
                ok = False
                logger.warning("health: the encoder failed to load", exc_info=e)
                encoder = {"status": "unavailable", "error": type(e).__name__}
        body = {"status": "unavailable" if not ok else "degraded" if degraded else "ok", "indices": indices, "encoder": encoder}
        return (200 if ok else 503), body

    async def _cluster_health(self, index: Any) -> dict[str, Any] | None:
        """The health of the cluster behind ``index`` (None: no cluster, the embedded store); status
        ``unknown`` with the reason when it does not answer within ``health_timeout_s``."""
        try:
            with anyio.fail_after(self.settings.health_timeout_s):
                return await anyio.to_thread.run_sync(lambda: index.store.cluster_health(
                    timeout=self.settings.health_timeout_s / 2), abandon_on_cancel=True)
        except TimeoutError:
            return {"status": "unknown", "error": f"no answer within {self.settings.health_timeout_s} s"}
        except SDRError as e:
            return {"status": "unknown", "error": f"{type(e).__name__}: {e}"}
        except Exception as e:  # a health check reports every failure instead of raising
            logger.warning("health: the cluster of index %s failed", index.name, exc_info=e)
            return {"status": "unknown", "error": type(e).__name__}


def _service(request: Request) -> _Service:
    return request.app.state.sdr


async def _compute(request: Request, work: Callable[..., Any], *args: Any, read: bool = False) -> Any:
    """``work(*args)`` in a worker thread, in one of the service's bounded compute slots, holding the
    CPU gate shared (an encoder batch holds it whole; :class:`~sdr_search.reranker.service.compute.CpuGate`).
    A ``read`` runs within the request's deadline (:func:`_bounded`)."""
    service = _service(request)
    seconds = service.settings.request_timeout_s if read else 0.0
    end = time.monotonic() + seconds if seconds > 0 else None
    async with service.limiter.slot(None if end is None else end - time.monotonic()):
        gate = service.encoder.gate if service.encoder is not None else None
        return await _bounded(end, seconds, _gated, gate, work, *args)


# A read's thread gives up at its deadline by itself (its store requests are cut to it, the engine checks it
# between stages); the answer waits this much longer for it before answering 504 without it.
_DEADLINE_GRACE_S = 1.0


async def _bounded(end: float | None, seconds: float, work: Callable[..., Any], *args: Any) -> Any:
    """``work(*args)`` in a worker thread, within the deadline ``end`` (``time.monotonic()``; None: none): the
    thread runs inside :func:`sdr_search.core.deadline.at`, and the answer is a 504
    (:class:`DeadlineExceededError`) at most ``_DEADLINE_GRACE_S`` after it even if the thread is still busy
    (it is left to finish; a CPU stage that does not check the deadline cannot be stopped from outside)."""
    if end is None:
        return await run_in_threadpool(work, *args)

    def within() -> Any:
        with deadline.at(end, seconds):
            return work(*args)

    try:
        with anyio.fail_after(max(0.0, end - time.monotonic()) + _DEADLINE_GRACE_S):
            return await anyio.to_thread.run_sync(within, abandon_on_cancel=True)
    except TimeoutError:
        raise DeadlineExceededError(deadline.message("computing the answer", seconds)) from None


async def _read(request: Request, work: Callable[..., Any], *args: Any) -> Any:
    """A light read (no compute slot) in a worker thread, within the request's deadline."""
    seconds = _service(request).settings.request_timeout_s
    return await _bounded(time.monotonic() + seconds if seconds > 0 else None, seconds, work, *args)


def _within_s(seconds: float, work: Callable[[], Any]) -> Any:
    with deadline.within(seconds, "SDR_SERVICE_HEALTH_TIMEOUT_S"):
        return work()


def _gated(gate: CpuGate | None, work: Callable[..., Any], *args: Any) -> Any:
    if gate is None:
        return work(*args)
    with gate.shared():
        return work(*args)


_api_key_header = APIKeyHeader(
    name=API_KEY_HEADER, auto_error=False,
    description="Required on /v1/... only when the server runs with SDR_SERVICE_API_KEY set.",
)


async def _require_api_key(request: Request, key: Annotated[str | None, Security(_api_key_header)] = None) -> None:
    expected = _service(request).api_key
    if expected is None:
        return
    if key is None or not hmac.compare_digest(key.encode("utf-8", "surrogateescape"), expected):
        raise AuthenticationError(f"this server requires a valid {API_KEY_HEADER} header")


IndexName = Annotated[
    str, Path(pattern=m.INDEX_PATTERN, description="Index name (an embedded store is served as `default`).")
]
DocId = Annotated[  # the one id rule of the indexer and the server (sdr_search.core.documents.check_id)
    str, Path(min_length=1, max_length=MAX_ID_LENGTH, pattern=ID_PATTERN, description="Document id: " + ID_RULE),
    BeforeValidator(check_id),
]


class _AnyIdConvertor(Convertor[str]):
    """The URL's id: everything after ``documents/``, line breaks included (Starlette's ``path``
    convertor, ``.*``, stops at a newline and its ``$`` matches before a final one, so ``a%0A``
    would have been id ``a``); :data:`DocId` then refuses what breaks the id rule, by name."""

    regex = "(?s:.*)"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return str(value)


register_url_convertor("any_id", _AnyIdConvertor())


def _path_id(request: Request, doc_id: DocId) -> str:
    """The URL's id (:data:`DocId`), refused where its percent-encoded bytes are not UTF-8: the
    server decodes them with replacement, so ``%ED%A0%80`` (a lone surrogate) would otherwise
    become U+FFFD and be stored as another id."""
    raw = request.scope.get("raw_path")
    if raw is not None:
        try:
            unquote_to_bytes(raw).decode("utf-8")
        except UnicodeDecodeError as e:
            bad = unquote_to_bytes(raw)[e.start : e.end]
            raise RequestValidationError([{
                "type": "value_error", "loc": ("path", "doc_id"),
                "msg": f"the id is not valid UTF-8 once percent-decoded ({' '.join(f'%{b:02X}' for b in bad)}): "
                       "an id must be valid Unicode (a lone surrogate, such as %ED%A0%80, is not)",
            }]) from None
    return doc_id


PathId = Annotated[str, Depends(_path_id)]


def _build_router() -> APIRouter:
    v1 = APIRouter(prefix="/v1", dependencies=[Depends(_require_api_key)], tags=["v1"])

    @v1.post(
        "/indices/{index}/more_like_this",
        response_model=m.MoreLikeThisResponse,
        response_model_exclude_none=True,
        responses=_responses(401, 404, 409, 413, 422, 429, 500, 503, 504),
        summary="Documents most similar to a document (two-stage SDR, or hybrid with BM25)",
        operation_id="moreLikeThis",
        description="Stage 1: nested sentence k-NN candidates (filtered by `filter` when given); stage 2: the "
        "exact SDR score of the top K with corpus-wide normalisation. With `method: hybrid` the lexical (BM25) "
        "top K joins the candidates and BM25, SDR and the mean-vector cosine are fused per query (`fusion`, "
        "`weights`). An indexed source is left out of its own results.",
    )
    async def more_like_this(index: IndexName, body: m.MoreLikeThisRequest, request: Request) -> m.MoreLikeThisResponse:
        svc = _service(request)
        result = await _compute(request, svc.more_like_this, index, body, read=True)
        svc.metrics.candidates.observe(result.candidates)
        svc.metrics.rerank.observe(result.timings_ms.get("rerank", 0.0) / 1e3)
        return m.response_from(result, index)

    @v1.get(
        "/indices/{index}/documents/{doc_id:any_id}",
        response_model=m.DocumentResponse,
        responses=_responses(401, 404, 422, 500, 503, 504),
        summary="A stored document (title, metadata, paragraphs as sentences; no vectors)",
        operation_id="getDocument",
    )
    async def get_document(index: IndexName, doc_id: PathId, request: Request) -> m.DocumentResponse:
        return await _read(request, _service(request).get_document, index, doc_id)

    @v1.put(
        "/indices/{index}/documents/{doc_id:any_id}",
        response_model=writes.WriteResponse,
        response_model_exclude_none=True,
        responses=_responses(401, 404, 409, 413, 422, 429, 500, 503),
        summary="Add or replace a document (encoded now, visible to the next query)",
        operation_id="putDocument",
        description="Segmented as the index's documents were and encoded by the server's model. The index's "
        "statistics become stale and are refreshed in the background (SDR_SERVICE_STATS_REFRESH_DELAY_S).",
    )
    async def put_document(index: IndexName, doc_id: PathId, body: writes.DocumentBody, request: Request):
        return await _compute(request, _service(request).put_document, index, doc_id, body)

    @v1.delete(
        "/indices/{index}/documents/{doc_id:any_id}",
        response_model=writes.WriteResponse,
        response_model_exclude_none=True,
        responses=_responses(401, 404, 422, 429, 500, 503),
        summary="Delete a document",
        operation_id="deleteDocument",
    )
    async def delete_document(index: IndexName, doc_id: PathId, request: Request):
        return await _compute(request, _service(request).delete_document, index, doc_id)

    @v1.post(
        "/indices/{index}/_bulk",
        response_model=writes.BulkResponse,
        responses=_responses(401, 404, 409, 413, 422, 429, 500, 503),
        summary="Add, replace and delete documents in one request (NDJSON)",
        operation_id="bulk",
        description="One JSON object per line: a document record (`id` and one of `text`, `paragraphs`, "
        "`sections`; optional `title`, `metadata`) to add or replace, or `{\"delete\": \"<id>\"}`. The lines "
        "are applied in order (a delete then a write of one id leaves the new document). At most "
        "SDR_SERVICE_MAX_BULK_DOCUMENTS lines; a line that is not a JSON object refuses the whole request (422), an "
        "invalid document or id is reported with its line and the other lines are applied. `items` gives every "
        "line's result; the counts are of documents.",
        openapi_extra={"requestBody": {"required": True, "content": {"application/x-ndjson": {"schema": {"type": "string"}}}}},
    )
    async def bulk(index: IndexName, request: Request):
        raw = await request.body()
        return await _compute(request, _service(request).bulk, index, raw)

    @v1.post(
        "/indices/{index}/_refresh_stats",
        response_model=writes.StatsResponse,
        responses=_responses(401, 404, 429, 500, 503),
        summary="Refresh the index's normalisation statistics now (when stale)",
        operation_id="refreshStats",
    )
    async def refresh_stats(index: IndexName, request: Request):
        return await _compute(request, _service(request).refresh_stats, index)

    @v1.get(
        "/indices",
        response_model=m.IndicesResponse,
        responses=_responses(401),
        summary="The indices this server serves",
        operation_id="listIndices",
    )
    async def list_indices(request: Request) -> m.IndicesResponse:
        return m.IndicesResponse(indices=_service(request).indices.names())

    @v1.get(
        "/indices/{index}/_find",
        response_model=m.FindResponse,
        response_model_exclude_none=True,
        responses=_responses(401, 404, 422, 500, 503, 504),
        summary="Find a document to start from: by id, or by words of its title or text (BM25)",
        operation_id="findDocuments",
        description="The document whose id is `q` (when there is one), then the best BM25 matches of `q` against "
        "the documents' text (title and paragraphs), at most `size` in all. The /ui page's source picker uses it.",
    )
    async def find(
        index: IndexName, request: Request,
        q: Annotated[str, QueryParam(min_length=1, max_length=1000, pattern=m.NOT_BLANK_PATTERN,
                                     description="An id, or words of a title or text.")],
        size: Annotated[int, QueryParam(ge=1, le=50, description="Most documents to return.")] = 10,
    ) -> m.FindResponse:
        # a look-up as the page's box is typed (one BM25 search and a read of titles), not a query: it does
        # not wait for, or take, one of the bounded query slots (as GET .../documents/{id})
        return await _read(request, _service(request).find, index, q, size)

    return v1


def create_app(
    *,
    stores: Union[Mapping[str, DocumentStore], StoreFactory],
    encoder: Any = None,
    settings: ServiceSettings | None = None,
    mlt_settings: MLTSettings | None = None,
) -> FastAPI:
    """The service over ``stores`` (index name -> store, or a factory ``name -> store``).

    ``encoder`` (a :class:`~sdr_search.core.encoder.SentenceEncoder`, loaded lazily) encodes new-text
    sources; without one only indexed documents can be sources. Stores given as a mapping belong to
    the caller (close them after the server stops); stores opened by a factory are closed at shutdown.
    """
    settings = settings or ServiceSettings()
    gate = CpuGate() if settings.encoder_exclusive else None
    locked = (BatchingEncoder(encoder, max_batch_tokens=settings.encode_batch_tokens, gate=gate)
              if encoder is not None else None)
    indices = _Indices(stores, locked, mlt_settings or MLTSettings())
    metrics = ServiceMetrics()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        try:
            yield
        finally:
            app.state.sdr.refresher.cancel()
            indices.close_owned()

    app = FastAPI(
        title="sdr-search reranker",
        version="1",
        summary="Long-document 'more like this' with SDR (self-supervised document similarity ranking).",
        description="Errors answer `{\"error\": {\"type\", \"message\"}}`: 401 missing/wrong API key, 404 unknown "
        "index or document, 409 model mismatch or missing statistics, 413 body or source too large, 422 "
        "invalid request, 429 overloaded (Retry-After), 503 backend unreachable. With `SDR_SERVICE_API_KEY` "
        "set, /v1/... requires the `X-API-Key` header; /health, /metrics and the API's own description "
        "(/openapi.json, and the pages /docs and /redoc unless SDR_SERVICE_DOCS=false) stay open: they hold no data; "
        "so do the files of the page /ui (SDR_SERVICE_UI), which sends the key with its own calls.",
        lifespan=lifespan,
        docs_url="/docs" if settings.docs else None,
        redoc_url="/redoc" if settings.docs else None,
    )
    app.state.sdr = _Service(indices=indices, encoder=locked, settings=settings, metrics=metrics)
    install_error_handlers(app, on_error=metrics.error)
    app.include_router(_build_router())
    if settings.ui:
        mount_ui(app)

    @app.get(
        "/health", response_model=m.HealthResponse, tags=["ops"],
        responses={503: {"model": m.HealthResponse, "description": "A store or the encoder is unavailable."}},
        summary="Every index answers and the encoder model loads",
        operation_id="health",
    )
    async def health(request: Request):
        status, body = await _service(request).health()
        return JSONResponse(body, status_code=status)

    @app.get(
        "/metrics", tags=["ops"], response_class=Response,
        responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}, "description": "Prometheus text format."}},
        summary="Prometheus metrics",
        operation_id="metrics",
    )
    async def prometheus(request: Request) -> Response:
        return Response(_service(request).metrics.render(), media_type=CONTENT_TYPE_LATEST)

    app.add_middleware(
        BodyLimitMiddleware, max_bytes=settings.max_body_bytes,
        on_reject=lambda: metrics.error("RequestTooLargeError", 413), body=error_body,
    )
    app.add_middleware(MetricsMiddleware, metrics=metrics, routes=lambda: app.router.routes)
    return app
