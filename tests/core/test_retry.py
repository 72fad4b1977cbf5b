"""The one retry policy (sdr_search.core.retry): delays, what is retried, what is raised."""

from __future__ import annotations

import pytest

from sdr_search.core.retry import Backoff, retry_call

pytestmark = pytest.mark.unit


def test_delays_double_from_initial_up_to_the_cap():
    b = Backoff(max_retries=6, initial=0.5, maximum=3.0)
    assert [b.delay(k) for k in range(6)] == [0.5, 1.0, 2.0, 3.0, 3.0, 3.0]


def test_retries_what_retry_if_accepts_then_raises_the_last_error(caplog):
    slept, calls = [], []

    def flaky():
        calls.append(1)
        raise ConnectionError(f"down {len(calls)}")

    b = Backoff(max_retries=3, initial=1.0, maximum=10.0)
    with pytest.raises(ConnectionError, match="down 4"):
        retry_call(flaky, backoff=b, retry_if=lambda e: isinstance(e, ConnectionError), what="probe", sleep=slept.append)
    assert len(calls) == 4 and slept == [1.0, 2.0, 4.0]
    assert caplog.text.count("probe: down") == 3


def test_other_errors_and_success_are_not_retried():
    slept, calls = [], []

    def bad():
        calls.append(1)
        raise ValueError("no")

    with pytest.raises(ValueError):
        retry_call(bad, backoff=Backoff(5, 1.0, 1.0), retry_if=lambda e: isinstance(e, OSError), what="x",
                   sleep=slept.append)
    assert calls == [1] and slept == []
    results = iter([OSError("once"), "ok"])

    def once():
        r = next(results)
        if isinstance(r, Exception):
            raise r
        return r

    assert retry_call(once, backoff=Backoff(2, 0.1, 1.0), retry_if=lambda e: isinstance(e, OSError), what="y",
                      sleep=slept.append) == "ok"
    assert slept == [0.1]
