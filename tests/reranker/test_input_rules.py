"""Input refused clearly, in one place (issue 24, item 6): one id rule for every reader and the HTTP
service, limits on sentences and the report of what the encoder cut, one summary line per file of
garbage, nothing left behind by a failed start, and a store of one (or two) documents that works."""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from pydantic import Field, TypeAdapter, ValidationError
from typing_extensions import Annotated

from factories import DIM, FakeEncoder, make_doc
from sdr_search.cli import main
from sdr_search.core.documents import (
    ID_PATTERN,
    MAX_ID_LENGTH,
    ReadReport,
    check_id,
    check_input_paths,
    documents_from_records,
    parse_record,
    read_documents,
    split_long_sentence,
)
from sdr_search.core.errors import (
    InputReadError,
    InvalidDocumentError,
    InvalidIdError,
    InvalidInputError,
    NoComparisonError,
    StatsUnavailableError,
)
from sdr_search.core.scoring import NormStats, sdr_scores, stats_from_paragraph_scores
from sdr_search.core.settings import SegmentationSettings
from sdr_search.core.stats import SampledParagraphs, exact_corpus_stats, source_stats_exact, stats_against_sample
from sdr_search.core.vectors import CorpusVectors, DocVectors
from sdr_search.indexer.embedded import EmbeddedStore
from sdr_search.indexer.embedded.store import remove_unused_store
from sdr_search.indexer.ingest import index_paths
from sdr_search.indexer.stats_job import ONE_DOCUMENT, refresh_stats
from sdr_search.reranker.engine import MLTSettings, MoreLikeThis, Query

unit = pytest.mark.unit
integration = pytest.mark.integration

GOOD_IDS = ["a", "doc-42", "a b", "x" * MAX_ID_LENGTH, "é" * MAX_ID_LENGTH, "日本語", "a\u00a0b", "#?/%"]
BAD_IDS = [
    ("", "empty"),
    (" a", "white space"),
    ("a ", "white space"),
    ("\u00a0a", "white space"),
    ("a\u3000", "white space"),
    ("\ufeffa", "white space"),
    ("a\nb", "U+000A"),
    ("a\tb", "U+0009"),
    ("a\x00b", "U+0000"),
    ("a\x85b", "U+0085"),
    ("a\u2028b", "U+2028"),
    ("a\ud800b", "surrogate"),
    ("x" * (MAX_ID_LENGTH + 1), "over the limit of 512"),
    (True, "not bool"),
    (1.0, "not float"),
    (None, "not NoneType"),
    (["a"], "not list"),
    (10 ** 600, "more than 512 digits"),
]


def _write_jsonl(path: Path, records) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


# ---------------------------------------------------------------- one id rule


@unit
@pytest.mark.parametrize("value", GOOD_IDS)
def test_good_ids_come_back_unchanged(value):
    assert check_id(value) == value and type(check_id(value)) is str


@unit
@pytest.mark.parametrize("value,message", BAD_IDS)
def test_bad_ids_are_refused_with_the_reason(value, message):
    with pytest.raises(InvalidIdError, match=re.escape(message)) as info:
        check_id(value)
    assert isinstance(info.value, InvalidInputError) and isinstance(info.value, ValueError)


@unit
def test_integers_are_accepted_as_their_decimal_string():
    assert check_id(42) == "42" and check_id(-7) == "-7" and check_id(0) == "0"
    assert check_id(int("9" * MAX_ID_LENGTH)) == "9" * MAX_ID_LENGTH
    with pytest.raises(InvalidIdError, match="over the limit"):
        check_id(-int("9" * MAX_ID_LENGTH))  # the sign makes it 513 characters


