"""The task functions: plain Python, called by Celery workers (:mod:`sdr_search.workers.app` wraps them) or
directly by ``sdr reindex`` when no broker is configured (the same code, minus the queue).

:func:`index_batch` indexes a batch of JSON records into a store. It is idempotent: document ids
are stable (the store replaces a document put twice) and a document whose stored content key
(hash of encoder tag and sentences) already matches is skipped, so a re-delivered or re-sent
batch does no work twice and never duplicates. Errors are sorted into three kinds
(:func:`classify`):

* **transient** (store or service unreachable, I/O errors): :class:`TransientError` is raised and
  the whole task is retried with exponential backoff; documents already written are skipped then;
* **fatal** (wrong model for the store, store missing or damaged): the task reports ``fatal`` and
  ``sdr reindex`` stops, since every other batch would fail the same way;
* **poison** (anything a single document causes: invalid record, a failure while encoding it or
  while writing it): the batch is split in halves until the failing document is alone; it is
  reported as failed with its reason and never retried, the others are indexed (the write path
  shared with ``sdr index``: :func:`sdr_search.indexer.pipeline.write_documents`).

:func:`stats_block` computes the normalisation statistics of a block of stored documents, and
:func:`refresh_stats` draws the reference sample, runs the blocks (in-process or through the
queue) and writes one statistics refresh.

Per process, the encoder (one per encoder setting, normally one) is loaded once on first use, and
stores and the embedding cache are opened once and kept; :func:`close_process_resources` closes
them (worker shutdown), which also saves the embedded store's FAISS index.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from collections import OrderedDict
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from sdr_search.core.errors import (
    BackendUnavailableError,
    BulkWriteError,
    IndexNotFoundError,
    InvalidDocumentError,
    ModelMismatchError,
    ModelNotFoundError,
    OverloadedError,
    SDRError,
    StoreError,
)

from .ledger import Delivery, Ledger
from .stores import open_store_spec, validate_spec

__all__ = [
    "TransientError",
    "classify",
    "index_batch",
    "stats_block",
    "refresh_stats",
    "process_encoder",
    "preload_encoder",
    "process_store",
    "close_process_resources",
]

logger = logging.getLogger(__name__)

# Encoder settings a job may pin: those that change the vectors (model, token cap, precision), and
# the device, which `sdr reindex` only sets when it encodes in-process. The batch token budget is
# each worker's own business.
ENCODER_KEYS = ("model", "max_tokens", "precision", "device")


class TransientError(BackendUnavailableError):
    """A task met an error worth retrying later (backend unavailable, connection, I/O)."""


class FatalTaskError(SDRError):
    """An error no retry or split can fix (wrong model, missing or damaged store)."""


def classify(exc: BaseException) -> str:
    """``"transient"``, ``"fatal"`` or ``"poison"`` (see the module docstring)."""
    if isinstance(exc, (TransientError, BackendUnavailableError, OverloadedError)):
        return "transient"
    if isinstance(exc, BulkWriteError):
        return "poison"
    if isinstance(exc, (FatalTaskError, ModelMismatchError, ModelNotFoundError, IndexNotFoundError, StoreError)):
        return "fatal"
    if isinstance(exc, SDRError):
        return "poison"
    if isinstance(exc, (sqlite3.OperationalError, ConnectionError, TimeoutError, OSError)):
        return "transient"
    return "poison"


# =============================================================================================
# per-process resources
# =============================================================================================
_lock = threading.RLock()
_encoders: dict[tuple, Any] = {}
_stores: "OrderedDict[str, Any]" = OrderedDict()  # most recently used last
# Stores kept open per process. A reindex writes into a new store each time; older handles (each
# with its FAISS index in memory, for an embedded store) are closed when more than this are open.
MAX_OPEN_STORES = 2
_caches: dict[str | None, Any] = {}  # cache directory (None: SDR_CACHE_DIR) -> EmbeddingCache | None
_threads_set: list[bool] = []


def _apply_torch_threads() -> None:
    """Set torch's thread count once per process from ``SDR_TORCH_THREADS`` (when set)."""
    if _threads_set:
        return
    _threads_set.append(True)
    from .settings import WorkerSettings

    n = WorkerSettings().torch_threads
    if n:
        import torch

        torch.set_num_threads(n)
        logger.info("torch threads set to %d", n)


