"""Input that answered 500, or was read as something else (issue 41, cases 7 and 12): one text rule
for every string a document or a query carries, at every door, and strict request fields.

- Case 7: a lone surrogate (the JSON escape ``"\\ud800"``) in ``text`` or ``metadata`` answered 500 on
  both stores (MLT text, PUT), a ``_bulk`` with one such line answered 500 and wrote none of its
  valid lines, and ``sdr index`` died with a traceback and wrote nothing. Now: a 422 naming the field
  (HTTP), a per-line failure (``_bulk``), a per-record failure with the other records written
  (``sdr index``; the workers' test is in tests/workers/test_workers.py). Control characters are
  valid text and are kept (only ids refuse them).
- Case 12: ``"size": true`` and ``"size": "5"`` were read as 1 and 5; ``rank_constant`` with
  ``fusion: zscore`` was ignored; ``PUT /documents/a%0Ab`` answered 404 and ``a%0A`` replaced
  document ``a``; ``%ED%A0%80`` in a path id was stored as U+FFFD.

The HTTP tests run on the embedded store and on a real OpenSearch node, with the test encoder.
"""

from __future__ import annotations

import json
import re
import uuid

import pytest

from factories import FakeEncoder

SURROGATE = "\\ud800"  # as it travels in JSON: an escape Python's json reads as a lone surrogate
TEXT = "The river flooded the northern valley in spring. Farmers lost their whole harvest."


# =============================================================================================
# unit: the rule itself, the readers, the query contract
# =============================================================================================
@pytest.mark.unit
def test_the_text_rule_names_the_field_and_the_position():
    from sdr_search.core.documents import check_text, text_problem

    assert text_problem("fine \x00 text\x0c", "text") is None
    assert text_problem({"a": [1, "b", {"c": None}]}, "metadata") is None
    assert "text contains a lone surrogate U+D800 at character 3" in text_problem("abc\ud800", "text")
    assert "paragraphs[1] contains a lone surrogate U+DFFF at character 0" in text_problem(["ok", "\udfff"], "paragraphs")
    assert "metadata['a'][2]['b'] contains" in text_problem({"a": [1, 2, {"b": "x\udc80"}]}, "metadata")
    problem = text_problem({"k\ud800": 1}, "metadata")
    assert "metadata has a key 'k\\ud800' with a lone surrogate" in problem
    problem.encode("utf-8")  # the message never quotes the invalid string itself: it can be sent back
    deep = current = {}
    for _ in range(5000):  # deeper than Python's recursion limit: the walk is iterative
        current["x"] = current = {}
    current["y"] = "\ud800"
    assert "lone surrogate" in text_problem(deep, "metadata")
    with pytest.raises(ValueError, match="filter\\['k'\\] contains a lone surrogate"):
        check_text({"k": "\ud800"}, "filter")


BAD_RECORDS = [
    ({"text": "A river \ud800 flooded."}, "text contains a lone surrogate U+D800 at character 8"),
    ({"paragraphs": ["Fine.", "Not \udbff fine."]}, "paragraphs[1] contains a lone surrogate U+DBFF"),
    ({"sections": [{"title": "T\ud800", "paragraphs": ["Fine."]}]}, "sections[0]['title'] contains"),
    ({"sections": [{"paragraphs": ["\udc00"]}]}, "sections[0]['paragraphs'][0] contains"),
    ({"text": "Fine.", "title": "A \ud800 title"}, "title contains a lone surrogate"),
    ({"text": "Fine.", "metadata": {"court": "\ud800"}}, "metadata['court'] contains"),
    ({"text": "Fine.", "metadata": {"tags": ["a", "\ud800"]}}, "metadata['tags'][1] contains"),
    ({"text": "Fine.", "metadata": {"\ud800": 1}}, "metadata has a key"),
    ({"text": "Fine.", "court": "x\ud800"}, "metadata['court'] contains"),  # extra keys are metadata
]


