"""reranker: the two-stage "more like this" engine and its HTTP service.

The engine (:mod:`sdr_search.reranker.engine`, :meth:`MoreLikeThis.run`) reads top to bottom over
one module per stage:

- :mod:`~sdr_search.reranker.query` - the query contract (HTTP body, library and CLI alike)
- :mod:`~sdr_search.reranker.engine_settings` - the engine's settings (``SDR_*``)
- :mod:`~sdr_search.reranker.sources` - sources with their statistics; the reference sample
- :mod:`~sdr_search.reranker.retrieval` - candidates, pre-rank, fetch (:mod:`~sdr_search.reranker.candidates`,
  :mod:`~sdr_search.reranker.prerank`, :mod:`~sdr_search.reranker.filters`)
- :mod:`~sdr_search.reranker.scoring` - who computes exact SDR: ``LocalScoring`` (fetched vectors) or
  ``StoreScoring`` (the store, next to its data), chosen by the candidate stage
- :mod:`~sdr_search.reranker.ranking` - exact SDR, the hybrid fusion, several sources, document feedback
- :mod:`~sdr_search.reranker.explain`, :mod:`~sdr_search.reranker.pairs`, :mod:`~sdr_search.reranker.offsets` -
  explanations and their best pairs, snippets, offsets
- :mod:`~sdr_search.reranker.results` - the one ``Hit`` model and ``MLTResult``

The HTTP service (``sdr serve``) is the subpackage :mod:`sdr_search.reranker.service`: the FastAPI app,
its response models, writes, errors mapped to HTTP status in one place, limits, Prometheus metrics,
compute slots, its settings and the bind policy. It imports the engine; the engine never imports it.

The scoring maths is in :mod:`sdr_search.core.scoring`, shared with the indexer and the workers.
"""
