"""Two-stage engine: fidelity to exhaustive SDR, latency at >= 1M sentences, memory.

Side by side in one run:

1. **Fidelity** on IRLeD dev: for every dev query (new text, statistics from the store's reference
   sample), the fraction of the exhaustive SDR top-10 (same statistics, every corpus document)
   found in the two-stage top-10, for each candidate aggregation and K. Also against the
   exhaustive ranking with exact statistics (every corpus paragraph), for information.
2. **Fidelity on wiki**: a store of the first ``--wiki-docs`` articles, queries drawn from it
   (indexed sources, stored statistics).
3. **Latency**: real vectors tiled to >= ``--min-sentences`` (each copy gets small noise and is
   re-normalised, new ids), ~200-sentence indexed sources: p50 / p99 of ``more_like_this``
   (candidates + centroid pre-rank + fetch + exact rerank), next to exhaustive exact SDR for the same sources
   (speed-up). Two stores: the IRLeD vectors (long judgments: the top 100 candidates hold 45k-130k
   sentences) and the vectors of the first ``--latency-wiki-docs`` wiki articles (the issue's
   shared wiki set; 0 skips it).
4. **Memory**: store size on disk and process RSS per million sentences, next to the raw float32
   vector bytes.

The centroid pre-rank (``SDR_PRERANK_FACTOR``, :mod:`sdr_search.reranker.prerank`) is compared off (1) and
on (2) at knn_k 20 and the default in every section (``--prerank``). Unless
``--skip-knn-variants``: the other aggregations, nested k-NN twin expansion
(``SDR_STORE_KNN_TWINS``) on and off, search rounds (``SDR_STORE_KNN_ROUNDS``) at 1, 2 and 3 and
oversampling (``SDR_STORE_KNN_OVERSAMPLE``) at 2 and 4, in sections 1 and 3
(``--latency-rounds``, ``--latency-oversample``).
Vectors come from the embedding cache (run ``sdr eval`` first, or this script encodes).
Usage: python bench/two_stage.py [--skip-wiki] [--min-sentences 1000000]
"""

from __future__ import annotations

import argparse
import itertools
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sdr_search.indexer.embedded import EmbeddedStore  # noqa: E402
from sdr_search.indexer.pipeline import index_documents  # noqa: E402
from sdr_search.indexer.provenance import segmentation_record  # noqa: E402
from sdr_search.indexer.settings import EmbeddedStoreSettings  # noqa: E402
from sdr_search.indexer.stats_job import refresh_stats  # noqa: E402
from sdr_search.reranker.engine import MLTSettings, MoreLikeThis, Query  # noqa: E402
from sdr_search.core.cache import EmbeddingCache  # noqa: E402
from sdr_search.core.documents import Document, read_documents  # noqa: E402
from sdr_search.core.embed import embed_documents  # noqa: E402
from sdr_search.core.encoder import SentenceEncoder  # noqa: E402
from sdr_search.core.evaluation import sdr_rank_scores  # noqa: E402
from sdr_search.core.scoring import document_max, paragraph_scores, rank, sdr_scores  # noqa: E402
from sdr_search.core.sentences import default_splitter  # noqa: E402
from sdr_search.core.settings import CacheSettings, SegmentationSettings  # noqa: E402
from sdr_search.core.vectors import DocVectors  # noqa: E402

DATA = ROOT.parent / "shared" / "data"


def rss_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def dir_mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 1e6


def reusable_store(args, path: Path, docs: list[Document], encoder, cache) -> EmbeddedStore:
    """The store at ``path``: reopened with ``--reuse`` when it exists, else built from ``docs``."""
    if args.reuse and (path / "store.sqlite").exists():
        return EmbeddedStore(path)
    return build_store(path, docs, encoder, cache, sample=args.sample)


def build_store(path: Path, docs: list[Document], encoder, cache, *, sample: int) -> EmbeddedStore:
    store = EmbeddedStore(path, create=True)
    index_documents(store, docs, encoder, cache=cache, progress=True, total=len(docs),
                    segmentation=segmentation_record(SegmentationSettings(), default_splitter().source))
    refresh_stats(store, exact=False, sample_size=sample, seed=0, progress=True)
    return store


