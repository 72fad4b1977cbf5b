"""Reading many documents' text from an OpenSearch index: a real-time ``_mget`` against a search of their
ids, side by side on the same documents (session 51). On an index with k-NN derived source (the 3.x
default) a ``GET`` / ``_mget`` rebuilds every sentence vector into each document's ``_source`` before any
``_source`` filter; a search's fetch does not when the vector field is excluded by name. This is why the
store reads the hits to present and the candidates to filter by a search (``Transport.search_sources``).

For each of ``--reads`` rounds, ``--docs`` random documents of the index are read both ways (the order of
the two alternates), with the fields ``documents_of`` reads; the answers must be equal. Prints p50 / p99 per
way and the ratio, with the node's version and whether the index has derived source.

Usage: python bench/experiments/opensearch_reads.py --url http://127.0.0.1:9331 --index sdr-bench-opensearch-plugin
(an index written by the store, e.g. by ``bench/opensearch.py --keep-index``).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from sdr_search.indexer.opensearch import OpenSearchStore  # noqa: E402

logger = logging.getLogger("bench.opensearch_reads")

FIELDS = ["doc_id", "title", "metadata", "paragraphs"]  # what documents_of reads


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default=os.environ.get("SDR_OPENSEARCH_URL", "http://127.0.0.1:9200"))
    ap.add_argument("--index", required=True, help="an index written by the store")
    ap.add_argument("--docs", type=int, default=10, help="documents per read (the hits a page presents)")
    ap.add_argument("--reads", type=int, default=15, help="rounds, each way once per round")
    ap.add_argument("--warmup", type=int, default=3, help="rounds left out of the figures")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("opensearch").setLevel(logging.WARNING)  # not a line per request

    store = OpenSearchStore(args.url, index=args.index)
    try:
        target = store._indices.read()
        transport = store._transport
        ids = list(store.iter_ids())
        version = store._os().info()["version"]["number"]
        rng = np.random.default_rng(args.seed)
        ways = {"_mget": transport.mget_sources, "search": transport.search_sources}
        times: dict[str, list[float]] = {w: [] for w in ways}
        for r in range(args.warmup + args.reads):
            pick = [ids[i] for i in rng.choice(len(ids), min(args.docs, len(ids)), replace=False)]
            answers = {}
            for name in (list(ways) if r % 2 == 0 else list(ways)[::-1]):
                t0 = time.perf_counter()
                answers[name] = ways[name](target.name, pick, FIELDS, "reading documents")
                if r >= args.warmup:
                    times[name].append((time.perf_counter() - t0) * 1e3)
            if answers["_mget"] != answers["search"]:
                raise SystemExit(f"the two ways disagree on {pick}")
        print(f"OpenSearch {version}, index {target.name} (derived source {target.derived_source}), "
              f"{len(ids):,} documents; {args.reads} reads of {args.docs} random documents, fields {FIELDS}")
        for name, t in times.items():
            print(f"  {name:>7}: p50 {np.median(t):7.1f} ms   p99 {np.percentile(t, 99):7.1f} ms")
        print(f"  _mget / search p50: {np.median(times['_mget']) / np.median(times['search']):.2f}x")
    finally:
        store.close()


if __name__ == "__main__":
    main()
