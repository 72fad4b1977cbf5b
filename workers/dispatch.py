"""How ``sdr reindex`` runs task functions: in-process (:class:`LocalDispatcher`) or through Celery
(:class:`QueueDispatcher`), behind one small interface (``submit``, ``poll``, ``outstanding``).

The queue dispatcher never trusts the broker to keep a message: every submitted item is kept
until its result is read. It sends an item again when

* the broker restarted (for Redis: its ``run_id`` changed; a Redis without persistence comes back
  empty, so every message not yet answered is gone), or
* no result at all arrived for ``resend_after`` seconds while some worker answers a ping (the
  worker that held a batch died, or messages were lost some other way). While no worker answers,
  nothing is re-sent: the messages wait in the queue for the first worker to come;
* its result is a failure raised *outside* the task's body by the broker or result backend
  connection (a worker that finished a batch while Redis was down: Celery records a
  ``ConnectionError`` for the task once Redis is back). That says nothing about the batch's
  documents, so the batch is sent again instead of being reported as failed (at most
  ``max_retries`` times per batch; then the failure stands).

Re-sending is safe because tasks are idempotent (documents already stored with the same content
are skipped), and the first result of any copy settles the item; later copies are ignored.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Mapping

from .settings import WorkerSettings
from .tasks import TransientError, call_with_retries

__all__ = ["TaskFailure", "LocalDispatcher", "QueueDispatcher", "BrokerWatch", "run_all"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TaskFailure:
    """A task that ended without a result (an exception in the worker, retries exhausted)."""

    reason: str


def connection_errors() -> tuple[type[BaseException], ...]:
    """Exceptions that mean "the broker or result backend cannot be reached right now"."""
    errors: list[type[BaseException]] = [OSError, ConnectionError, TimeoutError]
    try:
        from kombu.exceptions import OperationalError

        errors.append(OperationalError)
    except ImportError:  # pragma: no cover - kombu comes with celery
        pass
    try:
        import redis.exceptions as rx

        errors += [rx.ConnectionError, rx.TimeoutError, rx.BusyLoadingError]
    except ImportError:  # pragma: no cover
        pass
    try:
        from celery.exceptions import BackendError

        errors.append(BackendError)
    except ImportError:  # pragma: no cover
        pass
    return tuple(errors)


class LocalDispatcher:
    """Runs each submitted task function at once, in this process (no broker)."""

    capacity = 1

    def __init__(self, functions: Mapping[str, Callable[..., Any]]) -> None:
        self._functions = dict(functions)
        self._ready: deque[tuple[Any, Any]] = deque()
        self.resends = 0

    @property
    def outstanding(self) -> int:
        return len(self._ready)

    def submit(self, key: Any, name: str, args: tuple) -> None:
        try:
            result: Any = call_with_retries(self._functions[name], *args)
        except TransientError as e:
            result = TaskFailure(f"gave up after retries: {e}")
        self._ready.append((key, result))

    def worker_processes(self) -> int:
        return 1

    def poll(self) -> list[tuple[Any, Any]]:
        out = list(self._ready)
        self._ready.clear()
        return out

    def close(self) -> None:
        from .tasks import close_process_resources

        close_process_resources()


class BrokerWatch:
    """Notices a Redis restart: the server's ``run_id`` changes (checked at most every ``every`` s)."""

    def __init__(self, url: str, *, every: float = 1.0) -> None:
        import redis

        self._client = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
        self._every = every
        self._next = 0.0
        self.run_id: str | None = None
        self.down = False

    def restarted(self) -> bool:
        """True once after the server came back with a different run id."""
        now = time.monotonic()
        if now < self._next:
            return False
        self._next = now + self._every
        try:
            run_id = str(self._client.info("server")["run_id"])
        except connection_errors() as e:
            if not self.down:
                logger.warning("broker unreachable (%s); waiting for it", e)
            self.down = True
            return False
        was_down, self.down = self.down, False
        previous, self.run_id = self.run_id, run_id
        if previous is not None and run_id != previous:
            logger.warning("the broker restarted (run id changed); re-sending every unfinished batch")
            return True
        if was_down:
            logger.info("broker reachable again (same server: no message lost)")
        return False

    def close(self) -> None:
        self._client.close()


@dataclass
class _Pending:
    name: str
    args: tuple
    task_ids: list[str] = field(default_factory=list)
    sent_at: float | None = None
    lost: int = 0  # failures of the broker connection, not of the task (see the module docstring)