def process_encoder(overrides: Mapping[str, Any] | None = None):
    """This process's encoder for ``overrides`` (model, max_tokens, precision; the rest from the
    environment), created once; the model loads on first use."""
    from sdr_search.core.encoder import SentenceEncoder
    from sdr_search.core.settings import EncoderSettings

    clean = {k: v for k, v in (overrides or {}).items() if k in ENCODER_KEYS and v is not None}
    key = tuple(sorted(clean.items()))
    with _lock:
        enc = _encoders.get(key)
        if enc is None:
            _apply_torch_threads()
            enc = SentenceEncoder(settings=EncoderSettings(**clean))
            _encoders[key] = enc
        return enc


def preload_encoder() -> None:
    """Load this process's default encoder now (worker start-up), with one tiny encode."""
    t0 = time.perf_counter()
    process_encoder().encode(["Warm-up sentence."])
    logger.info("encoder loaded in %.1f s", time.perf_counter() - t0)


def process_store(spec: Mapping[str, Any]):
    """This process's open store for ``spec`` (opened once, kept until closed or dropped)."""
    spec = validate_spec(spec)
    key = json.dumps(spec, sort_keys=True)
    evicted = []
    with _lock:
        store = _stores.get(key)
        if store is None:
            store = open_store_spec(spec, bulk=True)
            _stores[key] = store
            while len(_stores) > MAX_OPEN_STORES:
                evicted.append(_stores.popitem(last=False)[1])
        _stores.move_to_end(key)
    for old in evicted:
        _close_quietly(old)
    return store


def _drop_store(spec: Mapping[str, Any]) -> None:
    """Close and forget the cached store (after a transient error: reopen next time)."""
    key = json.dumps(validate_spec(spec), sort_keys=True)
    with _lock:
        store = _stores.pop(key, None)
    if store is not None:
        _close_quietly(store)


def _close_quietly(store) -> None:
    try:
        store.close()
    except (SDRError, OSError, sqlite3.Error) as e:
        logger.warning("closing %r failed: %s", store, e)


def _process_cache(enabled: bool, cache_dir: str | None = None):
    """The embedding cache in ``cache_dir`` (default ``SDR_CACHE_DIR``), opened once; None when
    disabled for this job or by ``SDR_NO_CACHE``. A cache that cannot be opened is a fatal error
    for the job (not a poison of every document)."""
    if not enabled:
        return None
    from pathlib import Path

    from sdr_search.core.cache import EmbeddingCache
    from sdr_search.core.settings import CacheSettings

    with _lock:
        if cache_dir not in _caches:
            settings = CacheSettings(**({"cache_dir": Path(cache_dir)} if cache_dir else {}))
            cache = None if settings.no_cache else EmbeddingCache(settings.cache_dir / "embeddings.sqlite")
            if cache is not None:
                try:
                    cache._db()  # open now, so a broken cache directory fails here
                except SDRError as e:
                    raise FatalTaskError(str(e)) from e
            _caches[cache_dir] = cache
        return _caches[cache_dir]


def close_process_resources() -> None:
    """Close every cached store (saving FAISS indexes) and the embedding cache."""
    with _lock:
        stores = list(_stores.values())
        _stores.clear()
        caches = [c for c in _caches.values() if c is not None]
        _caches.clear()
    for store in stores:
        _close_quietly(store)
    for cache in caches:
        cache.close()


# =============================================================================================
# index_batch
# =============================================================================================
def _record_id(record: Any) -> str | None:
    if isinstance(record, Mapping):
        raw = record.get("id")
        if isinstance(raw, (str, int)) and not isinstance(raw, bool):
            return str(raw).strip() or None
    return None


def _indexed(doc, status: str = "indexed") -> dict[str, Any]:
    return {"status": status, "id": doc.id, "sentences": doc.n_sentences}


def _failed(doc_id: str | None, error: str) -> dict[str, Any]:
    return {"status": "failed", "id": doc_id, "error": error}


