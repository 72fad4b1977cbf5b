import pytest

from sdr_search.core.segments import join_short_sentences, merge_short_paragraphs

pytestmark = pytest.mark.unit


def test_short_paragraphs_are_merged_in_order_until_n_sentences():
    paras = [("a",), ("b", "c"), ("d", "e", "f"), ("g",), ("h",), ("i", "j")]
    assert merge_short_paragraphs(paras, 3) == [("a", "b", "c"), ("d", "e", "f"), ("g", "h", "i", "j")]


def test_a_long_paragraph_is_never_split_and_stands_alone():
    paras = [("a", "b", "c", "d", "e"), ("f",), ("g", "h")]
    assert merge_short_paragraphs(paras, 2) == [("a", "b", "c", "d", "e"), ("f", "g", "h")]


def test_a_short_tail_joins_the_unit_before_it():
    assert merge_short_paragraphs([("a", "b"), ("c",)], 2) == [("a", "b", "c")]


def test_a_document_shorter_than_n_is_one_unit():
    assert merge_short_paragraphs([("a",), ("b",)], 4) == [("a", "b")]


@pytest.mark.parametrize("n", [0, 1])
def test_n_of_one_or_less_keeps_the_paragraphs(n):
    paras = [("a",), ("b", "c"), ()]
    assert merge_short_paragraphs(paras, n) == [("a",), ("b", "c")]


def test_every_sentence_is_kept_once_in_order():
    paras = [tuple(f"{k}.{j}" for j in range(k % 4 + 1)) for k in range(40)]
    for n in (2, 3, 5, 8, 100):
        merged = merge_short_paragraphs(paras, n)
        assert [s for p in merged for s in p] == [s for p in paras for s in p]
        assert all(len(p) >= n for p in merged) or len(merged) == 1


def test_a_fragment_joins_the_sentence_before_it():
    out = join_short_sentences(["The first question turns on s.", "10.", "It was held so by the court."], 5)
    assert out == ["The first question turns on s. 10.", "It was held so by the court."]


def test_fragments_opening_a_paragraph_join_the_next_sentence():
    out = join_short_sentences(["Held,", "that s.", "10 of the Act was applicable here."], 20)
    assert out == ["Held, that s. 10 of the Act was applicable here."]


def test_a_paragraph_of_fragments_becomes_one_sentence():
    assert join_short_sentences(["DAS,", "S.K."], 20) == ["DAS, S.K."]
    assert join_short_sentences([], 20) == []


def test_zero_chars_keeps_the_sentences():
    assert join_short_sentences(["a.", "b."], 0) == ["a.", "b."]


def test_joined_text_is_the_input_text_in_order():
    pieces = ["x" * (k % 7 + 1) for k in range(50)]
    for n in (1, 3, 5, 8, 100):
        out = join_short_sentences(pieces, n)
        assert " ".join(out) == " ".join(pieces)
        assert all(len(s) >= n for s in out) or len(out) == 1
