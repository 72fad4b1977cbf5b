"""Faults of a real OpenSearch node and how the OpenSearch store meets them.

(a) the node stopped in the middle of a ``put()``: a clear :class:`BackendUnavailableError` naming
    the URL once the retries are spent; the same ``put()`` run again while the node starts up
    completes with every document exactly once. A node restarted during a ``put()`` is ridden out
    with the default retries.
(b) overload: a write thread pool with a queue of 1 and several ``put()`` at once answer 429; the
    store backs off and retries (the node's ``rejected`` counter and the store's retry warnings
    prove the 429s happened) and nothing is lost or doubled. The same for reads: a search pool of
    2 threads with a queue of 4 rejects searches inside several ``_msearch`` at once (each answer
    429 in a 200 response); the store sends the rejected searches again with the same backoff and
    every reader gets the answer a lone reader gets.
(c) a document whose ``_bulk`` action is over ``http.max_content_length`` (2 MB here) is refused by
    name and the rest of the batch is written; a document just under the limit is written; without
    the refusal the node answers 413 and the whole batch is lost (the defect this guards against).
(d) a k-NN query right after documents were replaced and deleted returns ``k`` live documents,
    never a deleted one (measured on the Lucene engine: no shortfall, so the store does not
    over-fetch; see the test).
(f) a hung node (SIGSTOP): a read inside a request's deadline gives up at the deadline with
    :class:`DeadlineExceededError` (not after the store's 30 s timeout), the node is not marked dead
    for it, and the health check lists the node as not answering within its timeout.
(e) with 3 shards, the OpenSearch lexical scores equal the embedded store's BM25 (up to
    OpenSearch's (k1 + 1) factor) because the store searches ``dfs_query_then_fetch``; the same
    query with ``query_then_fetch`` scores with per-shard statistics and differs.

Nodes: (a)-(c) and (f) stop, restart, freeze or overload a node, so they use a node this module owns:
``scripts/opensearch-node.sh`` on port ``SDR_TEST_FAULT_NODE_PORT`` (default: the first free one from 9270) with
``-E thread_pool.write.queue_size=1 -E thread_pool.search.size=2 -E thread_pool.search.queue_size=4
-E http.max_content_length=2mb``, wiped before it starts (a
leftover of an interrupted run on that port) and stopped and wiped at the end. (d) and (e) only
read and write their own indices, on the shared node (the ``opensearch_url`` fixture), which is
never stopped here. No mocks, no skips.
"""

from __future__ import annotations

import logging
import os
import signal
import tempfile
import threading
import time
import uuid
from pathlib import Path

import numpy as np
import pytest
from opensearchpy import OpenSearch

from factories import AS_GIVEN, DIM, META, unit
from sdr_search.indexer.embedded import EmbeddedStore
from sdr_search.indexer.opensearch import OpenSearchSettings, OpenSearchStore
from sdr_search.indexer.opensearch.requests import build_bulk_actions, build_terms_query, bulk_lines
from sdr_search.indexer.store import IndexMeta
from conftest import OwnedNode, owned_node_port
from sdr_search.core.documents import Document, parse_record
from sdr_search.core import deadline
from sdr_search.core.errors import (BackendUnavailableError, BulkWriteError, DeadlineExceededError,
                                    DocumentNotFoundError, StoreError)
from sdr_search.core.lexical import analyze, query_terms
from sdr_search.core.vectors import DocVectors

pytestmark = pytest.mark.integration

FAULT_NODE_PORT = owned_node_port("SDR_TEST_FAULT_NODE_PORT", 9270)
MAX_CONTENT = 2 * 1024 * 1024  # the node's http.max_content_length ("2mb" = 2 MiB)
FAULT_NODE_ARGS = ("-E thread_pool.write.queue_size=1 -E thread_pool.search.size=2 -E thread_pool.search.queue_size=4 "
                   "-E http.max_content_length=2mb")

