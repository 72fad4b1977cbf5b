"""End-to-end indexing throughput through Celery workers and Redis, next to the bare encoder, in one run.

The same ~300 IRLeD documents (read at run time from ../shared/data/irled/corpus.jsonl.gz) are
encoded three ways, all with the same precision and no embedding cache:

- ``bare``: ``SentenceEncoder.encode`` on all their sentences in this process, torch threads = all
  cores (the best case: one call, global length sorting, no I/O, no store);
- ``queue, 1 worker``: ``sdr reindex`` through Redis to one ``sdr worker`` process with all cores as
  torch threads; documents are parsed, encoded per batch, written to an embedded store (SQLite,
  vector file, FAISS HNSW maintained by the writer);
- ``queue, N workers``: N ``sdr worker`` processes, each with cores / N torch threads, so the sum
  of threads equals the cores (on 2 cores: 2 workers x 1 thread).

Indexing time is the job's own time (first batch sent -> last result read; the workers are
started and their encoders loaded beforehand); statistics are skipped (``--no-stats``). Workers do
not maintain the FAISS index; ``sdr reindex`` builds it once after the last batch, shown apart
(FAISS s) and in the end-to-end ratio. Target: queue throughput >= 90 % of the bare encoder. The
bare encoder runs before and after the queue runs (a shared machine drifts); the ratio uses their
mean.

Redis: REDIS_URL when set, else a private redis-server on a free port (stopped at the end).

Usage: python bench/indexing.py [--docs 300] [--workers 1,2] [--precision auto] [--batch-docs 64]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sdr_search.core.documents import parse_record  # noqa: E402
from sdr_search.core.errors import InvalidDocumentError  # noqa: E402


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover
        return os.cpu_count() or 1


def load_records(path: Path, n: int) -> tuple[list[dict], list[str]]:
    records, sentences = [], []
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            rec = json.loads(line)
            try:
                doc = parse_record(rec)
            except InvalidDocumentError:
                continue  # e.g. an empty judgment: not part of the comparison
            records.append(rec)
            sentences.extend(doc.sentences)
            if len(records) >= n:
                break
    return records, sentences


def start_redis(tmp: Path) -> tuple[str, subprocess.Popen | None]:
    if os.environ.get("REDIS_URL"):
        return os.environ["REDIS_URL"], None
    binary = shutil.which("redis-server")
    if binary is None:
        sys.exit("needs Redis: set REDIS_URL or install redis-server")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", str(tmp)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    import redis

    for _ in range(100):
        try:
            if redis.Redis.from_url(url).ping():
                return url, proc
        except redis.exceptions.ConnectionError:
            time.sleep(0.05)
    sys.exit("redis-server did not start")


def bare(sentences: list[str], precision: str) -> tuple[float, str]:
    import torch

    from sdr_search.core.encoder import SentenceEncoder
    from sdr_search.core.settings import EncoderSettings

    torch.set_num_threads(cores())
    enc = SentenceEncoder(settings=EncoderSettings(precision=precision, device="cpu"))
    enc.encode(sentences[:64])  # load + warm up
    t = time.perf_counter()
    enc.encode(sentences)
    return time.perf_counter() - t, enc.precision


def queue_run(n_workers: int, data: Path, tmp: Path, env: dict, batch_docs: int, precision: str) -> dict:
    threads = max(1, cores() // n_workers)
    wenv = dict(env, SDR_TORCH_THREADS=str(threads))
    logs = [tmp / f"w{n_workers}-{i}.log" for i in range(n_workers)]
    procs = [subprocess.Popen([sys.executable, "-m", "sdr_search", "worker", "--pool", "solo", "--concurrency", "1",
                               "--threads", str(threads), "--name", f"bench{n_workers}-{i}@%h"],
                              cwd=ROOT, env=wenv, stdout=log.open("w"), stderr=subprocess.STDOUT)
             for i, log in enumerate(logs)]
    try:
        deadline = time.monotonic() + 180
        while not all(" ready." in log.read_text(errors="replace") for log in logs):  # encoder loaded by then
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                sys.exit("workers did not start:\n" + "\n".join(log.read_text()[-2000:] for log in logs))
            time.sleep(0.2)
        out = subprocess.run(
            [sys.executable, "-m", "sdr_search", "reindex", "--store", str(tmp / f"store-{n_workers}"), str(data),
             "--no-cache", "--no-stats", "--no-progress", "--precision", precision, "--batch-docs", str(batch_docs)],
            cwd=ROOT, env=env, capture_output=True, text=True, check=False,
        )
        if out.returncode != 0:
            sys.exit(f"sdr reindex failed ({out.returncode}):\n{out.stderr[-3000:]}")
        summary = json.loads(out.stdout.strip().splitlines()[-1])
        summary["threads"] = threads
        return summary
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=300)
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "irled" / "corpus.jsonl.gz")
    ap.add_argument("--workers", default="1,2", help="worker process counts to run (default 1,2)")
    ap.add_argument("--precision", default="auto", choices=["auto", "fp32", "bf16"])
    ap.add_argument("--batch-docs", type=int, default=64, help="most documents per task (SDR_BATCH_CHARS caps the text)")
    args = ap.parse_args()

    records, sentences = load_records(args.data, args.docs)
    with tempfile.TemporaryDirectory(prefix="sdr-bench-indexing-") as d:
        tmp = Path(d)
        data = tmp / "docs.jsonl"
        data.write_text("".join(json.dumps(r) + "\n" for r in records))
        print(f"{len(records)} IRLeD documents, {len(sentences)} sentences; {cores()} cores; no embedding cache")
        t_bare, precision = bare(sentences, args.precision)
        print(f"bare encoder: {len(sentences) / t_bare:.0f} sentences/s ({precision})", flush=True)
        url, redis_proc = start_redis(tmp)
        env = dict(os.environ, SDR_BROKER_URL=url, SDR_QUEUE=f"bench-{os.getpid()}", SDR_NO_CACHE="1",
                   SDR_DEVICE="cpu", SDR_PRECISION=precision, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
        rows = [("bare encoder (before)", f"1 x {cores()}", len(sentences), t_bare, None)]
        try:
            for n in (int(x) for x in args.workers.split(",")):
                s = queue_run(n, data, tmp, env, args.batch_docs, precision)
                if s["indexed"] != len(records) or s["failed"]:
                    sys.exit(f"unexpected counts: {s}")
                rows.append((f"sdr reindex via Redis, {n} worker(s)", f"{n} x {s['threads']}", s["sentences"],
                             s["index_seconds"], s.get("ann_seconds")))
                print(f"{n} worker(s): {s['sentences'] / s['index_seconds']:.0f} sentences/s", flush=True)
        finally:
            if redis_proc is not None:
                redis_proc.terminate()
                redis_proc.wait(10)
        t_after, _ = bare(sentences, args.precision)  # the machine may be shared: measure the baseline twice
        rows.append(("bare encoder (after)", f"1 x {cores()}", len(sentences), t_after, None))
    base = len(sentences) / ((t_bare + t_after) / 2)
    from sdr_search.workers.settings import WorkerSettings

    print(f"\nprecision {precision}; tasks of at most {args.batch_docs} documents and "
          f"{WorkerSettings().batch_chars:,} characters; 'vs bare' against the mean "
          f"of the two bare runs ({base:.0f} sentences/s); FAISS = the HNSW build after the last batch")
    print(f"{'path':<34} {'procs x thr':>11} {'sentences':>9} {'index s':>8} {'sent/s':>7} {'vs bare':>8} "
          f"{'FAISS s':>8} {'end-to-end':>10}")
    for name, pt, n, secs, ann in rows:
        rate = n / secs
        e2e = "" if ann is None else f"{n / (secs + ann) / base:.0%}"
        print(f"{name:<34} {pt:>11} {n:>9} {secs:>8.1f} {rate:>7.0f} {rate / base:>8.0%} "
              f"{'' if ann is None else f'{ann:.1f}':>8} {e2e:>10}")


if __name__ == "__main__":
    main()
