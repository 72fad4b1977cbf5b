"""The library front door (re-exported by :mod:`sdr_search`): open a store, index files, run a
query. Each function goes through the same code as the CLI command of the same job (``sdr index``:
:func:`sdr_search.indexer.ingest.index_paths`; ``sdr mlt``: :meth:`MoreLikeThis.run`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from sdr_search.core.encoder import SentenceEncoder
from sdr_search.core.settings import SegmentationSettings
from sdr_search.indexer.store import DocumentStore
from sdr_search.reranker.engine import MLTResult, MLTSettings, MoreLikeThis, Query
from sdr_search.reranker.sources import query_encoder  # re-exported: the store's model for queries

__all__ = ["open_store", "index_files", "more_like_this", "query_encoder"]


def open_store(target: str | Path, *, index: str | None = None, create: bool = False) -> DocumentStore:
    """An embedded store directory, or an OpenSearch cluster when ``target`` is an ``http(s)://``
    URL (``index``: the index or alias, default ``SDR_OPENSEARCH_INDEX`` or ``sdr``). ``create``
    makes a missing embedded store (an OpenSearch index is created by the first write). Use it as a
    context manager, or call ``close()``."""
    if isinstance(target, str) and target.startswith(("http://", "https://")):
        from sdr_search.indexer.opensearch import OpenSearchSettings, OpenSearchStore

        settings = OpenSearchSettings()
        return OpenSearchStore(target, index=index or settings.index, settings=settings)
    if index is not None:
        raise ValueError("index= names an OpenSearch index; an embedded store is a directory")
    from sdr_search.indexer.embedded import EmbeddedStore

    return EmbeddedStore(Path(target), create=create)


def index_files(
    store: DocumentStore, paths: Sequence[str | Path], *, encoder: SentenceEncoder | None = None,
    segmentation: SegmentationSettings | None = None, cache: Any = None, progress: bool = False, **options: Any,
) -> dict[str, Any]:
    """Read, segment, encode and write the documents of ``paths`` (``.jsonl[.gz]`` files or folders
    of ``.txt``), then refresh the statistics; returns the summary ``sdr index`` prints. ``options``:
    ``strict``, ``stats`` (False skips the refresh), ``sample``, ``seed``."""
    from sdr_search.indexer.ingest import index_paths

    return index_paths(store, [Path(p) for p in paths], encoder=encoder or SentenceEncoder(), cache=cache,
                       segmentation=segmentation, progress=progress, **options)


def more_like_this(
    store: DocumentStore, query: Query, *, encoder: SentenceEncoder | None = None, settings: MLTSettings | None = None,
) -> MLTResult:
    """Answer one query (an engine for one call; keep a :class:`MoreLikeThis` for many: it caches
    the reference sample and the encoder). New-text sources load the store's model unless
    ``encoder`` is given."""
    if encoder is None and query.needs_encoder:
        encoder = query_encoder(store.meta())
    return MoreLikeThis(store=store, encoder=encoder, settings=settings).run(query)
