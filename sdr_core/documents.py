"""Documents: the three input shapes, readers for files and Python objects, and validation.

A record is a mapping with an ``id`` (see "Ids" below), optional ``title`` and ``metadata``, and
exactly one body:

- ``text``: raw text; paragraphs are separated by blank lines, or by line breaks when the text
  has no blank line;
- ``paragraphs``: a list of paragraph strings;
- ``sections``: a list of ``{"title": str, "paragraphs": [str, ...]}``.

Other top-level keys are kept in ``metadata``. Which unit is an SDR paragraph (a text paragraph or
a whole section) is :attr:`SegmentationSettings.paragraph_unit`; consecutive short paragraphs are
then merged (``min_paragraph_sentences``, counting the splitter's sentences) and, inside each unit,
sentence fragments joined to a neighbour (``min_sentence_chars``; :mod:`sdr_search.core.segments`).
Empty paragraphs are dropped; a document with no sentence is rejected. A sentence longer than
``max_sentence_chars`` (a text with no sentence punctuation, or thousands of fragments joined) is
cut, at spaces, into pieces of about equal length, each a sentence of its own; ``max_sentences``
is checked after that.

Ids (one rule, :func:`check_id`, for every reader and for the HTTP service): a string of 1 to
:data:`MAX_ID_LENGTH` (512) characters with no white space at either end (refused, never stripped:
the id stored is the id given) and no control character (Unicode Cc, e.g. a newline or a tab), no
U+2028/U+2029 line separator and no lone surrogate anywhere. An integer is accepted and becomes its
decimal string (``42`` and ``"42"`` are the same id, so they are duplicates); booleans, floats and
other types are refused.

Text (one rule, :func:`check_text`, for every other string a document or a query carries: ``text``,
``paragraphs``, section titles and paragraphs, ``title``, metadata keys and string values at any
depth, like/unlike texts, filter keys and values): valid Unicode. A lone surrogate (a code point
U+D800 to U+DFFF on its own, e.g. the JSON escape ``"\\ud800"`` without its pair, or an undecodable
byte of a command-line argument) cannot be written as UTF-8, so no store can keep it: it is refused,
naming the field and the character's position. Control characters (NUL, tab, form feed, ...) are
valid Unicode and are kept as sent: white space ones separate words for the splitter, the others
are part of the text. Only ids refuse them (ids travel in URLs and logs).

Readers never drop anything silently: each skipped item is counted in a :class:`ReadReport`; the
first few per file are logged with their place and reason, the rest in one summary line at the end
of the file. With ``strict=True`` the first problem raises instead.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

from .errors import (
    DocumentTooLargeError,
    DuplicateIdError,
    InputReadError,
    InvalidDocumentError,
    InvalidIdError,
    InvalidInputError,
)
from .segments import join_short_sentences, merge_short_paragraphs
from .sentences import SentenceSplitter, default_splitter, possible_sentence_ends
from .settings import SegmentationSettings

__all__ = [
    "MAX_ID_LENGTH",
    "ID_PATTERN",
    "ID_RULE",
    "check_id",
    "TEXT_RULE",
    "check_text",
    "text_problem",
    "check_input_paths",
    "MAX_ENDS_PER_SENTENCE",
    "split_long_sentence",
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
_INPUT_SUFFIXES = (".jsonl", ".jsonl.gz", ".json", ".json.gz", ".ndjson")

MAX_ID_LENGTH = 512
"""Longest document id, in characters (code points), for every store, reader and HTTP route."""

# Characters refused at either end of an id: Python's white space (str.isspace: what str.strip
# would remove) plus U+FEFF, and the control characters; inside an id: the control characters
# (Unicode Cc) and the line/paragraph separators.
_EDGE = "\\x00-\\x20\\x7f-\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000\\ufeff"
_INNER = "\\x00-\\x1f\\x7f-\\x9f\\u2028\\u2029"
ID_PATTERN = f"^[^{_EDGE}](?:[^{_INNER}]*[^{_EDGE}])?$"
"""The id rule as a regular expression (no look-around, no ``\\s``: the same in Python ``re``,
ECMA-262 (JSON Schema) and Rust ``regex`` (pydantic-core)), for schemas. :func:`check_id` is the
rule itself (it also refuses lone surrogates and counts the length): validate with it."""

ID_RULE = (
    f"1 to {MAX_ID_LENGTH} characters, no white space at either end (not stripped), no control "
    "character (e.g. newline, tab) or line separator; an integer is read as its decimal string"
)
"""The id rule in words (error messages, API descriptions)."""

_ID_RE = re.compile(ID_PATTERN)
_MAX_ID_BITS = int(MAX_ID_LENGTH * 3.3219280948873626) + 2  # an int with more bits has > 512 digits


def _shown(value: str, n: int = 40) -> str:
    return repr(value if len(value) <= n else value[:n] + "...")


def check_id(value: Any) -> str:
    """The document id ``value`` stands for, checked against the one id rule (module docstring,
    :data:`ID_RULE`): a string comes back unchanged, an integer as its decimal string.

    Raises :class:`InvalidIdError` (an :class:`InvalidInputError`, so a ``ValueError``: usable as
    a pydantic validator) saying what is wrong. Never strips or otherwise changes an id.
    """
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise InvalidIdError(f"an id must be a string or an integer, not {type(value).__name__}")
    if isinstance(value, int):
        if abs(value).bit_length() > _MAX_ID_BITS:
            raise InvalidIdError(f"id is an integer of more than {MAX_ID_LENGTH} digits (the limit)")
        value = str(value)
        if len(value) > MAX_ID_LENGTH:
            raise InvalidIdError(f"id is {len(value)} characters long, over the limit of {MAX_ID_LENGTH}")
        return value
    value = str(value)  # a str subclass (numpy.str_) becomes a plain str
    if not value:
        raise InvalidIdError("'id' is empty")
    if len(value) > MAX_ID_LENGTH:
        raise InvalidIdError(f"id is {len(value)} characters long, over the limit of {MAX_ID_LENGTH}")
    if _ID_RE.fullmatch(value) is None or any("\ud800" <= c <= "\udfff" for c in value):
        raise InvalidIdError(f"id {_shown(value)} {_id_problem(value)}")
    return value


def _id_problem(value: str) -> str:
    for c in value:
        if unicodedata.category(c) == "Cc" or c in "\u2028\u2029":
            return f"contains the control character U+{ord(c):04X} (ids are used in URLs and logs)"
        if "\ud800" <= c <= "\udfff":
            return f"contains a lone surrogate U+{ord(c):04X} (not valid Unicode)"
    return "has white space at its start or end (ids are not stripped; remove it from the input)"


TEXT_RULE = "valid Unicode: no lone surrogate (U+D800 to U+DFFF without its pair); control characters are kept"
"""The text rule in words (error messages, API descriptions)."""

_SURROGATE = re.compile("[\ud800-\udfff]")


def text_problem(value: Any, where: str) -> str | None:
    """What breaks the text rule (module docstring, :data:`TEXT_RULE`) in ``value``: a string, or
    the strings of lists, tuples and mappings in it (keys included, at any depth), named from
    ``where`` (``"metadata['court'][2]"``); None when every string is valid. Iterative (no recursion
    limit on deep metadata); the message quotes no invalid string (it could not be sent back)."""
    stack: list[tuple[str, Any]] = [(where, value)]
    while stack:
        at, item = stack.pop()
        if isinstance(item, str):
            m = _SURROGATE.search(item)
            if m is not None:
                return f"{at} contains a lone surrogate U+{ord(m.group()):04X} at character {m.start()} (not valid Unicode)"
        elif isinstance(item, Mapping):
            pending = []
            for key, sub in item.items():
                if isinstance(key, str) and _SURROGATE.search(key):
                    return f"{at} has a key {_shown(key)} with a lone surrogate (not valid Unicode)"
                pending.append((f"{at}[{_shown(key) if isinstance(key, str) else key}]", sub))
            stack.extend(reversed(pending))
        elif isinstance(item, (list, tuple)):
            stack.extend(reversed([(f"{at}[{k}]", sub) for k, sub in enumerate(item)]))
    return None


def check_text(value: Any, where: str) -> Any:
    """``value`` unchanged when every string in it keeps the text rule (:func:`text_problem`), else
    :class:`InvalidInputError` (a ``ValueError``: usable as a pydantic validator) naming ``where``."""
    problem = text_problem(value, where)
    if problem is not None:
        raise InvalidInputError(problem)
    return value


def check_input_paths(paths: Sequence[str | Path] | str | Path) -> list[Path]:
    """The input paths, each checked to exist and to be a readable kind (JSON lines file,
    directory with ``.txt`` files) before anything is created or loaded; raises
    :class:`InputReadError` for the first that is not."""
    if isinstance(paths, (str, Path)):
        paths = [paths]
    out = [Path(p) for p in paths]
    if not out:
        raise InputReadError("no input path given")
    for p in out:
        if not p.exists():
            raise InputReadError(f"input path {p} does not exist")
        if p.is_dir():
            if next((f for f in p.rglob("*.txt") if f.is_file()), None) is None:
                raise InputReadError(f"directory {p} has no .txt files")
        elif not p.name.endswith(_INPUT_SUFFIXES):
            raise InputReadError(f"{p}: unsupported input (use .jsonl, .jsonl.gz or a directory of .txt files)")
        elif not os.access(p, os.R_OK):
            raise InputReadError(f"cannot open {p}: permission denied")
    return out


MAX_ENDS_PER_SENTENCE = 4
"""A text with more possible sentence ends (:func:`sdr_search.core.sentences.possible_sentence_ends`)
than this many times its sentence limit (``SDR_MAX_SENTENCES`` for a document,
``SDR_MAX_QUERY_SENTENCES`` for a query's new text) is refused before it is split: splitting costs a
fixed time per possible end, so the limit bounds the work of one request and a text of millions of
fragments ("Ab. Ab. ...", which starved every other request) is refused at once. Real text has a
few possible ends per sentence kept (IRLeD, Wikipedia), so below the bound nothing changes. The
figures (cost per end, ends per sentence, time at the bound): docs/results/splitting.md."""


def split_long_sentence(sentence: str, max_chars: int) -> list[str]:
    """``sentence`` cut into pieces of at most ``max_chars`` characters, of about equal length,
    at spaces (mid-word only where a piece holds no space); ``max_chars <= 0`` or a sentence
    within the limit gives ``[sentence]``. The pieces joined by spaces give the sentence back
    (with whitespace at the cuts collapsed)."""
    if max_chars <= 0 or len(sentence) <= max_chars:
        return [sentence]
    pieces: list[str] = []
    n = -(-len(sentence) // max_chars)
    target = max(1, -(-len(sentence) // n))  # ceil: equal pieces
    start, end = 0, len(sentence)  # the rest is sentence[start:end], read in place (linear time)
    while end - start > max_chars:
        cut = sentence.rfind(" ", start + 1, start + target + 1)
        if cut <= start:  # no space in the piece: cut mid-word at the limit
            cut = start + target
        piece = sentence[start:cut].rstrip()
        if piece:
            pieces.append(piece)
        start = cut
        while start < end and sentence[start].isspace():  # lstrip of the rest, without copying it
            start += 1
    if start < end:
        pieces.append(sentence[start:end])
    return pieces


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


_PARENS = re.compile(r"\s*\(.*$")
_NUMBER = re.compile(r"(?<![\w-])\d[\d.,]*")


def _kind(reason: str) -> str:
    """A skip reason without its particulars (for per-file summaries): "invalid JSON", ..."""
    text = reason.split(": ", 1)[1] if reason.startswith("document") and ": " in reason else reason
    text = _PARENS.sub("", text)
    text = _NUMBER.sub("N", text)
    return text[:80] or "invalid"


def _source_of(where: str) -> str:
    """The file of a place ``path:line`` (the place itself otherwise)."""
    head, _, tail = where.rpartition(":")
    return head if head and tail.isdigit() else where


@dataclass
class ReadReport:
    """What a reader did: documents accepted, and every skipped item with where and why.

    Logging: the first ``listed_per_source`` skipped items of each file (or directory, or
    sequence of records) are logged one by one; the rest only in one summary warning at the end
    of that file (:meth:`end_source`), e.g. "garbage.jsonl: 768 items skipped (766 not valid
    UTF-8, 2 invalid JSON); the first 3 are listed above". :attr:`skipped` holds them all.
    """

    read: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (where, reason)
    listed_per_source: int = 3
    _kinds: dict[str, Counter] = field(default_factory=dict, repr=False)

    @property
    def n_skipped(self) -> int:
        return len(self.skipped)

    def skip(self, where: str, reason: str, *, source: str | None = None) -> None:
        self.skipped.append((where, reason))
        kinds = self._kinds.setdefault(source or _source_of(where), Counter())
        kinds[_kind(reason)] += 1
        if sum(kinds.values()) > self.listed_per_source:
            return
        if where in reason:
            logger.warning("skipped %s", reason)
        else:
            logger.warning("skipped %s: %s", where, reason)

    def end_source(self, source: str) -> None:
        """Log the summary of ``source`` when more of its items were skipped than were listed."""
        kinds = self._kinds.pop(source, None)
        if not kinds:
            return
        total = sum(kinds.values())
        if total <= self.listed_per_source:
            return
        by_kind = ", ".join(f"{n} {kind}" for kind, n in kinds.most_common(5))
        more = f", {len(kinds) - 5} other reasons" if len(kinds) > 5 else ""
        logger.warning("%s: %d items skipped (%s%s); the first %d are listed above", source, total, by_kind, more,
                       self.listed_per_source)

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
    if "id" not in record or record["id"] is None:
        raise InvalidDocumentError(None, f"missing 'id' ({ID_RULE})")
    try:
        doc_id = check_id(record["id"])
    except InvalidIdError as e:
        raise InvalidDocumentError(None, f"invalid 'id': {e}" if "'id'" not in str(e) else str(e)) from e
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
    fields = {"title": title, **{k: record[k] for k in _BODY_KEYS if k in record}, "metadata": metadata}
    for name, value in fields.items():  # the text rule, before anything is measured or split
        problem = text_problem(value, name)
        if problem is not None:
            raise InvalidDocumentError(doc_id, problem)
    units = _raw_units(record, doc_id, settings.paragraph_unit)
    size = sum(len(text.encode("utf-8", "surrogatepass")) for unit in units for text in unit)
    if size > settings.max_document_bytes:  # before the splitter, whichever door the document came by
        raise DocumentTooLargeError(doc_id, _too_large(size, settings))
    bound = MAX_ENDS_PER_SENTENCE * settings.max_sentences  # the splitter's work, bounded before it starts
    ends = possible_sentence_ends((text for unit in units for text in unit), stop=bound)
    if ends > bound:
        raise DocumentTooLargeError(
            doc_id, f"more than {bound} possible sentence ends, over {MAX_ENDS_PER_SENTENCE} x the limit of "
            f"{settings.max_sentences} sentences (SDR_MAX_SENTENCES): refused before splitting")
    for unit in units:
        try:
            sentences = [s for text in unit for s in splitter.split(text)]
        except TimeoutError as e:  # NLTK's guard on its own expressions (nltk.redos): this document only
            raise InvalidDocumentError(doc_id, f"sentence splitting failed: {e}") from e
        if sentences:
            paragraphs.append(tuple(sentences))
    paragraphs = [tuple(piece for s in join_short_sentences(p, settings.min_sentence_chars)
                        for piece in split_long_sentence(s, settings.max_sentence_chars))
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


def _handle(report: ReadReport, strict: bool, where: str, err: Exception, source: str | None = None) -> None:
    if strict:
        raise err
    report.skip(where, str(err), source=source)


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
    try:
        for k, record in enumerate(records):
            where = f"record {k}"
            try:
                doc = parse_record(record, settings=settings, splitter=splitter)
                dedupe.check(doc, where)
            except InvalidDocumentError as e:
                _handle(report, strict, where, e, "records")
                continue
            report.read += 1
            yield doc
    finally:
        report.end_source("records")


def _decode(raw: bytes, where: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InvalidDocumentError(
            None, f"not valid UTF-8 (byte 0x{raw[e.start]:02x} at offset {e.start})", source=where
        ) from e


def _bytes(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 100_000 else f"{n:,} bytes"


def _too_large(size: int, settings: SegmentationSettings) -> str:
    return f"{_bytes(size)} of text, over the limit of {_bytes(settings.max_document_bytes)} (SDR_MAX_DOCUMENT_BYTES)"


_JSON_INFLATION = 6
"""A JSON string spells one byte of text in at most six (``\\u0001``): a line longer than six times
the limit (and some room for the other fields) cannot hold a document under it."""


def _size_check(raw: bytes, where: str, settings: SegmentationSettings, *, json_line: bool = False) -> None:
    """Refuse input that cannot hold a document under ``max_document_bytes`` of text before it is
    decoded: a text file over the limit, or a JSON line over six times it (the document's own text is
    measured again, exactly, by :func:`parse_record`)."""
    limit = settings.max_document_bytes * _JSON_INFLATION + 65_536 if json_line else settings.max_document_bytes
    if len(raw) > limit:
        why = (f"a JSON line of {_bytes(len(raw))} cannot hold a document under the limit of "
               f"{_bytes(settings.max_document_bytes)} of text (SDR_MAX_DOCUMENT_BYTES)"
               if json_line else _too_large(len(raw), settings))
        raise DocumentTooLargeError(None, why, source=where)


def _jsonl_records(path: Path, settings: SegmentationSettings, report: ReadReport, strict: bool):
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        fh = opener(path, "rb")
    except OSError as e:
        raise InputReadError(f"cannot open {path}: {e.strerror or e}") from e
    source = str(path)
    with fh:
        lineno = 0
        try:
            for raw in fh:
                lineno += 1
                where = f"{path}:{lineno}"
                if not raw.strip():
                    continue
                try:
                    _size_check(raw, where, settings, json_line=True)
                    line = _decode(raw, where)
                    try:
                        record = json.loads(line)
                    except json.JSONDecodeError as e:
                        raise InvalidDocumentError(None, f"invalid JSON ({e.msg} at column {e.colno})", source=where) from e
                    except (ValueError, RecursionError) as e:  # an integer of > 4300 digits, nesting too deep
                        raise InvalidDocumentError(None, f"invalid JSON ({e})", source=where) from e
                except InvalidDocumentError as e:
                    _handle(report, strict, where, e, source)
                    continue
                yield where, record
        except (OSError, EOFError) as e:  # e.g. truncated gzip
            raise InputReadError(f"cannot read {path} after line {lineno}: {e}") from e
        finally:
            report.end_source(source)


def _txt_records(root: Path, settings: SegmentationSettings, report: ReadReport, strict: bool):
    files = sorted(p for p in root.rglob("*.txt") if p.is_file())
    if not files:
        raise InputReadError(f"directory {root} has no .txt files")
    source = str(root)
    try:
        for path in files:
            where = str(path)
            try:
                raw = path.read_bytes()
            except OSError as e:
                _handle(report, strict, where, InputReadError(f"cannot read {path}: {e.strerror or e}"), source)
                continue
            try:
                _size_check(raw, where, settings)
                text = _decode(raw, where)
            except InvalidDocumentError as e:
                _handle(report, strict, where, e, source)
                continue
            doc_id = path.relative_to(root).with_suffix("").as_posix()
            yield where, {"id": doc_id, "text": text}
    finally:
        report.end_source(source)


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
        elif p.name.endswith(_INPUT_SUFFIXES):
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
                _handle(report, strict, where, e, str(p))
                continue
            report.read += 1
            yield doc
