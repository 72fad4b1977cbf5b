"""Fixtures and helpers of the cluster fault tests (``tests/cluster/test_faults_*.py``, issue 43 item 3): an
index of 3 primaries and 1 replica on the tier's three-node cluster (the session fixture ``cluster`` of
tests/conftest.py, shared with the other cluster tests: a fault test leaves every node up and the cluster
green), ``sdr serve`` on the cluster as a real process, and a bounded query load that records every call.
"""

from __future__ import annotations

import os
import random
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np
import pytest

from cluster_harness import LocalCluster
from conftest import ServeProcess

SENTENCES = [
    "The river flooded the northern valley in spring.", "Farmers lost their whole harvest to the water.",
    "The council built a new levee along the bank.", "An appeal against the tax assessment was dismissed.",
    "The tribunal found that the notice was served late.", "Shares of the company were sold below their value.",
    "The witness could not recall the date of the meeting.", "A second levee was planned for the following year.",
    "The contract was signed by both parties in March.", "Interest on the loan was charged at a fixed rate.",
    "The tenant refused to pay rent after the roof collapsed.", "The landlord sued for possession of the flat.",
    "Customs officers seized the cargo at the port.", "The importer claimed the goods were exempt from duty.",
    "The patent covered a method of cooling steel.", "A rival firm copied the design within a year.",
    "The employee was dismissed without a hearing.", "The union called a strike over the dismissal.",
    "The bank froze the account on a court order.", "The depositor argued the order was void.",
    "Police searched the house without a warrant.", "The evidence found there was excluded at trial.",
    "The will left the estate to a charity.", "The children contested the will for lack of capacity.",
    "The ship ran aground off the southern coast.", "Insurers refused to cover the salvage costs.",
    "The railway raised its fares twice that year.", "Passengers complained to the regulator.",
    "The mine closed after the accident.", "Families of the miners sought compensation.",
]
DOCS = 40
QUERY_IDS = [f"d{i:02d}" for i in range(0, DOCS, 2)]  # 20 sources


def corpus() -> dict[str, str]:
    """``DOCS`` documents of 4-6 sentences from a seeded generator (the same every run)."""
    rng = random.Random(43)
    return {f"d{i:02d}": " ".join(rng.sample(SENTENCES, rng.randint(4, 6))) for i in range(DOCS)}


def cluster_manager(c: LocalCluster) -> int:
    """The node number (1-based) of the elected cluster manager."""
    for url in c.urls:
        try:
            name = httpx.get(f"{url}/_cat/cluster_manager?h=node", timeout=10).text.strip()
            return c.urls.index(f"http://127.0.0.1:{int(name.rsplit('-', 1)[1])}") + 1
        except (httpx.HTTPError, ValueError, IndexError):
            continue
    raise RuntimeError(f"no node of {c.url} names the cluster manager")


def victim(c: LocalCluster) -> int:
    """A data node to fault that is not the elected cluster manager (the fault under test is a lost data
    node; the service keeps every node's URL, the victim's too)."""
    manager = cluster_manager(c)
    return next(i for i in (3, 2, 1) if i != manager)


@pytest.fixture(scope="module")
def cluster_index(cluster, encoder):
    """An index of 3 primaries and 1 replica on the cluster holding :func:`corpus` (statistics exact);
    deleted at the end (with its state index)."""
    from sdr_search.core.documents import parse_record
    from sdr_search.indexer.opensearch import OpenSearchSettings, OpenSearchStore
    from sdr_search.indexer.pipeline import index_documents
    from sdr_search.indexer.stats_job import refresh_stats

    name = f"sdr-faults-{uuid.uuid4().hex[:8]}"
    settings = OpenSearchSettings(shards=3, replicas=1)
    with OpenSearchStore(cluster.url, index=name, settings=settings) as store:
        index_documents(store, [parse_record({"id": k, "text": v}) for k, v in corpus().items()], encoder)
        refresh_stats(store, exact=True, sample_size=50, seed=0)
    assert cluster.health(f"index={name}&wait_for_status=green&timeout=120s")["status"] == "green"
    yield name
    try:
        httpx.delete(f"{cluster.urls[0]}/{name}*", timeout=60)
    except httpx.HTTPError:
        pass


