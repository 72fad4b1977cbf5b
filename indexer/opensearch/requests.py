"""Pure builders of OpenSearch request bodies for an sdr-search index, and pure readers of the
responses. Nothing here imports or calls a client: every function takes plain values and returns
dicts, strings or arrays, so the JSON is unit-tested without a cluster
(:mod:`sdr_search.indexer.opensearch.store` sends it).

Two indices make one store (see :mod:`sdr_search.indexer.opensearch.store`):

* the **document index** (``mappings/index.json``): one top-level document per SDR document with
  its text, paragraphs, counts, provenance, all sentence vectors as one base64 float32 string
  (``vectors_b64``, the cheap fetch path of the exact rerank) and a ``nested`` field
  ``sentences`` whose ``knn_vector`` (HNSW, inner product; engine ``lucene`` or ``faiss``) serves
  nested k-NN;
* the document index's ``text`` field is analysed like bm25s (analyzer ``sdr_text``: the
  pattern tokenizer ``(?U)\\b\\w\\w+\\b``, lowercase, ``_english_`` stop words; similarity
  ``sdr_bm25``: k1 = 1.5, b = 0.75), so lexical search (:func:`build_terms_query`, or
  :func:`build_more_like_this_query`) is the embedded store's BM25;
* the **state index** ``<index>-sdr-state`` (``mappings/state.json``): per-document
  normalisation statistics, the reference sample with its vectors, and one ``state`` document
  (statistics version, stale flag, reference header).

Version notes (targets: OpenSearch 2.19+ and 3.x with the k-NN plugin):

* **k counts documents (2.12+).** For a ``knn`` query inside ``nested``, each segment returns
  the ``k`` nearest *parent documents* (each scored by its best nested vector), not the ``k``
  nearest vectors, so one document with many close sentences cannot crowd out the others
  (https://opensearch.org/blog/enhanced-multi-vector-support-in-opensearch-knn/). Before 2.12 a
  query could return fewer than ``k`` documents. ``score_mode: max`` makes the parent's score
  its best sentence's score explicitly.
* **expand_nested_docs (2.19+)** scores every nested vector of the returned documents (inner hits
  for all sentences, parent score = mean, or max with ``score_mode: max``). Not used: the first
  stage needs one score per document; it could feed sentence-level explanations later.
* **Derived source.** ``index.knn.derived_source.enabled`` keeps vectors out of stored
  ``_source`` and rebuilds them on read, so ``_update`` and reindex keep working. The k-NN plugin
  turns it on for every k-NN index created on 3.0+ *unless the request sets it*, so
  :func:`build_index_body` always sets it: ``true`` (and no ``_source.excludes``: combining the
  two breaks vector reconstruction, opensearch-project/k-NN#3536) or ``false`` with
  ``_source.excludes`` on the vectors, which means a partial ``_update`` or a reindex of a
  document *drops its vectors*. This backend therefore never updates a document in place:
  statistics live in the state index. (2.19 has derived source as an experimental feature,
  nested fields included since 2.19.2; the store turns it on only on 3.x unless
  ``SDR_OPENSEARCH_DERIVED_SOURCE=on``. Tested both ways on 2.19.1 and 3.5.0 nodes.)
* **Engine.** ``lucene`` (pure Java, in every k-NN distribution, including the Maven Central one
  that has no native libraries) or ``faiss`` (native; a node without its JNI library exits on the
  first graph build). ``ef_search`` is sent with every query (``method_parameters.ef_search``,
  2.16+): the index setting ``index.knn.algo_param.ef_search`` is read by nmslib only
  (k-NN ``IndexUtil.getParametersAtLoading``). Engine and space type are read from the filled
  mapping and recorded in ``_meta``, so an edited ``mappings/index.json`` cannot silently change
  the score translation.
* **Limits.** A k-NN query takes ``k <= 10,000`` (:data:`MAX_KNN_K`); ``ef_search >= 2``.
* **Score translation.** See :func:`knn_score_to_cosine`.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path
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
from sdr_search.core.scoring import NormStats
from sdr_search.core.vectors import DocVectors

from sdr_search.indexer.store import IndexMeta, ReferenceParagraphs

__all__ = [
    "ENGINES",
    "SPACE_TYPES",
    "MAX_KNN_K",
    "MIN_EF_SEARCH",
    "knn_method",
    "bm25_k1",
    "FORMAT_VERSION",
    "KNN_FIELD",
    "MAX_ID_BYTES",
    "STATE_DOC_ID",
    "load_mapping",
    "fill_placeholders",
    "state_index_name",
    "document_os_id",
    "stats_os_id",
    "reference_os_id",
    "build_meta",
    "index_meta_from_meta",
    "build_index_body",
    "build_state_index_body",
    "initial_state",
    "encode_vectors_b64",
    "decode_vectors_b64",
    "build_document_source",
    "build_bulk_actions",
    "build_delete_actions",
    "build_stats_update_actions",
    "build_stats_delete_actions",
    "build_reference_actions",
    "build_reference_delete_actions",
    "bulk_lines",
    "chunk_by_size",
    "MetadataField",
    "metadata_fields",
    "build_metadata_filter",
    "build_candidate_filter",
    "MATCH_NONE",
    "MAX_ALLOWED_IDS",
    "build_nested_knn_query",
    "build_msearch_body",
    "build_msearch_bodies",
    "parse_knn_responses",
    "knn_score_to_cosine",
    "cosine_to_knn_score",
    "build_mget_body",
    "VECTORS_B64",
    "VECTORS_INDEX",
    "AGGREGATIONS",
    "build_sdr_candidates_query",
    "build_sdr_scores_msearch",
    "parse_sdr_hits",
    "build_vectors_search",
    "parse_vector_hit",
    "parse_mean_hit",
    "LEXICAL_FIELD",
    "build_terms_query",
    "build_more_like_this_query",
    "build_lexical_msearch",
    "parse_lexical_response",
    "build_counts_query",
    "build_stats_count_query",
    "build_scan_query",
    "build_alias_swap",
    "BulkOutcome",
    "process_bulk_response",
    "error_from_response",
]

FORMAT_VERSION = 1
"""Layout version recorded in ``_meta.sdr.format_version``; a newer layout is refused."""

KNN_FIELD = "sentences.vector"
ENGINES = ("lucene", "faiss")
"""k-NN engines the store creates indices with (nmslib is deprecated and unsupported)."""
SPACE_TYPES = ("innerproduct", "cosinesimil", "l2")
"""k-NN space types whose scores :func:`knn_score_to_cosine` translates back to cosines."""
MAX_KNN_K = 10_000
"""The k-NN query's largest ``k``."""
MIN_EF_SEARCH = 2
"""The smallest ``ef_search`` the k-NN plugin accepts."""
LEXICAL_FIELD = "text"
"""The whole-document text field (analyzer ``sdr_text``, similarity ``sdr_bm25``) of lexical search."""
MAX_ID_BYTES = 512
"""OpenSearch refuses a document ``_id`` longer than 512 bytes."""
MAX_ALLOWED_IDS = 10_000
"""The most document ids one filtered search names (``allowed_ids``; a ``terms`` query, sent once
per source sentence). A broader restriction is given as a metadata filter (``filter=``)."""
MATCH_NONE: dict[str, Any] = {"match_none": {}}
"""The filter of a metadata filter that no stored document can match (nothing to search)."""

