"""Dashboards saved objects (mappings/dashboards.ndjson) and the import request (sdr_search.indexer.dashboards).

No OpenSearch Dashboards is involved (it cannot run here): the request tests post to a tiny local
``http.server`` that records what it receives and answers the way the saved-objects import API is
documented to answer. They check OUR request (method, path, query, headers, multipart body), not
Dashboards' behaviour.

The ``integration`` tests at the end put a store on a real OpenSearch node (two reindex generations
behind an alias, and a concrete index) and send the queries Dashboards sends for the index pattern's
title: the count and the "documents by model" terms aggregation must see the documents of the store
and nothing else (the old title ``sdr-*`` also counted old generations and state indices).
"""

from __future__ import annotations

import email.parser
import email.policy
import json
import socket
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from sdr_search.indexer.dashboards import (
    DEFAULT_INDEX,
    DEFAULT_NDJSON,
    IMPORT_PATH,
    build_import_request,
    check_pattern_title,
    encode_multipart,
    import_saved_objects,
    read_saved_objects,
    render_saved_objects,
    saved_objects_for_index,
    set_index_pattern_title,
)
from sdr_search.cli.dashboards import cmd_dashboards_import
from sdr_search.core.errors import (
    BackendUnavailableError,
    DashboardsImportError,
    InputReadError,
    InvalidInputError,
    SDRError,
)

ROOT = Path(__file__).resolve().parents[2]
NDJSON = ROOT / "mappings" / "dashboards.ndjson"
INDEX_MAPPING = ROOT / "mappings" / "index.json"

# The latest migration of each type in OpenSearch Dashboards 2.x (objects at these versions are
# imported as they are, without running migrations on them).
MIGRATION_VERSIONS = {"index-pattern": "7.6.0", "search": "7.9.3", "visualization": "7.10.0"}
FIGURES = ["doc_id", "title", "n_paragraphs", "n_sentences", "model_id", "indexed_at"]
SEARCH_COLUMNS = ["doc_id", "title", "n_paragraphs", "n_sentences", "model_id"]
# Index-pattern field type -> OpenSearch mapping types it stands for.
COMPATIBLE_TYPES = {
    "string": {"keyword", "text", "constant_keyword", "wildcard", "match_only_text"},
    "number": {"integer", "long", "short", "byte", "float", "double", "half_float", "scaled_float", "unsigned_long"},
    "date": {"date", "date_nanos"},
    "boolean": {"boolean"},
}


# ----------------------------------------------------------------------------------- the ndjson file


