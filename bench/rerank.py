"""Benchmark exact SDR reranking and exact corpus statistics on random unit vectors.

Reranking: a 200-sentence source (10 paragraphs of 20) against K candidates of 200 sentences
each (paragraphs of 1..40 sentences). Prints, side by side, the median time of the bare matrix
product ``source @ candidate_sentences.T`` (float32), of the same product transposed (the
orientation ``score_candidates`` uses), of ``score_candidates`` (the product plus the SDR
reductions), the ratio to the bare product (target <= 1.5), the ratio to the faster of the two
bare products, and ``score_documents`` (the engine's rerank: the candidates given one document at
a time, as views, scored in cache-sized blocks).

Statistics: ``exact_corpus_stats`` on a synthetic corpus, in paragraphs per second.

    python bench/rerank.py [--ks 100 1000] [--stats-docs 500] ...
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Callable

import numpy as np

from sdr_search.core.scoring import NormStats, score_candidates, score_documents
from sdr_search.core.stats import exact_corpus_stats
from sdr_search.core.vectors import CorpusVectors, DocVectors

RATIO_TARGET = 1.5


def unit_rows(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    x = rng.standard_normal((n, dim), dtype=np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x


def random_sizes(rng: np.random.Generator, total: int, low: int, high: int) -> list[int]:
    """Paragraph sizes drawn from [low, high] summing to ``total`` (the last one truncated)."""
    sizes: list[int] = []
    while total > 0:
        size = min(total, int(rng.integers(low, high + 1)))
        sizes.append(size)
        total -= size
    return sizes


def make_corpus(rng: np.random.Generator, n_docs: int, sizes_of: Callable[[], list[int]], dim: int) -> CorpusVectors:
    all_sizes = [sizes_of() for _ in range(n_docs)]
    par_sizes = np.array([s for sizes in all_sizes for s in sizes], dtype=np.int64)
    par_offsets = np.concatenate([[0], np.cumsum(par_sizes)])
    doc_par_offsets = np.concatenate([[0], np.cumsum([len(sizes) for sizes in all_sizes])])
    vectors = unit_rows(rng, int(par_offsets[-1]), dim)
    return CorpusVectors([f"doc{k:06d}" for k in range(n_docs)], vectors, par_offsets, doc_par_offsets)


def interleaved_medians(fns: list[Callable[[], object]], repeats: int) -> list[float]:
    """Median wall time of each function, run alternately (after one warm-up each)."""
    for fn in fns:
        fn()
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeats):
        for fn, bucket in zip(fns, times):
            start = time.perf_counter()
            fn()
            bucket.append(time.perf_counter() - start)
    return [statistics.median(bucket) for bucket in times]


def bench_rerank(args: argparse.Namespace, rng: np.random.Generator) -> bool:
    source_vectors = unit_rows(rng, 200, args.dim)
    source = DocVectors(source_vectors, np.arange(0, 201, 20))
    stats = NormStats(rng.uniform(0.2, 0.4, source.n_paragraphs), rng.uniform(0.02, 0.1, source.n_paragraphs))
    print(f"rerank: source {source.n_sentences} sentences / {source.n_paragraphs} paragraphs, dim {args.dim}, "
          f"median of {args.repeats}, block_sentences {args.block_sentences}")
    print(f"{'K':>6} {'sentences':>10} {'paragraphs':>10} {'bare (s)':>10} {'bare^T (s)':>10} {'sdr (s)':>10} "
          f"{'ratio':>7} {'vs best':>7} {'per-doc (s)':>11}")
    ok = True
    for k in args.ks:
        candidates = make_corpus(rng, k, lambda: random_sizes(rng, 200, *args.paragraph_sizes), args.dim)
        cand_vectors = candidates.vectors
        docs = [candidates.doc(d) for d in range(candidates.n_docs)]
        bare, bare_t, sdr, per_doc = interleaved_medians(
            [
                lambda: source_vectors @ cand_vectors.T,
                lambda: cand_vectors @ source_vectors.T,  # the orientation score_candidates uses
                lambda: score_candidates(source, candidates, stats, block_sentences=args.block_sentences),
                lambda: score_documents(source, docs, stats),
            ],
            args.repeats,
        )
        ratio = sdr / bare
        ok &= ratio <= RATIO_TARGET
        print(f"{k:>6} {candidates.n_sentences:>10} {candidates.n_paragraphs:>10} {bare:>10.4f} {bare_t:>10.4f} "
              f"{sdr:>10.4f} {ratio:>7.2f} {sdr / min(bare, bare_t):>7.2f} {per_doc:>11.4f}"
              f"{'' if ratio <= RATIO_TARGET else '  > target'}")
    return ok


def bench_stats(args: argparse.Namespace, rng: np.random.Generator) -> None:
    sizes = [args.stats_sentences] * args.stats_paragraphs
    corpus = make_corpus(rng, args.stats_docs, lambda: sizes, args.dim)
    start = time.perf_counter()
    exact_corpus_stats(corpus, block_docs=args.block_docs, block_sentences=args.block_sentences)
    elapsed = time.perf_counter() - start
    flops = 2.0 * corpus.n_sentences**2 * args.dim
    print(f"exact_corpus_stats: {corpus.n_docs} docs x {args.stats_paragraphs} paragraphs x "
          f"{args.stats_sentences} sentences ({corpus.n_paragraphs} paragraphs, {corpus.n_sentences} sentences): "
          f"{elapsed:.2f} s, {corpus.n_paragraphs / elapsed:,.0f} paragraphs/s, {flops / elapsed / 1e9:.0f} GFLOP/s "
          f"in the products")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--ks", type=int, nargs="+", default=[100, 1000], help="numbers of candidates")
    parser.add_argument("--paragraph-sizes", type=int, nargs=2, default=[1, 40], metavar=("LOW", "HIGH"),
                        help="candidate paragraph sizes are drawn uniformly from [LOW, HIGH]")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--block-sentences", type=int, default=65536)
    parser.add_argument("--block-docs", type=int, default=64)
    parser.add_argument("--stats-docs", type=int, default=500, help="0 skips the statistics benchmark")
    parser.add_argument("--stats-paragraphs", type=int, default=20)
    parser.add_argument("--stats-sentences", type=int, default=5)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rng = np.random.default_rng(args.seed)
    ok = bench_rerank(args, rng)
    if args.stats_docs > 0:
        bench_stats(args, rng)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
