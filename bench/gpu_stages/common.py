"""Shared plumbing of ``bench/gpu.py``: paths, the stages' names and constants, and small helpers
for files, processes and ports. Standard library only: the orchestrator must report even when the
environment is broken."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1]
ROOT = BENCH.parent
GPU_PY = BENCH / "gpu.py"  # the entry point; its hidden subcommands (_envcheck, _encoder, _eval) run the device-side parts
IRLED = ROOT.parent / "shared" / "data" / "irled"
TARGET_SENTENCES_PER_S = 50_000
STAGES = ("env", "encoder", "reindex", "train", "eval")
OBJECTIVES = {
    # the CPU recipe of docs/results/training.md (in-batch negatives, contrastive only)
    "inbatch": ["--objective", "inbatch", "--mlm-weight", "0", "--batch-size", "64"],
    # the paper's objective with today's defaults (MLM + contrastive, MLM-head warm-up, batch 32)
    "sdr": ["--objective", "sdr"],
}
EVALS = ("full:hybrid", "short:hybrid", "full:sdr", "short:sdr")
SHORT_CUT = "sentences:9"


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover
        return os.cpu_count() or 1


def tail(path: Path, n: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return ""


def last_json(text: str) -> dict | None:
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                continue
    return None


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def kill_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(Exception):
        proc.kill()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def redis_ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False
