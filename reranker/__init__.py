"""reranker: the two-stage "more like this" engine and its HTTP service.

- :mod:`reranker.engine` - candidates from any store, exact SDR rerank, explanations
- :mod:`reranker.service` - FastAPI app (``sdr serve``); errors mapped to HTTP in :mod:`reranker.errors`

The scoring math is in :mod:`sdr_core.scoring`, shared with indexer and workers.
"""
