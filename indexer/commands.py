"""Handlers of ``sdr index``, ``sdr stats`` and ``sdr info`` (argument parsing lives in sdr_search.cli)."""

from __future__ import annotations

import json
import logging
import sys
import time

logger = logging.getLogger("sdr")

__all__ = ["cmd_index", "cmd_stats", "cmd_info", "cmd_defaults", "open_store"]


def open_store(args, *, create: bool = False):
    """The store named on the command line: ``--store DIR`` (embedded) or ``--opensearch URL``."""
    if getattr(args, "opensearch", None):
        from .opensearch import OpenSearchSettings, OpenSearchStore

        settings = OpenSearchSettings()
        index = args.index or settings.index
        return OpenSearchStore(args.opensearch, index=index, settings=settings)
    from .embedded import EmbeddedStore

    return EmbeddedStore(args.store, create=create)


def store_label(args) -> str:
    return f"{args.opensearch}/{args.index or 'default index'}" if getattr(args, "opensearch", None) else str(args.store)


def store_segmentation(args, recorded):
    """How documents added to a store are segmented: as the store recorded (an older store that
    recorded no such field keeps its as-given paragraphs), or from the flags and settings for a new
    one. A flag given explicitly that differs from the record is refused, not silently dropped."""
    from sdr_search.cli_args import segmentation_settings
    from sdr_search.core.errors import ModelMismatchError
    from sdr_search.core.settings import SegmentationSettings

    if not recorded:
        return segmentation_settings(args)
    seg = SegmentationSettings.from_recorded(recorded)
    for key, have in seg.recorded().items():
        given = getattr(args, key, None)
        if given is not None and given != have:
            raise ModelMismatchError(
                f"store {store_label(args)} was built with {key}={have!r}, not {given!r}; "
                "re-index into a new store (sdr reindex) to change its segmentation"
            )
    return seg


def cmd_index(args) -> int:
    from sdr_search.cli_args import cache_from_args, encoder_settings
    from sdr_search.core.documents import ReadReport, read_documents
    from sdr_search.core.encoder import SentenceEncoder
    from sdr_search.core.sentences import default_splitter

    from .pipeline import index_documents
    from .provenance import segmentation_mismatch, segmentation_record
    from .stats_job import refresh_stats

    t0 = time.perf_counter()
    report = ReadReport()
    encoder = SentenceEncoder(settings=encoder_settings(args))
    cache = cache_from_args(args)
    with open_store(args, create=True) as store:
        meta = store.meta()
        seg = store_segmentation(args, meta.segmentation if meta is not None else None)
        segmentation = segmentation_record(seg, default_splitter().source)
        mismatch = segmentation_mismatch(meta.segmentation if meta is not None else None, segmentation)
        if mismatch:
            from sdr_search.core.errors import ModelMismatchError

            raise ModelMismatchError(f"store {store_label(args)} {mismatch}; index with the same segmentation flags")
        docs = read_documents(args.paths, settings=seg, report=report, strict=args.strict)
        summary = index_documents(
            store, docs, encoder, cache=cache, progress=not args.no_progress, segmentation=segmentation,
        )
        summary.skipped = report.n_skipped
        stats = None
        if not args.no_stats and (summary.indexed or store.stats_info().stale):
            stats = refresh_stats(store, exact=False, sample_size=args.sample, seed=args.seed, progress=not args.no_progress)
        lexical = getattr(store, "refresh_lexical", None)  # embedded: build the BM25 index now, not at the first query
        lexical_docs = lexical() if callable(lexical) else None
        counts = store.counts()
    if cache is not None:
        cache.close()
    out = {**summary.to_dict(), "store": counts, "seconds": round(time.perf_counter() - t0, 1)}
    if lexical_docs is not None:
        out["lexical_documents"] = lexical_docs
    if stats is not None:
        out["stats"] = stats.to_dict()
    if summary.failures:
        out["failures"] = [{"id": i, "error": e} for i, e in summary.failures[:50]]
    sys.stdout.write(json.dumps(out) + "\n")
    return 1 if summary.failed else 0


def cmd_stats(args) -> int:
    from .stats_job import refresh_stats

    t0 = time.perf_counter()
    with open_store(args) as store:
        info = refresh_stats(
            store, exact=args.sample is None, sample_size=args.sample or args.reference_size, seed=args.seed,
            progress=not args.no_progress,
        )
    out = {**info.to_dict(), "seconds": round(time.perf_counter() - t0, 1)}
    sys.stdout.write(json.dumps(out) + "\n")
    return 0


def _segmentation_line(recorded) -> str:
    from sdr_search.core.settings import SegmentationSettings

    seg = SegmentationSettings.from_recorded(recorded)
    return (f"{seg.paragraph_unit}s merged to >= {seg.min_paragraph_sentences} sentences, "
            f"sentences under {seg.min_sentence_chars} characters joined")


def cmd_info(args) -> int:
    with open_store(args) as store:
        meta = store.meta()
        info = {
            "store": store_label(args),
            **store.counts(),
            "meta": meta.to_dict() if meta else None,
            "stats": store.stats_info().to_dict(),
        }
    if args.json:
        sys.stdout.write(json.dumps(info) + "\n")
    else:
        st = info["stats"]
        lines = [
            f"store:      {info['store']}",
            f"documents:  {info['documents']}",
            f"paragraphs: {info['paragraphs']}",
            f"sentences:  {info['sentences']}",
            f"model:      {meta.model_id if meta else '-'} (dim {meta.dim if meta else '-'})",
            f"segmentation: {_segmentation_line(meta.segmentation) if meta else '-'}",
            f"stats:      version {st['version']}, {st['mode'] or 'none'}"
            + (f" (R={st['sample_size']})" if st["mode"] == "sampled" else "")
            + (", STALE (run `sdr stats`)" if st["stale"] else ", up to date"),
        ]
        sys.stdout.write("\n".join(lines) + "\n")
    return 0


def cmd_defaults(args) -> int:
    """``sdr defaults``: show, change (``--method``, ``--fusion``, ``--weights``, ``--rank-constant``)
    or clear (``--clear``) the index's recorded search defaults; prints them as JSON."""
    from sdr_search.core.fusion import parse_weights

    changes = {k: v for k, v in {
        "method": args.method, "fusion": args.fusion,
        "weights": parse_weights(args.weights) if args.weights else None,
        "rank_constant": args.rank_constant,
    }.items() if v is not None}
    with open_store(args) as store:
        current = {} if args.clear else store.search_defaults()
        if changes or args.clear:
            current = store.set_search_defaults({**current, **changes})
    sys.stdout.write(json.dumps({"store": store_label(args), "search_defaults": current}) + "\n")
    return 0
