import pytest

from sdr_search.core.sentences import SentenceSplitter, default_splitter

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "text",
    [
        "The right is guaranteed by Art. 14 of the Constitution and applies here.",
        "Civil Appeal No. 2226 of 2010 was heard together with the other appeals.",
        "Dr. Smith examined the witness at length.",
        "The case went to the U.S. Supreme Court in that year.",
        "The apex court, i.e. the Supreme Court, decided it.",
        "The meeting ended at 5 p.m. on Monday without a vote.",
        "He was charged under Section 302 I.P.C. and convicted.",
        "The appellant (Mr. Rao) argued vs. the State of Kerala.",
        "Payment of Rs. 58,000 was made, e.g. by cheque.",
    ],
)
def test_abbreviations_do_not_end_a_sentence(text):
    assert default_splitter().split(text) == [text]


def test_real_sentence_boundaries_are_kept():
    text = "The appeal is allowed. No costs. See Art. 14 of the Constitution. It applies."
    assert default_splitter().split(text) == [
        "The appeal is allowed.",
        "No costs.",
        "See Art. 14 of the Constitution.",
        "It applies.",
    ]


def test_abbreviation_followed_by_frequent_starter_breaks():
    assert default_splitter().split("He came at 5 p.m. The court rose.") == [
        "He came at 5 p.m.",
        "The court rose.",
    ]


def test_whitespace_is_collapsed_and_empty_text_gives_nothing():
    assert default_splitter().split("  A first\n sentence.   A second.\n") == ["A first sentence.", "A second."]
    assert default_splitter().split(" \n\t ") == []


def test_trained_splitter_learns_corpus_abbreviations(tmp_path):
    # "Xyz." occurs often mid-sentence followed by a lower-case word: Punkt learns it as an abbreviation.
    corpus = ["The Xyz. rule was applied by the court in this matter. " * 3 + "The Xyz. bench said so. " for _ in range(60)]
    trained = SentenceSplitter.train(corpus)
    assert "xyz" in trained.params.abbrev_types
    assert trained.split("Under the Xyz. Rule the bench sat. It ended.") == [
        "Under the Xyz. Rule the bench sat.",
        "It ended.",
    ]
    # curated list still applies, and saving/loading keeps the behaviour
    path = tmp_path / "punkt.json"
    trained.save(path)
    loaded = SentenceSplitter.load(path)
    assert loaded.source == "trained"
    assert loaded.split("See Art. 14 now. Under the Xyz. Rule it sat.") == ["See Art. 14 now.", "Under the Xyz. Rule it sat."]


def test_no_nltk_download_is_attempted(monkeypatch):
    import nltk

    def boom(*a, **k):
        raise AssertionError("nltk.download must never be called")

    monkeypatch.setattr(nltk, "download", boom)
    assert SentenceSplitter.default().split("One. Two.") == ["One.", "Two."]
