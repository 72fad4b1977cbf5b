"""Adaptive fusion on IRLeD dev, on full and on short sources: BM25, SDR, the single-vector
cosine, the fixed default hybrid and the adaptive hybrid, with the adaptive parameters chosen by
cross-validation over query folds.

Two source kinds, same corpus, same qrels:

- ``full``: the whole query judgment (the dev split as given);
- ``short``: each query cut to its first 9 sentences, as one paragraph
  (``sdr eval --source-cut sentences:9``; :func:`sdr_search.core.evaluation.cut_source`).

Step 1 (once, the slow part): for every query of each kind the three signals are computed
exhaustively over the whole corpus, as ``sdr eval`` computes them
(:func:`sdr_search.core.evaluation.signal_scorers`; SDR with statistics over every corpus
paragraph), and cached in ``--signals-dir`` (default ``/var/tmp/sdr-adaptive``, outside the
repository). Vectors come through the embedding cache.

Step 2 (cheap): every ranking is made by :func:`sdr_search.core.evaluation.hybrid_ranking`, the
code path of ``sdr eval --method hybrid`` (the union of each signal's top K, fused over itself).
The adaptive parameters (:class:`sdr_search.core.fusion.AdaptiveParams`) are chosen from a small
grid by mean MAP over *both* source kinds on the training folds of a ``--folds``-fold split of the
queries (a query and its cut are always in the same fold), and scored on the held-out fold. The
table gives the mean over test folds (± std over folds) and the parameters each fold chose.

Usage:

    python bench/adaptive_fusion.py                      # full dev split, the bundled model
    python bench/adaptive_fusion.py --docs 200 --queries-n 10   # a quick check on a slice
    python bench/adaptive_fusion.py --json runs/adaptive.json   # also write every number as JSON
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from hybrid import encoder_from_args, irled_arguments, per_query, read_irled  # noqa: E402

from sdr_search.core.cache import EmbeddingCache  # noqa: E402
from sdr_search.core.embed import embed_corpus, embed_documents  # noqa: E402
from sdr_search.core.evaluation import (  # noqa: E402
    HYBRID_SIGNALS, EvalInputs, cut_source, hybrid_ranking, parse_source_cut, signal_scorers,
)
from sdr_search.core.fusion import (  # noqa: E402
    ADAPTIVE_HYBRID, DEFAULT_FIXED_HYBRID, AdaptiveParams, HybridSpec, SourceShape, adaptive_weights,
    format_weights,
)
from sdr_search.core.scoring import rank  # noqa: E402
from sdr_search.core.settings import CacheSettings  # noqa: E402

KINDS = (("full", None), ("short", "sentences:9"))


def signals_path(args, kind: str, cut: str | None) -> Path:
    key = json.dumps([args.corpus, args.queries, args.docs, args.queries_n, args.model, args.precision, cut])
    return Path(args.signals_dir) / f"signals-{kind}-{hashlib.sha1(key.encode()).hexdigest()[:10]}.npz"


def compute_signals(args, docs, queries, corpus_vectors, encoder, cache, cut: str | None) -> dict:
    sources = [cut_source(q, parse_source_cut(cut)) for q in queries]
    inputs = EvalInputs(docs, sources, corpus_vectors=corpus_vectors)
    inputs.query_vectors = [v for _, v in embed_documents(sources, encoder, cache=cache, progress=False)]
    scorers = signal_scorers(HYBRID_SIGNALS, inputs, stats="exact")
    out = {name: np.zeros((len(sources), len(docs))) for name in HYBRID_SIGNALS}
    for k, q in enumerate(sources):
        for name, fn in scorers.items():
            out[name][k] = np.asarray(fn(k, q), dtype=np.float64)
    out["sentences"] = np.asarray([q.n_sentences for q in sources])
    out["paragraphs"] = np.asarray([len(q.paragraphs) for q in sources])
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    irled_arguments(p)
    p.add_argument("--candidates", type=int, default=100, help="K: each signal's top K form the fused set (default 100)")
    p.add_argument("--folds", type=int, default=5, help="cross-validation folds over queries (default 5)")
    p.add_argument("--seed", type=int, default=0, help="seed of the fold split (default 0)")
    p.add_argument("--signals-dir", default="/var/tmp/sdr-adaptive", help="cache of the per-query signals")
    p.add_argument("--json", type=Path, metavar="OUT", help="also write every number as JSON")
    p.add_argument("--check-cut", action="append", default=[], metavar="CUT",
                   help="also score sources cut this way (e.g. sentences:30), with the parameters each fold chose on "
                   "full and short sources: a source shape the cross-validation never saw")
    args = p.parse_args()
    kinds = KINDS + tuple((cut, cut) for cut in args.check_cut)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("sdr_search.core.documents").setLevel(logging.ERROR)

    t0 = time.perf_counter()
    qrels, queries, docs = read_irled(args)
    ids = [d.id for d in docs]
    position = {d: k for k, d in enumerate(ids)}
    paragraphs = np.asarray([len(d.paragraphs) for d in docs])
    data: dict[str, dict] = {}
    missing = [(kind, cut) for kind, cut in kinds if not signals_path(args, kind, cut).exists()]
    if missing:
        encoder = encoder_from_args(args)
        cache_dir = args.cache_dir or CacheSettings().cache_dir
        with EmbeddingCache(cache_dir / "embeddings.sqlite") as cache:
            corpus_vectors = embed_corpus(docs, encoder, cache=cache, progress=True)
            for kind, cut in missing:
                t = time.perf_counter()
                sig = compute_signals(args, docs, queries, corpus_vectors, encoder, cache, cut)
                path = signals_path(args, kind, cut)
                path.parent.mkdir(parents=True, exist_ok=True)
                np.savez(path, ids=np.asarray(ids), qids=np.asarray([q.id for q in queries]), **sig)
                print(f"{kind}: signals in {time.perf_counter() - t:.0f} s -> {path}", file=sys.stderr)
    for kind, cut in kinds:
        z = np.load(signals_path(args, kind, cut))
        assert list(z["ids"]) == ids and list(z["qids"]) == [q.id for q in queries], "stale signal cache"
        data[kind] = {k: z[k] for k in z.files}
    nq = len(queries)

    def signals_of(kind: str, k: int) -> dict[str, np.ndarray]:
        return {s: data[kind][s][k] for s in HYBRID_SIGNALS}

    def shape_of(kind: str, k: int) -> SourceShape:
        return SourceShape(sentences=int(data[kind]["sentences"][k]), paragraphs=int(data[kind]["paragraphs"][k]))

    def evaluate(kind: str, spec: HybridSpec | None = None, single: str | None = None) -> np.ndarray:
        """(queries, 2): AP and nDCG@10 per query."""
        out = np.zeros((nq, 2))
        for k, q in enumerate(queries):
            own = position.get(q.id)
            if single is not None:
                keep = [i for i in range(len(ids)) if i != own]
                kept = [ids[i] for i in keep]
                ranking = [kept[i] for i in rank(kept, data[kind][single][k][keep])]
            else:
                ranking = [d for d, _ in hybrid_ranking(ids, signals_of(kind, k), spec, args.candidates, exclude=own,
                                                        source=shape_of(kind, k), paragraphs=paragraphs)]
            out[k] = per_query(ranking, qrels[q.id])
        return out

    rows: list[dict] = []
    for name in HYBRID_SIGNALS:
        rows.append({"name": name.upper() if name != "mean" else "mean (single vector)",
                     **{kind: evaluate(kind, single=name) for kind, _ in kinds}})
    rows.append({"name": f"fixed default ({DEFAULT_FIXED_HYBRID.fusion} {format_weights(DEFAULT_FIXED_HYBRID.weights)})",
                 **{kind: evaluate(kind, DEFAULT_FIXED_HYBRID) for kind, _ in kinds}})
    rows.append({"name": "adaptive, shipped parameters", **{kind: evaluate(kind, ADAPTIVE_HYBRID) for kind, _ in kinds}})

    # cross-validation of the adaptive parameters: per-query metrics for every grid point once
    grid = AdaptiveParams.grid()
    per_point = [{kind: evaluate(kind, HybridSpec("adaptive", adaptive=g)) for kind, _ in kinds} for g in grid]
    rng = np.random.default_rng(args.seed)
    folds = np.array_split(rng.permutation(nq), min(args.folds, nq))
    cv = {kind: np.zeros((nq, 2)) for kind, _ in kinds}
    chosen = []
    fold_map = {kind: [] for kind, _ in kinds}
    for test in folds:
        train = np.setdiff1d(np.arange(nq), test)
        train = train if train.size else test
        objective = [np.mean([m[kind][train, 0].mean() for kind, _ in KINDS]) for m in per_point]
        best = int(np.argmax(objective))  # ties: the first grid point
        chosen.append(grid[best])
        for kind, _ in kinds:
            cv[kind][test] = per_point[best][kind][test]
            fold_map[kind].append(float(per_point[best][kind][test, 0].mean()))
    rows.append({"name": f"adaptive, {len(folds)}-fold CV", **cv,
                 "std": {kind: float(np.std(fold_map[kind])) for kind, _ in kinds}})
    objective_all = np.asarray([np.mean([m[kind][:, 0].mean() for kind, _ in KINDS]) for m in per_point])
    top = np.argsort(-objective_all, kind="stable")[:6]

    # the weights the shipped parameters give per source kind (mean over queries)
    weights_used = {}
    for kind, _ in kinds:
        ws = []
        for k in range(nq):
            ws.append([adaptive_weights(signals_of(kind, k), shape_of(kind, k), ADAPTIVE_HYBRID.adaptive)[s] for s in HYBRID_SIGNALS])
        weights_used[kind] = np.mean(ws, axis=0)

    base = {kind: rows[0][kind][:, 0].mean() for kind, _ in kinds}
    print(f"\nIRLeD dev ({len(docs)} documents, {nq} queries), K = {args.candidates}, {len(folds)}-fold CV over "
          f"queries (seed {args.seed}); short = first 9 sentences as one paragraph "
          f"(median {np.median(data['short']['sentences']):.0f} sentences; full median "
          f"{np.median(data['full']['sentences']):.0f} sentences, {np.median(data['full']['paragraphs']):.0f} paragraphs)")
    for group in (kinds[:2], *(kinds[i:i + 2] for i in range(2, len(kinds), 2))):
        print(f"\n{'method':<44} " + "   ".join(f"{(kind + ' MAP')[-16:]:>16} {'nDCG@10':>8} {'vs BM25':>8}       "
                                               for kind, _ in group))
        for r in rows:
            cells = []
            for kind, _ in group:
                m, n = r[kind][:, 0].mean(), r[kind][:, 1].mean()
                sd = f"±{r['std'][kind]:.3f}" if "std" in r else ""
                cells.append(f"{m:>16.3f} {n:>8.3f} {100 * (m / base[kind] - 1):>+7.0f}% {sd:<6}")
            print(f"{r['name']:<44} " + "   ".join(cells))
    print("\nCV folds chose: " + " | ".join(str(g) for g in chosen))
    print("on all queries (mean MAP of full and short): " + " | ".join(f"{grid[i]} {objective_all[i]:.4f}" for i in top))
    cv_row = rows[-1]
    for other in (rows[1], rows[3], rows[0]):  # SDR, the fixed default, BM25
        cells = []
        for kind, _ in kinds:
            d = cv_row[kind][:, 0] - other[kind][:, 0]
            cells.append(f"{kind} {d.mean():+.3f} ({int((d > 1e-9).sum())} better, {int((d < -1e-9).sum())} worse)")
        print(f"adaptive CV - {other['name']}, per-query AP: " + "; ".join(cells))
    print("mean weights of the shipped adaptive parameters (bm25, sdr, mean): "
          + "; ".join(f"{kind} {', '.join(f'{w:.2f}' for w in weights_used[kind])}" for kind, _ in kinds))
    # ceilings: what a per-query choice could reach at best (an oracle that sees the qrels)
    for kind, _ in kinds:
        singles = np.stack([r[kind][:, 0] for r in rows[:3]], axis=1)
        mixes = np.stack([evaluate(kind, HybridSpec("zscore", {"bm25": 1 - w, "sdr": w}))[:, 0]
                          for w in np.linspace(0, 1, 11)], axis=1)
        print(f"{kind}: oracle ceilings (qrels seen): best single signal per query {singles.max(1).mean():.3f}, "
              f"best bm25/sdr weight per query (step 0.1) {mixes.max(1).mean():.3f}; best fixed bm25/sdr weight "
              f"{mixes.mean(0).max():.3f} (sdr={np.linspace(0, 1, 11)[mixes.mean(0).argmax()]:.1f})")
    print(f"\n{time.perf_counter() - t0:.0f} s", file=sys.stderr)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({
            "documents": len(docs), "queries": nq, "candidates": args.candidates, "folds": len(folds), "seed": args.seed,
            "chosen": [str(g) for g in chosen],
            "rows": [{"name": r["name"], **{kind: {"MAP": float(r[kind][:, 0].mean()), "nDCG@10": float(r[kind][:, 1].mean())}
                                            for kind, _ in kinds}} for r in rows],
        }, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
