import gzip
import json

import pytest

from sdr_search.core.documents import ReadReport, documents_from_records, parse_record, read_documents, split_text_paragraphs
from sdr_search.core.errors import DocumentTooLargeError, DuplicateIdError, InputReadError, InvalidDocumentError
from sdr_search.core.settings import SegmentationSettings

AS_GIVEN = SegmentationSettings.from_recorded({})  # paragraphs and sentences as written

pytestmark = pytest.mark.unit

SECTIONS = {
    "id": "wiki_1",
    "title": "Anarchism",
    "sections": [
        {"title": "", "paragraphs": ["Lead one. Lead two.", "Lead three."]},
        {"title": "History", "paragraphs": ["History one.", "", "History two. History three."]},
    ],
}


def test_text_paragraphs_split_on_blank_lines_else_on_lines():
    assert split_text_paragraphs("a b\nc\n\n  \nd") == ["a b\nc", "d"]
    assert split_text_paragraphs("a\nb\r\nc") == ["a", "b", "c"]
    assert split_text_paragraphs("  \n ") == []


def test_three_shapes_give_the_same_paragraphs():
    text = parse_record({"id": 1, "text": "One. Two.\n\nThree."}, settings=AS_GIVEN)
    paras = parse_record({"id": "1", "paragraphs": ["One. Two.", "Three."]}, settings=AS_GIVEN)
    secs = parse_record({"id": "1", "sections": [{"title": "t", "paragraphs": ["One. Two.", "Three."]}]}, settings=AS_GIVEN)
    assert text.id == paras.id == secs.id == "1"
    assert text.paragraphs == paras.paragraphs == secs.paragraphs == (("One.", "Two."), ("Three.",))


def test_paragraph_unit_section_merges_each_section():
    by_para = parse_record(SECTIONS, settings=AS_GIVEN)
    by_section = parse_record(SECTIONS, settings=AS_GIVEN.model_copy(update={"paragraph_unit": "section"}))
    assert [len(p) for p in by_para.paragraphs] == [2, 1, 1, 2]  # the empty paragraph is dropped
    assert by_section.paragraphs == (
        ("Lead one.", "Lead two.", "Lead three."),
        ("History one.", "History two.", "History three."),
    )
    assert by_section.title == "Anarchism"


def test_extra_keys_go_to_metadata():
    d = parse_record({"id": "x", "text": "A b.", "metadata": {"court": "SC"}, "year": 1995})
    assert d.metadata == {"court": "SC", "year": 1995}


@pytest.mark.parametrize(
    "record, message",
    [
        ({"text": "A."}, "'id'"),
        ({"id": "", "text": "A."}, "'id' is empty"),
        ({"id": "e", "text": ""}, "no sentence"),
        ({"id": "e", "paragraphs": ["  ", ""]}, "no sentence"),
        ({"id": "e", "paragraphs": []}, "no sentence"),
        ({"id": "e"}, "exactly one of"),
        ({"id": "e", "text": "a", "paragraphs": ["b"]}, "exactly one of"),
        ({"id": "e", "paragraphs": "not a list"}, "list of strings"),
        ({"id": "e", "paragraphs": ["ok", 3]}, "only strings"),
        ({"id": "e", "sections": [{"title": "x"}]}, "section 0"),
    ],
)
def test_invalid_records_are_rejected_with_a_clear_message(record, message):
    with pytest.raises(InvalidDocumentError, match=message):
        parse_record(record)


def test_too_many_sentences_is_rejected():
    with pytest.raises(DocumentTooLargeError, match="3 sentences"):
        parse_record({"id": "big", "text": "Alpha. Beta. Gamma."}, settings=AS_GIVEN.model_copy(update={"max_sentences": 2}))


def _write_jsonl(path, lines: list[bytes], gz=False):
    data = b"\n".join(lines) + b"\n"
    if gz:
        with gzip.open(path, "wb") as fh:
            fh.write(data)
    else:
        path.write_bytes(data)


def test_jsonl_reader_skips_and_counts_every_bad_line(tmp_path, caplog):
    big = json.dumps({"id": "huge", "text": "Word. " * 2_000_000}).encode()  # ~12 MB
    lines = [
        json.dumps({"id": "a", "text": "Alpha one. Alpha two."}).encode(),
        b'{"id": "bad-utf8", "text": "caf\xe9 au lait."}',
        json.dumps({"id": "a", "text": "Duplicate."}).encode(),
        json.dumps({"id": "empty", "paragraphs": []}).encode(),
        b"{not json",
        big,
        b"",
        json.dumps({"id": "b", "paragraphs": ["Beta."]}).encode(),
    ]
    path = tmp_path / "docs.jsonl.gz"
    _write_jsonl(path, lines, gz=True)
    report = ReadReport()
    docs = list(read_documents(path, report=report))
    assert [d.id for d in docs] == ["a", "b"]
    assert report.read == 2 and report.n_skipped == 5
    reasons = " | ".join(r for _, r in report.skipped)
    assert "not valid UTF-8 (byte 0xe9" in reasons
    assert "duplicate id (first seen at" in reasons and f"{path}:1" in reasons
    assert "'empty'" in reasons and "no sentence" in reasons
    assert "invalid JSON" in reasons
    assert "over the limit" in reasons and "SDR_MAX_DOCUMENT_BYTES" in reasons
    assert [w for w, _ in report.skipped] == [f"{path}:{i}" for i in (2, 3, 4, 5, 6)]
    assert "skipped" in caplog.text