BIG_DIM = 384  # (c): about 10 kB of _bulk action per sentence (JSON floats plus the base64 copy)
BIG_META = IndexMeta("model-b", "tag-b", BIG_DIM, {"paragraph_unit": "paragraph"}, {"numpy": np.__version__})
STORE_LOGGER = "sdr_search.indexer.opensearch.transport"
BULK_LOGGER = "sdr_search.indexer.opensearch.bulk"


@pytest.fixture(scope="module")
def fault_node():
    """The module's own node (see the module docstring); its settings are checked, not assumed."""
    node = OwnedNode(FAULT_NODE_PORT, FAULT_NODE_ARGS)
    node.wipe()  # a node this script left on the port (an interrupted run): stopped, data deleted
    if node.answers():
        pytest.fail(f"port {FAULT_NODE_PORT} answers but not with a node of opensearch-node.sh; set "
                    "SDR_TEST_FAULT_NODE_PORT to a free port", pytrace=False)
    node.start()
    try:
        client = _client(node.url)
        try:
            (settings,) = client.nodes.info(metric="settings", params={"flat_settings": "true"})["nodes"].values()
        finally:
            client.close()
        got = {k: settings["settings"].get(k) for k in ("thread_pool.write.queue_size", "thread_pool.search.size",
                                                        "thread_pool.search.queue_size", "http.max_content_length")}
        assert got == {"thread_pool.write.queue_size": "1", "thread_pool.search.size": "2",
                       "thread_pool.search.queue_size": "4", "http.max_content_length": "2mb"}, got
        yield node
    finally:
        node.wipe()


# =============================================================================================
# helpers
# =============================================================================================
def _client(url: str) -> OpenSearch:
    return OpenSearch([url], timeout=30, max_retries=0)


def _item(doc_id: str, rng: np.random.Generator, *, n_sents: int = 3, dim: int = DIM,
          text: str | None = None) -> tuple[Document, DocVectors]:
    """One document of one paragraph (``n_sents`` sentences, or the sentences of ``text``) with
    random unit vectors."""
    paragraph = text if text is not None else " ".join(f"Sentence {s} of {doc_id} is here." for s in range(n_sents))
    doc = parse_record({"id": doc_id, "paragraphs": [paragraph]}, settings=AS_GIVEN)
    n = doc.n_sentences
    return doc, DocVectors(unit(rng, n, dim), np.asarray([0, n]))


def _items(n: int, prefix: str, seed: int = 0, **kw) -> list[tuple[Document, DocVectors]]:
    rng = np.random.default_rng(seed)
    return [_item(f"{prefix}{i:03d}", rng, **kw) for i in range(n)]


def _name(prefix: str) -> str:
    return f"sdr-faults-{prefix}-{uuid.uuid4().hex[:8]}"


def _open(url: str, name: str, meta: IndexMeta = META, **settings) -> OpenSearchStore:
    store = OpenSearchStore(url, index=name, settings=OpenSearchSettings(**settings))
    store.ensure_meta(meta)
    return store


def _visible(url: str, index: str) -> int:
    """Documents a search sees now (-1 when the node does not answer)."""
    client = _client(url)
    try:
        return int(client.count(index=index)["count"])
    except Exception:  # noqa: BLE001 - any failure means "not answering" here
        return -1
    finally:
        client.close()


def _assert_each_once(url: str, store: OpenSearchStore, expected: list[str]) -> None:
    """Every expected id is stored exactly once and nothing else is (read after a refresh)."""
    client = _client(url)
    try:
        client.indices.refresh(index=store.index_name)
        count = int(client.count(index=store.index_name)["count"])
    finally:
        client.close()
    ids = list(store.iter_ids())
    assert count == len(expected)
    assert len(ids) == len(set(ids)) == len(expected)
    assert sorted(ids) == sorted(expected)


def _messages(caplog, logger: str, needle: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == logger and needle in r.getMessage()]


