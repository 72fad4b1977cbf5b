"""Sentence splitting with NLTK Punkt that works without downloaded NLTK data.

Punkt needs parameters (abbreviations, collocations, frequent sentence starters). NLTK's English
model is used when the ``punkt_tab`` data happens to be installed; otherwise, and in addition,
a curated list of abbreviations common in legal and encyclopedic English is applied, so that
"Art. 14", "No. 2226 of 2010", "Dr. Smith", "U.S.", "i.e." and "5 p.m." do not end a sentence.
``nltk.download`` is never called. A splitter can also be trained on the user's own corpus with
Punkt's unsupervised trainer (offline); the curated list is merged into what it learns.

One more rule on top of Punkt: a break followed by a lower-case letter is undone (formal English
does not start sentences in lower case; Punkt breaks there after unknown abbreviations such as
"I.P.C. applies").
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

if TYPE_CHECKING:  # pragma: no cover - nltk is imported when a splitter is made (its import takes ~1 s)
    from nltk.tokenize.punkt import PunktParameters

__all__ = ["CURATED_ABBREVIATIONS", "SENTENCE_STARTERS", "SentenceSplitter", "default_splitter", "join_lower_starts",
           "possible_sentence_ends"]

logger = logging.getLogger(__name__)

# Lower-case, without the final period; internal periods kept ("u.s", "i.e").
CURATED_ABBREVIATIONS: frozenset[str] = frozenset(
    """
    mr mrs ms dr prof sr jr st mt hon messrs smt shri sri km lt col gen capt sgt rev fr gov sen rep
    art arts no nos sec secs ss cl cls r rr o ord reg regs sch para paras pt pts ch chap vol vols
    pp p ed eds fig figs tab eq eqs ref refs app apps viz cf etc e.g i.e et al approx est ca c
    vs v u.s u.s.a u.k u.n e.u n.y d.c l.a a.d b.c a.m p.m no.s
    jan feb mar apr jun jul aug sep sept oct nov dec mon tue wed thu fri sat sun
    co corp inc ltd bros pvt govt dept assn univ inst dist distt
    rs re j jj cj acj spl addl dy asstt
    i.p.c cr.p.c c.p.c crpc cpc ipc s.c h.c a.i.r s.c.r s.c.c s.c.a.l.e j.t all.e.r k.b q.b w.l.r
    ltd.co cal bom mad ker guj pat raj ori
    """.split()
)

# Capitalised words that, after an abbreviation, mean a new sentence has started
# (Punkt's "frequent sentence starter" heuristic, section 4.1.3 of Kiss & Strunk 2006).
SENTENCE_STARTERS: frozenset[str] = frozenset(
    """
    the this these that those it its he she they we i in on at however thus but then there
    accordingly therefore hence further furthermore moreover also a an his her their our
    """.split()
)

_LOWER_START = re.compile(r"^[\"'(\[]*[a-z]")
_WS = re.compile(r"\s+")

CHUNK_CHARS = 20_000
"""Punkt reads a text at most this long at once. NLTK runs its sentence-end expression over the whole
text under a 5-second limit (``nltk.redos``), which a paragraph of a few megabytes exceeds however
simple it is; a longer text is cut first, at a likely sentence end (see :func:`_chunks`)."""

_LIKELY_END = re.compile(r"[a-z0-9)\]\"'][.?!][\"')\]]* (?=[A-Z])")


def _chunks(text: str, size: int = CHUNK_CHARS) -> list[str]:
    """``text`` (white space collapsed) in pieces of at most ``size`` characters, each cut after the
    last likely sentence end (a lower-case letter or digit, then ``.``, ``?`` or ``!``, a space and a
    capital) in the second half of its window, else at the last space, else at ``size``."""
    out: list[str] = []
    start = 0
    while len(text) - start > size:
        lo, hi = start + size // 2, start + size
        cut = -1
        for m in _LIKELY_END.finditer(text, lo, hi):
            cut = m.end()
        if cut < 0:
            space = text.rfind(" ", lo, hi)
            cut = space + 1 if space >= 0 else hi
        out.append(text[start:cut])
        start = cut
    out.append(text[start:])
    return out


def _punkt_tab_params() -> PunktParameters | None:
    """NLTK's English Punkt parameters if the data is installed, else None (never downloads)."""
    try:
        import nltk.data

        nltk.data.find("tokenizers/punkt_tab/english/")
    except LookupError:
        return None
    try:
        from nltk.tokenize.punkt import PunktTokenizer

        return PunktTokenizer("english")._params
    except (LookupError, OSError, ValueError) as e:  # damaged or partial installs
        logger.warning("NLTK punkt_tab data found but not loadable (%s); using the curated list", e)
        return None


def _merged(params: PunktParameters) -> PunktParameters:
    params.abbrev_types |= set(CURATED_ABBREVIATIONS)
    params.sent_starters |= set(SENTENCE_STARTERS)
    return params


