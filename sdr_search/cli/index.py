"""``sdr index``, ``sdr stats``, ``sdr info`` and ``sdr defaults``: a store named by the flags, the
indexer's library calls, a JSON (or text) summary on stdout."""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path

from .args import cache_from_args, encoder_settings, open_store, segmentation_settings, store_label

logger = logging.getLogger("sdr")

__all__ = ["cmd_index", "cmd_stats", "cmd_info", "cmd_defaults", "store_segmentation"]


_SEGMENTATION_FLAGS = ("paragraph_unit", "min_paragraph_sentences", "min_sentence_chars")


def store_segmentation(args, recorded):
    """How documents added to a store are segmented (:func:`sdr_search.indexer.ingest.recorded_segmentation`
    with the command line's flags: a flag given explicitly that differs from the record is refused)."""
    from sdr_search.indexer.ingest import recorded_segmentation

    return recorded_segmentation(recorded, segmentation_settings(args), label=f"store {store_label(args)}",
                                 explicit={k: getattr(args, k, None) for k in _SEGMENTATION_FLAGS})


def _new_directories(path) -> Path | None:
    """The outermost of ``path`` and its parents that does not exist yet (None if ``path`` exists)."""
    path = Path(path).absolute()
    if path.exists():
        return None
    top = path
    while not top.parent.exists():
        top = top.parent
    return top


def cmd_index(args) -> int:
    """``sdr index``. The inputs and the model are checked before the store is created
    (:func:`sdr_search.indexer.ingest.index_paths`); should the run still fail before it wrote any
    document, an embedded store directory it created is removed again."""
    from sdr_search.core.encoder import SentenceEncoder
    from sdr_search.indexer.ingest import index_paths

    encoder = SentenceEncoder(settings=encoder_settings(args))
    embedded = not getattr(args, "opensearch", None)
    created = _new_directories(args.store) if embedded and args.store else None
    cache = cache_from_args(args)
    try:
        with open_store(args, create=True) as store:
            out = index_paths(
                store, args.paths, encoder=encoder, cache=cache, segmentation=segmentation_settings(args),
                explicit={k: getattr(args, k, None) for k in _SEGMENTATION_FLAGS}, strict=args.strict,
                progress=not args.no_progress, stats=not args.no_stats, sample=args.sample, seed=args.seed,
                label=f"store {store_label(args)}",
            )
    except BaseException:
        if created is not None:
            _remove_failed_start(Path(args.store), created)
        raise
    finally:
        if cache is not None:
            cache.close()
    sys.stdout.write(json.dumps(out) + "\n")
    return 1 if out["failed"] else 0


def _remove_failed_start(store_dir: Path, created: Path) -> None:
    """Remove the store this run created when it holds no document, and the parent directories
    the run created with it (``created``: the outermost), when they are empty."""
    from sdr_search.indexer.embedded.store import remove_unused_store

    try:
        if not remove_unused_store(store_dir):
            return
        logger.info("removed %s: this run created it and wrote no document", store_dir)
        here = store_dir.absolute().parent
        top = created.absolute()
        while here != top.parent and top in (here, *here.parents) and here.is_dir() and not any(here.iterdir()):
            here.rmdir()
            here = here.parent
    except OSError as e:  # cleaning up must not hide the error that stopped the run
        logger.warning("could not remove %s left by the failed run: %s", store_dir, e)


def cmd_stats(args) -> int:
    """``sdr stats``: refresh the statistics; prints the new state as JSON. A store of one document
    has none (they are taken over the other documents): exit 0 all the same, with
    ``"unavailable"`` saying why (:data:`sdr_search.indexer.stats_job.ONE_DOCUMENT`)."""
    from sdr_search.indexer.stats_job import refresh_stats, unavailable_reason

    t0 = time.perf_counter()
    with open_store(args) as store:
        info = refresh_stats(
            store, exact=args.sample is None, sample_size=args.sample or args.reference_size, seed=args.seed,
            progress=not args.no_progress,
        )
        reason = unavailable_reason(store.counts()["documents"])
    out = {**info.to_dict(), **({"unavailable": reason} if reason else {}), "seconds": round(time.perf_counter() - t0, 1)}
    sys.stdout.write(json.dumps(out) + "\n")
    return 0


def _segmentation_line(recorded) -> str:
    from sdr_search.core.settings import SegmentationSettings

    seg = SegmentationSettings.from_recorded(recorded)
    return (f"{seg.paragraph_unit}s merged to >= {seg.min_paragraph_sentences} sentences, "
            f"sentences under {seg.min_sentence_chars} characters joined")


def cmd_info(args) -> int:
    """``sdr info``: counts, model, segmentation and statistics, after a thorough check of the store
    (every page of an embedded store's database is read); a damaged store is reported as such, with
    exit status 2."""
    from sdr_search.core.errors import StoreDamagedError
    from sdr_search.indexer.stats_job import unavailable_reason

    with open_store(args) as store:
        try:
            counts = store.verify(thorough=True)
        except StoreDamagedError as e:
            info = {"store": store_label(args), "damaged": str(e)}
            sys.stdout.write((json.dumps(info) if args.json else f"store:      {info['store']}\nDAMAGED:    {e}") + "\n")
            return 2
        meta = store.meta()
        info = {
            "store": store_label(args),
            **counts,
            "meta": meta.to_dict() if meta else None,
            "stats": store.stats_info().to_dict(),
        }
    reason = unavailable_reason(info["documents"])
    if reason:
        info["stats"]["unavailable"] = reason
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
            (f"stats:      unavailable ({reason})" if reason else
             f"stats:      version {st['version']}, {st['mode'] or 'none'}"
             + (f" (R={st['sample_size']})" if st["mode"] == "sampled" else "")
             + (", STALE (run `sdr stats`)" if st["stale"] else ", up to date")),
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