def _reason(exc: BaseException) -> str:
    from sdr_search.indexer.pipeline import error_text

    return error_text(exc)


def _raise_unless_poison(exc: Exception) -> None:
    """The workers' error policy for :func:`~sdr_search.indexer.pipeline.write_documents`: a
    transient error retries the task, a fatal one ends the job, poison is isolated."""
    kind = classify(exc)
    if kind == "transient":
        raise TransientError(_reason(exc)) from exc
    if kind == "fatal":
        raise FatalTaskError(_reason(exc)) from exc


class _Writer:
    """Writes groups of ``(position, document)`` through the shared write path and records each
    document's outcome at its position."""

    def __init__(self, store, encoder, cache, outcomes: list) -> None:
        self.store, self.encoder, self.cache, self.outcomes = store, encoder, cache, outcomes
        self.encoded_sentences = 0

    def write(self, docs: list[tuple[int, Any]]) -> None:
        from sdr_search.indexer.pipeline import WriteReport, write_documents

        if not docs:
            return
        where = {d.id: pos for pos, d in docs}
        report = WriteReport()
        try:
            write_documents(self.store, [d for _, d in docs], self.encoder, cache=self.cache,
                            check_error=_raise_unless_poison, report=report)
        finally:  # also when a transient or fatal error stops the write: what was done is reported
            self.encoded_sentences += report.encoded_sentences
            for doc in report.written:
                self.outcomes[where[doc.id]] = _indexed(doc)
            for doc, reason in report.failed:
                self.outcomes[where[doc.id]] = _failed(doc.id, reason)


def _check_segmentation(store, segmentation: Mapping[str, Any]) -> None:
    from sdr_search.indexer.provenance import segmentation_mismatch

    meta = store.meta()
    mismatch = segmentation_mismatch(meta.segmentation if meta is not None else None, segmentation)
    if mismatch:
        raise FatalTaskError(f"the store {mismatch}")