STATE_DOC_ID = "state"
VECTORS_B64 = "b64"
"""``_meta.sdr.vectors`` of an index whose documents carry the base64 copy ``vectors_b64`` (every index
created before the sdr plugin, and any created on a node without it)."""
VECTORS_INDEX = "index"
"""``_meta.sdr.vectors`` of an index that keeps the vectors only in its nested ``knn_vector`` field
(read back through the sdr plugin: :func:`build_vectors_search`)."""
AGGREGATIONS = ("weighted-sum", "sum", "votes", "sdr-bound")
"""The candidate aggregations the sdr plugin's ``sdr_candidates`` query computes (as
``reranker/candidates.py``)."""
_HASHED_ID_PREFIX = "sha256-"
_PLACEHOLDER = re.compile(r"^\$\{([a-z_]+)\}$")
_MAPPINGS_PACKAGE_DIR = "mappings"


# =============================================================================================
# mappings
# =============================================================================================
def _checkout_mappings_dir() -> Path | None:
    """``mappings/`` of a source checkout (the file users see and edit), if this is one."""
    root = Path(__file__).resolve().parents[2]
    if (root / "pyproject.toml").is_file() and (root / "mappings").is_dir():
        return root / "mappings"
    return None


def load_mapping(name: str) -> dict[str, Any]:
    """The JSON body ``name`` (``"index.json"``, ``"state.json"``) with placeholders unfilled.

    Read from the checkout's ``mappings/`` when running from a source tree (editable install),
    else from the copy packaged in ``indexer/opensearch/mappings/`` (wheel). A unit test keeps
    the two copies identical.
    """
    checkout = _checkout_mappings_dir()
    if checkout is not None and (checkout / name).is_file():
        text = (checkout / name).read_text(encoding="utf-8")
    else:
        text = resources.files(__package__).joinpath(_MAPPINGS_PACKAGE_DIR, name).read_text(encoding="utf-8")
    return json.loads(text)