def exhaustive_top(engine: MoreLikeThis, source, corpus, k: int = 10) -> list[str]:
    P = paragraph_scores(source.vectors, corpus)
    scores = sdr_scores(document_max(P, corpus.doc_par_offsets), source.stats)
    order = rank(list(corpus.ids), scores)
    out = [corpus.ids[i] for i in order if corpus.ids[i] != source.indexed_id]
    return out[:k]


def configure_knn(store: EmbeddedStore, twins: bool, rounds: int | None = None, oversample: int | None = None) -> None:
    """Set the store's nested k-NN twin expansion, search rounds and oversampling
    (SDR_STORE_KNN_TWINS, _ROUNDS, _OVERSAMPLE; None: the settings' default)."""
    defaults = EmbeddedStoreSettings()
    store.settings = store.settings.model_copy(update={
        "knn_twins": twins,
        "knn_rounds": defaults.knn_rounds if rounds is None else rounds,
        "knn_oversample": defaults.knn_oversample if oversample is None else oversample,
    })


def fidelity(store, encoder, sources, ks, aggregations, knn_ks, corpus, exact_tops=None, twins=False,
             rounds=None, oversample=None, prerank=None) -> list[dict]:
    rows = []
    truth = {}
    configure_knn(store, twins, rounds, oversample)
    engine = MoreLikeThis(store=store, encoder=encoder)
    for name, src, _ in sources:
        truth[name] = exhaustive_top(engine, src, corpus)
    for agg in aggregations:
        for knn_k in knn_ks:
            for K in ks:
                eng = MoreLikeThis(store=store, encoder=encoder,
                                   settings=MLTSettings(candidates=K, knn_k=knn_k, aggregation=agg,
                                                        prerank_factor=prerank or MLTSettings().prerank_factor))
                ov, ov_exact, times = [], [], []
                for name, _, query in sources:
                    t = time.perf_counter()
                    res = eng.run(query)
                    times.append(time.perf_counter() - t)
                    top = [h.id for h in res.hits]
                    ov.append(len(set(top) & set(truth[name])) / max(1, len(truth[name])))
                    if exact_tops:
                        ov_exact.append(len(set(top) & set(exact_tops[name])) / 10)
                rows.append({"aggregation": agg, "prerank": eng.settings.prerank_factor,
                             "twins": twins, "rounds": store.settings.knn_rounds,
                             "oversample": store.settings.knn_oversample, "knn_k": knn_k, "K": K,
                             "recall@10": float(np.mean(ov)),
                             "min": float(np.min(ov)),
                             "vs_exact_stats": float(np.mean(ov_exact)) if ov_exact else None,
                             "ms_per_query": float(np.median(times) * 1e3)})
    return rows


def print_fidelity(title: str, rows: list[dict]) -> None:
    print(f"\n== {title}")
    print(f"{'aggregation':>12} {'prerank':>7} {'twins':>5} {'rounds':>6} {'over':>4} {'knn_k':>5} {'K':>5} {'top10 recall':>12} {'min':>5} "
          f"{'vs exact-stats':>14} {'ms/query':>9}")
    for r in rows:
        ve = f"{r['vs_exact_stats']:.3f}" if r["vs_exact_stats"] is not None else "-"
        print(f"{r['aggregation']:>12} {r['prerank']:>7g} {'on' if r['twins'] else 'off':>5} {r['rounds']:>6} {r['oversample']:>4} {r['knn_k']:>5} {r['K']:>5} "
              f"{r['recall@10']:12.3f} "
              f"{r['min']:5.2f} {ve:>14} {r['ms_per_query']:9.1f}")


