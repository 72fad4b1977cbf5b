"""Segmentation in linear time, and its work bounded before it starts (issue 41, case 10).

Two concurrent 4 MB texts of ``"Ab. " * 1000000`` took 163 and 217 s and every other request got
429 meanwhile. Three steps grew with the square of the input (joining pieces that open in lower
case, cutting a long sentence, looking up a sentence the text does not hold); each is now linear,
and is tested here against the old code, kept below as the reference, so no boundary moves
(the offsets against a brute-force search of the text without its white space). And a
text with more possible sentence ends than 4 x its sentence limit is refused before the splitter
runs (the splitter's work is a fixed cost per possible end). Times are compared in
``bench/splitting.py``, not here.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sdr_search.core.documents import MAX_ENDS_PER_SENTENCE, Document, parse_record, split_long_sentence
from sdr_search.core.errors import DocumentTooLargeError
from sdr_search.core.sentences import SentenceSplitter, default_splitter, join_lower_starts, possible_sentence_ends
from sdr_search.core.settings import SegmentationSettings
from sdr_search.reranker.offsets import aligned_spans

pytestmark = pytest.mark.unit

_LOWER_START = re.compile(r"^[\"'(\[]*[a-z]")


# -- the old code (quadratic), the reference the new code must equal ----------------------------------
def old_join_lower_starts(pieces):
    out = []
    for piece in pieces:
        piece = piece.strip()
        if not piece:
            continue
        if out and _LOWER_START.match(piece):
            out[-1] = f"{out[-1]} {piece}"
        else:
            out.append(piece)
    return out


def old_split_long_sentence(sentence, max_chars):
    if max_chars <= 0 or len(sentence) <= max_chars:
        return [sentence]
    pieces = []
    rest = sentence
    n = -(-len(sentence) // max_chars)
    target = max(1, -(-len(sentence) // n))
    while len(rest) > max_chars:
        cut = rest.rfind(" ", 1, target + 1)
        if cut <= 0:
            cut = target
        piece = rest[:cut].rstrip()
        if piece:
            pieces.append(piece)
        rest = rest[cut:].lstrip()
    if rest:
        pieces.append(rest)
    return pieces


def reference_aligned_spans(text, doc):
    """The brute-force alignment: each sentence, white space taken out, searched for to the end of
    the text taken out the same way (the old code searched the white-space-collapsed text, so a
    sentence the splitter joined with a space the text did not have was missed, and the next one
    could be found inside it)."""
    tokens = [(m.start(), m.end()) for m in re.finditer(r"\S+", text)]
    bare = "".join(text[a:b] for a, b in tokens)
    owner = [t for t, (a, b) in enumerate(tokens) for _ in range(b - a)]  # bare position -> token
    first = {}
    for i, t in enumerate(owner):
        first.setdefault(t, i)

    def raw(at):
        t = owner[at]
        return tokens[t][0] + (at - first[t])

    out, cursor = [], 0
    for paragraph in doc.paragraphs:
        row = []
        for sentence in paragraph:
            word = "".join(sentence.split())
            at = bare.find(word, cursor) if word else -1
            if at < 0:
                row.append(None)
                continue
            cursor = at + len(word)
            row.append((raw(at), raw(cursor - 1) + 1))
        out.append(row)
    return out


# -- the same answers -------------------------------------------------------------------------------
pieces = st.lists(st.text(alphabet="aZ .(\"'[\t", max_size=8), max_size=40)


@given(pieces)
def test_joining_lower_case_starts_is_the_old_join(ps):
    assert join_lower_starts(ps) == old_join_lower_starts(ps)


@given(st.text(alphabet="ab  \t\n.", max_size=300), st.integers(0, 40))
@settings(max_examples=300)
def test_cutting_long_sentences_is_the_old_cut(sentence, max_chars):
    assert split_long_sentence(sentence, max_chars) == old_split_long_sentence(sentence, max_chars)


WORDS = ["Ab.", "ab.", "The", "court", "held", "it.", "No.", "5", "U.S.", "(see", "p.", "12).", "Yes!", "why?",
         '"Quoted."', "a.)", "(b)", "x" * 30, "Mr.", "Smith", "i.e.", "end.)Next", "\u00e9t\u00e9."]
texts = st.lists(st.sampled_from(WORDS), min_size=1, max_size=120).flatmap(
    lambda words: st.lists(st.sampled_from([" ", "  ", "\n", "\n\n", " \t "]), min_size=len(words),
                           max_size=len(words)).map(lambda gaps: "".join(w + g for w, g in zip(words, gaps))))


@given(texts, st.sampled_from([0, 20]), st.sampled_from([0, 25, 2000]))
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_sentences_and_their_offsets_are_the_old_ones(text, min_chars, max_chars):
    """Segmentation (with the new joins and cuts) and the offsets of its sentences in the text sent
    equal the old code's, with fragments joined and long sentences cut or not."""
    seg = SegmentationSettings(min_paragraph_sentences=1, min_sentence_chars=min_chars, max_sentence_chars=max_chars)
    try:
        doc = parse_record({"id": "t", "text": text}, settings=seg)
    except DocumentTooLargeError:
        raise
    except ValueError:  # no sentence
        return
    splitter = default_splitter()
    for paragraph in doc.paragraphs:
        for sentence in paragraph:
            assert sentence.strip() == sentence and sentence
    raw_pieces = [p for c in [text] for p in splitter._tokenizer.tokenize(" ".join(c.split()))]  # noqa: SLF001
    assert join_lower_starts(raw_pieces) == old_join_lower_starts(raw_pieces)
    spans = aligned_spans(text, doc)
    assert spans == reference_aligned_spans(text, doc)
    # every sentence segmented from the text is found there, in order, equal up to white space
    flat = [span for row in spans for span in row]
    assert None not in flat
    assert all(a[1] <= b[0] for a, b in zip(flat, flat[1:]))
    for (start, end), sentence in zip(flat, [s for p in doc.paragraphs for s in p]):
        assert "".join(text[start:end].split()) == "".join(sentence.split())


