"""The cluster tier's fixture (``-m cluster``; ``scripts/test.sh -m cluster``): one local three-node
OpenSearch cluster (``scripts/opensearch-cluster.sh``, the sdr plugin and k-NN on every node) per session.

It starts on free ports from 9260 (``tests/cluster_harness.free_cluster_port``), or on
``SDR_TEST_CLUSTER_PORT`` when set; a cluster already answering there is used as it is and left running
(as ``scripts/test.sh`` does with a node), any other is wiped and stopped when the session ends. A cluster
that cannot start fails every test that needs it, with the script's message: never a skip.

Tests that fault a node (SIGKILL, SIGSTOP) must leave the cluster green with every node when they end
(``cluster.revive`` / ``cluster.thaw``): the fixture is shared by every module of the tier."""

from __future__ import annotations

import sys
import urllib.request
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cluster_harness import LocalCluster, free_cluster_port  # noqa: E402


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/_cluster/health", timeout=5) as r:
            return r.status == 200
    except OSError:
        return False


@pytest.fixture(scope="session")
def cluster():
    """The running :class:`LocalCluster` (all nodes green)."""
    c = LocalCluster(free_cluster_port(3, 9260), nodes=3)
    owned = not all(_answers(u) for u in c.urls)
    if owned:
        try:
            c.start()
        except Exception as e:  # noqa: BLE001 - fail loudly, never skip
            try:
                c.wipe()
            finally:
                pytest.fail(f"the local cluster on port {c.port} did not start: {e}", pytrace=False)
    health = c.health("wait_for_status=green&wait_for_nodes=3&timeout=120s")
    if health.get("status") != "green" or health.get("number_of_nodes") != 3:
        pytest.fail(f"the cluster on port {c.port} is not green with 3 nodes: {health}", pytrace=False)
    try:
        yield c
    finally:
        if owned:
            c.wipe()