@pytest.fixture(scope="module")
def objects() -> list[dict]:
    return [json.loads(line) for line in NDJSON.read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.fixture(scope="module")
def by_type(objects) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for o in objects:
        out.setdefault(o["type"], []).append(o)
    return out


@pytest.fixture(scope="module")
def index_pattern(by_type) -> dict:
    (ip,) = by_type["index-pattern"]
    return ip


@pytest.fixture(scope="module")
def pattern_fields(index_pattern) -> dict[str, dict]:
    return {f["name"]: f for f in json.loads(index_pattern["attributes"]["fields"])}


@pytest.mark.unit
def test_every_line_is_one_json_object(objects):
    lines = NDJSON.read_text(encoding="utf-8").splitlines()
    assert lines and all(line.strip() for line in lines), "no blank lines in the file"
    for i, line in enumerate(lines, 1):
        obj = json.loads(line)
        assert isinstance(obj, dict), f"line {i}"
        assert "\n" not in line
    assert read_saved_objects(NDJSON.read_bytes()) == objects


@pytest.mark.unit
def test_objects_have_the_saved_object_keys(objects):
    ids = [(o["type"], o["id"]) for o in objects]
    assert len(ids) == len(set(ids)), "duplicate type/id"
    for o in objects:
        assert {"type", "id", "attributes", "references", "migrationVersion"} <= o.keys(), o.get("id")
        assert o["type"] in MIGRATION_VERSIONS
        assert o["migrationVersion"] == {o["type"]: MIGRATION_VERSIONS[o["type"]]}
        assert isinstance(o["attributes"].get("title"), str) and o["attributes"]["title"]
        assert isinstance(o["references"], list)
        for ref in o["references"]:
            assert set(ref) == {"name", "type", "id"}


@pytest.mark.unit
def test_one_of_each_kind(by_type):
    assert len(by_type["index-pattern"]) == 1
    assert len(by_type["search"]) == 1
    assert len(by_type["visualization"]) >= 1


@pytest.mark.unit
def test_index_pattern_is_the_default_index_with_the_document_figures(index_pattern, pattern_fields):
    attrs = index_pattern["attributes"]
    assert attrs["title"] == DEFAULT_INDEX == "sdr"  # the store's default index name, not a wildcard
    assert attrs["timeFieldName"] == "indexed_at"
    assert pattern_fields["indexed_at"]["type"] == "date"
    for name in FIGURES:
        assert name in pattern_fields, name
    for name in ("n_paragraphs", "n_sentences"):
        assert pattern_fields[name]["type"] == "number" and pattern_fields[name]["aggregatable"]
    for name in ("doc_id", "model_id"):
        assert pattern_fields[name]["type"] == "string" and pattern_fields[name]["aggregatable"]
    for f in pattern_fields.values():
        assert {"name", "type", "searchable", "aggregatable"} <= f.keys()
    json.loads(attrs["fieldFormatMap"])


@pytest.mark.unit
def test_saved_search_lists_the_figures(by_type, pattern_fields):
    (search,) = by_type["search"]
    attrs = search["attributes"]
    assert attrs["columns"] == SEARCH_COLUMNS
    for field, direction in attrs["sort"]:
        assert field in pattern_fields and direction in ("asc", "desc")
    assert set(attrs["columns"]) <= pattern_fields.keys()
    source = json.loads(attrs["kibanaSavedObjectMeta"]["searchSourceJSON"])
    assert source["query"] == {"query": "", "language": "kuery"}


@pytest.mark.unit
def test_visualizations_aggregate_existing_aggregatable_fields(by_type, pattern_fields):
    fields_used = set()
    for vis in by_type["visualization"]:
        attrs = vis["attributes"]
        state = json.loads(attrs["visState"])
        json.loads(attrs["uiStateJSON"])
        assert state["title"] == attrs["title"]
        assert state["aggs"], vis["id"]
        assert [a for a in state["aggs"] if a["schema"] == "metric"], vis["id"]
        for agg in state["aggs"]:
            field = agg.get("params", {}).get("field")
            if field is not None:
                assert field in pattern_fields, (vis["id"], field)
                assert pattern_fields[field]["aggregatable"], (vis["id"], field)
                fields_used.add(field)
    assert "n_sentences" in fields_used


@pytest.mark.unit
def test_references_resolve_to_objects_in_the_file(objects):
    present = {(o["type"], o["id"]) for o in objects}
    for o in objects:
        names = {r["name"] for r in o["references"]}
        for ref in o["references"]:
            assert (ref["type"], ref["id"]) in present, (o["id"], ref)
        meta = o["attributes"].get("kibanaSavedObjectMeta")
        if meta:
            source = json.loads(meta["searchSourceJSON"])
            # The index is named through a reference, never by id inside the JSON.
            assert "index" not in source
            if o["type"] in ("search", "visualization"):
                assert source["indexRefName"] in names, o["id"]


def _mapping_properties(doc: dict) -> dict:
    """``properties`` of an index body, a template (``template.mappings``) or bare mappings."""
    for path in (("mappings", "properties"), ("template", "mappings", "properties"), ("properties",)):
        node = doc
        for key in path:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, dict):
            return node
    raise AssertionError(f"{INDEX_MAPPING} has no mappings.properties")


def _mismatches(pattern_fields: dict[str, dict], mapping_doc: dict) -> list[str]:
    """Index-pattern fields missing from the index mapping or mapped with another type."""
    properties = _mapping_properties(mapping_doc)
    problems = []
    for name, field in pattern_fields.items():
        if name.startswith("_"):
            continue  # metadata fields (_id, _index, _source, _score) are not in mappings
        if name not in properties:
            problems.append(f"{name}: not a top-level field of the mapping")
            continue
        mapped = properties[name].get("type", "object")
        if mapped not in COMPATIBLE_TYPES.get(field["type"], ()) or mapped not in field.get("esTypes", [mapped]):
            problems.append(f"{name}: index pattern says {field['type']} {field.get('esTypes')}, the mapping says {mapped}")
    return problems


@pytest.mark.unit
def test_index_pattern_fields_exist_in_the_index_mapping(pattern_fields):
    assert _mismatches(pattern_fields, json.loads(INDEX_MAPPING.read_text(encoding="utf-8"))) == []