@pytest.mark.unit
@pytest.mark.parametrize("body,message", BAD_RECORDS, ids=[m.split(" ")[0] for _, m in BAD_RECORDS])
def test_every_string_of_a_record_keeps_the_text_rule(body, message):
    from sdr_search.core.documents import parse_record, source_document
    from sdr_search.core.errors import InvalidDocumentError

    with pytest.raises(InvalidDocumentError, match=re.escape(message)) as info:
        parse_record({"id": "d1", **body})
    assert info.value.doc_id == "d1"
    source = {k: v for k, v in body.items() if k in ("text", "paragraphs", "sections", "title")}
    if "metadata" not in message:
        with pytest.raises(InvalidDocumentError, match="lone surrogate"):
            source_document(**source)


@pytest.mark.unit
def test_control_characters_are_valid_text_and_kept():
    from sdr_search.core.documents import parse_record

    doc = parse_record({"id": "c", "title": "T\x01", "text": "A river\x00 flooded the valley.\x0cFarmers\x7f lost\x85 it.",
                        "metadata": {"k\x02": "v\x1b"}})
    assert "A river\x00 flooded the valley." in doc.sentences[0]
    assert "Farmers\x7f lost it." in " ".join(doc.sentences)  # \x0c and \x85 are white space to the splitter
    assert doc.title == "T\x01" and doc.metadata == {"k\x02": "v\x1b"}


@pytest.mark.unit
def test_a_document_built_in_code_with_a_lone_surrogate_is_refused_by_the_store(tmp_path):
    """Documents made without parse_record (the library) meet the same rule at put()."""
    import numpy as np

    from sdr_search.core.documents import Document
    from sdr_search.core.errors import InvalidDocumentError
    from sdr_search.core.vectors import DocVectors
    from sdr_search.indexer.embedded import EmbeddedStore
    from sdr_search.indexer.pipeline import index_documents

    good = Document("g", (("A fine sentence.",),))
    with EmbeddedStore(tmp_path / "s", create=True) as store:
        index_documents(store, [good], FakeEncoder())
        vectors = DocVectors(np.eye(1, 16, dtype=np.float32), np.array([0, 1]))
        for doc in (Document("b", (("Bad \ud800.",),)), Document("b", (("Fine.",),), "T\ud800"),
                    Document("b", (("Fine.",),), None, {"k": ["\udfff"]})):
            with pytest.raises(InvalidDocumentError, match="lone surrogate"):
                store.put([(doc, vectors)])
        assert store.counts()["documents"] == 1


@pytest.mark.unit
@pytest.mark.parametrize("field,value,message", [
    ("size", True, "size: must be a number, not a boolean"),
    ("size", "5", "size: must be a number, not a string"),
    ("offset", False, "offset: must be a number, not a boolean"),
    ("candidates", "100", "candidates: must be a number, not a string"),
    ("unlike_weight", True, "unlike_weight: must be a number, not a boolean"),
    ("weights", {"bm25": "1"}, "weights.bm25: must be a number, not a string"),
    ("rank_constant", True, "rank_constant: must be a number, not a boolean"),
])
def test_numeric_query_fields_refuse_booleans_and_strings(field, value, message):
    from sdr_search.core.errors import InvalidInputError
    from sdr_search.reranker.query import Query

    with pytest.raises(InvalidInputError, match=message):
        Query(id="a", **{field: value})
    assert Query(id="a", size=5, offset=0, candidates=100).size == 5  # numbers still are numbers
    assert Query(id="a", size=5.0).size == 5  # an integral float is an integer, as before


@pytest.mark.unit
def test_rank_constant_with_another_fusion_is_refused_not_ignored():
    from sdr_search.core.errors import InvalidInputError
    from sdr_search.reranker.query import Query

    with pytest.raises(InvalidInputError, match="rank_constant applies to fusion 'rrf' only, not to fusion 'zscore'"):
        Query(id="a", fusion="zscore", rank_constant=5)
    assert Query(id="a", fusion="rrf", rank_constant=5).rank_constant == 5


