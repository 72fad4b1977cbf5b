"""The OpenSearch store's transport: one opensearch-py client, its errors as domain errors, retries
with backoff, bulk writes, ``_mget`` and point-in-time scans.

Nothing connects in ``__init__``: the client is created on first use and released by
:meth:`Transport.close` (a client passed in is the caller's and is not closed). Connection
failures raise :class:`~sdr_search.core.errors.BackendUnavailableError`, a missing index
:class:`~sdr_search.core.errors.IndexNotFoundError`, rejected bulk items
:class:`~sdr_search.core.errors.BulkWriteError` (after retrying 429s with backoff).

Retries: with one node URL opensearch-py's own retries are off (it re-sends at once, with no backoff,
whatever the body size). With several (a cluster's nodes, comma-separated: :mod:`.hosts`), its transport
sends a request whose node cannot be reached or does not answer within the timeout to the next live
node at once, each other node once, and leaves the failed node out for ``dead_timeout`` (doubled at
each further failure). On top of that, the transport retries a request answered 429, 502, 503 or 504, or that could not
connect, ``max_retries`` times with the one retry policy, :mod:`sdr_search.core.retry`
(:meth:`OpenSearchSettings.backoff`: ``retry_backoff`` doubled, capped by ``retry_backoff_max``);
a timeout is not retried there (on one node the request may still be running). Every request the store makes is idempotent (writes carry stable
``_id`` values), so a retry cannot double a document.

Inside a request's deadline (:mod:`sdr_search.core.deadline`, set by the HTTP service for reads) every
request's socket timeout is cut to the time left and none is sent past it (:mod:`.connection`), and no
backoff sleeps past it: a hung node costs a read its deadline, not ``timeout`` once per node and retry.
With several nodes, a request that times out has every node asked whether it answers, and reads then
prefer the shard copies on the nodes that do (:class:`.connection.NodeRouter`).
"""

from __future__ import annotations

import logging
import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Mapping, Sequence

from sdr_search.core import deadline
from sdr_search.core.errors import (
    BackendUnavailableError,
    BulkWriteError,
    DeadlineExceededError,
    IndexNotFoundError,
    InvalidInputError,
    OverloadedError,
    StoreError,
)
from sdr_search.core.retry import retry_call

from .bulk import run_bulk
from .connection import NodeRouter, connection_class
from .hosts import parse_urls, transport_retries
from .requests import (
    build_mget_body, build_mget_stored_body, build_scan_query, build_sources_search, bulk_lines, document_os_id,
    error_from_response, shard_failure,
)
from .settings import OpenSearchSettings

__all__ = ["Transport", "chunks"]

logger = logging.getLogger(__name__)

_MGET_CHUNK = 500
# _mget item errors meaning "this shard is not started yet" (an index another process has just
# created, a node restarting): the request is retried like a 503, never reported as a rejection.
_SHARD_NOT_READY = frozenset({"no_shard_available_action_exception", "unavailable_shards_exception",
                              "illegal_index_shard_state_exception", "shard_not_found_exception"})


def _transient(error: BaseException, overload: bool) -> bool:
    """Whether a failed request may succeed when sent again: 429 (when ``overload``), 502, 503,
    504, or no connection. A timeout is not (the request may still be running)."""
    from opensearchpy import exceptions as ox

    if isinstance(error, OverloadedError):
        return overload
    if not isinstance(error, BackendUnavailableError):
        return False
    cause = error.__cause__
    if isinstance(cause, ox.ConnectionTimeout):
        return False
    if isinstance(cause, ox.ConnectionError):
        return True
    return isinstance(cause, ox.TransportError) and cause.status_code in (502, 503, 504)


def _whole(response: Any) -> Any:
    """``response``, unless it is a partial search answer (some shards failed; :func:`shard_failure`): that is
    raised as the error response it stands for, so a 503 (a shard copy lost with its node) is retried like
    one, and the store never ranks from the documents of some shards only."""
    failure = shard_failure(response)
    if failure is not None:
        from opensearchpy import exceptions as ox

        status, info = failure
        raise ox.TransportError(status, info["error"]["type"], info)
    return response


def _pit_lost(error: Exception) -> bool:
    """Whether a scan page failed because its point in time no longer exists."""
    cause = error.__cause__
    return "search_context_missing_exception" in str(getattr(cause, "info", "") or "") + str(error)


def chunks(seq: Sequence[Any], n: int) -> Iterator[Sequence[Any]]:
    for i in range(0, len(seq), n):
        yield seq[i : i + n]


