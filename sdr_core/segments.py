"""Paragraph and sentence units for SDR: merging short paragraphs, joining fragments (pure, no I/O).

SDR compares documents paragraph by paragraph, and every source paragraph weighs the same in the
final mean. Inputs whose "paragraphs" are lines (court judgments, transcripts, scraped pages) have
many one-sentence units (a name, a date, a case number) that then weigh as much as a page of
argument. :func:`merge_short_paragraphs` folds consecutive paragraphs together until each unit
holds at least ``n`` sentences.

Sentence splitting of legal and citation-heavy text leaves fragments ("10.", "& H.", "1]") that
each count as a sentence in SDR's stage-1 mean. :func:`join_short_sentences` joins a piece shorter
than a number of characters to its neighbour in the same paragraph, so no text is lost.
"""

from __future__ import annotations

from typing import Sequence, TypeVar

__all__ = ["join_short_sentences", "merge_short_paragraphs"]

S = TypeVar("S")


def merge_short_paragraphs(paragraphs: Sequence[Sequence[S]], n: int) -> list[tuple[S, ...]]:
    """Merge consecutive paragraphs so that each unit has at least ``n`` sentences.

    Paragraphs are taken in order and accumulated until the unit reaches ``n`` sentences; a unit
    is never split. A short remainder at the end joins the unit before it (a document with fewer
    than ``n`` sentences in all becomes one unit). ``n <= 1`` keeps the paragraphs as they are
    (empty ones are dropped in every case). Sentence order is preserved.
    """
    out: list[tuple[S, ...]] = []
    current: list[S] = []
    for par in paragraphs:
        if not par:
            continue
        if n <= 1:
            out.append(tuple(par))
            continue
        current.extend(par)
        if len(current) >= n:
            out.append(tuple(current))
            current = []
    if current:
        if out:
            out[-1] = out[-1] + tuple(current)
        else:
            out.append(tuple(current))
    return out


def join_short_sentences(sentences: Sequence[str], min_chars: int) -> list[str]:
    """Join every sentence shorter than ``min_chars`` characters to a neighbour.

    A short sentence joins the one before it (with a space); one that opens the list joins the
    next one instead (repeatedly, until the joined text is long enough). A list whose sentences
    are all short together becomes one sentence. ``min_chars <= 0`` returns the sentences as they
    are. The joined texts concatenate to the input, in order.
    """
    if min_chars <= 0:
        return list(sentences)
    out: list[list[str]] = []  # each output sentence as its pieces (joined once: linear time)
    pending: list[str] = []  # short pieces at the start, waiting for a sentence to open with
    pending_len = -1
    for s in sentences:
        pieces, length = [s], len(s)
        if pending:
            pieces, length = [*pending, s], pending_len + 1 + len(s)
            pending, pending_len = [], -1
        if length >= min_chars:
            out.append(pieces)
        elif out:
            out[-1].extend(pieces)
        else:
            pending, pending_len = pieces, length
    if pending:
        out.append(pending)
    return [" ".join(p) for p in out]
