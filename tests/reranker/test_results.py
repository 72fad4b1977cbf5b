"""Results a person reads (issue 24, item 5): hits carry title, metadata and a snippet (the best
sentence pair); explanations give whole sentences with character offsets into the stored text (or
the query text); one legend; a one-shot ``sdr mlt --id`` imports no encoder stack and prints no
FAISS loader lines.

The store here is encoded with the deterministic fake encoder (:class:`factories.FakeEncoder`), so
no model loads; what a snippet *is* (the first sentence pair of the explanation) does not depend on
the encoder.
"""

from __future__ import annotations

import re
import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np
import pytest

from factories import AS_GIVEN, FakeEncoder
from sdr_search.core.documents import Document, parse_record, source_document
from sdr_search.core.settings import SegmentationSettings
from sdr_search.indexer.embedded import EmbeddedStore
from sdr_search.indexer.pipeline import index_documents
from sdr_search.indexer.stats_job import refresh_stats
from sdr_search.indexer.store import DocumentStore
from sdr_search.reranker.service.api_models import DocumentResponse, response_from
from sdr_search.cli.mlt import EXPLAIN_LEGEND, format_result
from sdr_search.reranker.engine import MoreLikeThis, Query
from sdr_search.reranker.offsets import aligned_spans, sentence_spans

unit = pytest.mark.unit  # every test here but the OpenSearch one: no model, no service

REPO = Path(__file__).resolve().parents[2]
TOPICS = ["court", "river", "music", "rocket", "garden", "bridge"]


def _record(k: int) -> dict:
    t = TOPICS[k % len(TOPICS)]
    long = (f"The {t} story number {k} goes on for a while, much longer than seventy characters, so that no "
            f"reader ever sees it cut in the middle of a word — caf\u00e9 na\u00efve \u2728 included.")
    return {
        "id": f"doc-{k}", "title": f"About the {t} ({k})" if k % 3 else None, "year": 2000 + k, "topic": t,
        "paragraphs": [f"First {t} sentence of doc {k}. {long}", f"Another {t} paragraph here. It ends now, {k}."],
    }


@pytest.fixture(scope="module")
def store_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("results") / "s"
    docs = [parse_record({k: v for k, v in _record(k).items() if v is not None}, settings=AS_GIVEN) for k in range(12)]
    with EmbeddedStore(path, create=True) as store:
        index_documents(store, docs, FakeEncoder())
        refresh_stats(store, exact=True, sample_size=20, seed=0)
    return path


def _engine(store):
    return MoreLikeThis(store=store, encoder=FakeEncoder())


# -- offsets -----------------------------------------------------------------------------------------------------
@unit
@pytest.mark.parametrize("title", [None, "A title \u00e9"])
def test_sentence_spans_index_the_stored_text(title):
    doc = Document("x", (("One \u2728 sentence.", "Two."), ("Three is here.",), ("Four.", "Five", "Six!")), title)
    spans = sentence_spans(doc)
    assert [len(row) for row in spans] == [2, 1, 3]
    for paragraph, row in zip(doc.paragraphs, spans):
        for sentence, (start, end) in zip(paragraph, row):
            assert doc.text[start:end] == sentence
    assert DocumentResponse(id="x", title=title, metadata={}, paragraphs=[list(p) for p in doc.paragraphs]).text == doc.text


@unit
def test_aligned_spans_index_the_text_as_sent():
    text = ("  The first  sentence\tis here.\r\nIt goes on over a line break.\n\n\n"
            "Short.  Tiny.  Then a sentence that is long enough to stand alone, caf\u00e9 \u2728.\n \n"
            "A last paragraph, with   odd   spacing.  ")
    doc = source_document(text=text, settings=SegmentationSettings(min_paragraph_sentences=2, min_sentence_chars=20))
    spans = aligned_spans(text, doc)
    found = 0
    for paragraph, row in zip(doc.paragraphs, spans):
        for sentence, span in zip(paragraph, row):
            assert span is not None, sentence
            start, end = span
            assert " ".join(text[start:end].split()) == sentence  # the same text up to white space
            assert not text[start].isspace() and not text[end - 1].isspace()
            found += 1
    assert found == doc.n_sentences >= 4
    assert Query(paragraphs=["a b.", "c d."]).request_text() == "a b.\n\nc d."
    assert Query(sections=[{"title": "T", "paragraphs": ["a."]}, {"paragraphs": ["b.", "c."]}]).request_text() == "a.\n\nb.\n\nc."
    assert Query(id="x").request_text() is None