def irled(args, encoder, cache, work: Path):
    corpus_docs = list(read_documents(DATA / "irled" / "corpus.jsonl.gz"))
    query_docs = list(read_documents(DATA / "irled" / "queries-dev.jsonl.gz"))
    t = time.perf_counter()
    store = reusable_store(args, work / "irled", corpus_docs, encoder, cache)
    if args.latency_only or args.skip_irled_fidelity:
        return store
    print(f"IRLeD store built (from cache) in {time.perf_counter() - t:.0f}s: {store.counts()}")
    corpus = store.all_vectors()
    engine = MoreLikeThis(store=store, encoder=encoder)
    sources, exact_tops = [], {}
    for d, v in embed_documents(query_docs, encoder, cache=cache):
        query = Query(document=d, vectors=v, size=10, method="sdr")
        sources.append((d.id, engine.source(query), query))
        s = sdr_rank_scores(v, corpus)  # exact statistics over every corpus paragraph
        exact_tops[d.id] = [corpus.ids[i] for i in rank(list(corpus.ids), s)[:10]]
    rows = []
    for factor in args.prerank:
        rows += fidelity(store, encoder, sources, ks=[50, 100, 200], aggregations=["weighted-sum"],
                         knn_ks=sorted({20, args.knn_k}), corpus=corpus, exact_tops=exact_tops, prerank=factor)
    if args.skip_knn_variants:
        configure_knn(store, False)
        print_fidelity("fidelity: IRLeD dev (50 new-text queries, sampled stats R=%d)" % args.sample, rows)
        return store
    rows += fidelity(store, encoder, sources, ks=[50, 100, 200], aggregations=["sum", "votes", "sdr-bound"],
                     knn_ks=[args.knn_k], corpus=corpus, exact_tops=exact_tops)
    rows += fidelity(store, encoder, sources, ks=[100, 200], aggregations=["weighted-sum", "sum"],
                     knn_ks=[k for k in (20, 100) if k != args.knn_k], corpus=corpus, exact_tops=exact_tops)
    rows += fidelity(store, encoder, sources, ks=[100, 200], aggregations=["weighted-sum"],
                     knn_ks=[20, args.knn_k, 100], corpus=corpus, exact_tops=exact_tops, twins=True)
    defaults = EmbeddedStoreSettings()
    variants = ([{"rounds": r} for r in (1, 2, 3) if r != defaults.knn_rounds]
                + [{"oversample": o} for o in (2, 4) if o != defaults.knn_oversample])
    for variant in variants:
        rows += fidelity(store, encoder, sources, ks=[100, 200], aggregations=["weighted-sum"],
                         knn_ks=[20, args.knn_k], corpus=corpus, exact_tops=exact_tops, **variant)
    configure_knn(store, False)
    print_fidelity("fidelity: IRLeD dev (50 new-text queries, sampled stats R=%d)" % args.sample, rows)
    return store


def wiki(args, encoder, cache, work: Path):
    path = DATA / "wiki" / "articles-00.jsonl.gz"
    docs = list(itertools.islice(read_documents(path), args.wiki_docs))
    store = build_store(work / "wiki", docs, encoder, cache, sample=args.sample)
    corpus = store.all_vectors()
    rng = np.random.default_rng(0)
    engine = MoreLikeThis(store=store, encoder=encoder)
    picks = rng.choice(len(docs), size=min(args.wiki_queries, len(docs)), replace=False)
    sources = [(docs[i].id, engine.source_from_id(docs[i].id), Query(id=docs[i].id, size=10, method="sdr")) for i in picks]
    rows = []
    for factor in args.prerank:
        rows += fidelity(store, encoder, sources, ks=[50, 100], aggregations=["weighted-sum"],
                         knn_ks=sorted({20, args.knn_k}), corpus=corpus, prerank=factor)
    if not args.skip_knn_variants:
        rows += fidelity(store, encoder, sources, ks=[50, 100], aggregations=["sum", "votes", "sdr-bound"],
                         knn_ks=[args.knn_k], corpus=corpus)
    print_fidelity(f"fidelity: wiki store of {len(docs)} articles ({corpus.n_sentences} sentences), "
                   f"{len(sources)} indexed sources", rows)
    store.close()


