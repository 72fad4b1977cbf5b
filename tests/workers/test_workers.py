"""Unit tests of the workers package: settings, the lazily built Celery app, store specs, record
batching, the task functions (poison splitting, idempotence, transient / fatal errors, the delivery
ledger's careful mode, statistics blocks), job accounting, the symlink switch and state file.

No model, no Redis: a deterministic fake encoder stands in for the real one (the real encoder and
real workers are in ``test_workers_integration.py``).
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from factories import DIM, FakeEncoder
from sdr_search.indexer.embedded import EmbeddedStore
from sdr_search.core.errors import BackendUnavailableError, InvalidInputError, SDRError, StoreError
from sdr_search.workers import tasks
from sdr_search.workers.dispatch import LocalDispatcher, TaskFailure
from sdr_search.workers.ledger import Delivery
from sdr_search.workers.records import Record, Rejected, batch_records, iter_records
from sdr_search.workers.reindex import IndexJob, JobTimeout
from sdr_search.workers.settings import WorkerSettings
from sdr_search.workers.stores import embedded_spec, validate_spec
from sdr_search.workers.swap import ReindexState, switch_symlink, timestamped_name

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]


def record(i: int, *, poison: bool = False, prefix: str = "d") -> dict:
    paragraphs = [f"Document {prefix}{i} opens with point {k}. It then argues point {k + 1}." for k in range(2)]
    if poison:
        paragraphs.append("This sentence is POISON for the encoder.")
    return {"id": f"{prefix}{i:03d}", "paragraphs": paragraphs}


@pytest.fixture()
def fake_encoder(monkeypatch):
    enc = FakeEncoder()
    monkeypatch.setattr(tasks, "process_encoder", lambda overrides=None: enc)
    yield enc
    tasks.close_process_resources()


@pytest.fixture()
def spec(tmp_path):
    path = tmp_path / "store"
    with EmbeddedStore(path, create=True) as s:
        s.counts()
    return embedded_spec(path)


NO_CACHE = {"cache": False}


# -- settings and app ------------------------------------------------------------------------
def test_broker_from_sdr_broker_url_else_redis_url(monkeypatch):
    monkeypatch.delenv("SDR_BROKER_URL", raising=False)
    monkeypatch.delenv("REDIS_URL", raising=False)
    assert WorkerSettings().broker_url is None
    monkeypatch.setenv("REDIS_URL", "redis://plain:6379/0")
    assert WorkerSettings().broker_url == "redis://plain:6379/0"
    monkeypatch.setenv("SDR_BROKER_URL", "redis://sdr:6379/1")
    assert WorkerSettings().broker_url == "redis://sdr:6379/1"
    assert WorkerSettings(broker_url="redis://kw").broker_url == "redis://kw"
    assert WorkerSettings().backend_url == "redis://sdr:6379/1"


def test_retry_backoff_must_stay_below_visibility_timeout():
    with pytest.raises(ValueError, match="visibility_timeout"):
        WorkerSettings(visibility_timeout=60, retry_backoff_max=120)
    s = WorkerSettings(retry_backoff=2, retry_backoff_max=10)
    assert [s.retry_delay(n) for n in range(5)] == [2, 4, 8, 10, 10]


def test_importing_the_app_module_builds_and_connects_nothing():
    code = ("import sys, sdr_search.workers.app as a; assert not a._app; "
            "print(sorted(m for m in ('celery', 'kombu', 'redis', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_app_configuration():
    from sdr_search.workers.app import INDEX_TASK, STATS_TASK, create_app

    app = create_app(WorkerSettings(broker_url="redis://127.0.0.1:1/0", visibility_timeout=900, queue="q1"))
    c = app.conf
    assert c.task_acks_late is True and c.task_reject_on_worker_lost is True
    assert c.worker_prefetch_multiplier == 1
    assert c.task_serializer == "json" and c.result_serializer == "json"
    assert list(c.accept_content) == ["json"] and list(c.result_accept_content) == ["json"]
    assert c.broker_transport_options["visibility_timeout"] == 900
    assert c.task_default_queue == "q1"
    assert {INDEX_TASK, STATS_TASK} <= set(app.tasks)
    with pytest.raises(InvalidInputError, match="no broker"):
        create_app(WorkerSettings(broker_url=None))


def test_worker_argv_and_cli_parsers():
    from sdr_search.cli import build_parser
    from sdr_search.cli.workers import worker_argv

    argv = worker_argv(WorkerSettings(queue="q"), concurrency=2, pool=None, name="w@h", loglevel="INFO")
    assert "--pool=prefork" in argv and "--concurrency=2" in argv and argv[argv.index("--queues") + 1] == "q"
    assert "--pool=solo" in worker_argv(WorkerSettings(), concurrency=1, pool=None, name=None, loglevel="INFO")
    p = build_parser()
    a = p.parse_args(["reindex", "--store", "x", "a.jsonl", "--workers-broker", "redis://h"])
    assert a.workers_broker == "redis://h" and a.paths == ["a.jsonl"]
    assert p.parse_args(["worker", "--concurrency", "3"]).concurrency == 3


# -- store specs and records --------------------------------------------------------------------
def test_store_spec_validation():
    assert validate_spec({"kind": "opensearch", "url": "http://x", "index": "i", "extra": 1}) == {
        "kind": "opensearch", "url": "http://x", "index": "i"}
    for bad in [None, {"kind": "sqlite"}, {"kind": "embedded"}, {"kind": "opensearch", "url": "http://x"}]:
        with pytest.raises(InvalidInputError):
            validate_spec(bad)


def test_records_are_batched_by_count_and_size_and_duplicates_rejected(tmp_path):
    path = tmp_path / "in.jsonl"
    lines = [json.dumps({"id": f"r{i}", "text": "x" * (10 if i != 3 else 500)}) for i in range(7)]
    lines.insert(2, "{broken")
    lines.append(json.dumps({"id": "r1", "text": "again"}))
    path.write_text("\n".join(lines) + "\n")
    out = list(batch_records(iter_records([path]), max_docs=3, max_chars=100))
    rejected = [o for o in out if isinstance(o, Rejected)]
    batches = [[r.doc_id for r in o] for o in out if not isinstance(o, Rejected)]
    assert batches == [["r0", "r1", "r2"], ["r3"], ["r4", "r5", "r6"]]  # r3 alone: over the size budget
    assert [r.doc_id for r in rejected] == [None, "r1"]
    assert "invalid JSON" in rejected[0].reason and "duplicate id" in rejected[1].reason


def test_last_batches_shrink_when_several_workers_share_the_tail():
    items = [Record(str(i), {}, str(i), 10) for i in range(300)]
    sizes = [len(b) for b in batch_records(iter(items), max_docs=64, max_chars=160, total=300, workers=2)]
    assert sizes[:15] == [16] * 15 and sizes[15:] == [15, 12, 9, 8, 8, 8] and sum(sizes) == 300
    assert [len(b) for b in batch_records(iter(items), max_docs=64, max_chars=160)] == [16] * 18 + [12]


# -- index_batch ------------------------------------------------------------------------------
def test_poison_document_fails_alone_and_the_others_are_indexed(spec, fake_encoder):
    records = [record(i, poison=(i == 5)) for i in range(8)]
    result = tasks.index_batch(spec, records, NO_CACHE)
    statuses = [o["status"] for o in result["outcomes"]]
    assert statuses == ["indexed"] * 5 + ["failed"] + ["indexed"] * 2
    assert result["outcomes"][5]["id"] == "d005" and "encoding failed: RuntimeError: boom" in result["outcomes"][5]["error"]
    assert len(fake_encoder.calls) <= 1 + 2 * 3  # halving: one failing group per level of 8 -> 1
    with EmbeddedStore(spec["path"]) as s:
        assert s.counts()["documents"] == 7


def test_invalid_records_are_failed_with_their_reason(spec, fake_encoder):
    records = [record(0), {"id": "t", "text": 123}, {"id": "p", "paragraphs": [1, 2]}, ["not", "an", "object"], {"text": "no id"}]
    out = tasks.index_batch(spec, records, NO_CACHE)["outcomes"]
    assert [o["status"] for o in out] == ["indexed", "failed", "failed", "failed", "failed"]
    assert "'text' must be a string" in out[1]["error"] and out[1]["id"] == "t"
    assert "only strings" in out[2]["error"]
    assert "must be an object" in out[3]["error"] and "'id'" in out[4]["error"]


def test_records_with_invalid_text_fail_alone(spec, fake_encoder, tmp_path, monkeypatch, capsys):
    """A lone surrogate (issue 41, case 7) fails its record with the field named; the batch, and
    `sdr reindex` run in process, write the others."""
    from sdr_search.cli import main

    bad = [{"id": "s1", "text": "Bad \ud800 text."}, {"id": "s2", "paragraphs": ["Fine."], "metadata": {"k": "\udfff"}}]
    out = tasks.index_batch(spec, [record(0), *bad, record(1)], NO_CACHE)["outcomes"]
    assert [o["status"] for o in out] == ["indexed", "failed", "failed", "indexed"]
    assert "text contains a lone surrogate U+D800" in out[1]["error"] and "metadata['k']" in out[2]["error"]
    json.dumps(out, ensure_ascii=False).encode("utf-8")  # the outcomes travel back as JSON
    for var in ("SDR_BROKER_URL", "REDIS_URL"):
        monkeypatch.delenv(var, raising=False)
    data = tmp_path / "docs.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in [record(2), *bad, record(3)]), encoding="ascii")
    rc = main(["reindex", "--store", str(tmp_path / "live"), str(data), "--no-progress", "--no-cache",
               "--max-failed-fraction", "0.5"])
    summary = json.loads(capsys.readouterr().out)
    assert rc == 1 and summary["swapped"]  # rc 1: some documents failed (each listed), the rest is served
    assert (summary["indexed"], summary["failed"]) == (2, 2)
    assert "lone surrogate" in summary["failures"][0]["error"]
    with EmbeddedStore(tmp_path / "live") as s:
        assert sorted(s.iter_ids()) == ["d002", "d003"]


def test_index_batch_is_idempotent(spec, fake_encoder):
    records = [record(i) for i in range(6)]
    first = tasks.index_batch(spec, records, NO_CACHE)
    again = tasks.index_batch(spec, records, NO_CACHE)
    assert {o["status"] for o in first["outcomes"]} == {"indexed"}
    assert {o["status"] for o in again["outcomes"]} == {"skipped"} and again["encoded_sentences"] == 0
    tasks.close_process_resources()
    with EmbeddedStore(spec["path"]) as s:
        assert s.counts()["documents"] == 6
        assert s.storage_info()["dead_rows"] == 0


def test_workers_leave_the_faiss_index_to_one_build_at_the_end(spec, fake_encoder):
    from sdr_search.workers.stores import open_store_spec

    tasks.index_batch(spec, [record(i) for i in range(5)], NO_CACHE)
    tasks.close_process_resources()
    assert not (Path(spec["path"]) / "faiss.index").exists()
    with open_store_spec(spec, bulk=True) as s:
        assert s.build_ann() == 20
    with EmbeddedStore(spec["path"]) as s:
        probe = s.get("d003").vectors.vectors[:1]
        assert s.sentence_knn(probe, 1).doc_ids == [["d003"]]
        assert s.storage_info()["faiss_rows_saved"] == 20


@pytest.mark.parametrize("error", [BackendUnavailableError("down"), sqlite3.OperationalError("disk I/O error"), ConnectionError("reset")])
def test_transient_errors_raise_for_a_retry(spec, fake_encoder, monkeypatch, error):
    store = tasks.process_store(spec)

    def put(items):
        raise error

    monkeypatch.setattr(store, "put", put)
    ledger = FakeLedger(Delivery(1))
    with pytest.raises(tasks.TransientError):
        tasks.index_batch(spec, [record(0), record(1)], NO_CACHE, ledger=ledger)
    assert tasks._stores == {}  # the store is reopened on the next attempt
    assert ledger.released and not ledger.finished  # a retry is not a worker death


def test_a_fatal_error_mid_write_reports_what_was_written(spec, fake_encoder, monkeypatch):
    from sdr_search.core.errors import InvalidDocumentError

    store = tasks.process_store(spec)
    put = store.put

    def half_broken(items):  # groups over two are poison (split); d003 breaks the store for good
        items = list(items)
        if len(items) > 2:
            raise InvalidDocumentError(items[0][0].id, "too many at once")
        if any(d.id == "d003" for d, _ in items):
            raise StoreError("the store broke")
        put(items)

    monkeypatch.setattr(store, "put", half_broken)
    result = tasks.index_batch(spec, [record(i) for i in range(4)], NO_CACHE)
    assert "the store broke" in result["fatal"]
    assert [o["status"] for o in result["outcomes"]] == ["indexed", "indexed", "failed", "failed"]
    assert result["encoded_sentences"] == 16


def test_a_store_of_another_model_is_fatal(spec, fake_encoder):
    from sdr_search.indexer.store import IndexMeta

    with EmbeddedStore(spec["path"]) as s:
        s.ensure_meta(IndexMeta("other", "other-tag", DIM, {}, {}))
    result = tasks.index_batch(spec, [record(0)], NO_CACHE)
    assert "other" in result["fatal"] and result["outcomes"][0]["status"] == "failed"


def test_a_missing_store_is_fatal(tmp_path, fake_encoder):
    result = tasks.index_batch(embedded_spec(tmp_path / "nowhere"), [record(0)], NO_CACHE)
    assert "no sdr store" in result["fatal"]


class FakeLedger:
    def __init__(self, delivery: Delivery) -> None:
        self.delivery = delivery
        self.doing_calls: list[str | None] = []
        self.finished = self.released = False

    def start(self) -> Delivery:
        return self.delivery

    def doing(self, doc_id):
        self.doing_calls.append(doc_id)

    def release(self):
        self.released = True

    def finish(self):
        self.finished = True


def test_redelivered_task_goes_one_by_one_and_fails_documents_that_killed_workers(spec, fake_encoder):
    ledger = FakeLedger(Delivery(3, frozenset({"d002"})))
    out = tasks.index_batch(spec, [record(i) for i in range(4)], NO_CACHE, ledger=ledger)["outcomes"]
    assert [o["status"] for o in out] == ["indexed", "indexed", "failed", "indexed"]
    assert "died twice" in out[2]["error"]
    assert fake_encoder.calls == [4, 4, 4]  # one document (4 sentences) at a time
    assert ledger.doing_calls == ["d000", "d001", "d003", None] and ledger.finished


def test_too_many_deliveries_fail_the_rest(spec, fake_encoder):
    out = tasks.index_batch(spec, [record(i) for i in range(3)], NO_CACHE, ledger=FakeLedger(Delivery(5)), max_deliveries=4)
    assert [o["status"] for o in out["outcomes"]] == ["failed"] * 3 and "delivered 4 times" in out["outcomes"][0]["error"]
    assert fake_encoder.calls == []


# -- statistics -------------------------------------------------------------------------------
@pytest.mark.parametrize("exact", [False, True])
def test_stats_blocks_match_the_single_process_refresh(tmp_path, fake_encoder, exact):
    from sdr_search.indexer.stats_job import refresh_stats as refresh_reference

    records = [record(i) for i in range(9)]
    specs = []
    for name in ("a", "b"):
        path = tmp_path / name
        with EmbeddedStore(path, create=True) as s:
            s.counts()
        specs.append(embedded_spec(path))
        tasks.index_batch(specs[-1], records, NO_CACHE)
    tasks.close_process_resources()
    tasks.refresh_stats(specs[0], exact=exact, sample_size=7, seed=3, block_docs=4)
    with EmbeddedStore(specs[1]["path"]) as s:
        refresh_reference(s, exact=exact, sample_size=7, seed=3)
    tasks.close_process_resources()
    with EmbeddedStore(specs[0]["path"]) as a, EmbeddedStore(specs[1]["path"]) as b:
        assert not a.stats_info().stale and a.stats_info().mode == ("exact" if exact else "sampled")
        for r in records:
            sa, sb = a.get(r["id"]).stats, b.get(r["id"]).stats
            np.testing.assert_allclose(sa.mu, sb.mu, rtol=0, atol=1e-9)
            np.testing.assert_allclose(sa.sigma, sb.sigma, rtol=0, atol=1e-9)


# -- dispatch and job accounting ----------------------------------------------------------------
def test_local_dispatcher_retries_transient_errors_then_reports_a_failure(monkeypatch):
    monkeypatch.setenv("SDR_MAX_RETRIES", "2")
    monkeypatch.setenv("SDR_RETRY_BACKOFF", "0.001")
    calls = []

    def flaky(*args):
        calls.append(args)
        raise tasks.TransientError("store away")

    d = LocalDispatcher({"t": flaky})
    d.submit("k", "t", (1,))
    [(key, result)] = d.poll()
    assert key == "k" and isinstance(result, TaskFailure) and "store away" in result.reason
    assert len(calls) == 3


class ScriptedDispatcher:
    """Answers each submitted batch with a scripted result."""

    capacity = 4

    def __init__(self, answer) -> None:
        self.answer = answer
        self.ready: list = []
        self.resends = 0

    @property
    def outstanding(self) -> int:
        return len(self.ready)

    def submit(self, key, name, args):
        self.ready.append((key, self.answer(args[1])))

    def poll(self):
        out, self.ready = self.ready, []
        return out


def _recs(ids):
    return [Record(f"f:{i}", {"id": i}, i, 1) for i in ids]


def test_job_counts_skipped_only_for_documents_there_before_the_run():
    def answer(records):
        outs = []
        for r in records:
            status = {"a": "skipped", "b": "skipped", "c": "indexed", "d": "failed"}[r["id"]]
            outs.append({"status": status, "id": r["id"], "sentences": 3, "error": "bad"})
        return {"outcomes": outs}

    job = IndexJob({"kind": "embedded", "path": "/x"}, {}, ScriptedDispatcher(answer), present={"a"})
    s = job.run([_recs(["a", "b"]), Rejected("f:9", None, "invalid JSON"), _recs(["c", "d"])])
    # "b" was skipped by a worker but not there before the run: an earlier copy of its batch wrote it.
    assert (s.indexed, s.skipped, s.failed, s.sentences) == (2, 1, 2, 6)
    assert [f["where"] for f in s.failures] == ["f:9", "f:d"]


def test_job_failure_results_and_fatal_errors():
    job = IndexJob({}, {}, ScriptedDispatcher(lambda recs: TaskFailure("worker exploded")))
    s = job.run([_recs(["a", "b"])])
    assert s.failed == 2 and s.failures[0]["error"] == "worker exploded"
    job = IndexJob({}, {}, ScriptedDispatcher(lambda recs: {"fatal": "wrong model", "outcomes": []}))
    with pytest.raises(SDRError, match="wrong model"):
        job.run([_recs(["a"])])


def test_job_timeout_is_resumable_error():
    class Never(ScriptedDispatcher):
        def poll(self):
            return []

    job = IndexJob({}, {}, Never(lambda r: None))
    with pytest.raises(JobTimeout, match="resume"):
        job.run([_recs(["a"])], timeout=0.0)


def test_reindex_in_process_resumes_into_the_same_target(tmp_path, fake_encoder, monkeypatch, capsys):
    from sdr_search.cli import main

    for var in ("SDR_BROKER_URL", "REDIS_URL"):
        monkeypatch.delenv(var, raising=False)
    data = tmp_path / "docs.jsonl"
    data.write_text("".join(json.dumps(record(i)) + "\n" for i in range(10)))
    live = tmp_path / "live"
    args = ["reindex", "--store", str(live), str(data), "--no-progress", "--no-cache", "--batch-docs", "3"]
    assert main([*args, "--timeout", "0"]) == 1  # interrupted after the first batch
    first = json.loads(capsys.readouterr().out)
    assert first["complete"] is False and first["indexed"] == 3 and not live.exists()
    state = json.loads((tmp_path / ".live.reindex.json").read_text())
    assert main(args) == 0
    second = json.loads(capsys.readouterr().out)
    assert second["resumed"] and second["index"] == first["index"] == Path(state["target"]).name
    assert (second["indexed"], second["skipped"], second["failed"]) == (7, 3, 0)
    assert os.path.realpath(live) == state["target"] and not (tmp_path / ".live.reindex.json").exists()
    # A state file left by a run that switched and died before removing it never resumes into the live index.
    (tmp_path / ".live.reindex.json").write_text(json.dumps(state))
    assert main(args) == 0
    third = json.loads(capsys.readouterr().out)
    assert not third["resumed"] and third["index"] != second["index"] and third["previous"] == state["target"]


# -- switching and state ----------------------------------------------------------------------
def test_switch_symlink_from_nothing_from_a_link_and_from_a_plain_directory(tmp_path):
    a, b, c = (tmp_path / n for n in ("live-1", "live-2", "live-3"))
    for d in (a, b, c):
        d.mkdir()
        (d / "name").write_text(d.name)
    live = tmp_path / "live"
    assert switch_symlink(live, a) is None and (live / "name").read_text() == "live-1"
    assert os.readlink(live) == "live-1"  # relative: the tree can move
    assert switch_symlink(live, b) == a and (live / "name").read_text() == "live-2"
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "name").write_text("plain")
    kept = switch_symlink(plain, c)
    assert plain.is_symlink() and (plain / "name").read_text() == "live-3"
    assert kept.name.startswith("plain-") and kept.name.endswith("-orig") and (kept / "name").read_text() == "plain"
    assert [p.name for p in tmp_path.iterdir() if ".switch-" in p.name] == []


def test_a_new_target_never_reuses_an_existing_name(tmp_path):
    from sdr_search.workers.plan import _unused_name

    taken = {timestamped_name("live"), timestamped_name("live") + "-2"}
    name = _unused_name("live", lambda n: n in taken)
    assert name not in taken and name.startswith("live-")
    (tmp_path / "a").mkdir()
    switch_symlink(tmp_path / "live", tmp_path / "a")
    with pytest.raises(StoreError, match="new directory"):
        switch_symlink(tmp_path / "live", tmp_path / "a")


def test_state_file_round_trip_and_errors(tmp_path):
    st = ReindexState(target="/x/live-1", live="/x/live", kind="embedded", started_at="t", inputs=["/in"])
    path = tmp_path / ".live.reindex.json"
    st.save(path)
    assert ReindexState.load(path) == st
    assert ReindexState.load(tmp_path / "missing.json") is None
    path.write_text("{nope")
    with pytest.raises(StoreError, match="delete it"):
        ReindexState.load(path)
    assert timestamped_name("sdr").startswith("sdr-") and timestamped_name("sdr") == timestamped_name("sdr").lower()


def test_reader_opened_by_the_link_name_after_a_switch(tmp_path, fake_encoder):
    """A reader opened through the live link before a switch reads the old store's vectors (not
    the old catalogue over the new vector file): EmbeddedStore resolves its path once."""
    live = tmp_path / "live"
    dirs = []
    for name, prefix in (("live-1", "a"), ("live-2", "b")):
        path = tmp_path / name
        with EmbeddedStore(path, create=True) as s:
            s.counts()
        tasks.index_batch(embedded_spec(path), [record(i, prefix=prefix) for i in range(3)], NO_CACHE)
        dirs.append(path)
    tasks.close_process_resources()
    switch_symlink(live, dirs[0])
    reader = EmbeddedStore(live)
    assert reader.counts()["documents"] == 3  # opened: catalogue of live-1; vectors not read yet
    switch_symlink(live, dirs[1])
    with EmbeddedStore(dirs[0]) as direct:
        expected = direct.get("a000").vectors.vectors
    try:
        np.testing.assert_array_equal(reader.get("a000").vectors.vectors, expected)
    finally:
        reader.close()
