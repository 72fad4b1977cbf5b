"""The indexing job of ``sdr reindex``: batches of records through a dispatcher, outcomes counted.

Counting is per document and never double-counts: each batch is settled by the first result of
any copy of it (re-sent copies are ignored afterwards). A document a worker reports as
``skipped`` (already stored with the same content) counts as *skipped* only when it was in the
target before this run started (a resumed run); otherwise an earlier copy of the same batch wrote
it during this run (its result was lost with a broker restart) and it counts as *indexed*.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from sdr_search.core.errors import SDRError

from .app import INDEX_TASK
from .dispatch import TaskFailure
from .records import Record, Rejected

__all__ = ["JobSummary", "JobTimeout", "IndexJob"]

logger = logging.getLogger(__name__)

_MAX_LISTED_FAILURES = 50


@dataclass
class JobSummary:
    indexed: int = 0
    skipped: int = 0
    failed: int = 0
    sentences: int = 0
    resends: int = 0
    seconds: float = 0.0
    failures: list[dict[str, Any]] = field(default_factory=list)

    @property
    def total(self) -> int:
        return self.indexed + self.skipped + self.failed

    def to_dict(self) -> dict[str, Any]:
        return {"indexed": self.indexed, "skipped": self.skipped, "failed": self.failed,
                "sentences": self.sentences, "resends": self.resends, "index_seconds": round(self.seconds, 2)}


class JobTimeout(SDRError):
    """The job did not finish within its time limit; ``summary`` holds what was counted."""

    def __init__(self, message: str, summary: JobSummary) -> None:
        self.summary = summary
        super().__init__(message)


class IndexJob:
    """Send every batch of ``items`` to ``dispatcher`` and count the outcomes."""

    def __init__(
        self,
        store_spec: Mapping[str, Any],
        options: Mapping[str, Any],
        dispatcher,
        *,
        present: set[str] | frozenset[str] = frozenset(),
        progress: bool = False,
        total: int | None = None,
    ) -> None:
        self.spec = dict(store_spec)
        self.options = dict(options)
        self.dispatcher = dispatcher
        self.present = present
        self.summary = JobSummary()
        self._progress = progress
        self._total = total
        self._bar = None
        self._t0 = 0.0

    def run(self, items: Iterable[list[Record] | Rejected], *, timeout: float | None = None) -> JobSummary:
        """Run to completion; raises :class:`JobTimeout` after ``timeout`` seconds, or
        :class:`SDRError` when a worker reports a fatal error (wrong model, missing store)."""
        self._t0 = time.perf_counter()
        deadline = None if timeout is None else time.monotonic() + timeout
        if self._progress:
            from tqdm.auto import tqdm

            self._bar = tqdm(total=self._total, unit="doc", desc="reindex", smoothing=0.05)
        batches: dict[int, list[Record]] = {}
        source = iter(items)
        exhausted = False
        key = 0
        try:
            while True:
                while not exhausted and self.dispatcher.outstanding < self.dispatcher.capacity:
                    item = next(source, None)
                    if item is None:
                        exhausted = True
                        break
                    if isinstance(item, Rejected):
                        self._fail(item.doc_id, item.where, item.reason)
                        self._tick(1)
                        continue
                    batches[key] = item
                    self.dispatcher.submit(key, INDEX_TASK, (self.spec, [r.record for r in item], self.options))
                    key += 1
                for k, result in self.dispatcher.poll():
                    self._settle(batches.pop(k), result)
                if exhausted and self.dispatcher.outstanding == 0 and not batches:
                    break
                if deadline is not None and time.monotonic() > deadline:
                    self._finish()
                    raise JobTimeout(f"reindex did not finish within {timeout:.0f} s ({len(batches)} batches "
                                     "unfinished); run it again to resume", self.summary)
        finally:
            if self._bar is not None:
                self._bar.close()
        self._finish()
        return self.summary

    def _finish(self) -> None:
        self.summary.seconds = time.perf_counter() - self._t0
        self.summary.resends = getattr(self.dispatcher, "resends", 0)

    def _fail(self, doc_id: str | None, where: str, reason: str) -> None:
        self.summary.failed += 1
        if len(self.summary.failures) < _MAX_LISTED_FAILURES:
            self.summary.failures.append({"id": doc_id, "where": where, "error": reason})

    def _settle(self, batch: list[Record], result: Any) -> None:
        if isinstance(result, TaskFailure):
            for rec in batch:
                self._fail(rec.doc_id, rec.where, result.reason)
            self._tick(len(batch))
            return
        if result.get("fatal"):
            raise SDRError(f"indexing stopped: {result['fatal']}")
        outcomes = result.get("outcomes") or []
        if len(outcomes) != len(batch):
            raise SDRError(f"a worker answered {len(outcomes)} outcomes for a batch of {len(batch)} records")
        s = self.summary
        for rec, out in zip(batch, outcomes):
            status = out.get("status")
            if status == "failed":
                self._fail(out.get("id") or rec.doc_id, rec.where, str(out.get("error")))
                continue
            if status == "skipped" and out.get("id") in self.present:
                s.skipped += 1
                continue
            s.indexed += 1
            s.sentences += int(out.get("sentences") or 0)
        self._tick(len(batch))

    def _tick(self, n: int) -> None:
        if self._bar is None:
            return
        s = self.summary
        elapsed = max(time.perf_counter() - self._t0, 1e-9)
        self._bar.set_postfix({"sent/s": f"{s.sentences / elapsed:.0f}", "indexed": s.indexed, "skipped": s.skipped,
                               "failed": s.failed}, refresh=False)
        self._bar.update(n)
