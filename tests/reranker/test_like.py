"""Several sources at once (issue 24, item 2): ``like`` and ``unlike`` lists of indexed ids or new
texts, for method sdr and hybrid, through the engine, HTTP and ``sdr mlt``.

The score (docs/scoring.md "Several sources"): each source's own score (SDR with its own
statistics, or its fused hybrid score over the shared candidates), the mean over the like sources
minus ``unlike_weight`` times the mean over the unlike sources. Checked against the brute-force
reference (:mod:`sdr_search.core.reference`) and against single-source queries over the same
candidates. The store is encoded with the deterministic fake encoder (no model loads).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from factories import AS_GIVEN, FakeEncoder
from sdr_search.core.documents import parse_record, source_document
from sdr_search.core.errors import DocumentNotFoundError, InvalidInputError, SourceTooLargeError
from sdr_search.core.reference import reference_sdr_score
from sdr_search.core.scoring import document_best, like_unlike, part_scores, score_documents, NormStats
from sdr_search.indexer.embedded import EmbeddedStore
from sdr_search.indexer.pipeline import index_documents
from sdr_search.indexer.stats_job import refresh_stats
from sdr_search.reranker.engine import MLTSettings, MoreLikeThis, Query
from sdr_search.reranker.query import MAX_SOURCES

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
TOPICS = ["court", "river", "music", "rocket", "garden", "bridge"]
N_DOCS = 14


def _record(k: int) -> dict:
    t, u = TOPICS[k % len(TOPICS)], TOPICS[(k * 5 + 1) % len(TOPICS)]
    return {
        "id": f"doc-{k}", "title": f"On the {t} ({k})", "topic": t,
        "paragraphs": [f"The {t} story {k} begins. It is about the {t} and the {u}.",
                       f"A {u} paragraph of document {k}. The {t} again, {k}.",
                       f"Closing words on the {t}. Number {k} ends here."][: 2 + k % 2],
    }


@pytest.fixture(scope="module")
def store_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("like") / "s"
    docs = [parse_record(_record(k), settings=AS_GIVEN) for k in range(N_DOCS)]
    with EmbeddedStore(path, create=True) as store:
        index_documents(store, docs, FakeEncoder())
        refresh_stats(store, exact=True, sample_size=50, seed=0)
    return path


def _engine(store, **settings):
    return MoreLikeThis(store=store, encoder=FakeEncoder(), settings=MLTSettings(**settings))


def _paragraphs(store, doc_id):
    v = store.get(doc_id).vectors
    return [v.paragraph(i) for i in range(v.n_paragraphs)]


def _others(*excluded):
    return [f"doc-{k}" for k in range(N_DOCS) if f"doc-{k}" not in excluded]


# -- the pure parts -------------------------------------------------------------------------------------
def test_part_scores_equal_each_source_scored_alone():
    rng = np.random.default_rng(3)
    from factories import doc_vectors

    a, b = doc_vectors(rng, [2, 3]), doc_vectors(rng, [1, 4, 2])
    docs = [doc_vectors(rng, [3, 1]) for _ in range(5)]
    sa = NormStats(rng.normal(0.2, 0.05, 2), rng.uniform(0.1, 0.3, 2))
    sb = NormStats(rng.normal(0.2, 0.05, 3), rng.uniform(0.1, 0.3, 3))
    from sdr_search.core.vectors import DocVectors

    merged = DocVectors(np.concatenate([a.vectors, b.vectors]),
                        np.concatenate([a.par_offsets, b.par_offsets[1:] + a.n_sentences]))
    stats = NormStats(np.concatenate([sa.mu, sb.mu]), np.concatenate([sa.sigma, sb.sigma]))
    rows = part_scores(document_best(merged, docs), stats, [0, 2, 5])
    np.testing.assert_allclose(rows[0], score_documents(a, docs, sa), atol=1e-5)
    np.testing.assert_allclose(rows[1], score_documents(b, docs, sb), atol=1e-5)
    np.testing.assert_allclose(like_unlike(rows, 1, 0.5), rows[0] - 0.5 * rows[1])
    np.testing.assert_allclose(like_unlike(rows, 2, 0.5), rows.mean(axis=0))
    assert like_unlike(rows[:1], 1, 0.5).tolist() == rows[0].tolist()
    with pytest.raises(ValueError):
        part_scores(document_best(merged, docs), stats, [0, 2, 4])


# -- the engine -----------------------------------------------------------------------------------------
def test_like_sdr_is_the_mean_of_each_sources_reference_score(store_path):
    with EmbeddedStore(store_path) as store:
        pool = _others("doc-1", "doc-8")
        result = _engine(store).run(Query(like=["doc-1", "doc-8"], method="sdr", candidate_ids=pool, size=len(pool)))
        everything = {d: _paragraphs(store, d) for d in (f"doc-{k}" for k in range(N_DOCS))}
    assert {h.id for h in result.hits} == set(pool)  # the like sources are left out
    for h in result.hits:
        expected = []
        for src in ("doc-1", "doc-8"):  # each source with its own exact statistics (all other documents)
            stat = [p for d, ps in everything.items() if d != src for p in ps]
            expected.append(reference_sdr_score(everything[src], everything[h.id], stat))
        assert h.score == pytest.approx(np.mean(expected), abs=1e-5)
        assert [s.score for s in h.sources] == pytest.approx(expected, abs=1e-5)
        assert [(s.role, s.index) for s in h.sources] == [("like", 0), ("like", 1)]
    assert [s["id"] for s in result.sources] == ["doc-1", "doc-8"] and result.stats_origin == "stored"


def test_unlike_subtracts_its_weighted_mean_and_demotes_what_resembles_it(store_path):
    with EmbeddedStore(store_path) as store:
        engine = _engine(store)
        pool = _others("doc-2", "doc-3")
        q = dict(method="sdr", candidate_ids=pool, size=len(pool))
        like = {h.id: h.score for h in engine.run(Query(id="doc-2", **q)).hits}
        unlike = {h.id: h.score for h in engine.run(Query(id="doc-3", **q)).hits}
        both = engine.run(Query(id="doc-2", unlike=["doc-3"], unlike_weight=0.7, **q))
        default = engine.run(Query(id="doc-2", unlike=["doc-3"], **q))
        top = engine.run(Query(id="doc-2", **q)).hits[0].id
        copy = {"paragraphs": [" ".join(p) for p in store.get(top).document.paragraphs]}  # a new text equal to it
        pushed = engine.run(Query(id="doc-2", unlike=[copy], unlike_weight=2, **q))
    assert "doc-3" not in {h.id for h in both.hits}  # an indexed unlike source is left out too
    for h in both.hits:
        assert h.score == pytest.approx(like[h.id] - 0.7 * unlike[h.id], abs=1e-6)
    for h in default.hits:  # SDR_UNLIKE_WEIGHT's default
        assert h.score == pytest.approx(like[h.id] - 0.5 * unlike[h.id], abs=1e-6)
    assert both.sources[1] == {"role": "unlike", "index": 0, "id": "doc-3", "paragraphs": 3, "sentences": 6,
                               "stats": "stored", "offsets": "stored", "weight": -0.7}
    order = [h.id for h in pushed.hits]
    assert top in order and order.index(top) > len(order) // 2  # the best match, now most like the unlike text


def test_one_like_source_is_the_single_source_query(store_path):
    with EmbeddedStore(store_path) as store:
        engine = _engine(store)
        for method in ("sdr", "hybrid"):
            single = engine.run(Query(id="doc-5", method=method, size=6))
            liked = engine.run(Query(like=["doc-5"], method=method, size=6))
            assert [(h.id, h.score, h.snippet) for h in liked.hits] == [(h.id, h.score, h.snippet) for h in single.hits]
            assert liked.sources is None and all(h.sources is None for h in liked.hits)


def test_hybrid_with_several_sources_averages_each_sources_fused_score(store_path):
    with EmbeddedStore(store_path) as store:
        engine = _engine(store)
        pool = _others("doc-4", "doc-6")
        q = dict(method="hybrid", candidate_ids=pool, size=len(pool), feedback=False)  # several sources: no feedback
        a = {h.id: h.score for h in engine.run(Query(id="doc-4", **q)).hits}
        text = "The river story begins. The music and the river go on."
        b = {h.id: h.score for h in engine.run(Query(text=text, **q)).hits}
        u = {h.id: h.score for h in engine.run(Query(id="doc-6", **q)).hits}
        result = engine.run(Query(like=["doc-4", {"text": text}], unlike=["doc-6"], explain=True, **q))
    assert result.method == "hybrid" and result.source_offsets == "mixed" and result.stats_origin == "mixed"
    for h in result.hits:
        assert h.score == pytest.approx((a[h.id] + b[h.id]) / 2 - 0.5 * u[h.id], abs=1e-6)
        assert [s.score for s in h.sources] == pytest.approx([a[h.id], b[h.id], u[h.id]], abs=1e-6)
        assert set(h.signals) == {"bm25", "sdr", "mean"}
        assert h.explanation.paragraph_pairs and all(p.source in (0, 1) for p in h.explanation.paragraph_pairs)


def test_snippets_name_their_source_and_index_its_own_text(store_path):
    text = "Closing words on the garden. A garden of music ends here.\n\nThe rocket and the garden."
    with EmbeddedStore(store_path) as store:
        result = _engine(store).run(Query(like=[{"text": text}, "doc-7"], method="sdr", size=5, explain=True))
        stored = {"doc-7": store.get("doc-7").document.text}
        hits = {h.id: store.get(h.id).document.text for h in result.hits}
    assert [s["offsets"] for s in result.sources] == ["request", "stored"]
    for h in result.hits:
        sp = h.snippet.model_dump(exclude_none=True)
        own = text if sp["source"] == 0 else stored["doc-7"]
        # every sentence of this text and of a stored document is found verbatim: the offsets are always there
        assert " ".join(own[sp["source_start"]:sp["source_end"]].split()) == sp["source_sentence"]
        assert hits[h.id][sp["candidate_start"]:sp["candidate_end"]] == sp["candidate_sentence"]
        for p in h.explanation.paragraph_pairs:
            assert all(s.source == p.source for s in p.sentence_pairs)
        assert h.explanation.score == pytest.approx(np.mean([s.score for s in h.sources]), abs=1e-5)


def test_candidates_come_from_every_like_source(store_path):
    with EmbeddedStore(store_path) as store:
        engine = _engine(store, candidates=2, prerank_factor=1.0, knn_k=1)
        a = {h.id for h in engine.run(Query(id="doc-0", method="sdr", size=2)).hits}
        b = {h.id for h in engine.run(Query(id="doc-3", method="sdr", size=2)).hits}
        both = engine.run(Query(like=["doc-0", "doc-3"], method="sdr", size=4, candidates=4))
    assert {h.id for h in both.hits} & a and {h.id for h in both.hits} & b


def test_bad_several_source_queries_are_refused_clearly(store_path):
    with pytest.raises(InvalidInputError, match="give exactly one source"):
        Query(id="doc-1", like=["doc-2"])
    with pytest.raises(InvalidInputError, match="like: List should have at least 1 item"):
        Query(like=[])
    with pytest.raises(InvalidInputError, match="like: Input should be a valid list"):
        Query(like="doc-1")
    with pytest.raises(InvalidInputError, match=r"like\[1\]: a source is exactly one"):
        Query(like=["doc-1", {"id": "doc-2", "text": "x"}])
    with pytest.raises(InvalidInputError, match=r"unlike\[0\]\.doc: Extra inputs are not permitted"):
        Query(id="doc-1", unlike=[{"doc": "x"}])
    with pytest.raises(InvalidInputError, match=r"like\[0\]: id ' doc-1' has white space"):
        Query(like=[" doc-1"])
    with pytest.raises(InvalidInputError, match=f"unlike: List should have at most {MAX_SOURCES} items"):
        Query(like=[f"doc-{k}" for k in range(10)], unlike=[f"doc-{k}" for k in range(17)])
    Query(like=[f"doc-{k}" for k in range(16)], unlike=[f"doc-{k}" for k in range(16)])  # 16 each is fine
    with pytest.raises(InvalidInputError, match="unlike_weight"):
        Query(id="doc-1", unlike=["doc-2"], unlike_weight=float("nan"))
    with EmbeddedStore(store_path) as store:
        with pytest.raises(DocumentNotFoundError, match=r"unlike\[0\]"):
            _engine(store).run(Query(like=["doc-1"], unlike=["nope"]))
        text = " ".join(f"Sentence number {k} says enough words about the {TOPICS[k % 6]} to stand alone." for k in range(8))
        n = _engine(store).segmentation()
        n = source_document(text=text, settings=n).n_sentences
        _engine(store, max_query_sentences=n).run(Query(like=[{"text": text}], method="sdr"))  # within the cap
        with pytest.raises(SourceTooLargeError, match=f"the new sources have {2 * n} sentences, over the limit of {n}"):
            _engine(store, max_query_sentences=n).run(Query(like=[{"text": text}], unlike=[{"text": text}]))


# -- HTTP and the CLI -----------------------------------------------------------------------------------
def test_http_like_and_unlike(store_path):
    from fastapi.testclient import TestClient

    from sdr_search.reranker.service.app import create_app
    from sdr_search.reranker.service.settings import ServiceSettings

    store = EmbeddedStore(store_path)
    app = create_app(stores={"s": store}, encoder=FakeEncoder(), settings=ServiceSettings(api_key=None))
    with TestClient(app) as c:
        r = c.post("/v1/indices/s/more_like_this",
                   json={"like": ["doc-1", {"text": "The court story begins."}], "unlike": ["doc-9"], "unlike_weight": 0.25,
                         "method": "sdr", "size": 4})
        assert r.status_code == 200, r.text
        body = r.json()
        assert [(s["role"], s["index"]) for s in body["sources"]] == [("like", 0), ("like", 1), ("unlike", 0)]
        assert body["sources"][2] == {"role": "unlike", "index": 0, "id": "doc-9", "paragraphs": 3, "sentences": 6,
                                      "stats": "stored", "offsets": "stored", "weight": -0.25}
        assert body["source_offsets"] == "mixed" and len(body["hits"]) == 4
        assert {"doc-1", "doc-9"}.isdisjoint(h["id"] for h in body["hits"])
        assert all(h["snippet"]["source"] in (0, 1) and len(h["sources"]) == 3 for h in body["hits"])
        r = c.post("/v1/indices/s/more_like_this", json={"like": ["doc-1", "nope"]})
        assert r.status_code == 404 and "like[1]" in r.json()["error"]["message"]
        for bad in ({"like": []}, {"like": ["doc-1"], "id": "doc-2"}, {"like": [{"id": "a", "text": "b"}]},
                    {"like": [f"d{k}" for k in range(17)]}, {"id": "doc-1", "unlike_weight": -1},
                    {"like": ["doc-1"], "unlike": [f"d{k}" for k in range(17)]},
                    {"like": [{"id": "doc-1", "title": "T"}]}):
            r = c.post("/v1/indices/s/more_like_this", json=bad)
            assert r.status_code == 422, (bad, r.text)


def test_cli_like_unlike(store_path, tmp_path):
    src = tmp_path / "src.txt"
    src.write_text("The music story begins. It is about the music.", encoding="utf-8")

    def mlt(*args):
        return subprocess.run([sys.executable, "-m", "sdr_search", "mlt", "--store", str(store_path), *args],
                              capture_output=True, text=True, timeout=120, cwd=REPO)

    r = mlt("--like", "doc-1", "--like", "doc-2", "--unlike", "doc-3", "--unlike-weight", "0.3", "--method", "sdr",
            "--json", "--size", "3")
    assert r.returncode == 0, r.stderr[-2000:]
    body = json.loads(r.stdout)
    assert [s.get("id") for s in body["sources"]] == ["doc-1", "doc-2", "doc-3"] and body["sources"][2]["weight"] == -0.3
    with EmbeddedStore(store_path) as store:
        expected = _engine(store).run(Query(like=["doc-1", "doc-2"], unlike=["doc-3"], unlike_weight=0.3, method="sdr",
                                            size=3))
    assert [h["id"] for h in body["hits"]] == [h.id for h in expected.hits]
    r = mlt("--like", "doc-1", "--unlike", "doc-3", "--method", "sdr", "--explain", "--size", "2")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "like[0] " in r.stdout and "unlike[0] " in r.stdout and "1 like and 1 unlike sources" in r.stdout
    r = mlt("--id", "doc-1", "--like", "doc-2")
    assert r.returncode == 2 and "not both" in r.stderr
    r = mlt("--size", "2")
    assert r.returncode == 2 and "give a source" in r.stderr
    r = mlt("--like-file", str(tmp_path / "missing.txt"))
    assert r.returncode != 0 and "does not exist" in r.stderr


# -- adaptive fusion in the engine (the default hybrid): each source's own length sets its weights ------
def test_the_engine_weighs_each_source_by_its_own_length(store_path):
    from sdr_search.core.fusion import ADAPTIVE_PARAMS

    n0 = ADAPTIVE_PARAMS.half_sentences
    short = "The court story begins and goes on about the river."
    long = "\n\n".join(f"The {TOPICS[k % 6]} paragraph {k} speaks of many things at length. It ends with the "
                       f"{TOPICS[(k + 1) % 6]} again, number {k}." for k in range(60))
    with EmbeddedStore(store_path) as store:
        engine = _engine(store)
        seg = engine.segmentation()
        n_short = source_document(text=short, settings=seg).n_sentences
        n_long = source_document(text=long, settings=seg).n_sentences
        assert n_short < n0 < n_long
        a = engine.run(Query(text=short, size=3))
        b = engine.run(Query(text=long, size=3))
        both = engine.run(Query(like=[{"text": short}, {"text": long}], size=3))
    assert a.hybrid["fusion"] == "adaptive"
    for result, n in ((a, n_short), (b, n_long)):
        w = result.hits[0].signals
        assert w["bm25"].weight == pytest.approx(n0 / (n0 + n)) and w["sdr"].weight == pytest.approx(n / (n0 + n))
        assert w["mean"].weight == 0.0
    w = both.hits[0].signals  # several sources: the like sources' mean of their own weights
    assert w["bm25"].weight == pytest.approx((n0 / (n0 + n_short) + n0 / (n0 + n_long)) / 2)


def test_document_feedback_mixes_the_top_hits_rankings_in_by_their_share(store_path):
    """Adaptive fusion's document feedback (docs/scoring.md "Document feedback") through the engine:
    the top hits of the ranking without feedback become sources; each hit's score is (1 - share)
    x the source's fused score + share x the mean of the feedback documents' own fused scores (a
    feedback document's own: its row's best other), each as a single-source query gives it."""
    from sdr_search.core.fusion import ADAPTIVE_PARAMS, SourceShape, feedback_share
    from sdr_search.reranker.service.api_models import MoreLikeThisRequest, response_from

    with EmbeddedStore(store_path) as store:
        engine = _engine(store)
        pool = _others()
        text = "The river story begins. The music and the river go on."
        q = dict(method="hybrid", candidate_ids=pool, size=len(pool))
        plain = engine.run(Query(text=text, feedback=False, **q))
        result = engine.run(Query(text=text, **q))
        share = feedback_share(SourceShape.of(engine.source(Query(text=text)).document), ADAPTIVE_PARAMS)
        fb = [h.id for h in plain.hits[: ADAPTIVE_PARAMS.feedback_docs]]
        assert share > 0 and result.hybrid["feedback"] == {"ids": fb, "share": pytest.approx(share)}
        assert "feedback" not in plain.hybrid and plain.hybrid["adaptive"]["feedback_docs"] == 0
        a = {h.id: h.score for h in plain.hits}
        rows = [{h.id: h.score for h in engine.run(Query(id=f, feedback=False, **q)).hits} for f in fb]
        assert {h.id for h in result.hits} == set(pool)  # the feedback documents stay in the results
        for h in result.hits:
            mean = np.mean([r[h.id] if h.id in r else max(r.values()) for r in rows])
            assert h.score == pytest.approx((1 - share) * a[h.id] + share * mean, abs=1e-6)
            assert h.sources is None  # one named source
            named = next(p.signals for p in plain.hits if p.id == h.id)  # the signals are the named source's
            assert {k: pytest.approx(v.model_dump(), abs=1e-6) for k, v in named.items()} == {
                k: v.model_dump() for k, v in h.signals.items()}
        # method sdr and several sources: no feedback
        assert engine.run(Query(text=text, method="sdr", size=3)).hybrid is None
        several = engine.run(Query(like=[{"text": text}, "doc-2"], method="hybrid", size=3))
        assert "feedback" not in several.hybrid
        with pytest.raises(InvalidInputError, match="feedback"):
            engine.run(Query(text=text, method="sdr", feedback=True))
        with pytest.raises(InvalidInputError, match="feedback"):
            Query(text=text, feedback="yes")
        # the HTTP body maps onto the same query, and the response says what feedback did
        req = MoreLikeThisRequest(text=text, feedback=False, size=3)
        assert Query.from_request(req).feedback is False
        body = response_from(result, "idx").model_dump()
        assert body["hybrid"]["feedback"] == {"ids": fb, "share": pytest.approx(share)}


def test_a_feedback_document_deleted_during_the_query_is_left_out(store_path, tmp_path):
    """A concurrent delete between the first ranking and the feedback round: the query goes on with
    the feedback documents that are left (no 404 for a document the user never named)."""
    import shutil

    shutil.copytree(store_path, tmp_path / "s")
    text = "The river story begins. The music and the river go on."
    with EmbeddedStore(tmp_path / "s") as store:
        engine = _engine(store)
        plain = engine.run(Query(text=text, feedback=False, size=5))
        gone = plain.hits[0].id
        real = engine._ranked
        calls = []

        def ranked(*args, **kwargs):  # the first ranking, then the delete, before the feedback round reads
            out = real(*args, **kwargs)
            calls.append(1)
            if len(calls) == 1:
                store.delete([gone])
            return out

        engine._ranked = ranked
        res = engine.run(Query(text=text, size=5))
        assert res.hybrid["feedback"]["ids"] == [h.id for h in plain.hits[1:3]]
        assert len(res.hits) == 5 and all(h.snippet is not None for h in res.hits if h.id != gone)


def test_document_feedback_reads_its_documents_together(store_path, monkeypatch):
    """The feedback documents are read in one store call (``stored_documents``: two requests on OpenSearch
    whatever their number, tests/reranker/test_results.py), not one read each."""
    text = "The river story begins. The music and the river go on."
    with EmbeddedStore(store_path) as store:
        engine = _engine(store)
        batches = []
        real = store.stored_documents
        monkeypatch.setattr(store, "stored_documents", lambda ids: batches.append(list(ids)) or real(ids))
        res = engine.run(Query(text=text, size=5))
        assert batches == [res.hybrid["feedback"]["ids"]] and len(batches[0]) > 1


def test_document_feedback_fetches_each_candidate_once(store_path, monkeypatch):
    """The second search reuses the vectors the first one fetched: no candidate is read twice."""
    text = "The river story begins. The music and the river go on."
    with EmbeddedStore(store_path) as store:
        engine = _engine(store)
        fetched = []
        real = store.fetch_documents
        monkeypatch.setattr(store, "fetch_documents", lambda ids: fetched.extend(ids) or real(ids))
        res = engine.run(Query(text=text, size=5))
        assert res.hybrid["feedback"]["ids"] and fetched
        assert len(fetched) == len(set(fetched))
