"""sdr-search: long-document "more like this" with SDR (Self-Supervised Document Similarity Ranking).

The front door for library use; the subpackages hold the rest (``sdr_search.core``: segmentation,
encoder, exact scoring; ``sdr_search.indexer``: stores and indexing; ``sdr_search.reranker``: the
engine and the HTTP service; ``sdr_search.workers``: Celery workers; ``sdr_search.cli``: the ``sdr``
command)::

    from sdr_search import Query, index_files, more_like_this, open_store

    with open_store("my-store", create=True) as store:        # or open_store("http://localhost:9200", index="sdr")
        index_files(store, ["corpus.jsonl"])                   # encode, write, refresh statistics
        result = more_like_this(store, Query(text="...", size=10, filter={"court": "supreme"}))
        several = more_like_this(store, Query(like=["doc-1", {"text": "..."}], unlike=["doc-7"]))
        for hit in result.hits:
            print(hit.id, hit.score)

Nothing here connects, loads a model or imports torch until it is called.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["Query", "MoreLikeThis", "MLTResult", "open_store", "index_files", "more_like_this"]

if TYPE_CHECKING:  # pragma: no cover
    from .api import index_files, more_like_this, open_store
    from .reranker.engine import MLTResult, MoreLikeThis, Query

_LAZY = {
    "Query": "sdr_search.reranker.engine",
    "MoreLikeThis": "sdr_search.reranker.engine",
    "MLTResult": "sdr_search.reranker.engine",
    "open_store": "sdr_search.api",
    "index_files": "sdr_search.api",
    "more_like_this": "sdr_search.api",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'sdr_search' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
