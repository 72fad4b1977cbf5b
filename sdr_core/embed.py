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
from .encoder import SentenceEncoder, TruncationCount
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
    counts = cache is not None and hasattr(encoder, "note_truncation")  # the real encoder counts its cuts
    try:
        for chunk in _chunks(docs, chunk_docs):
            keys = [document_key(encoder.cache_tag, d.paragraphs) for d in chunk] if cache else []
            found = cache.get_many(keys) if cache else {}
            missing = [i for i, d in enumerate(chunk) if not cache or keys[i] not in found]
            flat: dict[int, np.ndarray] = {}
            if missing:
                sentences = [s for i in missing for s in chunk[i].sentences]
                cuts: list | None = [] if counts else None
                vecs = encoder.encode(sentences, cuts=cuts) if counts else encoder.encode(sentences)
                pos = 0
                for i in missing:
                    n = chunk[i].n_sentences
                    flat[i] = vecs[pos : pos + n]
                    pos += n
                encoded += len(sentences)
                if cache:
                    cache.put_many((keys[i], flat[i]) for i in missing)
                    if cuts is not None:
                        cache.put_truncation(_per_document(cuts, [(keys[i], chunk[i].n_sentences) for i in missing]))
            if counts and len(missing) < len(chunk):
                _count_cached(encoder, cache, [(keys[i], chunk[i]) for i in range(len(chunk)) if i not in flat])
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


def _per_document(cuts: list, docs: Sequence[tuple[str, int]]) -> list[tuple[str, int, int, int | None]]:
    """``(key, sentences, truncated, chars_cut)`` of each document from the per-sentence ``cuts``."""
    rows, pos = [], 0
    for key, n in docs:
        mine = cuts[pos : pos + n]
        pos += n
        chars = None if any(c is None for c in mine) else sum(mine)
        rows.append((key, n, sum(1 for c in mine if c is None or c > 0), chars))
    return rows


def _count_cached(encoder, cache: EmbeddingCache, hits: list[tuple[str, Document]]) -> None:
    """Add what the token cap cut in the documents read from ``cache`` to the encoder's count, as if
    they were encoded now; entries whose cut is not recorded (an older cache) are tokenised again."""
    recorded = cache.get_truncation(key for key, _ in hits)
    total = TruncationCount()
    for key, _ in hits:
        if key in recorded:
            total = total + TruncationCount(*recorded[key])
    encoder.note_truncation(total)
    unknown = [(key, d) for key, d in hits if key not in recorded]
    if unknown:
        cuts: list = []
        encoder.tokenize([s for _, d in unknown for s in d.sentences], cuts=cuts)  # counts as it goes
        cache.put_truncation(_per_document(cuts, [(key, d.n_sentences) for key, d in unknown]))


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