def test_a_sentence_joined_across_a_break_without_white_space_is_found():
    """The splitter breaks ``end.)Next`` and segmentation joins the pieces with a space the text
    lacks: the sentence is still found, and the next ones after it, not inside it (found by
    hypothesis: the old code gave None, then (0, 3) inside the first sentence, then None)."""
    text = "Ab. " * 19 + "end.)Next\nAb.\nab. "
    seg = SegmentationSettings(min_paragraph_sentences=1, min_sentence_chars=20, max_sentence_chars=0)
    doc = parse_record({"id": "t", "text": text}, settings=seg)
    assert doc.paragraphs[0][0].endswith("end. )Next")  # joined with a space the text did not have
    assert aligned_spans(text, doc) == [[(0, 85)], [(86, 89)], [(90, 93)]]


def test_offsets_of_sentences_the_text_does_not_hold_are_none():
    doc = Document("", (("Alpha beta.", "Not in the text.", "Gamma delta."), ("Also missing.", "Epsilon.")))
    text = "Alpha beta.  Gamma\n delta.\n\nEpsilon."
    assert aligned_spans(text, doc) == reference_aligned_spans(text, doc) == [
        [(0, 11), None, (13, 26)], [None, (28, 36)]]


# -- the work bounded before the splitter runs ------------------------------------------------------
class CountingSplitter(SentenceSplitter):
    """The default splitter, counting the characters it is given."""

    def __init__(self) -> None:
        super().__init__(default_splitter().params, "curated")
        object.__setattr__(self, "chars", 0)

    def split(self, text: str) -> list[str]:
        object.__setattr__(self, "chars", self.chars + len(text))
        return super().split(text)


@given(texts)
@settings(max_examples=200, deadline=None)
def test_possible_sentence_ends_are_punkts_own_candidates(text):
    """The estimate counts exactly the places NLTK's Punkt examines (its period-context expression)."""
    punkt = default_splitter()._tokenizer._lang_vars.period_context_re()  # noqa: SLF001
    assert possible_sentence_ends([text]) == sum(1 for _ in punkt.finditer(text))


