"""The nested k-NN candidate search and its scores.

Pure functions: see :mod:`sdr_search.indexer.opensearch.requests`."""

from __future__ import annotations

import copy
from typing import Any, Mapping, Sequence

import numpy as np



from .layout import HITS_BY_DOC_ID, KNN_FIELD, MAX_KNN_K, MIN_EF_SEARCH, hit_doc_id
from .writes import error_from_response


# nested k-NN
# =============================================================================================
def build_nested_knn_query(
    vector: Sequence[float] | np.ndarray, k: int, *, exclude_ids: Sequence[str] = (), ef_search: int | None = None,
    filter: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Top-``k`` documents by their best sentence for one query vector.

    Without ``filter``, excluded documents are removed after the k-NN (``must_not`` on
    ``doc_id``), so the k-NN asks for ``k + len(exclude_ids)`` documents (at most
    :data:`MAX_KNN_K`, the k-NN query's limit; past it, excluded documents may leave fewer than
    ``k`` hits). ``ef_search`` (the HNSW candidate list, at least ``k``) goes in
    ``method_parameters``, which both engines read (2.16+).

    ``filter`` (a document-level query, :func:`build_candidate_filter`) is the k-NN query's own
    ``filter`` ("efficient filtering"): the search visits only the sentences of matching
    documents, so it returns ``k`` matching documents however rare they are. The k-NN plugin
    (2.12+) joins a filter on the parent document's fields down to its nested sentences; the
    excluded ids go inside it (``must_not``), so the k-NN asks for ``k`` documents."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if k > MAX_KNN_K:
        raise ValueError(f"k must be <= {MAX_KNN_K} (the k-NN query's limit), got {k}")
    if ef_search is not None and ef_search < MIN_EF_SEARCH:
        raise ValueError(f"ef_search must be >= {MIN_EF_SEARCH}, got {ef_search}")
    excluded = list(dict.fromkeys(str(i) for i in exclude_ids))
    asked = min(int(k) + (0 if filter is not None else len(excluded)), MAX_KNN_K)
    knn: dict[str, Any] = {"vector": np.asarray(vector, dtype=np.float32).ravel().tolist(), "k": asked}
    if ef_search is not None:
        knn["method_parameters"] = {"ef_search": max(int(ef_search), asked)}
    if filter is not None:
        restricted: dict[str, Any] = {"filter": [copy.deepcopy(dict(filter))]}
        if excluded:
            restricted["must_not"] = [{"terms": {"doc_id": excluded}}]
        knn["filter"] = {"bool": restricted}
    query: dict[str, Any] = {"nested": {"path": "sentences", "score_mode": "max", "query": {"knn": {KNN_FIELD: knn}}}}
    if excluded and filter is None:
        query = {"bool": {"must": [query], "must_not": [{"terms": {"doc_id": excluded}}]}}
    return {"size": int(k), **HITS_BY_DOC_ID, "track_total_hits": False, "query": query}


def build_msearch_body(
    vectors: np.ndarray, k: int, index: str, *, exclude_ids: Sequence[str] = (), ef_search: int | None = None,
    filter: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """``_msearch`` body (header, query, header, query, ...) with one nested k-NN per row."""
    body: list[dict[str, Any]] = []
    for row in np.atleast_2d(np.asarray(vectors, dtype=np.float32)):
        body.append({"index": index})
        body.append(build_nested_knn_query(row, k, exclude_ids=exclude_ids, ef_search=ef_search, filter=filter))
    return body


def build_msearch_bodies(
    vectors: np.ndarray, k: int, index: str, *, exclude_ids: Sequence[str] = (), batch_size: int = 100,
    ef_search: int | None = None, filter: Mapping[str, Any] | None = None,
) -> list[list[dict[str, Any]]]:
    """The ``_msearch`` bodies for all rows, at most ``batch_size`` searches each, rows in order."""
    if batch_size < 1:
        raise ValueError("batch_size must be >= 1")
    q = np.atleast_2d(np.asarray(vectors, dtype=np.float32))
    return [build_msearch_body(q[a : a + batch_size], k, index, exclude_ids=exclude_ids, ef_search=ef_search,
                               filter=filter)
            for a in range(0, q.shape[0], batch_size)]


def knn_score_to_cosine(score: float | np.ndarray, space_type: str = "innerproduct") -> float | np.ndarray:
    """Cosine of unit vectors from the k-NN score OpenSearch reports in ``space_type``.

    * ``innerproduct`` (lucene and faiss alike, measured on a 2.19 node): ``x.y + 1`` for
      ``x.y >= 0``, ``1 / (1 - x.y)`` below, so ``x.y = score - 1`` for ``score >= 1`` and
      ``1 - 1 / score`` below;
    * ``cosinesimil``: ``(1 + cos) / 2``;
    * ``l2``: ``1 / (1 + d^2)`` with ``d^2 = 2 - 2 cos`` for unit vectors.

    Scores are > 0 (``cosinesimil`` >= 0).
    """
    s = np.asarray(score, dtype=np.float64)
    if np.any(~np.isfinite(s)) or np.any(s < 0) or (space_type != "cosinesimil" and np.any(s == 0)):
        raise ValueError(f"k-NN {space_type} scores must be finite and > 0")
    if space_type == "innerproduct":
        out = np.where(s >= 1.0, s - 1.0, 1.0 - 1.0 / s)
    elif space_type == "cosinesimil":
        out = 2.0 * s - 1.0
    elif space_type == "l2":
        out = 1.0 - (1.0 / s - 1.0) / 2.0
    else:
        raise ValueError(f"no score translation for k-NN space type {space_type!r}")
    return float(out) if out.ndim == 0 else out


def cosine_to_knn_score(cosine: float | np.ndarray, space_type: str = "innerproduct") -> float | np.ndarray:
    """The k-NN score OpenSearch reports for cosine ``cosine`` in ``space_type`` (inverse of
    :func:`knn_score_to_cosine`)."""
    x = np.asarray(cosine, dtype=np.float64)
    if space_type == "innerproduct":
        out = np.where(x > 0, x + 1.0, 1.0 / (1.0 - np.minimum(x, 0.0)))
    elif space_type == "cosinesimil":
        out = (1.0 + x) / 2.0
    elif space_type == "l2":
        out = 1.0 / (1.0 + (2.0 - 2.0 * x))
    else:
        raise ValueError(f"no score translation for k-NN space type {space_type!r}")
    return float(out) if out.ndim == 0 else out


def parse_knn_responses(
    responses: Sequence[Mapping[str, Any]], *, k: int, index: str | None = None, space_type: str = "innerproduct"
) -> tuple[list[list[str]], list[np.ndarray]]:
    """Document ids (from ``fields.doc_id``) and cosines (float32), best first, per response.

    An item with an ``error`` raises the matching domain error (:func:`error_from_response`).
    """
    ids: list[list[str]] = []
    scores: list[np.ndarray] = []
    for item in responses:
        if "error" in item:
            raise error_from_response(item.get("status", 500), item, what="a nested k-NN search", index=index)
        hits = item.get("hits", {}).get("hits", [])[:k]
        ids.append([str(hit_doc_id(h)) for h in hits])
        raw = np.asarray([h["_score"] for h in hits], dtype=np.float64)
        scores.append(np.asarray(knn_score_to_cosine(raw, space_type) if raw.size else raw, dtype=np.float32))
    return ids, scores


# =============================================================================================
