"""Requests of the sdr plugin: candidates, exact SDR, vectors (opensearch-plugin/README.md).

Pure functions: see :mod:`sdr_search.indexer.opensearch.requests`."""

from __future__ import annotations

import copy
from dataclasses import dataclass, fields
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from sdr_search.core.errors import (
    InvalidInputError,
    StoreError,
)
from sdr_search.core.vectors import DocVectors


from .layout import (AGGREGATIONS, HITS_BY_DOC_ID, MAX_KNN_K, decode_vectors_b64, document_os_id, encode_vectors_b64,
                     hit_doc_id)
from .writes import error_from_response


# the sdr plugin: candidates, exact SDR, vectors (opensearch-plugin/README.md)
# =============================================================================================
@dataclass(frozen=True)
class PluginLimits:
    """The node's bounds on one plugin request (the cluster settings ``sdr.limits.*``, opensearch-plugin/README.md,
    "Limits"); the defaults are the plugin's. The store keeps every request within them, so the node never has to
    refuse one of its requests: it pages what can be paged and refuses, naming the limit, what cannot."""

    max_source_sentences: int = 20_000
    """Rows of a source (its sentences, or its paragraph centroids)."""
    max_source_values: int = 10_000_000
    """Float values of a source (rows x dimension)."""
    max_explain_pairs: int = 1_000_000
    """Explained hits x source sentences in one search."""
    max_fetch_values: int = 10_000_000
    """Float values one ``sdr_vectors`` fetch returns (a single hit alone is always allowed)."""
    max_candidate_hits: int = 10_000_000
    """Source sentences x hits per sentence of one ``sdr_candidates``."""


LIMITS_PREFIX = "sdr.limits."


def parse_plugin_limits(settings: Mapping[str, Any] | None) -> PluginLimits:
    """The limits in a ``GET _cluster/settings?include_defaults=true&flat_settings=true`` answer (transient over
    persistent over the node's defaults; a limit the node does not list keeps the plugin's default)."""
    values: dict[str, int] = {}
    for scope in ("defaults", "persistent", "transient"):
        for key, value in ((settings or {}).get(scope) or {}).items():
            name = key[len(LIMITS_PREFIX):] if key.startswith(LIMITS_PREFIX) else None
            if name in {f.name for f in fields(PluginLimits)}:
                try:
                    values[name] = int(value)
                except (TypeError, ValueError):
                    continue
    return PluginLimits(**values)


def check_source_limits(limits: PluginLimits, rows: int, dim: int, what: str = "the source") -> None:
    """:class:`InvalidInputError` naming the limit when a source of ``rows`` x ``dim`` is more than one plugin request
    may send (it cannot be split: every row is scored against every candidate)."""
    if rows > limits.max_source_sentences:
        raise InvalidInputError(f"{what} has {rows} sentences, more than the {limits.max_source_sentences} the node's sdr "
                                f"plugin takes in one request (sdr.limits.max_source_sentences)")
    if rows * dim > limits.max_source_values:
        raise InvalidInputError(f"{what} has {rows} x {dim} = {rows * dim} values, more than the {limits.max_source_values} "
                                "the node's sdr plugin takes in one request (sdr.limits.max_source_values)")


def candidate_hits_per_sentence(k: int, ef_search: int, search: str, oversample: int) -> int:
    """Hits the plugin's candidate stage collects per source sentence (the bound ``sdr.limits.max_candidate_hits``
    counts): ``max(k, ef_search)`` documents, or ``max(k x oversample, ef_search)`` sentences."""
    return max(k * oversample, ef_search) if search == "sentences" else max(k, ef_search)


