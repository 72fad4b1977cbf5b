"""Raw input records for ``sdr reindex``: read without segmenting (workers parse and segment),
numbered, de-duplicated by id and grouped into batches bounded in documents and characters.

The same inputs as ``sdr index`` (JSON lines, ``.jsonl.gz``, directories of ``.txt`` files). Lines
that cannot become a record at all (invalid JSON, bad UTF-8, over the size limit) and later
duplicates of an id are reported as :class:`Rejected` items, so the command counts them as failed
with their reason; everything else goes to a worker, which reports records it cannot parse.
"""

from __future__ import annotations

import gzip
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

from sdr_search.core.documents import ReadReport
from sdr_search.core.errors import InputReadError
from sdr_search.core.settings import SegmentationSettings

__all__ = ["Record", "Rejected", "iter_records", "batch_records", "count_records"]

_JSONL_SUFFIXES = (".jsonl", ".jsonl.gz", ".json", ".json.gz", ".ndjson")


@dataclass(frozen=True)
class Record:
    where: str  # file:line or file path, for messages
    record: Any  # the JSON value as read (usually a dict)
    doc_id: str | None  # the record's id when it has a usable one
    size: int  # characters, for batch sizing


@dataclass(frozen=True)
class Rejected:
    where: str
    doc_id: str | None
    reason: str


def _record_id(record: Any) -> str | None:
    """The record's id under the one id rule (:func:`sdr_search.core.documents.check_id`), or None."""
    from sdr_search.core.documents import InvalidIdError, check_id

    if isinstance(record, dict):
        try:
            return check_id(record.get("id"))
        except (InvalidIdError, ValueError):
            return None
    return None


def _sources(paths: Sequence[str | Path], settings: SegmentationSettings, report: ReadReport, strict: bool):
    # The line/file readers of sdr_search.core.documents (size limit, UTF-8 and JSON checks, reporting).
    from sdr_search.core.documents import _jsonl_records, _txt_records

    for p in map(Path, paths):
        if not p.exists():
            raise InputReadError(f"input path {p} does not exist")
        if p.is_dir():
            yield from _txt_records(p, settings, report, strict)
        elif p.name.endswith(_JSONL_SUFFIXES):
            yield from _jsonl_records(p, settings, report, strict)
        else:
            raise InputReadError(f"{p}: unsupported input (use .jsonl, .jsonl.gz or a directory of .txt files)")


def iter_records(
    paths: Sequence[str | Path],
    *,
    settings: SegmentationSettings | None = None,
    strict: bool = False,
) -> Iterator[Record | Rejected]:
    """Every input item in order: a :class:`Record` to index or a :class:`Rejected` one."""
    settings = settings or SegmentationSettings()
    report = ReadReport()
    seen: dict[str, str] = {}
    reported = 0
    for where, record in _sources(paths, settings, report, strict):
        while reported < len(report.skipped):  # lines the reader rejected before this record
            w, reason = report.skipped[reported]
            reported += 1
            yield Rejected(w, None, reason)
        doc_id = _record_id(record)
        if doc_id is not None:
            first = seen.get(doc_id)
            if first is not None:
                yield Rejected(where, doc_id, f"duplicate id (first seen at {first})")
                continue
            seen[doc_id] = where
        size = len(record.get("text", "")) if isinstance(record, dict) and isinstance(record.get("text"), str) else 0
        if not size:
            size = len(json.dumps(record, ensure_ascii=False))
        yield Record(where, record, doc_id, size)
    for w, reason in report.skipped[reported:]:
        yield Rejected(w, None, reason)


def batch_records(
    items: Iterator[Record | Rejected],
    *,
    max_docs: int,
    max_chars: int,
    total: int | None = None,
    workers: int = 1,
) -> Iterator[list[Record] | Rejected]:
    """Group records into batches of at most ``max_docs`` records and ``max_chars`` characters (a
    larger record goes alone); rejected items pass through between batches.

    With ``total`` (input items) and several ``workers``, the last batches shrink (guided
    scheduling: at most ``remaining / (2 x workers)`` records each, but not below ``max_docs / 8``),
    so the workers finish close together instead of one encoding a full batch while the others
    are idle.
    """
    batch: list[Record] = []
    chars = 0
    seen = 0  # items consumed before the current batch started
    cap = max_docs

    def tail_cap() -> int:
        if total is None or workers <= 1:
            return max_docs
        floor = max(1, max_docs // 8)  # tiny batches encode inefficiently
        return max(floor, min(max_docs, math.ceil((total - seen) / (2 * workers))))

    for item in items:
        if isinstance(item, Rejected):
            seen += 1
            yield item
            continue
        if batch and (len(batch) >= cap or chars + item.size > max_chars):
            yield batch
            batch, chars = [], 0
        if not batch:
            cap = tail_cap()
        batch.append(item)
        chars += item.size
        seen += 1
    if batch:
        yield batch


def count_records(paths: Sequence[str | Path]) -> int | None:
    """Number of input items (non-blank lines, .txt files), for the progress bar; None if unknown."""
    total = 0
    try:
        for p in map(Path, paths):
            if p.is_dir():
                total += sum(1 for f in p.rglob("*.txt") if f.is_file())
            elif p.name.endswith(_JSONL_SUFFIXES):
                opener = gzip.open if p.suffix == ".gz" else open
                with opener(p, "rb") as fh:
                    total += sum(1 for line in fh if line.strip())
            else:
                return None
    except (OSError, EOFError):
        return None
    return total
