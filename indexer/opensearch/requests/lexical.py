"""Lexical (BM25) search.

Pure functions: see :mod:`sdr_search.indexer.opensearch.requests`."""

from __future__ import annotations

import copy
from typing import Any, Mapping, Sequence

import numpy as np



from .layout import HITS_BY_DOC_ID, LEXICAL_FIELD, document_os_id, hit_doc_id
from .writes import error_from_response


# lexical (BM25) search
# =============================================================================================
def _lexical_body(query: dict[str, Any], size: int, *, exclude_ids: Sequence[str] = (),
                  only_ids: Sequence[str] | None = None, filter: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Wrap a scoring ``query``: ids and scores only, ``exclude_ids`` removed, restricted to
    ``only_ids`` and to the documents ``filter`` matches (filters: they do not change the scores)
    when given."""
    if size < 0:
        raise ValueError(f"size must be >= 0, got {size}")
    excluded = list(dict.fromkeys(str(i) for i in exclude_ids))
    if excluded or only_ids is not None or filter is not None:
        wrapped: dict[str, Any] = {"must": [query]}
        if excluded:
            wrapped["must_not"] = [{"terms": {"doc_id": excluded}}]
        filters: list[dict[str, Any]] = []
        if only_ids is not None:
            filters.append({"terms": {"doc_id": list(dict.fromkeys(str(i) for i in only_ids))}})
        if filter is not None:
            filters.append(copy.deepcopy(dict(filter)))
        if filters:
            wrapped["filter"] = filters
        query = {"bool": wrapped}
    return {"size": int(size), **HITS_BY_DOC_ID, "track_total_hits": False,
            "query": query}


def build_terms_query(
    terms: Mapping[str, int], size: int, *, exclude_ids: Sequence[str] = (), only_ids: Sequence[str] | None = None,
    field: str = LEXICAL_FIELD, filter: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """BM25 of a source given as its terms with counts (:func:`sdr_search.core.lexical.query_terms`):
    one ``term`` query per term, boosted by its count, summed (``bool.should``). With the
    ``sdr_text`` analyzer and ``sdr_bm25`` similarity of the mapping this is the embedded store's
    BM25 (``sum_t count(t) * BM25(t, d)``) over the given terms. One clause per term: keep the
    terms under the cluster's ``indices.query.bool.max_clause_count`` (1024 by default).
    ``filter`` (a document-level query, :func:`build_candidate_filter`) restricts the hits."""
    if not terms:
        return _lexical_body({"match_none": {}}, size, exclude_ids=exclude_ids, only_ids=only_ids, filter=filter)
    should = [{"term": {field: {"value": t, "boost": float(c)}}} for t, c in terms.items()]
    return _lexical_body({"bool": {"should": should}}, size, exclude_ids=exclude_ids, only_ids=only_ids, filter=filter)


def build_more_like_this_query(
    size: int, *, like_text: str | None = None, like_ids: Sequence[str] = (), index: str | None = None,
    exclude_ids: Sequence[str] = (), only_ids: Sequence[str] | None = None, field: str = LEXICAL_FIELD,
    max_query_terms: int = 1000, min_term_freq: int = 1, min_doc_freq: int = 1,
    minimum_should_match: str = "1", filter: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """OpenSearch ``more_like_this`` over ``field``: ``like`` a text, or indexed documents by id
    (OpenSearch reads their ``text`` and leaves them out of the hits). OpenSearch's defaults
    (25 terms, ``min_term_freq`` 2, ``min_doc_freq`` 5, ``minimum_should_match`` 30%) suit short
    documents; for whole-document sources these defaults keep up to ``max_query_terms`` terms
    chosen by count x idf, each scored once by BM25 (no count weighting), and a document matching
    any one of them is a hit (``bench/experiments/lexical_variants.py`` compares this with
    :func:`build_terms_query`)."""
    if (like_text is None) == (not like_ids):
        raise ValueError("give like_text or like_ids, not both")
    if like_ids and index is None:
        raise ValueError("like_ids needs the index name")
    for name, value in {"max_query_terms": max_query_terms, "min_term_freq": min_term_freq}.items():
        if int(value) < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    if int(min_doc_freq) < 0:
        raise ValueError(f"min_doc_freq must be >= 0, got {min_doc_freq}")
    like: Any = like_text if like_text is not None else [
        {"_index": index, "_id": document_os_id(str(i))} for i in like_ids
    ]
    mlt = {"more_like_this": {
        "fields": [field], "like": like, "max_query_terms": int(max_query_terms),
        "min_term_freq": int(min_term_freq), "min_doc_freq": int(min_doc_freq),
        "minimum_should_match": str(minimum_should_match), "include": False,
    }}
    return _lexical_body(mlt, size, exclude_ids=exclude_ids, only_ids=only_ids, filter=filter)


def build_lexical_msearch(index: str, top: Mapping[str, Any] | None, scored: Sequence[Mapping[str, Any]] = ()) -> list[dict[str, Any]]:
    """``_msearch`` body: the top-k lexical search (if any), then the searches that score given
    ids, in that order. Each runs ``dfs_query_then_fetch``: BM25 statistics (document frequency,
    average length) of the whole index rather than of each shard, so scores equal the embedded
    store's BM25 whatever the number of shards (one extra round trip per shard)."""
    body: list[dict[str, Any]] = []
    for query in ([top] if top is not None else []) + list(scored):
        body.append({"index": index, "search_type": "dfs_query_then_fetch"})
        body.append(dict(query))
    return body


def parse_lexical_response(item: Mapping[str, Any], *, index: str | None = None) -> tuple[list[str], np.ndarray]:
    """Document ids (``fields.doc_id``) and BM25 scores (float32) of one search response, in
    order. An item with an ``error`` raises the matching domain error."""
    if "error" in item:
        raise error_from_response(item.get("status", 500), item, what="a lexical search", index=index)
    hits = item.get("hits", {}).get("hits", [])
    return ([str(hit_doc_id(h)) for h in hits],
            np.asarray([float(h["_score"]) for h in hits], dtype=np.float32))
