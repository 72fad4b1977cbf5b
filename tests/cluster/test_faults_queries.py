"""A data node lost under query load (issue 43 item 3, queries): four clients call ``more_like_this`` by id
through a real ``sdr serve`` on the three-node cluster (index: 3 primaries, 1 replica) while one data node
is SIGKILLed (then revived), or frozen with SIGSTOP for longer than the request timeout (then SIGCONT).

The service is given every node's URL: a request whose node is dead or hung goes to another node
(opensearch-py's transport retries, ``indexer/opensearch/hosts.py``), and the cluster serves a lost
shard from its replica. Asserted: no failed call under a SIGKILL; under a SIGSTOP, no call longer than
the service's request deadline (``SDR_SERVICE_REQUEST_TIMEOUT_S``), no failed call either (after one
request times out on the hung node, reads prefer the shard copies on the nodes that answer), and
``/health`` says ``degraded`` from its first check after the freeze (the hung node is listed as not
answering) until it is thawed; under both, ``degraded`` while the cluster is not green; once the node is
back the cluster is green and every source answers the same ids as before the fault. The figures (failed calls,
p50 / p99 per phase) are printed and recorded in docs/results/cluster.md ("Faults").
"""

from __future__ import annotations

import json
import time

import httpx
import pytest

import faults_fixtures
from faults_fixtures import QUERY_IDS, QueryLoad, Service, mlt, summary, victim

pytestmark = pytest.mark.cluster
cluster_index = faults_fixtures.cluster_index

PHASES = ["before", "during", "recovery", "after"]


def _baseline(base: str, index: str) -> dict[str, list[str]]:
    with httpx.Client(base_url=base, timeout=120) as client:
        return {s: mlt(client, index, s) for s in QUERY_IDS}


def test_faults_sigkill_of_a_data_node_under_query_load(cluster, cluster_index, tmp_path, capsys):
    t0 = time.monotonic()
    service = Service(cluster, cluster_index, tmp_path / "serve.log").start()
    try:
        baseline = _baseline(service.base, cluster_index)
        node = victim(cluster)
        load = QueryLoad(service.base, cluster_index).start()
        try:
            load.wait_for("before", 40, timeout=300)
            load.fault()
            cluster.kill(node)
            load.wait_for("during", 60, timeout=300)
            seen = cluster.health(exclude=node)
            load.phase = "recovery"
            cluster.revive(node)  # waits until green with every node
            load.phase = "after"
            load.wait_for("after", 40, timeout=300)
        finally:
            load.stop(timeout=130)
        health = cluster.health("wait_for_status=green&wait_for_nodes=3&timeout=60s")
        assert health["status"] == "green" and health["number_of_nodes"] == 3, health
        assert _baseline(service.base, cluster_index) == baseline  # every source answers as before
        figures = summary(load, baseline, PHASES)
        with capsys.disabled():
            print(f"\nSIGKILL of node {node} ({seen['status']}, {seen['number_of_nodes']} nodes while down), "
                  f"{len(load.calls)} calls, {time.monotonic() - t0:.0f} s: {json.dumps(figures)}")
        failed = [(c.phase, c.status, c.error) for c in load.calls if c.status != 200]
        assert not failed, failed
        assert seen["number_of_nodes"] == 2 and seen["status"] != "green", seen
    finally:
        service.stop()


TIMEOUT_S = 10  # the service's SDR_OPENSEARCH_TIMEOUT in the SIGSTOP test (per store request)
DEADLINE_S = 25  # its SDR_SERVICE_REQUEST_TIMEOUT_S: no call may take longer (plus the answer's grace)
FREEZE_MIN_S = 20  # frozen at least this long (past the timeout), and until /health said degraded twice
FREEZE_MAX_S = 120  # (the cluster drops a hung node after its fault detection, 3 x 10 s follower checks)
# A call's store requests are each cut to the time left before its deadline, and no retry waits past it
# (sdr_search.core.deadline): a call that meets the hung node answers 504 at its deadline at the latest.
CALL_BOUND_S = DEADLINE_S + 3  # the grace of the answer (1 s) and the client's own HTTP round trip
HEALTH_SEES_IT_S = 10  # /health lists the hung node (each node asked to answer within 2.5 s) this soon


