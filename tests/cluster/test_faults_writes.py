"""Writes while a data node is SIGKILLed (issue 43 item 3, writes): PUT, DELETE and ``_bulk`` through a real
``sdr serve`` on the three-node cluster (index: 3 primaries, 1 replica), one data node killed in the middle
and revived. Every acknowledged write is readable afterwards; every refused one says so (a 5xx with an error
message, or a failed ``_bulk`` line with its error), never a silent loss; a refused write leaves its
document as it was or as the write left it.

Then the document API's model-based test (``tests/reranker/test_document_api_model.py``'s state machine,
imported, not copied) runs against the cluster with a rule that SIGKILLs a data node and one that revives it
between steps; the machine's invariant reads every id back after every step.
"""

from __future__ import annotations

import json
import random
import sys
import threading
import time
import uuid
from pathlib import Path

import httpx
import pytest

import faults_fixtures
from faults_fixtures import SENTENCES, Service, victim

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "reranker"))
import test_document_api_model as model_test  # noqa: E402 - the machine of the document API's model-based test

pytestmark = pytest.mark.cluster
cluster_index = faults_fixtures.cluster_index
small_limits = model_test.small_limits

WRITERS = 2
IDS_PER_WRITER = 6
NDJSON = {"Content-Type": "application/x-ndjson"}


def _flat(text: str) -> str:
    return " ".join(text.split())


class Writer(threading.Thread):
    """PUT / DELETE / ``_bulk`` on its own ids (distinct within a request) until stopped; keeps, per id, the
    set of states the document may be in (None: absent): one state after an acknowledged write, the old
    ones and the new one after a refused write."""

    def __init__(self, k: int, base: str, index: str, phase: list[str], possible: dict[str, set]) -> None:
        super().__init__(daemon=True)
        self.k, self.base, self.index, self.phase = k, base, index, phase
        self.ids = [f"w{k}-{i}" for i in range(IDS_PER_WRITER)]
        self.possible = possible
        for doc_id in self.ids:
            possible[doc_id] = {None}
        self.rng = random.Random(1000 + k)
        self.stop = threading.Event()
        self.n = 0
        self.log: list[dict] = []  # phase, kind, status, acked / refused counts, seconds, problems

    def _text(self) -> str:
        self.n += 1
        return " ".join(self.rng.sample(SENTENCES, self.rng.randint(2, 4))) + f" Revision {self.k}-{self.n} of this note."

    def _refused_says_so(self, r: httpx.Response) -> str:
        """'' when a 5xx names its error; else what is wrong."""
        try:
            message = r.json()["error"]["message"]
        except (ValueError, KeyError, TypeError):
            return f"a {r.status_code} without an error message: {r.text[:200]}"
        return "" if message else f"a {r.status_code} with an empty message"

    def _one(self, client: httpx.Client) -> dict:
        kind = self.rng.choice(["put", "put", "delete", "bulk", "bulk"])
        entry = {"phase": self.phase[0], "kind": kind, "acked": 0, "refused": 0, "problems": []}
        t0 = time.monotonic()
        if kind in ("put", "delete"):
            doc_id = self.rng.choice(self.ids)
            new = _flat(self._text()) if kind == "put" else None
            try:
                r = (client.put(f"/v1/indices/{self.index}/documents/{doc_id}", json={"text": new}) if kind == "put"
                     else client.delete(f"/v1/indices/{self.index}/documents/{doc_id}"))
            except httpx.HTTPError as e:
                r = None
                entry["problems"].append(f"{kind} {doc_id}: no answer ({type(e).__name__}: {e})")
            entry["status"] = None if r is None else r.status_code
            if r is not None and (r.status_code == 200 or (kind == "delete" and r.status_code == 404)):
                self.possible[doc_id] = {new}
                entry["acked"] = 1
            else:
                self.possible[doc_id] = self.possible[doc_id] | {new}
                entry["refused"] = 1
                if r is not None:
                    if r.status_code < 500:
                        entry["problems"].append(f"{kind} {doc_id}: unexpected {r.status_code} {r.text[:200]}")
                    elif problem := self._refused_says_so(r):
                        entry["problems"].append(f"{kind} {doc_id}: {problem}")
        else:
            chosen = self.rng.sample(self.ids, self.rng.randint(2, 4))
            lines = [(d, None) if self.rng.random() < 0.3 else (d, _flat(self._text())) for d in chosen]
            body = "".join(json.dumps({"delete": d} if t is None else {"id": d, "text": t}) + "\n" for d, t in lines)
            try:
                r = client.post(f"/v1/indices/{self.index}/_bulk", content=body.encode(), headers=NDJSON)
            except httpx.HTTPError as e:
                r = None
                entry["problems"].append(f"bulk: no answer ({type(e).__name__}: {e})")
            entry["status"] = None if r is None else r.status_code
            if r is not None and r.status_code == 200:
                items = {i["id"]: i for i in r.json()["items"]}
                for d, t in lines:
                    item = items[d]
                    if item["result"] == "failed":
                        self.possible[d] = self.possible[d] | {t}
                        entry["refused"] += 1
                        if not item.get("error"):
                            entry["problems"].append(f"bulk line {d}: failed without an error")
                    else:
                        self.possible[d] = {t}
                        entry["acked"] += 1
            else:
                for d, t in lines:
                    self.possible[d] = self.possible[d] | {t}
                entry["refused"] += len(lines)
                if r is not None:
                    if r.status_code < 500:
                        entry["problems"].append(f"bulk: unexpected {r.status_code} {r.text[:200]}")
                    elif problem := self._refused_says_so(r):
                        entry["problems"].append(f"bulk: {problem}")
        entry["seconds"] = time.monotonic() - t0
        return entry

    def run(self) -> None:
        with httpx.Client(base_url=self.base, timeout=180) as client:
            while not self.stop.is_set():
                self.log.append(self._one(client))
                self.stop.wait(0.2)