def fill_placeholders(node: Any, values: Mapping[str, Any]) -> Any:
    """A deep copy of ``node`` with every string ``"${name}"`` replaced by ``values[name]``
    (keeping the value's JSON type). An unknown placeholder raises ``KeyError``."""
    if isinstance(node, dict):
        return {k: fill_placeholders(v, values) for k, v in node.items()}
    if isinstance(node, list):
        return [fill_placeholders(v, values) for v in node]
    if isinstance(node, str):
        m = _PLACEHOLDER.match(node)
        if m:
            if m.group(1) not in values:
                raise KeyError(f"mapping placeholder ${{{m.group(1)}}} has no value")
            return values[m.group(1)]
    return copy.deepcopy(node)


def state_index_name(index: str) -> str:
    """The companion state index of the concrete document index ``index``."""
    return f"{index}-sdr-state"


# =============================================================================================
# ids
# =============================================================================================
def document_os_id(doc_id: str) -> str:
    """Stable ``_id`` of a document: the id itself, or ``sha256-<hex>`` of it when it is longer
    than 512 UTF-8 bytes (the real id is always in the ``doc_id`` field). Stable ids make a
    re-delivered write overwrite instead of duplicating."""
    raw = doc_id.encode("utf-8")
    if len(raw) <= MAX_ID_BYTES:
        return doc_id
    return _HASHED_ID_PREFIX + hashlib.sha256(raw).hexdigest()


def stats_os_id(doc_id: str) -> str:
    """``_id`` of a document's statistics in the state index."""
    return document_os_id(f"stats:{doc_id}")


def reference_os_id(generation: int, position: int) -> str:
    """``_id`` of paragraph ``position`` of reference sample ``generation`` in the state index."""
    return f"ref:{generation}:{position}"


# =============================================================================================
# index bodies and provenance
# =============================================================================================
def build_meta(
    index_meta: IndexMeta,
    *,
    versions: Mapping[str, str],
    hnsw: Mapping[str, int],
    derived_source: bool,
    created_at: str,
    engine: str,
    space_type: str,
    vectors: str = VECTORS_B64,
    recovery_source_excludes: bool = False,
) -> dict[str, Any]:
    """The mapping ``_meta`` of a new document index: provenance under the key ``sdr``.

    ``engine`` and ``space_type`` are those of the filled mapping (:func:`knn_method`), which is
    what the score translation of the index's k-NN results follows. ``vectors`` is where readers
    find the sentence vectors (:data:`VECTORS_B64`: the ``vectors_b64`` copy in ``_source``;
    :data:`VECTORS_INDEX`: only the nested ``knn_vector`` field, read through the sdr plugin's
    ``sdr_vectors`` fetch, :func:`build_vectors_search`)."""
    return {
        "sdr": {
            "format_version": FORMAT_VERSION,
            "index_meta": index_meta.to_dict(),
            "versions": dict(versions),
            "hnsw": dict(hnsw),
            "space_type": str(space_type),
            "engine": str(engine),
            "derived_source": bool(derived_source),
            "vectors": str(vectors),
            "recovery_source_excludes": bool(recovery_source_excludes),
            "created_at": created_at,
        }
    }


def index_meta_from_meta(meta: Mapping[str, Any] | None) -> IndexMeta | None:
    """The :class:`IndexMeta` recorded in a mapping ``_meta``; None when there is none.

    Raises :class:`StoreError` for a layout newer than this code reads.
    """
    sdr = (meta or {}).get("sdr")
    if not isinstance(sdr, Mapping) or "index_meta" not in sdr:
        return None
    version = int(sdr.get("format_version", 0))
    if version > FORMAT_VERSION:
        raise StoreError(
            f"the index has sdr-search layout version {version}; this sdr-search reads up to "
            f"version {FORMAT_VERSION}. Upgrade sdr-search."
        )
    return IndexMeta.from_dict(sdr["index_meta"])


