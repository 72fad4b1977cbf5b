"""Candidate aggregation with *exact* nested k-NN: how much of the two-stage fidelity gap is the
aggregation itself, not the ANN index.

For every IRLeD dev query (new text), with statistics over every corpus paragraph:

- the exhaustive SDR top-10 (the truth);
- ``B[c, s]``: the best cosine of source sentence ``s`` to any sentence of document ``c``, for
  every document (what a perfect nested k-NN returns, before truncation to the top k);
- each aggregation of :mod:`sdr_search.reranker.candidates` (the engine's own code) on the exact top-``k``
  documents per source sentence (``+ties``: with every document tied at the k-th place, what the
  embedded store's twin expansion gives for identical sentences), and a reference:
  ``relaxed-full`` (SDR with the paragraph max relaxed to a document max, on the complete ``B``:
  no truncation at all).
- ``+prerank x2``: the engine's centroid pre-rank (:mod:`sdr_search.reranker.prerank`): the top 2K by
  weighted-sum narrowed to K by the fused aggregation and paragraph-centroid scores
  (``+ties+prerank x2``: what the engine does, ties kept and pre-ranked);
- **paragraph centroids** (no sentence k-NN): each paragraph is the normalised mean of its
  sentence vectors; a document scores ``mean_i (max_j cos(c_i, c_j) - mu_i) / sigma_i`` over the
  source paragraphs ``i`` and its own paragraphs ``j`` (SDR's shape with a paragraph pair scored by
  its centroids), either over every corpus paragraph (``dense``) or with only the top-k documents
  per source paragraph and 0 for the rest (what a centroid k-NN index would return).

Prints the mean fraction of the exhaustive top-10 inside the top K candidates, for several k and
K. Takes about 3 minutes on 2 cores once the embedding cache holds IRLeD.
Usage: python bench/experiments/candidates_exact.py
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from sdr_search.reranker.candidates import aggregate_hits  # noqa: E402
from sdr_search.core.scoring import paragraph_centroids  # noqa: E402
from sdr_search.reranker.prerank import prerank_order  # noqa: E402
from sdr_search.indexer.store import SentenceHits  # noqa: E402
from sdr_search.core.cache import EmbeddingCache  # noqa: E402
from sdr_search.core.documents import read_documents  # noqa: E402
from sdr_search.core.embed import embed_documents  # noqa: E402
from sdr_search.core.encoder import SentenceEncoder  # noqa: E402
from sdr_search.core.scoring import (  # noqa: E402
    NormStats, document_max, rank, sdr_scores, segment_max_rows, stats_from_paragraph_scores,
)
from sdr_search.core.settings import CacheSettings  # noqa: E402
from sdr_search.core.vectors import CorpusVectors, DocVectors  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "irled"
KS = (20, 50, 100)
CANDIDATES = (50, 100, 200, 300, 400)
logger = logging.getLogger("bench.candidates_exact")


def exact_quantities(source: DocVectors, corpus: CorpusVectors) -> tuple[np.ndarray, NormStats, np.ndarray]:
    """``(S, stats, B)``: exhaustive SDR scores with exact statistics, and ``B`` (D, s)."""
    sims = corpus.vectors @ source.vectors.T  # (N, s)
    lengths = np.diff(corpus.par_offsets)
    scratch = np.empty((corpus.n_paragraphs, source.n_sentences), dtype=np.float32)
    pm = segment_max_rows(sims, corpus.par_offsets[:-1], lengths, scratch)  # (Q, s) paragraph maxima
    del sims
    counts = np.diff(source.par_offsets)
    P = (np.add.reduceat(pm, source.par_offsets[:-1], axis=1) / counts).T  # (n, Q)
    stats = stats_from_paragraph_scores(P)
    S = sdr_scores(document_max(P, corpus.doc_par_offsets), stats)
    B = np.maximum.reduceat(pm, corpus.doc_par_offsets[:-1], axis=0)  # (D, s)
    return S, stats, B


def exact_hits(B: np.ndarray, ids: tuple[str, ...], k: int, *, ties: bool = False) -> SentenceHits:
    """The exact nested k-NN: per source sentence, the top-k documents by best sentence (ties at
    the k-th place broken by corpus order, or with ``ties`` all kept, as the embedded store's
    twin expansion does for identical sentences)."""
    order = np.argsort(-B, axis=0, kind="stable").T  # (s, D)
    rows = []
    for s, row in enumerate(order):
        n = k
        if ties:
            n = int(np.count_nonzero(B[:, s] >= B[row[k - 1], s]))
        rows.append(row[:n])
    return SentenceHits([[ids[c] for c in row] for row in rows],
                        [B[row, s].astype(np.float32) for s, row in enumerate(rows)])


def relaxed_full(B: np.ndarray, source: DocVectors, stats: NormStats) -> np.ndarray:
    counts = np.diff(source.par_offsets)
    A = np.add.reduceat(B, source.par_offsets[:-1], axis=1) / counts  # (D, n)
    return ((A - stats.mu) / stats.sigma).mean(axis=1)


def centroid_scores(source: DocVectors, corpus_centroids: np.ndarray, doc_par_offsets: np.ndarray,
                    stats: NormStats, k: int | None = None) -> np.ndarray:
    """Paragraph-centroid document scores (module docstring): every corpus paragraph, or with
    ``k`` only each source paragraph's top-k documents (the rest count as cosine 0)."""
    M = np.maximum.reduceat(paragraph_centroids(source) @ corpus_centroids.T,
                            doc_par_offsets[:-1], axis=1)  # (n, D): best paragraph of each document
    if k is not None and k < M.shape[1]:
        top = np.argpartition(-M, k - 1, axis=1)[:, :k]
        kept = np.zeros_like(M)
        np.put_along_axis(kept, top, np.take_along_axis(M, top, axis=1), axis=1)
        M = kept
    return ((M - stats.mu[:, None]) / stats.sigma[:, None]).mean(axis=0)


