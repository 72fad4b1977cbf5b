"""Candidate graph codes for the embedded store (issue 44): FAISS HNSW over float32, fp16 and sq8
codes, IVF1024 over SQ8 and PQ48, on the same slice of rotated copies of real vectors.

The slice: the base store's sentence vectors (``--base``; default the 200-article wiki demo store,
38,599 MiniLM vectors) in ``--copies`` copies, each rotated as ``bench/scale.py`` rotates them.
For each index: training and build time (all cores), bytes per row of the serialised index, and for
300 query rows drawn from the slice the time per row and recall@120 of the sentence hits against
exact inner product (120 = the engine's knn_k 30 x oversample 4), at two search widths (HNSW
efSearch, IVF nprobe); "refine2x": 240 hits re-scored exactly and cut to 120, as the store does
with the vector file's float rows. Prints one line per index.
Usage: python bench/experiments/ann_codes.py --copies 8
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.scale import BASE, rotation  # noqa: E402
from sdr_search.indexer.embedded.ann import faiss_module  # noqa: E402

K = 120


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base", type=Path, default=BASE)
    p.add_argument("--copies", type=int, default=8)
    p.add_argument("--only", nargs="*", help="index names to build (default: all)")
    args = p.parse_args()
    faiss = faiss_module()
    dim = 384
    base = np.fromfile(args.base / "vectors.float32", dtype="<f4").reshape(-1, dim)
    mean = base.mean(axis=0)
    X = np.concatenate([base @ rotation(dim, mean, c) for c in range(args.copies)])
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    n = X.shape[0]
    rng = np.random.default_rng(0)
    q = X[rng.choice(n, 300, replace=False)]
    truth = np.argsort(-(q @ X.T), axis=1)[:, :K]
    print(f"{n} rows, dim {dim}, {faiss.omp_get_max_threads()} threads")

    def recall(found: np.ndarray) -> float:
        return float(np.mean([len(set(a) & set(b)) / K for a, b in zip(found, truth)]))

    def hnsw(qtype=None):
        ix = (faiss.IndexHNSWFlat(dim, 16, faiss.METRIC_INNER_PRODUCT) if qtype is None
              else faiss.IndexHNSWSQ(dim, qtype, 16, faiss.METRIC_INNER_PRODUCT))
        ix.hnsw.efConstruction = 100
        return ix

    SQ = faiss.ScalarQuantizer
    indexes = {
        "hnsw-flat": lambda: hnsw(),
        "hnsw-sq8": lambda: hnsw(SQ.QT_8bit),
        "hnsw-fp16": lambda: hnsw(SQ.QT_fp16),
        "ivf1024-sq8": lambda: faiss.IndexIVFScalarQuantizer(faiss.IndexFlatIP(dim), dim, 1024, SQ.QT_8bit,
                                                             faiss.METRIC_INNER_PRODUCT),
        "ivf1024-pq48": lambda: faiss.IndexIVFPQ(faiss.IndexFlatIP(dim), dim, 1024, 48, 8, faiss.METRIC_INNER_PRODUCT),
    }
    for name, make in indexes.items():
        if args.only and name not in args.only:
            continue
        ix = make()
        t = time.time()
        if not ix.is_trained:
            ix.train(X[rng.choice(n, min(n, 65_536), replace=False)])
        t_train = time.time() - t
        for a in range(0, n, 32_768):
            ix.add(X[a : a + 32_768])
        t_build = time.time() - t
        size = faiss.serialize_index(ix).size
        cells = []
        for width in ([100, 240] if name.startswith("hnsw") else [16, 32, 64]):
            if name.startswith("hnsw"):
                params = faiss.SearchParametersHNSW()
                params.efSearch = max(width, K)
            else:
                params = faiss.SearchParametersIVF()
                params.nprobe = width
            t = time.time()
            _, found = ix.search(q, K, params=params)
            ms = (time.time() - t) / len(q) * 1e3
            _, wide = ix.search(q, 2 * K, params=params)
            exact = np.einsum("qd,qkd->qk", q, X[np.maximum(wide, 0)])
            refined = np.take_along_axis(wide, np.argsort(-exact, axis=1)[:, :K], axis=1)
            cells.append(f"{width}: {ms:.2f} ms/row recall@{K} {recall(found):.4f} refine2x {recall(refined):.4f}")
        print(f"{name}: train {t_train:.1f}s build {t_build:.1f}s ({n / t_build:.0f} rows/s) "
              f"{size / 1e6:.0f} MB ({size / n:.0f} B/row) | " + " | ".join(cells), flush=True)


if __name__ == "__main__":
    main()
