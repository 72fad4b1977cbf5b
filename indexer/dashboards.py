"""Import sdr-search's OpenSearch Dashboards saved objects (``mappings/dashboards.ndjson``).

The objects — an index pattern, a saved search and two visualizations of the per-document
figures — are posted to the Dashboards saved-objects import API::

    POST {url}/api/saved_objects/_import?overwrite=true
    osd-xsrf: true
    Content-Type: multipart/form-data; boundary=...      (one part: field "file", filename "dashboards.ndjson")

which answers ``{"success": bool, "successCount": int, "errors": [...]}``.

The index pattern's title is exactly the store's index or alias name (:data:`DEFAULT_INDEX` in the
shipped file; :func:`saved_objects_for_index` sets another), never a wildcard: after ``sdr reindex``
the alias names only the current ``ALIAS-<timestamp>`` generation, so the old generations are not
counted again, and the state indices (``<index>-sdr-state``) never match.

:func:`saved_objects_for_index`, :func:`build_import_request` and :func:`encode_multipart` are pure
(tested without a server); :func:`import_saved_objects` does the I/O with the standard library only.
Nothing connects at import.
"""

from __future__ import annotations

import copy
import json
import logging
import re
import secrets
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Mapping, NamedTuple, Sequence

from sdr_search.core.errors import (
    BackendUnavailableError,
    DashboardsImportError,
    InputReadError,
    InvalidInputError,
)
from sdr_search.core.ndjson import ndjson_objects

__all__ = [
    "IMPORT_PATH",
    "DEFAULT_NDJSON",
    "DEFAULT_INDEX",
    "MultipartPart",
    "ImportRequest",
    "read_saved_objects",
    "check_pattern_title",
    "set_index_pattern_title",
    "render_saved_objects",
    "saved_objects_for_index",
    "build_import_request",
    "encode_multipart",
    "import_saved_objects",
    "default_ndjson_path",
]

logger = logging.getLogger("sdr")

IMPORT_PATH = "/api/saved_objects/_import"
#: The file next to the source tree (a checkout or an editable install).
DEFAULT_NDJSON = Path(__file__).resolve().parents[1] / "mappings" / "dashboards.ndjson"
#: The index-pattern title of the shipped file: the store's default index (``SDR_OPENSEARCH_INDEX``).
DEFAULT_INDEX = "sdr"
#: Suffix of the state index next to every document index (``sdr_search.indexer.opensearch.requests.state_index_name``).
STATE_INDEX_SUFFIX = "-sdr-state"
# Characters OpenSearch refuses in index and alias names, plus the index-expression syntax a title
# must not use: wildcards (* ?), lists (,), exclusions (leading -), remote clusters (:).
_FORBIDDEN_IN_TITLE = re.compile(r'[\\/*?"<>|,#:\s]')
#: Dashboards checks the extension of the uploaded file name: it must be .ndjson.
UPLOAD_FILENAME = "dashboards.ndjson"
UPLOAD_FIELD = "file"
UPLOAD_CONTENT_TYPE = "application/ndjson"
# Dashboards' CSRF guard rejects API writes without this header (any value).
XSRF_HEADER = "osd-xsrf"
# Answers that mean "Dashboards (or the OpenSearch behind it) is not there yet", not "your request is wrong".
_UNAVAILABLE_STATUS = frozenset({502, 503, 504})
_MAX_ERRORS_IN_MESSAGE = 5


class MultipartPart(NamedTuple):
    """One form-data part: a form field ``name`` carrying ``data`` (a file upload when ``filename``)."""

    name: str
    data: bytes
    filename: str | None = None
    content_type: str | None = None