def build_index_body(
    dim: int,
    *,
    m: int,
    ef_construction: int,
    shards: int,
    replicas: int,
    meta: Mapping[str, Any],
    engine: str = "lucene",
    derived_source: bool = False,
    max_sentences: int = 20_000,
    recovery_source_excludes: bool = False,
) -> dict[str, Any]:
    """Settings and mappings of a document index (``mappings/index.json`` filled in).

    ``meta`` becomes ``mappings._meta`` (see :func:`build_meta`). ``engine`` is the k-NN engine
    (:data:`ENGINES`). ``index.knn.derived_source.enabled`` is always set (3.x turns it on when
    absent): ``derived_source`` true also drops the ``_source.excludes`` of the vectors.
    ``max_sentences`` raises ``index.mapping.nested_objects.limit`` (default 10,000 nested
    objects per document) to the largest document accepted (``SDR_MAX_SENTENCES``).
    The vectors of the Lucene engine have no doc values (``doc_values: false``: the k-NN plugin would
    otherwise keep a second full copy; ``.vec`` serves HNSW, Lucene's exact search, derived source and
    the sdr plugin). ``recovery_source_excludes`` (without derived source) also leaves the vectors out of
    ``_recovery_source``, the full copy of each document's source that OpenSearch keeps until merges
    prune it (2.x; half the index as written, measured in docs/results/opensearch.md). A replica that
    recovers by replaying operations from that history would then index those documents without
    vectors: :class:`OpenSearchStore` asks for it only for an index created without replicas.
    """
    for name, value in {"dim": dim, "m": m, "ef_construction": ef_construction,
                        "shards": shards, "max_sentences": max_sentences}.items():
        if int(value) < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    if int(m) < 2:
        raise ValueError(f"m must be >= 2, got {m}")
    if int(replicas) < 0:
        raise ValueError(f"replicas must be >= 0, got {replicas}")
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    body = fill_placeholders(load_mapping("index.json"), {
        "dim": int(dim), "m": int(m), "ef_construction": int(ef_construction), "engine": engine,
        "shards": int(shards), "replicas": int(replicas), "max_sentences": int(max_sentences),
        # the Lucene engine searches (and the plugin reads) Lucene's own vector file; the k-NN plugin's binary
        # doc values would be a second full copy (measured: doc_values false drops .dvd on 2.19.1 and 3.5.0,
        # derived source still rebuilds the vectors). faiss keeps them: its exact search may read them.
        "vector_doc_values": engine != "lucene",
    })
    body["settings"]["index"]["knn.derived_source.enabled"] = bool(derived_source)
    if derived_source:
        body["mappings"].pop("_source", None)
    elif recovery_source_excludes:
        source = body["mappings"].setdefault("_source", {})
        source["recovery_source_excludes"] = list(source.get("excludes", [KNN_FIELD]))
    knn_method(body)  # refuses an edited mapping whose space type has no score translation
    body["mappings"]["_meta"] = copy.deepcopy(dict(meta))
    return body


def bm25_k1(body: Mapping[str, Any]) -> float:
    """``k1`` of the BM25 similarity of the lexical field in an index body (1.2, Lucene's
    default, when the mapping names none)."""
    index = body.get("settings", {}).get("index", {})
    name = body.get("mappings", {}).get("properties", {}).get(LEXICAL_FIELD, {}).get("similarity")
    return float(index.get("similarity", {}).get(name, {}).get("k1", 1.2)) if name else 1.2


def knn_method(body: Mapping[str, Any]) -> tuple[str, str]:
    """``(engine, space_type)`` of the sentence vectors in an index body or mapping.

    Raises :class:`StoreError` when the mapping has no k-NN vector field, or a space type
    without a cosine translation (:data:`SPACE_TYPES`)."""
    mappings = body.get("mappings", body)
    try:
        method = mappings["properties"]["sentences"]["properties"]["vector"]["method"]
    except (KeyError, TypeError) as e:
        raise StoreError("the index mapping has no sentences.vector k-NN field") from e
    engine = str(method.get("engine", "faiss"))
    space = str(method.get("space_type", "l2"))
    if space not in SPACE_TYPES:
        raise StoreError(
            f"the index mapping uses k-NN space type {space!r}; sdr-search translates scores of "
            f"{', '.join(SPACE_TYPES)} only (mappings/index.json)"
        )
    return engine, space


def build_state_index_body(*, replicas: int) -> dict[str, Any]:
    """Settings and mappings of the state index (``mappings/state.json`` filled in)."""
    if int(replicas) < 0:
        raise ValueError(f"replicas must be >= 0, got {replicas}")
    return fill_placeholders(load_mapping("state.json"), {"replicas": int(replicas)})


def initial_state(created_at: str) -> dict[str, Any]:
    """``_source`` of the state document of a new store: no statistics, no reference sample."""
    return {
        "kind": "state",
        "state": {
            "stats": {"version": 0, "mode": None, "sample_size": None, "seed": None,
                      "computed_at": None, "stale": False},
            "reference": None,
            "created_at": created_at,
        },
    }


# =============================================================================================
# vectors
# =============================================================================================
def encode_vectors_b64(array: np.ndarray) -> str:
    """Rows of ``array`` as little-endian float32 bytes, base64 (the ``binary`` field format)."""
    return base64.b64encode(np.ascontiguousarray(array, dtype="<f4").tobytes()).decode("ascii")


