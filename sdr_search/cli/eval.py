"""``sdr eval``: relevance metrics of a ranking method over a corpus and TREC qrels, exhaustively
(``--corpus``, :func:`cmd_eval`) or through the two-stage engine over a store (``--store`` /
``--opensearch``, :func:`cmd_eval_store`); one JSON object on stdout."""

from __future__ import annotations

import json
import logging
import sys
import time

from sdr_search.core.errors import SDRError

from .args import (
    cache_from_args,
    encoder_for_store,
    encoder_settings,
    fusion_args,
    hybrid_spec_from_args,
    open_store,
    segmentation_settings,
)

__all__ = ["cmd_eval", "cmd_eval_store"]

logger = logging.getLogger("sdr")


def cmd_eval(args) -> int:
    from sdr_search.core.documents import ReadReport, read_documents
    from sdr_search.core.encoder import SentenceEncoder
    from sdr_search.core.embed import embed_corpus, embed_documents
    from sdr_search.core.evaluation import EvalInputs, VECTOR_METHODS, cut_source, parse_source_cut, rank_all, weights_by_kind
    from sdr_search.core.fusion import SourceShape
    from sdr_search.core.metrics import evaluate, read_qrels, write_run

    cut = parse_source_cut(getattr(args, "source_cut", None))  # validated before any reading
    if args.store is not None or args.opensearch is not None:
        return cmd_eval_store(args)
    if not args.corpus:
        raise SDRError("sdr eval needs --corpus (exhaustive ranking) or --store (two-stage engine)")
    hybrid = None
    if args.method == "hybrid":  # validated before any reading or encoding
        from sdr_search.core.settings import HybridSettings

        hybrid = hybrid_spec_from_args(args, HybridSettings().spec())
    elif args.fusion or args.weights or args.rank_constant is not None:
        raise SDRError("--fusion, --weights and --rank-constant apply to --method hybrid only")
    t0 = time.perf_counter()
    progress = not args.no_progress
    seg = segmentation_settings(args)
    qrels = read_qrels(args.qrels)
    corpus_report, query_report = ReadReport(), ReadReport()
    corpus_docs = list(read_documents(args.corpus, settings=seg, report=corpus_report, strict=args.strict))
    query_docs = list(read_documents(args.queries, settings=seg, report=query_report, strict=args.strict))
    query_docs = [cut_source(q, cut) for q in query_docs]
    if not corpus_docs:
        raise SDRError("the corpus has no usable document")
    if not query_docs:
        raise SDRError("there is no usable query document")
    logger.info("corpus: %d documents (%d skipped); queries: %d (%d skipped)",
                corpus_report.read, corpus_report.n_skipped, query_report.read, query_report.n_skipped)
    inputs = EvalInputs(corpus_docs, query_docs)
    extra: dict = {}
    if args.method in VECTOR_METHODS:
        encoder = SentenceEncoder(settings=encoder_settings(args))
        cache = cache_from_args(args)
        try:
            inputs.query_vectors = [v for _, v in embed_documents(query_docs, encoder, cache=cache, progress=progress, total=len(query_docs))]
            inputs.corpus_vectors = embed_corpus(corpus_docs, encoder, cache=cache, progress=progress)
        finally:
            if cache is not None:
                cache.close()
        extra["model"] = encoder.model_id
        extra["precision"] = encoder.precision
    if args.method in ("sdr", "hybrid"):
        extra["stats"] = args.stats if args.stats == "exact" else f"sampled(R={args.sample}, seed={args.seed})"
    if hybrid is not None:
        extra["hybrid"] = {**hybrid.to_dict(), "candidates": args.candidates or 100}
    weights_used: dict = {}
    runs = rank_all(args.method, inputs, stats=args.stats, sample_size=args.sample, seed=args.seed, progress=progress,
                    hybrid=hybrid, candidates=args.candidates or 100, weights_used=weights_used)
    if hybrid is not None:  # the fusion weights it used, per query kind (one paragraph / several)
        by_kind = weights_by_kind(weights_used, {q.id: SourceShape.of(q) for q in query_docs})
        extra["hybrid"]["weights_used"] = by_kind
        for kind, entry in by_kind.items():
            logger.info("fusion weights, %s (%d queries, %d-%d sentences): %s", kind, entry["queries"],
                        *entry["sentences"], ", ".join(f"{s} {entry[s]['mean']:.2f}" for s in ("bm25", "sdr", "mean")
                                                       if s in entry)
                        + (f"; document feedback share {entry['feedback']['mean']:.2f}" if "feedback" in entry else ""))
    if cut is not None:
        extra["source_cut"] = str(cut)
    result = evaluate({q: [d for d, _ in r] for q, r in runs.items()}, qrels)
    if args.run:
        args.run.parent.mkdir(parents=True, exist_ok=True)
        write_run(args.run, {q: r[: args.run_depth] for q, r in runs.items()}, args.run_tag or args.method)
        logger.info("wrote run file %s", args.run)
    out = {"method": args.method, **result, **extra,
           "segmentation": seg.recorded(),
           "corpus_documents": len(corpus_docs),
           "skipped": {"corpus": corpus_report.n_skipped, "queries": query_report.n_skipped},
           "seconds": round(time.perf_counter() - t0, 1)}
    sys.stdout.write(json.dumps(out) + "\n")
    return 0