@unit
@pytest.mark.parametrize("value", GOOD_IDS[:-1] + [v for v, _ in BAD_IDS if isinstance(v, str) and "\ud800" not in v])
def test_the_pattern_states_the_same_rule_in_python_and_in_pydantic(value):
    """ID_PATTERN (for schemas) agrees with check_id, in Python's re and in pydantic-core's regex."""
    accepted = True
    try:
        check_id(value)
    except InvalidIdError:
        accepted = False
    length_ok = 1 <= len(value) <= MAX_ID_LENGTH
    assert (re.fullmatch(ID_PATTERN, value) is not None and length_ok) == accepted
    schema = TypeAdapter(Annotated[str, Field(min_length=1, max_length=MAX_ID_LENGTH, pattern=ID_PATTERN)])
    try:
        schema.validate_python(value)
        assert accepted
    except ValidationError:
        assert not accepted


@unit
def test_the_readers_apply_the_rule_and_never_strip(tmp_path):
    path = _write_jsonl(tmp_path / "ids.jsonl", [
        {"id": " padded ", "text": "Some text."},
        {"id": "x" * 600, "text": "Some text."},
        {"id": "new\nline", "text": "Some text."},
        {"id": 42, "text": "Forty-two."},
        {"id": "42", "text": "Forty-two again."},
        {"id": "ok", "text": "Fine."},
    ])
    report = ReadReport()
    docs = list(read_documents(path, report=report))
    assert [d.id for d in docs] == ["42", "ok"]
    reasons = [r for _, r in report.skipped]
    assert "white space" in reasons[0] and "not stripped" in reasons[0]
    assert "600 characters long, over the limit of 512" in reasons[1]
    assert "U+000A" in reasons[2]
    assert "duplicate id" in reasons[3]  # 42 and "42" are one id
    with pytest.raises(InvalidDocumentError, match="white space"):
        parse_record({"id": "a ", "text": "A."})
    assert [d.id for d in documents_from_records([{"id": 7, "text": "Seven."}])] == ["7"]


# ---------------------------------------------------------------- sentence limits


@unit
def test_split_long_sentence_cuts_at_spaces_into_even_pieces():
    sentence = " ".join(f"word{i}" for i in range(1000))  # 6,889 characters
    pieces = split_long_sentence(sentence, 2000)
    assert len(pieces) == 4 and all(len(p) <= 2000 for p in pieces)
    assert max(map(len, pieces)) - min(map(len, pieces)) < 50
    assert " ".join(pieces) == sentence
    assert split_long_sentence(sentence, 0) == [sentence] and split_long_sentence("short", 10) == ["short"]
    hard = split_long_sentence("z" * 4500, 2000)  # no space: cut mid-word
    assert "".join(hard) == "z" * 4500 and all(len(p) <= 2000 for p in hard)


@unit
def test_fragments_joined_into_one_huge_sentence_are_cut_again():
    """20,500 tiny sentences used to become one 82 KB sentence, encoded as its first 128 tokens."""
    text = " ".join(f"A{i % 10}." for i in range(20500))
    doc = parse_record({"id": "tiny", "text": text})
    assert doc.n_sentences > 1 and all(len(s) <= 2000 for s in doc.sentences)
    assert " ".join(doc.sentences) == text
    unlimited = parse_record({"id": "tiny", "text": text}, settings=SegmentationSettings(max_sentence_chars=0))
    assert unlimited.n_sentences == 1


@unit
def test_max_sentences_counts_the_pieces():
    text = " ".join(["word"] * 3000)  # one 14,999-character sentence
    with pytest.raises(InvalidDocumentError, match="8 sentences, over the limit of 5"):
        parse_record({"id": "x", "text": text}, settings=SegmentationSettings(max_sentences=5))


# ---------------------------------------------------------------- garbage: one summary per file