def explained_per_search(limits: PluginLimits, sentences: int) -> int:
    """How many hits one search may explain for a source of ``sentences`` (``sdr.limits.max_explain_pairs``), 1 at
    least (one hit's breakdown of a source within the source limits always fits)."""
    return max(1, limits.max_explain_pairs // max(1, sentences))


def pack_by_values(ids: Sequence[str], values: Mapping[str, int], max_values: int, max_ids: int) -> Iterator[list[str]]:
    """Consecutive runs of ``ids``, each of at most ``max_ids`` ids whose ``values`` add up to at most
    ``max_values`` (an id over it alone is a run of its own)."""
    run: list[str] = []
    total = 0
    for i in ids:
        v = int(values.get(i, 0))
        if run and (len(run) >= max_ids or total + v > max_values):
            yield run
            run, total = [], 0
        run.append(i)
        total += v
    if run:
        yield run


def _source_clause(vectors: np.ndarray, par_sizes: Sequence[int], mu: Sequence[float] | None,
                   sigma: Sequence[float] | None) -> dict[str, Any]:
    """The source part shared by ``sdr_candidates`` and the ``sdr`` rescorer: base64 float32 rows,
    paragraph sizes, and the per-paragraph statistics when given."""
    clause: dict[str, Any] = {"vectors": encode_vectors_b64(np.asarray(vectors, dtype=np.float32)),
                              "paragraph_sizes": [int(n) for n in par_sizes]}
    if mu is not None:
        clause["mu"] = [float(v) for v in mu]
        clause["sigma"] = [float(v) for v in sigma]  # type: ignore[union-attr]
    return clause


def build_sdr_candidates_query(
    vectors: np.ndarray, par_sizes: Sequence[int], *, k: int, size: int, ef_search: int,
    aggregation: str = "weighted-sum", mu: Sequence[float] | None = None, sigma: Sequence[float] | None = None,
    exclude_ids: Sequence[str] = (), filter: Mapping[str, Any] | None = None, search: str = "documents",
    oversample: int = 4, centroids: np.ndarray | None = None,
) -> dict[str, Any]:
    """One search that runs SDR's candidate stage on each shard (the plugin's ``sdr_candidates``
    query): per source sentence (a row of ``vectors``, grouped into paragraphs by ``par_sizes``) the
    nested k-NN top ``k`` documents with ``ef_search``, aggregated per document (``aggregation``, with
    the source paragraphs' ``mu``/``sigma`` when given), the best ``size`` returned with their aggregate
    score. ``exclude_ids`` (document ids, ``doc_id``) and ``filter`` (a document-level query,
    :func:`build_candidate_filter`) as :func:`build_nested_knn_query` applies them: without a filter
    the excluded documents are asked for on top of ``k`` and dropped; with one, they are left out
    inside it. ``search`` ``documents``: each sentence's search is the nested k-NN of ``k`` documents;
    ``sentences``: the k-NN of ``max(k * oversample, ef_search)`` sentences, each document kept once,
    the first ``k`` (the embedded store's nested k-NN). ``centroids`` (the source's paragraph centroids,
    ``(n, dim)``): each hit also carries its n centroid rows (the ``sdr_vectors`` fetch of
    :func:`build_vectors_search`, :func:`parse_centroid_rows_hit`), so the pre-rank needs no request of its own."""
    if search not in ("documents", "sentences"):
        raise ValueError(f"search must be documents or sentences, got {search!r}")
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"aggregation must be one of {', '.join(AGGREGATIONS)}, got {aggregation!r}")
    if not 1 <= int(k) <= MAX_KNN_K:
        raise ValueError(f"k must be between 1 and {MAX_KNN_K}, got {k}")
    clause = {**_source_clause(vectors, par_sizes, mu, sigma), "k": int(k),
              "ef_search": max(int(ef_search), int(k)), "aggregation": aggregation}
    if search == "sentences":
        clause.update(search="sentences", oversample=int(oversample))
    excluded = list(dict.fromkeys(str(i) for i in exclude_ids))
    if excluded:
        clause["exclude"] = excluded
    if filter is not None:
        clause["filter"] = copy.deepcopy(dict(filter))
    body = {"size": int(size), **HITS_BY_DOC_ID, "track_total_hits": False, "query": {"sdr_candidates": clause}}
    if centroids is not None:
        body["ext"] = {"sdr_vectors": {"centroids": encode_vectors_b64(centroids)}}
    return body


