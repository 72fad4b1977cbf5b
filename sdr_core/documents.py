"""Documents: the three input shapes, readers for files and Python objects, and validation.

A record is a mapping with an ``id`` (string or integer), optional ``title`` and ``metadata``, and
exactly one body:

- ``text``: raw text; paragraphs are separated by blank lines, or by line breaks when the text
  has no blank line;
- ``paragraphs``: a list of paragraph strings;
- ``sections``: a list of ``{"title": str, "paragraphs": [str, ...]}``.

Other top-level keys are kept in ``metadata``. Which unit is an SDR paragraph (a text paragraph or
a whole section) is :attr:`SegmentationSettings.paragraph_unit`; consecutive short paragraphs are
then merged (``min_paragraph_sentences``, counting the splitter's sentences) and, inside each unit,
sentence fragments joined to a neighbour (``min_sentence_chars``; :mod:`sdr_search.core.segments`).
Empty paragraphs are dropped; a document with no sentence is rejected.

Readers never drop anything silently: each skipped item is logged with its place and reason and
counted in a :class:`ReadReport`; with ``strict=True`` the first problem raises instead.
"""

from __future__ import annotations

import gzip
import json
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

from .errors import (
    DocumentTooLargeError,
    DuplicateIdError,
    InputReadError,
    InvalidDocumentError,
)
from .segments import join_short_sentences, merge_short_paragraphs
from .sentences import SentenceSplitter, default_splitter
from .settings import SegmentationSettings

__all__ = [
    "Document",
    "ReadReport",
    "parse_record",
    "source_document",
    "split_text_paragraphs",
    "documents_from_records",
    "read_documents",
]

logger = logging.getLogger(__name__)

_BODY_KEYS = ("text", "paragraphs", "sections")
_RESERVED = {"id", "title", "metadata", *_BODY_KEYS}
_BLANK_LINE = re.compile(r"\n[ \t\r\f\v]*\n")


@dataclass(frozen=True)
class Document:
    """A segmented document: SDR paragraphs, each an ordered tuple of sentences."""

    id: str
    paragraphs: tuple[tuple[str, ...], ...]
    title: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)

    @property
    def sentences(self) -> list[str]:
        return [s for p in self.paragraphs for s in p]

    @property
    def n_sentences(self) -> int:
        return sum(len(p) for p in self.paragraphs)

    @property
    def text(self) -> str:
        """The document as plain text, one paragraph per block (used by lexical methods)."""
        parts = [self.title] if self.title else []
        parts += [" ".join(p) for p in self.paragraphs]
        return "\n\n".join(parts)


@dataclass
class ReadReport:
    """What a reader did: documents accepted, and every skipped item with where and why."""

    read: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (where, reason)

    @property
    def n_skipped(self) -> int:
        return len(self.skipped)

    def skip(self, where: str, reason: str) -> None:
        self.skipped.append((where, reason))
        if where in reason:
            logger.warning("skipped %s", reason)
        else:
            logger.warning("skipped %s: %s", where, reason)

    def summary(self) -> dict[str, Any]:
        return {"read": self.read, "skipped": self.n_skipped}


def split_text_paragraphs(text: str) -> list[str]:
    """Paragraphs of raw text: blank-line separated, or line separated if there is no blank line."""
    text = text.replace("\r\n", "\n").replace("\r", "\n").strip()
    if not text:
        return []
    parts = _BLANK_LINE.split(text) if _BLANK_LINE.search(text) else text.split("\n")
    return [p.strip() for p in parts if p.strip()]


def _as_str_list(value: Any, what: str, doc_id: str) -> list[str]:
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise InvalidDocumentError(doc_id, f"{what} must be a list of strings")
    for item in value:
        if not isinstance(item, str):
            raise InvalidDocumentError(doc_id, f"{what} must contain only strings, got {type(item).__name__}")
    return list(value)


def _raw_units(record: Mapping[str, Any], doc_id: str, unit: str) -> list[list[str]]:
    """Text blocks per SDR paragraph (each a list of text paragraphs to split into sentences)."""
    bodies = [k for k in _BODY_KEYS if k in record]
    if len(bodies) != 1:
        found = ", ".join(bodies) if bodies else "none"
        raise InvalidDocumentError(
            doc_id, f"needs exactly one of 'text', 'paragraphs', 'sections' (found: {found})"
        )
    body = bodies[0]
    if body == "text":
        if not isinstance(record["text"], str):
            raise InvalidDocumentError(doc_id, "'text' must be a string")
        return [[p] for p in split_text_paragraphs(record["text"])]
    if body == "paragraphs":
        return [[p] for p in _as_str_list(record["paragraphs"], "'paragraphs'", doc_id)]
    sections = record["sections"]
    if isinstance(sections, (str, bytes)) or not isinstance(sections, Sequence):
        raise InvalidDocumentError(doc_id, "'sections' must be a list of objects")
    units: list[list[str]] = []
    for k, section in enumerate(sections):
        if not isinstance(section, Mapping) or "paragraphs" not in section:
            raise InvalidDocumentError(doc_id, f"section {k} must be an object with 'paragraphs'")
        paras = _as_str_list(section["paragraphs"], f"section {k} 'paragraphs'", doc_id)
        if unit == "section":
            units.append(paras)
        else:
            units.extend([p] for p in paras)
    return units