def test_faults_sigstop_of_a_data_node_no_call_hangs(cluster, cluster_index, tmp_path, capsys):
    t0 = time.monotonic()
    service = Service(cluster, cluster_index, tmp_path / "serve.log",
                      env={"SDR_OPENSEARCH_TIMEOUT": str(TIMEOUT_S), "SDR_SERVICE_REQUEST_TIMEOUT_S": str(DEADLINE_S),
                           "SDR_SERVICE_HEALTH_TIMEOUT_S": "5"}).start()
    try:
        baseline = _baseline(service.base, cluster_index)
        node = victim(cluster)
        load = QueryLoad(service.base, cluster_index, call_timeout_s=CALL_BOUND_S + 30).start()
        healths: list[tuple[float, int, str, str]] = []
        try:
            load.wait_for("before", 20, timeout=300)
            load.fault()
            cluster.freeze(node)
            try:
                frozen_at = time.monotonic()
                with httpx.Client(base_url=service.base, timeout=60) as client:
                    while time.monotonic() - frozen_at < FREEZE_MAX_S:
                        r = client.get("/health")
                        body = r.json()
                        cluster_seen = body["indices"][cluster_index].get("cluster", {})
                        healths.append((round(time.monotonic() - frozen_at, 1), r.status_code, body["status"],
                                        cluster_seen.get("status", "") + ("/hung" if cluster_seen.get("unanswering_nodes") else "")))
                        degraded = sum(1 for h in healths if h[2] == "degraded")
                        if degraded >= 2 and time.monotonic() - frozen_at >= FREEZE_MIN_S:
                            break
                        time.sleep(2)
                frozen_s = time.monotonic() - frozen_at
            finally:
                cluster.thaw(node)
            load.phase = "recovery"
            health = cluster.health("wait_for_status=green&wait_for_nodes=3&timeout=240s")
            assert health["status"] == "green" and health["number_of_nodes"] == 3, health
            load.phase = "after"
            load.wait_for("after", 20, timeout=300)
        finally:
            load.stop(timeout=CALL_BOUND_S + 40)
        assert _baseline(service.base, cluster_index) == baseline
        with httpx.Client(base_url=service.base, timeout=60) as client:
            after = client.get("/health").json()
        figures = summary(load, baseline, PHASES)
        failed = [(c.phase, c.status, round(c.seconds, 1), c.error[:200]) for c in load.calls if c.status != 200]
        with capsys.disabled():
            print(f"\nSIGSTOP of node {node} for {frozen_s:.0f} s (timeout {TIMEOUT_S} s), {len(load.calls)} calls, "
                  f"{time.monotonic() - t0:.0f} s: {json.dumps(figures)}\nfailed: {failed}\n"
                  f"/health while frozen (s, status, body, cluster): {healths}\nafter: {after}")
        slowest = max(c.seconds for c in load.calls)
        assert slowest <= CALL_BOUND_S, (slowest, [(c.phase, c.seconds, c.error) for c in load.calls if c.seconds > CALL_BOUND_S])
        assert any(status == 200 and word == "degraded" for _, status, word, _ in healths), healths
        # /health saw the hung node at once (listed as not answering), not only once the cluster dropped it
        assert healths[0][0] <= HEALTH_SEES_IT_S and healths[0][2] == "degraded", healths
        assert all(word == "degraded" for _, _, word, _ in healths), healths
        # reads prefer the shard copies on the nodes that answer once a request timed out (NodeRouter)
        assert not failed, failed
        assert after["status"] == "ok" and after["indices"][cluster_index]["cluster"]["status"] == "green", after
    finally:
        service.stop()