# =============================================================================================
# the HTTP service on both stores
# =============================================================================================
SEED = {f"s{i}": f"{TEXT} Document {i} also says something else about levee number {i}." for i in range(5)}


@pytest.fixture(scope="module", params=["embedded", "opensearch"])
def client(request, tmp_path_factory):
    """The service over a store of five documents, one per store kind for the module (each test
    writes ids of its own and reads only those and the seed, which no test changes)."""
    from fastapi.testclient import TestClient

    from sdr_search.core.documents import parse_record
    from sdr_search.indexer.pipeline import index_documents
    from sdr_search.indexer.stats_job import refresh_stats
    from sdr_search.reranker.service.app import create_app
    from sdr_search.reranker.service.settings import ServiceSettings

    if request.param == "embedded":
        from sdr_search.indexer.embedded import EmbeddedStore

        store = EmbeddedStore(tmp_path_factory.mktemp("hostile") / "store", create=True)
    else:
        from sdr_search.indexer.opensearch import OpenSearchSettings, OpenSearchStore

        url = request.getfixturevalue("opensearch_url")
        store = OpenSearchStore(url, index=f"sdr-hostile-{uuid.uuid4().hex[:10]}", settings=OpenSearchSettings(replicas=0))
    try:
        index_documents(store, [parse_record({"id": k, "text": v}) for k, v in SEED.items()], FakeEncoder())
        refresh_stats(store, exact=True, sample_size=100, seed=0)
        app = create_app(stores={"default": store}, encoder=FakeEncoder(),
                         settings=ServiceSettings(api_key=None, stats_refresh_delay_s=0))
        with TestClient(app, raise_server_exceptions=False) as c:
            c.store = store
            yield c
    finally:
        if request.param == "opensearch":
            store.drop()
        store.close()


MLT = "/v1/indices/default/more_like_this"
DOCS = "/v1/indices/default/documents"
JSON = {"Content-Type": "application/json"}


def _raw(client, method: str, path: str, body: str):
    """A request whose body is sent as written (json.dumps would escape a surrogate itself)."""
    return client.request(method, path, content=body.encode("ascii"), headers=JSON)


def _error(r, status: int, *parts: str) -> str:
    assert r.status_code == status, r.text
    message = r.json()["error"]["message"]
    for part in parts:
        assert part in message, message
    return message


@pytest.mark.integration
@pytest.mark.parametrize("path,method,body,field", [
    (MLT, "POST", f'{{"text": "A river {SURROGATE} flooded."}}', "text contains a lone surrogate U+D800 at character 8"),
    (MLT, "POST", f'{{"paragraphs": ["Fine.", "{SURROGATE}"]}}', "paragraphs[1] contains"),
    (MLT, "POST", f'{{"like": ["s0", {{"text": "x {SURROGATE}"}}]}}', "(like[1]): text contains"),
    (MLT, "POST", f'{{"id": "s0", "filter": {{"court": "{SURROGATE}"}}}}', "filter['court'] contains"),
    (f"{DOCS}/n1", "PUT", f'{{"text": "A river {SURROGATE} flooded."}}', "document 'n1': text contains"),
    (f"{DOCS}/n1", "PUT", f'{{"text": "Fine.", "metadata": {{"court": "{SURROGATE}"}}}}', "metadata['court'] contains"),
    (f"{DOCS}/n1", "PUT", f'{{"text": "Fine.", "metadata": {{"{SURROGATE}": 1}}}}', "metadata has a key"),
    (f"{DOCS}/n1", "PUT", f'{{"sections": [{{"paragraphs": ["{SURROGATE}"]}}]}}', "sections[0]['paragraphs'][0]"),
    (f"{DOCS}/n1", "PUT", f'{{"text": "Fine.", "title": "{SURROGATE}"}}', "title"),
])
def test_a_lone_surrogate_is_a_422_naming_the_field_on_both_stores(client, path, method, body, field):
    _error(_raw(client, method, path, body), 422, field)
    assert client.get(f"{DOCS}/n1").status_code == 404  # nothing written