@pytest.mark.unit
def test_mapping_check_itself_on_a_synthetic_mapping(pattern_fields):
    """The check above, exercised on made-up mappings, so that it is known to find a mismatch."""
    props = {
        "doc_id": {"type": "keyword"}, "title": {"type": "text"}, "n_paragraphs": {"type": "integer"},
        "n_sentences": {"type": "integer"}, "model_id": {"type": "keyword"}, "stats_version": {"type": "integer"},
        "indexed_at": {"type": "date"},
        "sentences": {"type": "nested", "properties": {"vector": {"type": "knn_vector", "dimension": 384}}},
    }
    for doc in ({"mappings": {"properties": props}}, {"template": {"mappings": {"properties": props}}}, {"properties": props}):
        assert _mismatches(pattern_fields, doc) == []
    missing = {k: v for k, v in props.items() if k != "n_sentences"}
    assert _mismatches(pattern_fields, {"mappings": {"properties": missing}}) == ["n_sentences: not a top-level field of the mapping"]
    retyped = {**props, "indexed_at": {"type": "keyword"}}
    assert [p.split(":")[0] for p in _mismatches(pattern_fields, {"mappings": {"properties": retyped}})] == ["indexed_at"]


# ------------------------------------------------------------------------------ the request, pure


def _parse_multipart(content_type: str, body: bytes):
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        f"Content-Type: {content_type}\r\n\r\n".encode("ascii") + body
    )
    assert message.is_multipart()
    assert not message.defects, message.defects
    return list(message.iter_parts())


@pytest.mark.unit
def test_build_import_request_path_query_and_headers():
    req = build_import_request(b'{"type":"search","id":"x"}\n')
    assert req.path == IMPORT_PATH == "/api/saved_objects/_import"
    assert req.params == {"overwrite": "true"}
    assert req.headers["osd-xsrf"] == "true"
    assert req.headers["Content-Type"].startswith("multipart/form-data; boundary=")
    assert req.url("http://localhost:5601/") == "http://localhost:5601/api/saved_objects/_import?overwrite=true"
    path, params, headers, parts = req  # a 4-tuple
    assert (path, params, headers, parts) == (req.path, req.params, req.headers, req.parts)
    plain = build_import_request(b"{}", overwrite=False)
    assert plain.params == {}
    assert plain.url("http://h:5601") == "http://h:5601/api/saved_objects/_import"


@pytest.mark.unit
def test_multipart_body_parses_back_with_the_email_parser():
    data = NDJSON.read_bytes()
    req = build_import_request(data)
    (part,) = _parse_multipart(req.headers["Content-Type"], req.body())
    assert part.get_content_disposition() == "form-data"
    assert part.get_param("name", header="content-disposition") == "file"
    assert part.get_filename() == "dashboards.ndjson"
    assert part.get_content_type() == "application/ndjson"
    assert part.get_payload(decode=True) == data


@pytest.mark.unit
def test_multipart_body_keeps_bytes_exactly():
    data = "{\"title\":\"Zürich \\\\ \\\"q\\\"\"}\r\n{\"a\":1}\n\n".encode("utf-8")
    body = encode_multipart(build_import_request(data, boundary="XyZ").parts, boundary="XyZ")
    assert body == (
        b"--XyZ\r\n"
        b'Content-Disposition: form-data; name="file"; filename="dashboards.ndjson"\r\n'
        b"Content-Type: application/ndjson\r\n"
        b"\r\n" + data + b"\r\n"
        b"--XyZ--\r\n"
    )
    (part,) = _parse_multipart("multipart/form-data; boundary=XyZ", body)
    assert part.get_payload(decode=True) == data


@pytest.mark.unit
def test_boundary_never_occurs_in_the_file():
    with pytest.raises(ValueError):
        build_import_request(b"abc--XyZ--def", boundary="XyZ")
    a, b = build_import_request(b"x"), build_import_request(b"x")
    assert a.boundary != b.boundary


