"""Settings of the workers and of ``sdr reindex``, from the environment (prefix ``SDR_``).

No broker (the default) means everything runs in-process. The broker URL is read from
``SDR_BROKER_URL``, or else from the plain ``REDIS_URL`` that docker-compose and most hosting
platforms set.

Choosing ``visibility_timeout`` (the Redis transport's re-delivery timer): a message taken by a
worker and not acknowledged within this many seconds is handed to another worker. Tasks are
acknowledged *after* they finish (``task_acks_late``), so the timeout must exceed the longest time
one batch can take, or a slow batch is executed twice (harmless, writes are idempotent, but the
work is wasted). Estimate it as ``batch_chars / (characters per sentence) / (sentences per second
of one worker)`` for the largest batch, then take 3x for safety: with the defaults (600k
characters, ~150 characters per sentence, ~100 sentences/s for one CPU thread in fp32) a batch
takes ~40 s, so a few minutes are plenty; the default of one hour also covers a 20x slower
machine (or a single document larger than the budget, which goes alone).
A lower value makes messages of a worker that died re-appear sooner, but ``sdr reindex`` already
re-sends such batches itself after ``resend_after`` seconds without progress, so there is little
reason to lower it.
"""

from __future__ import annotations

from pydantic import AliasChoices, Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from sdr_search.core.retry import Backoff

__all__ = ["WorkerSettings"]


class WorkerSettings(BaseSettings):
    """Celery broker and backend, batching, retries and re-delivery of indexing jobs."""

    model_config = SettingsConfigDict(env_prefix="SDR_", extra="ignore", populate_by_name=True)

    broker_url: str | None = Field(
        None,
        validation_alias=AliasChoices("SDR_BROKER_URL", "REDIS_URL", "broker_url"),
        description=(
            "Celery broker, e.g. redis://localhost:6379/0 (env SDR_BROKER_URL, else REDIS_URL). Unset: "
            "no queue, `sdr reindex` encodes in-process."
        ),
    )
    result_backend: str | None = Field(
        None,
        description="Where task results are kept (unset: the broker URL). Results are read once and deleted.",
    )
    queue: str = Field(
        "sdr-index",
        min_length=1,
        description="Queue name used by `sdr reindex` and consumed by `sdr worker`. Separate deployments "
        "sharing one Redis need different names.",
    )
    batch_docs: int = Field(
        64, ge=1,
        description="Most documents per task (batch_chars usually limits first). Larger batches encode "
        "more efficiently but redo more work when a worker dies and take longer (see visibility_timeout).",
    )
    batch_chars: int = Field(
        600_000, ge=1,
        description="Largest total text of one task in characters (a larger document goes alone): about "
        "4,000 sentences. The encoder sorts a task's sentences by length and packs them under a token "
        "budget, which needs a few thousand sentences to be efficient (measured on IRLeD, 1 thread: 4 "
        "judgments per task reach 76 %, 8 reach 87 %, 16 reach 96 % of encoding everything at once); "
        "smaller tasks keep workers evenly loaded at the end of a run.",
    )
    max_in_flight: int = Field(
        32, ge=1,
        description="Tasks `sdr reindex` keeps enqueued at once. Must exceed the number of worker processes "
        "so none waits; more only holds more documents in Redis memory.",
    )
    visibility_timeout: float = Field(
        3600.0, gt=0,
        description="Seconds before the broker re-delivers a message that a worker took and did not "
        "acknowledge (the worker died). Must exceed the time of one batch; see the module docstring.",
    )
    resend_after: float = Field(
        600.0, gt=0,
        description="`sdr reindex` re-sends the unfinished batches when no batch has finished for this many "
        "seconds (workers died, or the broker lost its messages). Must exceed the time of one batch; "
        "too low only enqueues harmless duplicates.",
    )
    max_retries: int = Field(
        5, ge=0,
        description="Retries of a task that met a transient error (store or broker unreachable), and re-sends "
        "by `sdr reindex` of a batch whose result is a broker connection error. Poison documents are never "
        "retried: they are reported as failed.",
    )
    retry_backoff: float = Field(2.0, gt=0, description="Seconds before the first retry; doubled at every retry.")
    retry_backoff_max: float = Field(
        120.0, gt=0,
        description="Longest wait between two retries. Must be below visibility_timeout: a retry waits in "
        "the worker unacknowledged.",
    )
    max_deliveries: int = Field(
        4, ge=2,
        description="A task delivered this many times without finishing (the worker process died each time, "
        "e.g. killed for memory on one document) reports its remaining documents as failed instead of "
        "being delivered again.",
    )
    torch_threads: int | None = Field(
        None, ge=1,
        description="torch threads per worker process (unset: torch's default, all cores). With N worker "
        "processes on C cores use C / N so they do not oversubscribe the CPU; `sdr worker` does this "
        "itself when unset.",
    )
    preload_encoder: bool = Field(
        True,
        description="Load the encoder when a worker process starts (so it reports ready only once it can "
        "encode, and the first batch is not slower than the others). Off: on the first task.",
    )
    result_expires: int = Field(
        86_400, ge=60, description="Seconds a task result not read by `sdr reindex` stays in the backend."
    )
    poll_interval: float = Field(0.25, gt=0, description="Seconds between two polls of task results by `sdr reindex`.")

    @model_validator(mode="after")
    def _check_timeouts(self) -> "WorkerSettings":
        if self.retry_backoff_max >= self.visibility_timeout:
            raise ValueError(
                f"retry_backoff_max ({self.retry_backoff_max} s) must be below visibility_timeout "
                f"({self.visibility_timeout} s): a task waiting for its retry would be re-delivered"
            )
        return self

    @property
    def backend_url(self) -> str | None:
        return self.result_backend or self.broker_url

    def backoff(self) -> Backoff:
        """The retry policy of the tasks (:mod:`sdr_search.core.retry`)."""
        return Backoff(self.max_retries, self.retry_backoff, self.retry_backoff_max)

    def retry_delay(self, retries: int) -> float:
        """Seconds to wait before retry number ``retries + 1`` (exponential, capped)."""
        return self.backoff().delay(retries)
