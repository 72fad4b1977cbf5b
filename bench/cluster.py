"""One shard against three on the local cluster (issue 43, item 5): what one machine can show.

On one machine the nodes share its cores, so a cluster cannot be faster here; this measures what can be: the
engine's latency through a one-shard index and an index of 3 shards x 1 replica on the same cluster, side by
side, by stage (the engine's timings), the requests each query sends, and the store calls apart: the candidate
stage, the exact scores of K documents, the explanations of 10 (the fan-out and the coordinator's merge), and
one shard's share (``preference=_shards:0``). Synthetic documents: random words, hashed unit sentence vectors
(no model), so nothing is encoded but the sources.

    scripts/opensearch-cluster.sh start            # SDR_CLUSTER_PORT=9260
    python bench/cluster.py --url http://127.0.0.1:9260 --docs 1000 --queries 20
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import statistics
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from sdr_search.core.documents import parse_record
from sdr_search.core.settings import SegmentationSettings
from sdr_search.indexer.opensearch import OpenSearchSettings, OpenSearchStore
from sdr_search.indexer.pipeline import index_documents
from sdr_search.indexer.stats_job import refresh_stats
from sdr_search.reranker.engine import MLTSettings, MoreLikeThis, Query
from sdr_search.reranker.retrieval import CandidateStage

logger = logging.getLogger("bench.cluster")


class HashEncoder:
    """One hashed unit vector per sentence (``dim`` values): the cost of the index, not of a model."""

    model_id = "bench-hash"
    cache_tag = "bench-hash|fp32"
    model_dir = Path("/nonexistent")
    settings = SimpleNamespace(model=None)

    def __init__(self, dim: int) -> None:
        self.dim = dim

    def encode(self, sentences, *, progress: bool = False) -> np.ndarray:
        out = np.empty((len(sentences), self.dim), dtype=np.float32)
        for i, s in enumerate(sentences):
            v = np.random.default_rng(int.from_bytes(hashlib.sha256(s.encode()).digest()[:8], "little")).standard_normal(self.dim)
            out[i] = v / np.linalg.norm(v)
        return out


def corpus(n: int, seed: int = 0) -> list[dict]:
    """Documents of 2-6 paragraphs of 2-6 sentences; a third of the sentences come from a shared pool, so
    documents match each other."""
    rng = np.random.default_rng(seed)
    vocab = [f"w{i}" for i in range(2000)]
    shared = [" ".join(rng.choice(vocab, 8)).capitalize() + "." for _ in range(300)]
    docs = []
    for k in range(n):
        paragraphs = []
        for _ in range(int(rng.integers(2, 7))):
            sentences = [shared[int(rng.integers(len(shared)))] if rng.random() < 0.33
                         else " ".join(rng.choice(vocab, int(rng.integers(6, 14)))).capitalize() + "."
                         for _ in range(int(rng.integers(2, 7)))]
            paragraphs.append(" ".join(sentences))
        docs.append({"id": f"doc-{k:05d}", "title": f"Document {k}", "group": k % 4, "paragraphs": paragraphs})
    return docs


@contextmanager
def counting(store: OpenSearchStore, calls: list[str]):
    """Every request the store sends (its transport's one ``call``), by what it is."""
    transport = store._transport
    real = transport.call

    def count(what, fn, **kw):
        calls.append(what)
        return real(what, fn, **kw)

    transport.call = count
    try:
        yield
    finally:
        del transport.call


def ms(samples: list[float]) -> str:
    return f"{statistics.median(samples):7.1f}" if samples else "      -"


def p90(samples: list[float]) -> float:
    return float(np.percentile(samples, 90)) if samples else float("nan")


def plugin_searches(store: OpenSearchStore, source, ids: list[str]) -> dict[str, list[dict]]:
    """The plugin's searches of one query as ``_msearch`` bodies: the exact SDR of ``ids`` (the rescorer), the
    explanations of their first 10, and the candidate stage's per-sentence searches (``sentences`` mode)."""
    from sdr_search.indexer.opensearch.requests import build_sdr_scores_msearch, build_sentence_hits_msearch

    name = store.index_name
    rows = [(source.vectors.vectors, np.diff(source.vectors.par_offsets), source.stats.mu, source.stats.sigma)]
    s = store.settings
    return {"exact SDR of K": build_sdr_scores_msearch(name, rows, ids),
            "explain 10": build_sdr_scores_msearch(name, rows, ids[:10], explain=True),
            "sentence searches": build_sentence_hits_msearch(name, source.vectors.vectors, k=30, ef_search=s.hnsw_ef_search,
                                                             oversample=s.candidate_oversample)}


def took(store: OpenSearchStore, body: list[dict], shard: int | None = None) -> float:
    """The summed ``took`` (ms) of an ``_msearch``'s searches, on shard ``shard`` alone when given."""
    if shard is not None:
        body = [dict(line, preference=f"_shards:{shard}") if "index" in line else line for line in body]
    r = store._os().msearch(body=body)
    return float(sum(item["took"] for item in r["responses"]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:9260", help="a node of the cluster")
    ap.add_argument("--docs", type=int, default=1000)
    ap.add_argument("--queries", type=int, default=20)
    ap.add_argument("--candidates", type=int, default=100, help="K")
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--keep", action="store_true", help="leave the two indices (default: dropped)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    encoder = HashEncoder(args.dim)
    as_given = SegmentationSettings.from_recorded({})
    docs = [parse_record(r, settings=as_given) for r in corpus(args.docs)]
    name = f"sdr-bench-cluster-{uuid.uuid4().hex[:6]}"
    layouts = {"1 shard": (1, 0), "3 shards x 1 replica": (3, 1)}
    stores = {k: OpenSearchStore(args.url, index=f"{name}-{s}", settings=OpenSearchSettings(plugin="on", shards=s, replicas=r))
              for k, (s, r) in layouts.items()}
    try:
        for key, store in stores.items():
            t = time.perf_counter()
            index_documents(store, docs, encoder)
            refresh_stats(store, exact=False, sample_size=2000, seed=0)
            print(f"indexed {args.docs} documents into {key} in {time.perf_counter() - t:.1f} s")
        rng = np.random.default_rng(1)
        sources = [docs[int(i)].id for i in rng.choice(len(docs), args.queries, replace=False)]
        results: dict[str, dict[str, list[float]]] = {}
        top10: dict[str, list[list[str]]] = {}
        for key, store in stores.items():
            r: dict[str, list[float]] = {}
            engine = MoreLikeThis(store=store, encoder=encoder, settings=MLTSettings())
            for method in ("sdr", "hybrid"):
                for i, doc_id in enumerate([sources[0]] + sources):  # the first: warm-up, not counted
                    calls: list[str] = []
                    with counting(store, calls):
                        t = time.perf_counter()
                        got = engine.run(Query(id=doc_id, method=method, candidates=args.candidates, size=10, explain=True))
                        wall = (time.perf_counter() - t) * 1e3
                    if i == 0:
                        continue
                    r.setdefault(f"{method}: total", []).append(wall)
                    r.setdefault(f"{method}: requests", []).append(len(calls))
                    for stage, v in got.timings_ms.items():
                        r.setdefault(f"{method}: {stage}", []).append(v)
                    if method == "sdr":
                        top10.setdefault(key, []).append([h.id for h in got.hits])
            # the store's calls apart: candidate stage, exact scores of K, explanations of 10
            source = engine.source(Query(id=sources[0]))
            pool = None
            for doc_id in sources:
                source = engine.source(Query(id=doc_id))
                t = time.perf_counter()
                pool, _ = CandidateStage(store=store, settings=engine.settings).aggregated(source, 2 * args.candidates, [doc_id])
                r.setdefault("call: candidate stage (pool 2K)", []).append((time.perf_counter() - t) * 1e3)
                t = time.perf_counter()
                store.sdr_scores([(source.vectors, source.stats)], pool[: args.candidates])
                r.setdefault("call: exact SDR of K", []).append((time.perf_counter() - t) * 1e3)
                t = time.perf_counter()
                store.sdr_scores([(source.vectors, source.stats)], pool[:10], explain=True)
                r.setdefault("call: explain 10", []).append((time.perf_counter() - t) * 1e3)
            # the node's own figures (``took``, the coordinator's clock): the whole index, then each shard alone
            # (``preference=_shards:N``): whole - slowest shard = the fan-out and the coordinator's merge
            shards = 1 if key == "1 shard" else 3
            for doc_id in sources:
                source = engine.source(Query(id=doc_id))
                pool, _ = CandidateStage(store=store, settings=engine.settings).aggregated(source, 2 * args.candidates, [doc_id])
                for what, body in plugin_searches(store, source, pool[: args.candidates]).items():
                    r.setdefault(f"took: {what}, index", []).append(took(store, body))
                    if shards > 1:
                        per = [took(store, body, n) for n in range(shards)]
                        r.setdefault(f"took: {what}, slowest shard", []).append(max(per))
            results[key] = r
        keys = list(stores)
        rows = sorted({row for r in results.values() for row in r}, key=lambda x: (x.split(":")[0], x))
        print(f"\n{args.queries} queries by id, K={args.candidates}, {args.docs} documents, dim {args.dim}; median ms "
              "(requests: per query)")
        print(f"{'':38s}" + "".join(f"{k:>24s}" for k in keys))
        for row in rows:
            print(f"{row:38s}" + "".join(f"{ms(results[k].get(row, [])):>24s}" for k in keys))
        same = sum(a == b for a, b in zip(*top10.values()))
        print(f"\nmethod sdr top-10 identical, 3 shards vs 1: {same} of {len(sources)} queries")
    finally:
        if not args.keep:
            for store in stores.values():
                store.drop()
        for store in stores.values():
            store.close()


if __name__ == "__main__":
    main()