@pytest.mark.unit
def test_read_saved_objects_names_the_bad_line():
    with pytest.raises(InvalidInputError, match=r"f\.ndjson:2: invalid JSON"):
        read_saved_objects(b'{"type":"search","id":"a"}\n{oops\n', source="f.ndjson")
    with pytest.raises(InvalidInputError, match=r":1: .*'type' and 'id'"):
        read_saved_objects(b'{"id":"a"}\n')
    with pytest.raises(InvalidInputError, match="no saved object"):
        read_saved_objects(b"\n\n")
    # lines json.loads refuses with ValueError or RecursionError, not JSONDecodeError: named too
    with pytest.raises(InvalidInputError, match=r"f\.ndjson:2: invalid JSON \(Exceeds the limit"):
        read_saved_objects(b'{"type":"search","id":"a"}\n{"n":' + b"1" * 5000 + b"}\n", source="f.ndjson")
    with pytest.raises(InvalidInputError, match=r"f\.ndjson:1: invalid JSON \(maximum recursion"):
        read_saved_objects(b"[" * 100_000 + b"\n", source="f.ndjson")


# ------------------------------------------------ request tests against a recording local server


class _Recorder(BaseHTTPRequestHandler):
    """Records each request and answers with ``server.answer`` = (status, JSON body)."""

    def do_POST(self):  # noqa: N802 (http.server naming)
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length)
        self.server.requests.append(
            SimpleNamespace(method=self.command, target=self.path, headers=self.headers, body=body)
        )
        if self.server.stall:  # answer only after the client has given up (or 5 s)
            self.server.hold.wait(5)
        status, payload = self.server.answer
        raw = json.dumps(payload).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args):  # keep test output quiet
        pass


@pytest.fixture()
def dashboards_stub():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    server.requests = []
    server.answer = (200, {"success": True, "successCount": 4})
    server.stall = False
    server.hold = threading.Event()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    server.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield server
    finally:
        server.hold.set()
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.mark.unit
def test_request_import_posts_multipart_file_with_xsrf_header(dashboards_stub):
    answer = import_saved_objects(dashboards_stub.url + "/", NDJSON, timeout=5)
    assert answer == {"success": True, "successCount": 4}
    (req,) = dashboards_stub.requests
    assert req.method == "POST"
    target = urllib.parse.urlsplit(req.target)
    assert target.path == "/api/saved_objects/_import"
    assert urllib.parse.parse_qs(target.query) == {"overwrite": ["true"]}
    assert req.headers["osd-xsrf"] == "true"
    assert req.headers.get_content_type() == "multipart/form-data"
    assert int(req.headers["Content-Length"]) == len(req.body)
    (part,) = _parse_multipart(req.headers["Content-Type"], req.body)
    assert part.get_param("name", header="content-disposition") == "file"
    assert part.get_filename() == "dashboards.ndjson"
    assert part.get_payload(decode=True) == NDJSON.read_bytes()


@pytest.mark.unit
def test_request_without_overwrite_has_no_query(dashboards_stub):
    import_saved_objects(dashboards_stub.url, NDJSON, overwrite=False, timeout=5)
    (req,) = dashboards_stub.requests
    assert req.target == "/api/saved_objects/_import"


@pytest.mark.unit
def test_request_success_false_raises_with_the_object_errors(dashboards_stub):
    dashboards_stub.answer = (200, {
        "success": False,
        "successCount": 3,
        "errors": [{
            "id": "sdr-sentences-histogram", "type": "visualization", "title": "SDR: sentences per document",
            "error": {"type": "missing_references", "references": [{"type": "index-pattern", "id": "sdr-documents"}]},
        }],
    })
    with pytest.raises(DashboardsImportError) as info:
        import_saved_objects(dashboards_stub.url, NDJSON, timeout=5)
    message = str(info.value)
    assert "visualization/sdr-sentences-histogram" in message
    assert "missing_references" in message and "index-pattern/sdr-documents" in message
    assert info.value.errors and info.value.errors[0]["id"] == "sdr-sentences-histogram"


@pytest.mark.unit
def test_request_http_error_carries_the_server_message(dashboards_stub):
    dashboards_stub.answer = (400, {"statusCode": 400, "error": "Bad Request", "message": "Invalid file extension .json"})
    with pytest.raises(DashboardsImportError, match="HTTP 400.*Bad Request: Invalid file extension .json") as info:
        import_saved_objects(dashboards_stub.url, NDJSON, timeout=5)
    assert info.value.status == 400


@pytest.mark.unit
def test_request_503_means_dashboards_unavailable(dashboards_stub):
    dashboards_stub.answer = (503, {"statusCode": 503, "error": "Service Unavailable",
                                    "message": "OpenSearch Dashboards server is not ready yet"})
    with pytest.raises(BackendUnavailableError, match="not ready yet"):
        import_saved_objects(dashboards_stub.url, NDJSON, timeout=5)