def decode_vectors_b64(s: str, dim: int) -> np.ndarray:
    """Inverse of :func:`encode_vectors_b64`: a writable ``(n, dim)`` float32 array (bit-exact).

    Raises :class:`StoreError` when the value is not base64 or not a whole number of rows.
    """
    try:
        raw = base64.b64decode(s, validate=True)
    except (ValueError, TypeError) as e:
        raise StoreError(f"stored vectors are not valid base64: {e}") from e
    if dim < 1 or len(raw) % (4 * dim):
        raise StoreError(f"stored vectors hold {len(raw)} bytes, not a whole number of {dim}-d float32 rows")
    return np.frombuffer(bytearray(raw), dtype="<f4").astype(np.float32, copy=False).reshape(-1, dim)


# =============================================================================================
# bulk actions (opensearch-py ``streaming_bulk`` action format)
# =============================================================================================
def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def build_document_source(
    doc: Document, vectors: DocVectors, *, encoder_tag: str, model_id: str, indexed_at: str, vector_copy: bool = True,
) -> dict[str, Any]:
    """``_source`` of one document. ``sentences[r]`` is row ``r`` of the document's vectors
    (``position`` = sentence index in the document, ``paragraph`` = its paragraph). ``vector_copy``:
    also the base64 copy ``vectors_b64`` (an index whose ``_meta.sdr.vectors`` is
    :data:`VECTORS_B64`)."""
    sizes = [len(p) for p in doc.paragraphs]
    paragraph_of = np.repeat(np.arange(len(sizes)), sizes).tolist()
    rows = np.asarray(vectors.vectors, dtype=np.float32).tolist()
    return {
        "doc_id": doc.id,
        "title": doc.title,
        "text": doc.text,
        "metadata": dict(doc.metadata),
        "n_paragraphs": len(sizes),
        "n_sentences": int(sum(sizes)),
        "model_id": model_id,
        "encoder_tag": encoder_tag,
        "content_key": document_key(encoder_tag, doc.paragraphs),
        "indexed_at": indexed_at,
        "paragraphs": [list(p) for p in doc.paragraphs],
        "par_sizes": sizes,
        **({"vectors_b64": encode_vectors_b64(vectors.vectors)} if vector_copy else {}),
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
) -> list[dict[str, Any]]:
    """One ``index`` action per document (whole-document writes, never partial updates),
    with the stable ``_id`` of :func:`document_os_id`."""
    at = indexed_at or _now()
    return [
        {"_op_type": "index", "_index": index, "_id": document_os_id(doc.id),
         "_source": build_document_source(doc, vec, encoder_tag=encoder_tag, model_id=model_id, indexed_at=at,
                                          vector_copy=vector_copy)}
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
# metadata filters (inside the k-NN search and the lexical search)
# =============================================================================================
_INTEGER_TYPES = {"long": (-2**63, 2**63 - 1), "integer": (-2**31, 2**31 - 1), "short": (-2**15, 2**15 - 1),
                  "byte": (-2**7, 2**7 - 1), "unsigned_long": (0, 2**64 - 1)}
_FLOAT_TYPES = frozenset({"double", "float", "half_float", "scaled_float"})


@dataclass(frozen=True)
class MetadataField:
    """How one metadata field is mapped, for exact-value filters.

    ``kind``: ``string`` (a ``keyword``, or the ``keyword`` sub-field of a ``text`` field, as
    OpenSearch's dynamic mapping makes for JSON strings), ``integer``, ``float``, ``boolean``,
    ``object``, or ``other`` (a mapping no exact filter can use: ``text`` without a ``keyword``
    sub-field, dates, ...). ``path`` is the full field name that holds exact values;
    ``ignore_above`` the longest string it indexes (longer values are not indexed)."""

    kind: str
    path: str | None = None
    ignore_above: int | None = None
    type: str = ""  # the OpenSearch field type, as mapped


def metadata_fields(mapping: Mapping[str, Any]) -> dict[str, MetadataField]:
    """``name -> MetadataField`` for every field under ``metadata`` in an index mapping (the
    ``mappings`` of a ``GET _mapping`` answer, or the whole index body). A field inside a metadata
    object is named with dots (``a.b``), as OpenSearch names it."""
    mappings = mapping.get("mappings", mapping)
    root = (mappings.get("properties") or {}).get("metadata") or {}
    out: dict[str, MetadataField] = {}

    def walk(props: Mapping[str, Any], prefix: str) -> None:
        for name, spec in props.items():
            full = f"{prefix}{name}"
            ftype = str(spec.get("type", "object"))
            path = f"metadata.{full}"
            if ftype in ("object", "nested") or "properties" in spec:
                out[full] = MetadataField("object", None, None, ftype)
                walk(spec.get("properties") or {}, f"{full}.")
            elif ftype == "keyword":
                out[full] = MetadataField("string", path, spec.get("ignore_above"), ftype)
            elif ftype in ("text", "match_only_text"):
                sub = next(((n, f) for n, f in (spec.get("fields") or {}).items() if f.get("type") == "keyword"), None)
                out[full] = (MetadataField("string", f"{path}.{sub[0]}", sub[1].get("ignore_above"), ftype) if sub
                             else MetadataField("other", None, None, ftype))
            elif ftype in _INTEGER_TYPES:
                out[full] = MetadataField("integer", path, None, ftype)
            elif ftype in _FLOAT_TYPES:
                out[full] = MetadataField("float", path, None, ftype)
            elif ftype == "boolean":
                out[full] = MetadataField("boolean", path, None, ftype)
            else:
                out[full] = MetadataField("other", None, None, ftype)

    walk(root.get("properties") or {}, "")
    return out


def _exact_values(field: MetadataField, wanted: Sequence[Any]) -> list[Any]:
    """The filter values that can equal a stored value of ``field`` under the filter semantics
    (:mod:`sdr_search.core.filters`: a boolean only equals a boolean, ``1`` equals ``1.0``,
    otherwise same type and value), as the JSON values a ``term`` query on ``field.path`` takes.
    Values of another type, and strings longer than ``ignore_above`` (never indexed), are dropped."""
    out: list[Any] = []
    for v in wanted:
        if field.kind == "boolean":
            keep = v if isinstance(v, bool) else None
        elif field.kind == "string":
            keep = v if isinstance(v, str) and (field.ignore_above is None or len(v) <= int(field.ignore_above)) else None
        elif field.kind in ("integer", "float") and isinstance(v, (int, float)) and not isinstance(v, bool):
            if field.kind == "float":
                keep = float(v)
            elif isinstance(v, int) or (np.isfinite(v) and float(v).is_integer()):
                lo, hi = _INTEGER_TYPES[field.type]
                keep = int(v) if lo <= int(v) <= hi else None
            else:
                keep = None
        else:
            keep = None
        if keep is not None and not any(type(keep) is type(o) and keep == o for o in out):
            out.append(keep)
    return out


def build_metadata_filter(flt: Mapping[str, Any], fields: Mapping[str, MetadataField]) -> dict[str, Any] | None:
    """The OpenSearch query of a metadata equality filter (``{field: scalar or list}``: every field
    must match, a list matches any of its items; :mod:`sdr_search.core.filters`), for the
    document index: ``None`` for an empty filter (no restriction), :data:`MATCH_NONE` when no stored
    document can match (a field no document has, or values of another type than the field's).

    Each value is a ``term`` query on the field's exact-value path (``fields``: the index mapping,
    :func:`metadata_fields`), the values of one field OR-ed in a ``bool.should``, the fields AND-ed
    in a ``bool.filter``. Never a ``terms`` query: inside a nested k-NN query the k-NN plugin
    (2.19) joins a filter on the parent document's fields down to the sentences only when it
    recognises every required clause as a parent-field query, and a ``terms`` query on a numeric
    field (a point-set query) is not recognised: it is then applied to the sentences themselves
    and matches nothing (measured on a 2.19.1 node). A field mapped in a way no exact filter can
    use (``text`` without a ``keyword`` sub-field) raises :class:`StoreError`."""
    if not flt:
        return None
    clauses: list[dict[str, Any]] = []
    for name, wanted in flt.items():
        field = fields.get(str(name))
        if field is None:
            return copy.deepcopy(MATCH_NONE)  # no stored document has the field
        if field.kind == "other":
            raise StoreError(
                f"metadata field {name!r} is mapped as {field.type!r}, which has no exact values to filter on "
                "inside OpenSearch (a text field needs a keyword sub-field)"
            )
        values = _exact_values(field, wanted if isinstance(wanted, list) else [wanted])
        if not values:
            return copy.deepcopy(MATCH_NONE)
        terms = [{"term": {field.path: v}} for v in values]
        clauses.append(terms[0] if len(terms) == 1 else {"bool": {"should": terms, "minimum_should_match": 1}})
    return {"bool": {"filter": clauses}}


def build_candidate_filter(
    metadata_filter: Mapping[str, Any] | None, allowed_ids: Sequence[str] | None = None,
) -> dict[str, Any] | None:
    """The restriction of a candidate search (document level): a metadata filter
    (:func:`build_metadata_filter`) AND-ed with a list of allowed document ids (``terms`` on
    ``doc_id``, at most :data:`MAX_ALLOWED_IDS`); ``None`` when there is neither, :data:`MATCH_NONE`
    when nothing can match (an empty id list, or a filter no document matches)."""
    if allowed_ids is not None:
        allowed = list(dict.fromkeys(str(i) for i in allowed_ids))
        if not allowed:
            return copy.deepcopy(MATCH_NONE)
        if len(allowed) > MAX_ALLOWED_IDS:
            raise ValueError(f"at most {MAX_ALLOWED_IDS} allowed ids per search, got {len(allowed)}; "
                             "give the metadata filter itself (filter=)")
        by_id: dict[str, Any] | None = {"terms": {"doc_id": allowed}}
    else:
        by_id = None
    if metadata_filter == MATCH_NONE:
        return copy.deepcopy(MATCH_NONE)
    parts = [q for q in (metadata_filter, by_id) if q is not None]
    if not parts:
        return None
    if len(parts) == 1:
        return copy.deepcopy(dict(parts[0]))
    return {"bool": {"filter": [copy.deepcopy(dict(q)) for q in parts]}}


# =============================================================================================
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
    return {"size": int(k), "_source": False, "docvalue_fields": ["doc_id"], "track_total_hits": False, "query": query}


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
        ids.append([str(h["fields"]["doc_id"][0]) for h in hits])
        raw = np.asarray([h["_score"] for h in hits], dtype=np.float64)
        scores.append(np.asarray(knn_score_to_cosine(raw, space_type) if raw.size else raw, dtype=np.float32))
    return ids, scores


# =============================================================================================
# the sdr plugin: candidates, exact SDR, vectors (opensearch-plugin/README.md)
# =============================================================================================
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
    oversample: int = 4,
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
    the first ``k`` (the embedded store's nested k-NN)."""
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
    return {"size": int(size), "_source": False, "docvalue_fields": ["doc_id"], "track_total_hits": False,
            "query": {"sdr_candidates": clause}}


def build_sdr_scores_msearch(
    index: str, sources: Sequence[tuple[np.ndarray, Sequence[int], Sequence[float], Sequence[float]]],
    ids: Sequence[str], *, explain: bool = False,
) -> list[dict[str, Any]]:
    """``_msearch`` body with one search per source (``(vectors, par_sizes, mu, sigma)``): the
    documents ``ids`` (by ``_id``) rescored by the plugin's exact SDR (``sdr`` rescorer, window =
    all of them). ``explain`` asks for the ``_sdr`` breakdown of each hit (first source only)."""
    unique = list(dict.fromkeys(str(i) for i in ids))
    body: list[dict[str, Any]] = []
    for n, (vectors, par_sizes, mu, sigma) in enumerate(sources):
        clause = _source_clause(vectors, par_sizes, mu, sigma)
        if explain and n == 0:
            clause["explain"] = True
        body.append({"index": index})
        body.append({"size": len(unique), "_source": False, "docvalue_fields": ["doc_id"], "track_total_hits": False,
                     "query": {"ids": {"values": [document_os_id(i) for i in unique]}},
                     "rescore": {"window_size": max(1, len(unique)), "sdr": clause}})
    return body


NO_SENTENCES_SCORE = -3.4028234663852886e38
"""The plugin's score for a document without sentence vectors (SDR's -infinity as the lowest float)."""


def parse_sdr_hits(item: Mapping[str, Any], *, index: str | None = None, what: str = "an sdr search"
                   ) -> tuple[list[str], np.ndarray, list[Mapping[str, Any] | None]]:
    """Document ids (``fields.doc_id``), scores (float64, ``-inf`` for a document without sentence
    vectors) and the ``_sdr`` explanations (None where absent) of one plugin search, in hit order. An
    item with an ``error`` raises the matching domain error."""
    if "error" in item:
        raise error_from_response(item.get("status", 500), item, what=what, index=index)
    hits = item.get("hits", {}).get("hits", [])
    ids = [str(h["fields"]["doc_id"][0]) for h in hits]
    scores = np.asarray([float(h["_score"]) for h in hits], dtype=np.float64)
    scores[scores <= NO_SENTENCES_SCORE * 0.999] = -np.inf
    explained = [(h.get("fields", {}).get("_sdr") or [None])[0] for h in hits]
    return ids, scores, explained


def build_vectors_search(ids: Sequence[str], *, fields: Sequence[str] = ("doc_id", "par_sizes"),
                         mean: bool = False) -> dict[str, Any]:
    """A search for the documents ``ids`` (by ``_id``) that returns each one's sentence vectors from
    the index's vector data (the plugin's ``sdr_vectors`` fetch), with ``fields`` of ``_source``;
    with ``mean``, each one's normalised mean sentence vector and paragraph count instead."""
    unique = list(dict.fromkeys(str(i) for i in ids))
    return {"size": len(unique), "_source": list(fields), "track_total_hits": False,
            "query": {"ids": {"values": [document_os_id(i) for i in unique]}},
            "ext": {"sdr_vectors": {"mean": True} if mean else {}}}


def parse_mean_hit(hit: Mapping[str, Any], dim: int) -> tuple[int, np.ndarray]:
    """``(paragraphs, normalised mean vector)`` of one hit of ``build_vectors_search(..., mean=True)``."""
    src = hit.get("_source") or {}
    got = (hit.get("fields", {}).get("_sdr_vectors") or [None])[0]
    if not isinstance(got, Mapping) or "mean" not in got:
        raise StoreError(f"the node returned no mean vector for document {src.get('doc_id', hit.get('_id'))!r}")
    if int(got.get("sentences", 0)) == 0:
        raise StoreError(f"stored vectors of document {src.get('doc_id', hit.get('_id'))!r} are missing")
    return int(got["paragraphs"]), decode_vectors_b64(str(got["mean"]), dim)[0]


def parse_vector_hit(hit: Mapping[str, Any], dim: int) -> DocVectors:
    """The :class:`DocVectors` of one hit of :func:`build_vectors_search` (or a scan with the same
    ``ext``). Raises :class:`StoreError` when the plugin's vectors are missing, of another dimension,
    or do not match the document's recorded paragraph sizes (``_source.par_sizes``)."""
    src = hit.get("_source") or {}
    doc_id = src.get("doc_id", hit.get("_id"))
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
# reads
# =============================================================================================
def build_mget_body(ids: Iterable[str], fields: Sequence[str] | Mapping[str, Any] | bool, *, index: str | None = None) -> dict[str, Any]:
    """``_mget`` body for documents ``ids`` (by stable ``_id``) with ``_source`` filter ``fields``
    (a list of fields, an ``{"includes"/"excludes"}`` dict, or a bool). ``index`` names the
    index in every entry (for a request spanning indices); otherwise the path names it."""
    source: Any = fields if isinstance(fields, bool) else (dict(fields) if isinstance(fields, Mapping) else list(fields))
    docs = []
    for i in ids:
        entry: dict[str, Any] = {"_id": document_os_id(i), "_source": copy.deepcopy(source)}
        if index is not None:
            entry = {"_index": index, **entry}
        docs.append(entry)
    return {"docs": docs}


def build_counts_query() -> dict[str, Any]:
    """Documents (exact total), paragraphs and sentences (sums) in one search."""
    return {
        "size": 0,
        "track_total_hits": True,
        "aggs": {"paragraphs": {"sum": {"field": "n_paragraphs"}}, "sentences": {"sum": {"field": "n_sentences"}}},
    }


def build_stats_count_query(version: int | None = None) -> dict[str, Any]:
    """``_count`` body over the state index: statistics documents (of ``version`` if given)."""
    filters: list[dict[str, Any]] = [{"term": {"kind": "stats"}}]
    if version is not None:
        filters.append({"term": {"stats_version": int(version)}})
    return {"query": {"bool": {"filter": filters}}}


def build_scan_query(
    *, size: int, source: Sequence[str] | bool, search_after: Sequence[Any] | None = None,
    pit_id: str | None = None, keep_alive: str = "2m", query: Mapping[str, Any] | None = None,
    ext: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One page of a scan over all documents in ``doc_id`` order (unique, so ``search_after``
    pages neither repeat nor skip a document). With ``pit_id`` the page reads that point in time
    (the request then names no index). ``query`` (a filter: it does not score) restricts the
    scan to the documents it matches."""
    body: dict[str, Any] = {
        "size": int(size),
        "_source": source if isinstance(source, bool) else list(source),
        "sort": [{"doc_id": "asc"}],
        "track_total_hits": False,
    }
    if query is not None:
        body["query"] = {"bool": {"filter": [copy.deepcopy(dict(query))]}}
    if source is False:
        body["docvalue_fields"] = ["doc_id"]
    if search_after is not None:
        body["search_after"] = list(search_after)
    if pit_id is not None:
        body["pit"] = {"id": pit_id, "keep_alive": keep_alive}
    if ext is not None:
        body["ext"] = copy.deepcopy(dict(ext))
    return body


def build_alias_swap(alias: str, new_index: str, old_indices: Iterable[str]) -> dict[str, Any]:
    """``_aliases`` body moving ``alias`` to ``new_index`` atomically (one request)."""
    actions: list[dict[str, Any]] = [{"remove": {"index": old, "alias": alias}} for old in old_indices if old != new_index]
    actions.append({"add": {"index": new_index, "alias": alias}})
    return {"actions": actions}


# =============================================================================================
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
    return {"size": int(size), "_source": False, "docvalue_fields": ["doc_id"], "track_total_hits": False,
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
    any one of them is a hit (``bench/lexical_variants.py`` compares this with
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
    return ([str(h["fields"]["doc_id"][0]) for h in hits],
            np.asarray([float(h["_score"]) for h in hits], dtype=np.float32))


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
