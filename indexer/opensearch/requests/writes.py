"""Bulk actions (opensearch-py's action format), bulk chunking, and the reading of bulk responses and errors.

Pure functions: see :mod:`sdr_search.indexer.opensearch.requests`."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from sdr_search.core.cache import document_key
from sdr_search.core.documents import Document
from sdr_search.core.errors import (
    BackendUnavailableError,
    IndexNotFoundError,
    OverloadedError,
    SDRError,
    StoreError,
)
from sdr_search.core.metadata import metadata_terms
from sdr_search.core.scoring import NormStats, paragraph_centroids
from sdr_search.core.vectors import DocVectors

from sdr_search.indexer.store import ReferenceParagraphs

from .layout import CENTROIDS_FIELD, document_os_id, encode_vectors_b64, reference_os_id, stats_os_id


# bulk actions (opensearch-py ``streaming_bulk`` action format)
# =============================================================================================
def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def build_document_source(
    doc: Document, vectors: DocVectors, *, encoder_tag: str, model_id: str, indexed_at: str, vector_copy: bool = True,
    centroids: bool = False,
) -> dict[str, Any]:
    """``_source`` of one document. ``metadata`` is kept as given (the mapping does not index it) and
    ``metadata_terms`` holds the typed terms filters match (:func:`sdr_search.core.metadata.metadata_terms`).
    ``sentences[r]`` is row ``r`` of the document's vectors
    (``position`` = sentence index in the document, ``paragraph`` = its paragraph). ``vector_copy``:
    also the base64 copy ``vectors_b64`` (an index whose ``_meta.sdr.vectors`` is
    :data:`VECTORS_B64`). ``centroids``: also the paragraph centroids (:data:`CENTROIDS_FIELD`, an index
    whose mapping has the field, :func:`stored_centroids`), each paragraph's normalised mean sentence
    vector as the pre-rank computes it, which the sdr plugin's centroid rows read instead of every
    sentence vector of the document."""
    sizes = [len(p) for p in doc.paragraphs]
    paragraph_of = np.repeat(np.arange(len(sizes)), sizes).tolist()
    rows = np.asarray(vectors.vectors, dtype=np.float32).tolist()
    return {
        "doc_id": doc.id,
        "title": doc.title,
        "text": doc.text,
        "metadata": dict(doc.metadata),
        "metadata_terms": metadata_terms(doc.metadata),
        "n_paragraphs": len(sizes),
        "n_sentences": int(sum(sizes)),
        "model_id": model_id,
        "encoder_tag": encoder_tag,
        "content_key": document_key(encoder_tag, doc.paragraphs),
        "indexed_at": indexed_at,
        "paragraphs": [list(p) for p in doc.paragraphs],
        "par_sizes": sizes,
        **({"vectors_b64": encode_vectors_b64(vectors.vectors)} if vector_copy else {}),
        **({CENTROIDS_FIELD: encode_vectors_b64(paragraph_centroids(vectors))} if centroids else {}),
        "sentences": [{"vector": v, "paragraph": p, "position": r} for r, (v, p) in enumerate(zip(rows, paragraph_of))],
    }


def build_bulk_actions(
    items: Iterable[tuple[Document, DocVectors]],
    *,
    index: str,
    encoder_tag: str,
    model_id: str,
    indexed_at: str | None = None,
    vector_copy: bool = True,
    centroids: bool = False,
) -> list[dict[str, Any]]:
    """One ``index`` action per document (whole-document writes, never partial updates),
    with the stable ``_id`` of :func:`document_os_id`."""
    at = indexed_at or _now()
    return [
        {"_op_type": "index", "_index": index, "_id": document_os_id(doc.id),
         "_source": build_document_source(doc, vec, encoder_tag=encoder_tag, model_id=model_id, indexed_at=at,
                                          vector_copy=vector_copy, centroids=centroids)}
        for doc, vec in items
    ]


def build_delete_actions(ids: Iterable[str], *, index: str) -> list[dict[str, Any]]:
    return [{"_op_type": "delete", "_index": index, "_id": document_os_id(i)} for i in ids]


def build_stats_update_actions(stats: Mapping[str, NormStats], version: int, *, index: str) -> list[dict[str, Any]]:
    """Statistics of one refresh as whole ``index`` actions into the *state* index ``index``.

    Not partial updates of the document index: an ``_update`` re-indexes the whole document
    (re-building its sentence vectors in HNSW) and, on 2.x with ``_source.excludes``, drops them.
    """
    return [
        {"_op_type": "index", "_index": index, "_id": stats_os_id(doc_id),
         "_source": {"kind": "stats", "doc_id": doc_id, "stats_mu": s.mu.tolist(), "stats_sigma": s.sigma.tolist(),
                     "stats_version": int(version)}}
        for doc_id, s in stats.items()
    ]


def build_stats_delete_actions(ids: Iterable[str], *, index: str) -> list[dict[str, Any]]:
    return [{"_op_type": "delete", "_index": index, "_id": stats_os_id(i)} for i in ids]


def build_reference_actions(reference: ReferenceParagraphs, generation: int, *, index: str) -> list[dict[str, Any]]:
    """One state-index document per sampled paragraph (with its own copy of the vectors)."""
    cv = reference.vectors
    return [
        {"_op_type": "index", "_index": index, "_id": reference_os_id(generation, pos),
         "_source": {"kind": "reference", "generation": int(generation), "position": pos,
                     "doc_id": str(reference.doc_ids[pos]), "paragraph_index": int(reference.paragraph_index[pos]),
                     "label": cv.ids[pos], "n_sentences": int(cv.par_offsets[pos + 1] - cv.par_offsets[pos]),
                     "vectors_b64": encode_vectors_b64(cv.vectors[cv.par_offsets[pos] : cv.par_offsets[pos + 1]])}}
        for pos in range(len(reference.doc_ids))
    ]


def build_reference_delete_actions(generation: int, n: int, *, index: str) -> list[dict[str, Any]]:
    return [{"_op_type": "delete", "_index": index, "_id": reference_os_id(generation, p)} for p in range(n)]


def _dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def bulk_lines(action: Mapping[str, Any]) -> bytes:
    """The NDJSON lines of one action (header, and source unless a delete), UTF-8, ending in a newline."""
    op = action.get("_op_type", "index")
    header = {op: {key: action[key] for key in ("_index", "_id") if key in action}}
    if op == "delete":
        return (_dumps(header) + "\n").encode("utf-8")
    return (_dumps(header) + "\n" + _dumps(action["_source"]) + "\n").encode("utf-8")


def chunk_by_size(sizes: Sequence[int], *, max_items: int, max_bytes: int) -> list[range]:
    """Consecutive chunks of at most ``max_items`` items and ``max_bytes`` bytes (an item larger
    than ``max_bytes`` goes alone)."""
    if max_items < 1 or max_bytes < 1:
        raise ValueError("max_items and max_bytes must be >= 1")
    chunks: list[range] = []
    start, size = 0, 0
    for i, n in enumerate(sizes):
        if i > start and (i - start >= max_items or size + n > max_bytes):
            chunks.append(range(start, i))
            start, size = i, 0
        size += n
    if start < len(sizes):
        chunks.append(range(start, len(sizes)))
    return chunks


# =============================================================================================
# =============================================================================================
# bulk responses, retries, errors
# =============================================================================================
@dataclass(frozen=True)
class BulkOutcome:
    """What one ``_bulk`` response says, item by item (keys are the caller's document ids)."""

    results: dict[str, str]  # written: key -> result ("created", "updated", "deleted", "not_found", ...)
    retry: tuple[int, ...]  # positions in the request rejected with 429 (to send again)
    failed: dict[str, str]  # key -> "status type: reason" for every other rejection


def _error_type_reason(info: Any) -> tuple[str, str]:
    err = info.get("error", info) if isinstance(info, Mapping) else info
    if isinstance(err, Mapping):
        cause = err.get("caused_by")
        reason = str(err.get("reason", ""))
        if isinstance(cause, Mapping) and cause.get("reason"):
            reason = f"{reason} (caused by {cause.get('type', '')}: {cause['reason']})"
        return str(err.get("type", "error")), reason
    return "error", str(err)


def process_bulk_response(
    response: Mapping[str, Any], keys: Sequence[str], *, accept: Sequence[int] = ()
) -> BulkOutcome:
    """Sort the items of a ``_bulk`` response into written, to retry (429) and failed.

    ``keys`` name the request's actions in order. 2xx is written, as is a status in ``accept``
    (404 for deletes: the document was not there). Raises :class:`StoreError` when the response
    does not have one item per action.
    """
    items = response.get("items")
    if not isinstance(items, list) or len(items) != len(keys):
        n = len(items) if isinstance(items, list) else "no"
        raise StoreError(f"malformed _bulk response: {n} items for {len(keys)} actions")
    results: dict[str, str] = {}
    retry: list[int] = []
    failed: dict[str, str] = {}
    for pos, (key, item) in enumerate(zip(keys, items)):
        (op, body), = item.items()
        status = int(body.get("status", 500))
        if 200 <= status < 300 or status in accept:
            results[key] = str(body.get("result", op))
        elif status == 429:
            retry.append(pos)
        elif "error" not in body:
            failed[key] = f"{status} {body.get('result', 'failed')}"
        else:
            etype, reason = _error_type_reason(body)
            failed[key] = f"{status} {etype}: {reason}"
    return BulkOutcome(results, tuple(retry), failed)


def error_from_response(status: int | str, info: Any, *, what: str, index: str | None = None) -> SDRError:
    """The domain error for an OpenSearch error response (status and body).

    404 ``index_not_found_exception`` -> :class:`IndexNotFoundError`; 429 ->
    :class:`OverloadedError`; 401/403, 5xx and no status (connection) ->
    :class:`BackendUnavailableError`; 413 -> :class:`StoreError` naming the request limit; any other
    rejection -> :class:`StoreError`.
    """
    etype, reason = _error_type_reason(info)
    where = f" on index {index!r}" if index else ""
    if status == 404 and etype == "index_not_found_exception":
        err = info.get("error") if isinstance(info, Mapping) else None
        missing = err.get("index", index) if isinstance(err, Mapping) else index
        return IndexNotFoundError(f"OpenSearch index {missing!r} does not exist; run `sdr index` to build it")
    if status == 429:
        return OverloadedError(f"OpenSearch is overloaded (429) during {what}{where}: {reason}")
    if status in (401, 403):
        return BackendUnavailableError(
            f"OpenSearch refused {what}{where} ({status} {etype}: {reason}); check SDR_OPENSEARCH_USERNAME, "
            "SDR_OPENSEARCH_PASSWORD and the user's permissions"
        )
    if not isinstance(status, int) or status >= 500:
        return BackendUnavailableError(f"OpenSearch failed {what}{where} ({status} {etype}: {reason})")
    if status == 413:
        return StoreError(
            f"OpenSearch rejected {what}{where} as too large (413): the request body is over the cluster's "
            "http.max_content_length; lower SDR_OPENSEARCH_MAX_REQUEST_BYTES (and SDR_OPENSEARCH_BULK_CHUNK_BYTES) "
            "to the cluster's limit"
        )
    return StoreError(f"OpenSearch rejected {what}{where} ({status} {etype}: {reason})")


def shard_failure(response: Any) -> tuple[int, dict[str, Any]] | None:
    """``(status, error body)`` when a search answer (a ``_search``/``_count`` response, or any item of an
    ``_msearch`` one) says some of its shards failed (``_shards.failed`` > 0: a partial answer, which
    OpenSearch returns with 200 when other shards answered, e.g. while a node is lost and its copies move),
    else None. The status: 429 when every failure is a 429, a 4xx when every failure is one, else 503."""
    items = response.get("responses") if isinstance(response, Mapping) else None
    failures: list[Mapping[str, Any]] = []
    failed = 0
    for item in items if isinstance(items, list) else [response]:
        shards = item.get("_shards") if isinstance(item, Mapping) else None
        if isinstance(shards, Mapping) and int(shards.get("failed", 0) or 0) > 0:
            failed += int(shards["failed"])
            failures += [f for f in shards.get("failures") or [] if isinstance(f, Mapping)]
    if not failed:
        return None
    statuses = {int(f["status"]) for f in failures if isinstance(f.get("status"), int)}
    if statuses == {429}:
        status = 429
    elif statuses and all(400 <= s < 500 for s in statuses):
        status = min(statuses)
    else:
        status = 503
    first = failures[0].get("reason") if failures else None
    reason = first.get("reason") if isinstance(first, Mapping) else None
    etype = first.get("type") if isinstance(first, Mapping) else None
    return status, {"status": status, "error": {
        "type": etype or "search_phase_execution_exception",
        "reason": f"{failed} shard(s) failed, a partial answer refused" + (f": {reason}" if reason else "")}}
