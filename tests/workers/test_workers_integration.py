"""Integration tests of ``sdr reindex`` with a REAL Redis and REAL worker processes (``sdr worker``
subprocesses, solo pool, the real default encoder in fp32 on CPU):

(a) a worker SIGKILLed mid-batch: a new worker finishes the job, every document indexed once;
(b) Redis restarted mid-run (nothing persisted): the command re-sends what was lost;
(c) poison records end in the failed count, the others are indexed;
(d) no broker: the in-process path builds the same store as the queue path;
(e) the live name switches atomically: an open reader keeps answering from the old store.

Redis: ``REDIS_URL`` when set, else a private ``redis-server`` (started in a temporary directory on
a free port, stopped afterwards; the ``redis_url`` fixture of conftest.py): a failure with the
reason when neither exists. Test (b) always needs the binary (it kills and restarts the server).
The processes are driven through ``worker_harness.py``.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

from sdr_search.indexer.embedded import EmbeddedStore
from worker_harness import (
    N_DOCS,
    REDIS_SERVER,
    Reindex,
    RedisServer,
    Worker,
    base_env,
    corpus,
    wait_for,
    write_jsonl,
)

pytestmark = pytest.mark.integration


def check_exactly_once(live: Path, records: list[dict], encoder) -> None:
    """Every record stored once: counts, unique ids, no dead rows, vectors = a fresh encoding."""
    from sdr_search.core.documents import parse_record

    with EmbeddedStore(live) as store:
        ids = list(store.iter_ids())
        assert sorted(ids) == sorted(r["id"] for r in records) and len(ids) == len(set(ids))
        docs = {r["id"]: parse_record(r) for r in records}
        counts = store.counts()
        assert counts["documents"] == len(records)
        assert counts["sentences"] == sum(d.n_sentences for d in docs.values())
        info = store.storage_info()
        assert info["dead_rows"] == 0 and info["live_rows"] == counts["sentences"]
        for doc_id in ids[:: max(1, len(ids) // 6)]:
            stored = store.get(doc_id)
            fresh = encoder.encode(docs[doc_id].sentences)
            np.testing.assert_allclose(stored.vectors.vectors, fresh, atol=2e-5)


# =============================================================================================
# fixtures (redis_url, workers_to_stop: conftest.py)
# =============================================================================================
@pytest.fixture(scope="module")
def shared_worker(redis_url, tmp_path_factory):
    """One worker for the tests that do not kill anything; its own queue."""
    queue = f"sdr-test-{uuid.uuid4().hex[:8]}"
    env = base_env(redis_url, queue)
    worker = Worker(env, tmp_path_factory.mktemp("worker") / "worker.log", f"shared-{queue}")
    try:
        worker.wait_ready()
        yield env
    finally:
        worker.stop()


# =============================================================================================
# tests
# =============================================================================================
def test_worker_killed_mid_batch_job_completes_exactly_once(redis_url, tmp_path, workers_to_stop, encoder):
    records = corpus()
    data = write_jsonl(tmp_path / "docs.jsonl", records)
    live = tmp_path / "live"
    queue = f"sdr-test-{uuid.uuid4().hex[:8]}"
    env = base_env(redis_url, queue, SDR_RESEND_AFTER="6", SDR_VISIBILITY_TIMEOUT="600")
    w1 = Worker(env, tmp_path / "w1.log", f"w1-{queue}")
    workers_to_stop.append(w1)
    w1.wait_ready()
    job = Reindex(env, ["--store", str(live), str(data), "--batch-docs", "10", "--timeout", "120"], tmp_path / "reindex.log")
    # Kill the worker right after it received its second batch (the first one is written).
    wait_for(lambda: w1.count("received") >= 2, 60, "the worker to start its second batch", poll=0.02)
    w1.kill()
    assert w1.count("succeeded") == w1.count("received") - 1, "the worker was not killed mid-batch"
    target = json.loads((tmp_path / ".live.reindex.json").read_text())["target"]
    with EmbeddedStore(target) as s:
        assert 0 < s.counts()["documents"] < N_DOCS
    w2 = Worker(env, tmp_path / "w2.log", f"w2-{queue}")
    workers_to_stop.append(w2)
    out = job.result()
    assert out.get("complete") and out.get("swapped"), f"{out}\n{job.log.read_text()[-3000:]}"
    assert (out["indexed"], out["skipped"], out["failed"]) == (N_DOCS, 0, 0)
    assert out["resends"] >= 1  # the killed batch was sent again
    w2.stop()  # closes its store handle cleanly
    check_exactly_once(live, records, encoder)


def test_redis_restart_mid_run_job_completes_exactly_once(tmp_path, workers_to_stop, encoder):
    if REDIS_SERVER is None:
        pytest.skip("restarting Redis needs the redis-server binary (a server given by REDIS_URL cannot be restarted)")
    server = RedisServer(tmp_path / "redis").start()
    try:
        records = corpus()
        data = write_jsonl(tmp_path / "docs.jsonl", records)
        live = tmp_path / "live"
        queue = f"sdr-test-{uuid.uuid4().hex[:8]}"
        # resend_after is long: recovery must come from noticing the restart, not from the stall timer.
        env = base_env(server.url, queue, SDR_RESEND_AFTER="300")
        w = Worker(env, tmp_path / "w.log", f"w-{queue}")
        workers_to_stop.append(w)
        w.wait_ready()
        job = Reindex(env, ["--store", str(live), str(data), "--batch-docs", "10", "--timeout", "120"], tmp_path / "reindex.log")
        wait_for(lambda: w.count("succeeded") >= 1, 60, "a first batch to finish", poll=0.02)
        server.kill()  # every queued message, result and binding is gone
        time.sleep(1.0)
        server.start()
        out = job.result()
        assert out.get("complete") and out.get("swapped"), f"{out}\n{job.log.read_text()[-3000:]}"
        assert (out["indexed"], out["skipped"], out["failed"]) == (N_DOCS, 0, 0)
        assert out["resends"] >= 1
        assert "the broker restarted" in (tmp_path / "reindex.log").read_text()
        w.stop()
        check_exactly_once(live, records, encoder)
    finally:
        server.stop()


def test_delivery_ledger_marks_a_document_after_two_worker_deaths(redis_url):
    import redis

    from sdr_search.workers.ledger import RedisLedger

    task_id = f"test-{uuid.uuid4().hex}"

    def ledger() -> RedisLedger:  # each delivery runs in a new worker process
        return RedisLedger(redis_url, task_id)

    d1 = ledger().start()
    assert (d1.number, d1.careful) == (1, False)  # whole batch; the worker dies somewhere in it
    d2 = ledger().start()
    assert d2.careful and d2.poison == frozenset()  # one document at a time from now on
    ledger().doing("d7")  # ... and the worker dies on d7
    d3 = ledger().start()
    assert d3.number == 3 and d3.poison == frozenset()  # one death may be an accident: d7 is tried again
    ledger().doing("d7")  # ... and it dies on d7 again
    d4 = ledger().start()
    assert d4.number == 4 and d4.poison == frozenset({"d7"})  # reported failed, the rest is indexed
    retried = ledger()
    assert retried.start().number == 5
    retried.release()  # a transient error: the retry is not counted as a death
    assert ledger().start().number == 5
    ledger().finish()
    assert not redis.Redis.from_url(redis_url).exists(f"sdr:deliveries:{task_id}")


def test_a_broker_connection_failure_is_sent_again_not_counted_as_failed(redis_url):
    """A worker that finishes a batch while Redis is away gets a ConnectionError recorded as the
    task's result once Redis is back (raised outside the task's body). The dispatcher sends such an
    item again (up to max_retries times) instead of reporting its documents failed; a failure of the
    task itself is reported. Real Redis and Celery result backend; no worker consumes the queue."""
    import redis
    import redis.exceptions as rx

    from sdr_search.workers.app import INDEX_TASK
    from sdr_search.workers.dispatch import TaskFailure
    from sdr_search.workers.plan import dispatcher_for
    from sdr_search.workers.settings import WorkerSettings

    queue = f"sdr-test-{uuid.uuid4().hex[:8]}"
    settings = WorkerSettings(broker_url=redis_url, queue=queue, max_retries=1, poll_interval=0.01)
    dispatcher = dispatcher_for(settings, in_process=False)
    client = redis.Redis.from_url(redis_url)

    def sent() -> dict[str, str]:  # task id -> the item's first argument, for the messages in the queue
        messages = [json.loads(m) for m in client.lrange(queue, 0, -1)]
        return {m["headers"]["id"]: m["headers"]["argsrepr"] for m in messages}

    def task_of(item: str) -> str:
        (task_id,) = [t for t, a in sent().items() if item in a and t not in seen]
        seen.add(task_id)
        return task_id

    seen: set[str] = set()
    try:
        dispatcher.submit("a", INDEX_TASK, ({"item": "a"}, []))
        dispatcher.submit("b", INDEX_TASK, ({"item": "b"}, []))
        backend = dispatcher.app.backend
        backend.mark_as_failure(task_of("'a'"), rx.ConnectionError("Error 111 connecting to 127.0.0.1. Connection refused."))
        backend.mark_as_failure(task_of("'b'"), ValueError("the task itself failed"))
        done = dict(dispatcher.poll())
        assert list(done) == ["b"] and isinstance(done["b"], TaskFailure) and "the task itself failed" in done["b"].reason
        assert dispatcher.outstanding == 1 and dispatcher.resends == 1
        again = task_of("'a'")  # a new message for the same item
        backend.mark_as_failure(again, rx.ConnectionError("Connection closed by server."))
        done = dict(dispatcher.poll())  # the second loss exceeds max_retries=1: the failure stands
        assert list(done) == ["a"] and isinstance(done["a"], TaskFailure) and "ConnectionError" in done["a"].reason
        assert dispatcher.outstanding == 0 and dispatcher.resends == 1
    finally:
        dispatcher.close()
        client.delete(queue)


def test_poison_records_fail_and_the_others_are_indexed(shared_worker, tmp_path, encoder):
    records = corpus()
    poison = [{"id": "bad-text", "text": 123}, {"id": "bad-paragraphs", "paragraphs": ["ok.", 7]},
              {"id": "empty", "text": "   "}]
    data = write_jsonl(tmp_path / "docs.jsonl", records[:30] + poison + records[30:], extra_lines=("{not json",))
    live = tmp_path / "live"
    out = Reindex(shared_worker, ["--store", str(live), str(data), "--batch-docs", "10",
                                  "--max-failed-fraction", "0.1", "--timeout", "90"], tmp_path / "reindex.log").result()
    assert (out["indexed"], out["skipped"], out["failed"]) == (N_DOCS, 0, 4)
    reasons = {f["id"]: f["error"] for f in out["failures"]}
    assert "'text' must be a string" in reasons["bad-text"]
    assert "only strings" in reasons["bad-paragraphs"] and "no sentence" in reasons["empty"]
    assert any("invalid JSON" in f["error"] for f in out["failures"] if f["id"] is None)
    assert out["swapped"]
    with EmbeddedStore(live) as s:
        assert s.counts()["documents"] == N_DOCS


def test_in_process_and_queue_build_the_same_store(shared_worker, tmp_path):
    records = corpus(24, prefix="q", seed=1)
    data = write_jsonl(tmp_path / "docs.jsonl", records)
    via_queue, local = tmp_path / "queue", tmp_path / "local"
    a = Reindex(shared_worker, ["--store", str(via_queue), str(data), "--batch-docs", "5", "--timeout", "90"],
                tmp_path / "queue.log").result()
    env = {k: v for k, v in shared_worker.items() if k not in ("SDR_BROKER_URL", "REDIS_URL")}
    env["SDR_TORCH_THREADS"] = "2"
    b = Reindex(env, ["--store", str(local), str(data), "--batch-docs", "5"], tmp_path / "local.log").result()
    assert "no broker" in (tmp_path / "local.log").read_text()
    for out in (a, b):
        assert (out["indexed"], out["failed"], out["swapped"]) == (24, 0, True)
    with EmbeddedStore(via_queue) as q, EmbeddedStore(local) as here:
        assert q.counts() == here.counts() and sorted(q.iter_ids()) == sorted(here.iter_ids())
        ids = list(q.iter_ids())
        assert q.content_keys(ids) == here.content_keys(ids)
        assert q.meta().encoder_tag == here.meta().encoder_tag
        for doc_id in ids:
            dq, dl = q.get(doc_id), here.get(doc_id)
            np.testing.assert_allclose(dq.vectors.vectors, dl.vectors.vectors, atol=2e-5)
            # The reference sample (R = 5000) holds every paragraph, so statistics do not depend on order.
            np.testing.assert_allclose(dq.stats.mu, dl.stats.mu, atol=1e-5)
            np.testing.assert_allclose(dq.stats.sigma, dl.stats.sigma, atol=1e-5)


def test_live_name_switches_atomically_and_open_readers_keep_answering(tmp_path, monkeypatch, capsys, encoder):
    from sdr_search.cli import main

    for var in ("SDR_BROKER_URL", "REDIS_URL"):
        monkeypatch.delenv(var, raising=False)
    old_docs, new_docs = corpus(8, prefix="old", seed=2), corpus(11, prefix="new", seed=3)
    old_path = write_jsonl(tmp_path / "old.jsonl", old_docs)
    new_path = write_jsonl(tmp_path / "new.jsonl", new_docs)
    live = tmp_path / "live"
    common = ["--no-progress", "--no-cache", "--precision", "fp32", "--device", "cpu", "--batch-docs", "4"]
    assert main(["reindex", "--store", str(live), str(old_path), *common]) == 0
    first = json.loads(capsys.readouterr().out)
    assert live.is_symlink() and first["previous"] is None

    # Opened by the live name: EmbeddedStore resolves the link once, at construction.
    reader = EmbeddedStore(live)
    probe = encoder.encode(["The court held the tenant in breach of the lease."])
    before = reader.sentence_knn(probe, 3).doc_ids
    assert reader.counts()["documents"] == 8

    seen: set[int] = set()
    errors: list[BaseException] = []
    stop = threading.Event()

    def watch() -> None:  # keeps opening the live name while the new index is built and switched
        while not stop.is_set():
            try:
                with EmbeddedStore(live) as s:
                    seen.add(s.counts()["documents"])
            except BaseException as e:  # noqa: BLE001 - collected and asserted below
                errors.append(e)
            time.sleep(0.01)

    t = threading.Thread(target=watch)
    t.start()
    try:
        assert main(["reindex", "--store", str(live), str(new_path), *common]) == 0
        wait_for(lambda: 11 in seen or bool(errors), 10, "the watcher to open the new store")
    finally:
        stop.set()
        t.join()
    second = json.loads(capsys.readouterr().out)
    assert second["previous"] == os.path.realpath(tmp_path / first["index"])
    assert not errors and seen <= {8, 11} and 11 in seen  # the old store or the new one, never a partial one

    assert reader.counts()["documents"] == 8  # the open reader still answers, from the old store
    assert reader.sentence_knn(probe, 3).doc_ids == before
    stored = reader.get("old000")
    np.testing.assert_allclose(stored.vectors.vectors, encoder.encode(stored.document.sentences), atol=2e-5)
    reader.close()
    with EmbeddedStore(live) as fresh:
        assert fresh.counts()["documents"] == 11
        assert all(i.startswith("new") for i in fresh.sentence_knn(probe, 3).doc_ids[0])