class ImportRequest(NamedTuple):
    """What to send: ``POST {url}{path}?{params}`` with ``headers`` and the multipart ``parts``."""

    path: str
    params: dict[str, str]
    headers: dict[str, str]
    parts: tuple[MultipartPart, ...]

    @property
    def boundary(self) -> str:
        return _boundary_of(self.headers["Content-Type"])

    def body(self) -> bytes:
        """The encoded multipart/form-data body (with the boundary named in ``headers``)."""
        return encode_multipart(self.parts, boundary=self.boundary)

    def url(self, base_url: str) -> str:
        query = urllib.parse.urlencode(self.params)
        return base_url.rstrip("/") + self.path + (f"?{query}" if query else "")


def read_saved_objects(ndjson_bytes: bytes, *, source: str = "<ndjson>") -> list[dict[str, Any]]:
    """Parse saved objects, one JSON object per line (blank lines ignored, :func:`~sdr_search.core.ndjson.ndjson_objects`);
    each needs ``type`` and ``id``.

    Raises :class:`InvalidInputError` naming the line of the first bad object.
    """
    objects: list[dict[str, Any]] = []
    for lineno, obj in ndjson_objects(ndjson_bytes, name=source, line=lambda n: f"{source}:{n}"):
        if not isinstance(obj.get("type"), str) or not isinstance(obj.get("id"), str):
            raise InvalidInputError(f"{source}:{lineno}: a saved object needs string 'type' and 'id' fields")
        objects.append(obj)
    if not objects:
        raise InvalidInputError(f"{source}: no saved object")
    return objects


def check_pattern_title(index: str) -> str:
    """``index`` when it names one index or alias exactly; :class:`InvalidInputError` otherwise.

    Refused: wildcards and lists (a pattern such as ``sdr-*`` also matches every reindex
    generation and the state indices), names OpenSearch refuses, and state index names.
    """
    if not isinstance(index, str) or not index:
        raise InvalidInputError("the index pattern needs an index or alias name, got an empty one")
    bad = sorted(set(_FORBIDDEN_IN_TITLE.findall(index)))
    if bad:
        raise InvalidInputError(
            f"index pattern title {index!r}: give one index or alias name, without {' '.join(repr(c) for c in bad)} "
            "(a wildcard would also count old reindex generations and the state indices)"
        )
    if index in (".", "..") or index.startswith(("-", "_", "+")):
        raise InvalidInputError(f"index pattern title {index!r} is not a valid index or alias name")
    if index.endswith(STATE_INDEX_SUFFIX):
        raise InvalidInputError(
            f"{index!r} is a state index (statistics, not documents); give the document index or its alias"
        )
    return index


def set_index_pattern_title(objects: Sequence[Mapping[str, Any]], index: str) -> list[dict[str, Any]]:
    """Copies of ``objects`` with the title of every index pattern set to ``index`` (checked by
    :func:`check_pattern_title`). Ids and references are kept, so the saved search and the
    visualizations follow the pattern; importing again with another name re-points them."""
    title = check_pattern_title(index)
    out = []
    for obj in objects:
        new = copy.deepcopy(dict(obj))
        if new.get("type") == "index-pattern":
            attributes = new.get("attributes")
            if not isinstance(attributes, dict):
                raise InvalidInputError(f"index-pattern/{new.get('id')}: no 'attributes' object")
            attributes["title"] = title
        out.append(new)
    return out


def render_saved_objects(objects: Sequence[Mapping[str, Any]]) -> bytes:
    """ndjson of ``objects``: one compact JSON object per line (the layout of the shipped file)."""
    return b"".join(
        json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n" for obj in objects
    )


def saved_objects_for_index(ndjson_bytes: bytes, index: str = DEFAULT_INDEX, *, source: str = "<ndjson>") -> bytes:
    """The ndjson to import so that the index pattern shows exactly the documents of ``index``
    (an index or alias name; default :data:`DEFAULT_INDEX`). Pure."""
    return render_saved_objects(set_index_pattern_title(read_saved_objects(ndjson_bytes, source=source), index))


