"""Model-based tests of the document API (issue 32): random sequences of PUT, DELETE, ``_bulk`` with
mixed lines (writes, deletes, repeated ids, bad lines), compact, restart and query, run through the
HTTP service against a plain in-memory model of what the store should hold, on the embedded store
and on a real OpenSearch node. After every step, every id of the (small) id universe is read back
and compared with the model, and every answer's counts are checked against what the model says the
request did.

The texts written are not only well-formed prose (issue 41): control characters inside words (kept,
or white space to the splitter), lone surrogates (refused: 422, a failed ``_bulk`` line), tiny
documents (one character, a lone NUL, a period) and documents at the document limits and one past
them (sentences, bytes, possible sentence ends; small limits set for the run so that it stays
fast: 413, a failed line). Each text carries the answer it must get, by construction.

While the machine writes, a thread sends queries (new text, by id, hostile text): every one answers
200 or the documented 4xx, never a 5xx; a by-id query of a document absent throughout the query is a
404 and of one present throughout it a 200 (either, for an id a step named while it ran).

The encoder is the test stand-in (hashed sentence vectors, :class:`factories.FakeEncoder`): what is
under test is what the store keeps, not the vectors. The SIGKILL fault test is in
``test_document_api_faults.py``.
"""

from __future__ import annotations

import json
import random
import threading
import uuid
from collections import Counter

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

# Small document limits for the run (SDR_MAX_SENTENCES, SDR_MAX_DOCUMENT_BYTES): the texts at and
# past them stay a few hundred bytes. The splitter refuses more than 4 x LIMIT_SENTENCES possible ends.
LIMIT_SENTENCES = 12
LIMIT_BYTES = 1000
LIMITS = {"SDR_MAX_SENTENCES": str(LIMIT_SENTENCES), "SDR_MAX_DOCUMENT_BYTES": str(LIMIT_BYTES)}

OK, TOO_LARGE, INVALID = 200, 413, 422
CONTROL = ["\x00", "\x01", "\x08", "\x0b", "\x0c", "\x1b", "\x1f", "\x7f", "\x85", "\t"]  # some are white space
SURROGATES = ["\ud800", "\udbff", "\udc00", "\udfff"]


def _inside_a_word(text: str, char: str, k: int) -> str:
    """``text`` with ``char`` between two letters (never at a sentence boundary)."""
    places = [i for i in range(1, len(text)) if text[i - 1].isalpha() and text[i].isalpha()]
    at = places[k % len(places)]
    return text[:at] + char + text[at:]


def _sentences(k: int, sep: str) -> str:
    return sep.join(SENTENCES[i % len(SENTENCES)] for i in range(k))


def _of_bytes(n: int) -> str:
    """One paragraph of exactly ``n`` UTF-8 bytes and two sentences."""
    head = SENTENCES[0] + " "
    return head + "a" * (n - len(head) - 1) + "."


prose = st.lists(st.sampled_from(SENTENCES), min_size=1, max_size=4).flatmap(
    lambda sents: st.sampled_from([" ".join(sents), "\n\n".join(sents)]))
ordinary = prose.map(lambda t: (t, OK))
with_control = st.builds(lambda t, c, k: (_inside_a_word(t, c, k), OK), prose, st.sampled_from(CONTROL),
                         st.integers(0, 999))
with_surrogate = st.builds(lambda t, c, k: (_inside_a_word(t, c, k), INVALID), prose, st.sampled_from(SURROGATES),
                           st.integers(0, 999))