def cmd_eval_store(args) -> int:
    """`sdr eval --store`: every query through the two-stage engine (raw-text sources)."""
    from sdr_search.core.documents import ReadReport, read_documents
    from sdr_search.core.embed import embed_documents
    from sdr_search.core.evaluation import cut_source, parse_source_cut, weights_by_kind
    from sdr_search.core.fusion import SIGNALS, SourceShape
    from sdr_search.core.metrics import evaluate, read_qrels, write_run
    from sdr_search.reranker.engine import MLTSettings, MoreLikeThis, Query

    cut = parse_source_cut(getattr(args, "source_cut", None))
    if args.method not in ("sdr", "hybrid"):
        raise SDRError("with --store only --method sdr (two-stage exact SDR) and --method hybrid are available")
    t0 = time.perf_counter()
    qrels = read_qrels(args.qrels)
    report = ReadReport()
    settings = MLTSettings(**({"candidates": args.candidates} if args.candidates is not None else {}))
    runs = {}
    with open_store(args) as store:
        encoder = encoder_for_store(args, store)
        engine = MoreLikeThis(store=store, encoder=encoder, settings=settings)
        engine.check_encoder()
        fusion = fusion_args(args)
        # queries are segmented as the store's documents were (its recorded segmentation)
        query_docs = list(read_documents(args.queries, settings=engine.segmentation(), report=report, strict=args.strict))
        query_docs = [cut_source(q, cut) for q in query_docs]  # --source-cut: short sources, same qrels
        spec = engine.resolve(**fusion_args(args))
        weights_used: dict = {}
        cache = cache_from_args(args)
        pairs = list(embed_documents(query_docs, encoder, cache=cache, progress=not args.no_progress, total=len(query_docs)))
        bar = None
        if not args.no_progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(pairs), unit="query", desc="two-stage ranking")
        for doc, vecs in pairs:
            result = engine.run(Query(document=doc, vectors=vecs, size=settings.candidates, details=False, **fusion))
            runs[doc.id] = [(h.id, h.score) for h in result.hits]
            signals = result.hits[0].signals if result.hits and spec is not None else None
            if signals:  # the weights the engine reports for this query's fusion
                total = sum(float(signals[s].weight) for s in SIGNALS if s in signals) or 1.0
                weights_used[doc.id] = {s: float(signals[s].weight) / total for s in SIGNALS if s in signals}
                if spec.feedback:  # the share document feedback took (0: the source was too long for it)
                    weights_used[doc.id]["feedback"] = float((result.hybrid or {}).get("feedback", {}).get("share", 0.0))
            if bar is not None:
                bar.update(1)
        if bar is not None:
            bar.close()
        n_docs = store.counts()["documents"]
    result = evaluate({q: [d for d, _ in r] for q, r in runs.items()}, qrels)
    if args.run:
        args.run.parent.mkdir(parents=True, exist_ok=True)
        write_run(args.run, runs, args.run_tag or f"{args.method}-two-stage")
    extra = {"hybrid": spec.to_dict()} if spec is not None else {}
    if spec is not None:  # the fusion weights used, per query kind (one paragraph / several)
        extra["hybrid"]["weights_used"] = weights_by_kind(weights_used, {q.id: SourceShape.of(q) for q in query_docs})
    if cut is not None:
        extra["source_cut"] = str(cut)
    out = {"method": args.method, "engine": "two-stage", "candidates": settings.candidates, **extra, **result,
           "model": encoder.model_id, "corpus_documents": n_docs,
           "skipped": {"queries": report.n_skipped}, "seconds": round(time.perf_counter() - t0, 1)}
    sys.stdout.write(json.dumps(out) + "\n")
    return 0