@pytest.mark.integration
def test_bulk_refuses_each_invalid_line_alone_and_writes_the_others(client):
    lines = [
        '{"id": "b1", "text": "The council built a new levee along the bank."}',
        f'{{"id": "b2", "text": "Bad {SURROGATE} text."}}',
        f'{{"id": "b3", "text": "Fine text.", "metadata": {{"tags": ["{SURROGATE}"]}}}}',
        f'{{"id": "b4{SURROGATE}", "text": "An id that is not valid Unicode."}}',
        f'{{"delete": "x{SURROGATE}"}}',
        '{"id": "b5", "text": "Control characters\\u0000 are kept.\\u000c So is this."}',
    ]
    r = client.post("/v1/indices/default/_bulk", content=("\n".join(lines) + "\n").encode("ascii"),
                    headers={"Content-Type": "application/x-ndjson"})
    assert r.status_code == 200, r.text  # before: 500, and b1 not written
    got = r.json()
    assert [(i["line"], i["id"], i["result"]) for i in got["items"]] == [
        (1, "b1", "created"), (2, "b2", "failed"), (3, "b3", "failed"), (4, None, "failed"), (5, None, "failed"),
        (6, "b5", "created")]
    errors = {f["line"]: f["error"] for f in got["failed"]}
    assert "text contains a lone surrogate" in errors[2] and "metadata['tags'][0]" in errors[3]
    assert "lone surrogate" in errors[4] and "lone surrogate" in errors[5]
    assert got["written"] == 2
    assert client.get(f"{DOCS}/b1").status_code == 200 and client.get(f"{DOCS}/b2").status_code == 404
    assert client.get(f"{DOCS}/b3").status_code == 404
    kept = client.get(f"{DOCS}/b5").json()
    assert "Control characters\x00 are kept." in kept["text"]


@pytest.mark.integration
def test_control_characters_in_text_are_stored_and_queried_on_both_stores(client):
    text = "A river\x00 flooded the valley\x01 in spring.\tFarmers lost their harvest\x7f to the water."
    r = client.put(f"{DOCS}/ctl", json={"text": text, "title": "T\x1f", "metadata": {"note": "a\x00b"}})
    assert r.status_code == 200, r.text
    got = client.get(f"{DOCS}/ctl").json()
    assert "A river\x00 flooded the valley\x01 in spring." in got["text"] and got["title"] == "T\x1f"
    assert got["metadata"] == {"note": "a\x00b"}
    assert client.post("/v1/indices/default/_refresh_stats").status_code == 200
    for body in ({"text": text, "size": 3}, {"id": "ctl", "size": 3, "method": "hybrid"}):
        r = client.post(MLT, json=body)
        assert r.status_code == 200, r.text


@pytest.mark.integration
@pytest.mark.parametrize("path_id,message", [
    ("a%0Ab", "U+000A"),
    ("a%0A", "U+000A"),  # before: id "a" (the route's $ matched before the final newline)
    ("%0A", "U+000A"),
    ("a%00b", "U+0000"),
    ("a%ED%A0%80b", "not valid UTF-8 once percent-decoded (%ED"),  # before: stored as 'a\ufffd\ufffd\ufffdb'
    ("a%FFb", "not valid UTF-8 once percent-decoded (%FF)"),
])
def test_path_ids_follow_the_id_rule_and_are_never_read_as_another_id(client, path_id, message):
    before = client.get(f"{DOCS}/s0").json()
    for method, kw in (("PUT", {"json": {"text": "A replacement."}}), ("GET", {}), ("DELETE", {})):
        r = client.request(method, f"{DOCS}/{path_id}", **kw)
        assert "path.doc_id" in _error(r, 422, message)
    assert client.get(f"{DOCS}/s0").json() == before
    assert client.get(f"{DOCS}/a%EF%BF%BD%EF%BF%BD%EF%BF%BDb").status_code == 404  # nothing stored as U+FFFD
    assert client.get(f"{DOCS}/a").status_code == 404
    ok = client.put(f"{DOCS}/%E2%82%AC%20x", json={"text": "A euro sign and a space are fine."})
    assert ok.status_code == 200 and ok.json()["id"] == "\u20ac x"