class QueueDispatcher:
    """Sends task messages through Celery and collects their results (see the module docstring)."""

    def __init__(self, app, settings: WorkerSettings, *, watch: BrokerWatch | None = None) -> None:
        self.app = app
        self.settings = settings
        self.capacity = settings.max_in_flight
        self.watch = watch
        self.resends = 0
        self._pending: dict[Any, _Pending] = {}
        self._by_task: dict[str, Any] = {}
        self._unsent: deque[Any] = deque()
        self._last_progress = time.monotonic()
        self._errors = connection_errors()
        self._backend_down = False

    @property
    def outstanding(self) -> int:
        return len(self._pending)

    def submit(self, key: Any, name: str, args: tuple) -> None:
        self._pending[key] = _Pending(name, args)
        self._send(key)

    def _send(self, key: Any) -> bool:
        item = self._pending[key]
        task_id = str(uuid.uuid4())
        try:
            self.app.send_task(item.name, args=list(item.args), task_id=task_id, queue=self.settings.queue)
        except self._errors as e:
            logger.warning("cannot send a task to the broker (%s); will try again", e)
            if key not in self._unsent:
                self._unsent.append(key)
            return False
        item.task_ids.append(task_id)
        item.sent_at = time.monotonic()
        self._by_task[task_id] = key
        return True

    def _resend(self, keys: Iterable[Any], why: str) -> None:
        keys = [k for k in keys if k in self._pending]
        if not keys:
            return
        logger.warning("re-sending %d unfinished task(s): %s", len(keys), why)
        for key in keys:
            self.resends += 1
            self._send(key)

    def poll(self) -> list[tuple[Any, Any]]:
        """Wait ``poll_interval``, then return the ``(key, result)`` pairs that finished."""
        time.sleep(self.settings.poll_interval)
        now = time.monotonic()
        while self._unsent:  # sends that failed while the broker was away
            key = self._unsent[0]
            if key in self._pending and not self._send(key):
                break
            self._unsent.popleft()
        if self.watch is not None:
            if self.watch.restarted():
                self._resend(list(self._pending), "the broker restarted and lost its messages")
                self._last_progress = now
            if self.watch.down:
                self._last_progress = now  # no progress is possible; do not count it as a stall
        done = self._collect()
        if done:
            self._last_progress = now
        elif self._pending and now - self._last_progress > self.settings.resend_after:
            if self._any_worker():
                stale = [k for k, p in self._pending.items()
                         if p.sent_at is None or now - p.sent_at > self.settings.resend_after]
                self._resend(stale, f"no task finished for {self.settings.resend_after:.0f} s")
            else:  # copies would only pile up in the queue; the first worker to come takes the originals
                logger.warning("no worker answered a ping; waiting for one (start it with `sdr worker`, queue %s)",
                               self.settings.queue)
            self._last_progress = time.monotonic()
        return done

    def _collect(self) -> list[tuple[Any, Any]]:
        from celery.result import AsyncResult

        done: list[tuple[Any, Any]] = []
        try:
            for task_id, key in list(self._by_task.items()):
                if key not in self._pending:
                    self._by_task.pop(task_id, None)
                    continue
                res = AsyncResult(task_id, app=self.app)
                state = res.state
                if state not in ("SUCCESS", "FAILURE"):
                    continue
                value = res.result
                if state == "FAILURE" and self._connection_lost(key, res, value):
                    continue
                outcome = value if state == "SUCCESS" else TaskFailure(f"{type(value).__name__}: {value}")
                item = self._pending.pop(key)
                for tid in item.task_ids:
                    self._by_task.pop(tid, None)
                self._forget(res)
                done.append((key, outcome))
        except self._errors as e:
            if not self._backend_down:
                logger.warning("result backend unreachable (%s); waiting for it", e)
            self._backend_down = True
            return done
        if self._backend_down:
            logger.info("result backend reachable again")
        self._backend_down = False
        return done

    def _connection_lost(self, key: Any, res, error: Any) -> bool:
        """Whether a FAILURE result is the broker connection's, not the task's; if so the item is
        sent again (even when another copy is out: that one may be lost too, and copies are harmless)."""
        item = self._pending[key]
        if not isinstance(error, self._errors) or item.lost >= self.settings.max_retries:
            return False
        item.lost += 1
        self._by_task.pop(res.id, None)
        self._forget(res)
        self._resend([key], f"task {res.id} lost its broker connection ({type(error).__name__}: {error}; "
                            f"{item.lost}/{self.settings.max_retries})")
        return True

    def _forget(self, res) -> None:
        try:
            res.forget()
        except self._errors:
            pass  # the result expires on its own (result_expires)

    def worker_processes(self) -> int:
        """Worker processes listening now (sum of the pools' concurrency; 0 when none answers)."""
        try:
            stats = self.app.control.inspect(timeout=1.0).stats() or {}
        except self._errors:
            return 0
        return sum(int((s.get("pool") or {}).get("max-concurrency") or 1) for s in stats.values())

    def _any_worker(self) -> bool:
        """Whether some worker answers a ping (True when the ping itself fails: resend to be safe).

        A solo-pool worker busy with a batch does not answer; it is also not stalled for longer
        than one batch, which ``resend_after`` exceeds."""
        try:
            return bool(self.app.control.ping(timeout=1.0))
        except self._errors:
            return True

    def close(self) -> None:
        if self.watch is not None:
            self.watch.close()


def run_all(dispatcher, name: str, arg_list: list[tuple], *, capacity: int | None = None) -> Iterator[Any]:
    """Run ``name`` once per args tuple through ``dispatcher``; yield results in completion order.

    A :class:`TaskFailure` raises :class:`~sdr_search.core.errors.SDRError`."""
    from sdr_search.core.errors import SDRError

    window = max(1, min(capacity or dispatcher.capacity, dispatcher.capacity))
    todo = deque(enumerate(arg_list))
    while todo or dispatcher.outstanding:
        while todo and dispatcher.outstanding < window:
            key, args = todo.popleft()
            dispatcher.submit(("run_all", key), name, args)
        for _, result in dispatcher.poll():
            if isinstance(result, TaskFailure):
                raise SDRError(f"task {name} failed: {result.reason}")
            yield result