@dataclass(frozen=True)
class SentenceSplitter:
    """Split paragraph text into sentences.

    ``source`` records where the Punkt parameters came from (``curated``, ``nltk-punkt_tab`` or
    ``trained``) so that indexes can store it as provenance.
    """

    params: PunktParameters = field(repr=False)
    source: str = "curated"

    @classmethod
    def default(cls) -> "SentenceSplitter":
        from nltk.tokenize.punkt import PunktParameters

        params = _punkt_tab_params()
        if params is None:
            return cls(_merged(PunktParameters()), "curated")
        return cls(_merged(params), "nltk-punkt_tab")

    @classmethod
    def train(cls, texts: Iterable[str]) -> "SentenceSplitter":
        """Learn abbreviations, collocations and sentence starters from the user's own corpus."""
        from nltk.tokenize.punkt import PunktTrainer

        trainer = PunktTrainer()
        trainer.INCLUDE_ALL_COLLOCS = True
        for text in texts:
            trainer.train(text, finalize=False)
        trainer.finalize_training()
        return cls(_merged(trainer.get_params()), "trained")

    def save(self, path: str | Path) -> None:
        """Write the parameters as JSON (sets are sorted so the file is reproducible)."""
        p = self.params
        data = {
            "source": self.source,
            "abbrev_types": sorted(p.abbrev_types),
            "collocations": sorted(list(c) for c in p.collocations),
            "sent_starters": sorted(p.sent_starters),
            "ortho_context": dict(sorted(p.ortho_context.items())),
        }
        Path(path).write_text(json.dumps(data, indent=1), encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> "SentenceSplitter":
        from nltk.tokenize.punkt import PunktParameters

        data = json.loads(Path(path).read_text(encoding="utf-8"))
        p = PunktParameters()
        p.abbrev_types = set(data["abbrev_types"])
        p.collocations = {tuple(c) for c in data["collocations"]}
        p.sent_starters = set(data["sent_starters"])
        for k, v in data["ortho_context"].items():
            p.ortho_context[k] = v
        return cls(p, data.get("source", "trained"))

    def __post_init__(self) -> None:
        from nltk.tokenize.punkt import PunktSentenceTokenizer

        object.__setattr__(self, "_tokenizer", PunktSentenceTokenizer(self.params))

    def split(self, text: str) -> list[str]:
        """Sentences of ``text`` (whitespace collapsed; empty pieces dropped). Linear in the text:
        Punkt reads it in chunks of at most :data:`CHUNK_CHARS`, and a run of pieces that open in
        lower case is joined once (:func:`join_lower_starts`)."""
        text = _WS.sub(" ", text).strip()
        if not text:
            return []
        pieces = [p for chunk in _chunks(text) for p in self._tokenizer.tokenize(chunk)]  # type: ignore[attr-defined]
        return join_lower_starts(pieces)


def join_lower_starts(pieces: Iterable[str]) -> list[str]:
    """``pieces`` stripped, empty ones dropped, and each one that opens in lower case (after
    opening quotes or brackets) joined to the one before it with a space: formal English does not
    start a sentence in lower case. Each sentence is joined once from its pieces, so a text of many
    such pieces ("ab. ab. ab. ...") costs linear time, not the square of its length."""
    out: list[list[str]] = []
    for piece in pieces:
        piece = piece.strip()
        if not piece:
            continue
        if out and _LOWER_START.match(piece):
            out[-1].append(piece)
        else:
            out.append([piece])
    return [" ".join(p) for p in out]


_POSSIBLE_END = re.compile(r"[.?!](?=[)\"';}\]*:@({\[!?]|\s+\S)")
"""Where Punkt considers a sentence break: ``.``, ``?`` or ``!`` followed by other punctuation or by
white space and a token (NLTK's ``PunktLanguageVars.period_context_re``, written for Python's ``re``)."""


def possible_sentence_ends(texts: Iterable[str], *, stop: int | None = None) -> int:
    """How many places of ``texts`` Punkt would weigh as a sentence end: a cheap upper estimate of
    the splitter's sentences (one pass of a regular expression, no Punkt), and the measure of its
    work, which is mostly a fixed cost per such place. Counted before splitting, it bounds that
    work by the sentence limits (:data:`sdr_search.core.documents.MAX_ENDS_PER_SENTENCE`). On IRLeD
    and Wikipedia it is a small multiple of the sentences segmentation keeps (fragments are joined,
    citations hold several periods; the figures: docs/results/splitting.md).
    ``stop``: counting ends once the count is over it (the answer is then ``stop + 1``), so that
    refusing a text costs no more than accepting one at the bound."""
    n = 0
    for text in texts:
        for _ in _POSSIBLE_END.finditer(text):
            n += 1
            if stop is not None and n > stop:
                return n
    return n


_DEFAULT: SentenceSplitter | None = None


def default_splitter() -> SentenceSplitter:
    """The process-wide default splitter (built on first use, not at import)."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = SentenceSplitter.default()
    return _DEFAULT
