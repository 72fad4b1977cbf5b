"""The "more like this" page, ``/ui``: static files shipped in the package (``reranker/service/static/``:
one HTML page, one script, one style sheet; no build step, nothing fetched from elsewhere).

The files hold no data, so they are served without the API key, like ``/docs``; everything the
page shows it asks of ``/v1/...`` with the key the user types in the page (kept in the tab's
``sessionStorage``, sent as ``X-API-Key``). A Content-Security-Policy of ``'self'`` keeps the page
from loading or sending anything to another origin, which is also what makes it work offline.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import RedirectResponse
from starlette.staticfiles import StaticFiles

__all__ = ["STATIC_DIR", "CSP", "mount_ui"]

STATIC_DIR = Path(__file__).resolve().parent / "static"

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")

_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-cache"),  # revalidate: a new release's page is never mixed with an old script
]


class _PageFiles:
    """:class:`StaticFiles` with the page's security headers on every answer."""

    def __init__(self, directory: Path) -> None:
        self.files = StaticFiles(directory=directory, html=True)

    async def __call__(self, scope, receive, send) -> None:
        async def with_headers(message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *_HEADERS]}
            await send(message)

        await self.files(scope, receive, with_headers)


def mount_ui(app: FastAPI) -> None:
    """Serve the page at ``/ui/`` (``/ui`` redirects there, so the page's relative links resolve)."""
    if not (STATIC_DIR / "index.html").is_file():  # a broken install: say so at start, not as a 404 later
        raise RuntimeError(f"the /ui page's files are missing from {STATIC_DIR} (reinstall sdr-search)")

    @app.get("/ui", include_in_schema=False)
    async def ui_root() -> RedirectResponse:
        return RedirectResponse("/ui/", status_code=307)

    app.mount("/ui", _PageFiles(STATIC_DIR), name="ui")