class AfterProgress(threading.Thread):
    """Runs ``action`` once ``at_least`` documents of ``index`` are visible (the write is under
    way), and records what it saw and when."""

    def __init__(self, url: str, index: str, at_least: int, action, timeout: float = 60) -> None:
        super().__init__(daemon=True)
        self.url, self.index, self.at_least, self.action, self.timeout = url, index, at_least, action, timeout
        self.seen = 0
        self.error: BaseException | None = None
        self.acted_at: float | None = None
        self.done_at: float | None = None

    def run(self) -> None:
        try:
            deadline = time.monotonic() + self.timeout
            while time.monotonic() < deadline:
                self.seen = _visible(self.url, self.index)
                if self.seen >= self.at_least:
                    break
                time.sleep(0.05)
            else:
                raise AssertionError(f"the write never got under way ({self.seen} documents visible)")
            self.acted_at = time.monotonic()
            self.action()
            self.done_at = time.monotonic()
        except BaseException as e:  # noqa: BLE001 - re-raised by the test
            self.error = e

    def result(self) -> None:
        self.join(timeout=600)
        if self.error is not None:
            raise self.error


@pytest.fixture()
def fault_store(fault_node):
    """``make(prefix, meta, **settings)`` -> a store on the owned node; indices dropped afterwards."""
    made: list[OpenSearchStore] = []

    def make(prefix: str, meta: IndexMeta = META, **settings) -> OpenSearchStore:
        store = _open(fault_node.url, _name(prefix), meta, **settings)
        made.append(store)
        return store

    yield make
    client = _client(fault_node.url)
    try:
        for store in made:
            store.close()
            client.indices.delete(index=f"{store.index}*", params={"ignore_unavailable": "true"})
    finally:
        client.close()


# =============================================================================================
# (a) the node stops or restarts during a put
# =============================================================================================
N_OUTAGE = 40  # documents of the interrupted put: 20 requests of 2, each waiting for a refresh


def test_node_stopped_mid_put_fails_naming_the_url_and_a_rerun_writes_each_document_once(
        fault_node, fault_store, caplog):
    caplog.set_level(logging.WARNING, logger="sdr_search.indexer.opensearch")
    items = _items(N_OUTAGE, "stop-")
    ids = [d.id for d, _ in items]
    # Two quick retries, so the outage is reported within seconds; 2 documents per request (each
    # waits for a refresh), so the put is still writing when the node goes down.
    store = fault_store("stop", bulk_chunk_docs=2, max_retries=2, retry_backoff=0.2, retry_backoff_max=0.5)
    stopper = AfterProgress(fault_node.url, store.index_name, 6, fault_node.stop)
    stopper.start()
    with pytest.raises(BackendUnavailableError) as err:
        store.put(items)
    stopper.result()
    assert stopper.seen >= 6  # the node went down in the middle of the put
    message = str(err.value)
    assert fault_node.url in message and "writing documents" in message
    assert err.value.__cause__ is not None  # the client's error, chained
    retries = _messages(caplog, STORE_LOGGER, "cannot be reached")
    assert any("retry 2 of 2" in m for m in retries) and not any("retry 3 of" in m for m in retries)

    # The same put again, by a new store with the default retries, while the node starts up: its
    # first request (the index mapping) and the writes wait for the node; nothing is lost or doubled.
    starter = threading.Thread(target=fault_node.start, daemon=True)
    starter.start()
    try:
        again = OpenSearchStore(fault_node.url, index=store.index, settings=OpenSearchSettings())
        try:
            again.put(items)
            _assert_each_once(fault_node.url, again, ids)
            stored = again.fetch([ids[0], ids[-1]])
            np.testing.assert_array_equal(stored.vectors, np.concatenate([items[0][1].vectors, items[-1][1].vectors]))
        finally:
            again.close()
    finally:
        starter.join(timeout=300)
    assert fault_node.answers()


