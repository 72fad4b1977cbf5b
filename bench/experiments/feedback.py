"""Document feedback in adaptive fusion (issue 25), on IRLeD dev full and short sources: the top
``k`` documents of a query's ranking become further sources, and their fused scores take the share
``f h / (h + n)`` of the final score (``n`` the source's sentences; docs/scoring.md "Document
feedback"; :func:`sdr_search.core.fusion.feedback_share`, :func:`sdr_search.core.fusion.with_feedback`).

Every ranking goes through :func:`sdr_search.core.evaluation.hybrid_ranking` with its
``feedback`` argument, the code path of ``sdr eval --method hybrid``. The parameters ``(k, f, h)``
are chosen from a small grid by 5-fold cross-validation over queries, by the mean MAP of full and
short sources on the training folds (a query and its cut stay in the same fold), and scored on the
held-out fold; the check cuts (``--check-cut``) are scored with each fold's choice, never chosen on.

Reads the per-query signals ``bench/adaptive_fusion.py`` caches (run it first, with the same
``--check-cut`` flags). A feedback document's own signals as a source (BM25 of its text, exact SDR
with statistics over every other corpus paragraph, the mean-vector cosine) are computed once and
cached in ``--signals-dir`` (about 0.8 s each on 2 cores; some 600 documents for the full grid).

    python bench/adaptive_fusion.py --check-cut sentences:12 --check-cut sentences:30 --check-cut paragraphs:3
    python bench/experiments/feedback.py --check-cut sentences:12 --check-cut sentences:30 --check-cut paragraphs:3
"""

from __future__ import annotations

import argparse
import itertools
import logging
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import adaptive_fusion as af  # noqa: E402
from hybrid import encoder_from_args, irled_arguments, per_query, read_irled  # noqa: E402

from sdr_search.core.cache import EmbeddingCache  # noqa: E402
from sdr_search.core.embed import embed_corpus  # noqa: E402
from sdr_search.core.evaluation import HYBRID_SIGNALS, EvalInputs, hybrid_ranking, signal_scorers  # noqa: E402
from sdr_search.core.fusion import ADAPTIVE_HYBRID, AdaptiveParams, HybridSpec, SourceShape  # noqa: E402
from sdr_search.core.settings import CacheSettings  # noqa: E402

