"""Model-based tests of the document API (issue 32): random sequences of PUT, DELETE, ``_bulk`` with
mixed lines (writes, deletes, repeated ids, bad lines), compact, restart and query, run through the
HTTP service against a plain in-memory model of what the store should hold, on the embedded store
and on a real OpenSearch node. After every step, every id of the (small) id universe is read back
and compared with the model, and every answer's counts are checked against what the model says the
request did.

The encoder is the test stand-in (hashed sentence vectors, :class:`factories.FakeEncoder`): what is
under test is what the store keeps, not the vectors. The SIGKILL fault test is in
``test_document_api_faults.py``.
"""

from __future__ import annotations

import json
import uuid

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from factories import FakeEncoder

pytestmark = pytest.mark.integration

IDS = ["a", "b", "c", "d", "7", "doc/x"]  # few, so that operations collide; "7" is also written as the integer 7
SENTENCES = [
    "The river flooded the northern valley in spring.",
    "Farmers lost their whole harvest to the water.",
    "The council built a new levee along the bank.",
    "An appeal against the tax assessment was dismissed.",
    "The tribunal found that the notice was served late.",
    "Shares of the company were sold below their value.",
    "The witness could not recall the date of the meeting.",
    "A second levee was planned for the following year.",
]

texts = st.lists(st.sampled_from(SENTENCES), min_size=1, max_size=4).flatmap(
    lambda sents: st.sampled_from([" ".join(sents), "\n\n".join(sents)]))
ids = st.sampled_from(IDS)


def _flat(text: str) -> str:
    return " ".join(text.split())


def _line_id(doc_id: str, as_int: bool):
    return int(doc_id) if as_int and doc_id.isdigit() else doc_id


write_lines = st.builds(lambda i, t, n: {"id": _line_id(i, n), "text": t}, ids, texts, st.booleans())
delete_lines = st.builds(lambda i, n: {"delete": _line_id(i, n)}, ids, st.booleans())
bad_lines = st.sampled_from([{"id": "a"}, {"id": " a", "text": "White space at the start of an id."}, {"delete": ""},
                             {"delete": True}, {"id": "e", "text": "   "}])
bulk_bodies = st.lists(st.one_of(write_lines, write_lines, delete_lines, bad_lines), min_size=1, max_size=6)


def expected_bulk(model: dict[str, str], lines: list[dict]) -> tuple[dict[str, str], dict]:
    """What a bulk request of ``lines`` does to ``model`` (applied in line order), and the answer it
    must give: every line's result, the counts of documents and the missing ids."""
    after = dict(model)
    items, last_write, deleted_now = [], {}, set()
    for n, line in enumerate(lines, 1):
        if "delete" in line:
            doc_id = line["delete"]
            if isinstance(doc_id, bool) or not isinstance(doc_id, (str, int)) or str(doc_id) == "":
                items.append((n, None, "failed"))
                continue
            doc_id = str(doc_id)
            items.append((n, doc_id, "deleted" if doc_id in after else "not_found"))
            after.pop(doc_id, None)
            last_write.pop(doc_id, None)
            deleted_now.add(doc_id)
            continue
        text, doc_id = line.get("text"), str(line["id"])
        if text is None or not text.strip() or doc_id != doc_id.strip():
            items.append((n, line["id"] if isinstance(line["id"], str) else None, "failed"))
            continue
        items.append((n, doc_id, "updated" if doc_id in after else "created"))
        after[doc_id] = _flat(text)
        last_write[doc_id] = True
        deleted_now.discard(doc_id)
    answer = {
        "items": items,
        "written": len(last_write),
        "deleted": len(deleted_now & set(model)),
        "missing": [i for _, i, r in items if r == "not_found"],
    }
    return after, answer


