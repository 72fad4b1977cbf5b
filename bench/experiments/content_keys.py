"""A put's real-time read of the stored content keys, from ``_source`` against the stored field
(session 52). Every ``put`` and every batch of ``sdr index`` reads the content keys of the documents it
writes (unchanged ones keep their statistics, or are skipped); on an index with k-NN derived source
(the 3.x default) a ``GET`` / ``_mget`` of ``_source`` rebuilds every sentence vector of each document
before the ``_source`` filter applies. Indices created from this version on store ``content_key`` and
read it without ``_source``.

Copies ``--copy`` documents (with their vectors) of an index written by the store into two new indices,
one with the mapping of before (``content_key`` not stored) and one with today's, on the same node and
with the same derived-source setting; then, for ``--reads`` rounds, reads the content keys of ``--docs``
random documents from each (the order alternates; the answers must be equal). Prints p50 / p99 per way,
per document and the ratio. Both indices are dropped at the end.

Usage: python bench/experiments/content_keys.py --url http://127.0.0.1:9331 --index sdr-bench-opensearch-plugin
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
import uuid
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from sdr_search.indexer.opensearch import OpenSearchStore  # noqa: E402
from sdr_search.indexer.opensearch.requests import layout  # noqa: E402

logger = logging.getLogger("bench.content_keys")


def _copy(source: OpenSearchStore, url: str, ids: list[str], *, stored: bool) -> OpenSearchStore:
    """A new index of the documents ``ids`` of ``source``, with ``content_key`` stored or not."""
    real = layout.load_mapping

    def mapping(name: str):
        body = real(name)
        if name == "index.json" and not stored:
            body["mappings"]["properties"]["content_key"] = {"type": "keyword"}
        return body

    store = OpenSearchStore(url, index=f"sdr-bench-content-keys-{'stored' if stored else 'source'}-{uuid.uuid4().hex[:8]}")
    layout.load_mapping = mapping
    try:
        store.ensure_meta(source.meta())
    finally:
        layout.load_mapping = real
    for k in range(0, len(ids), 20):
        got = [source.get(i) for i in ids[k:k + 20]]
        store.put([(g.document, g.vectors) for g in got])
    return store


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default=os.environ.get("SDR_OPENSEARCH_URL", "http://127.0.0.1:9200"))
    ap.add_argument("--index", required=True, help="an index written by the store (the documents to copy)")
    ap.add_argument("--copy", type=int, default=60, help="documents copied into each new index")
    ap.add_argument("--docs", type=int, default=20, help="documents per read (a batch of a put)")
    ap.add_argument("--reads", type=int, default=10, help="rounds, each way once per round")
    ap.add_argument("--warmup", type=int, default=2, help="rounds left out of the figures")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("opensearch").setLevel(logging.WARNING)  # not a line per request

    source = OpenSearchStore(args.url, index=args.index)
    stores: dict[str, OpenSearchStore] = {}
    try:
        rng = np.random.default_rng(args.seed)
        every = list(source.iter_ids())
        ids = [every[i] for i in rng.choice(len(every), min(args.copy, len(every)), replace=False)]
        stores = {"_source": _copy(source, args.url, ids, stored=False), "stored field": _copy(source, args.url, ids, stored=True)}
        assert not stores["_source"]._indices.read().stored_content_key and stores["stored field"]._indices.read().stored_content_key
        times: dict[str, list[float]] = {w: [] for w in stores}
        for r in range(args.warmup + args.reads):
            pick = [ids[i] for i in rng.choice(len(ids), min(args.docs, len(ids)), replace=False)]
            answers = {}
            for name in (list(stores) if r % 2 == 0 else list(stores)[::-1]):
                t0 = time.perf_counter()
                answers[name] = stores[name].content_keys(pick)
                if r >= args.warmup:
                    times[name].append((time.perf_counter() - t0) * 1000)
            first, second = answers.values()
            assert first == second and len(first) == len(pick), "the two reads disagree"
        version = source._os().info()["version"]["number"]
        derived = source._indices.read().derived_source
        print(f"OpenSearch {version}, derived source {'on' if derived else 'off'}; content keys of {args.docs} documents "
              f"(of {len(ids)} copied from {args.index}), {args.reads} reads each way, ms p50 / p99 (per document):")
        for name, ts in times.items():
            p50, p99 = np.percentile(ts, 50), np.percentile(ts, 99)
            print(f"  {name:13s} {p50:8.1f} / {p99:8.1f}   ({p50 / args.docs:.2f} / document)")
        print(f"  ratio _source / stored field, p50: {np.percentile(times['_source'], 50) / np.percentile(times['stored field'], 50):.1f}x")
    finally:
        for s in stores.values():
            s.drop()
            s.close()
        source.close()


if __name__ == "__main__":
    main()
