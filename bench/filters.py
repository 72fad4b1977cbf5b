"""Filtered "more like this": the filter inside the candidate stage next to over-fetch-then-filter.

On an existing embedded store, random subsets of the documents stand in for the documents a
metadata filter matches (``--selectivity``, default 1 %, 10 %, 30 %). For indexed sources (not in
the subset), each query is run three ways, method sdr, K = 100:

- ``in-knn``: the store's filtered k-NN (``capabilities.filtered_knn``: brute force over the
  matching rows up to ``SDR_STORE_FILTER_EXACT_ROWS``, else HNSW with an ID selector);
- ``over-fetch``: the engine's fallback for stores without it (candidates over-fetched
  ``SDR_FILTER_OVERSAMPLE`` x K, then filtered);
- ``exhaustive``: exact SDR over every matching document (the reference).

Prints per selectivity: the fraction of queries that got ``size`` hits, top-10 fidelity to the
exhaustive ranking, and p50 / p99 latency (ms).

    python bench/filters.py --store /var/tmp/sdr-bench/tiled-wiki [--queries 20]

With ``--opensearch URL``, the same three ways on an OpenSearch index (``--index``, default
``sdr-bench-filters``) whose filter is a real metadata filter, applied by the node inside the
nested k-NN query (``in-knn``). A missing index is filled first with the first ``--copy-docs``
documents of ``--store`` (vectors, statistics and reference sample copied; metadata
``{"bucket": position % 100}``), so a filter on ``bucket`` matches whole percents of them.

    python bench/filters.py --store /var/tmp/sdr-bench/tiled-wiki --opensearch http://127.0.0.1:9260 --copy-docs 1000
"""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", type=Path, required=True)
    ap.add_argument("--queries", type=int, default=20)
    ap.add_argument("--selectivity", type=float, nargs="+", default=[0.01, 0.1, 0.3])
    ap.add_argument("--size", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--opensearch", metavar="URL", help="measure on this OpenSearch node instead (see above)")
    ap.add_argument("--index", default="sdr-bench-filters")
    ap.add_argument("--copy-docs", type=int, default=1000)
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if args.opensearch:
        return opensearch_main(args)

    from sdr_search.indexer.embedded import EmbeddedStore
    from sdr_search.indexer.store import StoreCapabilities
    from sdr_search.reranker.engine import MLTSettings, MoreLikeThis, Query

    rng = np.random.default_rng(args.seed)
    with EmbeddedStore(args.store) as store:
        ids = list(store.iter_ids())
        n = store.counts()
        print(f"store {args.store}: {n['documents']} documents, {n['sentences']} sentences; method sdr, K=100, "
              f"size {args.size}, {args.queries} indexed sources per selectivity")
        print(f"{'matching':>9} {'way':<11} {'full':>6} {'top-10':>7} {'p50 ms':>8} {'p99 ms':>8}")
        settings = MLTSettings(method="sdr", candidates=100)
        engine = MoreLikeThis(store=store, settings=settings)
        engine.run(Query(id=ids[0], size=args.size))  # warm up
        for sel in args.selectivity:
            subset = [ids[i] for i in rng.choice(len(ids), size=max(1, int(sel * len(ids))), replace=False)]
            members = set(subset)
            store.ids_matching = lambda flt, limit=None, _s=subset: list(_s)[:limit]  # the stand-in filter
            sources = [i for i in rng.permutation(ids) if i not in members][: args.queries]
            truth: dict = {}
            for way in ("exhaustive", "in-knn", "over-fetch"):
                type(store).capabilities = StoreCapabilities(
                    metadata_lookup=True, lexical_refresh=True, cheap_centroids=True, filtered_knn=way != "over-fetch")
                if way == "over-fetch":  # the engine filters by metadata: answer from the subset
                    store.metadata_of = lambda part, _m=members: {i: ({"in": True} if i in _m else {}) for i in part}
                _measure(engine, way, sources, subset, {"in": True}, args.size, truth)
            del store.metadata_of
        type(store).capabilities = StoreCapabilities(metadata_lookup=True, lexical_refresh=True, cheap_centroids=True,
                                                     filtered_knn=True)


def _measure(engine, way: str, sources, subset: list, flt: dict, size: int, truth: dict) -> tuple:
    """One row: each source asked one way (``exhaustive``: exact SDR over ``subset``, recorded in
    ``truth``; otherwise with the filter ``flt``); the share of queries with ``size`` hits (or all
    of ``subset``), the top-10 agreement with ``truth``, p50 and p99 ms. Printed, and returned."""
    from sdr_search.reranker.engine import Query

    lat, full, agree = [], [], []
    for src in sources:
        t = time.perf_counter()
        if way == "exhaustive":
            res = engine.run(Query(id=src, size=size, candidate_ids=subset, candidates=len(subset)))
        else:
            res = engine.run(Query(id=src, size=size, filter=flt))
        lat.append((time.perf_counter() - t) * 1e3)
        got = [h.id for h in res.hits]
        if way == "exhaustive":
            truth[src] = got
        full.append(len(got) == min(size, len(subset)))
        agree.append(len(set(got) & set(truth[src])) / max(1, len(truth[src])))
    row = (np.mean(full), np.mean(agree), np.percentile(lat, 50), np.percentile(lat, 99))
    print(f"{len(subset):>9} {way:<11} {row[0]:6.2f} {row[1]:7.3f} {row[2]:8.1f} {row[3]:8.1f}")
    return row


def _copy_into(store, source, n: int) -> None:
    """The first ``n`` documents of the embedded ``source``, with metadata ``{"bucket": i % 100}``,
    their statistics and the reference sample, written into the OpenSearch ``store``."""
    import dataclasses

    ids = list(source.iter_ids())[:n]
    store.ensure_meta(source.meta())
    stats = {}
    for a in range(0, len(ids), 50):
        batch = [source.get(i) for i in ids[a : a + 50]]
        store.put([(dataclasses.replace(d.document, metadata={"bucket": (a + k) % 100}), d.vectors)
                   for k, d in enumerate(batch)])
        stats.update({d.document.id: d.stats for d in batch if d.stats is not None})
    store.set_reference(source.reference())
    store.write_stats(stats, mode="sampled", sample_size=None, seed=None)


def opensearch_main(args) -> None:
    from sdr_search.indexer.embedded import EmbeddedStore
    from sdr_search.indexer.opensearch import OpenSearchSettings, OpenSearchStore
    from sdr_search.indexer.store import StoreCapabilities
    from sdr_search.reranker.engine import MLTSettings, MoreLikeThis, Query

    rng = np.random.default_rng(args.seed)
    store = OpenSearchStore(args.opensearch, index=args.index, settings=OpenSearchSettings(replicas=0))
    if store.meta() is None:
        t = time.perf_counter()
        with EmbeddedStore(args.store) as source:
            _copy_into(store, source, args.copy_docs)
        print(f"copied {args.copy_docs} documents of {args.store} into {args.index} in {time.perf_counter() - t:.0f} s")
    ids = list(store.iter_ids())
    n = store.counts()
    print(f"OpenSearch {args.opensearch} index {args.index}: {n['documents']} documents, {n['sentences']} sentences; "
          f"method sdr, K=100, size {args.size}, {args.queries} indexed sources per selectivity")
    print(f"{'matching':>9} {'way':<11} {'full':>6} {'top-10':>7} {'p50 ms':>8} {'p99 ms':>8}")
    engine = MoreLikeThis(store=store, settings=MLTSettings(method="sdr", candidates=100))
    engine.run(Query(id=ids[0], size=args.size))  # warm up
    for sel in args.selectivity:
        flt = {"bucket": list(range(max(1, round(sel * 100))))}
        subset = store.ids_matching(flt)
        members = set(subset)
        sources = [i for i in rng.permutation(ids) if i not in members][: args.queries]
        truth = {}
        for way in ("exhaustive", "in-knn", "over-fetch"):
            store.capabilities = StoreCapabilities(metadata_lookup=True, filtered_knn=way != "over-fetch")
            _measure(engine, way, sources, subset, flt, args.size, truth)
        del store.capabilities
    store.close()


if __name__ == "__main__":
    main()