class Transport:
    """The client of one store (``url``, ``settings``; ``client``: one of the caller's) and the
    requests every part of the store sends through it. ``index`` (the configured name) is named in
    error messages; ``on_index_missing`` is called whenever a request finds an index missing (the
    store forgets what it knew of it)."""

    def __init__(self, url: str, settings: OpenSearchSettings, *, index: str, client: Any = None,
                 on_index_missing: Callable[[], None] = lambda: None) -> None:
        self.url = url
        self.urls = parse_urls(url)  # every node of a cluster (comma-separated in url)
        self.settings = settings
        self.index = index
        self.client = client  # None until first use (when the store creates it)
        self.owns_client = client is None
        self.lock = threading.RLock()
        self._on_index_missing = on_index_missing
        # several nodes: reads avoid a node found hung (.connection), each node asked within a quarter of the
        # request timeout (at most 2 s), for dead_timeout
        self.router = NodeRouter(probe_timeout=min(2.0, settings.timeout / 4), hold_s=settings.dead_timeout,
                                 active=len(self.urls) > 1)
        self.router.connections = lambda: getattr(self.os().transport.connection_pool, "orig_connections", ())

    def index_missing(self) -> None:
        """A request's answer said an index is missing (an ``_mget`` item's error): forget it, as for a
        request that failed so."""
        self._on_index_missing()

    def os(self) -> Any:
        """The opensearch-py client, created on first use."""
        if self.client is None:
            with self.lock:
                if self.client is None:
                    from opensearchpy import OpenSearch

                    s = self.settings
                    kwargs: dict[str, Any] = {
                        "hosts": self.urls, "timeout": s.timeout, "http_compress": s.http_compress,
                        "verify_certs": s.verify_certs, "connection_class": connection_class(self.router),
                    }
                    if s.ca_certs:
                        kwargs["ca_certs"] = s.ca_certs
                    if s.username:
                        kwargs["http_auth"] = (s.username, s.password.get_secret_value() if s.password else "")
                    if not s.verify_certs:
                        kwargs["ssl_show_warn"] = False
                    # One node: no transport retries (they re-send at once, bulk bodies included); call()
                    # retries with backoff. Several: the transport sends a request whose node failed (no
                    # connection, or no answer in time: a hung node) to the next live node at once, and
                    # leaves the failed one out for dead_timeout; call()'s backoff comes on top when all fail.
                    kwargs["max_retries"] = transport_retries(len(self.urls))
                    kwargs["retry_on_timeout"] = len(self.urls) > 1
                    kwargs["dead_timeout"] = s.dead_timeout
                    self.client = OpenSearch(**kwargs)
        return self.client

    def close(self) -> None:
        """Release the client (when this transport created it); the next request creates another."""
        with self.lock:
            if self.client is not None and self.owns_client:
                self.client.close()
                self.client = None

    @contextmanager
    def calls(self, what: str, index: str | None = None) -> Iterator[None]:
        """Map opensearch-py exceptions raised inside to domain errors (cause chained)."""
        from opensearchpy import exceptions as ox

        try:
            yield
        except ox.ImproperlyConfigured as e:
            raise InvalidInputError(f"invalid OpenSearch client settings for {self.url}: {e}") from e
        except ox.ConnectionError as e:  # includes timeouts and TLS failures
            raise BackendUnavailableError(f"OpenSearch at {self.url} cannot be reached during {what}: {e}") from e
        except ox.TransportError as e:
            err = error_from_response(e.status_code, e.info, what=what, index=index or self.index)
            if isinstance(err, IndexNotFoundError):
                self._on_index_missing()
            raise err from e
        except ox.OpenSearchException as e:
            raise StoreError(f"OpenSearch client error during {what}: {e}") from e

    def call(self, what: str, fn: Any, *, index: str | None = None, retry_overload: bool = True) -> Any:
        """``fn()`` inside :meth:`calls`, retried with backoff while the failure is transient
        (see the module docstring). ``retry_overload`` False leaves 429s to the caller (the bulk
        loop retries rejected items itself)."""

        def once() -> Any:
            with self.calls(what, index=index):
                return _whole(fn())

        return retry_call(once, backoff=self.settings.backoff(), retry_if=lambda e: _transient(e, retry_overload),
                          what=what, log=logger)

    def cluster_health(self, index: str, *, timeout: float | None = None) -> dict[str, Any]:
        """``_cluster/health`` of the cluster and of ``index``, for ``/health`` (one request, not retried with
        backoff: a health check reports what it sees; the client still tries another node when the first cannot
        be reached or does not answer in time). With ``timeout``, every node is first asked to answer within it
        (:meth:`unanswering_nodes`): those that do not are listed as ``unanswering_nodes`` and left out of the
        client's rotation like a node that failed a request, and the health request is bounded by it (retries on
        other nodes included)."""
        hung = self.unanswering_nodes(timeout) if timeout is not None and len(self.urls) > 1 else []
        if hung:
            pool = self.os().transport.connection_pool
            for connection in list(pool.connections):
                if connection.host in hung:
                    pool.mark_dead(connection)
        fields = ("status", "number_of_nodes", "number_of_data_nodes", "unassigned_shards", f"indices.{index}.status")
        params: dict[str, Any] = {"level": "indices", "filter_path": ",".join(fields)}
        try:
            with deadline.within(timeout, "half of SDR_SERVICE_HEALTH_TIMEOUT_S"), \
                    self.calls("reading the cluster's health", index=index):
                r = self.os().cluster.health(params=params)
        except (BackendUnavailableError, StoreError, DeadlineExceededError) as e:
            if not hung:
                raise
            return {"status": "unknown", "error": f"{type(e).__name__}: {e}", "unanswering_nodes": hung}
        health = {"status": r.get("status", "unknown"), "nodes": r.get("number_of_nodes"),
                  "data_nodes": r.get("number_of_data_nodes"), "unassigned_shards": r.get("unassigned_shards"),
                  "index_status": ((r.get("indices") or {}).get(index) or {}).get("status")}
        if hung:
            health["unanswering_nodes"] = hung
        return health

    def unanswering_nodes(self, timeout: float) -> list[str]:
        """The node URLs (of the ones configured) that do not answer within ``timeout`` seconds, asked all at
        once (:meth:`.connection.NodeRouter.probe`: reads then avoid them). A node whose process is hung (a
        long GC pause, SIGSTOP) keeps its sockets open: the cluster notices only after its fault detection
        (about 30 s by default); this sees it at once, for ``/health``."""
        return self.router.probe(timeout)

    def search_params(self) -> dict[str, str]:
        """The query parameters of every search the store sends: ``cancel_after_time_interval`` = the store's
        request timeout (``settings.timeout``), so that when the store stops waiting, the node stops the search
        too (it cancels the search's task, and the plugin's loops and OpenSearch's own stop at their next check)
        instead of finishing work nobody reads. Inside a request's deadline, the time left when it is less."""
        left = deadline.remaining()
        seconds = self.settings.timeout if left is None else max(0.001, min(self.settings.timeout, left))
        return {"cancel_after_time_interval": f"{max(1, int(seconds * 1000))}ms"}

    def msearch(self, what: str, searches: Sequence[tuple[str, Mapping[str, Any]]]) -> list[Mapping[str, Any]]:
        """The answers of the searches ``(index, search body)``, in order, in one ``_msearch`` (one round trip);
        an answer's error raises as the request's own would (an index missing, a 503 retried)."""
        body: list[dict[str, Any]] = []
        for index, search in searches:
            body += [{"index": index}, dict(search)]
        return list(self.msearch_body(what, body, index=searches[0][0])["responses"]) if searches else []

    def msearch_body(self, what: str, body: Sequence[Mapping[str, Any]], *, index: str | None = None) -> Mapping[str, Any]:
        """The answer of one ``_msearch`` of ``body`` (header and search lines, as built): every path's
        ``_msearch``. A search answered with an error, or partially (some shards failed), raises inside the
        retried call as a request answered so would: a 429 (a full search queue, a tripped circuit breaker) or
        502-504 is retried with the one backoff policy, and only the searches that failed are sent again (the
        others' answers are kept, as the bulk loop keeps its written items), so that readers contending for a
        full queue converge instead of each re-sending every search; any other error maps to its domain error."""
        from opensearchpy import exceptions as ox

        searches = [(body[i], body[i + 1]) for i in range(0, len(body), 2)]
        answers: list[Mapping[str, Any] | None] = [None] * len(searches)
        pending = list(range(len(searches)))

        def msearch() -> Mapping[str, Any]:
            lines = [line for i in pending for line in searches[i]]
            r = self.os().msearch(body=lines, params=self.search_params())
            failed: list[int] = []
            first: Exception | None = None
            for i, item in zip(pending, r["responses"]):
                failure = (int(item.get("status", 500)), item) if "error" in item else shard_failure(item)
                if failure is None:
                    answers[i] = item
                    continue
                failed.append(i)
                if first is None:
                    status, info = failure
                    err = info["error"]
                    first = ox.TransportError(status, str(err.get("type") if isinstance(err, Mapping) else err), info)
            pending[:] = failed
            if first is not None:
                raise first
            return {**r, "responses": list(answers)}

        return self.call(what, msearch, index=index)

    def counts(self, searches: Sequence[tuple[str, Mapping[str, Any] | None]],
               more: Sequence[tuple[str, Mapping[str, Any]]] = ()) -> tuple[list[int], list[Mapping[str, Any]]]:
        """How many documents each ``(index, body)`` of ``searches`` matches (``body``: a ``_count`` body, None for
        every document), as ``_count`` would say, and the answers of the searches ``more`` (``(index, search body)``),
        all in one ``_msearch`` (:meth:`msearch`)."""
        counting = [(index, {"size": 0, "track_total_hits": True, **(dict(query) if query else {})})
                    for index, query in searches]
        answers = self.msearch("counting documents", [*counting, *more])
        return [int(item["hits"]["total"]["value"]) for item in answers[: len(searches)]], answers[len(searches):]

    # -- reads by id ------------------------------------------------------------------------------
    def mget(self, what: str, body: Mapping[str, Any], *, index: str | None = None) -> list[dict[str, Any]]:
        """The ``docs`` of one ``_mget``, retried (as a 503) while an item's shard is not started."""
        from opensearchpy import exceptions as ox

        def mget() -> list[dict[str, Any]]:
            docs = self.os().mget(body=body, index=index)["docs"]
            for d in docs:
                err = d.get("error")
                if isinstance(err, Mapping) and err.get("type") in _SHARD_NOT_READY:
                    raise ox.TransportError(503, str(err["type"]), d)
            return docs

        return self.call(what, mget, index=index)

    def _found(self, index: str, ids: Sequence[str], body_of: Callable[[list[str]], Mapping[str, Any]],
               what: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
        """``(id, _mget answer)`` of the ids that exist in ``index``, by ``_mget`` of at most 500 ids
        (``body_of(chunk)``); an item's error raises."""
        for chunk in chunks(list(dict.fromkeys(ids)), _MGET_CHUNK):
            for doc_id, d in zip(chunk, self.mget(what, body_of(chunk), index=index)):
                if "error" in d:
                    raise error_from_response(404, d, what=what, index=index)
                if d.get("found"):
                    yield doc_id, d

    def mget_sources(self, index: str, ids: Sequence[str], fields: Sequence[str], what: str) -> dict[str, dict]:
        """``id -> _source`` (filtered to ``fields``) for the ids that exist in ``index``."""
        return {doc_id: d["_source"] for doc_id, d in self._found(index, ids, lambda c: build_mget_body(c, fields), what)}

    def mget_stored(self, index: str, ids: Sequence[str], field: str, what: str) -> dict[str, Any]:
        """``id -> value`` of the stored field ``field`` (its first value) for the ids that exist in ``index``
        and have it: real time, without ``_source`` (:func:`build_mget_stored_body`)."""
        found = self._found(index, ids, lambda c: build_mget_stored_body(c, [field]), what)
        return {doc_id: values[0] for doc_id, d in found if (values := (d.get("fields") or {}).get(field))}

    def search_sources(self, index: str, ids: Sequence[str], fields: Sequence[str], what: str) -> dict[str, dict]:
        """``id -> _source`` (filtered to ``fields``) for the ids in ``index`` that searches see, by searches of
        at most 500 ids (:func:`build_sources_search`): for reads of many documents that a search found (the
        hits to present, the candidates to filter), where a real-time ``_mget`` of a derived-source index would
        rebuild every document's sentence vectors first."""
        unique = list(dict.fromkeys(str(i) for i in ids))
        found: dict[str, dict] = {}
        for chunk in chunks(unique, _MGET_CHUNK):
            wanted = {document_os_id(i): i for i in chunk}
            r = self.call(what, lambda chunk=chunk: self.os().search(
                index=index, body=build_sources_search(chunk, fields), params=self.search_params()), index=index)
            for hit in r.get("hits", {}).get("hits", []):
                doc_id = wanted.get(str(hit.get("_id")))
                if doc_id is not None:
                    found[doc_id] = hit.get("_source") or {}
        return {i: found[i] for i in unique if i in found}  # in the order asked

    # -- writes -----------------------------------------------------------------------------------
    def bulk(self, index: str, actions: list[dict[str, Any]], keys: Sequence[str], what: str, *, engine: str,
             accept: Sequence[int] = (), refresh: str | None = None, max_items: int | None = None) -> dict[str, str]:
        """Bulk-write ``actions`` (named ``keys``) for the document index ``index`` (k-NN ``engine``) with
        the store's refresh policy, or ``refresh`` for writes that are only read back by id (real-time) or
        refreshed explicitly."""
        s = self.settings
        params = {"refresh": refresh or s.refresh}

        def send(body: bytes) -> Mapping[str, Any]:
            return self.call(what, lambda: self.os().bulk(body=body, params=params), index=index,
                             retry_overload=False)

        lines = [bulk_lines(a) for a in actions]
        too_big = {keys[i]: f"its _bulk action is {len(b) / 1e6:.1f} MB, over the request limit of "
                            f"{s.max_request_bytes / 1e6:.1f} MB (SDR_OPENSEARCH_MAX_REQUEST_BYTES, the cluster's "
                            "http.max_content_length); split the document or raise both limits"
                   for i, b in enumerate(lines) if len(b) > s.max_request_bytes}
        keep = [i for i in range(len(lines)) if keys[i] not in too_big]
        try:
            results = run_bulk(
                send, [lines[i] for i in keep], [keys[i] for i in keep], what=what,
                max_items=max_items or s.bulk_chunk_docs, max_bytes=min(s.bulk_chunk_bytes, s.max_request_bytes),
                backoff=s.backoff(), accept=accept,
            ) if keep else {}
        except BulkWriteError as e:
            raise BulkWriteError(what, {**too_big, **e.failed}) from e
        except BackendUnavailableError as e:
            if engine == "faiss" and "writing documents" in what:
                raise BackendUnavailableError(
                    f"{e}. If the node stopped while building a faiss graph, its k-NN plugin lacks the native "
                    "faiss library (the Maven Central k-NN zip has none): create the index with "
                    "SDR_OPENSEARCH_ENGINE=lucene, or install the full OpenSearch distribution"
                ) from e
            raise
        if too_big:
            raise BulkWriteError(what, too_big)
        return results

    # -- scans in a point in time -----------------------------------------------------------------
    def scan(self, index: str, source: Sequence[str] | bool, size: int,
             query: Mapping[str, Any] | None = None, ext: Mapping[str, Any] | None = None) -> Iterator[dict[str, Any]]:
        """Every document's hit of ``index`` (or every one ``query`` matches), in ``doc_id`` order, page by
        page (``search_after``), reading one point in time when the cluster offers it."""
        pit_id = self.open_pit(index) if source is not False else None
        try:
            after = None
            while True:
                body = build_scan_query(size=size, source=source, search_after=after, pit_id=pit_id,
                                        keep_alive=self.settings.pit_keep_alive, query=query, ext=ext)
                try:
                    r = self.call("scanning documents", lambda body=body, pit_id=pit_id: self.os().search(
                        body=body, params=self.search_params()) if pit_id else self.os().search(
                        index=index, body=body, params=self.search_params()), index=index)
                except StoreError as e:
                    if not pit_id or not _pit_lost(e):
                        raise
                    # the node restarted (or the point in time expired): doc_id order and search_after
                    # let the scan go on from the last document it returned in a new point in time
                    logger.warning("scanning %s: point in time lost (%s); reopening it and going on after %r",
                                   index, type(e).__name__, after)
                    pit_id = self.open_pit(index)
                    continue
                pit_id = r.get("pit_id", pit_id)
                hits = r["hits"]["hits"]
                yield from hits
                if len(hits) < size:
                    return
                after = hits[-1]["sort"]
        finally:
            if pit_id:
                self.close_pit(pit_id)

    def open_pit(self, index: str) -> str | None:
        from opensearchpy import exceptions as ox

        def open_pit() -> str | None:
            try:
                return self.os().create_pit(index=index, params={"keep_alive": self.settings.pit_keep_alive})["pit_id"]
            except ox.TransportError as e:
                if isinstance(e, ox.ConnectionError) or e.status_code not in (400, 403, 404, 405) \
                        or e.error == "index_not_found_exception":
                    raise
                logger.info("point in time unavailable (%s %s); scanning without one", e.status_code, e.error)
                return None

        return self.call("opening a point in time", open_pit, index=index)

    def close_pit(self, pit_id: str) -> None:
        from opensearchpy import exceptions as ox

        try:
            self.os().delete_pit(body={"pit_id": [pit_id]})
        except ox.OpenSearchException as e:  # it expires on its own
            logger.debug("could not delete point in time: %s", e)
