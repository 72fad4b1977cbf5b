"""The service's CPU budget (threads per request) and the batching encoder, without a model."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from sdr_search.reranker.service.compute import BatchingEncoder, ThreadBudget, available_cores, estimate_tokens
from sdr_search.reranker.service.settings import ServiceSettings

pytestmark = pytest.mark.unit


class _SlowEncoder:
    """Encodes a sentence as [len, position]; each call takes ``delay`` s and records its size."""

    def __init__(self, delay: float = 0.05, fail_on: str | None = None) -> None:
        self.delay = delay
        self.calls: list[int] = []
        self.running = 0
        self.max_running = 0
        self.fail_on = fail_on
        self._lock = threading.Lock()

    def encode(self, sentences):
        with self._lock:
            self.running += 1
            self.max_running = max(self.max_running, self.running)
        try:
            time.sleep(self.delay)
            if self.fail_on is not None and self.fail_on in sentences:
                raise RuntimeError("boom")
            self.calls.append(len(sentences))
            return np.array([[len(s), k] for k, s in enumerate(sentences)], dtype=np.float32)
        finally:
            with self._lock:
                self.running -= 1


def _encode_all(encoder, jobs):
    results: dict[int, np.ndarray] = {}
    errors: dict[int, BaseException] = {}

    def one(k, sentences):
        try:
            results[k] = encoder.encode(sentences)
        except BaseException as e:  # noqa: BLE001 - recorded for the assertion
            errors[k] = e

    threads = [threading.Thread(target=one, args=(k, s)) for k, s in enumerate(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    return results, errors


def test_concurrent_callers_are_encoded_together_and_each_gets_its_own_rows():
    inner = _SlowEncoder()
    enc = BatchingEncoder(inner)
    jobs = [[f"sentence {k}-{j} " + "x" * k for j in range(k + 1)] for k in range(8)]
    results, errors = _encode_all(enc, jobs)
    assert not errors and inner.max_running == 1  # never two model calls at once
    assert sum(inner.calls) == sum(len(j) for j in jobs) and len(inner.calls) < len(jobs)  # some batched
    for k, sentences in enumerate(jobs):
        np.testing.assert_array_equal(results[k][:, 0], [len(s) for s in sentences])


def test_the_token_budget_splits_batches_and_a_big_source_runs_alone():
    inner = _SlowEncoder()
    enc = BatchingEncoder(inner, max_batch_tokens=40)
    big = ["y" * 400]  # ~103 estimated tokens: over the budget, encoded alone
    jobs = [big] + [["short sentence here"] * 2 for _ in range(6)]
    results, errors = _encode_all(enc, jobs)
    assert not errors and len(results) == 7
    assert 1 in inner.calls  # the big one alone
    per_job = 2 * estimate_tokens("short sentence here", 128)  # 14 estimated tokens
    assert max(inner.calls) <= 2 * (40 // per_job)  # at most two short jobs (4 sentences) per call


def test_an_encoder_error_reaches_every_caller_of_that_batch_only():
    inner = _SlowEncoder(fail_on="bad")
    enc = BatchingEncoder(inner, max_batch_tokens=10**6)
    results, errors = _encode_all(enc, [["fine"], ["bad"], ["also fine"]])
    assert errors and all(isinstance(e, RuntimeError) for e in errors.values())
    assert len(results) + len(errors) == 3
    assert enc.encode(["after"]).shape == (1, 2)  # the encoder still works


def test_thread_budget_defaults_keep_threads_times_requests_within_the_cores(monkeypatch):
    cores = available_cores()
    s = ServiceSettings()
    assert s.concurrency() == cores and s.threads() * s.concurrency() <= max(cores, 1)
    s = ServiceSettings(max_concurrency=1)
    assert s.threads() == cores
    s = ServiceSettings(max_concurrency=4 * cores)
    assert s.threads() == 1
    with pytest.raises(ValueError):
        ThreadBudget(0)


def test_thread_budget_limits_blas_in_this_process():
    from threadpoolctl import threadpool_info, threadpool_limits

    before = {lib["filepath"]: lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"}
    try:
        ThreadBudget(1).apply()
        after = [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]
        assert after and all(n == 1 for n in after)
    finally:
        for n in set(before.values()):
            threadpool_limits(limits=n, user_api="blas")


# -- the CPU gate: an encoder batch holds the CPU whole --------------------------------------------------
def test_an_encoder_batch_waits_for_running_computations_and_holds_back_new_ones():
    from sdr_search.reranker.service.compute import CpuGate

    gate = CpuGate()
    events: list[str] = []
    inside, release = threading.Event(), threading.Event()

    def rerank(name, hold=None):
        with gate.shared():
            events.append(f"{name} start")
            if hold is not None:
                inside.set()
                assert hold.wait(10)
            events.append(f"{name} end")

    def model():
        with gate.exclusive():
            events.append("model start")
            time.sleep(0.05)
            events.append("model end")

    first = threading.Thread(target=rerank, args=("a", release))
    first.start()
    assert inside.wait(10)
    enc = threading.Thread(target=model)
    enc.start()
    time.sleep(0.05)
    late = threading.Thread(target=rerank, args=("b",))  # arrives while the model waits: waits behind it
    late.start()
    time.sleep(0.05)
    assert events == ["a start"]
    release.set()
    for t in (first, enc, late):
        t.join(10)
    assert events == ["a start", "a end", "model start", "model end", "b start", "b end"]


def test_requests_holding_the_gate_that_wait_for_the_encoder_do_not_block_it():
    from sdr_search.reranker.service.compute import CpuGate

    gate = CpuGate()
    slow = _SlowEncoder(delay=0.05)
    encoder = BatchingEncoder(slow, gate=gate)
    results: dict[int, np.ndarray] = {}

    def request(k):  # a request's compute: holds the gate shared, then encodes its text
        with gate.shared():
            results[k] = encoder.encode([f"s{k}", f"t{k}x"])
            assert getattr(gate._local, "held", 0) == 1  # held again once the encoder returned

    threads = [threading.Thread(target=request, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert not any(t.is_alive() for t in threads)  # no deadlock
    assert sorted(results) == [0, 1, 2, 3] and slow.max_running == 1
    for k, rows in results.items():
        assert rows[:, 0].tolist() == [len(f"s{k}"), len(f"t{k}x")]
    assert gate._rw.readers == 0 and not gate._rw.writing