@pytest.mark.unit
def test_request_timeout_is_backend_unavailable(dashboards_stub):
    dashboards_stub.stall = True
    with pytest.raises(BackendUnavailableError, match="cannot reach"):
        import_saved_objects(dashboards_stub.url, NDJSON, timeout=0.3)


@pytest.mark.unit
def test_connection_refused_is_backend_unavailable():
    with socket.socket() as s:  # a port nobody listens on: bound, then released
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(BackendUnavailableError, match=rf"127\.0\.0\.1:{port}"):
        import_saved_objects(f"http://127.0.0.1:{port}", NDJSON, timeout=2)


@pytest.mark.unit
def test_bad_url_and_missing_file_are_user_errors(tmp_path):
    with pytest.raises(InvalidInputError):
        import_saved_objects("localhost:5601", NDJSON)
    with pytest.raises(InputReadError):
        import_saved_objects("http://127.0.0.1:9", tmp_path / "missing.ndjson")
    bad = tmp_path / "bad.ndjson"
    bad.write_text("not json\n")
    with pytest.raises(InvalidInputError, match="bad.ndjson:1"):
        import_saved_objects("http://127.0.0.1:9", bad)
    assert issubclass(DashboardsImportError, SDRError)


@pytest.mark.unit
def test_request_cmd_prints_a_json_summary(dashboards_stub, capsys, monkeypatch):
    monkeypatch.delenv("SDR_OPENSEARCH_INDEX", raising=False)
    args = SimpleNamespace(url=dashboards_stub.url, file=None)
    assert cmd_dashboards_import(args) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary == {"url": dashboards_stub.url, "index": "sdr", "file": str(DEFAULT_NDJSON), "overwrite": True,
                       "success": True, "successCount": 4, "errors": []}
    assert len(dashboards_stub.requests) == 1
    assert _sent_pattern_titles(dashboards_stub.requests[0]) == ["sdr"]


def _sent_pattern_titles(req) -> list[str]:
    (part,) = _parse_multipart(req.headers["Content-Type"], req.body)
    sent = read_saved_objects(part.get_payload(decode=True))
    return [o["attributes"]["title"] for o in sent if o["type"] == "index-pattern"]


@pytest.mark.unit
def test_request_cmd_index_from_the_flag_else_the_environment(dashboards_stub, capsys, monkeypatch):
    monkeypatch.setenv("SDR_OPENSEARCH_INDEX", "corpus-live")
    assert cmd_dashboards_import(SimpleNamespace(url=dashboards_stub.url, file=None, index=None)) == 0
    assert json.loads(capsys.readouterr().out)["index"] == "corpus-live"
    assert cmd_dashboards_import(SimpleNamespace(url=dashboards_stub.url, file=None, index="sdr-demo")) == 0
    assert json.loads(capsys.readouterr().out)["index"] == "sdr-demo"
    assert [_sent_pattern_titles(r) for r in dashboards_stub.requests] == [["corpus-live"], ["sdr-demo"]]


@pytest.mark.unit
def test_request_with_a_wildcard_index_is_refused_before_sending(dashboards_stub):
    with pytest.raises(InvalidInputError, match="wildcard"):
        import_saved_objects(dashboards_stub.url, NDJSON, index="sdr-*", timeout=5)
    assert dashboards_stub.requests == []


@pytest.mark.unit
def test_cli_parses_dashboards_import_with_index():
    from sdr_search.cli import build_parser

    args = build_parser().parse_args(["dashboards", "import", "--url", "http://h:5601", "--index", "sdr-demo"])
    assert (args.url, args.index, args.file, args.no_overwrite, args.timeout) == ("http://h:5601", "sdr-demo", None, False, 30)
    assert build_parser().parse_args(["dashboards", "import", "--url", "http://h:5601"]).index is None


# ------------------------------------------------------ the index pattern title, pure


@pytest.mark.unit
def test_shipped_file_is_what_import_sends_for_the_default_index():
    """The file in mappings/ and the body of a default import are the same bytes (kept in sync)."""
    data = NDJSON.read_bytes()
    assert saved_objects_for_index(data) == data
    assert saved_objects_for_index(data, DEFAULT_INDEX) == data
    assert render_saved_objects(read_saved_objects(data)) == data


