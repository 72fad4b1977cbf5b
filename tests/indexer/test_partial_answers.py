"""A search answer that some shards could not give (``_shards.failed`` > 0, returned with 200 while a
node is lost and its shard copies move) is never ranked from: the store raises it as the error it stands
for, and retries it like one (issue 43: a query during a node's loss answers as before or fails, never
from the documents of some shards only)."""

from __future__ import annotations

import pytest

from sdr_search.core.errors import BackendUnavailableError, OverloadedError, StoreError
from sdr_search.indexer.opensearch import OpenSearchSettings
from sdr_search.indexer.opensearch.requests import shard_failure
from sdr_search.indexer.opensearch.transport import Transport

pytestmark = pytest.mark.unit

WHOLE = {"_shards": {"total": 3, "successful": 3, "skipped": 0, "failed": 0}, "hits": {"hits": []}}


def _partial(*statuses: int, kind: str = "node_not_connected_exception") -> dict:
    failures = [{"shard": i, "index": "x", "status": s, "reason": {"type": kind, "reason": f"shard {i} lost"}}
                for i, s in enumerate(statuses)]
    return {"_shards": {"total": 3, "successful": 3 - len(statuses), "skipped": 0, "failed": len(statuses),
                        "failures": failures}, "hits": {"hits": []}}


def test_a_whole_answer_passes_and_a_partial_one_is_named():
    assert shard_failure(WHOLE) is None
    assert shard_failure({"responses": [WHOLE, WHOLE]}) is None
    assert shard_failure({"count": 3}) is None  # no _shards at all
    status, info = shard_failure(_partial(500))
    assert status == 503 and "1 shard(s) failed" in info["error"]["reason"] and "shard 0 lost" in info["error"]["reason"]
    assert shard_failure({"responses": [WHOLE, _partial(429, 429)]})[0] == 429
    assert shard_failure(_partial(400, kind="illegal_argument_exception"))[0] == 400
    assert shard_failure(_partial(429, 503))[0] == 503
    # failed without the failures listed: still partial
    assert shard_failure({"_shards": {"total": 3, "successful": 2, "failed": 1}})[0] == 503


def _transport(retries: int) -> Transport:
    settings = OpenSearchSettings(max_retries=retries, retry_backoff=0.01, retry_backoff_max=0.01)
    return Transport("http://127.0.0.1:1", settings, index="x")


def test_a_partial_answer_is_retried_and_the_whole_one_returned():
    answers = [_partial(503), {"responses": [WHOLE, _partial(500)]}, WHOLE]
    sent = []

    def search():
        sent.append(1)
        return answers[len(sent) - 1]

    assert _transport(3).call("a search", search, index="x") is WHOLE
    assert len(sent) == 3


def test_a_partial_answer_that_stays_partial_fails_naming_it():
    with pytest.raises(BackendUnavailableError, match="partial answer refused"):
        _transport(1).call("a search", lambda: _partial(500), index="x")
    with pytest.raises(OverloadedError):
        _transport(0).call("a search", lambda: _partial(429), index="x")
    with pytest.raises(StoreError, match="illegal_argument_exception"):
        _transport(3).call("a search", lambda: _partial(400, kind="illegal_argument_exception"), index="x")