def test_node_restarted_during_put_is_ridden_out_with_default_retries(fault_node, fault_store, caplog):
    caplog.set_level(logging.WARNING, logger="sdr_search.indexer.opensearch")
    items = _items(N_OUTAGE, "restart-", seed=1)
    defaults = OpenSearchSettings()
    store = fault_store("restart", bulk_chunk_docs=2)  # default max_retries and backoff
    assert (store.settings.max_retries, store.settings.retry_backoff) == (defaults.max_retries, defaults.retry_backoff)
    restarter = AfterProgress(fault_node.url, store.index_name, 6, fault_node.restart)
    restarter.start()
    t0 = time.monotonic()
    store.put(items)  # no exception: the outage is ridden out
    finished = time.monotonic()
    restarter.result()
    assert finished > restarter.done_at > restarter.acted_at > t0  # the put outlived the restart
    assert _messages(caplog, STORE_LOGGER, "cannot be reached")  # the outage was seen and retried
    _assert_each_once(fault_node.url, store, [d.id for d, _ in items])


# =============================================================================================
# (b) overload: 429s from a write queue of 1
# =============================================================================================
def _rejections(url: str, pool: str) -> int:
    """How many tasks the node's thread pool ``pool`` (write, search) has rejected so far."""
    client = _client(url)
    try:
        stats = client.nodes.stats(metric="thread_pool")["nodes"]
    finally:
        client.close()
    return sum(int(n["thread_pool"][pool]["rejected"]) for n in stats.values())


def _in_threads(work: list) -> list[BaseException]:
    """Runs each callable of ``work`` on a thread of its own, all at once; the errors they raised."""
    errors: list[BaseException] = []

    def run(fn) -> None:
        try:
            fn()
        except BaseException as e:  # noqa: BLE001 - reported by the test
            errors.append(e)

    workers = [threading.Thread(target=run, args=(fn,)) for fn in work]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=300)
    return errors


def test_concurrent_puts_answered_429_are_retried_and_nothing_is_lost(fault_node, fault_store, caplog):
    caplog.set_level(logging.WARNING, logger="sdr_search.indexer.opensearch")
    threads, per_thread = 8, 20
    # One document per request and no refresh wait: many small requests at once on 2 write
    # threads with a queue of 1. Retries are quick and plenty, so the test does not wait long.
    settings = dict(bulk_chunk_docs=1, refresh="false", max_retries=10, retry_backoff=0.05, retry_backoff_max=0.5)
    main = fault_store("overload", **settings)
    batches = [_items(per_thread, f"t{t}-", seed=t) for t in range(threads)]

    def write(batch) -> None:
        store = OpenSearchStore(fault_node.url, index=main.index, settings=OpenSearchSettings(**settings))
        try:
            store.put(batch)
        finally:
            store.close()

    rejected_before = _rejections(fault_node.url, "write")
    errors = _in_threads([lambda b=b: write(b) for b in batches])
    rejected = _rejections(fault_node.url, "write") - rejected_before

    assert not errors, errors
    assert rejected > 0  # the node really rejected writes
    retried = _messages(caplog, BULK_LOGGER, "rejected with 429") + _messages(caplog, STORE_LOGGER, "(429)")
    assert retried  # and the store saw them and retried
    _assert_each_once(fault_node.url, main, [d.id for b in batches for d, _ in b])