@unit
def test_a_file_of_garbage_gives_a_few_lines_and_one_summary(tmp_path, caplog):
    rng = np.random.default_rng(0)
    garbage = tmp_path / "garbage.jsonl"
    garbage.write_bytes(rng.integers(0, 256, 200_000, dtype=np.uint8).tobytes())
    good = _write_jsonl(tmp_path / "good.jsonl", [{"id": "a", "text": "Alpha."}])
    report = ReadReport()
    with caplog.at_level(logging.WARNING, logger="sdr_search.core.documents"):
        docs = list(read_documents([garbage, good], report=report))
    assert [d.id for d in docs] == ["a"]
    lines = [r.getMessage() for r in caplog.records]
    assert report.n_skipped > 500  # every bad line is counted ...
    assert len(lines) == report.listed_per_source + 1  # ... but only three are listed, then one summary
    assert lines[-1].startswith(f"{garbage}: {report.n_skipped} items skipped (")
    assert "not valid UTF-8" in lines[-1] and "the first 3 are listed above" in lines[-1]


@unit
def test_a_few_bad_lines_are_each_listed_without_a_summary(tmp_path, caplog):
    path = _write_jsonl(tmp_path / "d.jsonl", [{"id": "a", "text": "A."}, {"id": "a", "text": "B."}, {"id": " c", "text": "C."}])
    with caplog.at_level(logging.WARNING, logger="sdr_search.core.documents"):
        assert [d.id for d in read_documents(path)] == ["a"]
    assert len(caplog.records) == 2 and all(r.getMessage().startswith("skipped") for r in caplog.records)


@unit
def test_json_that_python_cannot_read_is_a_skipped_line_not_a_crash(tmp_path):
    path = tmp_path / "big-int.jsonl"
    path.write_text('{"id": ' + "1" * 5000 + ', "text": "A."}\n{"id": "b", "text": "B."}\n')
    report = ReadReport()
    assert [d.id for d in read_documents(path, report=report)] == ["b"]
    assert "invalid JSON" in report.skipped[0][1]


# ---------------------------------------------------------------- nothing left behind


@unit
def test_input_paths_are_checked_before_anything_is_done(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "x.csv").write_text("a")
    for bad, message in [("nope.jsonl", "does not exist"), ("empty", "no .txt files"), ("x.csv", "unsupported")]:
        with pytest.raises(InputReadError, match=message):
            check_input_paths([tmp_path / bad])
    ok = _write_jsonl(tmp_path / "ok.jsonl", [{"id": "a", "text": "A."}])
    assert check_input_paths(ok) == [ok]


@unit
def test_index_paths_with_a_mistyped_path_creates_no_store(tmp_path):
    store_dir = tmp_path / "never"
    with EmbeddedStore(store_dir, create=True) as store:
        with pytest.raises(InputReadError, match="does not exist"):
            index_paths(store, [tmp_path / "typo.jsonl"], encoder=FakeEncoder())
    assert not store_dir.exists()


@unit
def test_remove_unused_store_only_removes_a_store_that_never_held_a_document(tmp_path):
    fresh = tmp_path / "fresh"
    with EmbeddedStore(fresh, create=True) as store:
        store.counts()
    assert remove_unused_store(fresh) and not fresh.exists()
    used = tmp_path / "used"
    with EmbeddedStore(used, create=True) as store:
        store.ensure_meta(_meta())
        store.put([make_doc("a", np.random.default_rng(0))])
    assert not remove_unused_store(used) and used.exists()
    foreign = tmp_path / "foreign"
    with EmbeddedStore(foreign, create=True) as store:
        store.counts()
    (foreign / "notes.txt").write_text("mine")
    assert not remove_unused_store(foreign) and (foreign / "notes.txt").exists()


