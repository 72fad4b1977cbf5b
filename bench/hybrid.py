"""Hybrid "more like this" on IRLeD dev: BM25, SDR, the single-vector cosine, and their fusions,
with fusion weights chosen by cross-validation over query folds.

For every dev query the three signals are computed once, exhaustively, over the whole corpus
(the code path of ``sdr eval``: :func:`sdr_search.core.evaluation.signal_scorers`; vectors through the
embedding cache, so a second run does not encode):

- ``bm25``: BM25 of the whole query text (bm25s; the embedded store's lexical side);
- ``sdr``: exact SDR, statistics over every corpus paragraph;
- ``mean``: cosine of the mean sentence vectors.

Hybrid rankings fuse them as ``sdr eval --method hybrid`` does
(:func:`sdr_search.core.evaluation.hybrid_ranking`): the candidate set is the union of each signal's top
``--candidates`` (K), normalised and fused over itself; the rest follows.

Rows:

1. the single signals;
2. fixed hybrids: the product default (:data:`sdr_search.core.fusion.DEFAULT_HYBRID`) and equal weights
   for each fusion and signal subset (no tuning at all);
3. cross-validated hybrids: for each fusion and signal subset, the weights are chosen from a grid
   on the simplex (step 0.1 for two signals, 0.2 for three; the single signals are grid points
   too) by MAP on the training folds of a ``--folds``-fold split of the queries, and scored on the
   held-out fold. The table gives the mean (and std) over test folds of MAP and nDCG@10 and the
   weights each fold chose. This guards against tuning to the 50 dev queries: a number in the CV
   rows was never seen by the choice of its weights.

Usage:

    python bench/hybrid.py                           # full IRLeD dev split, the bundled model
    python bench/hybrid.py --model runs/trained      # a trained encoder
    python bench/hybrid.py --docs 200 --queries-n 10 # a quick check on a slice
    python bench/hybrid.py --json runs/hybrid.json   # also write every number as JSON

The first full run encodes the corpus (~35 min on 2 CPU cores); later runs read the cache.
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import logging
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sdr_search.core.cache import EmbeddingCache  # noqa: E402
from sdr_search.core.documents import Document, read_documents  # noqa: E402
from sdr_search.core.embed import embed_corpus, embed_documents  # noqa: E402
from sdr_search.core.encoder import SentenceEncoder  # noqa: E402
from sdr_search.core.evaluation import HYBRID_SIGNALS, EvalInputs, hybrid_ranking, signal_scorers  # noqa: E402
from sdr_search.core.fusion import DEFAULT_HYBRID, FUSIONS, HybridSpec, format_weights  # noqa: E402
from sdr_search.core.metrics import average_precision, ndcg_at, read_qrels  # noqa: E402
from sdr_search.core.scoring import rank  # noqa: E402
from sdr_search.core.settings import CacheSettings, EncoderSettings, SegmentationSettings  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "irled"
SUBSETS = (("bm25", "mean"), ("bm25", "sdr"), ("sdr", "mean"), ("bm25", "sdr", "mean"))
FIXED_FUSIONS = tuple(f for f in FUSIONS if f != "adaptive")  # adaptive fusion: bench/adaptive_fusion.py


def simplex_grid(signals: Sequence[str]) -> list[dict[str, float]]:
    """Weights on the simplex over ``signals``: step 0.1 for two, 0.2 for three (corners included)."""
    steps = 10 if len(signals) == 2 else 5
    grid = []
    for parts in itertools.product(range(steps + 1), repeat=len(signals)):
        if sum(parts) == steps:
            grid.append({s: p / steps for s, p in zip(signals, parts)})
    return grid


def slice_corpus(path: Path, wanted: set[str], n: int, tmp: Path) -> Path:
    """A ``.jsonl`` of the corpus records in ``wanted`` and, in file order, others up to ``n`` records."""
    out = tmp / "slice.jsonl"
    others = max(0, n - len(wanted))
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as src, out.open("w", encoding="utf-8") as dst:
        for line in src:
            if not line.strip():
                continue
            doc_id = str(json.loads(line).get("id"))
            if doc_id in wanted:
                dst.write(line)
            elif others > 0:
                others -= 1
                dst.write(line)
    return out


def irled_arguments(p: argparse.ArgumentParser) -> None:
    """The data, model and slice flags shared by the IRLeD benches."""
    p.add_argument("--corpus", default=str(DATA / "corpus.jsonl.gz"))
    p.add_argument("--queries", default=str(DATA / "queries-dev.jsonl.gz"))
    p.add_argument("--qrels", default=str(DATA / "qrels-dev.txt"))
    p.add_argument("--model", metavar="DIR", help="encoder model directory (default: the bundled all-MiniLM-L6-v2)")
    p.add_argument("--precision", choices=["auto", "fp32", "bf16", "fp16"], help="encoder precision (default auto)")
    p.add_argument("--cache-dir", type=Path, help="embedding cache directory (default ~/.cache/sdr-search)")
    p.add_argument("--docs", type=int, help="a slice of N corpus documents: the relevant ones of the chosen queries, "
                   "then the first others (a quick check)")
    p.add_argument("--queries-n", type=int, help="first N queries only")


def read_irled(args, settings: SegmentationSettings | None = None) -> tuple[dict, list[Document], list[Document]]:
    """Qrels, the judged queries (the first ``--queries-n``) and the corpus or its ``--docs`` slice."""
    qrels = read_qrels(args.qrels)
    queries = list(itertools.islice(read_documents([args.queries], settings=settings), args.queries_n))
    queries = [q for q in queries if any(g > 0 for g in qrels.get(q.id, {}).values())]
    if args.docs is None:
        docs = list(read_documents([args.corpus], settings=settings))
    else:  # a slice that still holds every relevant document of the chosen queries
        wanted = {d for q in queries for d, g in qrels[q.id].items() if g > 0}
        with tempfile.TemporaryDirectory() as tmp:
            docs = list(read_documents([slice_corpus(Path(args.corpus), wanted, args.docs, Path(tmp))], settings=settings))
    return qrels, queries, docs


def encoder_from_args(args) -> SentenceEncoder:
    overrides = {k: v for k, v in {"model": args.model, "precision": args.precision}.items() if v}
    return SentenceEncoder(settings=EncoderSettings(**overrides))


def per_query(ranking: list[str], relevant: dict[str, int]) -> tuple[float, float]:
    return average_precision(ranking, relevant), ndcg_at(ranking, relevant, 10)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    irled_arguments(p)
    p.add_argument("--candidates", type=int, default=100, help="K: each signal's top K form the fused set (default 100)")
    p.add_argument("--folds", type=int, default=5, help="cross-validation folds over queries (default 5)")
    p.add_argument("--seed", type=int, default=0, help="seed of the fold split (default 0)")
    p.add_argument("--json", type=Path, metavar="OUT", help="also write every number as JSON")
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("sdr_search.core.documents").setLevel(logging.ERROR)  # no per-document skip notes

    t0 = time.perf_counter()
    qrels, queries, docs = read_irled(args)
    if not queries or not docs:
        print("no judged query or no document", file=sys.stderr)
        return 2
    encoder = encoder_from_args(args)
    cache_dir = args.cache_dir or CacheSettings().cache_dir
    inputs = EvalInputs(docs, queries)
    with EmbeddingCache(cache_dir / "embeddings.sqlite") as cache:
        inputs.query_vectors = [v for _, v in embed_documents(queries, encoder, cache=cache, progress=True, total=len(queries))]
        inputs.corpus_vectors = embed_corpus(docs, encoder, cache=cache, progress=True)
    t_embed = time.perf_counter()
    ids = [d.id for d in docs]
    position = {d: k for k, d in enumerate(ids)}
    scorers = signal_scorers(HYBRID_SIGNALS, inputs, stats="exact")
    signals = [{name: np.asarray(fn(k, q), dtype=np.float64) for name, fn in scorers.items()} for k, q in enumerate(queries)]
    t_signals = time.perf_counter()
    print(f"{len(docs)} documents, {len(queries)} judged queries, model {encoder.model_id}; embedded in "
          f"{t_embed - t0:.0f} s, signals in {t_signals - t_embed:.0f} s", file=sys.stderr)

    def evaluate_spec(spec: HybridSpec | None, single: str | None = None) -> np.ndarray:
        """(queries, 2): AP and nDCG@10 per query."""
        out = np.zeros((len(queries), 2))
        for k, q in enumerate(queries):
            own = position.get(q.id)
            if single is not None:
                keep = [i for i in range(len(ids)) if i != own]
                kept = [ids[i] for i in keep]
                ranking = [kept[i] for i in rank(kept, signals[k][single][keep])]
            else:
                ranking = [d for d, _ in hybrid_ranking(ids, signals[k], spec, args.candidates, exclude=own)]
            out[k] = per_query(ranking, qrels[q.id])
        return out

    rows: list[dict] = []

    def add_row(kind: str, name: str, fusion: str, weights: str, scores: np.ndarray, **extra) -> None:
        rows.append({"kind": kind, "name": name, "fusion": fusion, "weights": weights,
                     "MAP": float(scores[:, 0].mean()), "nDCG@10": float(scores[:, 1].mean()), **extra})

    for name in HYBRID_SIGNALS:
        add_row("single", name.upper() if name != "mean" else "mean (single vector)", "-", "-", evaluate_spec(None, name))
    add_row("fixed", "hybrid default", DEFAULT_HYBRID.fusion, format_weights(DEFAULT_HYBRID.weights),
            evaluate_spec(DEFAULT_HYBRID))
    for fusion in FIXED_FUSIONS:
        for subset in SUBSETS:
            spec = HybridSpec(fusion, {s: 1.0 for s in subset})
            add_row("fixed", "equal weights", fusion, format_weights(spec.weights), evaluate_spec(spec))

    # cross-validation: per-query metrics for every grid point once, then choose per fold
    rng = np.random.default_rng(args.seed)
    folds = np.array_split(rng.permutation(len(queries)), min(args.folds, len(queries)))
    for fusion in FIXED_FUSIONS:
        for subset in SUBSETS:
            grid = simplex_grid(subset)
            per_point = [evaluate_spec(HybridSpec(fusion, w)) for w in grid]
            test_map, test_ndcg, chosen = [], [], []
            for f, test in enumerate(folds):
                train = np.setdiff1d(np.arange(len(queries)), test)
                train_map = [float(m[train, 0].mean()) if train.size else float(m[:, 0].mean()) for m in per_point]
                best = int(np.argmax(train_map))  # ties: the first grid point
                test_map.append(float(per_point[best][test, 0].mean()))
                test_ndcg.append(float(per_point[best][test, 1].mean()))
                chosen.append(format_weights(grid[best]))
            rows.append({"kind": "cv", "name": f"CV {'+'.join(subset)}", "fusion": fusion, "weights": chosen,
                         "MAP": float(np.mean(test_map)), "MAP_std": float(np.std(test_map)),
                         "nDCG@10": float(np.mean(test_ndcg)), "nDCG@10_std": float(np.std(test_ndcg))})

    print(f"\nIRLeD ({len(docs)} documents, {len(queries)} queries), model {encoder.model_id}, K = {args.candidates}, "
          f"{len(folds)}-fold CV over queries (seed {args.seed})")
    print(f"{'method':<28} {'fusion':<7} {'MAP':>13} {'nDCG@10':>13}  weights (bm25,sdr,mean)")
    for r in rows:
        m = f"{r['MAP']:.3f}" + (f" ±{r['MAP_std']:.3f}" if "MAP_std" in r else "")
        n = f"{r['nDCG@10']:.3f}" + (f" ±{r['nDCG@10_std']:.3f}" if "nDCG@10_std" in r else "")
        w = r["weights"] if isinstance(r["weights"], str) else " | ".join(
            w.replace("bm25=", "").replace("sdr=", "").replace("mean=", "") for w in r["weights"])
        print(f"{r['name']:<28} {r['fusion']:<7} {m:>13} {n:>13}  {w}")
    print(f"\n{time.perf_counter() - t0:.0f} s", file=sys.stderr)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({
            "documents": len(docs), "queries": len(queries), "model": encoder.model_id, "candidates": args.candidates,
            "folds": len(folds), "seed": args.seed, "rows": rows,
        }, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
