"""Character offsets of sentences: into a document's stored text (:attr:`Document.text`: the title,
then each SDR paragraph's sentences joined by one space, blocks separated by a blank line), or into
the text a request sent (white space as sent). Python string positions (code points), end exclusive."""

from __future__ import annotations

import re
from bisect import bisect_right

from sdr_search.core.documents import Document

__all__ = ["sentence_spans", "aligned_spans"]

_TOKEN = re.compile(r"\S+")  # the complement of the splitter's white space (sdr_search.core.sentences)


def sentence_spans(doc: Document) -> list[list[tuple[int, int]]]:
    """``(start, end)`` of every sentence in ``doc``'s stored text, :attr:`Document.text` (the
    title, then each paragraph's sentences joined by one space, blocks separated by ``"\\n\\n"``):
    ``doc.text[start:end]`` is the sentence. Per paragraph, in order."""
    spans: list[list[tuple[int, int]]] = []
    pos = len(doc.title) + 2 if doc.title else 0
    for paragraph in doc.paragraphs:
        row = []
        for k, sentence in enumerate(paragraph):
            pos += 1 if k else 0
            row.append((pos, pos + len(sentence)))
            pos += len(sentence)
        spans.append(row)
        pos += 2
    return spans


def aligned_spans(text: str, doc: Document) -> list[list[tuple[int, int] | None]]:
    """``(start, end)`` of each sentence of ``doc`` (segmented from ``text``) in ``text`` itself.

    Segmentation keeps every character but white space: it collapses runs of white space, and it
    may join fragments with a space the text did not have (a splitter break without white space,
    such as ``end.)Next``). So the sentences are found, in order, in the text with its white space
    taken out, and mapped back: ``text[start:end]`` equals the sentence up to white space. A
    sentence the text does not hold is None, and the next one is looked for after the characters
    the missed ones would have taken."""
    tokens = [(m.start(), m.end()) for m in _TOKEN.finditer(text)]
    bare = "".join(text[a:b] for a, b in tokens)  # the text without its white space
    starts: list[int] = []  # each token's start in the bare text
    pos = 0
    for a, b in tokens:
        starts.append(pos)
        pos += b - a

    def raw(at: int) -> int:  # a position in the bare text -> the text's
        t = bisect_right(starts, at) - 1
        return tokens[t][0] + (at - starts[t])

    out: list[list[tuple[int, int] | None]] = []
    cursor = 0
    behind = 0  # characters of the sentences not found since the last one found
    for paragraph in doc.paragraphs:
        row: list[tuple[int, int] | None] = []
        for sentence in paragraph:
            word = "".join(sentence.split())
            # a sentence segmented from the text starts where the last one ended; after sentences
            # not found, at most as many characters later as theirs: the search never runs to the
            # end of the text for one it does not hold (which made the misses of a long text
            # quadratic)
            at = bare.find(word, cursor, cursor + behind + len(word)) if word else -1
            if at < 0:
                row.append(None)
                behind += len(word)
                continue
            cursor, behind = at + len(word), 0
            row.append((raw(at), raw(cursor - 1) + 1))
        out.append(row)
    return out