@unit
def test_sdr_index_that_fails_after_creating_the_store_removes_it(tmp_path, monkeypatch):
    import sdr_search.indexer.ingest as ingest
    from sdr_search.core.encoder import SentenceEncoder

    monkeypatch.setattr(SentenceEncoder, "dim", property(lambda self: DIM))  # no model loaded

    def interrupted(store, docs, encoder, **kw):
        store.ensure_meta(_meta())  # the store now exists, with no document
        raise KeyboardInterrupt

    monkeypatch.setattr(ingest, "index_documents", interrupted)
    corpus = _write_jsonl(tmp_path / "c.jsonl", [{"id": "a", "text": "A."}])
    target = tmp_path / "new" / "deeper" / "store"
    assert main(["--log-level", "WARNING", "index", "--store", str(target), str(corpus), "--no-progress", "--no-cache"]) == 130
    assert not (tmp_path / "new").exists()
    existing = tmp_path / "kept"
    existing.mkdir()
    assert main(["--log-level", "WARNING", "index", "--store", str(existing), str(corpus), "--no-progress", "--no-cache"]) == 130
    assert existing.exists()  # not created by that run: left alone


def _meta():
    from sdr_search.indexer.store import IndexMeta

    enc = FakeEncoder()
    return IndexMeta(enc.model_id, enc.cache_tag, DIM, {})


# ---------------------------------------------------------------- one and two documents


@unit
def test_statistics_with_no_other_document_are_refused_or_the_identity():
    P = np.ones((2, 3), dtype=np.float32)
    with pytest.raises(NoComparisonError, match="one document") as info:
        stats_from_paragraph_scores(P, exclude=np.ones(3, dtype=bool))
    assert isinstance(info.value, ValueError) and isinstance(info.value, StatsUnavailableError)
    identity = stats_from_paragraph_scores(P, exclude=np.ones(3, dtype=bool), if_empty="identity")
    np.testing.assert_array_equal(identity.mu, [0, 0])
    np.testing.assert_array_equal(identity.sigma, [1, 1])
    best = np.array([[0.2, 0.9], [0.4, 0.1]])
    np.testing.assert_array_equal(sdr_scores(best, NormStats.identity(2)), sdr_scores(best, None))

    rng = np.random.default_rng(1)
    one = CorpusVectors.from_docs(["a"], [DocVectors.from_paragraphs([_unit(rng, 2), _unit(rng, 3)])])
    with pytest.raises(NoComparisonError):
        exact_corpus_stats(one)
    with pytest.raises(NoComparisonError):
        source_stats_exact(one.doc(0), one, exclude_doc=0)
    assert len(source_stats_exact(one.doc(0), one, exclude_doc=0, if_empty="identity")) == 2
    sampled = SampledParagraphs(one, np.zeros(1, dtype=np.int64))
    assert stats_against_sample(one.doc(0), sampled, exclude_doc=0, if_empty="identity").mu.tolist() == [0.0, 0.0]
    assert len(stats_against_sample(one.doc(0), sampled)) == 2  # an outside source is normalised against it


