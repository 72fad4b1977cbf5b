"""The Celery application, built by a function: importing this module creates and connects nothing.

``celery -A sdr_search.workers.app worker`` finds the app through the module attribute ``app`` (built on first
access by :func:`get_app` from :class:`~sdr_search.workers.settings.WorkerSettings`); ``sdr worker`` does the
same. Configuration, and why:

* JSON only (``task_serializer``, ``result_serializer``, ``accept_content``): task messages are
  plain records and store specs, never pickles.
* ``task_acks_late=True`` + ``task_reject_on_worker_lost=True``: a message is acknowledged after
  its task finished, so a worker killed mid-batch loses nothing: the message goes back to the
  queue (prefork child death) or is re-delivered after ``visibility_timeout`` (the whole worker
  died). Tasks are idempotent, so running one twice is harmless.
* ``worker_prefetch_multiplier=1``: a worker process holds one message at a time, so a batch does
  not wait behind another in a busy worker while idle workers could take it.
* ``broker_transport_options.visibility_timeout``: see :mod:`sdr_search.workers.settings`.
* ``worker_cancel_long_running_tasks_on_connection_loss=False``: a batch being encoded when the
  broker goes away is finished and written; its message may come back (lost ack), and is then
  skipped by content keys.

Tasks: ``sdr.index_batch`` (retried with exponential backoff on transient errors, poison never
retried) and ``sdr.stats_block``.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

from sdr_search.core.errors import InvalidInputError

from .settings import WorkerSettings

if TYPE_CHECKING:  # pragma: no cover
    from celery import Celery

__all__ = ["create_app", "get_app", "INDEX_TASK", "STATS_TASK"]

logger = logging.getLogger(__name__)

INDEX_TASK = "sdr.index_batch"
STATS_TASK = "sdr.stats_block"

_app_lock = threading.Lock()
_app: list["Celery"] = []


def create_app(settings: WorkerSettings | None = None) -> "Celery":
    """A new Celery app for ``settings`` (default: from the environment), tasks registered.

    Raises :class:`InvalidInputError` when no broker is configured.
    """
    from celery import Celery
    from celery.signals import worker_init, worker_process_init, worker_process_shutdown, worker_shutdown

    from . import tasks
    from .ledger import RedisLedger

    settings = settings or WorkerSettings()
    if not settings.broker_url:
        raise InvalidInputError("no broker configured: set SDR_BROKER_URL or REDIS_URL (e.g. redis://localhost:6379/0)")
    app = Celery("sdr", broker=settings.broker_url, backend=settings.backend_url, set_as_current=False)
    app.conf.update(
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        result_accept_content=["json"],
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        worker_cancel_long_running_tasks_on_connection_loss=False,
        broker_transport_options={"visibility_timeout": settings.visibility_timeout},
        broker_connection_retry_on_startup=True,
        task_default_queue=settings.queue,
        result_expires=settings.result_expires,
        task_track_started=False,
        worker_hijack_root_logger=True,
        # A prefork child loads the encoder before it reports up (preload_encoder): give it time.
        worker_proc_alive_timeout=120.0,
    )
    uses_redis = settings.broker_url.startswith(("redis://", "rediss://", "unix://"))
    # The one retry policy (sdr_search.core.retry). Celery's own autoretry_for/retry_backoff compute
    # the same delays but round the factor up to whole seconds (int(max(1, retry_backoff))), so the
    # tasks pass the policy's countdown to self.retry instead; index_batch also has to report its
    # documents failed, not raise, once the retries are spent.
    backoff = settings.backoff()

    @app.task(name=INDEX_TASK, bind=True, max_retries=settings.max_retries)
    def index_batch_task(self, store_spec: dict, records: list, options: dict | None = None) -> dict[str, Any]:
        ledger = RedisLedger(settings.broker_url, self.request.id) if uses_redis and self.request.id else None
        try:
            return tasks.index_batch(store_spec, records, options, ledger=ledger, max_deliveries=settings.max_deliveries)
        except tasks.TransientError as e:
            if self.request.retries >= settings.max_retries:
                logger.error("giving up after %d retries: %s", self.request.retries, e)
                return {"outcomes": [{"status": "failed", "id": tasks._record_id(r),
                                      "error": f"gave up after {self.request.retries} retries: {e}"} for r in records],
                        "encoded_sentences": 0, "seconds": 0.0, "delivery": 0}
            delay = backoff.delay(self.request.retries)
            logger.warning("transient error (%s); retry %d/%d in %.1f s", e, self.request.retries + 1, settings.max_retries, delay)
            raise self.retry(exc=e, countdown=delay) from e

    @app.task(name=STATS_TASK, bind=True, max_retries=settings.max_retries)
    def stats_block_task(self, store_spec: dict, doc_ids: list, options: dict | None = None) -> dict[str, Any]:
        try:
            return tasks.stats_block(store_spec, doc_ids, options)
        except tasks.TransientError as e:
            raise self.retry(exc=e, countdown=backoff.delay(self.request.retries)) from e

    def _close(**_: Any) -> None:
        tasks.close_process_resources()

    def _preload_in_main(sender: Any = None, **_: Any) -> None:
        # worker_init runs in the main process, which executes the tasks with the solo and threads
        # pools; prefork children load it themselves (worker_process_init), after the fork.
        if "prefork" in str(getattr(sender, "pool_cls", "")):
            return
        tasks.preload_encoder()

    if settings.preload_encoder:
        worker_process_init.connect(lambda **kw: tasks.preload_encoder(), weak=False)
        worker_init.connect(_preload_in_main, weak=False)

    # Save the embedded stores' FAISS indexes when a worker (or a prefork child) stops cleanly.
    worker_process_shutdown.connect(_close, weak=False)
    worker_shutdown.connect(_close, weak=False)
    app.sdr_settings = settings  # type: ignore[attr-defined]
    return app


def get_app() -> "Celery":
    """The process-wide app, created from the environment on first call."""
    with _app_lock:
        if not _app:
            _app.append(create_app())
        return _app[0]


def __getattr__(name: str) -> Any:
    # ``celery -A sdr_search.workers.app`` looks up ``sdr_search.workers.app.app`` (then ``.celery``): build it on demand.
    if name in ("app", "celery"):
        return get_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
