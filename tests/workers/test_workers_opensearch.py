"""Integration tests of ``sdr reindex --opensearch`` with REAL Celery workers over a REAL Redis into a
REAL OpenSearch node, with the alias swap:

(a) a worker SIGKILLed mid-batch: a new worker finishes, every document is indexed exactly once in
    the new generation, the alias moves to it alone, the old generation is kept as it was;
(b) the node restarted mid-run while one worker is SIGKILLed mid-batch and another keeps writing:
    the writes ride the outage out (store retries, task retries, re-sends), same end state;
(c) the node restarted as the last batch is written, while the command itself computes statistics
    and moves the alias: the command waits for the node, same end state;
(d) every read error during a restart is one the store and the workers retry (the moment where
    the node answers but its shards are not started yet included).

Nodes: (a) uses the shared node (``OPENSEARCH_URL``, else ``scripts/opensearch-node.sh``), which
is never restarted. (b)-(d) restart a node, so they use a node this module owns:
``scripts/opensearch-node.sh`` on port ``SDR_TEST_NODE_PORT`` (default: the first free one from 9260), wiped (a leftover of
an interrupted run) and started here, stopped and wiped at the end. No mocks, no skips.

Redis: ``REDIS_URL`` when set, else a private ``redis-server`` (the ``redis_url`` fixture of
conftest.py; processes driven through worker_harness.py). The corpus is synthetic (a few seconds of encoding).
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
import uuid
import warnings
from pathlib import Path

import numpy as np
import pytest

from conftest import owned_node_port
from worker_harness import Reindex, Worker, base_env, corpus, wait_for, write_jsonl

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
NODE_SCRIPT = REPO / "scripts" / "opensearch-node.sh"
OWNED_NODE_PORT = owned_node_port("SDR_TEST_NODE_PORT", 9260)
N_NEW = 40  # documents of the new generation
N_OLD = 8  # documents of the generation it replaces (the first N_OLD of the new one, same content)


# =============================================================================================
# helpers
# =============================================================================================
def _client(url: str):
    from opensearchpy import OpenSearch

    return OpenSearch([url], timeout=60, max_retries=0)


def _node(action: str, port: int, timeout: float = 300) -> str:
    env = {**os.environ, "SDR_NODE_PORT": str(port), "SDR_NODE_HEAP": os.environ.get("SDR_TEST_NODE_HEAP", "512m")}
    r = subprocess.run([str(NODE_SCRIPT), action], env=env, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"opensearch-node.sh {action} (port {port}) failed:\n{r.stderr[-3000:]}")
    return r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ""


def _delete_indices(url: str, pattern: str) -> None:
    from opensearchpy import exceptions as ox

    client = _client(url)
    try:
        client.indices.delete(index=pattern, params={"expand_wildcards": "all", "ignore_unavailable": "true"})
    except ox.ConnectionError as e:  # cleanup must not hide the test's own result; the node is wiped at the end
        warnings.warn(f"could not delete test indices {pattern}: {e}", stacklevel=2)
    finally:
        client.close()


def _env(redis_url: str, tmp_path: Path, **extra: str) -> dict[str, str]:
    queue = f"sdr-test-{uuid.uuid4().hex[:8]}"
    # Own cache directory: the reindex state file of an OpenSearch target lives there.
    return base_env(redis_url, queue, SDR_CACHE_DIR=str(tmp_path / "cache"), **extra)


def _reindex_args(url: str, alias: str, data: Path, *, batch_docs: int) -> list[str]:
    return ["--opensearch", url, "--index", alias, str(data), "--batch-docs", str(batch_docs), "--timeout", "240"]


def _state_files(env: dict[str, str]) -> list[Path]:
    return sorted((Path(env["SDR_CACHE_DIR"]) / "reindex").glob("*.json"))


def _build_old_generation(url: str, alias: str, env: dict[str, str], tmp_path: Path) -> tuple[str, list[dict]]:
    """The generation a reindex replaces: ``N_OLD`` documents, built by ``sdr reindex`` through
    the running workers. Returns its concrete index and its records."""
    old = corpus(N_NEW)[:N_OLD]
    out = Reindex(env, _reindex_args(url, alias, write_jsonl(tmp_path / "old.jsonl", old), batch_docs=4),
                  tmp_path / "reindex-old.log").result(timeout=180)
    assert out["complete"] and out["swapped"] and out["previous"] is None
    assert (out["indexed"], out["skipped"], out["failed"]) == (N_OLD, 0, 0)
    assert out["segments"] == 1 and out["merge_seconds"] >= 0
    assert out["index"].startswith(f"{alias}-") and out["live"] == alias
    assert _aliased(url, alias) == {out["index"]}
    assert not _state_files(env)
    return out["index"], old


def _aliased(url: str, alias: str) -> set[str]:
    """The concrete indices ``alias`` points to."""
    client = _client(url)
    try:
        if not client.indices.exists_alias(name=alias):
            return set()
        return set(client.indices.get_alias(name=alias))
    finally:
        client.close()


def _target_of_running_job(env: dict[str, str]) -> str:
    (state,) = _state_files(env)
    return json.loads(state.read_text())["target"]


def check_generation(url: str, alias: str, index: str, records: list[dict], encoder) -> None:
    """``index`` holds every record exactly once (ids, counts, sentences, vectors = a fresh
    encoding, statistics complete) and ``alias`` names ``index`` alone."""
    from sdr_search.core.documents import parse_record

    from sdr_search.indexer.opensearch import OpenSearchStore

    assert _aliased(url, alias) == {index}
    docs = {r["id"]: parse_record(r) for r in records}
    client = _client(url)
    try:
        client.indices.refresh(index=index)
        assert client.count(index=index)["count"] == len(records)  # top-level documents
        # Each doc_id value held by exactly one top-level document.
        agg = client.search(index=index, body={"size": 0, "aggs": {"ids": {"terms": {
            "field": "doc_id", "size": 10 * len(records), "min_doc_count": 2}}}})
        assert agg["aggregations"]["ids"]["buckets"] == []
    finally:
        client.close()
    with OpenSearchStore(url, index=alias) as store:
        assert store.index_name == index
        ids = list(store.iter_ids())
        assert len(ids) == len(set(ids)) and sorted(ids) == sorted(docs)
        counts = store.counts()
        assert counts["documents"] == len(records)
        assert counts["sentences"] == sum(d.n_sentences for d in docs.values())
        info = store.stats_info()
        assert not info.stale and info.docs_without_stats == 0
        segments, shards = store.segments()  # merged before the alias moved (SDR_OPENSEARCH_REINDEX_MAX_SEGMENTS=1)
        assert segments == shards
        for doc_id in ids[:: max(1, len(ids) // 6)]:
            stored = store.get(doc_id)
            np.testing.assert_allclose(stored.vectors.vectors, encoder.encode(docs[doc_id].sentences), atol=2e-5)


def check_old_generation_kept(url: str, alias: str, old_index: str, old_records: list[dict]) -> None:
    """``sdr reindex`` keeps the previous generation (readers may still use it), unaliased and
    unchanged; deleting it is left to the operator."""
    from sdr_search.indexer.opensearch import OpenSearchStore

    assert old_index not in _aliased(url, alias)
    with OpenSearchStore(url, index=old_index) as old:
        assert sorted(old.iter_ids()) == sorted(r["id"] for r in old_records)
        assert old.counts()["documents"] == len(old_records)


# =============================================================================================
# fixtures
# =============================================================================================
@pytest.fixture(scope="module")
def owned_node():
    """A node this module starts, restarts and stops, on its own port: never the shared one. A
    leftover of an interrupted run on that port is stopped and its data deleted first (``wipe``);
    the node is wiped again at the end."""
    try:
        _node("wipe", OWNED_NODE_PORT)
        url = _node("start", OWNED_NODE_PORT, timeout=600)
    except RuntimeError as e:  # e.g. the port answers, but not with a node of the script
        pytest.fail(str(e), pytrace=False)
    try:
        yield url
    finally:
        _node("wipe", OWNED_NODE_PORT)


@pytest.fixture()
def owned_alias(owned_node):
    name = f"sdr-owned-{uuid.uuid4().hex[:10]}"
    yield name
    _delete_indices(owned_node, f"{name}*")


# =============================================================================================
# tests
# =============================================================================================
def test_worker_killed_mid_batch_reindex_into_opensearch_exactly_once(
        opensearch_url, os_index, redis_url, tmp_path, workers_to_stop, encoder):
    from sdr_search.indexer.opensearch import OpenSearchStore

    url, alias = opensearch_url, os_index("sdr-rx")
    env = _env(redis_url, tmp_path, SDR_RESEND_AFTER="6", SDR_VISIBILITY_TIMEOUT="600")
    w1 = Worker(env, tmp_path / "w1.log", f"w1-{env['SDR_QUEUE']}")
    workers_to_stop.append(w1)
    w1.wait_ready()
    old_index, old_records = _build_old_generation(url, alias, env, tmp_path)

    records = corpus(N_NEW)  # its first N_OLD documents are in the old generation, unchanged
    data = write_jsonl(tmp_path / "new.jsonl", records)
    before = w1.count("received")
    job = Reindex(env, _reindex_args(url, alias, data, batch_docs=5), tmp_path / "reindex.log")
    wait_for(lambda: w1.count("received") >= before + 2, 90, "the worker to start its second batch",
             poll=0.02)
    w1.kill()
    assert w1.count("succeeded") == w1.count("received") - 1, "the worker was not killed mid-batch"
    target = _target_of_running_job(env)
    assert target != old_index and target.startswith(f"{alias}-")
    with OpenSearchStore(url, index=target) as partial:
        assert 0 < partial.counts()["documents"] < N_NEW
    assert _aliased(url, alias) == {old_index}  # readers still get the old generation, whole

    w2 = Worker(env, tmp_path / "w2.log", f"w2-{env['SDR_QUEUE']}")
    workers_to_stop.append(w2)
    out = job.result(timeout=240)
    assert out["complete"] and out["swapped"] and job.proc.returncode == 0
    # Documents already in the OLD generation are indexed again into the new one, not "skipped".
    assert (out["indexed"], out["skipped"], out["failed"]) == (N_NEW, 0, 0)
    assert out["resends"] >= 1  # the killed batch was sent again
    assert (out["index"], out["previous"], out["documents"]["documents"]) == (target, old_index, N_NEW)
    assert not _state_files(env)  # removed after the switch
    check_generation(url, alias, target, records, encoder)
    check_old_generation_kept(url, alias, old_index, old_records)


def test_node_restart_and_worker_kill_mid_run_reindex_exactly_once(
        owned_node, owned_alias, redis_url, tmp_path, workers_to_stop, encoder):
    url, alias = owned_node, owned_alias
    env = _env(redis_url, tmp_path, SDR_RESEND_AFTER="8", SDR_VISIBILITY_TIMEOUT="600")
    w1 = Worker(env, tmp_path / "w1.log", f"w1-{env['SDR_QUEUE']}")
    w2 = Worker(env, tmp_path / "w2.log", f"w2-{env['SDR_QUEUE']}")
    workers_to_stop.extend([w1, w2])
    w1.wait_ready()
    w2.wait_ready()
    old_index, old_records = _build_old_generation(url, alias, env, tmp_path)

    records = corpus(42, seed=4)  # ids d000..d041: the old generation's ids, other content
    data = write_jsonl(tmp_path / "new.jsonl", records)
    before = w1.count("received")
    job = Reindex(env, _reindex_args(url, alias, data, batch_docs=6), tmp_path / "reindex.log")
    wait_for(lambda: w1.count("received") >= before + 2, 90, "worker 1 to start its second batch",
             poll=0.02)
    w1.kill()
    assert w1.count("succeeded") == w1.count("received") - 1, "worker 1 was not killed mid-batch"
    written_before = w2.count("succeeded")
    t0 = time.monotonic()
    _node("restart", OWNED_NODE_PORT)  # returns once the node is back (yellow); w2 keeps writing meanwhile
    outage = time.monotonic() - t0
    out = job.result(timeout=240)
    assert out["complete"] and out["swapped"] and job.proc.returncode == 0, out
    assert (out["indexed"], out["skipped"], out["failed"]) == (42, 0, 0)
    assert out["resends"] >= 1
    assert out["previous"] == old_index and out["documents"]["documents"] == 42
    # The restart happened mid-run: worker 2 met the outage and finished batches after it.
    log2 = w2.text()
    assert "cannot be reached" in log2, f"worker 2 never met the outage ({outage:.0f} s)"
    assert w2.count("succeeded") > written_before
    assert not _state_files(env)
    check_generation(url, alias, out["index"], records, encoder)
    check_old_generation_kept(url, alias, old_index, old_records)


def test_node_restart_in_the_final_phase_reindex_completes_exactly_once(
        owned_node, owned_alias, redis_url, tmp_path, workers_to_stop, encoder):
    """The node restarts the moment the last batch is written, while ``sdr reindex`` itself reads
    the new index for statistics, writes them and moves the alias: it waits for the node and ends
    with the same state as without the restart."""
    url, alias = owned_node, owned_alias
    env = _env(redis_url, tmp_path)
    w = Worker(env, tmp_path / "w.log", f"w-{env['SDR_QUEUE']}")
    workers_to_stop.append(w)
    w.wait_ready()
    records = corpus(12, prefix="f", seed=6)
    data = write_jsonl(tmp_path / "docs.jsonl", records)
    job = Reindex(env, _reindex_args(url, alias, data, batch_docs=4), tmp_path / "reindex.log")
    wait_for(lambda: w.count("succeeded") >= 3, 120, "the last batch to be written", poll=0.01)
    _node("restart", OWNED_NODE_PORT)
    out = job.result(timeout=240)
    assert out["complete"] and out["swapped"] and job.proc.returncode == 0, out
    assert (out["indexed"], out["skipped"], out["failed"], out["previous"]) == (12, 0, 0, None)
    assert "cannot be reached" in (tmp_path / "reindex.log").read_text(), "the command never met the restart"
    assert not _state_files(env)
    check_generation(url, alias, out["index"], records, encoder)


def test_every_read_error_during_a_node_restart_is_transient(owned_node, owned_alias, encoder):
    """Reads sent all through a restart, each without retries, fail only with errors the store and
    the workers retry (:class:`BackendUnavailableError`, classified ``transient``), never with one
    a worker takes as fatal; the moment where the node answers but the index's shard is not
    started yet (``_mget`` items answer ``no_shard_available_action_exception``) included."""
    from sdr_search.core.documents import parse_record
    from sdr_search.core.embed import embed_documents
    from sdr_search.core.errors import SDRError
    from sdr_search.core.sentences import default_splitter
    from sdr_search.core.settings import SegmentationSettings

    from sdr_search.indexer.opensearch import OpenSearchSettings, OpenSearchStore
    from sdr_search.indexer.provenance import index_meta, segmentation_record
    from sdr_search.workers.tasks import classify

    url, index = owned_node, owned_alias
    docs = [parse_record(r) for r in corpus(6, prefix="r", seed=5)]
    ids = sorted(d.id for d in docs)
    with OpenSearchStore(url, index=index) as store:
        store.ensure_meta(index_meta(encoder, segmentation_record(SegmentationSettings(), default_splitter().source)))
        store.put(list(embed_documents(docs, encoder, cache=None, chunk_docs=len(docs))))
    no_retries = OpenSearchSettings(max_retries=0, timeout=10)
    reads = {
        "content_keys": lambda s: sorted(s.content_keys(ids)) == ids,
        "get": lambda s: s.get(ids[0]).document.id == ids[0],
        "counts": lambda s: s.counts()["documents"] == len(ids),
        "iter_ids": lambda s: sorted(s.iter_ids()) == ids,
    }
    stop = threading.Event()
    seen: dict[str, list[str]] = {"ok": [], "transient": [], "other": []}

    def read(name: str) -> None:
        with OpenSearchStore(url, index=index, settings=no_retries) as s:
            while not stop.is_set():
                try:
                    right = reads[name](s)
                    seen["ok" if right else "other"].append(f"{name}: {'ok' if right else 'wrong answer'}")
                except SDRError as e:
                    seen["transient" if classify(e) == "transient" else "other"].append(
                        f"{name}: {type(e).__name__}: {e}")
                time.sleep(0.02)

    threads = [threading.Thread(target=read, args=(name,)) for name in reads]
    for t in threads:
        t.start()
    try:
        time.sleep(1.0)
        _node("restart", OWNED_NODE_PORT)
        n_ok = len(seen["ok"])
        wait_for(lambda: len(seen["ok"]) >= n_ok + 2 * len(reads), 30, "reads to succeed after the restart")
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    assert not seen["other"], seen["other"][:3]
    assert seen["transient"], "no read met the restart"