class Service(ServeProcess):
    """``sdr serve --opensearch <every node>`` as a real process (stopped by :meth:`stop`)."""

    def __init__(self, cluster: LocalCluster, index: str, log: Path, env: dict[str, str] | None = None) -> None:
        env = {**os.environ, "SDR_SERVICE_STATS_REFRESH_DELAY_S": "0", **(env or {})}
        env.pop("SDR_SERVICE_API_KEY", None)
        super().__init__(["serve", "--opensearch", cluster.url, "--index", index, "--precision", "fp32", "--device", "cpu"],
                         env, log, index, ready_timeout=180)


def mlt(client: httpx.Client, index: str, doc_id: str) -> list[str]:
    r = client.post(f"/v1/indices/{index}/more_like_this", json={"id": doc_id, "size": 10})
    r.raise_for_status()
    return [h["id"] for h in r.json()["hits"]]


@dataclass
class Call:
    phase: str
    source: str
    start: float
    seconds: float
    status: int | None  # None: no answer (a transport error or the client's own timeout)
    ids: list[str] | None
    error: str = ""


@dataclass
class QueryLoad:
    """``clients`` threads, each calling ``more_like_this`` by id (the sources in turn) with a pause
    between calls, until :meth:`stop`; every call recorded with the phase it started in."""

    base: str
    index: str
    clients: int = 4
    pause_s: float = 1.0
    call_timeout_s: float = 120.0
    phase: str = "before"
    fault_at: float | None = None  # monotonic time the fault began (a call in flight then counts as 'during')
    calls: list[Call] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> "QueryLoad":
        for k in range(self.clients):
            t = threading.Thread(target=self._run, args=(k,), daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def _run(self, k: int) -> None:
        with httpx.Client(base_url=self.base, timeout=self.call_timeout_s) as client:
            n = k
            while not self._stop.is_set():
                source = QUERY_IDS[n % len(QUERY_IDS)]
                n += self.clients
                phase, t0 = self.phase, time.monotonic()
                try:
                    r = client.post(f"/v1/indices/{self.index}/more_like_this", json={"id": source, "size": 10})
                    ok = r.status_code == 200
                    call = Call(phase, source, t0, time.monotonic() - t0, r.status_code,
                                [h["id"] for h in r.json()["hits"]] if ok else None, "" if ok else r.text[:300])
                except httpx.HTTPError as e:
                    call = Call(phase, source, t0, time.monotonic() - t0, None, None, f"{type(e).__name__}: {e}")
                with self._lock:
                    self.calls.append(call)
                self._stop.wait(self.pause_s)

    def fault(self) -> None:
        """The fault begins now: calls from here, and those in flight, are 'during'."""
        self.fault_at = time.monotonic()
        self.phase = "during"

    def count(self, phase: str | None = None) -> int:
        with self._lock:
            return sum(1 for c in self.calls if phase is None or c.phase == phase)

    def wait_for(self, phase: str, n: int, timeout: float) -> None:
        """Block until ``n`` calls of ``phase`` are recorded (AssertionError after ``timeout`` s)."""
        deadline = time.monotonic() + timeout
        while self.count(phase) < n:
            assert time.monotonic() < deadline, f"only {self.count(phase)} of {n} {phase} calls in {timeout} s"
            time.sleep(0.2)

    def stop(self, timeout: float) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout)
            assert not t.is_alive(), f"a query client still waits {timeout} s after the load stopped"


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def phase_of(call: Call, fault_at: float | None) -> str:
    """The phase a call started in, 'during' for a call that was in flight when the fault began."""
    if call.phase == "before" and fault_at is not None and call.start + call.seconds > fault_at:
        return "during"
    return call.phase


def summary(load: QueryLoad, baseline: dict[str, list[str]], phases: list[str]) -> dict[str, dict]:
    """Per phase: calls, failed, answers differing from the baseline, p50 / p99 / max seconds."""
    out = {}
    for phase in phases:
        cs = [c for c in load.calls if phase_of(c, load.fault_at) == phase]
        secs = [c.seconds for c in cs]
        out[phase] = {
            "calls": len(cs),
            "failed": sum(1 for c in cs if c.status != 200),
            "differ": sum(1 for c in cs if c.ids is not None and c.ids != baseline[c.source]),
            "p50_s": round(percentile(secs, 50), 3), "p99_s": round(percentile(secs, 99), 3),
            "max_s": round(max(secs), 3) if secs else float("nan"),
        }
    return out
