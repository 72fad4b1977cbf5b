"""Sampled vs exact normalisation statistics on the IRLeD dev split.

For every dev query, the whole corpus is ranked with exact SDR three ways: statistics over every
corpus paragraph (exact), and over a reference sample of R paragraphs for each R (several seeds).
Printed side by side: the mean / min overlap of each sampled top-10 with the exact top-10, the
mean absolute deviation of mu and sigma, and MAP of each variant.

Uses the embedding cache (run ``sdr eval`` once first, or let this script encode).

Usage: python bench/stats_sampled.py [--sizes 1000,5000] [--seeds 0,1,2]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sdr_search.core.cache import EmbeddingCache  # noqa: E402
from sdr_search.core.documents import read_documents  # noqa: E402
from sdr_search.core.embed import embed_corpus, embed_documents  # noqa: E402
from sdr_search.core.encoder import SentenceEncoder  # noqa: E402
from sdr_search.core.metrics import evaluate, read_qrels  # noqa: E402
from sdr_search.core.scoring import document_max, paragraph_scores, rank, sdr_scores, stats_from_paragraph_scores  # noqa: E402
from sdr_search.core.settings import CacheSettings  # noqa: E402
from sdr_search.core.stats import draw_reference_sample, sampled_stats  # noqa: E402


def main() -> None:
    data = ROOT.parent / "shared" / "data" / "irled"
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", type=Path, default=data / "corpus.jsonl.gz")
    ap.add_argument("--queries", type=Path, default=data / "queries-dev.jsonl.gz")
    ap.add_argument("--qrels", type=Path, default=data / "qrels-dev.txt")
    ap.add_argument("--sizes", default="1000,5000")
    ap.add_argument("--seeds", default="0,1,2")
    args = ap.parse_args()

    encoder = SentenceEncoder()
    cache = EmbeddingCache(CacheSettings().cache_dir / "embeddings.sqlite")
    corpus_docs = list(read_documents(args.corpus))
    query_docs = list(read_documents(args.queries))
    corpus = embed_corpus(corpus_docs, encoder, cache=cache, progress=True)
    queries = [v for _, v in embed_documents(query_docs, encoder, cache=cache)]
    qrels = read_qrels(args.qrels)
    ids = list(corpus.ids)
    sizes = [int(s) for s in args.sizes.split(",")]
    seeds = [int(s) for s in args.seeds.split(",")]
    samples = {(r, s): draw_reference_sample(corpus, r, seed=s) for r in sizes for s in seeds}

    runs: dict[object, dict[str, list[str]]] = {"exact": {}}
    overlap: dict[object, list[float]] = {k: [] for k in samples}
    dev_mu: dict[object, list[float]] = {k: [] for k in samples}
    dev_sigma: dict[object, list[float]] = {k: [] for k in samples}
    t_exact = t_sampled = 0.0
    for q, qv in zip(query_docs, queries):
        t = time.perf_counter()
        P = paragraph_scores(qv, corpus)
        exact = stats_from_paragraph_scores(P)
        best = document_max(P, corpus.doc_par_offsets)
        order = rank(ids, sdr_scores(best, exact))
        t_exact += time.perf_counter() - t
        runs["exact"][q.id] = [ids[i] for i in order]
        top = set(order[:10])
        for key, sample in samples.items():
            t = time.perf_counter()
            st = sampled_stats(qv, corpus, sample)
            t_sampled += time.perf_counter() - t
            o = rank(ids, sdr_scores(best, st))
            runs.setdefault(key, {})[q.id] = [ids[i] for i in o]
            overlap[key].append(len(top & set(o[:10])) / 10)
            dev_mu[key].append(float(np.mean(np.abs(st.mu - exact.mu))))
            dev_sigma[key].append(float(np.mean(np.abs(st.sigma - exact.sigma) / exact.sigma)))

    n_par = corpus.n_paragraphs
    print(f"corpus: {corpus.n_docs} docs, {n_par} paragraphs, {corpus.n_sentences} sentences; {len(query_docs)} queries")
    print(f"exact stats+ranking: {t_exact / len(query_docs) * 1000:.0f} ms/query; "
          f"sampled stats alone: {t_sampled / len(query_docs) / len(samples) * 1000:.0f} ms/query")
    print(f"{'stats':>22} {'top10 overlap mean':>19} {'min':>5} {'|mu-mu*|':>9} {'|sd-sd*|/sd*':>13} {'MAP':>7} {'nDCG@10':>8}")
    m = evaluate(runs["exact"], qrels)
    print(f"{'exact (all ' + str(n_par) + ')':>22} {1.0:19.3f} {1.0:5.2f} {0.0:9.4f} {0.0:13.4f} {m['MAP']:7.4f} {m['nDCG@10']:8.4f}")
    for key in samples:
        m = evaluate(runs[key], qrels)
        r, s = key
        print(f"{f'sampled R={r} seed={s}':>22} {np.mean(overlap[key]):19.3f} {np.min(overlap[key]):5.2f} "
              f"{np.mean(dev_mu[key]):9.4f} {np.mean(dev_sigma[key]):13.4f} {m['MAP']:7.4f} {m['nDCG@10']:8.4f}")


if __name__ == "__main__":
    main()