def main() -> None:
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()  # no options: --help
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    encoder = SentenceEncoder()
    cache = EmbeddingCache(CacheSettings().cache_dir / "embeddings.sqlite")
    pairs = list(embed_documents(list(read_documents(DATA / "corpus.jsonl.gz")), encoder, cache=cache))
    corpus = CorpusVectors.from_docs([d.id for d, _ in pairs], [v for _, v in pairs])
    queries = list(embed_documents(list(read_documents(DATA / "queries-dev.jsonl.gz")), encoder, cache=cache))
    ids = corpus.ids
    corpus_centroids = paragraph_centroids(DocVectors(corpus.vectors, corpus.par_offsets))  # every paragraph
    recall: dict[str, dict[int, list[float]]] = {}

    def record(name: str, doc_ids: list[str], scores: np.ndarray, truth: set[str]) -> None:
        order = rank(doc_ids, scores)
        row = recall.setdefault(name, {K: [] for K in CANDIDATES})
        for K in CANDIDATES:
            row[K].append(len(truth & {doc_ids[i] for i in order[:K]}) / len(truth))

    position = {d: i for i, d in enumerate(ids)}

    def record_prerank(name: str, doc_ids: list[str], scores: np.ndarray, truth: set[str], source: DocVectors) -> None:
        order = rank(doc_ids, scores)
        row = recall.setdefault(name, {K: [] for K in CANDIDATES})
        for K in CANDIDATES:
            pool = order[: 2 * K]
            docs = [position[doc_ids[i]] for i in pool]
            cents = [corpus_centroids[corpus.doc_par_offsets[c] : corpus.doc_par_offsets[c + 1]] for c in docs]
            keep = prerank_order([doc_ids[i] for i in pool], scores[pool], source, cents)[:K]
            row[K].append(len(truth & {doc_ids[pool[i]] for i in keep}) / len(truth))

    t0 = time.perf_counter()
    for n, (doc, source) in enumerate(queries, 1):
        S, stats, B = exact_quantities(source, corpus)
        truth = {ids[i] for i in rank(list(ids), S)[:10]}
        for k in KS:
            hits = exact_hits(B, ids, k)
            for method in ("weighted-sum", "sum", "votes", "sdr-bound"):
                got, scores = aggregate_hits(hits, source.par_offsets, method=method, stats=stats)
                record(f"{method}, k={k}", got, scores, truth)
                if method == "weighted-sum":
                    record_prerank(f"{method}+prerank x2, k={k}", got, scores, truth, source)
            got, scores = aggregate_hits(exact_hits(B, ids, k, ties=True), source.par_offsets,
                                         method="weighted-sum", stats=stats)
            record(f"weighted-sum+ties, k={k}", got, scores, truth)
            record_prerank(f"weighted-sum+ties+prerank x2, k={k}", got, scores, truth, source)
        record("relaxed-full (no k)", list(ids), relaxed_full(B, source, stats), truth)
        record("centroids, dense", list(ids), centroid_scores(source, corpus_centroids, corpus.doc_par_offsets, stats), truth)
        for k in (100, 200):
            record(f"centroids, k={k}", list(ids),
                   centroid_scores(source, corpus_centroids, corpus.doc_par_offsets, stats, k), truth)
        logger.info("query %d/%d (%s, %d sentences) %.0fs", n, len(queries), doc.id, source.n_sentences,
                    time.perf_counter() - t0)

    print(f"\n== exhaustive SDR top-10 inside the top K candidates, exact nested k-NN, IRLeD dev "
          f"({len(queries)} queries, {corpus.n_docs} documents, exact statistics)")
    print(f"{'aggregation':>36} " + " ".join(f"{'K=' + str(K):>7}" for K in CANDIDATES) + "   min@K=100")
    for name, row in recall.items():
        print(f"{name:>36} " + " ".join(f"{np.mean(row[K]):7.3f}" for K in CANDIDATES) + f"   {np.min(row[100]):9.1f}")


if __name__ == "__main__":
    main()
