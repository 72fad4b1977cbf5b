"""Signals tried for short sources (issue 25), next to the adaptive fusion, on IRLeD dev full and
short sources; 1 and 2 are not in the product, 3 is (on full sources); this records what each
changes.

1. **RM3 on BM25** (pseudo-relevance feedback: the query's terms mixed with the top terms of its
   first ``fb_docs`` BM25 hits, weight ``lam`` on the original; Anserini's defaults are 10 / 10 /
   0.5): BM25 alone and the adaptive hybrid with the expanded BM25 in place of BM25.
2. **Sentence max-sim**: per source sentence the best cosine with any sentence of the candidate,
   averaged over the source's sentences (raw, and z-scored per source sentence over the corpus),
   alone and in place of SDR in the adaptive hybrid.
3. **A length correction of SDR**: SDR minus ``c * sqrt(2 ln n_paragraphs(candidate))``, the
   expected maximum of n standard normal scores (a long candidate has more chances at a high row
   maximum), with ``c`` chosen by 5-fold cross-validation over queries (mean MAP of full and short
   on the training folds), alone and in the adaptive hybrid (``AdaptiveParams.length_correction``,
   the one of these that is in the product: c = 0.375 by default since 2026-11-25).

Reads the per-query signals ``bench/adaptive_fusion.py`` caches (run it first) and the corpus
vectors through the embedding cache (max-sim only). About 10 minutes on 2 cores.

    python bench/adaptive_fusion.py && python bench/experiments/short_signals.py
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import adaptive_fusion as af  # noqa: E402
from hybrid import encoder_from_args, irled_arguments, per_query, read_irled  # noqa: E402

from sdr_search.core.cache import EmbeddingCache  # noqa: E402
from sdr_search.core.embed import embed_corpus, embed_documents  # noqa: E402
from sdr_search.core.evaluation import HYBRID_SIGNALS, cut_source, hybrid_ranking, parse_source_cut  # noqa: E402
from sdr_search.core.fusion import ADAPTIVE_HYBRID, AdaptiveParams, HybridSpec, SourceShape, length_corrected  # noqa: E402
from sdr_search.core.lexical import BM25Ranker  # noqa: E402
from sdr_search.core.scoring import rank  # noqa: E402
from sdr_search.core.settings import CacheSettings  # noqa: E402

RM3_PARAMS = ((10, 10, 0.5), (10, 20, 0.5), (5, 20, 0.5), (10, 50, 0.5), (10, 20, 0.7))
LENGTH_GRID = (0.0, 0.125, 0.25, 0.375, 0.5)
# the adaptive fusion as it was before the length correction: experiments 1 and 2 replace a signal in it
PLAIN = HybridSpec("adaptive", adaptive=AdaptiveParams(length_correction=0.0))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    irled_arguments(p)
    p.add_argument("--signals-dir", default="/var/tmp/sdr-adaptive", help="bench/adaptive_fusion.py's signal cache")
    p.add_argument("--folds", type=int, default=5)
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("sdr_search.core.documents").setLevel(logging.ERROR)

    qrels, queries, docs = read_irled(args)
    ids = [d.id for d in docs]
    position = {d: k for k, d in enumerate(ids)}
    nq = len(queries)
    data = {}
    for kind, cut in af.KINDS:
        path = af.signals_path(args, kind, cut)
        if not path.exists():
            raise SystemExit(f"{path} missing: run bench/adaptive_fusion.py with the same arguments first")
        z = np.load(path)
        data[kind] = {k: z[k] for k in z.files}
    sources = {kind: [cut_source(q, parse_source_cut(cut)) for q in queries] for kind, cut in af.KINDS}

    def single(scores: np.ndarray) -> np.ndarray:
        out = np.zeros(nq)
        for k, q in enumerate(queries):
            keep = [i for i in range(len(ids)) if i != position.get(q.id)]
            kept = [ids[i] for i in keep]
            out[k] = per_query([kept[i] for i in rank(kept, scores[k][keep])], qrels[q.id])[0]
        return out

    paragraphs = np.array([len(d.paragraphs) for d in docs])

    def hybrid(kind: str, replace: dict[str, np.ndarray], spec: HybridSpec = PLAIN) -> np.ndarray:
        out = np.zeros(nq)
        for k, q in enumerate(queries):
            signals = {n: (replace[n] if n in replace else data[kind][n])[k] for n in HYBRID_SIGNALS}
            shape = SourceShape(sentences=int(data[kind]["sentences"][k]), paragraphs=int(data[kind]["paragraphs"][k]))
            ranking = [d for d, _ in hybrid_ranking(ids, signals, spec, 100, exclude=position.get(q.id), source=shape,
                                                    paragraphs=paragraphs)]
            out[k] = per_query(ranking, qrels[q.id])[0]
        return out

    folds = np.array_split(np.random.default_rng(0).permutation(nq), args.folds)

    def cross_validate(name: str, grid, per_query_ap) -> None:
        """Each fold picks from ``grid`` by the mean MAP of full and short on its training queries."""
        scores = {kind: np.zeros(nq) for kind, _ in af.KINDS}
        chosen = []
        for test in folds:
            train = np.setdiff1d(np.arange(nq), test)
            best = max(grid, key=lambda g: np.mean([per_query_ap(g, kind)[train].mean() for kind, _ in af.KINDS]))
            chosen.append(best)
            for kind in scores:
                scores[kind][test] = per_query_ap(best, kind)[test]
        print(f"  CV of {name}: folds chose {chosen}; " + ", ".join(
            f"{k} {v.mean():.4f} ({100 * (v.mean() / base[k] - 1):+.0f} % vs BM25)" for k, v in scores.items()))

    base = {kind: single(data[kind]["bm25"]).mean() for kind, _ in af.KINDS}
    default = {kind: hybrid(kind, {}).mean() for kind, _ in af.KINDS}
    shipped = {kind: hybrid(kind, {}, ADAPTIVE_HYBRID).mean() for kind, _ in af.KINDS}
    print(f"IRLeD dev, {len(docs)} documents, {nq} queries; MAP; short = first 9 sentences")
    for kind, _ in af.KINDS:
        print(f"{kind}: BM25 {base[kind]:.4f}, SDR {single(data[kind]['sdr']).mean():.4f}, "
              f"adaptive without length correction (the baseline of 1-3) {default[kind]:.4f} "
              f"({100 * (default[kind] / base[kind] - 1):+.0f} % vs BM25); shipped default {ADAPTIVE_HYBRID.adaptive} "
              f"{shipped[kind]:.4f} ({100 * (shipped[kind] / base[kind] - 1):+.0f} %)")

    def row(name: str, kind: str, alone: float, fused: float) -> None:
        print(f"  {kind:<5} {name:<34} alone {alone:.4f}   adaptive with it {fused:.4f} "
              f"({100 * (fused / base[kind] - 1):+.0f} % vs BM25; default {default[kind]:.4f})", flush=True)

    # 1. RM3 on BM25
    print("\n1. RM3 (fb_docs, fb_terms, lam) in place of BM25")
    ranker = BM25Ranker().fit(ids, [d.text for d in docs])
    model, vocab = ranker._model, ranker._model.vocab_dict
    tokens = ranker.tokenize([d.text for d in docs])
    tfs = [Counter(t) for t in tokens]
    lengths = np.array([max(1, len(t)) for t in tokens])
    per_term: dict[str, np.ndarray] = {}

    def term(t: str) -> np.ndarray:
        if t not in per_term:
            per_term[t] = model.get_scores_from_ids([vocab[t]]).astype(np.float64)
        return per_term[t]

    def rm3(text: str, own: int | None, fb_docs: int, fb_terms: int, lam: float) -> np.ndarray:
        q = Counter(t for t in ranker.tokenize([text])[0] if t in vocab)
        first = sum((c * term(t) for t, c in q.items()), np.zeros(len(ids)))
        s = first.copy()
        if own is not None:
            s[own] = -np.inf
        top = np.argsort(-s)[:fb_docs]
        w = s[top] / s[top].sum()
        fb: Counter = Counter()
        for wd, d in zip(w, top):
            for t, c in tfs[d].items():
                fb[t] += wd * c / lengths[d]
        chosen = dict(fb.most_common(fb_terms))
        weights: Counter = Counter({t: lam * c / sum(q.values()) for t, c in q.items()})
        for t, v in chosen.items():
            weights[t] += (1 - lam) * v / sum(chosen.values())
        return sum((v * term(t) for t, v in weights.items()), np.zeros(len(ids)))

    rm3_fused = {}
    for kind, _ in af.KINDS:
        for params in RM3_PARAMS:
            expanded = np.array([rm3(s.text, position.get(q.id), *params) for s, q in zip(sources[kind], queries)])
            rm3_fused[params, kind] = hybrid(kind, {"bm25": expanded})
            row(f"RM3 {params}", kind, single(expanded).mean(), rm3_fused[params, kind].mean())
    cross_validate("RM3 in the fusion", RM3_PARAMS, lambda params, kind: rm3_fused[params, kind])

    # 2. sentence max-sim
    print("\n2. sentence max-sim in place of SDR")
    encoder = encoder_from_args(args)
    with EmbeddingCache((args.cache_dir or CacheSettings().cache_dir) / "embeddings.sqlite") as cache:
        cv = embed_corpus(docs, encoder, cache=cache)
        qv = {kind: [v for _, v in embed_documents(s, encoder, cache=cache)] for kind, s in sources.items()}
    unit = cv.vectors / np.linalg.norm(cv.vectors, axis=1, keepdims=True)
    starts = cv.par_offsets[cv.doc_par_offsets[:-1]]
    rng = np.random.default_rng(0)
    for kind, _ in af.KINDS:
        raw, zs = np.zeros((nq, len(ids))), np.zeros((nq, len(ids)))
        for k in range(nq):
            q = qv[kind][k].vectors
            q = q / np.linalg.norm(q, axis=1, keepdims=True)
            if q.shape[0] > 60:  # bounds the memory of a long source; 60 sentences stand for it
                q = q[rng.choice(q.shape[0], 60, replace=False)]
            s = q @ unit.T
            z = (s - s.mean(1, keepdims=True)) / s.std(1, keepdims=True)
            raw[k] = np.maximum.reduceat(s, starts, axis=1).mean(0)
            zs[k] = np.maximum.reduceat(z, starts, axis=1).mean(0)
        row("max-sim (cosine)", kind, single(raw).mean(), hybrid(kind, {"sdr": raw}).mean())
        row("max-sim (z-scored)", kind, single(zs).mean(), hybrid(kind, {"sdr": zs}).mean())

    # 3. length correction of SDR, c by cross-validation
    print("\n3. SDR - c * sqrt(2 ln n_paragraphs) (alone; in the adaptive fusion: its length_correction), c by 5-fold CV")
    per = {}
    for c in LENGTH_GRID:
        spec = HybridSpec("adaptive", adaptive=AdaptiveParams(length_correction=c))
        for kind, _ in af.KINDS:
            corrected = np.stack([length_corrected(row_, paragraphs, c) for row_ in data[kind]["sdr"]])
            per[c, kind, "alone"], per[c, kind, "fused"] = single(corrected), hybrid(kind, {}, spec)
            row(f"c = {c}", kind, per[c, kind, "alone"].mean(), per[c, kind, "fused"].mean())
    for what in ("alone", "fused"):
        cross_validate(f"c ({what})", LENGTH_GRID, lambda c, kind, what=what: per[c, kind, what])
    return 0


if __name__ == "__main__":
    sys.exit(main())