tiny = st.sampled_from([("x", OK), ("A.", OK), (".", OK), ("\x00", OK), (" \t ", INVALID)])
at_the_limits = st.one_of(
    st.builds(lambda k, sep: (_sentences(k, sep), OK if k <= LIMIT_SENTENCES else TOO_LARGE),
              st.sampled_from([LIMIT_SENTENCES, LIMIT_SENTENCES + 1]), st.sampled_from([" ", "\n\n"])),
    st.sampled_from([LIMIT_BYTES, LIMIT_BYTES + 1]).map(lambda n: (_of_bytes(n), OK if n <= LIMIT_BYTES else TOO_LARGE)),
    # "Ab. " * m has m - 1 possible sentence ends: refused before splitting past 4 x the sentence limit
    st.sampled_from([4 * LIMIT_SENTENCES + 1, 4 * LIMIT_SENTENCES + 2]).map(
        lambda m: ("Ab. " * m, OK if m - 1 <= 4 * LIMIT_SENTENCES else TOO_LARGE)),
)
texts = st.one_of(ordinary, ordinary, ordinary, with_control, with_surrogate, tiny, at_the_limits)
ids = st.sampled_from(IDS)


def _flat(text: str) -> str:
    return " ".join(text.split())


def _line_id(doc_id: str, as_int: bool):
    return int(doc_id) if as_int and doc_id.isdigit() else doc_id


def _body(value) -> bytes:
    """JSON as sent by a client that escapes what it cannot encode (a lone surrogate as ``\\ud800``)."""
    return json.dumps(value).encode("ascii")


JSON = {"Content-Type": "application/json"}

# a bulk line is (the line, the answer its text must get)
write_lines = st.builds(lambda i, t, n: ({"id": _line_id(i, n), "text": t[0]}, t[1]), ids, texts, st.booleans())
delete_lines = st.builds(lambda i, n: ({"delete": _line_id(i, n)}, OK), ids, st.booleans())
bad_lines = st.sampled_from([{"id": "a"}, {"id": " a", "text": "White space at the start of an id."}, {"delete": ""},
                             {"delete": True}, {"id": "e", "text": "   "}, {"id": "e\ud800", "text": "An id."},
                             {"delete": "\udfff"}]).map(lambda line: (line, INVALID))
bulk_bodies = st.lists(st.one_of(write_lines, write_lines, delete_lines, bad_lines), min_size=1, max_size=6)


def expected_bulk(model: dict[str, str], lines: list[tuple[dict, int]]) -> tuple[dict[str, str], dict]:
    """What a bulk request of ``lines`` does to ``model`` (applied in line order), and the answer it
    must give: every line's result, the counts of documents and the missing ids."""
    after = dict(model)
    items, last_write, deleted_now = [], {}, set()
    for n, (line, verdict) in enumerate(lines, 1):
        shown = line.get("id", line.get("delete"))
        shown = shown if isinstance(shown, str) and not any("\ud800" <= c <= "\udfff" for c in shown) else None
        if verdict != OK:
            items.append((n, shown if "id" in line else None, "failed"))
            continue
        if "delete" in line:
            doc_id = str(line["delete"])
            items.append((n, doc_id, "deleted" if doc_id in after else "not_found"))
            after.pop(doc_id, None)
            last_write.pop(doc_id, None)
            deleted_now.add(doc_id)
            continue
        doc_id = str(line["id"])
        items.append((n, doc_id, "updated" if doc_id in after else "created"))
        after[doc_id] = _flat(line["text"])
        last_write[doc_id] = True
        deleted_now.discard(doc_id)
    answer = {
        "items": items,
        "written": len(last_write),
        "deleted": len(deleted_now & set(model)),
        "missing": [i for _, i, r in items if r == "not_found"],
    }
    return after, answer


