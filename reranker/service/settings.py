"""Settings of the HTTP service, read from the environment (prefix ``SDR_SERVICE_``) with
documented defaults; ``sdr serve`` flags override ``host`` and ``port``."""

from __future__ import annotations

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["ServiceSettings"]


class ServiceSettings(BaseSettings):
    """Limits, concurrency and access control of the reranker service."""

    model_config = SettingsConfigDict(env_prefix="SDR_SERVICE_", extra="ignore")

    host: str = Field(
        "127.0.0.1",
        description="Interface to bind. Loopback by default; a non-loopback host without an API key is "
        "refused unless `sdr serve --insecure` is given.",
    )
    port: int = Field(8000, ge=0, le=65535, description="TCP port (0: any free port).")
    api_key: SecretStr | None = Field(
        None,
        description="When set, every /v1/... route requires the header X-API-Key with this value (401 "
        "otherwise). /health and /metrics stay open. Set but empty (or blank) is refused at start: unset it to "
        "serve without a key (loopback only).",
    )

    @field_validator("api_key")
    @classmethod
    def _no_blank_key(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not value.get_secret_value().strip():
            raise ValueError("SDR_SERVICE_API_KEY is set but empty: give a key, or unset it to serve without one "
                             "(loopback only)")
        return value
    docs: bool = Field(
        True,
        description="Serve the API's pages /docs (Swagger UI) and /redoc. Like /openapi.json they describe the API "
        "and hold no data, so they need no API key; false turns both pages off (/openapi.json stays).",
    )
    ui: bool = Field(
        True,
        description="Serve the \"more like this\" page at /ui (static files shipped in the package, no CDN). The "
        "page itself holds no data and needs no API key; everything it shows comes through /v1/..., which does "
        "(the page asks for the key and sends it as X-API-Key). false: no /ui.",
    )
    max_body_bytes: int = Field(
        8_000_000, gt=0,
        description="Largest request body in bytes, checked from Content-Length before the body is read "
        "and again while it is read (413 beyond). Leaves room for a 5 MB document (SDR_MAX_DOCUMENT_BYTES) "
        "in JSON.",
    )
    max_concurrency: int | None = Field(
        None, gt=0,
        description="More-like-this requests computed at once; unset: the number of CPU cores this process may "
        "use. CPU-bound work gains nothing beyond the cores: with 4 on 2 cores 59-69 % of 8 clients' requests "
        "were refused and the rest took 6-7 s (issue 24); see docs/results/service.md.",
    )
    threads_per_request: int | None = Field(
        None, gt=0,
        description="BLAS and FAISS (OpenMP) threads each request may use; unset: cores // max_concurrency (at "
        "least 1), so that threads x concurrent requests <= cores. The encoder is shared (one batch at a time) "
        "and keeps torch's own thread count.",
    )
    max_queue: int = Field(
        16, ge=0,
        description="More-like-this requests allowed to wait for a free slot; one more answers 429 at once.",
    )
    queue_timeout_s: float = Field(
        30.0, ge=0,
        description="Longest wait for a free slot before answering 429. Long enough that a full queue drains "
        "under normal load (429 means the queue bound was reached, not a slow moment); 0 refuses at once when "
        "every slot is busy.",
    )
    encoder_exclusive: bool = Field(
        True,
        description="An encoder batch holds the CPU whole: it waits for the computations running and none starts "
        "while it runs (reranks and the model then never compete for the cores). false: the model runs beside "
        "other requests' reranks (the behaviour before; docs/results/service.md compares both).",
    )
    encode_batch_tokens: int = Field(
        16_384, gt=0,
        description="Concurrent new-text requests are encoded together in one encoder call up to this many "
        "(estimated) tokens; a larger source is encoded alone.",
    )

    def concurrency(self) -> int:
        """The effective ``max_concurrency``."""
        from .compute import available_cores

        return self.max_concurrency or available_cores()

    def threads(self) -> int:
        """The effective ``threads_per_request``."""
        from .compute import available_cores

        return self.threads_per_request or max(1, available_cores() // self.concurrency())

    max_bulk_documents: int = Field(
        1000, gt=0, description="Most actions (documents to write, ids to delete) in one bulk request (422 beyond).",
    )
    stats_refresh_delay_s: float = Field(
        30.0, ge=0,
        description="After a write over HTTP, the index's statistics are refreshed in the background once no write "
        "came for this many seconds (sampled, as `sdr index` does; one refresh at a time per index). 0: only on "
        "demand (POST /v1/indices/{index}/_refresh_stats) or with `sdr stats`.",
    )
    request_timeout_s: float = Field(
        60.0, ge=0,
        description="Deadline of a read (more like this, a document, a source search), from its arrival: its wait "
        "for a compute slot, its store requests (each cut to the time left; no retry waits past it) and its "
        "computation; past it the answer is 504 and the worker is free again. It bounds a call when a node of the "
        "cluster hangs (a GC pause) instead of SDR_OPENSEARCH_TIMEOUT once per node and retry; keep it above that "
        "timeout so that one slow request can still be retried on another node. Writes are not cut (an unknown "
        "outcome is worse than a slow one). 0: no deadline.",
    )
    health_timeout_s: float = Field(
        5.0, gt=0, description="Seconds a store may take to answer the /health check before it counts as down. "
        "On a cluster, each node is first asked to answer within half of it: one that does not (a hung process "
        "the cluster has not dropped yet) makes /health say degraded and is left out of the client's rotation."
    )