def _unit(rng, n):
    v = rng.standard_normal((n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


@unit
@pytest.mark.parametrize("exact", [True, False])
def test_a_store_of_one_document_has_identity_statistics_and_answers_by_id(tmp_path, exact, caplog):
    with EmbeddedStore(tmp_path / "s", create=True) as store:
        store.ensure_meta(_meta())
        store.put([make_doc("only", np.random.default_rng(0))])
        with caplog.at_level(logging.WARNING):
            info = refresh_stats(store, exact=exact, sample_size=50)
        assert not info.stale and info.docs_without_stats == 0
        assert ONE_DOCUMENT in caplog.text
        stored = store.get("only").stats
        np.testing.assert_array_equal(stored.mu, [0, 0])
        np.testing.assert_array_equal(stored.sigma, [1, 1])
        for method in ("sdr", "hybrid"):
            result = MoreLikeThis(store=store, settings=MLTSettings(method=method)).run(Query(id="only"))
            assert result.hits == [] and result.stats_origin == "stored"


@unit
@pytest.mark.parametrize("exact", [True, False])
def test_a_store_of_two_documents_normalises_each_against_the_other(tmp_path, exact):
    rng = np.random.default_rng(3)
    a, b = make_doc("a", rng), make_doc("b", rng, n_pars=3)
    with EmbeddedStore(tmp_path / "s", create=True) as store:
        store.ensure_meta(_meta())
        store.put([a, b])
        refresh_stats(store, exact=exact, sample_size=50)
        for (doc, vectors), (_, other) in [(a, b), (b, a)]:
            expected = stats_from_paragraph_scores(_p(vectors, other))
            got = store.get(doc.id).stats
            np.testing.assert_allclose(got.mu, expected.mu, atol=1e-5)
            np.testing.assert_allclose(got.sigma, expected.sigma, atol=1e-5)
        result = MoreLikeThis(store=store, settings=MLTSettings(method="sdr")).run(Query(id="a"))
        assert [h.id for h in result.hits] == ["b"]


def _p(source: DocVectors, other: DocVectors) -> np.ndarray:
    from sdr_search.core.scoring import paragraph_scores

    return paragraph_scores(source, CorpusVectors.from_docs(["x"], [other]))


@unit
def test_index_paths_of_one_document_says_statistics_are_unavailable(tmp_path):
    corpus = _write_jsonl(tmp_path / "one.jsonl", [{"id": "a", "text": "Only one document here. It has two sentences."}])
    with EmbeddedStore(tmp_path / "s", create=True) as store:
        out = index_paths(store, [corpus], encoder=FakeEncoder())
    assert out["indexed"] == 1 and out["stats"]["unavailable"] == ONE_DOCUMENT
    assert out["truncated_sentences"] == 0


# ---------------------------------------------------------------- the real encoder


@integration
def test_the_encoder_counts_what_it_cut_and_gives_the_same_tokens(encoder):
    words = "the court held that the appeal was allowed on every ground raised".split()
    rng = np.random.default_rng(0)
    sentences = ["Short one.", " ".join(rng.choice(words, 40)), " ".join(rng.choice(words, 400)),
                 " ".join(rng.choice(words, 5000)), "z" * 9000]
    from transformers import AutoTokenizer

    encoder.load()
    hf = AutoTokenizer.from_pretrained(str(encoder.model_dir), local_files_only=True)
    reference = hf(sentences, truncation=True, max_length=encoder.settings.max_tokens)["input_ids"]
    before = encoder.truncation
    assert encoder.tokenize(sentences) == reference
    cut = encoder.truncation - before
    assert (cut.sentences, cut.truncated) == (5, 2)  # 9,000 z's are one unknown token: not cut
    assert 0.5 * (len(sentences[2]) + len(sentences[3])) < cut.chars_cut < len(sentences[2]) + len(sentences[3])
    assert "2 of 5 sentences (40.0 %) were longer than 128 tokens" in cut.message(128)


@integration
def test_a_huge_sentence_is_tokenised_in_bounded_time(encoder):
    import time

    huge = " ".join(["judgment"] * 800_000)  # 7.2 MB, one sentence
    encoder.load()
    t0 = time.perf_counter()
    ids = encoder.tokenize([huge])
    assert len(ids[0]) == encoder.settings.max_tokens and time.perf_counter() - t0 < 1.0


def _sdr(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sdr_search", "--log-level", "WARNING", *argv],
                          capture_output=True, text=True, cwd=cwd)


@integration
def test_cli_on_a_store_of_one_then_two_documents(tmp_path):
    one = _write_jsonl(tmp_path / "one.jsonl", [{"id": "a", "text": "The fox jumps over the dog near the river bank."}])
    proc = _sdr("index", "--store", "s", str(one), "--no-progress", "--precision", "fp32", "--cache-dir", "cache", cwd=tmp_path)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr
    assert json.loads(proc.stdout)["stats"]["unavailable"] == ONE_DOCUMENT
    assert proc.stderr.count("no normalisation statistics") == 1
    proc = _sdr("stats", "--store", "s", "--no-progress", cwd=tmp_path)
    assert proc.returncode == 0 and json.loads(proc.stdout)["unavailable"] == ONE_DOCUMENT
    proc = _sdr("mlt", "--store", "s", "--id", "a", "--json", cwd=tmp_path)
    assert proc.returncode == 0 and json.loads(proc.stdout)["hits"] == []
    proc = _sdr("info", "--store", "s", "--json", cwd=tmp_path)
    assert proc.returncode == 0 and json.loads(proc.stdout)["stats"]["unavailable"] == ONE_DOCUMENT
    proc = _sdr("mlt", "--store", "s", "--text", "A fox by a river.", "--json", "--precision", "fp32", cwd=tmp_path)
    assert proc.returncode == 0 and [h["id"] for h in json.loads(proc.stdout)["hits"]] == ["a"]

    two = _write_jsonl(tmp_path / "two.jsonl", [{"id": "b", "text": "Foxes are quick animals living near rivers."}])
    proc = _sdr("index", "--store", "s", str(two), "--no-progress", "--precision", "fp32", "--cache-dir", "cache", cwd=tmp_path)
    assert proc.returncode == 0 and "unavailable" not in json.loads(proc.stdout)["stats"]
    proc = _sdr("mlt", "--store", "s", "--id", "a", "--json", cwd=tmp_path)
    assert proc.returncode == 0 and [h["id"] for h in json.loads(proc.stdout)["hits"]] == ["b"]


@integration
def test_cli_mistyped_path_or_model_leaves_no_store(tmp_path):
    corpus = _write_jsonl(tmp_path / "c.jsonl", [{"id": "a", "text": "A sentence."}])
    for argv, message in [((str(tmp_path / "typo.jsonl"),), "does not exist"),
                          ((str(corpus), "--model", str(tmp_path / "no-model")), "does not exist")]:
        proc = _sdr("index", "--store", "new/store", *argv, "--no-progress", cwd=tmp_path)
        assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr
        assert not (tmp_path / "new").exists()


@integration
def test_cli_index_reports_what_the_token_cap_cut_once(tmp_path):
    long = " ".join(["the appeal was dismissed by the high court"] * 60)  # ~2,600 characters, no period
    corpus = _write_jsonl(tmp_path / "c.jsonl", [{"id": "a", "text": long + "."}, {"id": "b", "text": "Short."}])
    proc = _sdr("index", "--store", "s", str(corpus), "--no-progress", "--precision", "fp32", "--cache-dir", "cache", cwd=tmp_path)
    assert proc.returncode == 0
    out = json.loads(proc.stdout)
    assert out["sentences"] == 3  # the long sentence was cut in two (SDR_MAX_SENTENCE_CHARS=2000) ...
    assert out["truncated_sentences"] == 2 and out["truncated_chars"] > 1000  # ... each still over 128 tokens
    assert proc.stderr.count("were longer than 128 tokens") == 1
    # the same file into a second store: its vectors come from the cache, and the report is the same
    again = _sdr("index", "--store", "s2", str(corpus), "--no-progress", "--precision", "fp32", "--cache-dir", "cache",
                 cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    second = json.loads(again.stdout)
    assert (second["truncated_sentences"], second["truncated_chars"]) == (2, out["truncated_chars"])
    assert again.stderr.count("were longer than 128 tokens") == 1
    # a cache written before cuts were recorded: the cached sentences are tokenised again to count them
    import sqlite3

    with sqlite3.connect(tmp_path / "cache" / "embeddings.sqlite") as conn:
        conn.execute("DELETE FROM truncation")
    conn.close()
    third = json.loads(_sdr("index", "--store", "s3", str(corpus), "--no-progress", "--precision", "fp32",
                            "--cache-dir", "cache", cwd=tmp_path).stdout)
    assert (third["truncated_sentences"], third["truncated_chars"]) == (2, out["truncated_chars"])


@pytest.mark.unit
def test_the_progress_bar_total_counts_every_input_item(tmp_path):
    import gzip

    from sdr_search.indexer.ingest import count_inputs

    plain = tmp_path / "a.jsonl"
    plain.write_text('{"id": "1", "text": "x"}\n\n{"id": "2", "text": "y"}\n   \n{"id": "3", "text": "z"}')
    packed = tmp_path / "b.jsonl.gz"
    with gzip.open(packed, "wt") as fh:
        fh.write("".join(f'{{"id": "g{k}", "text": "t"}}\n' for k in range(7)))
    folder = tmp_path / "txt"
    (folder / "sub").mkdir(parents=True)
    for name in ("one.txt", "sub/two.txt", "notes.md"):
        (folder / name).write_text("Some text.")
    assert count_inputs([plain]) == 3
    assert count_inputs([plain, packed, folder]) == 3 + 7 + 2


# ---------------------------------------------------------------- one size rule, a big document alone (issue 32)


@unit
def test_long_paragraphs_split_in_chunks_give_the_sentences_of_the_whole():
    from sdr_search.core.sentences import CHUNK_CHARS, _chunks, default_splitter

    rng = np.random.default_rng(3)
    words = ["court", "held", "that", "Art.", "No.", "appeal", "Dr.", "Smith", "i.e.", "U.S.", "the", "5", "p.m."]
    sentences = [" ".join(rng.choice(words, rng.integers(3, 14))).capitalize() + "." for _ in range(3000)]
    text = " ".join(sentences)
    assert len(text) > 4 * CHUNK_CHARS
    pieces = _chunks(text)
    assert "".join(pieces) == text and all(len(p) <= CHUNK_CHARS for p in pieces)
    splitter = default_splitter()
    whole = splitter._tokenizer.tokenize(text)  # Punkt over the whole text at once (fits its time limit here)
    assert [s.strip() for s in splitter.split(text)] == [s.strip() for s in whole]


@unit
def test_a_megabytes_paragraph_of_short_sentences_is_split_not_timed_out():
    from sdr_search.core.sentences import default_splitter

    text = " ".join(f"Item {k} is ok." for k in range(120_000))  # 2.2 MB: one Punkt pass took > 5 s (nltk.redos)
    sentences = default_splitter().split(text)
    assert len(sentences) == 120_000 and sentences[-1] == "Item 119999 is ok."


@unit
def test_a_splitter_failure_refuses_that_document_and_the_others_are_read(tmp_path, monkeypatch):
    from sdr_search.core import sentences

    real = sentences.SentenceSplitter.split

    def split(self, text):
        if "poison" in text:
            raise TimeoutError("regular-expression match exceeded its 5.0s time limit")
        return real(self, text)

    monkeypatch.setattr(sentences.SentenceSplitter, "split", split)
    path = _write_jsonl(tmp_path / "d.jsonl", [{"id": "a", "text": "Alpha is fine."}, {"id": "b", "text": "A poison pill."},
                                               {"id": "c", "text": "Gamma is fine."}])
    report = ReadReport()
    assert [d.id for d in read_documents(path, report=report)] == ["a", "c"]
    assert "document 'b'" in report.skipped[0][1] and "sentence splitting failed" in report.skipped[0][1]


@unit
def test_one_document_size_limit_on_text_for_every_door(tmp_path, monkeypatch):
    from sdr_search.core.errors import DocumentTooLargeError
    from sdr_search.core.settings import SegmentationSettings

    settings = SegmentationSettings(max_document_bytes=1000)
    small, big = "Short sentence here. " * 40, "Short sentence here. " * 60  # 840 and 1260 bytes of text
    for body in ({"text": big}, {"paragraphs": [big[:630], big[630:]]},
                 {"sections": [{"title": "T", "paragraphs": [big]}]}):
        with pytest.raises(DocumentTooLargeError, match="SDR_MAX_DOCUMENT_BYTES"):
            parse_record({"id": "x", **body}, settings=settings)
    assert parse_record({"id": "x", "text": small}, settings=settings).n_sentences == 40
    # a JSON line is measured by its text, not its escapes: 840 bytes of text in a line of ~5 kB is read
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps({"id": "esc", "text": small.replace(" ", "\u0001 ")}, ensure_ascii=True) + "\n"
                    + json.dumps({"id": "big", "text": big}) + "\n" + json.dumps({"id": "ok", "text": small}) + "\n")
    report = ReadReport()
    # \u0001 is a control character, text of 880 bytes: under the limit although its line is far over it
    assert [d.id for d in read_documents(path, settings=settings, report=report)] == ["esc", "ok"]
    assert "document 'big'" in report.skipped[0][1] and "bytes of text, over the limit of 1,000 bytes" in report.skipped[0][1]


@integration
def test_http_put_and_sdr_index_refuse_the_same_document_by_the_same_limit(tmp_path, monkeypatch):
    from fastapi.testclient import TestClient

    from sdr_search.reranker.service.app import create_app
    from sdr_search.reranker.service.settings import ServiceSettings

    monkeypatch.setenv("SDR_MAX_DOCUMENT_BYTES", "2000")
    big = "A sentence about the appeal. " * 100  # 2900 bytes of text
    path = _write_jsonl(tmp_path / "d.jsonl", [{"id": "a", "text": "Alpha is fine."}, {"id": "big", "text": big},
                                               {"id": "c", "text": "Gamma is fine."}])
    with EmbeddedStore(tmp_path / "s", create=True) as store:
        out = index_paths(store, [path], encoder=FakeEncoder(), stats=False)
        assert out["indexed"] == 2 and out["skipped"] == 1
        assert sorted(store.iter_ids()) == ["a", "c"]
        app = create_app(stores={"default": store}, encoder=FakeEncoder(),
                         settings=ServiceSettings(api_key=None, stats_refresh_delay_s=0))
        with TestClient(app) as client:
            r = client.put("/v1/indices/default/documents/big", json={"text": big})
            assert r.status_code == 413 and "SDR_MAX_DOCUMENT_BYTES" in r.json()["error"]["message"]
            bulk = client.post("/v1/indices/default/_bulk", content=json.dumps({"id": "big", "text": big}) + "\n")
            assert bulk.status_code == 200 and "SDR_MAX_DOCUMENT_BYTES" in bulk.json()["failed"][0]["error"]
            assert client.put("/v1/indices/default/documents/ok", json={"text": big[:1500]}).status_code == 200


@unit
def test_cli_refuses_what_http_refuses_in_one_line(tmp_path, caplog):
    (tmp_path / "afile").write_text("not a store")
    (tmp_path / "adir").mkdir()
    corpus = _write_jsonl(tmp_path / "c.jsonl", [{"id": "a", "text": "Alpha."}])
    cases = [
        (["index", "--store", str(tmp_path / "afile"), str(corpus)], "is a file, not a store directory"),
        (["mlt", "--store", str(tmp_path / "afile"), "--id", "a"], "is a file, not an sdr store directory"),
        (["mlt", "--store", str(tmp_path / "s"), "--file", str(tmp_path / "adir")], "is a directory"),
        (["mlt", "--store", str(tmp_path / "s"), "--id", "a", "--size", "0"], "size: Input should be greater than or equal to 1"),
        (["mlt", "--store", str(tmp_path / "s"), "--id", "a", "--size", "100000"], "size: Input should be less than or equal to 100"),
        (["mlt", "--store", str(tmp_path / "s"), "--id", "a", "--candidates", "0"], "candidates: Input should be greater than or equal to 1"),
        (["mlt", "--store", str(tmp_path / "s"), "--id", "a", "--from", "5000"], "offset: Input should be less than or equal to 900"),
    ]
    for argv, message in cases:
        caplog.clear()
        assert main(argv) == 2, argv
        assert message in caplog.text, (argv, caplog.text)
        assert "Traceback" not in caplog.text
    assert (tmp_path / "afile").read_text() == "not a store"