def _count(writers: list[Writer], phase: str) -> int:
    return sum(1 for w in writers for e in list(w.log) if e["phase"] == phase)


def _wait(writers: list[Writer], phase: str, n: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while _count(writers, phase) < n:
        assert time.monotonic() < deadline, f"only {_count(writers, phase)} of {n} {phase} writes in {timeout} s"
        time.sleep(0.2)


def test_faults_writes_while_a_data_node_is_sigkilled(cluster, cluster_index, tmp_path, capsys):
    t0 = time.monotonic()
    service = Service(cluster, cluster_index, tmp_path / "serve.log").start()
    try:
        node = victim(cluster)
        phase = ["before"]
        possible: dict[str, set] = {}
        writers = [Writer(k, service.base, cluster_index, phase, possible) for k in range(WRITERS)]
        for w in writers:
            w.start()
        try:
            _wait(writers, "before", 10, timeout=300)
            phase[0] = "during"
            cluster.kill(node)
            _wait(writers, "during", 20, timeout=300)
            phase[0] = "recovery"
            cluster.revive(node)
            phase[0] = "after"
            _wait(writers, "after", 10, timeout=300)
        finally:
            for w in writers:
                w.stop.set()
            for w in writers:
                w.join(200)
                assert not w.is_alive(), "a writer still waits 200 s after it was stopped"
        health = cluster.health("wait_for_status=green&wait_for_nodes=3&timeout=60s")
        assert health["status"] == "green", health
        lost, uncertain = [], 0
        with httpx.Client(base_url=service.base, timeout=60) as client:
            for doc_id, states in sorted(possible.items()):
                r = client.get(f"/v1/indices/{cluster_index}/documents/{doc_id}")
                assert r.status_code in (200, 404), r.text
                got = None if r.status_code == 404 else _flat(" ".join(s for p in r.json()["paragraphs"] for s in p))
                uncertain += len(states) > 1
                if got not in states:
                    lost.append((doc_id, got, states))
        log = [e for w in writers for e in w.log]
        figures = {p: {"requests": sum(1 for e in log if e["phase"] == p),
                       "acked_lines": sum(e["acked"] for e in log if e["phase"] == p),
                       "refused_lines": sum(e["refused"] for e in log if e["phase"] == p),
                       "statuses": sorted({str(e["status"]) for e in log if e["phase"] == p}),
                       "max_s": round(max((e["seconds"] for e in log if e["phase"] == p), default=0), 2)}
                   for p in ("before", "during", "recovery", "after")}
        with capsys.disabled():
            print(f"\nwrites, SIGKILL of node {node}, {time.monotonic() - t0:.0f} s: {json.dumps(figures)}; "
                  f"acknowledged writes lost: {len(lost)}; ids left in either state by a refused write: {uncertain}")
        problems = [p for e in log for p in e["problems"]]
        assert not problems, problems  # every refused write said so
        assert not lost, lost  # every acknowledged write is there, every refused one as it was or as written
    finally:
        service.stop()


# -- the document API's model-based test on the cluster, a node killed and revived between steps ------------
class ClusterMachine(model_test.DocumentApiMachine):
    """The document API machine on the three-node cluster (3 primaries, 1 replica), with two more rules: SIGKILL a
    data node, revive it (the invariant reads every id back after each)."""

    cluster = None  # set by the test
    down: int | None = None
    kills = 0

    def __init__(self) -> None:
        super().__init__()
        self.index = f"sdr-model-{uuid.uuid4().hex[:10]}"

    def open_store(self):
        from sdr_search.indexer.opensearch import OpenSearchSettings, OpenSearchStore

        return OpenSearchStore(self.cluster.url, index=self.index, settings=OpenSearchSettings(shards=3, replicas=1))

    @model_test.precondition(lambda self: ClusterMachine.down is None and self.client is not None)
    @model_test.rule()
    def kill_a_node(self):
        ClusterMachine.down = victim(self.cluster)
        self.cluster.kill(ClusterMachine.down)
        ClusterMachine.kills += 1
        self._done()

    @model_test.precondition(lambda self: ClusterMachine.down is None and self.client is not None)
    @model_test.rule()
    def kill_a_node_too(self):  # a second kill rule: kills drawn twice as often as each other rule
        self.kill_a_node()

    @model_test.precondition(lambda self: ClusterMachine.down is not None)
    @model_test.rule()
    def revive_the_node(self):
        self.cluster.revive(ClusterMachine.down)
        ClusterMachine.down = None
        self._done()

    def drop(self) -> None:
        if ClusterMachine.down is not None:
            self.cluster.revive(ClusterMachine.down)
            ClusterMachine.down = None
        with self.open_store() as store:
            store.drop()


def test_faults_document_api_model_with_a_node_killed_between_steps(cluster, small_limits, capsys):
    t0 = time.monotonic()
    model_test.DocumentApiMachine.seen.clear()
    ClusterMachine.cluster = cluster
    ClusterMachine.kills = 0
    ClusterMachine.TestCase.settings = model_test.settings(
        max_examples=4, stateful_step_count=12, deadline=None, derandomize=True,
        suppress_health_check=[model_test.HealthCheck.too_slow, model_test.HealthCheck.filter_too_much])
    ClusterMachine.TestCase().runTest()
    with capsys.disabled():
        print(f"\nmodel-based test on the cluster: {ClusterMachine.kills} node kills, {time.monotonic() - t0:.0f} s, "
              f"concurrent queries (kind, status): {dict(sorted(model_test.DocumentApiMachine.seen.items()))}")
    model_test.DocumentApiMachine.seen.clear()
    assert ClusterMachine.kills >= 2, ClusterMachine.kills