# -- the store read for results ----------------------------------------------------------------------------------
@unit
def test_documents_of_reads_documents_without_vectors(store_path, monkeypatch):
    with EmbeddedStore(store_path) as store:
        assert store.capabilities.metadata_lookup
        wanted = ["doc-3", "nope", "doc-1", "doc-3"]
        monkeypatch.setattr(store, "_matrix", lambda: pytest.fail("documents_of read the vector file"))
        got = store.documents_of(wanted)
        monkeypatch.undo()
        assert list(got) == ["doc-3", "doc-1"]  # in the order asked, once, missing ids left out
        for doc_id, doc in got.items():
            assert doc == store.get(doc_id).document
        assert DocumentStore.documents_of(store, wanted) == got  # the interface's default agrees
        assert store.documents_of([]) == {}


@pytest.mark.integration
def test_opensearch_documents_of_reads_documents_without_vectors(opensearch_url):
    from factories import META, make_docs, unit as unit_vectors
    from sdr_search.core.vectors import DocVectors
    from sdr_search.indexer.opensearch import OpenSearchSettings, OpenSearchStore

    store = OpenSearchStore(opensearch_url, index=f"sdr-results-{uuid.uuid4().hex[:10]}",
                            settings=OpenSearchSettings(replicas=0))
    try:
        store.ensure_meta(META)
        items = make_docs(3, seed=5)
        tagged = parse_record({"id": "t1", "title": "Tagged", "paragraphs": ["One tagged sentence. Another one."],
                               "year": 2020}, settings=AS_GIVEN)
        store.put([*items, (tagged, DocVectors(unit_vectors(np.random.default_rng(6), 2), [0, 2]))])
        assert store.capabilities.metadata_lookup
        got = store.documents_of(["t1", "nope", "d001"])
        assert list(got) == ["t1", "d001"]
        for doc_id, doc in got.items():
            assert doc == store.get(doc_id).document
        assert DocumentStore.documents_of(store, ["t1", "nope", "d001"]) == got
    finally:
        store.drop()
        store.close()


@pytest.mark.integration
@pytest.mark.parametrize("derived", ["on", "off"])
def test_opensearch_documents_of_never_reads_by_get(opensearch_url, monkeypatch, derived):
    """The hits to present and the candidates to filter are read by a search, never by ``_mget``: on an
    index with k-NN derived source (the 3.x default) a ``GET`` rebuilds every sentence vector into each
    document's ``_source`` before any filter (on 3.5.0, 180 ms for 10 demo articles against 19 by a
    search). Both index kinds; an id over the ``_id`` byte limit (stored under its hash); the order asked."""
    from factories import META, make_docs, unit as unit_vectors
    from sdr_search.core.vectors import DocVectors
    from sdr_search.indexer.opensearch import OpenSearchSettings, OpenSearchStore

    store = OpenSearchStore(opensearch_url, index=f"sdr-results-{uuid.uuid4().hex[:10]}",
                            settings=OpenSearchSettings(replicas=0, derived_source=derived))
    try:
        store.ensure_meta(META)
        long_id = "long-" + "é" * 300  # 605 UTF-8 bytes: over the _id limit
        tagged = parse_record({"id": long_id, "title": "Long", "paragraphs": ["One long-id sentence. Another one."],
                               "court": "high"}, settings=AS_GIVEN)
        store.put([*make_docs(3, seed=5), (tagged, DocVectors(unit_vectors(np.random.default_rng(6), 2), [0, 2]))])
        expected = {i: store.get(i).document for i in ("d002", long_id, "d000")}
        monkeypatch.setattr(store._transport, "mget", lambda *a, **k: pytest.fail("read by _mget"))
        got = store.documents_of(["d002", "nope", long_id, "d000", "d002"])
        assert list(got) == ["d002", long_id, "d000"] and got == expected
        assert store.metadata_of([long_id, "nope", "d000"]) == {long_id: {"court": "high"},
                                                                  "d000": expected["d000"].metadata}
    finally:
        monkeypatch.undo()
        store.drop()
        store.close()


