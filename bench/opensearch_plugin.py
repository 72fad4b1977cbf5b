"""The sdr OpenSearch plugin's own cost on a node: ``took`` of the exact SDR rescore (``sdr``) of a
window, and of the candidate query (``sdr_candidates``), on synthetic documents.

The index is the project's (written by :class:`OpenSearchStore`, force-merged to one segment): ``--docs``
documents of ``--paragraphs`` x ``--sentences`` sentences with random unit vectors of ``--dim``
dimensions; the source has ``--source-paragraphs`` x ``--source-sentences`` sentences (defaults: 100
documents of 10 x 20 = 200 sentences, a 190-sentence source: 3.8 M dot products for a window of 100,
the shape of an IRLeD query). Each measurement is ``--reps`` searches after ``--warmup`` (median and
p90 of ``took``, and the wall-clock median through opensearch-py). The node's kernel and threads are
whatever it was started with: ``-Dsdr.kernel=scalar`` (``OPENSEARCH_JAVA_OPTS``) gives the scalar
kernel (the plugin's first version), ``-E sdr.threads=1`` (``SDR_NODE_ARGS``) one thread per request.

Usage: python bench/opensearch_plugin.py --url http://127.0.0.1:9221
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sdr_search.core.documents import Document  # noqa: E402
from sdr_search.core.vectors import DocVectors  # noqa: E402
from sdr_search.indexer.opensearch import OpenSearchStore  # noqa: E402
from sdr_search.indexer.store import IndexMeta  # noqa: E402


def unit(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    x = rng.standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def b64(vectors: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(vectors, dtype="<f4").tobytes()).decode("ascii")


def timed(client, index: str, body: dict, reps: int, warmup: int) -> dict[str, float]:
    took, wall = [], []
    for i in range(warmup + reps):
        t = time.perf_counter()
        r = client.search(index=index, body=body, params={"request_cache": "false"})
        w = (time.perf_counter() - t) * 1e3
        if i >= warmup:
            took.append(float(r["took"]))
            wall.append(w)
    return {"took_p50": statistics.median(took), "took_p90": float(np.percentile(took, 90)), "wall_p50": statistics.median(wall),
            "hits": len(r["hits"]["hits"])}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default=os.environ.get("SDR_OPENSEARCH_URL", "http://127.0.0.1:9200"))
    ap.add_argument("--index", default="sdr-bench-plugin")
    ap.add_argument("--docs", type=int, default=100)
    ap.add_argument("--paragraphs", type=int, default=10)
    ap.add_argument("--sentences", type=int, default=20)
    ap.add_argument("--source-paragraphs", type=int, default=10)
    ap.add_argument("--source-sentences", type=int, default=19)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--windows", type=int, nargs="+", default=[10, 100])
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--keep-index", action="store_true", help="reuse the index if it has --docs documents; leave it at the end")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)

    rng = np.random.default_rng(7)
    store = OpenSearchStore(args.url, index=args.index)
    client = store._os()
    fresh = not (args.keep_index and store.meta() is not None and store.counts()["documents"] == args.docs)
    if fresh:
        store.drop()
        store.ensure_meta(IndexMeta("bench-model", "bench-tag", args.dim, {"paragraph_unit": "paragraph"}))
        sizes = [args.sentences] * args.paragraphs
        offsets = np.concatenate([[0], np.cumsum(sizes)])
        for start in range(0, args.docs, 10):
            items = []
            for d in range(start, min(args.docs, start + 10)):
                paragraphs = tuple(tuple(f"doc {d} paragraph {p} sentence {s}." for s in range(n)) for p, n in enumerate(sizes))
                items.append((Document(f"d{d}", paragraphs, None, {}), DocVectors(unit(rng, sum(sizes), args.dim), offsets)))
            store.put(items)
        name = store.index_name
        client.indices.forcemerge(index=name, params={"max_num_segments": 1, "request_timeout": 600})
        client.indices.refresh(index=name)
    name = store.index_name
    source = unit(rng, args.source_paragraphs * args.source_sentences, args.dim)
    n = args.source_paragraphs
    clause = {"vectors": b64(source), "paragraph_sizes": [args.source_sentences] * n,
              "mu": rng.uniform(0.1, 0.3, n).round(4).tolist(), "sigma": rng.uniform(0.05, 0.2, n).round(4).tolist()}
    info = client.info()["version"]["number"]
    node = next(iter(client.nodes.info(metric="jvm,thread_pool,settings")["nodes"].values()))
    jvm = node["jvm"]
    kernel = next((a.split("=", 1)[1] for a in jvm.get("input_arguments", []) if a.startswith("-Dsdr.kernel=")), "auto")
    threads = node.get("settings", {}).get("sdr", {}).get("threads", "default")
    pool = node.get("thread_pool", {}).get("sdr", {}).get("size")
    load = os.getloadavg()
    print(f"node: OpenSearch {info}, Java {jvm['version']}, sdr.kernel={kernel}, sdr.threads={threads}, sdr pool size={pool}; "
          f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
    print(f"index: {args.docs} documents x {args.paragraphs * args.sentences} sentences ({args.dim} dims), one segment; "
          f"source {args.source_paragraphs} x {args.source_sentences} sentences")
    rows = {}
    base = {"_source": False, "track_total_hits": False}
    rows["match_all alone"] = timed(client, name, {**base, "size": max(args.windows), "query": {"match_all": {}}},
                                    args.reps, args.warmup)
    for w in args.windows:
        body = {**base, "size": w, "query": {"match_all": {}}, "rescore": {"window_size": w, "sdr": clause}}
        rows[f"sdr rescore, window {w}"] = timed(client, name, body, args.reps, args.warmup)
    cand = {"vectors": clause["vectors"], "paragraph_sizes": clause["paragraph_sizes"], "mu": clause["mu"],
            "sigma": clause["sigma"], "k": 30, "ef_search": 100}
    rows["sdr_candidates (k 30, ef 100)"] = timed(client, name, {**base, "size": 200, "query": {"sdr_candidates": cand}},
                                                 args.reps, args.warmup)
    w = max(args.windows)
    rows[f"sdr_candidates + rescore window {w}"] = timed(
        client, name, {**base, "size": w, "query": {"sdr_candidates": cand}, "rescore": {"window_size": w, "sdr": clause}},
        args.reps, args.warmup)
    print(f"\n{'':38} {'took p50':>9} {'took p90':>9} {'wall p50':>9}  (ms, {args.reps} searches)")
    for label, r in rows.items():
        print(f"{label:38} {r['took_p50']:9.0f} {r['took_p90']:9.0f} {r['wall_p50']:9.0f}")
    if args.json:
        args.json.write_text(json.dumps({"node": info, "java": jvm["version"], "kernel": kernel, "threads": threads,
                                         "load": load, "rows": rows}, indent=1))
    if not args.keep_index:
        store.drop()
    store.close()


if __name__ == "__main__":
    main()