def test_concurrent_msearch_answers_rejected_with_429_are_retried(fault_node, fault_store, caplog):
    """Every ``_msearch`` of the store (here the k-NN of many query rows, one search per row) raises an answer's
    error inside the retried call: the searches rejected with 429 are sent again with backoff, as a request
    answered 429 is, instead of failing the reader. Before, only the request's own status was retried (this
    test failed: a reader raised OverloadedError)."""
    caplog.set_level(logging.WARNING, logger="sdr_search.indexer.opensearch")
    settings = dict(refresh="wait_for", max_retries=30, retry_backoff=0.05, retry_backoff_max=1.0, msearch_batch=64)
    main = fault_store("reads", **settings)
    main.put(_items(60, "r-", seed=7, n_sents=4))
    queries = unit(np.random.default_rng(11), 64)
    alone = main.sentence_knn(queries, k=5)
    threads, rounds = 4, 2
    answers: list = []

    def read() -> None:
        store = OpenSearchStore(fault_node.url, index=main.index, settings=OpenSearchSettings(**settings))
        try:
            for _ in range(rounds):
                answers.append(store.sentence_knn(queries, k=5))
        finally:
            store.close()

    rejected_before = _rejections(fault_node.url, "search")
    errors = _in_threads([read] * threads)
    rejected = _rejections(fault_node.url, "search") - rejected_before

    assert not errors, errors
    assert rejected > 0  # the node really rejected searches
    assert _messages(caplog, STORE_LOGGER, "(429)")  # and the store saw them and sent them again
    assert len(answers) == threads * rounds
    for got in answers:  # each reader got what a lone reader gets
        assert got.doc_ids == alone.doc_ids
        for a, b in zip(got.scores, alone.scores):
            np.testing.assert_allclose(a, b, rtol=1e-6)


# =============================================================================================
# (c) a document over http.max_content_length
# =============================================================================================
def _action_bytes(item) -> int:
    (action,) = build_bulk_actions([item], index="x" * 40, encoder_tag=BIG_META.encoder_tag, model_id=BIG_META.model_id)
    return len(bulk_lines(action))


def _just_under(limit: int, rng: np.random.Generator) -> tuple[Document, DocVectors]:
    """A document whose _bulk action is a little under ``limit`` bytes (within 64 kB)."""
    n = 150
    while True:
        item = _item("edge", rng, n_sents=n, dim=BIG_DIM)
        size = _action_bytes(item)
        if size > limit:
            break
        best, n = item, n + 3
    assert limit - 64_000 < _action_bytes(best) <= limit
    return best


def _oversized_batch() -> tuple[list, str]:
    rng = np.random.default_rng(7)
    small = _items(5, "small-", seed=8, dim=BIG_DIM)
    big = _item("big", rng, n_sents=400, dim=BIG_DIM)
    assert _action_bytes(big) > MAX_CONTENT
    return small[:2] + [big] + small[2:] + [_just_under(MAX_CONTENT, rng)], "big"


def test_oversized_document_is_refused_by_name_and_the_rest_is_written(fault_node, fault_store):
    batch, big = _oversized_batch()
    store = fault_store("oversized", BIG_META, max_request_bytes=MAX_CONTENT)
    with pytest.raises(BulkWriteError) as err:
        store.put(batch)
    assert set(err.value.failed) == {big}
    assert "http.max_content_length" in err.value.failed[big]
    # the document just under the limit went through: the refusal is not over-cautious
    _assert_each_once(fault_node.url, store, [d.id for d, _ in batch if d.id != big])
    with pytest.raises(DocumentNotFoundError):
        store.get(big)
    np.testing.assert_array_equal(store.fetch(["edge"]).vectors, batch[-1][1].vectors)


def test_without_the_refusal_the_node_answers_413_and_the_whole_batch_is_lost(fault_node, fault_store):
    """The defect the refusal fixes: the store sends the oversized action with the others."""
    batch, _ = _oversized_batch()
    store = fault_store("unguarded", BIG_META, max_request_bytes=10**9)
    with pytest.raises(StoreError) as err:
        store.put(batch)
    assert not isinstance(err.value, BulkWriteError)
    assert "413" in str(err.value) and "http.max_content_length" in str(err.value)
    assert _visible(fault_node.url, store.index_name) == 0  # the small documents were lost with it