@pytest.mark.unit
def test_set_index_pattern_title_changes_only_the_pattern_title(objects):
    out = set_index_pattern_title(objects, "corpus-2")
    assert [(o["type"], o["id"]) for o in out] == [(o["type"], o["id"]) for o in objects]
    for before, after in zip(objects, out):
        if before["type"] == "index-pattern":
            assert after["attributes"]["title"] == "corpus-2"
            assert {**after["attributes"], "title": before["attributes"]["title"]} == before["attributes"]
            assert {k: v for k, v in after.items() if k != "attributes"} == {k: v for k, v in before.items() if k != "attributes"}
        else:
            assert after == before  # the search and visualizations follow the pattern through its id
    assert [o["attributes"]["title"] for o in objects if o["type"] == "index-pattern"] == ["sdr"]  # input untouched
    again = read_saved_objects(saved_objects_for_index(NDJSON.read_bytes(), "corpus-2"))
    assert again == out


@pytest.mark.unit
@pytest.mark.parametrize("name", ["sdr", "sdr-demo", "corpus.v2", "sdr-20240101-000000", "ünïcode-idx"])
def test_pattern_title_accepts_one_index_or_alias_name(name):
    assert check_pattern_title(name) == name


@pytest.mark.unit
@pytest.mark.parametrize("name, why", [
    ("sdr-*", "wildcard"), ("sdr*", "wildcard"), ("*", "wildcard"), ("sdr?", "wildcard"),
    ("sdr,other", "wildcard"), ("remote:sdr", "without"), ("sdr demo", "without"), ("a/b", "without"),
    ("", "empty"), ("-sdr", "not a valid"), ("_all", "not a valid"), ("+sdr", "not a valid"), ("..", "not a valid"),
    ("sdr-sdr-state", "state index"), ("sdr-20240101-000000-sdr-state", "state index"),
])
def test_pattern_title_refuses_patterns_and_state_indices(name, why):
    with pytest.raises(InvalidInputError, match=why):
        check_pattern_title(name)
    with pytest.raises(InvalidInputError):
        saved_objects_for_index(NDJSON.read_bytes(), name)


@pytest.mark.unit
def test_pattern_without_attributes_is_an_input_error():
    with pytest.raises(InvalidInputError, match="index-pattern/p"):
        saved_objects_for_index(b'{"type":"index-pattern","id":"p"}\n', "sdr")


# --------------------------------------- what the index pattern matches on a real OpenSearch node

OLD_TITLE = "sdr-*"  # the title shipped before: "<default index>-*"
DIM = 8


def _put(url: str, index: str, model_id: str, n_docs: int, seed: int) -> None:
    """A store ``index`` with ``n_docs`` documents of ``model_id`` (random unit vectors)."""
    from sdr_search.indexer.opensearch import OpenSearchSettings, OpenSearchStore
    from sdr_search.indexer.store import IndexMeta
    from sdr_search.core.documents import parse_record
    from sdr_search.core.settings import SegmentationSettings
    from sdr_search.core.vectors import DocVectors

    rng = np.random.default_rng(seed)
    items = []
    for i in range(n_docs):
        doc = parse_record({"id": f"{model_id}-{i}", "title": f"Doc {i}", "paragraphs": ["One. Two.", "Three."]},
                           settings=SegmentationSettings.from_recorded({}))
        sizes = [len(p) for p in doc.paragraphs]
        x = rng.standard_normal((sum(sizes), DIM)).astype(np.float32)
        items.append((doc, DocVectors(x / np.linalg.norm(x, axis=1, keepdims=True), np.concatenate([[0], np.cumsum(sizes)]))))
    with OpenSearchStore(url, index=index, settings=OpenSearchSettings(replicas=0)) as store:
        store.ensure_meta(IndexMeta(model_id, f"tag-{model_id}", DIM, {"paragraph_unit": "paragraph"}, {}))
        store.put(items)


def _title_imported_for(index: str) -> str:
    (pattern,) = [o for o in read_saved_objects(saved_objects_for_index(NDJSON.read_bytes(), index))
                  if o["type"] == "index-pattern"]
    return pattern["attributes"]["title"]


