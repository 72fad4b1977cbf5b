"""SDR's candidate stage on an OpenSearch node, done four ways, side by side on the same sources
(issue 33, item 2): candidate recall against today's probes, top-10 fidelity to exhaustive SDR after
the exact rerank of the candidates, and latency.

Ways (per source: ``more_like_this`` by id, the engine's knn_k = 30 and weighted-sum aggregation):

* ``embedded``: the embedded store's nested k-NN (one batched faiss search) and the aggregation;
* ``msearch``: today's node path, one nested k-NN query per source sentence (``_msearch``, 100 per
  request) and the aggregation in Python (``sentence_knn`` + ``aggregate_hits``): the reference the
  recall is counted against;
* ``plugin-documents``: the sdr plugin's ``sdr_candidates`` query, each sentence's search the same
  nested k-NN (diversified: k distinct documents, beam max(k, ef_search) documents), all on the node in
  one request;
* ``plugin-sentences``: ``sdr_candidates`` with the k-NN of ``k x oversample`` sentences per source
  sentence, each document kept once (the embedded store's semantics).

For each way and pool size P (``--pools``, default 100 and 200): recall = |its top P ∩ msearch's top P|
/ P, and fidelity = the exhaustive SDR top-10 found in the top-10 of the exact SDR of its P candidates
(exact scores from the embedded store's vectors, so only the candidates differ). Exhaustive SDR uses
every document and the source's statistics. The node's index (with the plugin: vectors once) is
written from ``--store`` unless ``--keep-index`` finds it there; ``--force-merge`` merges it first.

Usage: python bench/experiments/opensearch_candidates.py --url http://127.0.0.1:9221 --store DIR [--sources 30]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from opensearch import copy_stats, force_merge, read_corpus, timed_puts, wait_for_merges  # noqa: E402
from two_stage import exhaustive_top  # noqa: E402

from sdr_search.core.scoring import document_best, rank, sdr_scores, top_of  # noqa: E402
from sdr_search.indexer.embedded import EmbeddedStore  # noqa: E402
from sdr_search.indexer.opensearch import OpenSearchSettings, OpenSearchStore  # noqa: E402
from sdr_search.reranker.candidates import aggregate_hits  # noqa: E402
from sdr_search.reranker.engine import MLTSettings, MoreLikeThis, Query  # noqa: E402

logger = logging.getLogger("bench.opensearch_candidates")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default=os.environ.get("SDR_OPENSEARCH_URL", "http://127.0.0.1:9200"))
    ap.add_argument("--index", default="sdr-bench-candidates")
    ap.add_argument("--store", type=Path, required=True, help="embedded store whose documents fill the node's index")
    ap.add_argument("--docs", type=int, default=None)
    ap.add_argument("--sources", type=int, default=30)
    ap.add_argument("--pools", type=int, nargs="+", default=[100, 200])
    ap.add_argument("--oversample", type=int, nargs="+", default=[4])
    ap.add_argument("--force-merge", action="store_true")
    ap.add_argument("--keep-index", action="store_true")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("opensearch").setLevel(logging.ERROR)

    emb = EmbeddedStore(args.store, read_only=True)
    node = OpenSearchStore(args.url, index=args.index, settings=OpenSearchSettings(plugin="on"))
    if not (args.keep_index and node.meta() is not None):
        corpus = read_corpus(emb, args.docs)
        node.drop()
        node.ensure_meta(corpus.meta)
        timed_puts(node, corpus.items, 32, "node")
        wait_for_merges(node, node.index_name)
        copy_stats(corpus, node)
    if args.force_merge:
        logger.info("force merge: %.0f s", force_merge(node, node.index_name, 1))
    segments = node._os().indices.stats(index=node.index_name, metric="segments")["_all"]["primaries"]["segments"]["count"]
    off = OpenSearchStore(args.url, index=node.index_name, settings=OpenSearchSettings(plugin="off"))
    ways_cfg: dict[str, OpenSearchStore] = {"plugin-documents": OpenSearchStore(
        args.url, index=node.index_name, settings=OpenSearchSettings(plugin="on", candidate_search="documents"))}
    for n in args.oversample:
        ways_cfg[f"plugin-sentences-x{n}"] = OpenSearchStore(
            args.url, index=node.index_name, settings=OpenSearchSettings(plugin="on", candidate_search="sentences",
                                                                         candidate_oversample=n))
    engine = MoreLikeThis(store=emb, settings=MLTSettings(method="sdr"))
    knn_k, aggregation = engine.settings.knn_k, engine.settings.aggregation
    every = emb.all_vectors()
    index_of = {d: i for i, d in enumerate(every.ids)}
    rng = np.random.default_rng(1)
    lengths = {d: every.doc(i).n_sentences for i, d in enumerate(every.ids)}
    pool_ids = [d for d in every.ids if 150 <= lengths[d] <= 250]
    picks = [pool_ids[i] for i in rng.choice(len(pool_ids), size=min(args.sources, len(pool_ids)), replace=False)]
    biggest = max(args.pools)

    def python_way(store):
        def run(src):
            hits = store.sentence_knn(src.vectors.vectors, knn_k, exclude_ids=[src.indexed_id])
            return top_of(*aggregate_hits(hits, src.vectors.par_offsets, method=aggregation, stats=src.stats), biggest)[0]
        return run

    def plugin_way(store):
        def run(src):
            return store.sdr_candidates(src.vectors, knn_k, biggest, stats=src.stats, aggregation=aggregation,
                                        exclude_ids=[src.indexed_id])[0]
        return run

    ways = {"embedded": python_way(emb), "msearch": python_way(off), **{k: plugin_way(s) for k, s in ways_cfg.items()}}
    for run in ways.values():  # warm up
        run(engine.source(Query(id=picks[0], size=10)))
    ms: dict[str, list[float]] = defaultdict(list)
    recall: dict[tuple[str, int], list[float]] = defaultdict(list)
    fid: dict[tuple[str, int], list[float]] = defaultdict(list)
    for n, doc_id in enumerate(picks, 1):
        src = engine.source(Query(id=doc_id, size=10))
        truth = set(exhaustive_top(engine, src, every))
        got = {}
        for name, run in ways.items():
            t = time.perf_counter()
            got[name] = run(src)
            ms[name].append((time.perf_counter() - t) * 1e3)
        for name, ids in got.items():
            for p in args.pools:
                ref = set(got["msearch"][:p])
                recall[name, p].append(len(set(ids[:p]) & ref) / max(1, len(ref)))
                cand = ids[:p]
                docs = [every.doc(index_of[i]) for i in cand]
                scores = sdr_scores(document_best(src.vectors, docs), src.stats)
                top = {cand[i] for i in rank(cand, scores)[:10]}
                fid[name, p].append(len(top & truth) / max(1, len(truth)))
        logger.info("source %d/%d (%d sentences): %s", n, len(picks), src.vectors.n_sentences,
                    ", ".join(f"{k} {ms[k][-1]:.0f} ms" for k in ways))
    load = os.getloadavg()
    print(f"\n== candidate stage, {len(picks)} sources by id (150-250 sentences), knn_k {knn_k}, {aggregation}, node index "
          f"{segments} segment(s), {every.n_docs} documents / {len(every.vectors):,} sentences; load {load[0]:.1f} "
          f"{load[1]:.1f} {load[2]:.1f}")
    print(f"{'':24} {'ms p50':>8} {'ms p99':>8}" + "".join(f" {'recall@' + str(p):>10} {'fid@' + str(p):>8}" for p in args.pools))
    out: dict[str, Any] = {"segments": segments, "load": load, "ways": {}}
    for name in ways:
        row = {"ms_p50": float(np.percentile(ms[name], 50)), "ms_p99": float(np.percentile(ms[name], 99))}
        line = f"{name:24} {row['ms_p50']:8.0f} {row['ms_p99']:8.0f}"
        for p in args.pools:
            row[f"recall@{p}"] = float(np.mean(recall[name, p]))
            row[f"fidelity@{p}"] = float(np.mean(fid[name, p]))
            row[f"fidelity_min@{p}"] = float(np.min(fid[name, p]))
            line += f" {row[f'recall@{p}']:10.3f} {row[f'fidelity@{p}']:8.3f}"
        out["ways"][name] = row
        print(line)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    if not args.keep_index:
        node.drop()


if __name__ == "__main__":
    main()