def parse_record(
    record: Mapping[str, Any],
    *,
    settings: SegmentationSettings | None = None,
    splitter: SentenceSplitter | None = None,
) -> Document:
    """Validate one record and segment it into SDR paragraphs and sentences.

    Raises :class:`InvalidDocumentError` (or a subclass) naming the document.
    """
    settings = settings or SegmentationSettings()
    splitter = splitter or default_splitter()
    if not isinstance(record, Mapping):
        raise InvalidDocumentError(None, f"a document must be an object, got {type(record).__name__}")
    raw_id = record.get("id")
    if isinstance(raw_id, bool) or not isinstance(raw_id, (str, int)):
        raise InvalidDocumentError(None, "missing or invalid 'id' (a non-empty string or an integer)")
    doc_id = str(raw_id).strip()
    if not doc_id:
        raise InvalidDocumentError(None, "'id' is empty")
    title = record.get("title")
    if title is not None and not isinstance(title, str):
        raise InvalidDocumentError(doc_id, "'title' must be a string")
    metadata = record.get("metadata") or {}
    if not isinstance(metadata, Mapping):
        raise InvalidDocumentError(doc_id, "'metadata' must be an object")
    metadata = dict(metadata)
    for k, v in record.items():
        if k not in _RESERVED:
            metadata.setdefault(k, v)

    return _segmented(record, doc_id, title or None, metadata, settings, splitter)


def source_document(
    *,
    text: str | None = None,
    paragraphs: Sequence[str] | None = None,
    sections: Sequence[Mapping[str, Any]] | None = None,
    title: str | None = None,
    settings: SegmentationSettings | None = None,
    splitter: SentenceSplitter | None = None,
) -> Document:
    """A new document that is not indexed (a query source): exactly one of ``text``,
    ``paragraphs`` or ``sections``, segmented as :func:`parse_record` segments a record. Its id is
    the empty string; errors name no document."""
    body = {k: v for k, v in (("text", text), ("paragraphs", paragraphs), ("sections", sections)) if v is not None}
    if title is not None and not isinstance(title, str):
        raise InvalidDocumentError(None, "'title' must be a string")
    doc = _segmented(body, None, title or None, {}, settings or SegmentationSettings(), splitter or default_splitter())
    return doc


def _segmented(
    record: Mapping[str, Any], doc_id: str | None, title: str | None, metadata: Mapping[str, Any],
    settings: SegmentationSettings, splitter: SentenceSplitter,
) -> Document:
    paragraphs: list[tuple[str, ...]] = []
    for unit in _raw_units(record, doc_id, settings.paragraph_unit):
        sentences = [s for text in unit for s in splitter.split(text)]
        if sentences:
            paragraphs.append(tuple(sentences))
    paragraphs = [tuple(join_short_sentences(p, settings.min_sentence_chars))
                  for p in merge_short_paragraphs(paragraphs, settings.min_paragraph_sentences)]
    if not paragraphs:
        raise InvalidDocumentError(doc_id, "no sentence (empty document)")
    n = sum(len(p) for p in paragraphs)
    if n > settings.max_sentences:
        raise DocumentTooLargeError(
            doc_id, f"{n} sentences, over the limit of {settings.max_sentences} (SDR_MAX_SENTENCES)"
        )
    return Document(doc_id or "", tuple(paragraphs), title, metadata)


class _Deduper:
    def __init__(self) -> None:
        self.seen: dict[str, str] = {}

    def check(self, doc: Document, where: str) -> None:
        first = self.seen.get(doc.id)
        if first is not None:
            raise DuplicateIdError(doc.id, f"duplicate id (first seen at {first})")
        self.seen[doc.id] = where


def _handle(report: ReadReport, strict: bool, where: str, err: Exception) -> None:
    if strict:
        raise err
    report.skip(where, str(err))