def test_strict_mode_raises_on_the_first_problem(tmp_path):
    path = tmp_path / "d.jsonl"
    _write_jsonl(path, [json.dumps({"id": "a", "text": "A."}).encode(), json.dumps({"id": "a", "text": "B."}).encode()])
    with pytest.raises(DuplicateIdError, match="'a'"):
        list(read_documents(path, strict=True))


def test_duplicates_are_detected_across_files(tmp_path):
    p1, p2 = tmp_path / "1.jsonl", tmp_path / "2.jsonl"
    _write_jsonl(p1, [json.dumps({"id": "a", "text": "A."}).encode()])
    _write_jsonl(p2, [json.dumps({"id": "a", "text": "B."}).encode()])
    report = ReadReport()
    assert [d.id for d in read_documents([p1, p2], report=report)] == ["a"]
    assert report.n_skipped == 1


def test_txt_directory_reader(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "one.txt").write_text("First part. Still first.\n\nSecond para.", encoding="utf-8")
    (tmp_path / "sub" / "two.txt").write_text("Line one.\nLine two.", encoding="utf-8")
    (tmp_path / "latin1.txt").write_bytes("Caf\xe9.".encode("latin-1"))
    (tmp_path / "blank.txt").write_text("\n\n", encoding="utf-8")
    report = ReadReport()
    docs = {d.id: d for d in read_documents(tmp_path, settings=AS_GIVEN, report=report)}
    assert set(docs) == {"one", "sub/two"}
    assert docs["one"].paragraphs == (("First part.", "Still first."), ("Second para.",))
    assert docs["sub/two"].paragraphs == (("Line one.",), ("Line two.",))
    assert report.n_skipped == 2
    assert any("latin1.txt" in w and "UTF-8" in r for w, r in report.skipped)


def test_missing_and_unsupported_paths(tmp_path):
    with pytest.raises(InputReadError, match="does not exist"):
        list(read_documents(tmp_path / "nope.jsonl"))
    (tmp_path / "x.csv").write_text("a,b")
    with pytest.raises(InputReadError, match="unsupported"):
        list(read_documents(tmp_path / "x.csv"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputReadError, match="no .txt files"):
        list(read_documents(tmp_path / "empty"))


def test_truncated_gzip_is_an_input_error(tmp_path):
    path = tmp_path / "t.jsonl.gz"
    _write_jsonl(path, [json.dumps({"id": str(i), "text": "Some words here. " * 50}).encode() for i in range(200)], gz=True)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputReadError, match="cannot read"):
        list(read_documents(path))


def test_python_objects_reader():
    report = ReadReport()
    docs = list(documents_from_records([{"id": "a", "text": "A."}, {"id": "a", "text": "B."}, {"id": "c"}], report=report))
    assert [d.id for d in docs] == ["a"]
    assert report.n_skipped == 2


def test_default_segmentation_joins_fragments_and_merges_short_paragraphs():
    lines = [
        "CIVIL APPELLATE JURISDICTION: Civil Appeal No. 132 of 1956.",
        "DAS, S.K.",
        "The first question turns on the interpretation of the Act. It was argued at length.",
        "The appellant relied on Hartlepooles Case, [6 O'M. & H. 1] and others. The court disagreed.",
        "The appeal fails. It is dismissed with costs. So ordered by the bench today.",
    ]
    given = parse_record({"id": "j", "paragraphs": lines}, settings=AS_GIVEN)
    doc = parse_record({"id": "j", "paragraphs": lines})  # defaults: min 8 sentences, 20 characters
    assert [len(p) for p in given.paragraphs] == [1, 1, 2, 4, 3]  # "& H." and "1] and others." split off
    assert len(doc.paragraphs) == 1  # 9 sentences in all, fewer than 2 x 8: one unit
    assert " ".join(doc.sentences) == " ".join(given.sentences)  # nothing lost, order kept
    assert all(len(s) >= 20 for s in doc.sentences[1:])
    assert "DAS, S.K." not in doc.sentences  # the name joined the sentence before it


def test_segmentation_is_recorded_and_an_old_record_means_as_given():
    seg = SegmentationSettings(min_paragraph_sentences=4, min_sentence_chars=10, paragraph_unit="section")
    assert seg.recorded() == {"paragraph_unit": "section", "min_paragraph_sentences": 4, "min_sentence_chars": 10}
    assert SegmentationSettings.from_recorded(seg.recorded()) == seg
    legacy = SegmentationSettings.from_recorded({"paragraph_unit": "section", "splitter": "curated"})
    assert legacy.recorded() == {"paragraph_unit": "section", "min_paragraph_sentences": 1, "min_sentence_chars": 0}
    assert SegmentationSettings.from_recorded(None).recorded() == AS_GIVEN.recorded()


def test_segmentation_env(monkeypatch):
    monkeypatch.setenv("SDR_MIN_PARAGRAPH_SENTENCES", "3")
    monkeypatch.setenv("SDR_MIN_SENTENCE_CHARS", "0")
    assert SegmentationSettings().recorded()["min_paragraph_sentences"] == 3
    # a recorded value wins over the environment: queries follow the index
    assert SegmentationSettings.from_recorded({"min_paragraph_sentences": 5}).min_paragraph_sentences == 5
    assert SegmentationSettings.from_recorded({}).min_paragraph_sentences == 1
