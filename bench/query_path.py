"""Latency of a raw-text "more like this" query through the engine, on an existing store.

The refactor check of issue 23 ("the refactor must not cost latency"): new-text sources (whole
wiki articles the store does not hold, ``--min-sentences`` to ``--max-sentences`` sentences) are
sent through the engine's one query entry point, encoder included, with the default method
(hybrid) and with ``sdr``. Prints p50 / p99 of the whole call and of its parts.

The store is the 1.14M-sentence wiki latency store that ``bench/two_stage.py`` builds::

    python bench/two_stage.py --workdir /var/tmp/sdr-bench --reuse --latency-only --skip-irled-latency \\
        --skip-knn-variants
    python bench/query_path.py --store /var/tmp/sdr-bench/tiled-wiki
"""

from __future__ import annotations

import argparse
import itertools
import logging
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", type=Path, required=True)
    ap.add_argument("--queries", type=int, default=30)
    ap.add_argument("--skip-articles", type=int, default=1000, help="articles held by the store (not used as sources)")
    ap.add_argument("--min-sentences", type=int, default=60)
    ap.add_argument("--max-sentences", type=int, default=250)
    ap.add_argument("--methods", nargs="*", default=["hybrid", "sdr"])
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)

    from sdr_search import Query, open_store
    from sdr_search.core.documents import read_documents
    from sdr_search.core.encoder import SentenceEncoder
    from sdr_search.reranker.engine import MoreLikeThis

    docs = read_documents(DATA / "wiki" / "articles-00.jsonl.gz")
    texts = []
    for doc in itertools.islice(docs, args.skip_articles, None):
        if args.min_sentences <= doc.n_sentences <= args.max_sentences:
            texts.append("\n\n".join(" ".join(p) for p in doc.paragraphs))
        if len(texts) == args.queries:
            break
    with open_store(args.store) as store:
        engine = MoreLikeThis(store=store, encoder=SentenceEncoder())
        n = store.counts()
        print(f"store {args.store}: {n['documents']} documents, {n['sentences']} sentences; "
              f"{len(texts)} raw-text sources of {args.min_sentences}-{args.max_sentences} sentences")
        engine.run(Query(text=texts[0], size=10))  # warm up: model load, memory maps
        print(f"{'':>22} {'p50 ms':>8} {'p99 ms':>8} {'mean ms':>8}")
        for method in args.methods:
            lat, parts = [], []
            for text in texts:
                t = time.perf_counter()
                res = engine.run(Query(text=text, size=10, method=method))
                lat.append((time.perf_counter() - t) * 1e3)
                parts.append(res.timings_ms)
            lat = np.array(lat)
            print(f"{method + ' (whole call)':>22} {np.percentile(lat, 50):8.1f} {np.percentile(lat, 99):8.1f} {lat.mean():8.1f}")
            for part in sorted({k for p in parts for k in p}):
                v = np.array([p.get(part, 0.0) for p in parts])
                print(f"{'  ' + part:>22} {np.percentile(v, 50):8.1f} {np.percentile(v, 99):8.1f} {v.mean():8.1f}")


if __name__ == "__main__":
    main()