def documents_from_records(
    records: Iterable[Mapping[str, Any]],
    *,
    settings: SegmentationSettings | None = None,
    splitter: SentenceSplitter | None = None,
    report: ReadReport | None = None,
    strict: bool = False,
) -> Iterator[Document]:
    """Documents from Python objects (same shapes as the JSON lines input)."""
    settings = settings or SegmentationSettings()
    splitter = splitter or default_splitter()
    report = report if report is not None else ReadReport()
    dedupe = _Deduper()
    for k, record in enumerate(records):
        where = f"record {k}"
        try:
            doc = parse_record(record, settings=settings, splitter=splitter)
            dedupe.check(doc, where)
        except InvalidDocumentError as e:
            _handle(report, strict, where, e)
            continue
        report.read += 1
        yield doc


def _decode(raw: bytes, where: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InvalidDocumentError(
            None, f"not valid UTF-8 (byte 0x{raw[e.start]:02x} at offset {e.start})", source=where
        ) from e


def _size_check(raw: bytes, where: str, settings: SegmentationSettings) -> None:
    if len(raw) > settings.max_document_bytes:
        raise DocumentTooLargeError(
            None,
            f"{len(raw) / 1e6:.1f} MB, over the limit of {settings.max_document_bytes / 1e6:.1f} MB "
            "(SDR_MAX_DOCUMENT_BYTES)",
            source=where,
        )


def _jsonl_records(path: Path, settings: SegmentationSettings, report: ReadReport, strict: bool):
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        fh = opener(path, "rb")
    except OSError as e:
        raise InputReadError(f"cannot open {path}: {e.strerror or e}") from e
    with fh:
        lineno = 0
        try:
            for raw in fh:
                lineno += 1
                where = f"{path}:{lineno}"
                if not raw.strip():
                    continue
                try:
                    _size_check(raw, where, settings)
                    line = _decode(raw, where)
                    try:
                        record = json.loads(line)
                    except json.JSONDecodeError as e:
                        raise InvalidDocumentError(None, f"invalid JSON ({e.msg} at column {e.colno})", source=where) from e
                except InvalidDocumentError as e:
                    _handle(report, strict, where, e)
                    continue
                yield where, record
        except (OSError, EOFError) as e:  # e.g. truncated gzip
            raise InputReadError(f"cannot read {path} after line {lineno}: {e}") from e


def _txt_records(root: Path, settings: SegmentationSettings, report: ReadReport, strict: bool):
    files = sorted(p for p in root.rglob("*.txt") if p.is_file())
    if not files:
        raise InputReadError(f"directory {root} has no .txt files")
    for path in files:
        where = str(path)
        try:
            raw = path.read_bytes()
        except OSError as e:
            _handle(report, strict, where, InputReadError(f"cannot read {path}: {e.strerror or e}"))
            continue
        try:
            _size_check(raw, where, settings)
            text = _decode(raw, where)
        except InvalidDocumentError as e:
            _handle(report, strict, where, e)
            continue
        doc_id = path.relative_to(root).with_suffix("").as_posix()
        yield where, {"id": doc_id, "text": text}


def read_documents(
    paths: Sequence[str | Path] | str | Path,
    *,
    settings: SegmentationSettings | None = None,
    splitter: SentenceSplitter | None = None,
    report: ReadReport | None = None,
    strict: bool = False,
) -> Iterator[Document]:
    """Documents from JSON lines files (``.jsonl``, ``.json``, ``.jsonl.gz``) and directories of
    ``.txt`` files (id = path relative to the directory, without ``.txt``).

    Ids must be unique across all ``paths``; later duplicates are skipped and reported.
    Raises :class:`InputReadError` for a path that does not exist or cannot be read.
    """
    if isinstance(paths, (str, Path)):
        paths = [paths]
    settings = settings or SegmentationSettings()
    splitter = splitter or default_splitter()
    report = report if report is not None else ReadReport()
    dedupe = _Deduper()
    for p in map(Path, paths):
        if not p.exists():
            raise InputReadError(f"input path {p} does not exist")
        if p.is_dir():
            records = _txt_records(p, settings, report, strict)
        elif p.name.endswith((".jsonl", ".jsonl.gz", ".json", ".json.gz", ".ndjson")):
            records = _jsonl_records(p, settings, report, strict)
        else:
            raise InputReadError(f"{p}: unsupported input (use .jsonl, .jsonl.gz or a directory of .txt files)")
        for where, record in records:
            try:
                doc = parse_record(record, settings=settings, splitter=splitter)
                dedupe.check(doc, where)
            except InvalidDocumentError as e:
                if e.source is None:
                    e = type(e)(e.doc_id, e.reason, source=where)
                _handle(report, strict, where, e)
                continue
            report.read += 1
            yield doc