@pytest.mark.integration
def test_numbers_and_fusion_options_are_strict_over_http(client):
    for body, where in (({"id": "s0", "size": True}, "body.size: must be a number, not a boolean"),
                        ({"id": "s0", "size": "5"}, "body.size: must be a number, not a string"),
                        ({"id": "s0", "from": "1"}, "body.from: must be a number"),
                        ({"id": "s0", "candidates": True}, "body.candidates: must be a number"),
                        ({"id": "s0", "fusion": "zscore", "rank_constant": 5}, "rank_constant applies to fusion 'rrf'"),
                        ({"id": "s0", "method": "hybrid", "rank_constant": 5}, "this search uses fusion 'adaptive'")):
        _error(client.post(MLT, json=body), 422, where)
    assert client.post(MLT, json={"id": "s0", "fusion": "rrf", "rank_constant": 5, "size": 3}).status_code == 200


# =============================================================================================
# the CLI
# =============================================================================================
@pytest.mark.integration
def test_sdr_index_skips_a_record_with_invalid_text_and_writes_the_others(tmp_path, caplog, capsys):
    from sdr_search.cli import main
    from sdr_search.indexer.embedded import EmbeddedStore

    lines = ['{"id": "a", "text": "The river flooded the valley. Farmers lost the harvest."}',
             f'{{"id": "b", "text": "Bad {SURROGATE} text here."}}',
             f'{{"id": "c", "text": "The council built a levee.", "metadata": {{"k": "{SURROGATE}"}}}}',
             '{"id": "d", "text": "A tribunal found the notice late.\\u0000 It was served in May."}']
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="ascii")
    rc = main(["index", "--store", str(tmp_path / "s"), "--no-progress", "--no-cache", str(path)])
    assert rc == 0  # before: a traceback, rc 1, nothing written
    summary = json.loads(capsys.readouterr().out)
    assert (summary["indexed"], summary["skipped"]) == (2, 2)
    assert "in.jsonl:2): text contains a lone surrogate U+D800" in caplog.text
    assert "in.jsonl:3): metadata['k'] contains a lone surrogate" in caplog.text
    assert "Traceback" not in caplog.text
    with EmbeddedStore(tmp_path / "s") as store:
        assert sorted(store.iter_ids()) == ["a", "d"]


@pytest.mark.unit
def test_a_store_whose_live_documents_hold_no_word_answers_bm25_cleanly(tmp_path):
    """Tiny documents ('.', a lone NUL) leave no word to count: the average document length is 0,
    which divided 0 by 0 for the deleted documents' slots (a RuntimeWarning, NaN norms)."""
    import warnings

    from sdr_search.core.documents import parse_record
    from sdr_search.indexer.embedded import EmbeddedStore
    from sdr_search.indexer.pipeline import index_documents

    with EmbeddedStore(tmp_path / "s", create=True) as store:
        index_documents(store, [parse_record({"id": "a", "text": "The river flooded. The levee held."}),
                                parse_record({"id": "b", "text": "."}), parse_record({"id": "c", "text": "\x00"})],
                        FakeEncoder())
        assert store.lexical_search("river levee", 5).ids == ["a"]
        store.delete(["a"])
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            hits = store.lexical_search("river levee", 5, score_ids=["a", "b", "c"])
        assert hits.ids == [] and hits.scored == {"a": 0.0, "b": 0.0, "c": 0.0}
