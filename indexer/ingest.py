"""Index files into a store: what ``sdr index`` and :func:`sdr_search.index_files` do (one path).

Segmentation follows the store's record (a new store records ``segmentation``); documents are
read, encoded and written by :func:`sdr_search.indexer.pipeline.index_documents`; the statistics
are refreshed when documents changed; a store with a lexical index builds it now rather than at the
first query. Returns the summary ``sdr index`` prints.

The input paths and the model are checked before the store is first touched, so a mistyped path
or ``--model`` fails without creating an empty store. Sentences cut at the encoder's token cap are
reported once per run (one warning; ``truncated_sentences`` and ``truncated_chars`` in the
summary), and a store of one document says that it has no statistics (``stats.unavailable``).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, Sequence

from sdr_search.core.documents import ReadReport, check_input_paths, read_documents
from sdr_search.core.encoder import SentenceEncoder, truncation_of
from sdr_search.core.errors import ModelMismatchError
from sdr_search.core.sentences import default_splitter
from sdr_search.core.settings import SegmentationSettings

from .pipeline import index_documents
from .provenance import segmentation_mismatch, segmentation_record
from .stats_job import refresh_stats, unavailable_reason
from .store import DocumentStore

__all__ = ["index_paths", "recorded_segmentation", "count_inputs"]

logger = logging.getLogger(__name__)


def recorded_segmentation(recorded: Any, given: SegmentationSettings | None, *, explicit: dict | None = None,
                          label: str = "the store") -> SegmentationSettings:
    """How documents added to a store are segmented: as the store recorded (an older store that
    recorded no such field keeps its as-given paragraphs), else ``given`` (or the settings) for a
    new one. An ``explicit`` choice (flags the user typed) that differs from the record is refused,
    not silently dropped."""
    if not recorded:
        return given or SegmentationSettings()
    seg = SegmentationSettings.from_recorded(recorded)
    for key, have in seg.recorded().items():
        wanted = (explicit or {}).get(key)
        if wanted is not None and wanted != have:
            raise ModelMismatchError(
                f"{label} was built with {key}={have!r}, not {wanted!r}; "
                "re-index into a new store (sdr reindex) to change its segmentation"
            )
    return seg


def count_inputs(paths: Sequence[Path]) -> int:
    """How many input items ``paths`` hold: non-blank lines of ``.jsonl`` / ``.jsonl.gz`` files
    (decompressed once more, far cheaper than encoding), ``.txt`` files of folders. Items the
    reader later skips are counted too, so the bar's total is an upper bound."""
    import gzip

    n = 0
    for path in paths:
        if path.is_dir():
            n += sum(1 for p in path.rglob("*.txt") if p.is_file())
            continue
        opener = gzip.open if path.suffix == ".gz" else open
        try:
            with opener(path, "rb") as fh:
                n += sum(1 for line in fh if line.strip())
        except (OSError, EOFError) as e:  # the reader reports the file itself
            logger.debug("counting %s: %s", path, e)
    return n


def index_paths(
    store: DocumentStore, paths: Sequence[Path], *, encoder: SentenceEncoder, cache: Any = None,
    segmentation: SegmentationSettings | None = None, explicit: dict | None = None, strict: bool = False,
    progress: bool = False, stats: bool = True, sample: int = 5000, seed: int = 0, label: str = "the store",
) -> dict[str, Any]:
    t0 = time.perf_counter()
    paths = check_input_paths(list(paths))  # before the store is created: a mistyped path leaves nothing behind
    int(encoder.dim)  # loads the model: a missing or broken --model fails here too
    report = ReadReport()
    meta = store.meta()
    recorded = meta.segmentation if meta is not None else None
    seg = recorded_segmentation(recorded, segmentation, explicit=explicit, label=label)
    record = segmentation_record(seg, default_splitter().source)
    mismatch = segmentation_mismatch(recorded, record)
    if mismatch:
        raise ModelMismatchError(f"{label} {mismatch}; index with the same segmentation flags")
    docs = read_documents(paths, settings=seg, report=report, strict=strict)
    before = truncation_of(encoder)
    total = count_inputs(paths) if progress else None  # a total (and an ETA) for the progress bar
    summary = index_documents(store, docs, encoder, cache=cache, progress=progress, segmentation=record, total=total)
    summary.skipped = report.n_skipped
    cut = truncation_of(encoder) - before
    message = cut.message(encoder.settings.max_tokens) if cut.truncated else None
    if message:
        logger.warning("%s", message)
    refreshed = None
    if stats and (summary.indexed or store.stats_info().stale):
        refreshed = refresh_stats(store, exact=False, sample_size=sample, seed=seed, progress=progress)
    lexical_docs = store.refresh_lexical() if store.capabilities.lexical_refresh else None
    counts = store.counts()
    out = {**summary.to_dict(), **cut.to_dict(), "store": counts, "seconds": round(time.perf_counter() - t0, 1)}
    if lexical_docs is not None:
        out["lexical_documents"] = lexical_docs
    if refreshed is not None:
        out["stats"] = refreshed.to_dict()
        reason = unavailable_reason(counts.get("documents", 0))
        if reason:
            out["stats"]["unavailable"] = reason
    if summary.failures:
        out["failures"] = [{"id": i, "error": e} for i, e in summary.failures[:50]]
    return out

