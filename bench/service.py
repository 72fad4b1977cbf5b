"""Benchmark the HTTP service against direct in-process calls, on the same store and ids.

Builds (or reuses) an embedded store of the IRLeD corpus with ``sdr index`` (about 3 minutes
when ``~/.cache/sdr-search`` already holds the vectors), starts ``sdr serve`` on a free loopback
port, and sends by-id more-like-this requests for random documents from C concurrent clients
(default 8 and 32; a bounded number of requests per level). Then runs the same requests through
``MoreLikeThis.more_like_this`` in this process with the same concurrency (threads sharing one
engine). Prints, per level: throughput (req/s), latency p50/p99 (ms), errors by status.

The server runs with ``SDR_SERVICE_MAX_QUEUE`` and ``SDR_SERVICE_QUEUE_TIMEOUT_S`` raised so that
every request is served (``--default-limits`` keeps the defaults: then part of the 32-client load
is answered 429, counted as errors).

    python bench/service.py [--store DIR] [--requests 200] [--levels 8 32] [--size 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO.parent / "shared" / "data" / "irled" / "corpus.jsonl.gz"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[k]


def summary(name: str, clients: int, latencies: list[float], errors: Counter, wall: float) -> dict:
    n = len(latencies) + sum(errors.values())
    return {
        "mode": name, "clients": clients, "requests": n, "ok": len(latencies),
        "throughput_rps": round(n / wall, 1) if wall > 0 else None,
        "p50_ms": round(percentile(latencies, 0.50) * 1e3, 1),
        "p99_ms": round(percentile(latencies, 0.99) * 1e3, 1),
        "mean_ms": round(statistics.fmean(latencies) * 1e3, 1) if latencies else None,
        "errors": dict(errors),
    }


def build_store(path: Path) -> None:
    if (path / "store.sqlite").is_file():
        print(f"reusing store {path}", file=sys.stderr)
        return
    print(f"indexing {CORPUS} into {path} ...", file=sys.stderr)
    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "sdr_search", "--log-level", "WARNING", "index", "--store", str(path), str(CORPUS), "--no-progress"],
        cwd=REPO, check=True, stdout=subprocess.DEVNULL,
    )
    print(f"indexed in {time.perf_counter() - t0:.0f} s", file=sys.stderr)


def start_server(store: Path, port: int, log: Path, default_limits: bool) -> subprocess.Popen:
    env = dict(os.environ)
    env.pop("SDR_SERVICE_API_KEY", None)
    if not default_limits:
        env.update({"SDR_SERVICE_MAX_QUEUE": "1000", "SDR_SERVICE_QUEUE_TIMEOUT_S": "600"})
    return subprocess.Popen(
        [sys.executable, "-m", "sdr_search", "--log-level", "WARNING", "serve", "--store", str(store), "--port", str(port)],
        cwd=REPO, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT,
    )


def wait_healthy(base: str, proc: subprocess.Popen, log: Path, timeout: float = 300) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"sdr serve exited with {proc.returncode}:\n{log.read_text()[-2000:]}")
        try:
            if httpx.get(f"{base}/health", timeout=10).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"sdr serve not healthy after {timeout} s")


async def http_level(base: str, ids: list[str], clients: int, size: int) -> dict:
    import httpx

    queue: asyncio.Queue[str] = asyncio.Queue()
    for doc_id in ids:
        queue.put_nowait(doc_id)
    latencies: list[float] = []
    errors: Counter = Counter()
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)

    async with httpx.AsyncClient(base_url=base, timeout=600, limits=limits) as client:
        async def worker() -> None:
            while True:
                try:
                    doc_id = queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                t0 = time.perf_counter()
                try:
                    r = await client.post("/v1/indices/default/more_like_this", json={"id": doc_id, "size": size})
                except httpx.HTTPError as e:
                    errors[type(e).__name__] += 1
                    continue
                if r.status_code == 200:
                    latencies.append(time.perf_counter() - t0)
                else:
                    errors[str(r.status_code)] += 1

        t0 = time.perf_counter()
        await asyncio.gather(*[worker() for _ in range(clients)])
        wall = time.perf_counter() - t0
    return summary("http", clients, latencies, errors, wall)


def inprocess_level(engine, ids: list[str], clients: int, size: int) -> dict:
    from sdr_search.reranker.engine import Query

    latencies: list[float] = []
    errors: Counter = Counter()

    def one(doc_id: str) -> None:
        t0 = time.perf_counter()
        try:
            engine.run(Query(id=doc_id, size=size))
        except Exception as e:  # counted and reported, like an HTTP error
            errors[type(e).__name__] += 1
            return
        latencies.append(time.perf_counter() - t0)

    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=clients) as pool:
        list(pool.map(one, ids))
    wall = time.perf_counter() - t0
    return summary("in-process", clients, latencies, errors, wall)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", type=Path, help="embedded store of the IRLeD corpus (built here when missing; default: a temp dir)")
    ap.add_argument("--requests", type=int, default=200, help="requests per concurrency level (default 200)")
    ap.add_argument("--levels", type=int, nargs="+", default=[8, 32], help="concurrent clients (default 8 32)")
    ap.add_argument("--size", type=int, default=10, help="hits per request (default 10)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--default-limits", action="store_true", help="keep the server's default queue limits (429s count as errors)")
    args = ap.parse_args()

    tmp = tempfile.TemporaryDirectory(prefix="sdr-bench-service-")
    store_path = args.store or Path(tmp.name) / "irled"
    build_store(store_path)

    from sdr_search.indexer.embedded import EmbeddedStore
    from sdr_search.reranker.engine import MoreLikeThis

    with EmbeddedStore(store_path, read_only=True) as store:
        all_ids = list(store.iter_ids())
    rng = random.Random(args.seed)
    warmup = rng.sample(all_ids, 5)
    batches = {c: [rng.choice(all_ids) for _ in range(args.requests)] for c in args.levels}

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = Path(tmp.name) / "server.log"
    proc = start_server(store_path, port, log, args.default_limits)
    rows = []
    try:
        wait_healthy(base, proc, log)
        asyncio.run(http_level(base, warmup, 1, args.size))  # loads FAISS and warms caches
        for c in args.levels:
            rows.append(asyncio.run(http_level(base, batches[c], c, args.size)))
            print(json.dumps(rows[-1]), file=sys.stderr)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    with EmbeddedStore(store_path, read_only=True) as store:
        engine = MoreLikeThis(store=store)
        inprocess_level(engine, warmup, 1, args.size)
        for c in args.levels:
            rows.append(inprocess_level(engine, batches[c], c, args.size))
            print(json.dumps(rows[-1]), file=sys.stderr)
        counts = store.counts()

    print(f"IRLeD store: {counts['documents']} documents, {counts['sentences']} sentences; by-id requests, "
          f"size {args.size}, {args.requests} per level")
    print(f"{'mode':<11} {'clients':>7} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'ok':>5}  errors")
    for r in rows:
        print(f"{r['mode']:<11} {r['clients']:>7} {r['throughput_rps']:>8} {r['p50_ms']:>8} {r['p99_ms']:>8} "
              f"{r['ok']:>5}  {r['errors'] or '-'}")
    print(json.dumps({"bench": "service", "store": counts, "rows": rows}))
    tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