# =============================================================================================
# (f) a hung node: a read gives up at its deadline
# =============================================================================================
def test_a_hung_node_costs_a_read_its_deadline_and_health_names_it(fault_node, fault_store):
    store = fault_store("hung", timeout=30)  # the store's own timeout: 30 s per request
    store.put(_items(3, "h"))
    assert store.counts()["documents"] == 3
    port = fault_node.url.rsplit(":", 1)[1]
    both = OpenSearchStore(f"http://127.0.0.1:{port},http://localhost:{port}", index=store.index,
                           settings=OpenSearchSettings(timeout=30))
    try:
        assert "unanswering_nodes" not in both.cluster_health(timeout=2)
        pid = fault_node.pid()
        os.kill(pid, signal.SIGSTOP)
        try:
            t0 = time.monotonic()
            with deadline.within(2.0), pytest.raises(DeadlineExceededError, match="deadline of 2 s"):
                store.fetch(["h000"])
            waited = time.monotonic() - t0
            t1 = time.monotonic()
            health = both.cluster_health(timeout=1.0)
            health_s = time.monotonic() - t1
        finally:
            os.kill(pid, signal.SIGCONT)
        assert 1.9 <= waited < 4.0, waited  # before the deadline: the store's 30 s timeout
        assert sorted(health["unanswering_nodes"]) == [f"http://127.0.0.1:{port}", f"http://localhost:{port}"], health
        assert health["status"] == "unknown" and health_s < 3.0, (health, health_s)
        # the node was only given less time: not marked dead, the next read answers at once
        t2 = time.monotonic()
        assert store.fetch(["h000"]).ids == ("h000",)
        assert time.monotonic() - t2 < 5.0
        assert "unanswering_nodes" not in both.cluster_health(timeout=2)
    finally:
        both.close()


# =============================================================================================
# (d) k-NN right after replacing and deleting documents (shared node)
# =============================================================================================
def test_knn_right_after_replace_and_delete_returns_k_live_documents(opensearch_url):
    """Measured on OpenSearch 2.19.1, Lucene engine: no query returned fewer than k documents and
    none returned a deleted one, also when the query vectors are exactly the deleted or replaced
    sentence vectors (their nearest neighbours are all deleted). Lucene's HNSW search skips
    deleted documents (live-docs filter during the graph search), so the store does not over-fetch.
    The hits are also compared with the exact top-k (nested semantics: best sentence per document)."""
    n = 60
    items = _items(n, "knn-", seed=3)
    store = _open(opensearch_url, _name("knn"))
    try:
        store.put(items)
        rng = np.random.default_rng(4)
        replaced = {items[i][0].id: (items[i][0], DocVectors(unit(rng, items[i][1].n_sentences, DIM), items[i][1].par_offsets))
                    for i in range(0, n, 3)}
        deleted = [items[i][0].id for i in range(1, n, 6)]
        store.put(list(replaced.values()))
        assert store.delete(deleted) == len(deleted)
        # at once, no refresh or wait beyond the store's own write policy
        live = {d.id: (replaced[d.id][1] if d.id in replaced else v).vectors for d, v in items if d.id not in deleted}
        gone = np.concatenate([v.vectors for d, v in items if d.id in replaced or d.id in deleted])
        queries = np.concatenate([gone, unit(rng, 10, DIM)])
        live_ids = list(live)
        best = np.stack([(live[i] @ queries.T).max(axis=0) for i in live_ids])  # (documents, queries)
        for k in (len(live), len(live) - 5, 10, 1):
            hits = store.sentence_knn(queries, k)
            for q, got in enumerate(hits.doc_ids):
                assert len(got) == k, (k, q, len(got))
                assert not set(got) & set(deleted)
                order = np.argsort(-best[:, q], kind="stable")
                assert set(got) == {live_ids[j] for j in order[:k]} or \
                    np.isclose(best[order[k - 1], q], best[order[k], q])  # a tie at the k-th place
    finally:
        store.drop()
        store.close()


