"""A request's deadline (sdr_search.core.deadline): what it caps, what it refuses, how it nests, and the
retry policy and the service's worker threads under it."""

from __future__ import annotations

import threading
import time

import anyio
import pytest

from sdr_search.core import deadline
from sdr_search.core.errors import DeadlineExceededError
from sdr_search.core.retry import Backoff, retry_call

pytestmark = pytest.mark.unit


def test_no_deadline_outside_within():
    assert deadline.remaining() is None
    assert deadline.cap(30.0, "x") == (30.0, False)
    deadline.check("x")  # nothing to exceed
    with deadline.within(0):
        assert deadline.remaining() is None


def test_cap_cuts_a_longer_timeout_to_the_time_left_and_refuses_past_it():
    with deadline.within(1.0):
        left, cut = deadline.cap(30.0, "x")
        assert cut and 0.9 < left <= 1.0
        assert deadline.cap(0.5, "x") == (0.5, False)  # a shorter timeout stays
        left, cut = deadline.cap(None, "x")
        assert cut and left <= 1.0
    with deadline.within(0.01):
        time.sleep(0.02)
        with pytest.raises(DeadlineExceededError, match=r"deadline of 0.01 s .* while reading x"):
            deadline.cap(30.0, "reading x")
        with pytest.raises(DeadlineExceededError):
            deadline.check("y")


def test_an_inner_deadline_never_extends_the_outer_one():
    with deadline.within(0.5):
        with deadline.within(10.0):
            assert deadline.remaining() <= 0.5
        with deadline.within(0.1):
            assert deadline.remaining() <= 0.1
        assert 0.1 < deadline.remaining() <= 0.5
    assert deadline.remaining() is None


def test_a_worker_thread_gets_the_deadline_it_is_given():
    end = time.monotonic() + 5.0
    seen: list[float | None] = []

    def work() -> None:
        seen.append(deadline.remaining())
        with deadline.at(end, 5.0):
            seen.append(deadline.remaining())

    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert seen[0] is None and 4.0 < seen[1] <= 5.0


def test_retries_stop_when_the_next_wait_would_end_past_the_deadline():
    slept: list[float] = []
    calls: list[int] = []

    def down() -> None:
        calls.append(1)
        raise ConnectionError(f"down {len(calls)}")

    b = Backoff(max_retries=5, initial=1.0, maximum=60.0)  # waits 1, 2, 4, 8, 16
    with deadline.within(3.5), pytest.raises(ConnectionError, match="down 3"):
        retry_call(down, backoff=b, retry_if=lambda e: True, what="probe", sleep=slept.append)
    assert slept == [1.0, 2.0]  # 4 s more would end past the 3.5 s deadline (the sleeps were not slept here)


def test_the_service_answers_at_the_deadline_even_while_the_work_runs_on():
    from sdr_search.reranker.service.app import _bounded

    async def call(seconds: float, work, *args):
        return await _bounded(time.monotonic() + seconds, seconds, work, *args)

    t0 = time.monotonic()
    with pytest.raises(DeadlineExceededError, match="deadline of 0.3 s"):
        anyio.run(call, 0.3, time.sleep, 3.0)  # work that never checks the deadline
    assert time.monotonic() - t0 < 2.0  # the deadline plus the grace, not the work's 3 s
    left = anyio.run(call, 5.0, deadline.remaining)  # the worker thread runs within it
    assert left is not None and 4.0 < left <= 5.0


def test_reads_carry_the_preference_for_answering_nodes_and_writes_do_not():
    import json as _json

    from sdr_search.indexer.opensearch.connection import NodeRouter

    router = NodeRouter(probe_timeout=1.0, hold_s=0.2)
    assert router.steer("POST", "/i/_search", {"a": "1"}, b"{}") == ({"a": "1"}, b"{}")  # nothing hung
    router._prefer = ("_prefer_nodes:n1,n2", time.monotonic() + 0.2)
    assert router.steer("POST", "/i/_search", {"a": "1"}, b"{}")[0] == {"a": "1", "preference": "_prefer_nodes:n1,n2"}
    assert router.steer("POST", "/_mget", None, b"{}")[0] == {"preference": "_prefer_nodes:n1,n2"}
    assert router.steer("GET", "/i/_doc/x", None, None)[0] == {"preference": "_prefer_nodes:n1,n2"}
    assert router.steer("POST", "/i/_search", {"preference": "_local"}, None)[0] == {"preference": "_local"}
    for method, url in (("POST", "/_bulk"), ("PUT", "/i/_doc/x"), ("DELETE", "/i/_doc/x"), ("GET", "/_cluster/health")):
        assert router.steer(method, url, {}, b"{}") == ({}, b"{}"), url
    body = b'{"index":"i"}\n{"query":{"match_all":{}}}\n{}\n{"size":1}\n'
    _, steered = router.steer("POST", "/_msearch", {}, body)
    lines = steered.split(b"\n")
    assert [_json.loads(lines[i])["preference"] for i in (0, 2)] == ["_prefer_nodes:n1,n2"] * 2
    assert lines[1] == b'{"query":{"match_all":{}}}' and lines[3] == b'{"size":1}' and lines[4] == b""
    time.sleep(0.25)
    assert router.preference() is None  # held for hold_s only
