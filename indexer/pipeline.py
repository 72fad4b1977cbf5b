"""Index documents into a store: encode (through the embedding cache), write in atomic batches,
skip documents whose content is unchanged (so an interrupted run resumes), count everything."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Iterable, Iterator

from sdr_search.core.cache import EmbeddingCache, document_key
from sdr_search.core.documents import Document
from sdr_search.core.embed import embed_documents
from sdr_search.core.encoder import SentenceEncoder
from sdr_search.core.errors import SDRError

from .provenance import index_meta
from .store import DocumentStore

__all__ = ["IndexSummary", "index_documents"]

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


def _write(store, todo, encoder, cache, summary) -> list[Document]:
    """Encode and put ``todo``; on failure retry one by one so one poison document fails alone."""
    try:
        store.put(list(embed_documents(todo, encoder, cache=cache, chunk_docs=len(todo))))
        return todo
    except SDRError as e:
        logger.warning("batch of %d documents failed (%s); retrying one by one", len(todo), e)
    done: list[Document] = []
    for d in todo:
        try:
            store.put(list(embed_documents([d], encoder, cache=cache)))
            done.append(d)
        except SDRError as e:
            summary.failed += 1
            summary.failures.append((d.id, str(e)))
            logger.error("failed to index %r: %s", d.id, e)
    return done


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
                done = _write(store, todo, encoder, cache, summary)
                summary.indexed += len(done)
                summary.sentences += sum(d.n_sentences for d in done)
            if bar is not None:
                bar.update(len(batch))
                bar.set_postfix(indexed=summary.indexed, unchanged=summary.unchanged, sents=summary.sentences, refresh=False)
    finally:
        if bar is not None:
            bar.close()
    return summary