DOCS_GRID = (1, 2, 3, 5)
WEIGHT_GRID = (0.5, 0.75, 1.0)
HALF_GRID = (8.0, 16.0, 32.0)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    irled_arguments(p)
    p.add_argument("--signals-dir", default="/var/tmp/sdr-adaptive", help="bench/adaptive_fusion.py's signal cache")
    p.add_argument("--candidates", type=int, default=100, help="K: each signal's top K form the fused set (default 100)")
    p.add_argument("--folds", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--check-cut", action="append", default=[], metavar="CUT",
                   help="also score sources cut this way with the parameters each fold chose (e.g. sentences:30)")
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("sdr_search.core.documents").setLevel(logging.ERROR)
    t0 = time.perf_counter()

    qrels, queries, docs = read_irled(args)
    ids = [d.id for d in docs]
    position = {d: k for k, d in enumerate(ids)}
    paragraphs = np.asarray([len(d.paragraphs) for d in docs], dtype=np.int64)
    kinds = af.KINDS + tuple((cut, cut) for cut in args.check_cut)
    data = {}
    for kind, cut in kinds:
        path = af.signals_path(args, kind, cut)
        if not path.exists():
            raise SystemExit(f"{path} missing: run bench/adaptive_fusion.py with the same arguments first")
        z = np.load(path)
        data[kind] = {k: z[k] for k in z.files}
    nq = len(queries)
    base_spec = ADAPTIVE_HYBRID.replace(feedback=False)

    def shape(kind: str, k: int) -> SourceShape:
        return SourceShape(sentences=int(data[kind]["sentences"][k]), paragraphs=int(data[kind]["paragraphs"][k]))

    def signals(kind: str, k: int) -> dict[str, np.ndarray]:
        return {s: data[kind][s][k] for s in HYBRID_SIGNALS}

    # the feedback documents any grid point can use: the top max(k) of each query's ranking without feedback
    plain = {kind: [hybrid_ranking(ids, signals(kind, k), base_spec, args.candidates, exclude=position.get(q.id),
                                   source=shape(kind, k), paragraphs=paragraphs)
                    for k, q in enumerate(queries)] for kind, _ in kinds}
    wanted = sorted({position[d] for kind, _ in kinds for r in plain[kind] for d, _ in r[:max(DOCS_GRID)]})
    cache_path = Path(args.signals_dir) / f"feedback-{af.signals_path(args, 'docs', None).stem.split('-')[-1]}.npz"
    cached: dict[int, dict[str, np.ndarray]] = {}
    if cache_path.exists():
        z = np.load(cache_path)
        cached = {int(i): {s: z[s][j] for s in HYBRID_SIGNALS} for j, i in enumerate(z["positions"])}
    missing = [i for i in wanted if i not in cached]
    if missing:
        print(f"{len(missing)} feedback documents to score as sources (of {len(wanted)})", file=sys.stderr)
        encoder = encoder_from_args(args)
        with EmbeddingCache((args.cache_dir or CacheSettings().cache_dir) / "embeddings.sqlite") as cache:
            corpus = embed_corpus(docs, encoder, cache=cache, progress=True)
        scorers = signal_scorers(HYBRID_SIGNALS, EvalInputs(docs, [], corpus_vectors=corpus, query_vectors=[]))
        for n, i in enumerate(missing):
            cached[i] = {s: np.asarray(fn(None, docs[i]), dtype=np.float64) for s, fn in scorers.items()}
            if n % 50 == 49:
                print(f"  {n + 1}/{len(missing)}", file=sys.stderr, flush=True)
        keys = sorted(cached)
        np.savez(cache_path, positions=np.asarray(keys), **{s: np.stack([cached[i][s] for i in keys]) for s in HYBRID_SIGNALS})

    def feedback(i: int):
        return cached[i], SourceShape.of(docs[i])

    def evaluate(kind: str, spec: HybridSpec) -> np.ndarray:
        """(queries, 2): AP and nDCG@10 per query."""
        out = np.zeros((nq, 2))
        for k, q in enumerate(queries):
            ranking = hybrid_ranking(ids, signals(kind, k), spec, args.candidates, exclude=position.get(q.id),
                                     source=shape(kind, k), paragraphs=paragraphs, feedback=feedback)
            out[k] = per_query([d for d, _ in ranking], qrels[q.id])
        return out

    base = {kind: np.mean([per_query([ids[i] for i in np.argsort(-np.where(np.arange(len(ids)) == position.get(q.id),
                                                                             -np.inf, data[kind]["bm25"][k]),
                                                                    kind="stable")], qrels[q.id])[0]
                           for k, q in enumerate(queries)]) for kind, _ in kinds}
    without = {kind: evaluate(kind, base_spec) for kind, _ in kinds}
    grid = [AdaptiveParams(**{**base_spec.adaptive.to_dict(), "feedback_docs": m, "feedback_weight": f, "feedback_half": h})
            for m, f, h in itertools.product(DOCS_GRID, WEIGHT_GRID, HALF_GRID)]
    per_point = []
    for g in grid:
        per_point.append({kind: evaluate(kind, base_spec.replace(adaptive=g)) for kind, _ in kinds})
        print(f"  {g}: " + ", ".join(f"{kind} {per_point[-1][kind][:, 0].mean():.4f}" for kind, _ in kinds),
              file=sys.stderr, flush=True)
    folds = np.array_split(np.random.default_rng(args.seed).permutation(nq), args.folds)
    cv = {kind: np.zeros((nq, 2)) for kind, _ in kinds}
    chosen = []
    for test in folds:
        train = np.setdiff1d(np.arange(nq), test)
        best = int(np.argmax([np.mean([m[kind][train, 0].mean() for kind, _ in af.KINDS]) for m in per_point]))
        chosen.append(grid[best])
        for kind, _ in kinds:
            cv[kind][test] = per_point[best][kind][test]
    shipped = {kind: evaluate(kind, ADAPTIVE_HYBRID) for kind, _ in kinds}

    print(f"\nIRLeD dev ({len(docs)} documents, {nq} queries), K = {args.candidates}; MAP / nDCG@10 (vs BM25 MAP)")
    print(f"{'method':<48}" + "".join(f"{kind:>26}" for kind, _ in kinds))
    print(f"{'BM25':<48}" + "".join(f"{base[kind]:>17.3f}{'':>9}" for kind, _ in kinds))
    for name, rows in (("adaptive without feedback", without), (f"adaptive + feedback, {len(folds)}-fold CV", cv),
                       (f"adaptive + feedback, shipped ({ADAPTIVE_HYBRID.adaptive})", shipped)):
        print(f"{name[:47]:<48}" + "".join(
            f"{rows[kind][:, 0].mean():>11.3f} / {rows[kind][:, 1].mean():.3f} ({100 * (rows[kind][:, 0].mean() / base[kind] - 1):+3.0f} %)"
            for kind, _ in kinds))
    print("CV folds chose: " + " | ".join(str(g) for g in chosen))
    objective = np.asarray([np.mean([m[kind][:, 0].mean() for kind, _ in af.KINDS]) for m in per_point])
    print("best on all queries (mean MAP of full and short): " + " | ".join(
        f"{grid[i]} {objective[i]:.4f} (full {per_point[i]['full'][:, 0].mean():.3f}, short {per_point[i]['short'][:, 0].mean():.3f})"
        for i in np.argsort(-objective, kind="stable")[:5]))
    for kind, _ in kinds:
        d = cv[kind][:, 0] - without[kind][:, 0]
        print(f"{kind}: CV - without feedback, per-query AP {d.mean():+.4f} ({int((d > 1e-9).sum())} better, "
              f"{int((d < -1e-9).sum())} worse)")
    print(f"\n{time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
