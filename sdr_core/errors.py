"""One exception hierarchy for sdr-search.

Every error a user can cause or meet derives from :class:`SDRError`. The CLI turns these into a
one-line message and exit code 2; the HTTP service (reranker) maps them to status codes in one
place. Causes are chained with ``raise ... from e``.
"""

from __future__ import annotations

__all__ = [
    "SDRError",
    "InvalidInputError",
    "InvalidDocumentError",
    "InvalidIdError",
    "DuplicateIdError",
    "DocumentTooLargeError",
    "InputReadError",
    "ModelNotFoundError",
    "ModelMismatchError",
    "NotFoundError",
    "DocumentNotFoundError",
    "IndexNotFoundError",
    "StoreError",
    "IndexLayoutError",
    "StoreDamagedError",
    "BackendUnavailableError",
    "OverloadedError",
    "DeadlineExceededError",
    "StatsUnavailableError",
    "NoComparisonError",
]


class SDRError(Exception):
    """Base class of every error sdr-search raises on purpose."""


class InvalidInputError(SDRError, ValueError):
    """A request or argument is malformed (maps to HTTP 422)."""


class InvalidDocumentError(InvalidInputError):
    """A document cannot be used: empty, no sentence, wrong shape, bad encoding."""

    def __init__(self, doc_id: str | None, reason: str, *, source: str | None = None):
        self.doc_id = doc_id
        self.reason = reason
        self.source = source
        where = f" ({source})" if source else ""
        name = f"document {doc_id!r}" if doc_id is not None else "document"
        super().__init__(f"{name}{where}: {reason}")


class InvalidIdError(InvalidInputError):
    """A document id breaks the id rule (:func:`sdr_search.core.documents.check_id`): empty, over
    512 characters, white space at an end, a control character, or not a string or integer."""


class DuplicateIdError(InvalidDocumentError):
    """The same document id appears twice in one input."""


class DocumentTooLargeError(InvalidDocumentError):
    """A document is over the configured size limit (maps to HTTP 413)."""


class InputReadError(SDRError, OSError):
    """An input path cannot be read (missing, unreadable, not a supported format)."""


class ModelNotFoundError(SDRError, FileNotFoundError):
    """The encoder model directory does not exist or is not a HuggingFace model directory."""


class ModelMismatchError(SDRError):
    """Vectors were produced by a different model or settings than the one asked for."""


class NotFoundError(SDRError, LookupError):
    """Something named by the user does not exist (maps to HTTP 404)."""


class DocumentNotFoundError(NotFoundError):
    def __init__(self, doc_id: str, where: str | None = None):
        self.doc_id = doc_id
        super().__init__(f"{where + ': ' if where else ''}document {doc_id!r} is not in the index")


class IndexNotFoundError(NotFoundError):
    """The store directory or OpenSearch index does not exist."""


class StoreError(SDRError):
    """The store is damaged or was written by an incompatible version."""


class IndexLayoutError(StoreError):
    """An index was made by an older sdr-search in a layout this one reads but will not write or
    filter (OpenSearch metadata mapped field by field): rebuild it with ``sdr reindex`` (maps to
    HTTP 409)."""


class StoreDamagedError(StoreError):
    """A store's files cannot be read as a store any more (a damaged database, a vector file shorter
    than its rows): the store cannot answer until it is restored or rebuilt (maps to HTTP 503)."""


class BackendUnavailableError(SDRError):
    """The backing service (OpenSearch, Redis) cannot be reached (maps to HTTP 503)."""


class OverloadedError(SDRError):
    """Too many concurrent requests (maps to HTTP 429)."""


class DeadlineExceededError(SDRError):
    """A request ran out of its deadline before the store answered (a hung or overloaded node; maps to
    HTTP 504). Nothing was written on its behalf: deadlines bound reads only."""


class StatsUnavailableError(SDRError):
    """Normalisation statistics are needed but have not been computed (run `sdr stats`)."""


class NoComparisonError(StatsUnavailableError, ValueError):
    """Statistics asked for where no paragraph of another document is left to compute them over
    (a store of one document: statistics against itself are not defined)."""


class DashboardsImportError(SDRError):
    """OpenSearch Dashboards answered a saved-objects import with an error or ``success: false``.

    ``status`` is the HTTP status of the answer; ``errors`` the per-object errors it listed.
    """

    def __init__(self, message: str, *, status: int | None = None, errors: list | None = None):
        self.status = status
        self.errors = list(errors or [])
        super().__init__(message)


__all__ += ["DashboardsImportError"]


class BulkWriteError(StoreError):
    """Some documents of a bulk write were rejected by the backend (item-level errors).

    ``failed`` maps each rejected document id to the backend's reason; documents not listed were
    written. Raised after retries of overload rejections (HTTP 429) are exhausted, or at once for
    any other item error (e.g. a mapping conflict in ``metadata``).
    """

    def __init__(self, what: str, failed: dict[str, str]):
        self.failed = dict(failed)
        shown = list(self.failed.items())[:5]
        listed = "; ".join(f"{doc_id!r}: {reason}" for doc_id, reason in shown)
        more = f"; and {len(self.failed) - len(shown)} more" if len(self.failed) > len(shown) else ""
        super().__init__(f"{what}: {len(self.failed)} document(s) failed: {listed}{more}")


__all__ += ["BulkWriteError"]


class ExplanationTooLargeError(InvalidInputError):
    """An explanation asked for more than its limit (``explain_matrix`` over ``SDR_MAX_MATRIX_CELLS``; HTTP 413)."""


class SourceTooLargeError(InvalidInputError):
    """A query's source document is over the query size limit (``SDR_MAX_QUERY_SENTENCES``)."""


__all__ += ["SourceTooLargeError"]
