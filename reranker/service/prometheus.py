"""Prometheus metrics of one service instance (its own :class:`CollectorRegistry`, so several apps
in one process -- tests -- never share or clash), and the ASGI middleware that times requests."""

from __future__ import annotations

import time
from typing import Any, Awaitable, Callable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from starlette.routing import Match

__all__ = ["ServiceMetrics", "MetricsMiddleware", "CONTENT_TYPE_LATEST"]

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_CANDIDATE_BUCKETS = (1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000)
_RERANK_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE"})


class ServiceMetrics:
    """``sdr_http_request_duration_seconds{route,method,status}``, ``sdr_mlt_candidates``,
    ``sdr_mlt_rerank_seconds`` and ``sdr_errors_total{type,status}``."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.latency = Histogram(
            "sdr_http_request_duration_seconds", "Request latency by route template, method and status.",
            ["route", "method", "status"], buckets=_LATENCY_BUCKETS, registry=self.registry,
        )
        self.candidates = Histogram(
            "sdr_mlt_candidates", "Candidates reranked exactly per more-like-this request.",
            buckets=_CANDIDATE_BUCKETS, registry=self.registry,
        )
        self.rerank = Histogram(
            "sdr_mlt_rerank_seconds", "Time of the exact SDR rerank per more-like-this request.",
            buckets=_RERANK_BUCKETS, registry=self.registry,
        )
        self.errors = Counter(
            "sdr_errors", "Error answers by error type and status.", ["type", "status"], registry=self.registry,
        )

    def error(self, type_: str, status: int) -> None:
        self.errors.labels(type_, str(status)).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)


class MetricsMiddleware:
    """Times every HTTP request; the route label is the matched route's template (``unmatched`` for
    unknown paths, so random URLs cannot blow up the label set)."""

    def __init__(self, app: Callable[..., Awaitable[None]], *, metrics: ServiceMetrics, routes: Callable[[], list]):
        self.app = app
        self.metrics = metrics
        self.routes = routes

    def _route(self, scope: dict[str, Any]) -> str:
        route = scope.get("route")
        path = getattr(route, "path", None)
        if path:
            return path
        for r in self.routes():
            match, _ = r.matches(scope)
            if match != Match.NONE:
                return getattr(r, "path", "unmatched")
        return "unmatched"

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def send_status(message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            method = scope.get("method", "GET")
            self.metrics.latency.labels(
                self._route(scope), method if method in _METHODS else "OTHER", str(status)
            ).observe(time.perf_counter() - start)