def build_import_request(
    ndjson_bytes: bytes, *, overwrite: bool = True, boundary: str | None = None
) -> ImportRequest:
    """The import request for ``ndjson_bytes``: path, query parameters, headers and multipart parts.

    ``overwrite=True`` replaces objects with the same ids (re-importing is then idempotent);
    ``False`` reports them as conflicts instead. ``boundary`` is random unless given (tests).
    """
    if not isinstance(ndjson_bytes, (bytes, bytearray)):
        raise TypeError("ndjson_bytes must be bytes")
    data = bytes(ndjson_bytes)
    if boundary is None:
        boundary = _new_boundary(data)
    elif boundary.encode("ascii") in data:
        raise ValueError("the multipart boundary occurs in the file")
    parts = (MultipartPart(UPLOAD_FIELD, data, filename=UPLOAD_FILENAME, content_type=UPLOAD_CONTENT_TYPE),)
    headers = {
        XSRF_HEADER: "true",
        "Content-Type": f"multipart/form-data; boundary={boundary}",
        "Accept": "application/json",
    }
    params = {"overwrite": "true"} if overwrite else {}
    return ImportRequest(IMPORT_PATH, params, headers, parts)


def encode_multipart(parts: Sequence[MultipartPart], *, boundary: str) -> bytes:
    """RFC 7578 multipart/form-data encoding of ``parts``."""
    delimiter = f"--{boundary}".encode("ascii")
    chunks: list[bytes] = []
    for part in parts:
        if delimiter in part.data:
            raise ValueError("the multipart boundary occurs in a part")
        disposition = f'form-data; name="{_quote(part.name)}"'
        if part.filename is not None:
            disposition += f'; filename="{_quote(part.filename)}"'
        chunks += [delimiter, b"\r\n", f"Content-Disposition: {disposition}\r\n".encode("utf-8")]
        if part.content_type:
            chunks.append(f"Content-Type: {part.content_type}\r\n".encode("ascii"))
        chunks += [b"\r\n", part.data, b"\r\n"]
    chunks += [delimiter, b"--\r\n"]
    return b"".join(chunks)


def import_saved_objects(
    url: str, ndjson_path: str | Path, *, index: str = DEFAULT_INDEX, overwrite: bool = True, timeout: float = 30
) -> dict[str, Any]:
    """Post the objects of ``ndjson_path``, their index pattern titled ``index`` (the store's index
    or alias, see :func:`saved_objects_for_index`), to the Dashboards at ``url``; return its parsed answer.

    Raises :class:`BackendUnavailableError` when Dashboards cannot be reached (connection refused,
    timeout, 502/503/504), :class:`DashboardsImportError` with the server's message for any other
    non-2xx answer or ``success: false``, :class:`InputReadError` / :class:`InvalidInputError` for a
    missing or malformed file or an ``index`` that is not one index or alias name.
    """
    base = _check_url(url)
    path = Path(ndjson_path)
    try:
        raw_file = path.read_bytes()
    except OSError as e:
        raise InputReadError(f"cannot read saved objects file {path}: {e.strerror or e}") from e
    data = saved_objects_for_index(raw_file, index, source=str(path))
    objects = read_saved_objects(data, source=str(path))
    request = build_import_request(data, overwrite=overwrite)
    full_url = request.url(base)
    req = urllib.request.Request(full_url, data=request.body(), headers=request.headers, method="POST")
    logger.info("importing %d saved objects from %s into %s (index pattern %r)", len(objects), path, base, index)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            status, raw = resp.status, resp.read()
    except urllib.error.HTTPError as e:
        raw = _read_quietly(e)
        message = _server_message(raw) or (e.reason if isinstance(e.reason, str) else "")
        if e.code in _UNAVAILABLE_STATUS:
            raise BackendUnavailableError(
                f"OpenSearch Dashboards at {base} is not available (HTTP {e.code}): {message}"
            ) from e
        raise DashboardsImportError(
            f"OpenSearch Dashboards at {base} refused the import (HTTP {e.code}): {message}", status=e.code
        ) from e
    except urllib.error.URLError as e:
        raise BackendUnavailableError(f"cannot reach OpenSearch Dashboards at {base}: {e.reason}") from e
    except (TimeoutError, OSError) as e:  # a timeout or reset while reading the answer
        raise BackendUnavailableError(f"cannot reach OpenSearch Dashboards at {base}: {e}") from e
    try:
        answer = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DashboardsImportError(
            f"OpenSearch Dashboards at {base} answered HTTP {status} with a body that is not JSON: {raw[:200]!r}",
            status=status,
        ) from e
    if not isinstance(answer, dict) or "success" not in answer:
        raise DashboardsImportError(
            f"OpenSearch Dashboards at {base} answered HTTP {status} without a 'success' field: {str(answer)[:200]}",
            status=status,
        )
    if answer["success"] is not True:
        errors = answer.get("errors") or []
        raise DashboardsImportError(
            f"OpenSearch Dashboards at {base} did not import {path.name}: "
            f"{answer.get('successCount', 0)} of {len(objects)} objects imported; {_describe_errors(errors)}",
            status=status,
            errors=errors,
        )
    return answer


