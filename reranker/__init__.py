"""reranker: the two-stage "more like this" engine and its HTTP service.

- :mod:`sdr_search.reranker.engine` - candidates from any store, exact SDR rerank, explanations
- :mod:`sdr_search.reranker.service` - FastAPI app (``sdr serve``); errors mapped to HTTP in :mod:`sdr_search.reranker.errors`

The scoring math is in :mod:`sdr_search.core.scoring`, shared with indexer and workers.
"""
