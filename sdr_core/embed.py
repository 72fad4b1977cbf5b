"""Encode documents into sentence vectors, through the on-disk cache.

Documents are processed in chunks; each chunk's misses are encoded together (so length-sorted
batching works across documents) and written to the cache before the next chunk starts, so an
interrupted run resumes where it stopped.
"""

from __future__ import annotations

import logging
from typing import Iterable, Sequence

import numpy as np

from .cache import EmbeddingCache, document_key
from .documents import Document
from .encoder import SentenceEncoder
from .vectors import CorpusVectors, DocVectors

__all__ = ["embed_documents", "embed_corpus", "doc_vectors"]

logger = logging.getLogger(__name__)


def doc_vectors(doc: Document, flat: np.ndarray) -> DocVectors:
    sizes = [len(p) for p in doc.paragraphs]
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    if offsets[-1] != flat.shape[0]:
        raise ValueError(f"document {doc.id!r}: {flat.shape[0]} vectors for {offsets[-1]} sentences")
    return DocVectors(flat, offsets)


def _chunks(docs: Iterable[Document], n: int):
    chunk: list[Document] = []
    for d in docs:
        chunk.append(d)
        if len(chunk) >= n:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def embed_documents(
    docs: Iterable[Document],
    encoder: SentenceEncoder,
    *,
    cache: EmbeddingCache | None = None,
    chunk_docs: int = 64,
    progress: bool = False,
    total: int | None = None,
) -> Iterable[tuple[Document, DocVectors]]:
    """Yield ``(document, vectors)`` in input order."""
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=total, unit="doc", desc="embedding", smoothing=0.05)
    hits = encoded = 0
    try:
        for chunk in _chunks(docs, chunk_docs):
            keys = [document_key(encoder.cache_tag, d.paragraphs) for d in chunk] if cache else []
            found = cache.get_many(keys) if cache else {}
            missing = [i for i, d in enumerate(chunk) if not cache or keys[i] not in found]
            flat: dict[int, np.ndarray] = {}
            if missing:
                sentences = [s for i in missing for s in chunk[i].sentences]
                vecs = encoder.encode(sentences)
                pos = 0
                for i in missing:
                    n = chunk[i].n_sentences
                    flat[i] = vecs[pos : pos + n]
                    pos += n
                encoded += len(sentences)
                if cache:
                    cache.put_many((keys[i], flat[i]) for i in missing)
            for i, d in enumerate(chunk):
                v = flat[i] if i in flat else found[keys[i]]
                if i not in flat:
                    hits += 1
                yield d, doc_vectors(d, v)
            if bar is not None:
                bar.update(len(chunk))
                bar.set_postfix(cached=hits, encoded_sents=encoded, refresh=False)
    finally:
        if bar is not None:
            bar.close()
    logger.info("embedded documents: %d from cache, %d sentences encoded", hits, encoded)


def embed_corpus(
    docs: Sequence[Document],
    encoder: SentenceEncoder,
    *,
    cache: EmbeddingCache | None = None,
    progress: bool = False,
) -> CorpusVectors:
    """All of ``docs`` as one :class:`CorpusVectors` (ids in input order)."""
    pairs = list(embed_documents(docs, encoder, cache=cache, progress=progress, total=len(docs)))
    return CorpusVectors.from_docs([d.id for d, _ in pairs], [v for _, v in pairs])
