"""``sdr serve``: the HTTP service (:mod:`sdr_search.reranker.service`) over one store, with uvicorn.

Binding: without an API key (``SDR_SERVICE_API_KEY``) the server binds to 127.0.0.1 by default, and
binding to any non-loopback interface without a key is refused (exit status 2) unless
``--insecure`` is given, which logs a warning instead (:mod:`sdr_search.reranker.service.bind`).
"""

from __future__ import annotations

import logging
import re

from sdr_search.core.errors import SDRError
from sdr_search.reranker.service.bind import check_bind

from .args import encoder_for_store, open_store

__all__ = ["cmd_serve"]

logger = logging.getLogger("sdr")


def cmd_serve(args) -> int:
    import uvicorn

    from sdr_search.reranker.service.api_models import INDEX_PATTERN
    from sdr_search.reranker.engine import MLTSettings
    from sdr_search.reranker.service.app import create_app
    from sdr_search.reranker.service.settings import ServiceSettings

    overrides = {k: v for k, v in {"host": args.host, "port": args.port}.items() if v is not None}
    settings = ServiceSettings(**overrides)
    check_bind(settings.host, has_api_key=settings.api_key is not None, insecure=args.insecure)
    if args.opensearch:
        from sdr_search.indexer.opensearch import OpenSearchSettings

        name = args.index or OpenSearchSettings().index
    else:
        name = args.index or "default"
    if not re.match(INDEX_PATTERN, name):
        raise SDRError(f"index name {name!r} cannot be served (letters, digits, '.', '_', '-'; at most 128)")
    mlt = MLTSettings(**({"candidates": args.candidates} if args.candidates is not None else {}))
    with open_store(args) as store:
        counts = store.verify(thorough=True)  # the store exists, answers and reads through before the server starts
        encoder = encoder_for_store(args, store)
        logger.info("loading encoder %s", encoder.model_id)
        _ = encoder.dim  # load now: a broken model directory ends the command instead of the first request
        app = create_app(stores={name: store}, encoder=encoder, settings=settings, mlt_settings=mlt)
        logger.info(
            "serving index %r (%d documents) on http://%s:%d (API key %s)",
            name, counts.get("documents", 0), settings.host, settings.port,
            "required" if settings.api_key is not None else "not required",
        )
        config = uvicorn.Config(
            app, host=settings.host, port=settings.port, log_config=None, access_log=args.access_log,
            timeout_graceful_shutdown=5,
        )
        uvicorn.Server(config).run()
    return 0