@pytest.mark.integration
@pytest.mark.parametrize("derived", ["on", "off"])
def test_opensearch_stored_documents_reads_many_in_two_requests(opensearch_url, derived):
    """``stored_documents`` (document feedback's sources) is ``get`` of each id that exists, in one ``_mget``
    (their statistics) and one ``_msearch`` (their fields and vectors) whatever their number, with statistics
    and without."""
    from factories import META, make_docs
    from sdr_search.indexer.opensearch import OpenSearchSettings, OpenSearchStore

    store = OpenSearchStore(opensearch_url, index=f"sdr-results-{uuid.uuid4().hex[:10]}",
                            settings=OpenSearchSettings(replicas=0, derived_source=derived))
    try:
        store.ensure_meta(META)
        store.put(make_docs(5, seed=7))
        refresh_stats(store, exact=True, progress=False)
        store.put(make_docs(6, seed=7)[5:])  # one document without statistics
        ids = ["d004", "nope", "d001", "d005", "d001"]
        expected = {i: store.get(i) for i in ("d004", "d001", "d005")}
        client = store._os()
        sent: list[str] = []
        real = {name: getattr(client, name) for name in ("get", "mget", "search", "msearch")}
        for name in real:
            setattr(client, name, lambda *a, name=name, **kw: (sent.append(name), real[name](*a, **kw))[1])
        try:
            got = store.stored_documents(ids)
        finally:
            for name, fn in real.items():
                setattr(client, name, fn)
        assert sorted(sent) == (["mget", "msearch"] if store.has_plugin() else ["mget"])
        assert list(got) == ["d004", "d001", "d005"]
        for doc_id, doc in got.items():
            want = expected[doc_id]
            assert doc.document == want.document
            assert np.array_equal(doc.vectors.vectors, want.vectors.vectors)
            assert np.array_equal(doc.vectors.par_offsets, want.vectors.par_offsets)
            assert (doc.stats is None) == (want.stats is None) == (doc_id == "d005")
            if doc.stats is not None:
                assert np.array_equal(doc.stats.mu, want.stats.mu) and np.array_equal(doc.stats.sigma, want.stats.sigma)
    finally:
        store.drop()
        store.close()


# -- hits a person reads -----------------------------------------------------------------------------------------
def _d(model) -> dict:
    """A result model as the dict the HTTP response gives (absent fields left out)."""
    return model.model_dump(exclude_none=True)


def _check_pair(pair: dict, source_text: str, candidate: Document) -> None:
    assert candidate.text[pair["candidate_start"] : pair["candidate_end"]] == pair["candidate_sentence"]
    assert " ".join(source_text[pair["source_start"] : pair["source_end"]].split()) == pair["source_sentence"]


@unit
@pytest.mark.parametrize("method", ["sdr", "hybrid"])
def test_hits_carry_title_metadata_and_the_best_sentence_pair(store_path, method):
    with EmbeddedStore(store_path) as store:
        engine = _engine(store)
        source = store.get("doc-4").document
        plain = engine.run(Query(id="doc-4", size=5, method=method))
        explained = engine.run(Query(id="doc-4", size=5, method=method, explain=True))
        assert [h.id for h in plain.hits] == [h.id for h in explained.hits] and len(plain.hits) == 5
        assert plain.source_offsets == "stored"
        docs = store.documents_of([h.id for h in plain.hits])
        for h, e in zip(plain.hits, explained.hits):
            doc = docs[h.id]
            assert h.title == doc.title and h.metadata == doc.metadata and h.metadata["topic"] in TOPICS
            first = _d(e.explanation)["paragraph_pairs"][0]
            # the snippet is the explanation's first sentence pair (the best pair of the best paragraph pair)
            assert _d(h.snippet) == {**first["sentence_pairs"][0], "source_paragraph": first["source_paragraph"],
                                     "candidate_paragraph": first["candidate_paragraph"]} == _d(e.snippet)
            assert h.snippet.candidate_sentence in doc.paragraphs[h.snippet.candidate_paragraph]
            _check_pair(_d(h.snippet), source.text, doc)
            for p in _d(e.explanation)["paragraph_pairs"]:
                for sp in p["sentence_pairs"]:
                    _check_pair(sp, source.text, doc)
        bare = engine.run(Query(id="doc-4", size=5, method=method, details=False))
        assert [(h.id, h.score) for h in bare.hits] == [(h.id, h.score) for h in plain.hits]
        assert all(h.title is None and h.metadata is None and h.snippet is None for h in bare.hits)
        assert "snippets" in plain.timings_ms and "snippets" not in bare.timings_ms


@unit
def test_new_text_offsets_index_the_request_text(store_path):
    text = ("First river sentence of doc 1.\n\n   Another   river paragraph here.\nIt ends now, 1.\n\n"
            "A sentence about a rocket and a garden, long enough to stand alone.")
    with EmbeddedStore(store_path) as store:
        engine = _engine(store)
        for query, sent in ((Query(text=text, size=3, explain=True), text),
                            (Query(paragraphs=text.split("\n\n"), size=3, explain=True), text)):
            result = engine.run(query)
            assert result.source_offsets == "request" and result.hits
            docs = store.documents_of([h.id for h in result.hits])
            for h in result.hits:
                _check_pair(_d(h.snippet), sent, docs[h.id])
                for p in _d(h.explanation)["paragraph_pairs"]:
                    for sp in p["sentence_pairs"]:
                        _check_pair(sp, sent, docs[h.id])
        body = response_from(result, "default").model_dump(mode="json", exclude_none=True, by_alias=True)
        assert body["source_offsets"] == "request"
        hit = body["hits"][0]
        assert {"metadata", "snippet", "explanation"} <= set(hit)
        assert {"source_start", "source_end", "candidate_start", "candidate_end", "cosine"} <= set(hit["snippet"])


