"""Which OpenSearch lexical query reproduces the embedded store's BM25 best? Simulated with bm25s.

The embedded store ranks by exact BM25 (bm25s, Lucene variant, k1 = 1.5, b = 0.75, query term
counts kept: the score is ``sum over query terms t of count(t) * BM25(t, d)``). An OpenSearch
query over the ``text`` field (analyzer ``sdr_text``: the same tokens; similarity ``sdr_bm25``:
the same k1 and b) cannot send every term of a long source: ``indices.query.bool.max_clause_count``
(1024 by default) caps the clauses. Two ways to cut, both simulated here on the bm25s index of the
corpus (no OpenSearch node is needed; Lucene's per-document length quantisation is ignored):

- ``terms-tf``: the ``N`` most frequent source terms as ``term`` queries boosted by their count
  (what :func:`sdr_search.indexer.opensearch.requests.build_terms_query` sends): exact BM25 when the source
  has at most ``N`` distinct terms, otherwise the rarest terms of the source are dropped;
- ``terms-tfidf``: the same with the ``N`` terms of highest count x idf (needs the corpus document
  frequencies first, e.g. one ``_termvectors`` call with the source as an artificial document);
- ``mlt``: OpenSearch ``more_like_this`` (Lucene MoreLikeThis): terms with count >=
  ``min_term_freq`` and document frequency >= ``min_doc_freq``, the ``max_query_terms`` of highest
  ``count x classic idf`` (``1 + ln((N + 1) / (df + 1))``), each term once (no count weighting),
  and a document must match ``minimum_should_match`` of them.

Prints, per variant, MAP and nDCG@10 on the qrels and the mean overlap of its top-100 with the
exact BM25 top-100. Usage (about 2 minutes on 2 cores, most of it reading and splitting text):

    python bench/experiments/lexical_variants.py [--docs N] [--queries N]
"""

from __future__ import annotations

import argparse
import itertools
import logging
import math
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from sdr_search.core.documents import read_documents  # noqa: E402
from sdr_search.core.lexical import BM25Ranker, analyze  # noqa: E402
from sdr_search.core.metrics import evaluate, read_qrels  # noqa: E402
from sdr_search.core.scoring import rank  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "irled"


def weighted_scores(model, weights: dict[int, float], n_docs: int) -> np.ndarray:
    """sum_t w_t * BM25(t, .) for term ids t (grouped by weight: one bm25s call per value)."""
    total = np.zeros(n_docs, dtype=np.float64)
    by_w: dict[float, list[int]] = {}
    for t, w in weights.items():
        by_w.setdefault(w, []).append(t)
    for w, ids in by_w.items():
        total += w * model.get_scores_from_ids(ids).astype(np.float64)
    return total


def matched_counts(model, term_ids: list[int], n_docs: int) -> np.ndarray:
    indptr, indices = model.scores["indptr"], model.scores["indices"]
    counts = np.zeros(n_docs, dtype=np.int64)
    for t in term_ids:
        counts += np.bincount(indices[indptr[t] : indptr[t + 1]], minlength=n_docs)
    return counts


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--corpus", default=str(DATA / "corpus.jsonl.gz"))
    p.add_argument("--queries", default=str(DATA / "queries-dev.jsonl.gz"))
    p.add_argument("--qrels", default=str(DATA / "qrels-dev.txt"))
    p.add_argument("--docs", type=int, help="first N corpus documents only (a quick check)")
    p.add_argument("--queries-limit", "--queries-n", dest="n_queries", type=int, help="first N queries only")
    args = p.parse_args()
    logging.basicConfig(level=logging.ERROR)  # no per-document skip notes

    t0 = time.perf_counter()
    docs = list(itertools.islice(read_documents([args.corpus]), args.docs))
    queries = list(itertools.islice(read_documents([args.queries]), args.n_queries))
    qrels = read_qrels(args.qrels)
    ids = [d.id for d in docs]
    ranker = BM25Ranker().fit(ids, [d.text for d in docs])
    model, vocab, n = ranker._model, ranker._model.vocab_dict, len(ids)
    indptr = model.scores["indptr"]
    df = np.diff(indptr)
    print(f"read and indexed {n} documents, {len(queries)} queries in {time.perf_counter() - t0:.0f} s", file=sys.stderr)

    def classic_idf(t: int) -> float:
        return 1.0 + math.log((n + 1) / (df[t] + 1))

    def bm25_idf(t: int) -> float:
        return math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5))

    variants: dict[str, callable] = {}

    def terms_variant(N: int, by: str):
        def run(counts: Counter) -> np.ndarray:
            key = (lambda t: (-counts[t], t)) if by == "tf" else (lambda t: (-counts[t] * bm25_idf(t), t))
            chosen = sorted(counts, key=key)[:N]
            return weighted_scores(model, {t: float(counts[t]) for t in chosen}, n)
        return run

    def mlt_variant(N: int, min_tf: int, min_df: int, msm: float | int):
        def run(counts: Counter) -> np.ndarray:
            pool = [t for t, c in counts.items() if c >= min_tf and df[t] >= min_df]
            chosen = sorted(pool, key=lambda t: (-counts[t] * classic_idf(t), t))[:N]
            if not chosen:
                return np.zeros(n)
            s = weighted_scores(model, {t: 1.0 for t in chosen}, n)
            need = msm if isinstance(msm, int) else math.floor(msm * len(chosen))  # Lucene rounds down
            return np.where(matched_counts(model, chosen, n) >= max(1, need), s, 0.0)
        return run

    variants["exact BM25 (embedded)"] = lambda counts: weighted_scores(model, {t: float(c) for t, c in counts.items()}, n)
    for N in (1000, 500, 250):
        variants[f"terms-tf N={N}"] = terms_variant(N, "tf")
    variants["terms-tfidf N=1000"] = terms_variant(1000, "tfidf")
    variants["mlt defaults (25, tf>=2, df>=5, 30%)"] = mlt_variant(25, 2, 5, 0.3)
    variants["mlt N=1000 tf>=1 df>=1 msm=1"] = mlt_variant(1000, 1, 1, 1)
    variants["mlt N=1000 tf>=1 df>=1 msm=30%"] = mlt_variant(1000, 1, 1, 0.3)
    variants["mlt N=500 tf>=1 df>=1 msm=1"] = mlt_variant(500, 1, 1, 1)

    distinct = []
    runs: dict[str, dict[str, list[str]]] = {v: {} for v in variants}
    for q in queries:
        counts = Counter(vocab[t] for t in analyze(q.text) if t in vocab)
        distinct.append(len(counts))
        keep = [i for i, d in enumerate(ids) if d != q.id]
        for name, fn in variants.items():
            s = fn(counts)[keep]
            kept = [ids[i] for i in keep]
            runs[name][q.id] = [kept[i] for i in rank(kept, s)]
    exact = runs["exact BM25 (embedded)"]
    print(f"\nsource terms (distinct, in the corpus vocabulary): median {int(np.median(distinct))}, max {max(distinct)}")
    print(f"{'variant':<40} {'MAP':>6} {'nDCG@10':>8} {'top-100 overlap':>16}")
    for name, run in runs.items():
        m = evaluate(run, qrels)
        overlap = np.mean([len(set(run[q][:100]) & set(exact[q][:100])) / 100 for q in run])
        print(f"{name:<40} {m['MAP']:6.3f} {m['nDCG@10']:8.3f} {overlap:16.3f}")
    print(f"\n{time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
