"""The HTTP connection the store's client uses: opensearch-py's urllib3 connection, bounded by the request's
deadline (:mod:`sdr_search.core.deadline`) and steering reads away from a hung node (:class:`NodeRouter`).

Deadline: each request's socket timeout is cut to the time left before the deadline, and no request is
sent once it has passed (:class:`~sdr_search.core.errors.DeadlineExceededError`). A timeout that the
deadline cut short is raised as that error, not as opensearch-py's ``ConnectionTimeout``: the transport
would otherwise mark the node dead and send the request to the next one, for a node that was only given
less time. Outside a deadline the timeouts are opensearch-py's own.

A hung node (a long GC pause, a frozen process) keeps its sockets open, and the cluster keeps it until its
fault detection drops it (about 30 s by default). Until then a read sent to a healthy node waits too when
the shard copy chosen for it is on the hung node: leaving the hung node's URL out of the client's rotation
is not enough. So when a request times out, or ``/health`` finds a node that does not answer, every node
URL is asked who it is (``GET /_nodes/_local``, within ``probe_timeout``), and for ``hold_s`` seconds every
read (``_search``, ``_msearch``, ``_mget``, ``_count``, a ``GET`` of one document) carries
``preference=_prefer_nodes:<the nodes that answered>``: each shard is read from a copy on a node that
answers whenever there is one (with a replica there always is, for one hung node). Writes are not steered.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from sdr_search.core import deadline
from sdr_search.core.errors import DeadlineExceededError

__all__ = ["NodeRouter", "connection_class"]

logger = logging.getLogger(__name__)

_READS = ("/_search", "/_msearch", "/_mget", "/_count")


class NodeRouter:
    """Which of the configured nodes answer, and the read preference that avoids the others.

    ``connections()`` gives the client's connections (one per node URL); ``probe_timeout`` bounds each
    node's answer; the preference is dropped ``hold_s`` seconds after the probe that set it (a node still
    hung is found again by the next timeout)."""

    def __init__(self, *, probe_timeout: float, hold_s: float, active: bool = True) -> None:
        self.active = active  # False for one node URL: nowhere else to read from
        self.probe_timeout = probe_timeout
        self.hold_s = hold_s
        self._lock = threading.Lock()
        self._probing = threading.Lock()
        self._prefer: tuple[str, float] | None = None  # (preference, monotonic expiry)
        self._probed_at = float("-inf")
        self.connections: Any = lambda: ()

    def preference(self) -> str | None:
        """``_prefer_nodes:...`` while some node was found hung (within ``hold_s``), else None."""
        with self._lock:
            if self._prefer is None:
                return None
            if time.monotonic() >= self._prefer[1]:
                self._prefer = None
                logger.info("reads are no longer steered away from a hung node (%.0f s passed)", self.hold_s)
                return None
            return self._prefer[0]

    def probe(self, timeout: float | None = None) -> list[str]:
        """Ask every node who it is, all at once, within ``timeout`` (``probe_timeout`` by default); the URLs
        that do not answer. When some do not and others do, reads prefer the others from now on."""
        with self._probing:  # (a probe's own timeouts do not start another: suspect() finds it held)
            return self._probe(timeout)

    def _probe(self, timeout: float | None) -> list[str]:
        connections = list(self.connections())
        if not connections:
            return []
        wait = self.probe_timeout if timeout is None else timeout
        with ThreadPoolExecutor(len(connections), thread_name_prefix="sdr-node-probe") as pool:
            answers = list(pool.map(lambda c: _node_id(c, wait), connections))
        hung = [c.host for c, node in zip(connections, answers) if node is None]
        live = [node for node in answers if node is not None]
        self._probed_at = time.monotonic()
        with self._lock:
            if hung and live:
                if self._prefer is None:
                    logger.warning("node(s) %s do not answer within %.1f s: reads prefer the shard copies on %s",
                                   ", ".join(hung), wait, ", ".join(live))
                self._prefer = ("_prefer_nodes:" + ",".join(sorted(set(live))), time.monotonic() + self.hold_s)
            elif not hung:
                self._prefer = None
        return hung

    def suspect(self) -> None:
        """A request timed out: probe the nodes now, unless another thread is doing it or a probe ended
        less than ``probe_timeout`` ago (its answer still stands)."""
        if time.monotonic() - self._probed_at < self.probe_timeout:
            return
        if self._probing.acquire(blocking=False):
            try:
                self._probe(None)
            except Exception as e:  # a failed probe leaves reads as they were
                logger.warning("probing the nodes after a timeout failed: %s", e)
            finally:
                self._probing.release()

    def steer(self, method: str, url: str, params: Any, body: Any) -> tuple[Any, Any]:
        """``(params, body)`` of a read with the preference added (a ``_msearch``: in each search's header)."""
        prefer = self.preference()
        path = url.split("?")[0]
        if prefer is None or (params and "preference" in params):
            return params, body
        if path.endswith("/_msearch"):
            return params, _msearch_with(body, prefer)
        if path.endswith(_READS) or (method == "GET" and "/_doc/" in path):
            return {**(params or {}), "preference": prefer}, body
        return params, body


def _node_id(connection: Any, timeout: float) -> str | None:
    try:
        _, _, data = connection.perform_request(
            "GET", "/_nodes/_local/none", {"filter_path": "nodes.*.name"}, None, timeout=timeout)
        (node,) = json.loads(data)["nodes"]
        return str(node)
    except Exception as e:  # any failure to answer counts; the reason is logged
        logger.warning("node %s did not answer within %.1f s: %s", connection.host, timeout, e)
        return None


def _msearch_with(body: Any, prefer: str) -> Any:
    """An NDJSON ``_msearch`` body with ``preference`` in every search's header line (headers and bodies
    alternate); a body it cannot read is left as it is."""
    if body is None:
        return body
    raw = body if isinstance(body, (bytes, bytearray)) else str(body).encode("utf-8")
    lines = raw.split(b"\n")
    try:
        for i in range(0, len(lines), 2):
            if lines[i].strip():
                header = json.loads(lines[i])
                header.setdefault("preference", prefer)
                lines[i] = json.dumps(header, separators=(",", ":")).encode("utf-8")
    except (ValueError, TypeError, AttributeError):
        return body
    return b"\n".join(lines)


def connection_class(router: NodeRouter) -> type:
    """The connection class of one client (importing opensearch-py is left to the first client)."""
    from opensearchpy import Urllib3HttpConnection
    from opensearchpy.exceptions import ConnectionTimeout

    class DeadlineConnection(Urllib3HttpConnection):
        def perform_request(self, method: str, url: str, params: Any = None, body: Any = None,
                            timeout: float | None = None, ignore: Any = (), headers: Any = None) -> Any:
            what = f"waiting for {self.host} ({method} {url.split('?')[0]})"
            bounded, cut = deadline.cap(timeout if timeout is not None else self.timeout, what)
            if router.active:
                params, body = router.steer(method, url, params, body)
            try:
                return super().perform_request(method, url, params, body, timeout=bounded, ignore=ignore,
                                               headers=headers)
            except ConnectionTimeout as e:
                if router.active:
                    router.suspect()
                if cut:
                    raise DeadlineExceededError(deadline.message(what)) from e
                raise

    return DeadlineConnection