def index_batch(
    store_spec: Mapping[str, Any],
    records: Sequence[Any],
    options: Mapping[str, Any] | None = None,
    *,
    ledger: Ledger | None = None,
    max_deliveries: int = 4,
) -> dict[str, Any]:
    """Parse, encode and store ``records``; one outcome per record, in order.

    ``options``: ``encoder`` (model / max_tokens / precision overrides), ``segmentation``
    (:meth:`SegmentationSettings.recorded`: ``paragraph_unit``, ``min_paragraph_sentences``,
    ``min_sentence_chars``; a field left out takes its setting), ``cache`` (use the embedding cache, default true).

    Returns ``{"outcomes": [{"status": "indexed"|"skipped"|"failed", "id", "sentences" | "error"}],
    "encoded_sentences", "seconds", "delivery"}``, or with ``"fatal": message`` when the job cannot
    go on. Raises :class:`TransientError` when the task should be retried.
    """
    from sdr_search.core.cache import document_key
    from sdr_search.core.documents import parse_record
    from sdr_search.core.sentences import default_splitter
    from sdr_search.core.settings import SegmentationSettings

    from sdr_search.indexer.provenance import index_meta, segmentation_record

    t0 = time.perf_counter()
    opts = dict(options or {})
    outcomes: list[dict[str, Any] | None] = [None] * len(records)
    seg = SegmentationSettings(**{k: v for k, v in (opts.get("segmentation") or {}).items() if v is not None})
    splitter = default_splitter()
    docs: list[tuple[int, Any]] = []
    seen: set[str] = set()
    for pos, record in enumerate(records):
        try:
            doc = parse_record(record, settings=seg, splitter=splitter)
        except InvalidDocumentError as e:
            outcomes[pos] = _failed(_record_id(record), str(e))
            continue
        if doc.id in seen:
            outcomes[pos] = _failed(doc.id, "duplicate id (appears twice in one batch)")
            continue
        seen.add(doc.id)
        docs.append((pos, doc))

    def result(**extra: Any) -> dict[str, Any]:
        final = [o if o is not None else _failed(_record_id(records[i]), extra.get("fatal", "not processed"))
                 for i, o in enumerate(outcomes)]
        return {"outcomes": final, "seconds": round(time.perf_counter() - t0, 3), **extra}

    if not docs:
        return result(encoded_sentences=0, delivery=0)
    try:
        encoder = process_encoder(opts.get("encoder"))
        cache = _process_cache(bool(opts.get("cache", True)), opts.get("cache_dir"))
        store = process_store(store_spec)
        segmentation = segmentation_record(seg, splitter.source)
        _check_segmentation(store, segmentation)
        store.ensure_meta(index_meta(encoder, segmentation))
        keys = {d.id: document_key(encoder.cache_tag, d.paragraphs) for _, d in docs}
        stored = store.content_keys(list(keys))
    except Exception as e:  # noqa: BLE001 - sorted by classify()
        kind = classify(e)
        if kind == "transient":
            _drop_store(store_spec)
            raise TransientError(_reason(e)) from e
        logger.error("index_batch cannot run: %s", _reason(e))
        return result(fatal=_reason(e), encoded_sentences=0, delivery=0)

    todo: list[tuple[int, Any]] = []
    for pos, d in docs:
        if stored.get(d.id) == keys[d.id]:
            outcomes[pos] = _indexed(d, "skipped")
        else:
            todo.append((pos, d))
    delivery = _start_delivery(ledger)
    writer = _Writer(store, encoder, cache, outcomes)
    try:
        if delivery.number > max_deliveries:
            for pos, d in todo:
                outcomes[pos] = _failed(d.id, f"delivered {delivery.number - 1} times and the worker died each time")
            todo = []
        for pos, d in [t for t in todo if t[1].id in delivery.poison]:
            outcomes[pos] = _failed(d.id, "the worker process died twice while indexing this document")
        todo = [t for t in todo if t[1].id not in delivery.poison]
        if delivery.careful:
            for item in todo:
                _ledger_call(ledger, "doing", item[1].id)
                writer.write([item])
            _ledger_call(ledger, "doing", None)
        else:
            writer.write(todo)
    except TransientError:
        _drop_store(store_spec)
        _ledger_call(ledger, "release")
        raise
    except FatalTaskError as e:
        _ledger_call(ledger, "finish")
        return result(fatal=str(e), encoded_sentences=writer.encoded_sentences, delivery=delivery.number)
    _ledger_call(ledger, "finish")
    return result(encoded_sentences=writer.encoded_sentences, delivery=delivery.number)


def _start_delivery(ledger: Ledger | None) -> Delivery:
    if ledger is None:
        return Delivery(1)
    try:
        return ledger.start()
    except Exception as e:  # noqa: BLE001 - the ledger is a safety net; indexing goes on without it
        logger.warning("delivery ledger unavailable (%s); indexing without it", _reason(e))
        return Delivery(1)


def _ledger_call(ledger: Ledger | None, name: str, *args: Any) -> None:
    if ledger is None:
        return
    try:
        getattr(ledger, name)(*args)
    except Exception as e:  # noqa: BLE001 - see _start_delivery
        logger.warning("delivery ledger %s failed: %s", name, _reason(e))


