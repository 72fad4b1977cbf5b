"""sdr_search.reranker.service: the HTTP service over the engine (``sdr serve``).

- :mod:`~sdr_search.reranker.service.app` - :func:`create_app`, the FastAPI app and its routes
- :mod:`~sdr_search.reranker.service.api_models` - the response models (with the query contract of
  :mod:`sdr_search.reranker.query`, they define ``openapi.json``)
- :mod:`~sdr_search.reranker.service.openapi` - the committed spec
  (``python -m sdr_search.reranker.service.openapi > openapi.json``)
- :mod:`~sdr_search.reranker.service.writes` - document writes, the bulk NDJSON body, the statistics refresh
- :mod:`~sdr_search.reranker.service.errors` - domain errors mapped to HTTP status codes in one place
- :mod:`~sdr_search.reranker.service.limits` - the body size cap and the concurrency cap
- :mod:`~sdr_search.reranker.service.compute` - CPU budget: threads per request, the encoder's CPU gate
- :mod:`~sdr_search.reranker.service.prometheus` - Prometheus metrics (``/metrics``; nDCG and the other
  relevance metrics are :mod:`sdr_search.core.metrics`)
- :mod:`~sdr_search.reranker.service.settings` - the service's settings (``SDR_SERVICE_*``; the engine's
  are :mod:`sdr_search.reranker.engine_settings`)
- :mod:`~sdr_search.reranker.service.bind` - the bind policy (no API key: loopback only)
- :mod:`~sdr_search.reranker.service.ui` - the ``/ui`` page (``static/``)

Imports go one way: the service imports the engine (:mod:`sdr_search.reranker`), never the reverse
(``tests/test_packaging.py``).
"""
