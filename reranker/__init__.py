"""reranker: applies the exact SDR score (:mod:`sdr_core.scoring`) to retrieved candidates.

The HTTP "more like this" service lives here once the "Reranker service" issue lands; the
scoring math it uses is in :mod:`sdr_core.scoring` so that indexer, workers and reranker share it.
"""