def default_ndjson_path() -> Path:
    """``mappings/dashboards.ndjson`` of the source tree, else of the working directory (the Docker image)."""
    for candidate in (DEFAULT_NDJSON, Path.cwd() / "mappings" / "dashboards.ndjson"):
        if candidate.is_file():
            return candidate
    raise InputReadError(
        f"saved objects file not found ({DEFAULT_NDJSON} or ./mappings/dashboards.ndjson); pass --file PATH"
    )


def _check_url(url: str) -> str:
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise InvalidInputError(f"Dashboards URL must look like http://host:5601, got {url!r}")
    if parsed.query or parsed.fragment:
        raise InvalidInputError(f"Dashboards URL must not carry a query or fragment: {url!r}")
    return url.rstrip("/")


def _new_boundary(data: bytes) -> str:
    while True:
        boundary = f"sdr-search-{secrets.token_hex(16)}"
        if boundary.encode("ascii") not in data:
            return boundary


def _boundary_of(content_type: str) -> str:
    for param in content_type.split(";")[1:]:
        key, _, value = param.strip().partition("=")
        if key.lower() == "boundary":
            return value.strip('"')
    raise ValueError(f"no boundary in {content_type!r}")


def _quote(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\r", " ").replace("\n", " ")


def _read_quietly(resp) -> bytes:
    try:
        return resp.read() or b""
    except OSError:
        return b""


def _server_message(raw: bytes) -> str:
    """Dashboards' error body is ``{"statusCode", "error", "message"}``; fall back to the raw text."""
    text = raw.decode("utf-8", "replace").strip()
    try:
        body = json.loads(text)
    except json.JSONDecodeError:
        return text[:500]
    if isinstance(body, Mapping):
        parts = [str(body[k]) for k in ("error", "message") if body.get(k)]
        if parts:
            return ": ".join(parts)
    return text[:500]


def _describe_errors(errors: Sequence[Any]) -> str:
    if not errors:
        return "no error details in the answer"
    described = []
    for err in list(errors)[:_MAX_ERRORS_IN_MESSAGE]:
        if not isinstance(err, Mapping):
            described.append(str(err))
            continue
        detail = err.get("error") if isinstance(err.get("error"), Mapping) else {}
        what = f"{err.get('type', '?')}/{err.get('id', '?')}"
        if err.get("title"):
            what += f" ({err['title']})"
        why = str(detail.get("type", "error"))
        if detail.get("message"):
            why += f": {detail['message']}"
        if detail.get("references"):
            missing = ", ".join(f"{r.get('type')}/{r.get('id')}" for r in detail["references"] if isinstance(r, Mapping))
            why += f" [{missing}]"
        described.append(f"{what}: {why}")
    more = len(errors) - _MAX_ERRORS_IN_MESSAGE
    return "; ".join(described) + (f"; and {more} more" if more > 0 else "")
