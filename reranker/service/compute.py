"""CPU budget of the HTTP service: how many threads each concurrent request may use, and one
encoder shared by concurrent requests.

Oversubscription was the service's collapse under load: each of ``max_concurrency`` requests ran
BLAS (the exact rerank) and FAISS (the k-NN stage) with every core, so 4 requests on 2 cores ran 8
busy threads. :class:`ThreadBudget` gives each request ``threads`` BLAS/OpenMP threads
(``cores // max_concurrency`` by default) so that ``threads x concurrent requests <= cores``.
OpenBLAS's limit is process-wide (set once, through threadpoolctl); an OpenMP limit (FAISS) holds
per calling thread, so it is applied in the request's worker thread.

:class:`CpuGate` keeps the encoder and the reranks apart: an encoder batch (torch, every core)
waits for the computations running and holds the CPU whole while it runs, instead of competing
with another request's rerank (issue 24: by-text throughput fell from 2.0 to 1.5 requests/s at 8
clients while they competed).

:class:`BatchingEncoder` serialises the encoder (a tokenizer and a torch model are not safe to
call from several threads at once) and encodes the sentences of every request that is waiting
for it in one call, up to a token budget (continuous batching, as text-embeddings-inference does):
a request never waits for more than the batch in progress plus its own.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

import numpy as np

from sdr_search.core.locks import ReadWriteLock

__all__ = ["available_cores", "ThreadBudget", "CpuGate", "BatchingEncoder", "estimate_tokens"]

logger = logging.getLogger(__name__)


def available_cores() -> int:
    """CPU cores this process may run on (its affinity mask, else ``os.cpu_count()``)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


class ThreadBudget:
    """``threads`` BLAS and OpenMP threads per request; :meth:`apply` in each request's thread."""

    def __init__(self, threads: int) -> None:
        if threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        self.threads = threads
        self._lock = threading.Lock()
        self._limited: set[str] = set()  # libraries whose process-wide limit is set
        self._local = threading.local()

    def apply(self) -> None:
        """Limit BLAS (process-wide, once per library loaded) and FAISS's OpenMP (this thread)."""
        loaded = frozenset(m for m in ("numpy", "faiss", "torch") if m in sys.modules)
        if not loaded <= self._limited:
            with self._lock:
                if not loaded <= self._limited:
                    from threadpoolctl import threadpool_limits

                    threadpool_limits(limits=self.threads, user_api="blas")
                    self._limited = set(loaded)
                    logger.info("BLAS limited to %d thread(s) per request", self.threads)
        if "faiss" in sys.modules and getattr(self._local, "faiss", None) != self.threads:
            sys.modules["faiss"].omp_set_num_threads(self.threads)
            self._local.faiss = self.threads


class CpuGate:
    """The CPU shared by requests, or held whole by the encoder.

    A request's compute holds the gate *shared* (:meth:`shared`; each request within its
    :class:`ThreadBudget`); an encoder batch holds it *exclusively* (:meth:`exclusive`): it starts
    once the computations running have finished, and none starts while it runs or waits, so the
    model (with torch's own threads, every core) never competes with a rerank. A thread holding
    the gate shared that must wait for the encoder gives its hold up meanwhile (:meth:`released`),
    so a request waiting for its batch never blocks that batch.
    """

    def __init__(self) -> None:
        self._rw = ReadWriteLock()  # shared = read, exclusive = write (a waiting encoder holds new reads back)
        self._local = threading.local()

    @contextmanager
    def shared(self) -> Iterator[None]:
        self._acquire_shared()
        try:
            yield
        finally:
            self._release_shared()

    def _acquire_shared(self) -> None:
        self._rw.acquire_read()
        self._local.held = getattr(self._local, "held", 0) + 1

    def _release_shared(self) -> None:
        self._local.held -= 1
        self._rw.release_read()

    @contextmanager
    def released(self) -> Iterator[None]:
        """Give up this thread's shared holds while inside (e.g. while waiting for the encoder)."""
        held = getattr(self._local, "held", 0)
        for _ in range(held):
            self._release_shared()
        try:
            yield
        finally:
            for _ in range(held):
                self._acquire_shared()

    def exclusive(self):
        """Hold the CPU alone (a context manager): waits for the shared holders to finish."""
        return self._rw.write()


