"""Settings of the HTTP service, read from the environment (prefix ``SDR_SERVICE_``) with
documented defaults; ``sdr serve`` flags override ``host`` and ``port``."""

from __future__ import annotations

from pydantic import Field, SecretStr
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
        "otherwise). /health and /metrics stay open.",
    )
    max_body_bytes: int = Field(
        8_000_000, gt=0,
        description="Largest request body in bytes, checked from Content-Length before the body is read "
        "and again while it is read (413 beyond). Leaves room for a 5 MB document (SDR_MAX_DOCUMENT_BYTES) "
        "in JSON.",
    )
    max_concurrency: int = Field(
        4, gt=0,
        description="More-like-this requests computed at once. CPU-bound work gains nothing beyond the "
        "number of cores; a higher value only raises latency under load.",
    )
    max_queue: int = Field(
        16, ge=0,
        description="More-like-this requests allowed to wait for a free slot; one more answers 429 at once.",
    )
    queue_timeout_s: float = Field(
        2.0, ge=0,
        description="Longest wait for a free slot before answering 429 (the queue never grows without bound).",
    )
    health_timeout_s: float = Field(
        5.0, gt=0, description="Seconds a store may take to answer the /health check before it counts as down."
    )
