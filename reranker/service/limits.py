"""Request limits of the service: the body size cap (ASGI middleware, before any parsing) and the
concurrency cap with a short bounded queue (overload answers 429 instead of queueing forever)."""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Awaitable, Callable

from starlette.responses import JSONResponse

from sdr_search.core.errors import OverloadedError

__all__ = ["BodyLimitMiddleware", "ConcurrencyLimiter"]


class ConcurrencyLimiter:
    """At most ``limit`` holders at once; at most ``max_queue`` waiters, each for at most
    ``timeout_s`` seconds. A request beyond that raises :class:`OverloadedError` (HTTP 429) at once.

    Must be used from one event loop (the server's)."""

    def __init__(self, limit: int, *, max_queue: int, timeout_s: float) -> None:
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        self.limit = limit
        self.max_queue = max_queue
        self.timeout_s = timeout_s
        self._semaphore = asyncio.Semaphore(limit)
        self._waiting = 0

    @property
    def waiting(self) -> int:
        return self._waiting

    @asynccontextmanager
    async def slot(self, within_s: float | None = None) -> AsyncIterator[None]:
        """Hold a slot inside; wait at most ``timeout_s`` (or ``within_s`` when shorter: the request's deadline)."""
        wait_s = self.timeout_s if within_s is None else max(0.0, min(self.timeout_s, within_s))
        if self._semaphore.locked():
            if self._waiting >= self.max_queue or wait_s <= 0:
                raise OverloadedError(
                    f"too many concurrent requests ({self.limit} running, {self._waiting} waiting); retry later"
                )
            self._waiting += 1
            try:
                await asyncio.wait_for(self._semaphore.acquire(), wait_s)
            except TimeoutError:
                raise OverloadedError(
                    f"too many concurrent requests: no free slot within {wait_s:.3g} s; retry later"
                ) from None
            finally:
                self._waiting -= 1
        else:
            await self._semaphore.acquire()
        try:
            yield
        finally:
            self._semaphore.release()


class BodyLimitMiddleware:
    """Answers 413 for a request body over ``max_bytes``: at once from ``Content-Length``, and while
    reading a body sent without one (chunked). The body is read here (at most ``max_bytes``) and
    replayed to the app, so no route ever parses more than the limit."""

    def __init__(
        self,
        app: Callable[..., Awaitable[None]],
        *,
        max_bytes: int,
        on_reject: Callable[[], None],
        body: Callable[[str, str], dict[str, Any]],
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.on_reject = on_reject
        self.body = body

    async def _reject(self, scope, receive, send, size: str) -> None:
        self.on_reject()
        message = (
            f"request body of {size} bytes is over the limit of {self.max_bytes} bytes (SDR_SERVICE_MAX_BODY_BYTES)"
        )
        response = JSONResponse(self.body("RequestTooLargeError", message), status_code=413, headers={"Connection": "close"})
        await response(scope, receive, send)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = 0  # the server rejects a malformed length itself
                if declared > self.max_bytes:
                    await self._reject(scope, receive, send, str(declared))
                    return
        chunks: list[bytes] = []
        total = 0
        disconnect: dict[str, Any] | None = None
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                disconnect = message
                break
            chunk = message.get("body", b"")
            total += len(chunk)
            if total > self.max_bytes:
                await self._reject(scope, receive, send, f"more than {self.max_bytes}")
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> dict[str, Any]:
            nonlocal replayed
            if not replayed:
                replayed = True
                if disconnect is not None:
                    return disconnect
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)