def estimate_tokens(sentence: str, cap: int) -> int:
    """A cheap upper estimate of a sentence's tokens (about 4 characters per token, plus the two
    special tokens), capped at the encoder's truncation length."""
    return min(cap, len(sentence) // 4 + 3)


@dataclass
class _Job:
    sentences: Sequence[str]
    tokens: int
    done: threading.Event = field(default_factory=threading.Event)
    result: np.ndarray | None = None
    error: BaseException | None = None


class BatchingEncoder:
    """A :class:`~sdr_search.core.encoder.SentenceEncoder` behind one lock, with the sentences of
    concurrent callers encoded together (up to ``max_batch_tokens`` estimated tokens per call).
    Every other attribute is the wrapped encoder's."""

    def __init__(self, encoder: Any, *, max_batch_tokens: int = 16_384, gate: CpuGate | None = None) -> None:
        self._encoder = encoder
        self.gate = gate  # with a gate, each model call holds the CPU whole (CpuGate.exclusive)
        self._lock = threading.Lock()  # held while the model runs (and while it loads)
        self._queue_lock = threading.Lock()
        self._queue: deque[_Job] = deque()
        self.max_batch_tokens = max_batch_tokens
        self.batches = 0  # encode calls made (for tests and metrics)

    def encode(self, sentences: Sequence[str], **kwargs: Any) -> np.ndarray:
        if self.gate is None:
            return self._encode(sentences, **kwargs)
        with self.gate.released():  # waiting for the model must not hold back the batch it waits for
            return self._encode(sentences, **kwargs)

    def _model(self, sentences: Sequence[str], **kwargs: Any) -> np.ndarray:
        if self.gate is None:
            return self._encoder.encode(sentences, **kwargs)
        with self.gate.exclusive():
            return self._encoder.encode(sentences, **kwargs)

    def _encode(self, sentences: Sequence[str], **kwargs: Any) -> np.ndarray:
        if kwargs:  # options other callers may not share: encode alone
            with self._lock:
                return self._model(sentences, **kwargs)
        cap = int(getattr(self._encoder.settings, "max_tokens", 512)) if hasattr(self._encoder, "settings") else 512
        job = _Job(list(sentences), sum(estimate_tokens(s, cap) for s in sentences))
        with self._queue_lock:
            self._queue.append(job)
        while not job.done.is_set():
            if self._lock.acquire(timeout=0.005):
                try:
                    self._run_batch()
                finally:
                    self._lock.release()
            else:
                job.done.wait(0.005)
        if job.error is not None:
            raise job.error
        assert job.result is not None
        return job.result

    def _run_batch(self) -> None:
        with self._queue_lock:
            batch: list[_Job] = []
            tokens = 0
            while self._queue and (not batch or tokens + self._queue[0].tokens <= self.max_batch_tokens):
                job = self._queue.popleft()
                batch.append(job)
                tokens += job.tokens
        if not batch:
            return
        try:
            flat = self._model([s for job in batch for s in job.sentences])
        except BaseException as e:  # every caller of this batch gets the error
            for job in batch:
                job.error = e
                job.done.set()
            return
        self.batches += 1
        start = 0
        for job in batch:
            job.result = flat[start : start + len(job.sentences)]
            start += len(job.sentences)
            job.done.set()

    def ensure_loaded(self) -> str:
        """Resolve the model directory and load the model (once); returns the model id."""
        with self._lock:
            _ = self._encoder.model_dir
            _ = self._encoder.dim
            _ = self._encoder.cache_tag
        return str(self._encoder.model_id)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._encoder, name)
