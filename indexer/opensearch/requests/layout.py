"""Index layout: constants, mappings, document and state ids, index bodies and provenance, the vector encodings.

Pure functions: see :mod:`sdr_search.indexer.opensearch.requests`."""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import re
from importlib import resources
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from sdr_search.core.errors import (
    StoreError,
)

from sdr_search.indexer.store import IndexMeta



FORMAT_VERSION = 2
"""Layout version recorded in ``_meta.sdr.format_version``; a newer layout is refused (so an older
sdr-search never writes or filters an index it would get wrong). 2: metadata kept in ``_source``
only (``enabled: false``) and filtered through :data:`METADATA_TERMS_FIELD`; 1: metadata mapped
field by field (dynamic mapping, :func:`legacy_metadata`)."""
METADATA_TERMS_FIELD = "metadata_terms"
"""The ``keyword`` field of each document's typed metadata terms, what metadata filters match
(:func:`sdr_search.core.metadata.metadata_terms`)."""

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

CENTROIDS_FIELD = "par_centroids"
"""The top-level ``binary`` field (doc values on, left out of ``_source``) of each document's paragraph
centroids, little-endian float32 rows (:func:`sdr_search.core.scoring.paragraph_centroids`): the sdr
plugin's centroid rows read it instead of every sentence vector of a candidate (the plugin's
``StoredCentroids``). Written only to an index whose mapping has it (:func:`stored_centroids`); an index
made before it, or a document without it, is read from its sentences as before."""
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
    root = Path(__file__).resolve().parents[3]
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
        text = resources.files("sdr_search.indexer.opensearch").joinpath(_MAPPINGS_PACKAGE_DIR, name).read_text(encoding="utf-8")
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


def legacy_metadata(mappings: Mapping[str, Any]) -> bool:
    """Whether an index mapping (a ``GET _mapping`` answer's ``mappings``) is of an index made before
    layout 2: its metadata mapped field by field, without :data:`METADATA_TERMS_FIELD`. The store
    reads such an index, and refuses to write to it or to filter it (``sdr reindex`` rebuilds it)."""
    return METADATA_TERMS_FIELD not in (mappings.get("properties") or {})


def stored_centroids(mappings: Mapping[str, Any]) -> bool:
    """Whether an index mapping (a ``GET _mapping`` answer's ``mappings``) has the stored paragraph centroids'
    field :data:`CENTROIDS_FIELD` (indices created from this version's ``mappings/index.json`` on)."""
    return CENTROIDS_FIELD in (mappings.get("properties") or {})


def stored_content_key(mappings: Mapping[str, Any]) -> bool:
    """Whether an index mapping keeps ``content_key`` as a stored field (indices created from this
    version's ``mappings/index.json`` on): a put's real-time read of the content keys then asks for that
    field alone, and a derived-source index (3.x) does not rebuild each document's sentence vectors
    into a ``_source`` that the read would only filter away (about 25 ms per document)."""
    field = (mappings.get("properties") or {}).get("content_key") or {}
    return field.get("store") is True


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
    knn_encoder: str = "none",
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
    ``knn_encoder`` ``"sq"`` (Lucene engine only) quantises the HNSW graph's vectors to 7 bits
    (Lucene's scalar quantiser, k-NN 2.16+: ``method.parameters.encoder``); Lucene keeps the float
    vectors too, which the sdr plugin's exact scores read.
    """
    if knn_encoder not in ("none", "sq"):
        raise ValueError(f"knn_encoder must be 'none' or 'sq', got {knn_encoder!r}")
    if knn_encoder == "sq" and engine != "lucene":
        raise ValueError("knn_encoder 'sq' needs the lucene engine")
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
    if knn_encoder == "sq":
        method = body["mappings"]["properties"]["sentences"]["properties"]["vector"]["method"]
        method.setdefault("parameters", {})["encoder"] = {"name": "sq"}
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


# hits known by their doc_id
# =============================================================================================
HITS_BY_DOC_ID: dict[str, Any] = {"_source": False, "stored_fields": "_none_", "docvalue_fields": ["doc_id"]}
"""What a search's hits carry when no ``_source`` field is wanted (k-NN, lexical and plugin
searches): ``fields.doc_id`` (doc values) and nothing read from stored fields. Without ``stored_fields: _none_`` the fetch phase still reads each
hit's stored fields for its ``_id``, which decompresses the document's whole stored source: on IRLeD's
long judgments a large share of a 200-hit ``sdr_candidates`` search (docs/results/opensearch.md)."""


def hit_doc_id(hit: Mapping[str, Any]) -> str | None:
    """The document id of a search's hit: ``fields.doc_id`` (:data:`HITS_BY_DOC_ID`), else
    ``_source.doc_id`` when the search read ``_source``; None when it carries neither."""
    got = (hit.get("fields") or {}).get("doc_id")
    if got:
        return str(got[0])
    src = hit.get("_source") or {}
    return str(src["doc_id"]) if "doc_id" in src else None
