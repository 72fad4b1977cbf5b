"""Index documents into a store: encode (through the embedding cache), write in atomic batches,
skip documents whose content is unchanged (so an interrupted run resumes), count everything.

:func:`write_documents` is the one in-process write path, shared by ``sdr index``
(:func:`index_documents`) and the workers (:func:`sdr_search.workers.tasks.index_batch`): a failing
group is split in halves until the failing document fails alone."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, Sequence

from sdr_search.core.cache import EmbeddingCache, document_key
from sdr_search.core.documents import Document
from sdr_search.core.embed import embed_documents
from sdr_search.core.encoder import SentenceEncoder, TruncationCount, truncation_of
from sdr_search.core.errors import BulkWriteError, IndexLayoutError, SDRError
from sdr_search.core.vectors import DocVectors

from .provenance import index_meta
from .store import DocumentStore

__all__ = ["IndexSummary", "index_documents", "WriteReport", "write_documents", "isolate_sdr_errors", "error_text"]

logger = logging.getLogger(__name__)


@dataclass
class IndexSummary:
    indexed: int = 0
    unchanged: int = 0
    skipped: int = 0  # invalid input, counted by the reader
    failed: int = 0
    sentences: int = 0
    failures: list[tuple[str, str]] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"indexed": self.indexed, "unchanged": self.unchanged, "skipped": self.skipped,
                "failed": self.failed, "sentences": self.sentences}


def _batches(docs: Iterable[Document], n: int) -> Iterator[list[Document]]:
    batch: list[Document] = []
    for d in docs:
        batch.append(d)
        if len(batch) >= n:
            yield batch
            batch = []
    if batch:
        yield batch


def error_text(exc: BaseException) -> str:
    """How a failure is reported: an :class:`SDRError`'s message, otherwise ``Type: message``."""
    text = str(exc) or type(exc).__name__
    return text if isinstance(exc, SDRError) else f"{type(exc).__name__}: {text}"


def isolate_sdr_errors(exc: Exception) -> None:
    """The error policy of ``sdr index`` for :func:`write_documents`: an :class:`SDRError` is
    the documents' own (isolate it), except an :class:`IndexLayoutError` (the store takes no
    document until it is rebuilt); anything else stops the run."""
    if not isinstance(exc, SDRError) or isinstance(exc, IndexLayoutError):
        raise exc


@dataclass
class WriteReport:
    """What :func:`write_documents` did: the documents written (in the order given), those that
    failed with their reason, the sentences encoded, and how many of those the encoder cut at its
    token cap (``truncation``: to report once per run, e.g. by summing the reports)."""

    written: list[Document] = field(default_factory=list)
    failed: list[tuple[Document, str]] = field(default_factory=list)
    encoded_sentences: int = 0
    truncation: TruncationCount = field(default_factory=TruncationCount)


def write_documents(
    store: DocumentStore,
    docs: Sequence[Document],
    encoder: SentenceEncoder,
    *,
    cache: EmbeddingCache | None = None,
    check_error: Callable[[Exception], None] = isolate_sdr_errors,
    report: WriteReport | None = None,
) -> WriteReport:
    """Encode ``docs`` (through ``cache``) and put them into ``store``: the one in-process
    indexing path of ``sdr index`` and the workers.

    A group that fails to encode, or that the store refuses as a whole, is split in halves until
    the failing document is alone: it is reported failed with its reason (``encoding failed: ...``
    or ``store rejected it: ...``) and every other document is written. Item-level rejections
    (:class:`BulkWriteError`) fail only the rejected documents. ``check_error`` sees every other
    failure first: it raises to stop the whole write (an error that is not the documents' own,
    such as an unreachable store), or returns to have it isolated. ``report`` (default: a new
    one) is filled as the write goes on, so a caller whose ``check_error`` raised still knows
    what was written before.
    """
    report = report if report is not None else WriteReport()
    before = truncation_of(encoder)
    try:
        _put(store, _encode(list(docs), encoder, cache, check_error, report), check_error, report)
    finally:
        report.truncation = report.truncation + (truncation_of(encoder) - before)
    return report


def _encode(
    docs: list[Document], encoder, cache, check_error, report: WriteReport
) -> list[tuple[Document, DocVectors]]:
    if not docs:
        return []
    try:
        pairs = list(embed_documents(docs, encoder, cache=cache, chunk_docs=len(docs)))
    except Exception as e:  # noqa: BLE001 - check_error decides; a document's own failure is reported, never swallowed
        check_error(e)
        if len(docs) == 1:
            logger.warning("document %r failed to encode: %s", docs[0].id, error_text(e), exc_info=True)
            report.failed.append((docs[0], f"encoding failed: {error_text(e)}"))
            return []
        mid = len(docs) // 2
        logger.info("a batch of %d documents failed to encode (%s); splitting it", len(docs), error_text(e))
        return (_encode(docs[:mid], encoder, cache, check_error, report)
                + _encode(docs[mid:], encoder, cache, check_error, report))
    report.encoded_sentences += sum(d.n_sentences for d in docs)
    return pairs


def _put(store: DocumentStore, pairs: list[tuple[Document, DocVectors]], check_error, report: WriteReport) -> None:
    if not pairs:
        return
    try:
        store.put(pairs)
    except BulkWriteError as e:  # item-level rejections: the others were written
        for doc, _ in pairs:
            if doc.id in e.failed:
                logger.error("failed to index %r: %s", doc.id, e.failed[doc.id])
                report.failed.append((doc, f"store rejected it: {e.failed[doc.id]}"))
            else:
                report.written.append(doc)
        return
    except Exception as e:  # noqa: BLE001 - see _encode
        check_error(e)
        if len(pairs) == 1:
            logger.error("failed to index %r: %s", pairs[0][0].id, error_text(e))
            report.failed.append((pairs[0][0], f"store rejected it: {error_text(e)}"))
            return
        mid = len(pairs) // 2
        logger.warning("a batch of %d documents failed to write (%s); splitting it", len(pairs), error_text(e))
        _put(store, pairs[:mid], check_error, report)
        _put(store, pairs[mid:], check_error, report)
        return
    report.written.extend(doc for doc, _ in pairs)


def index_documents(
    store: DocumentStore,
    docs: Iterable[Document],
    encoder: SentenceEncoder,
    *,
    cache: EmbeddingCache | None = None,
    batch_docs: int = 32,
    progress: bool = False,
    total: int | None = None,
    segmentation: dict | None = None,
) -> IndexSummary:
    """Index ``docs``; a batch is written atomically, documents within it each all-or-nothing."""
    store.ensure_meta(index_meta(encoder, segmentation or {}))
    summary = IndexSummary()
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=total, unit="doc", desc="indexing", smoothing=0.05)
    try:
        for batch in _batches(docs, batch_docs):
            keys = {d.id: document_key(encoder.cache_tag, d.paragraphs) for d in batch}
            stored = store.content_keys(list(keys))
            todo = [d for d in batch if stored.get(d.id) != keys[d.id]]
            summary.unchanged += len(batch) - len(todo)
            if todo:
                report = write_documents(store, todo, encoder, cache=cache)
                summary.indexed += len(report.written)
                summary.sentences += sum(d.n_sentences for d in report.written)
                summary.failed += len(report.failed)
                summary.failures += [(d.id, reason) for d, reason in report.failed]
            if bar is not None:
                bar.update(len(batch))
                bar.set_postfix(indexed=summary.indexed, unchanged=summary.unchanged, sents=summary.sentences, refresh=False)
    finally:
        if bar is not None:
            bar.close()
    return summary