def build_sentence_hits_msearch(
    index: str, vectors: np.ndarray, *, k: int, ef_search: int, oversample: int = 4, exclude_ids: Sequence[str] = (),
    filter: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """``_msearch`` body with one ``sdr_candidates`` search per row of ``vectors`` (a source of that one
    sentence, ``sentences`` search, aggregation ``sum``: each hit's score is its best sentence's cosine), ``size``
    ``k``: the coordinator merges the shards' hits of each search, so each row's hits are the index's top ``k``
    documents whatever the shard count (the embedded store's nested k-NN), for the engine to aggregate."""
    body: list[dict[str, Any]] = []
    for row in np.atleast_2d(vectors):
        body.append({"index": index})
        body.append(build_sdr_candidates_query(row[None, :], [1], k=k, size=k, ef_search=ef_search, aggregation="sum",
                                               exclude_ids=exclude_ids, filter=filter, search="sentences",
                                               oversample=oversample))
    return body


def build_sdr_scores_msearch(
    index: str, sources: Sequence[tuple[np.ndarray, Sequence[int], Sequence[float], Sequence[float]]],
    ids: Sequence[str], *, explain: bool = False, explain_top: int = 0, explain_source: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """``_msearch`` body with one search per source (``(vectors, par_sizes, mu, sigma)``): the
    documents ``ids`` (by ``_id``) rescored by the plugin's exact SDR (``sdr`` rescorer, window =
    all of them). ``explain`` asks for the ``_sdr`` breakdown of each hit, ``explain_top`` for that of
    the best ``explain_top`` hits only (first source only); ``explain_source``, with either, for those
    hits' ``_source`` filtered to these fields too (``_sdr_source``)."""
    unique = list(dict.fromkeys(str(i) for i in ids))
    body: list[dict[str, Any]] = []
    for n, (vectors, par_sizes, mu, sigma) in enumerate(sources):
        clause = _source_clause(vectors, par_sizes, mu, sigma)
        if explain and n == 0:
            clause["explain"] = True
        elif explain_top and n == 0:
            clause["explain_top"] = int(explain_top)
        if explain_source and n == 0 and (explain or explain_top):
            clause["explain_source"] = list(explain_source)
        body.append({"index": index})
        body.append({"size": len(unique), **HITS_BY_DOC_ID, "track_total_hits": False,
                     "query": {"ids": {"values": [document_os_id(i) for i in unique]}},
                     "rescore": {"window_size": max(1, len(unique)), "sdr": clause}})
    return body


NO_SENTENCES_SCORE = -3.4028234663852886e38
"""The plugin's score for a document without sentence vectors (SDR's -infinity as the lowest float)."""


def parse_sdr_hits(item: Mapping[str, Any], *, index: str | None = None, what: str = "an sdr search"
                   ) -> tuple[list[str], np.ndarray, list[Mapping[str, Any] | None]]:
    """Document ids (``fields.doc_id``), scores (float64, ``-inf`` for a document without sentence
    vectors) and the ``_sdr`` explanations (None where absent) of one plugin search, in hit order. An
    item with an ``error`` raises the matching domain error. (The explained hits' ``_source``:
    :func:`parse_sdr_sources`.)"""
    if "error" in item:
        raise error_from_response(item.get("status", 500), item, what=what, index=index)
    hits = item.get("hits", {}).get("hits", [])
    ids = [str(hit_doc_id(h)) for h in hits]
    scores = np.asarray([float(h["_score"]) for h in hits], dtype=np.float64)
    scores[scores <= NO_SENTENCES_SCORE * 0.999] = -np.inf
    explained = [(h.get("fields", {}).get("_sdr") or [None])[0] for h in hits]
    return ids, scores, explained


def parse_sdr_sources(item: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """``doc_id -> _source`` (filtered as asked) of the hits of one plugin search that carry ``_sdr_source``
    (the explained hits, with ``explain_source``)."""
    out: dict[str, Mapping[str, Any]] = {}
    for h in item.get("hits", {}).get("hits", []):
        got = (h.get("fields", {}).get("_sdr_source") or [None])[0]
        if isinstance(got, Mapping):
            out[str(hit_doc_id(h))] = got
    return out


def build_vectors_search(ids: Sequence[str], *, fields: Sequence[str] = ("doc_id", "par_sizes"),
                         mean: bool = False, centroids: np.ndarray | None = None) -> dict[str, Any]:
    """A search for the documents ``ids`` (by ``_id``) that returns each one's sentence vectors from
    the index's vector data (the plugin's ``sdr_vectors`` fetch), with ``fields`` of ``_source`` (none:
    no stored field read at all); every hit is known by its ``doc_id`` (:func:`hit_doc_id`);
    with ``mean``, each one's normalised mean sentence vector and paragraph count instead; with
    ``centroids`` (a source's paragraph centroids, ``(n, dim)``), each one's n centroid rows instead
    (:func:`parse_centroid_rows_hit`)."""
    unique = list(dict.fromkeys(str(i) for i in ids))
    ext: dict[str, Any] = {"mean": True} if mean else {}
    if centroids is not None:
        ext["centroids"] = encode_vectors_b64(centroids)
    hits: dict[str, Any] = {"_source": list(fields), "docvalue_fields": ["doc_id"]} if fields else dict(HITS_BY_DOC_ID)
    return {"size": len(unique), **hits, "track_total_hits": False,
            "query": {"ids": {"values": [document_os_id(i) for i in unique]}},
            "ext": {"sdr_vectors": ext}}


def build_sentence_counts_search(ids: Sequence[str]) -> dict[str, Any]:
    """A search for the documents ``ids`` (by ``_id``) that returns each one's ``doc_id`` and recorded sentence
    count (``n_sentences``) from doc values, nothing else: what their vectors weigh in a fetch."""
    unique = list(dict.fromkeys(str(i) for i in ids))
    return {"size": len(unique), "_source": False, "stored_fields": "_none_", "track_total_hits": False,
            "docvalue_fields": ["doc_id", "n_sentences"], "query": {"ids": {"values": [document_os_id(i) for i in unique]}}}


def parse_sentence_counts(response: Mapping[str, Any]) -> dict[str, int]:
    """``doc_id -> n_sentences`` of a :func:`build_sentence_counts_search` answer."""
    return {str(hit_doc_id(h)): int((h.get("fields", {}).get("n_sentences") or [0])[0])
            for h in response.get("hits", {}).get("hits", [])}


def parse_centroid_rows_hit(hit: Mapping[str, Any], n: int) -> np.ndarray:
    """The ``n`` centroid rows (float32: each source paragraph centroid's best cosine with the
    document's paragraph centroids) of one hit of ``build_vectors_search(..., centroids=...)``."""
    doc_id = hit_doc_id(hit)
    got = (hit.get("fields", {}).get("_sdr_vectors") or [None])[0]
    if not isinstance(got, Mapping) or "centroid_rows" not in got:
        raise StoreError(f"the node returned no centroid rows for document {doc_id!r}")
    if int(got.get("sentences", 0)) == 0 or got["centroid_rows"] is None:
        raise StoreError(f"stored vectors of document {doc_id!r} are missing: the index holds no sentence vector for it")
    rows = decode_vectors_b64(str(got["centroid_rows"]), 1)[:, 0]
    if rows.shape[0] != n:
        raise StoreError(f"the node returned {rows.shape[0]} centroid rows for document {doc_id!r}, {n} asked for")
    return rows


def parse_mean_hit(hit: Mapping[str, Any], dim: int) -> tuple[int, np.ndarray]:
    """``(paragraphs, normalised mean vector)`` of one hit of ``build_vectors_search(..., mean=True)``."""
    doc_id = hit_doc_id(hit)
    got = (hit.get("fields", {}).get("_sdr_vectors") or [None])[0]
    if not isinstance(got, Mapping) or "mean" not in got:
        raise StoreError(f"the node returned no mean vector for document {doc_id!r}")
    if int(got.get("sentences", 0)) == 0:
        raise StoreError(f"stored vectors of document {doc_id!r} are missing")
    return int(got["paragraphs"]), decode_vectors_b64(str(got["mean"]), dim)[0]


def parse_vector_hit(hit: Mapping[str, Any], dim: int) -> DocVectors:
    """The :class:`DocVectors` of one hit of :func:`build_vectors_search` (or a scan with the same
    ``ext``). Raises :class:`StoreError` when the plugin's vectors are missing, of another dimension,
    or do not match the document's recorded paragraph sizes (``_source.par_sizes``)."""
    src = hit.get("_source") or {}
    doc_id = hit_doc_id(hit)
    got = (hit.get("fields", {}).get("_sdr_vectors") or [None])[0]
    if not isinstance(got, Mapping):
        raise StoreError(f"the node returned no vectors for document {doc_id!r} (is the sdr plugin installed?)")
    sizes = [int(n) for n in got.get("paragraph_sizes", [])]
    recorded = [int(n) for n in src.get("par_sizes", sizes)]
    if int(got.get("sentences", 0)) == 0:
        raise StoreError(f"stored vectors of document {doc_id!r} are missing: the index holds no sentence vector for it")
    if int(got.get("dim", dim)) != int(dim):
        raise StoreError(f"stored vectors of document {doc_id!r} have dimension {got.get('dim')}, the index {dim}")
    if sizes != recorded:
        raise StoreError(f"stored vectors of document {doc_id!r} are damaged: paragraphs of {sizes} sentences in the "
                         f"vector data, {recorded} recorded")
    return DocVectors(decode_vectors_b64(str(got["vectors"]), dim),
                      np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64))


# =============================================================================================