@unit
def test_explain_reads_each_hit_once_without_vectors(store_path, monkeypatch):
    """The rerank fetched the hits' vectors: explain and snippets reuse them; the documents are
    read in one bulk call (only the source is read with get())."""
    with EmbeddedStore(store_path) as store:
        engine = _engine(store)
        gets, bulk = [], []
        real_get, real_docs = store.get, store.documents_of
        monkeypatch.setattr(store, "get", lambda doc_id: gets.append(doc_id) or real_get(doc_id))
        monkeypatch.setattr(store, "documents_of", lambda ids: bulk.append(list(ids)) or real_docs(ids))
        result = engine.run(Query(id="doc-2", size=4, explain=True, method="sdr"))
        assert gets == ["doc-2"] and bulk == [[h.id for h in result.hits]]


@unit
def test_a_document_replaced_after_scoring_is_read_again(store_path, tmp_path, monkeypatch):
    with EmbeddedStore(store_path) as store:
        engine = _engine(store)
        first = engine.run(Query(id="doc-5", size=1, method="sdr")).hits[0]
        other = parse_record({"id": first.id, "title": "Replaced", "paragraphs": ["Only one sentence now."]},
                             settings=AS_GIVEN)
        real = store.documents_of
        monkeypatch.setattr(store, "documents_of", lambda ids: {**real(ids), first.id: other})
        hit = engine.run(Query(id="doc-5", size=1, method="sdr")).hits[0]
        assert hit.id == first.id and hit.title == first.title  # sizes differ: the stored document, read again


# -- the CLI's text ------------------------------------------------------------------------------------------------
@unit
def test_cli_table_and_explain_print_whole_sentences_offsets_and_the_legend(store_path):
    with EmbeddedStore(store_path) as store:
        engine = _engine(store)
        plain = format_result(engine.run(Query(id="doc-4", size=3, method="sdr")))
        result = engine.run(Query(id="doc-4", size=3, method="hybrid", explain=True))
        explained = format_result(result, explain=True)
    lines = plain.splitlines()
    assert lines[0].split() == ["rank", "score", "id"] and lines[-1].endswith("stats from stored")
    assert re.match(r"^\s+1\s+-?\d+\.\d{4}\s+doc-\d+", lines[1])
    assert re.match(r"^\s{16}-?\d\.\d{3}\s+\S", lines[2])  # the snippet under its hit
    assert EXPLAIN_LEGEND[:40] not in plain
    flat = " ".join(explained.split())
    pairs = [sp for h in result.hits for p in _d(h.explanation)["paragraph_pairs"] for sp in p["sentence_pairs"]]
    assert any(len(sp["source_sentence"]) > 70 or len(sp["candidate_sentence"]) > 70 for sp in pairs)
    for sp in pairs:  # whole sentences (wrapped, never cut), each with its offsets
        assert f"[{sp['source_start']}:{sp['source_end']}] {sp['source_sentence']}" in flat
        assert f"~ [{sp['candidate_start']}:{sp['candidate_end']}] {sp['candidate_sentence']}" in flat
    assert " ".join(EXPLAIN_LEGEND.split()) in flat
    assert explained.splitlines()[-1].startswith(tuple("0123456789"))  # the summary line stays last


@unit
def test_the_legend_is_in_the_readme_and_the_guide():
    for doc in ("README.md", "docs/guide.md"):
        text = " ".join((REPO / doc).read_text(encoding="utf-8").split())
        assert " ".join(EXPLAIN_LEGEND.split()) in text, f"{doc} lacks the --explain legend (sdr_search/cli/mlt.py)"


# -- start-up ------------------------------------------------------------------------------------------------------
@unit
def test_a_one_shot_mlt_by_id_imports_no_encoder_stack_and_prints_no_loader_lines(store_path):
    r = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "sdr_search", "mlt", "--store", str(store_path), "--id", "doc-1",
         "--size", "2", "--method", "sdr"],
        capture_output=True, text=True, timeout=120, cwd=REPO,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    imported = {line.split("|")[-1].strip() for line in r.stderr.splitlines() if line.startswith("import time:")}
    heavy = {m for m in ("torch", "transformers", "fastapi", "uvicorn", "opensearchpy") if m in imported}
    assert not heavy, f"sdr mlt --id imported {sorted(heavy)}"
    noise = [line for line in r.stderr.splitlines() if not line.startswith("import time:")]
    assert not any("faiss" in line or "swigfaiss" in line for line in noise), noise
    assert r.stdout.splitlines()[0].split() == ["rank", "score", "id"]