class DocumentApiMachine(RuleBasedStateMachine):
    """The service over one store, and the model: ``id -> its text, white space collapsed``."""

    backend = "embedded"

    def __init__(self) -> None:
        super().__init__()
        self.model: dict[str, str] = {}
        self.client = None
        self._client_cm = None
        self.store = None

    # -- the system under test -------------------------------------------------------------------
    def open_store(self):
        raise NotImplementedError

    def _start(self) -> None:
        from fastapi.testclient import TestClient

        from sdr_search.reranker.service import create_app
        from sdr_search.reranker.settings import ServiceSettings

        self.store = self.open_store()
        app = create_app(stores={"default": self.store}, encoder=FakeEncoder(),
                         settings=ServiceSettings(api_key=None, stats_refresh_delay_s=0))
        self._client_cm = TestClient(app)
        self.client = self._client_cm.__enter__()

    def _stop(self) -> None:
        if self._client_cm is not None:
            self._client_cm.__exit__(None, None, None)
            self._client_cm = None
        if self.store is not None:
            self.store.close()
            self.store = None

    @initialize()
    def seed(self) -> None:
        from sdr_search.core.documents import parse_record
        from sdr_search.indexer.pipeline import index_documents

        self.store = self.open_store()
        first = {"a": SENTENCES[0] + " " + SENTENCES[1], "b": SENTENCES[3], "c": SENTENCES[4] + " " + SENTENCES[5]}
        index_documents(self.store, [parse_record({"id": k, "text": v}) for k, v in first.items()], FakeEncoder())
        self.store.close()
        self.model = {k: _flat(v) for k, v in first.items()}
        self._start()

    def teardown(self) -> None:
        self._stop()
        self.drop()

    def drop(self) -> None:
        pass

    # -- operations --------------------------------------------------------------------------------
    @rule(doc_id=ids, text=texts)
    def put(self, doc_id, text):
        r = self.client.put(f"/v1/indices/default/documents/{doc_id}", json={"text": text})
        assert r.status_code == 200, r.text
        assert r.json()["result"] == ("updated" if doc_id in self.model else "created")
        self.model[doc_id] = _flat(text)

    @rule(doc_id=ids)
    def delete(self, doc_id):
        r = self.client.delete(f"/v1/indices/default/documents/{doc_id}")
        assert r.status_code == (200 if doc_id in self.model else 404), r.text
        self.model.pop(doc_id, None)

    @rule(lines=bulk_bodies)
    def bulk(self, lines):
        body = "\n".join(json.dumps(line) for line in lines) + "\n"
        r = self.client.post("/v1/indices/default/_bulk", content=body, headers={"Content-Type": "application/x-ndjson"})
        assert r.status_code == 200, r.text
        after, want = expected_bulk(self.model, lines)
        got = r.json()
        assert [(i["line"], i["id"], i["result"]) for i in got["items"]] == want["items"], (lines, got)
        assert (got["written"], got["deleted"], got["missing"]) == (want["written"], want["deleted"], want["missing"])
        assert [f["line"] for f in got["failed"]] == [n for n, _, res in want["items"] if res == "failed"]
        self.model = after

    @rule()
    def restart(self):
        self._stop()
        self._start()

    @precondition(lambda self: len(self.model) >= 3)
    @rule(doc_id=ids)
    def query(self, doc_id):
        assert self.client.post("/v1/indices/default/_refresh_stats").status_code == 200
        r = self.client.post("/v1/indices/default/more_like_this", json={"id": doc_id, "size": 10, "method": "sdr"})
        if doc_id not in self.model:
            assert r.status_code == 404, r.text
            return
        assert r.status_code == 200, r.text
        got = [h["id"] for h in r.json()["hits"]]
        assert doc_id not in got and set(got) <= set(self.model), (got, sorted(self.model))

    # -- what must hold after every step ---------------------------------------------------------
    @invariant()
    def store_holds_the_model(self):
        if self.client is None:
            return
        for doc_id in IDS:
            r = self.client.get(f"/v1/indices/default/documents/{doc_id}")
            if doc_id in self.model:
                assert r.status_code == 200, (doc_id, r.text)
                text = " ".join(s for p in r.json()["paragraphs"] for s in p)
                assert _flat(text) == self.model[doc_id], doc_id
            else:
                assert r.status_code == 404, (doc_id, r.text)
        assert self.store.counts()["documents"] == len(self.model)


class EmbeddedMachine(DocumentApiMachine):
    def __init__(self) -> None:
        super().__init__()
        import tempfile

        self._dir = tempfile.TemporaryDirectory(prefix="sdr-model-")

    def open_store(self):
        from pathlib import Path

        from sdr_search.indexer.embedded import EmbeddedStore

        return EmbeddedStore(Path(self._dir.name) / "store", create=True)

    @rule()
    def compact(self):
        self.store.compact()

    def drop(self) -> None:
        self._dir.cleanup()


EMBEDDED_RUNS = settings(max_examples=25, stateful_step_count=20, deadline=None,
                         suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


def test_document_api_against_a_model_on_the_embedded_store():
    EmbeddedMachine.TestCase.settings = EMBEDDED_RUNS
    EmbeddedMachine.TestCase().runTest()


def test_document_api_against_a_model_on_opensearch(opensearch_url):
    from sdr_search.indexer.opensearch import OpenSearchSettings, OpenSearchStore

    class OpenSearchMachine(DocumentApiMachine):
        def __init__(self) -> None:
            super().__init__()
            self.index = f"sdr-model-{uuid.uuid4().hex[:10]}"

        def open_store(self):
            return OpenSearchStore(opensearch_url, index=self.index, settings=OpenSearchSettings(replicas=0))

        def drop(self) -> None:
            with self.open_store() as store:
                store.drop()

    OpenSearchMachine.TestCase.settings = settings(
        max_examples=6, stateful_step_count=14, deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
    OpenSearchMachine.TestCase().runTest()
