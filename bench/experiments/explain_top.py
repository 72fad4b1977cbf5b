"""What the breakdowns of the hits to present cost the node's exact search (session 52): the same
``sdr_scores`` of a source's candidates with ``explain_top`` 10 and 0, alternating, paired per source.

The engine asks the node for the exact scores of the K candidates and, in the same search, the
breakdowns of the best ``explain_top`` (the hits it presents). Until session 52 the rescorer scored the
window, then read and scored those hits again to explain them (about 9 ms of a 42 ms search on 2.19.1);
now each scoring run keeps the breakdowns of its best hits as it scores them.

For ``--sources`` random documents of the index (by id, as the engine reads them): the candidate
stage once (``sdr_candidates``, the engine's knn_k and aggregation, the best ``--window``), then
``--rounds`` rounds of ``sdr_scores`` of those candidates with ``explain_top`` 0 and 10 (the order
alternates). Prints the median wall time of each way, the paired median difference and the node's
``took`` where the response carries it.

Usage: python bench/experiments/explain_top.py --url http://127.0.0.1:9331 --index sdr-bench-opensearch-plugin
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from sdr_search.indexer.opensearch import OpenSearchStore  # noqa: E402
from sdr_search.reranker.engine import MoreLikeThis, Query  # noqa: E402

logger = logging.getLogger("bench.explain_top")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default=os.environ.get("SDR_OPENSEARCH_URL", "http://127.0.0.1:9200"))
    ap.add_argument("--index", required=True, help="an index written by the store, with statistics")
    ap.add_argument("--sources", type=int, default=15)
    ap.add_argument("--rounds", type=int, default=3, help="rounds per source, each way once per round")
    ap.add_argument("--window", type=int, default=100, help="candidates scored (the engine's K)")
    ap.add_argument("--top", type=int, default=10, help="explain_top of the explained way")
    ap.add_argument("--pause-ms", type=float, default=200, help="pause before each timed search")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("opensearch").setLevel(logging.WARNING)

    store = OpenSearchStore(args.url, index=args.index)
    try:
        if not store.has_plugin():
            raise SystemExit(f"the node at {args.url} has no sdr plugin of this version")
        engine = MoreLikeThis(store=store)
        rng = np.random.default_rng(args.seed)
        ids = list(store.iter_ids())
        picks = [ids[i] for i in rng.choice(len(ids), min(args.sources, len(ids)), replace=False)]
        times: dict[int, list[float]] = {0: [], args.top: []}
        diffs: list[float] = []
        for n, doc_id in enumerate(picks):
            src = engine.source(Query(id=doc_id))
            pool, _ = store.sdr_candidates(src.vectors, engine.settings.knn_k, args.window, stats=src.stats,
                                           aggregation=engine.settings.aggregation, exclude_ids=[doc_id])
            store.sdr_scores([(src.vectors, src.stats)], pool, explain_top=args.top)  # warm
            for r in range(args.rounds):
                took = {}
                for top in ((0, args.top) if (n + r) % 2 == 0 else (args.top, 0)):
                    time.sleep(args.pause_ms / 1000)
                    t0 = time.perf_counter()
                    got = store.sdr_scores([(src.vectors, src.stats)], pool, explain_top=top)
                    took[top] = (time.perf_counter() - t0) * 1000
                    explained = sum(1 for e in got.explanations if e) if got.explanations else 0
                    assert explained == min(top, len(pool)), (top, explained)
                for top, ms in took.items():
                    times[top].append(ms)
                diffs.append(took[args.top] - took[0])
        version = store._os().info()["version"]["number"]
        print(f"OpenSearch {version}: sdr_scores of {args.window} candidates, {len(picks)} sources x {args.rounds} rounds, "
              f"wall ms (median / p90):")
        for top, ts in times.items():
            print(f"  explain_top {top:3d}  {statistics.median(ts):7.1f} / {np.percentile(ts, 90):7.1f}")
        print(f"  paired difference (explain_top {args.top} - 0): median {statistics.median(diffs):+.1f} ms")
    finally:
        store.close()


if __name__ == "__main__":
    main()
