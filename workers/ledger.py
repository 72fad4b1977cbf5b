"""Delivery ledger: how a task that keeps killing its worker stops being delivered.

Tasks are acknowledged late and re-queued when their worker dies (``task_acks_late``,
``task_reject_on_worker_lost``, the Redis visibility timeout), which is what makes a SIGKILL lose
nothing. It also means a document that kills the worker process every time (out of memory, a
crash in native code) would be delivered forever. The ledger, a small Redis hash per task id,
breaks that loop:

* every delivery increments ``deliveries``; a re-delivered task (``deliveries > 1``) indexes its
  documents one at a time and writes the id of the document in hand to ``doing`` first;
* a delivery that finds ``doing`` set knows the previous worker died on that document and adds one
  to ``crash:<id>``; a document on which workers died twice is reported as failed (poison);
* past ``max_deliveries`` the remaining documents are all reported as failed.

A delivery that ends alive without finishing (a transient error: Celery retries the task under the
same id) gives its count back (:meth:`RedisLedger.release`), so retries are not mistaken for deaths.

A document on which a worker was killed once by accident (an operator's SIGKILL) is tried again;
only a second death on the same document marks it. The hash expires after a day and is deleted
when the task finishes. Without Redis (in-process indexing) there is no ledger: a crash ends the
command itself.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Protocol

__all__ = ["Delivery", "Ledger", "RedisLedger"]

logger = logging.getLogger(__name__)

_TTL_S = 86_400
_CRASHES_TO_POISON = 2


@dataclass(frozen=True)
class Delivery:
    """What the ledger knows when a task starts."""

    number: int  # 1 for the first delivery
    poison: frozenset[str] = field(default_factory=frozenset)  # ids on which workers died twice

    @property
    def careful(self) -> bool:
        """Index one document at a time (the previous delivery did not finish)."""
        return self.number > 1


class Ledger(Protocol):
    def start(self) -> Delivery: ...

    def doing(self, doc_id: str | None) -> None: ...

    def release(self) -> None: ...

    def finish(self) -> None: ...


class RedisLedger:
    """The ledger of one task id in the Redis at ``url`` (the broker)."""

    def __init__(self, url: str, task_id: str) -> None:
        self.key = f"sdr:deliveries:{task_id}"
        self._url = url
        self._client = None

    def _redis(self):
        if self._client is None:
            import redis

            self._client = redis.Redis.from_url(self._url, socket_timeout=10, socket_connect_timeout=10)
        return self._client

    def start(self) -> Delivery:
        r = self._redis()
        with r.pipeline() as p:
            p.hincrby(self.key, "deliveries", 1)
            p.hget(self.key, "doing")
            p.expire(self.key, _TTL_S)
            number, doing, _ = p.execute()
        if doing:
            doc_id = doing.decode("utf-8")
            crashes = r.hincrby(self.key, f"crash:{doc_id}", 1)
            r.hdel(self.key, "doing")
            logger.warning("delivery %d: a worker died while indexing %r (%d time(s))", number, doc_id, crashes)
        crashed = {
            k.decode("utf-8")[len("crash:"):]: int(v)
            for k, v in r.hgetall(self.key).items()
            if k.startswith(b"crash:")
        }
        poison = frozenset(d for d, n in crashed.items() if n >= _CRASHES_TO_POISON)
        return Delivery(int(number), poison)

    def doing(self, doc_id: str | None) -> None:
        if doc_id is None:
            self._redis().hdel(self.key, "doing")
        else:
            self._redis().hset(self.key, "doing", doc_id)

    def release(self) -> None:
        """This delivery ends alive but unfinished (a transient error: the task is retried): it
        does not count as a delivery on which the worker died."""
        with self._redis().pipeline() as p:
            p.hincrby(self.key, "deliveries", -1)
            p.hdel(self.key, "doing")
            p.execute()

    def finish(self) -> None:
        self._redis().delete(self.key)
