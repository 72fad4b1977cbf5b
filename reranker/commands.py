"""Handler of ``sdr mlt`` (argument parsing lives in sdr_search.cli)."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

from sdr_search.core.errors import InputReadError, InvalidInputError
from sdr_search.core.fusion import format_weights, parse_weights

logger = logging.getLogger("sdr")

__all__ = ["cmd_mlt", "cmd_eval_store", "record_from_file", "fusion_args"]


def record_from_file(path: Path) -> dict:
    """A source document from a file: ``.txt`` is raw text; ``.json``/``.jsonl`` the first record."""
    if not path.is_file():
        raise InputReadError(f"source file {path} does not exist")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InvalidInputError(f"{path}: not valid UTF-8 (byte 0x{raw[e.start]:02x} at offset {e.start})") from e
    if path.suffix in (".json", ".jsonl"):
        line = text.strip().splitlines()[0] if text.strip() else ""
        try:
            record = json.loads(text if path.suffix == ".json" else line)
        except json.JSONDecodeError as e:
            raise InvalidInputError(f"{path}: invalid JSON ({e.msg})") from e
        if not isinstance(record, dict):
            raise InvalidInputError(f"{path}: expected a JSON object")
        return {k: v for k, v in record.items() if k in ("text", "paragraphs", "sections", "title")}
    return {"text": text}


def fusion_args(args) -> dict:
    """``method``/``fusion``/``weights``/``rank_constant`` given on the command line (for
    :meth:`sdr_search.reranker.engine.MoreLikeThis.resolve`); absent ones are left to the defaults."""
    out: dict = {}
    if getattr(args, "method", None):
        out["method"] = args.method
    if getattr(args, "fusion", None):
        out["fusion"] = args.fusion
    if getattr(args, "weights", None):
        out["weights"] = parse_weights(args.weights)
    if getattr(args, "rank_constant", None) is not None:
        out["rank_constant"] = args.rank_constant
    return out


def encoder_for_store(args, store):
    """The query encoder: --model / SDR_MODEL when given, else the model the store was built with."""
    from sdr_search.cli_args import encoder_settings
    from sdr_search.core.encoder import SentenceEncoder

    settings = encoder_settings(args)
    meta = store.meta()
    if settings.model is None and meta is not None and meta.model_dir is not None:
        settings = settings.model_copy(update={"model": meta.model_dir})
    return SentenceEncoder(settings=settings)


def cmd_mlt(args) -> int:
    from sdr_search.indexer.commands import open_store

    from .engine import MLTSettings, MoreLikeThis

    settings = MLTSettings(**({"candidates": args.candidates} if args.candidates else {}))
    fusion = fusion_args(args)
    with open_store(args) as store:
        encoder = encoder_for_store(args, store) if args.id is None else None
        engine = MoreLikeThis(store=store, encoder=encoder, settings=settings)
        if args.id is not None:
            result = engine.more_like_this(doc_id=args.id, size=args.size, explain=args.explain, **fusion)
        else:
            record = {"text": args.text} if args.text is not None else record_from_file(args.file)
            result = engine.more_like_this(record=record, size=args.size, explain=args.explain, **fusion)
    if args.json:
        sys.stdout.write(json.dumps(result.to_dict()) + "\n")
        return 0
    lines = [f"{'rank':>4}  {'score':>8}  id"]
    for r, h in enumerate(result.hits, 1):
        lines.append(f"{r:>4}  {h.score:8.4f}  {h.id}" + (f"  ({h.title})" if h.title else ""))
        if h.explanation and h.signals:
            lines.append("        " + "  ".join(
                f"{name} {v['raw']:.3f}" + (f" -> {v['normalised']:.3f} x{v['weight']:g}" if "normalised" in v else "")
                for name, v in h.signals.items()
            ))
        if h.explanation:
            for p in h.explanation["paragraph_pairs"]:
                lines.append(
                    f"        paragraph {p['source_paragraph']} ~ {p['candidate_paragraph']}: "
                    f"normalised {p['normalised_score']:.3f} (raw {p['paragraph_score']:.3f})"
                )
                for sp in p["sentence_pairs"]:
                    lines.append(f"          {sp['cosine']:.3f}  {sp['source_sentence'][:70]!r}")
                    lines.append(f"                 ~ {sp['candidate_sentence'][:70]!r}")
    stale = " (stats stale: run `sdr stats`)" if result.stats_stale else ""
    how = "reranked exactly" if result.hybrid is None else (
        f"fused ({result.hybrid['fusion']}, weights {format_weights(result.hybrid['weights'])})")
    lines.append(f"{result.candidates} candidates {how}; stats from {result.stats_origin}{stale}")
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


def cmd_eval_store(args) -> int:
    """`sdr eval --store`: every query through the two-stage engine (raw-text sources)."""
    import time

    from sdr_search.indexer.commands import open_store
    from sdr_search.cli_args import cache_from_args
    from sdr_search.core.documents import ReadReport, read_documents
    from sdr_search.core.embed import embed_documents
    from sdr_search.core.errors import SDRError
    from sdr_search.core.metrics import evaluate, read_qrels, write_run

    from .engine import MLTSettings, MoreLikeThis

    if args.method not in ("sdr", "hybrid"):
        raise SDRError("with --store only --method sdr (two-stage exact SDR) and --method hybrid are available")
    t0 = time.perf_counter()
    qrels = read_qrels(args.qrels)
    report = ReadReport()
    settings = MLTSettings(**({"candidates": args.candidates} if args.candidates else {}))
    runs = {}
    with open_store(args) as store:
        encoder = encoder_for_store(args, store)
        engine = MoreLikeThis(store=store, encoder=encoder, settings=settings)
        engine.check_encoder()
        # queries are segmented as the store's documents were (its recorded segmentation)
        query_docs = list(read_documents(args.queries, settings=engine.segmentation(), report=report, strict=args.strict))
        spec = engine.resolve(**fusion_args(args))
        cache = cache_from_args(args)
        pairs = list(embed_documents(query_docs, encoder, cache=cache, progress=not args.no_progress, total=len(query_docs)))
        bar = None
        if not args.no_progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(pairs), unit="query", desc="two-stage ranking")
        for doc, vecs in pairs:
            source = engine.source_from_vectors(doc, vecs)
            result = engine.search(source, size=settings.candidates, hybrid=spec)
            runs[doc.id] = [(h.id, h.score) for h in result.hits]
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
    out = {"method": args.method, "engine": "two-stage", "candidates": settings.candidates, **extra, **result,
           "model": encoder.model_id, "corpus_documents": n_docs,
           "skipped": {"queries": report.n_skipped}, "seconds": round(time.perf_counter() - t0, 1)}
    sys.stdout.write(json.dumps(out) + "\n")
    return 0