def latency(args, base_store: EmbeddedStore, work: Path, name: str = "IRLeD", path: Path | None = None):
    """Sections 3 and 4 on ``base_store``'s vectors tiled to size (the store ``path``)."""
    base = base_store.all_vectors()
    copies = int(np.ceil(args.min_sentences / base.n_sentences))
    path = path or work / "tiled"
    rng = np.random.default_rng(1)
    reuse = args.reuse and (path / "store.sqlite").exists()
    store = EmbeddedStore(path, create=True)
    store.ensure_meta(base_store.meta())
    ids = list(base.ids)
    t = time.perf_counter()
    for c in range(0 if reuse else copies):
        batch = []
        for k, doc_id in enumerate(ids):
            stored = base_store.get(doc_id)
            v = stored.vectors.vectors
            if c:
                v = v + rng.normal(scale=0.02, size=v.shape).astype(np.float32)
                v /= np.linalg.norm(v, axis=1, keepdims=True)
            d = stored.document
            batch.append((Document(f"{doc_id}#{c}", d.paragraphs, d.title, d.metadata), DocVectors(v, stored.vectors.par_offsets)))
            if len(batch) == 200:
                store.put(batch)
                batch = []
        if batch:
            store.put(batch)
    build = time.perf_counter() - t
    if not reuse:
        refresh_stats(store, exact=False, sample_size=args.sample, seed=0, progress=True)
    store.close()
    rss0 = rss_mb()
    store = EmbeddedStore(path)
    counts = store.counts()
    all_ids = list(store.iter_ids())
    sizes = {i: store.get(i).vectors.n_sentences for i in all_ids[: len(ids)]}
    pool = [i for i, n in sizes.items() if 150 <= n <= 250]
    picks = [pool[i] for i in rng.choice(len(pool), size=min(args.latency_queries, len(pool)), replace=False)]
    defaults = EmbeddedStoreSettings()
    default_rounds, default_over = defaults.knn_rounds, defaults.knn_oversample
    pre = MLTSettings().prerank_factor
    configs = ([(args.knn_k, False, default_rounds, default_over, pre)]
               + [(args.knn_k, False, default_rounds, default_over, f) for f in args.prerank if f != pre]
               + [(k, False, default_rounds, default_over, f) for k in args.latency_knn_k if k != args.knn_k
                  for f in args.prerank]
               + [(args.knn_k, False, r, default_over, pre) for r in args.latency_rounds if r != default_rounds]
               + [(args.knn_k, False, default_rounds, o, pre) for o in args.latency_oversample if o != default_over]
               + ([] if args.skip_knn_variants else [(args.knn_k, True, default_rounds, default_over, pre)]))
    timed = {}
    for knn_k, twins, rounds, over, factor in configs:
        configure_knn(store, twins, rounds, over)
        engine = MoreLikeThis(store=store, settings=MLTSettings(candidates=100, knn_k=knn_k, method="sdr",
                                                                prerank_factor=factor))
        engine.run(Query(id=picks[0]))  # warm up
        lat, parts = [], []
        for doc_id in picks:
            t = time.perf_counter()
            res = engine.run(Query(id=doc_id, size=10))
            lat.append(time.perf_counter() - t)
            parts.append(res.timings_ms)
        timed[knn_k, twins, rounds, over, factor] = (np.array(lat) * 1e3, parts)
    configure_knn(store, False)
    rss1 = rss_mb()
    corpus = store.all_vectors()
    ex = []
    for doc_id in picks[: args.exhaustive_queries]:
        src = engine.source_from_id(doc_id)
        t = time.perf_counter()
        exhaustive_top(engine, src, corpus)
        ex.append(time.perf_counter() - t)
    n_s = counts["sentences"]
    print(f"\n== latency: tiled store, {copies} copies of {name} = {counts['documents']} docs, {n_s} sentences "
          f"(real vectors; copies >0 with N(0, 0.02) noise, re-normalised); built in {build:.0f}s")
    print(f"sources: {len(picks)} indexed documents of 150-250 sentences; method sdr, K=100")
    print(f"{'':>50} {'p50 ms':>8} {'p99 ms':>8} {'mean ms':>8}")
    for (knn_k, twins, rounds, over, factor), (lat_ms, parts) in timed.items():
        label = f"knn_k={knn_k}, x{over}, rounds {rounds}, twins {'on' if twins else 'off'}, prerank {factor:g}"
        print(f"{label:>50} {np.percentile(lat_ms, 50):8.1f} {np.percentile(lat_ms, 99):8.1f} {lat_ms.mean():8.1f}")
        for part in ("candidates", "prerank", "fetch", "rerank"):
            v = np.array([p.get(part, 0.0) for p in parts])
            print(f"{'  of which ' + part:>50} {np.percentile(v, 50):8.1f} {np.percentile(v, 99):8.1f} {v.mean():8.1f}")
    lat_ms = timed[args.knn_k, False, default_rounds, default_over, pre][0]
    ex_ms = np.array(ex) * 1e3
    print(f"{'exhaustive exact SDR':>50} {np.percentile(ex_ms, 50):8.1f} {np.percentile(ex_ms, 99):8.1f} {ex_ms.mean():8.1f}")
    print(f"speed-up (p50, knn_k={args.knn_k}): {np.percentile(ex_ms, 50) / np.percentile(lat_ms, 50):.0f}x")
    disk = dir_mb(path)
    raw = n_s * base.dim * 4 / 1e6
    print(f"\n== memory ({n_s / 1e6:.2f}M sentences, dim {base.dim})")
    print(f"raw float32 vectors: {raw:.0f} MB ({raw / (n_s / 1e6):.0f} MB per million)")
    print(f"store on disk:       {disk:.0f} MB ({disk / (n_s / 1e6):.0f} MB per million); files: "
          + ", ".join(f"{p.name}={p.stat().st_size / 1e6:.0f}MB" for p in sorted(path.iterdir()) if p.is_file()))
    print(f"process RSS after queries: {rss1:.0f} MB (opened store and queried: +{rss1 - rss0:.0f} MB; "
          f"{(rss1 - rss0) / (n_s / 1e6):.0f} MB per million sentences)")
    print(f"peak RSS of the whole bench: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
    store.close()


def wiki_latency(args, encoder, cache, work: Path) -> None:
    """Sections 3 and 4 on the vectors of the first ``--latency-wiki-docs`` wiki articles."""
    docs = list(itertools.islice(read_documents(DATA / "wiki" / "articles-00.jsonl.gz"), args.latency_wiki_docs))
    base = reusable_store(args, work / "wiki-latency", docs, encoder, cache)
    latency(args, base, work, f"{len(docs)} wiki articles", work / "tiled-wiki")
    base.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sample", type=int, default=5000)
    ap.add_argument("--knn-k", type=int, default=MLTSettings().knn_k)
    ap.add_argument("--skip-wiki", action="store_true")
    ap.add_argument("--skip-latency", action="store_true")
    ap.add_argument("--wiki-docs", type=int, default=500)
    ap.add_argument("--wiki-queries", type=int, default=50)
    ap.add_argument("--min-sentences", type=int, default=1_000_000)
    ap.add_argument("--latency-queries", type=int, default=100)
    ap.add_argument("--latency-knn-k", type=int, nargs="*", default=[20], help="also time these knn_k values")
    ap.add_argument("--latency-rounds", type=int, nargs="*", default=[1, 3],
                    help="also time these nested k-NN search rounds (SDR_STORE_KNN_ROUNDS) at the default knn_k")
    ap.add_argument("--latency-oversample", type=int, nargs="*", default=[2, 4],
                    help="also time these nested k-NN oversampling factors (SDR_STORE_KNN_OVERSAMPLE)")
    ap.add_argument("--prerank", type=float, nargs="*", default=[1.0, 2.0],
                    help="centroid pre-rank factors (SDR_PRERANK_FACTOR) compared in every section; 1 = off")
    ap.add_argument("--skip-knn-variants", action="store_true",
                    help="only the pre-rank comparison: no other aggregations, twins, rounds or oversampling rows")
    ap.add_argument("--exhaustive-queries", type=int, default=5)
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--reuse", action="store_true", help="reuse stores already built in --workdir")
    ap.add_argument("--latency-only", action="store_true", help="skip the fidelity sections")
    ap.add_argument("--skip-irled-fidelity", action="store_true", help="skip section 1 (IRLeD fidelity)")
    ap.add_argument("--skip-irled-latency", action="store_true", help="time only the wiki latency store")
    ap.add_argument("--latency-wiki-docs", type=int, default=1000,
                    help="wiki articles whose vectors are tiled for the second latency store (0: skip it)")
    args = ap.parse_args()

    encoder = SentenceEncoder()
    cache = EmbeddingCache(CacheSettings().cache_dir / "embeddings.sqlite")
    work = args.workdir or Path(tempfile.mkdtemp(prefix="sdr-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        store = irled(args, encoder, cache, work)
        if not args.skip_wiki and not args.latency_only:
            wiki(args, encoder, cache, work)
        if not args.skip_latency:
            if not args.skip_irled_latency:
                latency(args, store, work)
            if args.latency_wiki_docs:
                wiki_latency(args, encoder, cache, work)
        store.close()
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