class QueryLoad(threading.Thread):
    """Queries sent while the machine writes: new text (prose, or one of the hostile texts, which
    must get the answer it carries), and by id. Each records the steps completed when it was sent
    and when it was answered, to be checked once the run is over (:meth:`DocumentApiMachine.teardown`)."""

    def __init__(self, machine: "DocumentApiMachine", seed: int) -> None:
        super().__init__(daemon=True)
        self.machine = machine
        self.rng = random.Random(seed)
        self.stop = threading.Event()
        self.answers: list[tuple[str, object, int, int, int, str]] = []  # kind, arg, status, first, last, text

    def _one(self) -> None:
        m, rng = self.machine, self.rng
        kind = rng.choice(["text", "text", "hostile", "id", "id"])
        with m.serving:  # a restart swaps the client: not under a query
            first = m.steps
            if kind == "id":
                arg = rng.choice(IDS)
                r = m.client.post("/v1/indices/default/more_like_this", content=_body({"id": arg, "size": 5,
                                                                                       "method": "sdr"}), headers=JSON)
            else:
                text, verdict = (" ".join(rng.sample(SENTENCES, 2)), OK) if kind == "text" else rng.choice(HOSTILE)
                arg = verdict
                r = m.client.post("/v1/indices/default/more_like_this",
                                  content=_body({"text": text, "size": 5, "method": rng.choice(["sdr", "hybrid"])}),
                                  headers=JSON)
            self.answers.append((kind, arg, r.status_code, first, m.steps, r.text[:300]))

    def run(self) -> None:
        while not self.stop.is_set():
            self._one()
            self.stop.wait(PAUSE_S)  # a steady load that leaves the writes most of the CPU


PAUSE_S = 0.03

HOSTILE = [  # new text sources that must be refused as documents are (the document limits apply to them)
    ("A river \ud800 flooded.", INVALID), ("\x00", OK), ("Flood\x1bed valley. The levee\x7f held.", OK),
    (_sentences(LIMIT_SENTENCES + 1, " "), TOO_LARGE), (_of_bytes(LIMIT_BYTES + 1), TOO_LARGE),
    ("Ab. " * (4 * LIMIT_SENTENCES + 2), TOO_LARGE), ("Ab. " * (4 * LIMIT_SENTENCES + 1), OK),
]