def test_possible_sentence_ends_counts_and_stops_at_the_bound():
    assert possible_sentence_ends(["One. Two? Three! (Four.) \"Five.\" U.S. law", "no end here", "a.b c.", "x."]) == 6
    assert possible_sentence_ends(["Ab. " * 1000]) == 999  # the last has no token after it
    assert possible_sentence_ends(["Ab. " * 1_000_000], stop=10) == 11


def test_a_document_of_too_many_possible_sentence_ends_is_refused_before_splitting():
    seg = SegmentationSettings(max_sentences=100)
    splitter = CountingSplitter()
    bound = MAX_ENDS_PER_SENTENCE * 100
    # 2,000 fragments join into 4 sentences of 2,000 characters: accepted before, after splitting all of it
    with pytest.raises(DocumentTooLargeError, match=f"more than {bound} possible sentence ends.*SDR_MAX_SENTENCES"):
        parse_record({"id": "big", "text": "Ab. " * 2000}, settings=seg, splitter=splitter)
    assert splitter.chars == 0
    doc = parse_record({"id": "ok", "text": "Ab. " * bound}, settings=seg, splitter=splitter)  # at the bound
    assert doc.n_sentences == 1 and splitter.chars == len("Ab. " * bound) - 1
    prose = " ".join(f"Sentence number {k} of an ordinary document ends here." for k in range(100))
    assert parse_record({"id": "p", "text": prose}, settings=seg).n_sentences == 100  # the limit itself


@pytest.mark.integration
def test_a_query_of_too_many_possible_sentence_ends_is_a_413_before_splitting(tmp_path, monkeypatch):
    """Over HTTP: a text query over 4 x SDR_MAX_QUERY_SENTENCES possible ends answers 413 before the
    splitter runs (before: split whole, joined into a few sentences and accepted), and a PUT over
    4 x SDR_MAX_SENTENCES answers 413 the same way; by-id queries meanwhile answer."""
    import sys

    from fastapi.testclient import TestClient

    from sdr_search.core import documents
    from sdr_search.indexer.embedded import EmbeddedStore
    from sdr_search.indexer.pipeline import index_documents
    from sdr_search.indexer.stats_job import refresh_stats
    from sdr_search.reranker.service.app import create_app
    from sdr_search.reranker.service.settings import ServiceSettings

    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))
    from factories import FakeEncoder

    monkeypatch.setenv("SDR_MAX_QUERY_SENTENCES", "10")
    monkeypatch.setenv("SDR_MAX_SENTENCES", "50")
    splitter = CountingSplitter()
    monkeypatch.setattr(documents, "default_splitter", lambda: splitter)
    store = EmbeddedStore(tmp_path / "store", create=True)
    docs = [parse_record({"id": f"d{k}", "text": f"Document {k} is about a river and a levee. It floods in spring."})
            for k in range(4)]
    index_documents(store, docs, FakeEncoder())
    refresh_stats(store, exact=True, sample_size=50, seed=0)
    app = create_app(stores={"default": store}, encoder=FakeEncoder(),
                     settings=ServiceSettings(api_key=None, stats_refresh_delay_s=0))
    with TestClient(app) as client:
        before = splitter.chars
        r = client.post("/v1/indices/default/more_like_this", json={"text": "Ab. " * 2000})
        assert r.status_code == 413, r.text
        assert "more than 40 possible sentence ends" in r.json()["error"]["message"]
        assert "SDR_MAX_QUERY_SENTENCES" in r.json()["error"]["message"]
        r = client.post("/v1/indices/default/more_like_this", json={"like": [{"text": "Ab. " * 30}, {"text": "Cd. " * 30}]})
        assert r.status_code == 413 and "the new sources have" in r.json()["error"]["message"]
        r = client.put("/v1/indices/default/documents/big", json={"text": "Ab. " * 2000})
        assert r.status_code == 413 and "SDR_MAX_SENTENCES" in r.json()["error"]["message"]
        assert splitter.chars == before  # none of it was split
        assert client.post("/v1/indices/default/more_like_this", json={"id": "d0", "size": 2}).status_code == 200
        ok = client.post("/v1/indices/default/more_like_this", json={"text": "A river and a levee. " * 5})
        assert ok.status_code == 200, ok.text
    store.close()