# =============================================================================================
# (e) BM25 over 3 shards equals the embedded store's (shared node)
# =============================================================================================
VOCAB = [f"w{i}" for i in range(300)]
K1 = 1.5  # mappings/index.json, similarity sdr_bm25
def raw_factor(url: str) -> float:
    """OpenSearch 2.x's ``BM25`` similarity (LegacyBM25Similarity) keeps the classic ``(k1 + 1)``
    numerator, which bm25s's ``lucene`` variant and OpenSearch 3.x (Lucene's BM25Similarity) drop:
    a 2.x node's raw scores are 2.5 x bm25s's, a 3.x node's equal them. The store divides the factor
    out (k1 and the cluster version recorded in ``_meta``), so its scores equal bm25s's on both."""
    client = _client(url)
    try:
        return K1 + 1 if int(client.info()["version"]["number"].split(".")[0]) < 3 else 1.0
    finally:
        client.close()


def _lexical_items(n: int) -> list[tuple[Document, DocVectors]]:
    """Documents of 8-18 terms from a Zipf-like vocabulary. Lucene stores a document's length
    exactly only up to 39 terms (SmallFloat.intToByte4), so short documents compare exactly."""
    rng = np.random.default_rng(11)
    p = 1.0 / np.arange(1, len(VOCAB) + 1)
    p /= p.sum()
    out = []
    for i in range(n):
        text = " ".join(" ".join(rng.choice(VOCAB, int(rng.integers(4, 10)), p=p)).capitalize() + "." for _ in range(2))
        out.append(_item(f"lex{i:03d}", rng, text=text))
        assert len(analyze(out[-1][0].text)) <= 39
    return out


def test_bm25_over_three_shards_equals_the_embedded_store(opensearch_url):
    items = _lexical_items(80)
    queries = [items[i][0].text + " w3 w3 w250" for i in range(0, 80, 9)]
    k = 25
    store = _open(opensearch_url, _name("bm25"), shards=3)
    client = _client(opensearch_url)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            embedded = EmbeddedStore(Path(tmp) / "s", create=True)
            try:
                embedded.ensure_meta(META)
                embedded.put(items)
                store.put(items)
                shard_docs = [int(s["docs"]) for s in client.cat.shards(index=store.index_name, format="json")]
                assert len(shard_docs) == 3 and min(shard_docs) > 0
                per_shard_worst = 0.0
                for text in queries:
                    want = embedded.lexical_search(text, k, score_ids=["lex001", "lex050"])
                    got = store.lexical_search(text, k, score_ids=["lex001", "lex050"])
                    np.testing.assert_allclose(got.scores, want.scores, rtol=1e-3)
                    # the same documents with the same scores; documents tied on a score may come in
                    # another order (OpenSearch breaks ties by shard and Lucene doc, the embedded store by id)
                    wanted = dict(zip(want.ids, want.scores.astype(np.float64)))
                    for doc_id, score in zip(got.ids, got.scores):
                        reference = wanted.get(doc_id, float(want.scores[-1]))  # absent: tied at the k-th place
                        assert score == pytest.approx(reference, rel=1e-3), doc_id
                    assert len(set(got.ids) ^ set(want.ids)) <= 2 * int(np.sum(np.isclose(want.scores, want.scores[-1])))
                    for doc_id in ("lex001", "lex050"):
                        assert got.scored[doc_id] == pytest.approx(want.scored[doc_id], rel=1e-3)
                    # the same query without the dfs phase: each shard's own statistics
                    body = build_terms_query(query_terms(text, store.settings.lexical_max_terms), k)
                    r = client.search(index=store.index_name, body=body, params={"search_type": "query_then_fetch"})
                    plain = {h["fields"]["doc_id"][0]: float(h["_score"]) for h in r["hits"]["hits"]}
                    expected = dict(zip(want.ids, raw_factor(opensearch_url) * want.scores.astype(np.float64)))
                    per_shard_worst = max(per_shard_worst, max(abs(plain[i] - expected[i]) / expected[i]
                                                               for i in plain if i in expected))
                assert per_shard_worst > 0.05  # measured 0.14-0.31 per query (dfs: 2e-7)
            finally:
                embedded.close()
    finally:
        client.close()
        store.drop()
        store.close()