class DocumentApiMachine(RuleBasedStateMachine):
    """The service over one store, and the model: ``id -> its text, white space collapsed``."""

    backend = "embedded"

    def __init__(self) -> None:
        super().__init__()
        self.model: dict[str, str] = {}
        self.client = None
        self._client_cm = None
        self.store = None
        self.serving = threading.Lock()
        self.steps = 0
        self.history: list[dict[str, str]] = []  # the model after 0, 1, 2, ... steps
        self.named: list[set[str]] = []  # the ids step k + 1 named
        self.load: QueryLoad | None = None

    # -- the system under test -------------------------------------------------------------------
    def open_store(self):
        raise NotImplementedError

    def _start(self) -> None:
        from fastapi.testclient import TestClient

        from sdr_search.reranker.service.app import create_app
        from sdr_search.reranker.service.settings import ServiceSettings

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

    def _done(self, *named: str) -> None:
        """A step is over: what the model holds now, and which ids it named."""
        self.history.append(dict(self.model))
        self.named.append(set(named))
        self.steps += 1

    @initialize()
    def seed(self) -> None:
        from sdr_search.core.documents import parse_record
        from sdr_search.indexer.pipeline import index_documents
        from sdr_search.indexer.stats_job import refresh_stats

        self.store = self.open_store()
        first = {"a": SENTENCES[0] + " " + SENTENCES[1], "b": SENTENCES[3], "c": SENTENCES[4] + " " + SENTENCES[5]}
        index_documents(self.store, [parse_record({"id": k, "text": v}) for k, v in first.items()], FakeEncoder())
        refresh_stats(self.store, exact=True, sample_size=100, seed=0)  # new-text queries need a reference sample
        self.store.close()
        self.model = {k: _flat(v) for k, v in first.items()}
        self.history = [dict(self.model)]
        self._start()
        DocumentApiMachine.examples += 1
        self.load = QueryLoad(self, seed=DocumentApiMachine.examples)
        self.load.start()

    def teardown(self) -> None:
        try:
            if self.load is not None:
                self.load.stop.set()
                self.load.join(timeout=120)
                assert not self.load.is_alive(), "the query thread did not stop"
                self.check_concurrent_answers()
        finally:
            self._stop()
            self.drop()

    def drop(self) -> None:
        pass

    seen: Counter = Counter()  # (query kind, status) over a test's examples, printed at its end
    examples = 0  # machines made so far: each one's query thread draws other queries

    def check_concurrent_answers(self) -> None:
        for kind, arg, status, first, last, text in self.load.answers:
            DocumentApiMachine.seen[kind, status] += 1
            assert status < 500, (kind, arg, status, text)
            if kind != "id":
                assert status == arg, (kind, status, arg, text)  # prose: 200; hostile: as a document would
                continue
            named = set().union(*self.named[first : last + 1])
            if arg in named:  # a step wrote or deleted it while the query ran: either answer
                assert status in (200, 404), (arg, status, text)
            else:  # present (absent) throughout the query
                assert status == (200 if arg in self.history[first] else 404), (arg, status, first, last, text)

    # -- operations --------------------------------------------------------------------------------
    @rule(doc_id=ids, text=texts)
    def put(self, doc_id, text):
        text, verdict = text
        r = self.client.put(f"/v1/indices/default/documents/{doc_id}", content=_body({"text": text}), headers=JSON)
        assert r.status_code == verdict, r.text
        if verdict == OK:
            assert r.json()["result"] == ("updated" if doc_id in self.model else "created")
            self.model[doc_id] = _flat(text)
        self._done(doc_id)

    @rule(doc_id=ids)
    def delete(self, doc_id):
        r = self.client.delete(f"/v1/indices/default/documents/{doc_id}")
        assert r.status_code == (200 if doc_id in self.model else 404), r.text
        self.model.pop(doc_id, None)
        self._done(doc_id)

    @rule(lines=bulk_bodies)
    def bulk(self, lines):
        body = b"\n".join(_body(line) for line, _ in lines) + b"\n"
        r = self.client.post("/v1/indices/default/_bulk", content=body, headers={"Content-Type": "application/x-ndjson"})
        assert r.status_code == 200, r.text
        after, want = expected_bulk(self.model, lines)
        got = r.json()
        assert [(i["line"], i["id"], i["result"]) for i in got["items"]] == want["items"], (lines, got)
        assert (got["written"], got["deleted"], got["missing"]) == (want["written"], want["deleted"], want["missing"])
        assert [f["line"] for f in got["failed"]] == [n for n, _, res in want["items"] if res == "failed"]
        self.model = after
        self._done(*(str(line.get("id", line.get("delete"))) for line, _ in lines))

    @rule()
    def restart(self):
        with self.serving:
            self._stop()
            self._start()
        self._done()

    @precondition(lambda self: len(self.model) >= 3)
    @rule(doc_id=ids)
    def query(self, doc_id):
        assert self.client.post("/v1/indices/default/_refresh_stats").status_code == 200
        r = self.client.post("/v1/indices/default/more_like_this", json={"id": doc_id, "size": 10, "method": "sdr"})
        if doc_id not in self.model:
            assert r.status_code == 404, r.text
        else:
            assert r.status_code == 200, r.text
            got = [h["id"] for h in r.json()["hits"]]
            assert doc_id not in got and set(got) <= set(self.model), (got, sorted(self.model))
        self._done()

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
        self._done()

    def drop(self) -> None:
        self._dir.cleanup()


EMBEDDED_RUNS = settings(max_examples=25, stateful_step_count=20, deadline=None,
                         suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


@pytest.fixture()
def small_limits(monkeypatch):
    for name, value in LIMITS.items():
        monkeypatch.setenv(name, value)


def _report(capsys, where: str) -> None:
    with capsys.disabled():
        print(f"\nconcurrent queries on {where} (kind, status): {dict(sorted(DocumentApiMachine.seen.items()))}")
    DocumentApiMachine.seen.clear()


def test_document_api_against_a_model_on_the_embedded_store(small_limits, capsys):
    DocumentApiMachine.seen.clear()
    EmbeddedMachine.TestCase.settings = EMBEDDED_RUNS
    EmbeddedMachine.TestCase().runTest()
    _report(capsys, "the embedded store")


def test_document_api_against_a_model_on_opensearch(opensearch_url, small_limits, capsys):
    from sdr_search.indexer.opensearch import OpenSearchSettings, OpenSearchStore

    DocumentApiMachine.seen.clear()
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
    _report(capsys, "OpenSearch")