# =============================================================================================
# statistics
# =============================================================================================
def stats_block(store_spec: Mapping[str, Any], doc_ids: Sequence[str], options: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Normalisation statistics of the stored documents ``doc_ids``.

    ``options["mode"]``: ``"sampled"`` (against the store's recorded reference sample, leaving out
    the document's own sampled paragraphs) or ``"exact"`` (against every paragraph of every other
    document). Returns ``{"stats": {id: {"mu": [...], "sigma": [...]}}, "missing": [ids no longer
    stored]}``; raises :class:`TransientError` when the store is unreachable.
    """
    from sdr_search.core.stats import SampledParagraphs, source_stats_exact, stats_against_sample

    mode = (options or {}).get("mode", "sampled")
    if mode not in ("sampled", "exact"):
        raise FatalTaskError(f"stats mode must be 'sampled' or 'exact', got {mode!r}")
    try:
        store = process_store(store_spec)
        present = store.content_keys(list(doc_ids))
        ids = [i for i in doc_ids if i in present]
        out: dict[str, dict[str, list[float]]] = {}
        if mode == "sampled":
            ref = store.reference()
            if ref is None:
                raise FatalTaskError("the store has no reference sample; refresh_stats records it first")
            codes = {d: k for k, d in enumerate(dict.fromkeys(ref.doc_ids))}
            sampled = SampledParagraphs(ref.vectors, np.asarray([codes[d] for d in ref.doc_ids], dtype=np.int64))
            vectors = store.fetch(ids) if ids else None
            for k, doc_id in enumerate(ids):
                st = stats_against_sample(vectors.doc(k), sampled, exclude_doc=codes.get(doc_id), if_empty="identity")
                out[doc_id] = {"mu": st.mu.tolist(), "sigma": st.sigma.tolist()}
        else:
            corpus = store.all_vectors()
            where = {d: k for k, d in enumerate(corpus.ids)}
            for doc_id in ids:
                k = where.get(doc_id)
                if k is None:
                    continue
                st = source_stats_exact(corpus.doc(k), corpus, exclude_doc=k, if_empty="identity")
                out[doc_id] = {"mu": st.mu.tolist(), "sigma": st.sigma.tolist()}
    except Exception as e:  # noqa: BLE001 - sorted by classify()
        if classify(e) == "transient":
            _drop_store(store_spec)
            raise TransientError(_reason(e)) from e
        raise
    return {"stats": out, "missing": [i for i in doc_ids if i not in out]}


BlockRunner = Callable[[Mapping[str, Any], list[list[str]], Mapping[str, Any]], Iterable[Mapping[str, Any]]]


def run_blocks_in_process(spec: Mapping[str, Any], blocks: list[list[str]], options: Mapping[str, Any]) -> Iterable[Mapping[str, Any]]:
    for block in blocks:
        yield call_with_retries(stats_block, spec, block, options)


def call_with_retries(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call a task function in-process, retrying :class:`TransientError` as a worker would (the one
    retry policy, :mod:`sdr_search.core.retry`, with the workers' settings)."""
    from sdr_search.core.retry import retry_call

    from .settings import WorkerSettings

    return retry_call(lambda: fn(*args, **kwargs), backoff=WorkerSettings().backoff(),
                      retry_if=lambda e: isinstance(e, TransientError), what=fn.__name__)


def refresh_stats(
    store_spec: Mapping[str, Any],
    *,
    exact: bool = False,
    sample_size: int = 5000,
    seed: int = 0,
    block_docs: int = 64,
    run_blocks: BlockRunner | None = None,
):
    """Record a new reference sample, compute every document's statistics by blocks of
    ``block_docs`` (``run_blocks``: in-process by default, or through the queue), and write them
    as one refresh. Returns the store's new :class:`~sdr_search.indexer.store.StatsInfo`."""
    from sdr_search.core.scoring import NormStats
    from sdr_search.core.stats import draw_reference_sample, sample_vectors

    from sdr_search.indexer.store import ReferenceParagraphs

    with open_store_spec(store_spec) as store:
        corpus = store.all_vectors()
        sample = draw_reference_sample(corpus, sample_size, seed=seed)
        sampled = sample_vectors(corpus, sample)
        owner = corpus.paragraph_doc()[sample.paragraph_indices]
        in_doc = sample.paragraph_indices - corpus.doc_par_offsets[owner]
        store.set_reference(ReferenceParagraphs(
            tuple(corpus.ids[d] for d in owner), in_doc.astype(np.int64), sampled.vectors, seed, sample_size,
        ))
        ids = list(corpus.ids)
        del corpus, sampled
        blocks = [ids[i : i + block_docs] for i in range(0, len(ids), block_docs)]
        stats: dict[str, NormStats] = {}
        runner = run_blocks or run_blocks_in_process
        for block_result in runner(store_spec, blocks, {"mode": "exact" if exact else "sampled"}):
            for doc_id, st in block_result["stats"].items():
                stats[doc_id] = NormStats(np.asarray(st["mu"]), np.asarray(st["sigma"]))
        return store.write_stats(stats, mode="exact" if exact else "sampled", sample_size=sample_size, seed=seed)
