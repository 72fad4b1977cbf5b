"""The run's record and its plumbing: the figures (``gpu.json``, ``gpu.md`` rewritten after every
stage), the log and timeline, and the subprocesses every stage starts. Each stage is a subclass
(:mod:`gpu_stages.env`, ``.data``, ``.encoder``, ``.services``, ``.reindex``, ``.train``,
``.evaluation``); ``bench/gpu.py``'s ``Run`` composes them."""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from .common import GPU_PY, cores, kill_group, now_iso, tail, write_atomic
from .report import render_markdown


class Recorder:
    """The state of one run (arguments, clocks, services, the record ``r``) and what every stage
    uses: the log, the timeline, the record's files and the subprocesses."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.t0 = time.monotonic()
        self.deadline = self.t0 + args.budget
        self.out = Path(args.out).resolve()
        self.out.mkdir(parents=True, exist_ok=True)
        self.work = Path(args.work or tempfile.mkdtemp(prefix="sdr-gpu-")).resolve()
        self.work.mkdir(parents=True, exist_ok=True)
        (self.work / "logs").mkdir(exist_ok=True)
        self.log_path = self.out / "gpu.log"
        self.log_path.write_text("")
        self.env: dict[str, str] = {}
        self.python = sys.executable
        self.model: str | None = None
        self.device = "cpu"
        self.redis_proc: subprocess.Popen | None = None
        self.redis_url: str | None = None
        self.workers: list[tuple[subprocess.Popen, Path]] = []
        self.trainings: dict[str, dict] = {}
        self.data: dict[str, Any] = {}
        self._lock = threading.RLock()
        self._base_eval: threading.Thread | None = None
        self._train_thread: threading.Thread | None = None
        self.train_end = time.monotonic()
        self.r: dict[str, Any] = {
            "schema": 1, "issue": 35, "mode": "dry-run" if args.dry_run else "full", "started": now_iso(),
            "budget_s": args.budget, "argv": sys.argv[1:], "host": self.host(), "stages": {}, "timeline": [],
        }

    # -- bookkeeping -------------------------------------------------------------------------
    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def log(self, msg: str) -> None:
        line = f"[{self.elapsed():7.1f}s] {msg}"
        print(line, flush=True)
        with self.log_path.open("a") as fh:
            fh.write(line + "\n")

    def event(self, what: str) -> None:
        self.r["timeline"].append({"t": round(self.elapsed(), 1), "event": what})
        self.log(what)

    def stage(self, name: str) -> dict:
        return self.r["stages"].setdefault(name, {"status": "pending"})

    def skip(self, name: str, reason: str, sub: dict | None = None) -> None:
        st = sub if sub is not None else self.stage(name)
        st.update(status="skipped", reason=reason)
        self.event(f"{name}: skipped ({reason})")
        self.save()

    def save(self) -> None:
        """Rewrite gpu.json and gpu.md (threads update self.r: a write that met a change is retried)."""
        with self._lock:
            self.r["elapsed_s"] = round(self.elapsed(), 1)
            for attempt in range(20):
                try:
                    text, md = json.dumps(self.r, indent=1, default=str) + "\n", render_markdown(self.r)
                    break
                except RuntimeError:  # dictionary changed size during iteration
                    time.sleep(0.01)
            else:
                return
            write_atomic(self.out / "gpu.json", text)
            write_atomic(self.out / "gpu.md", md)

    def host(self) -> dict:
        info = {"hostname": socket.gethostname(), "platform": platform.platform(), "python": sys.version.split()[0],
                "executable": sys.executable, "cores": cores()}
        smi = shutil.which("nvidia-smi")
        if smi:
            try:
                q = subprocess.run([smi, "--query-gpu=name,memory.total,driver_version,clocks.max.sm",
                                    "--format=csv,noheader"], capture_output=True, text=True, timeout=20)
                info["nvidia_smi"] = q.stdout.strip() or q.stderr.strip()
            except (OSError, subprocess.TimeoutExpired) as e:
                info["nvidia_smi"] = f"failed: {e}"
        return info

    # -- subprocesses ------------------------------------------------------------------------
    def penv(self, **extra: str) -> dict[str, str]:
        env = dict(os.environ)
        env.update(self.env)
        env.update({k: v for k, v in extra.items() if v is not None})
        return env

    def sdr(self, *argv: str) -> list[str]:
        return [self.python, "-m", "sdr_search", "--log-level", "INFO", *argv]

    def helper(self, *argv: str) -> list[str]:
        return [self.python, str(GPU_PY), *argv]

    def call(self, cmd: list[str], name: str, timeout: float, env: dict | None = None) -> tuple[int | None, str, Path]:
        """Run ``cmd`` (cwd: the work folder), stdout captured, stderr to logs/NAME.log; rc None on timeout."""
        log = self.work / "logs" / f"{name}.log"
        timeout = max(1.0, timeout)
        self.log(f"$ {' '.join(cmd[1:])}  (timeout {timeout:.0f} s)")
        with log.open("w") as err:
            proc = subprocess.Popen(cmd, cwd=self.work, env=env or self.penv(), stdout=subprocess.PIPE, stderr=err,
                                    text=True, start_new_session=True)
            try:
                out, _ = proc.communicate(timeout=timeout)
                return proc.returncode, out, log
            except subprocess.TimeoutExpired:
                kill_group(proc)
                out, _ = proc.communicate()
                return None, out or "", log

    def append_logs(self) -> None:
        with self.log_path.open("a") as fh:
            for log in sorted((self.work / "logs").glob("*.log")):
                fh.write(f"\n===== {log.name} (last 4000 characters) =====\n{tail(log, 4000)}\n")