def _documents_by_model_body(objects: list[dict]) -> dict:
    """The search Dashboards sends for the "documents by model" table: its count metric and its
    terms bucket (field, size, order, the "Missing" bucket as ``missing: "__missing__"``)."""
    (vis,) = [o for o in objects if o["id"] == "sdr-documents-by-model"]
    state = json.loads(vis["attributes"]["visState"])
    (terms,) = [a for a in state["aggs"] if a["type"] == "terms"]
    p = terms["params"]
    agg = {"field": p["field"], "size": p["size"], "order": {"_count": p["order"]}}
    if p.get("missingBucket"):
        agg["missing"] = "__missing__"
    return {"size": 0, "track_total_hits": True, "aggs": {"2": {"terms": agg}}}


def _what_the_pattern_shows(client, title: str, objects: list[dict]) -> tuple[int, dict[str, int], set[str]]:
    """(document count, documents per model_id, indices of the hits) for an index pattern ``title``."""
    count = client.count(index=title)["count"]
    answer = client.search(index=title, body=_documents_by_model_body(objects))
    by_model = {b["key"]: b["doc_count"] for b in answer["aggregations"]["2"]["buckets"]}
    assert answer["hits"]["total"]["value"] == count
    hits = client.search(index=title, body={"size": 100, "_source": False})["hits"]["hits"]
    return count, by_model, {h["_index"] for h in hits}


@pytest.fixture()
def os_client(opensearch_url):
    from opensearchpy import OpenSearch

    client = OpenSearch([opensearch_url], timeout=60)
    yield client
    client.close()


@pytest.mark.integration
def test_on_a_node_after_two_reindexes_only_the_live_generation_counts(opensearch_url, os_index, os_client):
    """`sdr reindex` twice (model-a, then model-b) behind an alias: the pattern the import writes
    for the alias sees the current generation only; the old title's shape sees everything."""
    from sdr_search.indexer.opensearch import OpenSearchSettings
    from sdr_search.indexer.opensearch.requests import state_index_name
    from sdr_search.workers.swap import swap_opensearch_alias, timestamped_name

    alias = os_index("sdr-dash")
    settings = OpenSearchSettings(replicas=0)
    old = timestamped_name(alias, datetime(2024, 1, 1, tzinfo=timezone.utc))
    new = timestamped_name(alias, datetime(2024, 2, 1, tzinfo=timezone.utc))
    _put(opensearch_url, old, "model-a", 5, seed=1)
    assert swap_opensearch_alias(opensearch_url, alias, old, settings) is None
    _put(opensearch_url, new, "model-b", 3, seed=2)
    assert swap_opensearch_alias(opensearch_url, alias, new, settings) == old
    os_client.indices.refresh(index=f"{alias}*")
    state_docs = os_client.count(index=f"{state_index_name(old)},{state_index_name(new)}")["count"]
    assert state_docs > 0  # the state indices hold documents that must not be counted

    objects = read_saved_objects(saved_objects_for_index(NDJSON.read_bytes(), alias))
    title = _title_imported_for(alias)
    assert _what_the_pattern_shows(os_client, title, objects) == (3, {"model-b": 3}, {new})
    assert title == alias

    # The defect, on the same node: the old title shape counts both generations and the state
    # documents (8 + state), shows a false "mixed models" row and a "Missing" row.
    count, by_model, indices = _what_the_pattern_shows(os_client, OLD_TITLE.replace(DEFAULT_INDEX, alias, 1), objects)
    assert count == 5 + 3 + state_docs
    assert by_model == {"model-a": 5, "model-b": 3, "__missing__": state_docs}
    assert indices == {old, new, state_index_name(old), state_index_name(new)}


@pytest.mark.integration
def test_on_a_node_a_concrete_index_is_matched_and_its_state_index_is_not(opensearch_url, os_index, os_client):
    """`sdr index --index NAME` makes a concrete index NAME (like the default `sdr`): the imported
    pattern NAME shows its documents; the old shape NAME-* missed them and matched the state index."""
    from sdr_search.indexer.opensearch.requests import state_index_name

    name = os_index("sdr-dash")
    _put(opensearch_url, name, "model-a", 4, seed=3)
    os_client.indices.refresh(index=f"{name}*")
    objects = read_saved_objects(saved_objects_for_index(NDJSON.read_bytes(), name))
    assert _what_the_pattern_shows(os_client, _title_imported_for(name), objects) == (4, {"model-a": 4}, {name})

    count, by_model, indices = _what_the_pattern_shows(os_client, OLD_TITLE.replace(DEFAULT_INDEX, name, 1), objects)
    assert indices == {state_index_name(name)} and "model-a" not in by_model
