"""Throughput and latency of the HTTP service under concurrent clients, side by side for server
configurations, by id and by text.

Starts ``sdr serve`` on a free loopback port over an embedded store (``--store``; built from the
IRLeD corpus when missing, about 3 minutes with a warm embedding cache) once per configuration
(``--config NAME:VAR=VALUE,...``; default: the current defaults next to the defaults before issue
24, ``SDR_SERVICE_MAX_CONCURRENCY=4`` with a 2 s queue timeout and every request using every core).
For each kind of request (``--kinds id text``: an indexed document by id; the text of a stored
document sent as new text, so it is segmented and encoded) and each level of concurrent clients
(``--levels``, default 1 2 4 8 16), clients send requests back to back. Prints per row: successful
requests per second, p50/p99 of the successful ones (ms), and errors by status; then the issue's
targets per configuration and kind: ok req/s at 8 clients / at 1 client (>= 1), p99 at 8 clients /
p50 at 1 client (<= 8), and whether any 429 came below the queue bound.

    python bench/service.py --store /var/tmp/sdr-bench/tiled-wiki [--levels 1 2 4 8 16] [--requests-id 100]
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


async def http_level(base: str, bodies: list[dict], clients: int) -> dict:
    import httpx

    queue: asyncio.Queue[dict] = asyncio.Queue()
    for body in bodies:
        queue.put_nowait(body)
    latencies: list[float] = []
    errors: Counter = Counter()
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)

    async with httpx.AsyncClient(base_url=base, timeout=600, limits=limits) as client:
        async def worker() -> None:
            while True:
                try:
                    body = queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                t0 = time.perf_counter()
                try:
                    r = await client.post("/v1/indices/default/more_like_this", json=body)
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
    row = summary("http", clients, latencies, errors, wall)
    row["ok_rps"] = round(len(latencies) / wall, 2) if wall > 0 else None
    return row


OLD_DEFAULTS = "before:SDR_SERVICE_MAX_CONCURRENCY=4,SDR_SERVICE_THREADS_PER_REQUEST=%d,SDR_SERVICE_QUEUE_TIMEOUT_S=2"


def parse_config(text: str) -> tuple[str, dict[str, str]]:
    name, _, assignments = text.partition(":")
    env = dict(a.split("=", 1) for a in assignments.split(",") if a)
    return name, env


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", type=Path, help="embedded store (built from IRLeD when missing; default: a temp dir)")
    ap.add_argument("--levels", type=int, nargs="+", default=[1, 2, 4, 8, 16], help="concurrent clients")
    ap.add_argument("--kinds", nargs="+", default=["id", "text"], choices=["id", "text"])
    ap.add_argument("--requests-id", type=int, default=100, help="by-id requests per level (default 100)")
    ap.add_argument("--requests-text", type=int, default=30, help="by-text requests per level (default 30)")
    ap.add_argument("--max-text-sentences", type=int, default=250, help="by-text sources: stored documents up to this size")
    ap.add_argument("--text-sentences", type=int, metavar="N",
                    help="by-text sources: each stored document's first N sentences only, as one paragraph (a pasted "
                    "paragraph; e.g. 9, the short sources of docs/results/relevance.md)")
    ap.add_argument("--size", type=int, default=10, help="hits per request (default 10)")
    ap.add_argument("--config", action="append", metavar="NAME:VAR=VALUE,...",
                    help="a server configuration (repeatable); default: 'now:' (defaults) and the defaults before issue 24")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    from sdr_search.indexer.embedded import EmbeddedStore
    from sdr_search.reranker.service.compute import available_cores

    cores = available_cores()
    configs = [parse_config(c) for c in (args.config or ["now:", OLD_DEFAULTS % cores])]
    tmp = tempfile.TemporaryDirectory(prefix="sdr-bench-service-")
    store_path = args.store or Path(tmp.name) / "irled"
    build_store(store_path)

    rng = random.Random(args.seed)
    with EmbeddedStore(store_path, read_only=True) as store:
        all_ids = list(store.iter_ids())
        counts = store.counts()
        texts = []
        for doc_id in rng.sample(all_ids, min(len(all_ids), 400)):
            doc = store.get(doc_id).document
            if args.text_sentences:
                texts.append(" ".join(doc.sentences[: args.text_sentences]))
            elif doc.n_sentences <= args.max_text_sentences:
                texts.append("\n\n".join(" ".join(p) for p in doc.paragraphs))
            if len(texts) >= args.requests_text:
                break
    # Every level sends the same requests (in its own order), so levels differ in concurrency only:
    # request costs are skewed (a source of 10 or of 250 sentences), and a different draw per level
    # moved the rate by as much as the concurrency did.
    workload = {
        "id": [{"id": rng.choice(all_ids), "size": args.size} for _ in range(args.requests_id)],
        "text": [{"text": rng.choice(texts), "size": args.size} for _ in range(args.requests_text)],
    }
    bodies = {kind: {c: rng.sample(reqs, len(reqs)) for c in args.levels} for kind, reqs in workload.items()}
    warmup = [{"id": i, "size": args.size} for i in all_ids[:3]] + [{"text": t, "size": args.size} for t in texts[:2]]

    rows = []
    for name, env_extra in configs:
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        log = Path(tmp.name) / f"server-{name}.log"
        env = dict(os.environ)
        env.pop("SDR_SERVICE_API_KEY", None)
        env.update(env_extra)
        proc = subprocess.Popen(
            [sys.executable, "-m", "sdr_search", "--log-level", "WARNING", "serve", "--store", str(store_path),
             "--port", str(port)], cwd=REPO, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT,
        )
        try:
            wait_healthy(base, proc, log)
            asyncio.run(http_level(base, warmup, 1))  # loads FAISS and the encoder, warms caches
            for kind in args.kinds:
                for c in args.levels:
                    row = asyncio.run(http_level(base, bodies[kind][c], c))
                    row.update(config=name, kind=kind)
                    rows.append(row)
                    print(json.dumps(row), file=sys.stderr)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    print(f"store {store_path}: {counts['documents']} documents, {counts['sentences']} sentences; {cores} cores; "
          f"size {args.size}; by id {args.requests_id}, by text {args.requests_text} requests per level")
    for name, env_extra in configs:
        print(f"config {name}: {env_extra or 'defaults'}")
    print(f"{'config':<8} {'kind':<5} {'clients':>7} {'ok req/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'ok':>5}  errors")
    for r in rows:
        print(f"{r['config']:<8} {r['kind']:<5} {r['clients']:>7} {r['ok_rps']:>9} {r['p50_ms']:>8} {r['p99_ms']:>8} "
              f"{r['ok']:>5}  {r['errors'] or '-'}")
    print("targets (issue 24): ok req/s at 8 clients >= at 1 client; p99 at 8 clients <= 8 x p50 at 1 client; "
          "429 only beyond the queue bound (16 waiting + the running ones)")
    for name, _ in configs:
        for kind in args.kinds:
            by = {r["clients"]: r for r in rows if r["config"] == name and r["kind"] == kind}
            if 1 in by and 8 in by:
                rate = by[8]["ok_rps"] / by[1]["ok_rps"] if by[1]["ok_rps"] else float("nan")
                tail = by[8]["p99_ms"] / by[1]["p50_ms"] if by[1]["p50_ms"] else float("nan")
                early = sum(r["errors"].get("429", 0) for c, r in by.items() if c <= 16)
                print(f"{name:<8} {kind:<5} rate 8/1 = {rate:.2f} ({'met' if rate >= 1 else 'MISSED'}); "
                      f"p99(8)/p50(1) = {tail:.1f} ({'met' if tail <= 8 else 'MISSED'}); "
                      f"429s at <= 16 clients: {early} ({'met' if early == 0 else 'MISSED'})")
    print(json.dumps({"bench": "service", "store": counts, "cores": cores, "rows": rows}))
    tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
