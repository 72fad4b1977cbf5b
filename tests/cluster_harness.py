"""A local OpenSearch cluster for the cluster tier (``-m cluster``): ``scripts/opensearch-cluster.sh`` on
free ports, started, faulted (SIGKILL, SIGSTOP / SIGCONT) and stopped by the tests. Never a skip: a cluster
that cannot start fails the test that needs it, with the script's message."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLUSTER_SCRIPT = ROOT / "scripts" / "opensearch-cluster.sh"


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_cluster_port(nodes: int, default: int = 9250) -> int:
    """The first port from ``default`` such that ``nodes`` consecutive HTTP ports and their transport ports
    (+100) are free (``SDR_TEST_CLUSTER_PORT`` when set)."""
    if os.environ.get("SDR_TEST_CLUSTER_PORT"):
        return int(os.environ["SDR_TEST_CLUSTER_PORT"])
    for port in range(default, default + 60):
        if all(_free(p) and _free(p + 100) for p in range(port, port + nodes)):
            return port
    raise RuntimeError(f"no {nodes} free consecutive ports (and +100) in {default}-{default + 59}; set SDR_TEST_CLUSTER_PORT")


class LocalCluster:
    """``nodes`` nodes of ``scripts/opensearch-cluster.sh`` from ``port`` (heap ``SDR_TEST_CLUSTER_HEAP``,
    default 512m each)."""

    def __init__(self, port: int, nodes: int = 3, heap: str | None = None) -> None:
        self.port = port
        self.nodes = nodes
        self.heap = heap or os.environ.get("SDR_TEST_CLUSTER_HEAP", "512m")
        self.urls = [f"http://127.0.0.1:{port + i}" for i in range(nodes)]

    @property
    def url(self) -> str:
        """Every node's URL, comma-separated (what ``SDR_OPENSEARCH_URL`` takes for a cluster)."""
        return ",".join(self.urls)

    def run(self, *args: str, timeout: float = 600) -> str:
        env = {**os.environ, "SDR_CLUSTER_PORT": str(self.port), "SDR_CLUSTER_NODES": str(self.nodes),
               "SDR_CLUSTER_HEAP": self.heap}
        r = subprocess.run([str(CLUSTER_SCRIPT), *args], env=env, capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError(f"opensearch-cluster.sh {' '.join(args)} (port {self.port}) failed:\n{r.stderr[-3000:]}")
        return r.stdout.strip()

    def start(self) -> None:
        self.run("start")

    def stop(self) -> None:
        self.run("stop")

    def wipe(self) -> None:
        self.run("wipe")

    def kill(self, node: int) -> None:
        """SIGKILL node ``node`` (1-based)."""
        self.run("kill", str(node))

    def freeze(self, node: int) -> None:
        self.run("freeze", str(node))

    def thaw(self, node: int) -> None:
        self.run("thaw", str(node))

    def revive(self, node: int) -> None:
        """Start node ``node`` again on its data and wait until the cluster is green with every node."""
        self.run("revive", str(node))

    def health(self, query: str = "", exclude: int | None = None) -> dict:
        """``_cluster/health`` from the first node (not ``exclude``) that answers; a ``timeout=Ns`` in ``query``
        (how long the cluster may wait for the status asked) is waited for, with 30 s to spare."""
        wait = re.search(r"(?:^|&)timeout=(\d+)s", query)
        client_timeout = 30 + (int(wait.group(1)) if wait else 30)
        for i, url in enumerate(self.urls, start=1):
            if i == exclude:
                continue
            try:
                with urllib.request.urlopen(f"{url}/_cluster/health?{query}", timeout=client_timeout) as r:
                    return json.load(r)
            except OSError:
                continue
        raise RuntimeError(f"no node of {self.url} answers _cluster/health")
