"""The one place where errors become HTTP answers.

Domain errors (:mod:`sdr_search.core.errors`) map to status codes by class, most specific first (the
class's MRO is walked, so ``DocumentTooLargeError`` -- a kind of ``InvalidInputError`` -- is 413,
not 422). Every error answer has the body ``{"error": {"type": ..., "message": ...}}``; FastAPI's
own request validation errors are 422 with one readable line per problem in ``message`` and the
problems in ``details``. Anything else is a 500 with a generic message (the trace is logged).
"""

from __future__ import annotations

import logging
from typing import Any, Callable

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from sdr_search.core.errors import (
    BackendUnavailableError,
    DeadlineExceededError,
    DocumentTooLargeError,
    ExplanationTooLargeError,
    IndexLayoutError,
    InvalidInputError,
    ModelMismatchError,
    NotFoundError,
    OverloadedError,
    SDRError,
    SourceTooLargeError,
    StoreDamagedError,
    StatsUnavailableError,
)

__all__ = ["RequestTooLargeError", "AuthenticationError", "STATUS_BY_ERROR", "status_for", "error_body", "error_response", "install_error_handlers"]

logger = logging.getLogger(__name__)


class RequestTooLargeError(InvalidInputError):
    """A request body is over the service's size limit (``SDR_SERVICE_MAX_BODY_BYTES``; HTTP 413)."""


class AuthenticationError(SDRError):
    """A request lacks the API key the service requires, or gives a wrong one (HTTP 401)."""


STATUS_BY_ERROR: dict[type[BaseException], int] = {
    InvalidInputError: 422,
    DocumentTooLargeError: 413,
    RequestTooLargeError: 413,
    SourceTooLargeError: 413,
    ExplanationTooLargeError: 413,
    NotFoundError: 404,
    OverloadedError: 429,
    BackendUnavailableError: 503,
    DeadlineExceededError: 504,
    StoreDamagedError: 503,
    ModelMismatchError: 409,
    IndexLayoutError: 409,
    StatsUnavailableError: 409,
    AuthenticationError: 401,
    SDRError: 500,
}

# Seconds a client should wait after a 429 or a 503.
RETRY_AFTER_S = 1


def status_for(exc: BaseException) -> int:
    """HTTP status of an exception: its most specific class in :data:`STATUS_BY_ERROR`, else 500."""
    for cls in type(exc).__mro__:
        if cls in STATUS_BY_ERROR:
            return STATUS_BY_ERROR[cls]
    return 500


def error_body(type_: str, message: str, details: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"type": type_, "message": message}
    if details is not None:
        body["details"] = details
    return {"error": body}


def _headers(status: int, exc: BaseException) -> dict[str, str]:
    headers: dict[str, str] = {}
    if status in (429, 503):
        headers["Retry-After"] = str(RETRY_AFTER_S)
    if status == 401:
        headers["WWW-Authenticate"] = "X-API-Key"
    return headers


def error_response(exc: BaseException) -> JSONResponse:
    """The answer for a domain error (or a 500 for anything else)."""
    status = status_for(exc)
    if isinstance(exc, SDRError) and status != 500:
        return JSONResponse(error_body(type(exc).__name__, str(exc)), status_code=status, headers=_headers(status, exc))
    if isinstance(exc, SDRError):
        # a store or model failure the client cannot fix; the message names what failed
        logger.error("request failed: %s", exc, exc_info=exc)
        return JSONResponse(error_body(type(exc).__name__, str(exc)), status_code=500)
    logger.error("unexpected error", exc_info=exc)
    return JSONResponse(error_body("InternalError", "internal error (see the server log)"), status_code=500)


def _location(loc: tuple[Any, ...] | list[Any]) -> str:
    return ".".join(str(part) for part in loc) or "request"


def validation_details(exc: RequestValidationError) -> list[dict[str, Any]]:
    """One entry per problem: where (``loc``), what (``msg``, readable) and pydantic's ``type``."""
    out = []
    for err in exc.errors():
        loc = [str(p) for p in err.get("loc", ())]
        msg = str(err.get("msg", "invalid"))
        if msg.startswith("Value error, "):
            msg = msg[len("Value error, ") :]
        if err.get("type") == "json_invalid":  # loc ends with the character offset, not a field
            ctx = err.get("ctx") or {}
            where = f" at character {loc[1]}" if len(loc) > 1 else ""
            msg = f"invalid JSON{where}: {ctx.get('error', msg)}"
            loc = loc[:1]
        out.append({"loc": loc, "msg": msg, "type": str(err.get("type", ""))})
    return out


def install_error_handlers(app: FastAPI, on_error: Callable[[str, int], None] | None = None) -> None:
    """Register the handlers; ``on_error(type, status)`` is called for every error answer (metrics)."""

    def _count(type_: str, status: int) -> None:
        if on_error is not None:
            on_error(type_, status)

    async def handle_sdr(request: Request, exc: Exception) -> JSONResponse:
        response = error_response(exc)
        _count(type(exc).__name__ if isinstance(exc, SDRError) else "InternalError", response.status_code)
        return response

    async def handle_validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        details = validation_details(exc)
        content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if not content_type.endswith(("/json", "+json")):
            for d in details:  # FastAPI reads a body of another type as a string: say what to send instead
                if d["loc"] == ["body"] and d["type"] in ("dict_type", "model_attributes_type"):
                    d["msg"] = (f"{d['msg']}: the body must be a JSON object sent with Content-Type: "
                                f"application/json (got {content_type or 'no Content-Type'})")
        message = "; ".join(f"{_location(d['loc'])}: {d['msg']}" for d in details) or "invalid request"
        _count("RequestValidationError", 422)
        return JSONResponse(error_body("RequestValidationError", message, details), status_code=422)

    async def handle_http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 400:
            # FastAPI's answer to a body it cannot decode (e.g. not UTF-8): a validation error here
            message = "body: cannot be parsed (it must be UTF-8 JSON)"
            _count("RequestValidationError", 422)
            details = [{"loc": ["body"], "msg": str(exc.detail), "type": "body_unparsable"}]
            return JSONResponse(error_body("RequestValidationError", message, details), status_code=422)
        names = {404: "NotFound", 405: "MethodNotAllowed"}
        type_ = names.get(exc.status_code, "HTTPError")
        _count(type_, exc.status_code)
        return JSONResponse(
            error_body(type_, str(exc.detail)), status_code=exc.status_code, headers=dict(exc.headers or {})
        )

    app.add_exception_handler(SDRError, handle_sdr)
    app.add_exception_handler(RequestValidationError, handle_validation)  # type: ignore[arg-type]
    app.add_exception_handler(StarletteHTTPException, handle_http)  # type: ignore[arg-type]
    app.add_exception_handler(Exception, handle_sdr)
