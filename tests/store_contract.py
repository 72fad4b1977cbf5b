"""The behavioural contract of :class:`sdr_search.indexer.store.DocumentStore`: :class:`StoreContract`.

Every store's tests subclass it and provide the ``make_store`` fixture (``tests/indexer/test_store_contract.py``:
the embedded store and the OpenSearch store, the latter on a real node); a future store gets the
whole contract by subclassing it too::

    class TestMyStore(StoreContract):
        @pytest.fixture()
        def make_store(self, tmp_path):
            handles = []
            yield lambda name="main": handles.append(MyStore(tmp_path / name)) or handles[-1]
            for h in handles:
                h.close()

Documents are parsed with :func:`sdr_search.core.documents.parse_record` and carry random unit
vectors of dimension 16 (:mod:`factories`). Stores may differ in the order of :meth:`iter_ids` and
:meth:`all_vectors` (insertion order vs id order), so the contract compares those by id.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from factories import (
    AS_GIVEN,
    DIM,
    META,
    assert_corpus_holds,
    assert_reference_equal,
    assert_same_vectors,
    brute_force_best,
    make_doc,
    make_docs,
    planted_query,
    reference_sample,
    unit,
    with_vectors,
)
from sdr_search.core.cache import document_key
from sdr_search.core.documents import Document, parse_record
from sdr_search.core.errors import (
    DocumentNotFoundError,
    DuplicateIdError,
    InvalidDocumentError,
    InvalidInputError,
    ModelMismatchError,
    StoreError,
)
from sdr_search.core.scoring import NormStats
from sdr_search.core.vectors import CorpusVectors, DocVectors
from sdr_search.indexer.store import DocumentStore, IndexMeta, StoreCapabilities

__all__ = ["StoreContract", "stats_for"]


def stats_for(store, ids, shift: float = 0.0) -> dict[str, NormStats]:
    out = {}
    for i, doc_id in enumerate(ids):
        n = store.get(doc_id).vectors.n_paragraphs
        out[doc_id] = NormStats(np.full(n, 0.1 * i + shift), np.full(n, 0.5 + i))
    return out


class StoreContract:
    """What every :class:`DocumentStore` does. A subclass provides ``make_store``."""

    @pytest.fixture()
    def make_store(self):
        """``make(name="main")`` opens a new handle on the store ``name`` of this test (the same
        name gives another handle on the same store); the fixture closes every handle, and
        deletes what the store left outside the test's temporary directory, afterwards."""
        raise NotImplementedError("a store's contract class provides the make_store fixture")

    @pytest.fixture()
    def store(self, make_store):
        s = make_store()
        s.ensure_meta(META)
        return s

    # -- metadata ---------------------------------------------------------------------------------------------
    def test_fresh_store(self, make_store):
        store = make_store()
        assert store.meta() is None
        assert store.ensure_meta(META) == META
        assert store.meta() == META
        assert store.counts() == {"documents": 0, "paragraphs": 0, "sentences": 0}
        info = store.stats_info()
        assert (info.version, info.stale, info.docs_without_stats, info.mode) == (0, False, 0, None)
        assert store.reference() is None
        assert list(store.iter_ids()) == []
        assert store.sentence_knn(unit(np.random.default_rng(0), 2), 3).doc_ids == [[], []]
        with pytest.raises(StoreError, match="no documents"):
            store.all_vectors()

    def test_put_requires_meta(self, make_store):
        with pytest.raises(StoreError, match="ensure_meta"):
            make_store().put(make_docs(1))

    def test_model_mismatch(self, make_store):
        store = make_store()
        store.ensure_meta(META)
        assert store.ensure_meta(IndexMeta("model-a", "tag-a", DIM, {})) == META  # same tag and dim
        other = IndexMeta("model-b", "tag-b", DIM, {})
        with pytest.raises(ModelMismatchError) as err:
            store.ensure_meta(other)
        msg = str(err.value)
        assert "model-a" in msg and "model-b" in msg and "tag-a" in msg and "re-index" in msg
        with pytest.raises(ModelMismatchError):
            store.ensure_meta(IndexMeta("model-a", "tag-a", DIM * 2, {}))
        again = make_store()  # a new handle on the same store reads the recorded model
        assert again.meta() == META
        with pytest.raises(ModelMismatchError):
            again.ensure_meta(other)

    # -- documents ------------------------------------------------------------------------------------------
    def test_put_get_round_trip(self, store):
        items = make_docs(5)
        store.put(items)
        for doc, vec in items:
            got = store.get(doc.id)
            assert got.document == doc
            assert got.document.metadata == {"lang": "en"}
            assert_same_vectors(got.vectors, vec)
            assert got.stats is None
        assert store.counts() == {"documents": 5, "paragraphs": 10, "sentences": sum(v.n_sentences for _, v in items)}
        ids = list(store.iter_ids())
        assert sorted(ids) == [d.id for d, _ in items] and list(store.iter_ids()) == ids  # all, in a stable order
        assert store.content_keys(["d000", "zzz", "d003"]) == {
            "d000": document_key(META.encoder_tag, items[0][0].paragraphs),
            "d003": document_key(META.encoder_tag, items[3][0].paragraphs),
        }
        with pytest.raises(DocumentNotFoundError):
            store.get("zzz")

    def test_put_rejects_bad_input_before_writing(self, store):
        rng = np.random.default_rng(1)
        doc, vec = make_doc("x", rng)
        with pytest.raises(ModelMismatchError, match="dimension"):
            store.put([(doc, DocVectors(unit(rng, vec.n_sentences, dim=DIM + 1), vec.par_offsets))])
        with pytest.raises(InvalidDocumentError):
            store.put([(doc, DocVectors(vec.vectors, [0, 1, vec.n_sentences]))])  # grouped 1 + 5, not 3 + 3
        with pytest.raises(DuplicateIdError):
            store.put([(doc, vec), (doc, vec)])
        assert store.counts()["documents"] == 0

    def test_put_checks_are_shared(self, store):
        """Every store refuses the same items with the same errors (indexer/validation.py)."""
        rng = np.random.default_rng(3)
        doc, vec = make_doc("y", rng)
        bad = vec.vectors.copy()
        bad[1, 2] = np.nan
        with pytest.raises(InvalidDocumentError, match="NaN or infinity"):
            store.put([make_doc("ok", rng), (doc, DocVectors(bad, vec.par_offsets))])
        odd = parse_record({"id": "odd", "paragraphs": ["One sentence. Two sentences."], "score": float("nan")},
                           settings=AS_GIVEN)
        with pytest.raises(InvalidDocumentError, match="JSON"):
            store.put([(odd, DocVectors(unit(rng, 2), [0, 2]))])
        with pytest.raises(InvalidInputError, match="pairs"):
            store.put([(vec, doc)])
        with pytest.raises(ModelMismatchError, match=r"holds dimension 16 \(model model-a\)"):
            store.put([(doc, DocVectors(unit(rng, vec.n_sentences, dim=DIM + 1), vec.par_offsets))])
        assert store.counts()["documents"] == 0  # nothing of a refused put() is written

    def test_long_id_round_trip(self, store):
        rng = np.random.default_rng(2)
        long_id = "é" * 300  # 300 characters, 600 UTF-8 bytes: over OpenSearch's 512-byte _id limit
        item = make_doc(long_id, rng)
        store.put([item, make_doc("short", rng)])
        assert store.get(long_id).document == item[0]
        assert_same_vectors(store.fetch([long_id]).doc(0), item[1])
        assert store.sentence_knn(item[1].vectors[:1], 1).doc_ids == [[long_id]]
        assert long_id in store.content_keys([long_id])
        assert store.delete([long_id]) == 1
        assert sorted(store.iter_ids()) == ["short"]

    def test_replace(self, store):
        rng = np.random.default_rng(2)
        items = make_docs(10, seed=3)
        store.put(items)
        old = items[4][1].vectors
        new_item = with_vectors(items[4], unit(rng, old.shape[0]))
        store.put([new_item])
        assert_same_vectors(store.get("d004").vectors, new_item[1])
        assert store.counts()["documents"] == 10
        hits = store.sentence_knn(old, 10)
        for ids, scores in zip(hits.doc_ids, hits.scores):
            assert len(ids) == len(set(ids))
            if "d004" in ids:  # only through its new vectors, never with the old exact match
                assert scores[ids.index("d004")] < 0.999
        assert store.sentence_knn(new_item[1].vectors, 1).doc_ids == [["d004"]] * old.shape[0]

    def test_delete(self, store):
        items = make_docs(6)
        store.put(items)
        assert store.delete(["d001", "d003", "missing"]) == 2
        assert store.delete(["d001"]) == 0
        assert store.delete([]) == 0
        assert store.counts()["documents"] == 4
        with pytest.raises(DocumentNotFoundError):
            store.get("d001")
        hits = store.sentence_knn(items[1][1].vectors, 4)
        assert all("d001" not in ids for ids in hits.doc_ids)
        assert sorted(store.iter_ids()) == ["d000", "d002", "d004", "d005"]

    def test_second_handle_sees_the_same_store(self, make_store, store):
        items = make_docs(12, seed=4)
        store.put(items[:6])
        store.put(items[6:])
        queries = unit(np.random.default_rng(5), 4)
        before = store.sentence_knn(queries, 5)
        other = make_store()
        assert other.meta() == META
        assert other.counts() == store.counts()
        assert other.get("d007").document == items[7][0]
        after = other.sentence_knn(queries, 5)
        assert before.doc_ids == after.doc_ids
        for a, b in zip(before.scores, after.scores):
            np.testing.assert_allclose(a, b, atol=1e-6)
        other.delete(["d000"])
        with pytest.raises(DocumentNotFoundError):
            store.get("d000")

    # -- retrieval ----------------------------------------------------------------------------------------------
    def test_nested_knn_semantics(self, store):
        rng = np.random.default_rng(6)
        q, planted = planted_query(rng)  # "target" holds q itself, "other" a sentence close to it
        store.put([*planted, *make_docs(20, seed=7)])
        queries = np.stack([q, unit(rng, 1)[0]])
        hits = store.sentence_knn(queries, 5)
        assert hits.doc_ids[0][:2] == ["target", "other"]  # identical sentence first, cosine ~1
        assert hits.scores[0][0] == pytest.approx(1.0, abs=1e-5)
        for ids, scores in zip(hits.doc_ids, hits.scores):
            assert len(ids) == 5 and len(set(ids)) == 5  # each document once per row
            assert scores.dtype == np.float32 and np.all(np.diff(scores) <= 1e-6)
        excluded = store.sentence_knn(queries, 5, exclude_ids=["target"])
        assert excluded.doc_ids[0][0] == "other"
        assert all("target" not in ids for ids in excluded.doc_ids)
        assert all(len(ids) == 5 for ids in excluded.doc_ids)  # the excluded document left no gap
        assert len(store.sentence_knn(queries, 100).doc_ids[0]) == 22  # every document, once
        assert store.sentence_knn(q, 1).doc_ids == [["target"]]  # a single vector is one query row
        with pytest.raises(InvalidInputError):
            store.sentence_knn(queries, 0)
        with pytest.raises(ModelMismatchError):
            store.sentence_knn(np.ones((1, DIM + 2), np.float32), 3)

    def test_knn_scores_are_best_sentence_cosines(self, store):
        items = make_docs(40, seed=8, n_pars=2, n_sents=4)
        store.put(items)
        queries = unit(np.random.default_rng(9), 12)
        ids, best = brute_force_best(queries, items)
        hits = store.sentence_knn(queries, 5)
        recall = []
        for r, (row_ids, row_scores) in enumerate(zip(hits.doc_ids, hits.scores)):
            for doc_id, score in zip(row_ids, row_scores):
                assert score == pytest.approx(best[r, ids.index(doc_id)], abs=1e-5)
            exact = {ids[j] for j in np.argsort(-best[r], kind="stable")[:5]}
            recall.append(len(exact & set(row_ids)) / 5)
        assert np.mean(recall) >= 0.9

    def test_fetch_order_and_unknown_id(self, store):
        items = make_docs(8, seed=10)
        by_id = {d.id: v for d, v in items}
        store.put(items)
        replaced = with_vectors(items[2], unit(np.random.default_rng(1), items[2][1].n_sentences))
        store.put([replaced])
        by_id["d002"] = replaced[1]
        order = ["d005", "d002", "d000", "d007", "d005"]
        cv = store.fetch(order)
        assert cv.ids == tuple(order)
        for k, doc_id in enumerate(order):
            assert_same_vectors(cv.doc(k), by_id[doc_id])
        with pytest.raises(DocumentNotFoundError, match="nope"):
            store.fetch(["d001", "nope"])
        with pytest.raises(InvalidInputError):
            store.fetch([])
        docs = store.fetch_documents(order)  # the same vectors, one document at a time
        assert len(docs) == len(order)
        for doc, doc_id in zip(docs, order):
            assert_same_vectors(doc, by_id[doc_id])
        with pytest.raises(DocumentNotFoundError, match="nope"):
            store.fetch_documents(["d001", "nope"])
        with pytest.raises(InvalidInputError):
            store.fetch_documents([])
        centroids = store.paragraph_centroids(order)  # for the pre-rank: normalised paragraph means
        for c, doc_id in zip(centroids, order):
            v = by_id[doc_id]
            sums = np.stack([v.paragraph(j).sum(axis=0) for j in range(v.n_paragraphs)])
            np.testing.assert_allclose(c, sums / np.linalg.norm(sums, axis=1, keepdims=True), atol=1e-6)
        with pytest.raises(DocumentNotFoundError, match="nope"):
            store.paragraph_centroids(["d001", "nope"])
        with pytest.raises(InvalidInputError):
            store.paragraph_centroids([])

    def test_all_vectors(self, store):
        items = make_docs(7, seed=11)
        store.put(items)
        expected = {d.id: v for d, v in items}
        assert_corpus_holds(store.all_vectors(), expected)
        store.delete(["d003"])
        del expected["d003"]
        assert_corpus_holds(store.all_vectors(), expected)

    def test_lexical_search(self, store):
        items = make_docs(12, seed=20)
        store.put(items)
        hits = store.lexical_search("What does d003 say? Only d003.", 5)
        assert hits.ids[0] == "d003" and hits.scores.dtype == np.float32
        assert np.all(hits.scores > 0) and np.all(np.diff(hits.scores) <= 1e-6)
        assert store.lexical_search(items[7][0].text, 3).ids[0] == "d007"  # a whole document finds itself first
        excluded = store.lexical_search("d003 d005", 5, exclude_ids=["d003"])
        assert excluded.ids[0] == "d005" and "d003" not in excluded.ids
        scored = store.lexical_search("d003", 0, score_ids=["d003", "d004", "nope"])
        assert scored.ids == [] and scored.scored["d003"] > 0 and scored.scored["d004"] == 0.0 and scored.scored["nope"] == 0.0
        assert scored.score_of("d003") == scored.scored["d003"]
        assert store.lexical_search("the and of", 5).ids == []  # stop words only: nothing matches
        store.delete(["d003"])
        assert store.lexical_search("d003", 5).ids == []
        doc, vec = items[4]
        renamed = parse_record({"id": "d004", "paragraphs": ["A zebra crossing. The zebra waited."]}, settings=AS_GIVEN)
        store.put([(renamed, DocVectors(vec.vectors[:2], [0, 2]))])
        assert store.lexical_search("zebra", 5).ids == ["d004"]
        assert "d004" not in store.lexical_search("d004", 5).ids  # its old text is gone
        with pytest.raises(InvalidInputError):
            store.lexical_search("x", -1)

    def test_search_defaults(self, make_store, store):
        assert store.search_defaults() == {}
        recorded = store.set_search_defaults({"method": "hybrid", "fusion": "rrf", "weights": {"bm25": 1, "sdr": 0.5}})
        assert recorded == {"method": "hybrid", "fusion": "rrf", "weights": {"bm25": 1.0, "sdr": 0.5, "mean": 0.0}}
        assert make_store().search_defaults() == recorded
        with pytest.raises(InvalidInputError):
            store.set_search_defaults({"fusion": "borda"})
        assert store.set_search_defaults({}) == {} and make_store().search_defaults() == {}

    # -- statistics and reference ------------------------------------------------------------------------------
    def test_stats_lifecycle(self, make_store, store):
        items = make_docs(3, seed=12)
        ids = [d.id for d, _ in items]
        store.put(items)
        info = store.stats_info()
        assert info.stale and info.docs_without_stats == 3
        stats = stats_for(store, ids)
        info = store.write_stats(stats, mode="sampled", sample_size=100, seed=7)
        assert (info.version, info.stale, info.docs_without_stats) == (1, False, 0)
        assert (info.mode, info.sample_size, info.seed) == ("sampled", 100, 7) and info.computed_at
        got = store.get("d001").stats
        np.testing.assert_array_equal(got.mu, stats["d001"].mu)
        np.testing.assert_array_equal(got.sigma, stats["d001"].sigma)

        # written again with the same content (same sentences, so the same vectors) and a new title:
        # nothing a score depends on changed, so the statistics stay fresh and the document keeps its own
        same = items[1][0]
        store.put([(Document(same.id, same.paragraphs, "A new title", same.metadata), items[1][1])])
        assert not store.stats_info().stale and store.get("d001").stats is not None
        assert store.get("d001").document.title == "A new title"

        changed = make_doc("d001", np.random.default_rng(3), n_sents=4)  # new content: new sentences and vectors
        store.put([changed])
        info = store.stats_info()
        assert info.stale and info.docs_without_stats == 1 and info.version == 1
        assert store.get("d001").stats is None and store.get("d000").stats is not None  # replaced: no old stats

        info = store.write_stats(stats_for(store, ids[:2]), mode="exact", sample_size=None, seed=None)
        assert info.version == 2 and info.stale and info.docs_without_stats == 0  # d002 has version-1 stats
        info = store.write_stats(stats_for(store, ids, 1.0), mode="exact", sample_size=None, seed=None)
        assert (info.version, info.stale, info.mode) == (3, False, "exact")

        with pytest.raises(InvalidInputError, match="paragraphs"):
            store.write_stats({"d000": NormStats(np.zeros(5), np.ones(5))}, mode="exact", sample_size=None, seed=None)
        assert store.stats_info().version == 3  # the failed refresh changed nothing
        store.delete(["d002"])
        assert store.stats_info().stale
        info = store.write_stats({**stats_for(store, ids[:2]), "gone": NormStats(np.zeros(1), np.ones(1))},
                                 mode="exact", sample_size=None, seed=None)
        assert info.stale  # an id vanished between computing and writing
        assert make_store().stats_info().version == 4

    def test_reference_round_trip(self, make_store, store):
        items = make_docs(5, seed=13)
        store.put(items)
        corpus = CorpusVectors.from_docs([d.id for d, _ in items], [v for _, v in items])
        ref = reference_sample(corpus, [1, 2, 7], seed=42)
        store.set_reference(ref)
        store.delete(list(ref.doc_ids))  # the sample keeps its own copy of the vectors
        got = make_store().reference()
        assert got.doc_ids == ("d000", "d001", "d003")
        np.testing.assert_array_equal(got.paragraph_index, [1, 0, 1])
        assert_reference_equal(got, ref)
        newer = reference_sample(corpus, [9, 4], seed=43)  # a new sample replaces the old one entirely
        store.set_reference(newer)
        assert_reference_equal(store.reference(), newer)

    def test_a_malformed_reference_sample_is_refused(self, store):
        """Both stores check a sample with the one check (:func:`check_reference`) before writing any of it."""
        items = make_docs(3, seed=14)
        store.put(items)
        corpus = CorpusVectors.from_docs([d.id for d, _ in items], [v for _, v in items])
        ref = reference_sample(corpus, [0, 2], seed=1)
        store.set_reference(ref)
        short = replace(ref, paragraph_index=ref.paragraph_index[:1])
        three = reference_sample(corpus, [0, 1, 2], seed=1)  # two owners, three paragraphs: two in one "document"
        cv = three.vectors
        grouped = replace(three, doc_ids=three.doc_ids[:2], paragraph_index=three.paragraph_index[:2],
                          vectors=CorpusVectors(cv.ids[:2], cv.vectors, cv.par_offsets, np.asarray([0, 1, 3])))
        for bad, message in ((short, "one entry per paragraph"), (grouped, "its own document")):
            with pytest.raises(InvalidInputError, match=message):
                store.set_reference(bad)
        assert_reference_equal(store.reference(), ref)  # the recorded sample is untouched

    def test_query_state_reads_everything_a_query_needs(self, make_store, store):
        state = store.query_state()  # a store with a model and nothing else
        assert (state.meta, state.search_defaults, state.reference) == (META, {}, None)
        assert state.stats == store.stats_info()
        assert not state.reference_current and state.reference_changed  # absent, not "current"
        items = make_docs(5, seed=14)
        store.put(items)
        corpus = CorpusVectors.from_docs([d.id for d, _ in items], [v for _, v in items])
        ref = reference_sample(corpus, [0, 3, 8], seed=5)
        store.set_reference(ref)
        store.write_stats(stats_for(store, [d.id for d, _ in items]), mode="sampled", sample_size=3, seed=5)
        defaults = store.set_search_defaults({"method": "hybrid"})
        state = make_store().query_state()  # another handle: what was recorded, not a cache
        assert (state.meta, state.search_defaults) == (META, defaults)
        assert state.stats == store.stats_info() and (state.stats.version, state.stats.stale) == (1, False)
        assert_reference_equal(state.reference, ref)
        assert not state.reference_current and state.reference_changed
        cached = store.query_state(reference_version=state.stats.version)  # the caller's copy is current
        assert cached.reference is None and cached.reference_current and not cached.reference_changed
        assert (cached.meta, cached.search_defaults, cached.stats) == (META, defaults, state.stats)
        older = store.query_state(reference_version=state.stats.version - 1)
        assert_reference_equal(older.reference, ref)
        assert not older.reference_current
        store.put(make_docs(1, seed=15, prefix="n"))  # a write marks the statistics stale, same version
        stale = store.query_state(reference_version=state.stats.version)
        assert stale.stats.stale and stale.stats.docs_without_stats == 1 and stale.reference_current
        assert stale.stats == store.stats_info()
        with pytest.raises(InvalidInputError):
            store.set_search_defaults({"fusion": "borda"})
        assert store.query_state().search_defaults == defaults  # a refused change changed nothing
        for version in (None, state.stats.version):  # the interface's default (built from the single reads) agrees
            base = DocumentStore.query_state(store, reference_version=version)
            own = store.query_state(reference_version=version)
            assert (base.meta, base.search_defaults, base.stats, base.reference_current) == \
                (own.meta, own.search_defaults, own.stats, own.reference_current)
            assert (base.reference is None) == (own.reference is None)
        # the query's indexed sources read with the state (issue 44): as get() reads them, absent ones left out
        first = items[0][0].id
        own = store.query_state(reference_version=state.stats.version, ids=[first, "absent", first])
        base = DocumentStore.query_state(store, reference_version=state.stats.version, ids=[first, "absent"])
        assert list(own.documents) == list(base.documents) == [first]
        for got in (own.documents[first], base.documents[first]):
            want = store.get(first)
            assert got.document == want.document
            np.testing.assert_array_equal(got.vectors.vectors, want.vectors.vectors)
            np.testing.assert_array_equal(got.stats.mu, want.stats.mu)
        assert store.query_state().documents == {}

    # -- capabilities ---------------------------------------------------------------------------------------------
    def test_capabilities_are_declared_and_keep_their_promise(self, store):
        caps = store.capabilities
        assert isinstance(caps, StoreCapabilities)
        for flag, method in {"metadata_lookup": "metadata_of", "lexical_refresh": "refresh_lexical",
                             "cheap_centroids": "paragraph_centroids", "filtered_knn": "ids_matching"}.items():
            overridden = getattr(type(store), method) is not getattr(DocumentStore, method)
            assert getattr(caps, flag) == overridden, f"{flag} is declared {getattr(caps, flag)} but {method} is " \
                f"{'its own' if overridden else 'the interface default'}"
        items = make_docs(4, seed=18)
        store.put(items)
        rng = np.random.default_rng(19)
        tagged = parse_record({"id": "t1", "paragraphs": ["One tagged sentence. Another one."], "lang": "de",
                               "year": 2020, "tags": ["a", "b"]}, settings=AS_GIVEN)
        store.put([(tagged, DocVectors(unit(rng, 2), [0, 2]))])
        wanted = ["t1", "nope", "d002"]
        expected = {"t1": {"lang": "de", "year": 2020, "tags": ["a", "b"]}, "d002": {"lang": "en"}}
        assert store.metadata_of(wanted) == expected  # bulk or the default: same answer, missing ids left out
        assert DocumentStore.metadata_of(store, wanted) == expected
        assert store.metadata_of([]) == {}
        if caps.lexical_refresh:
            assert store.refresh_lexical() == 5
        else:
            with pytest.raises(StoreError, match="lexical_refresh"):
                store.refresh_lexical()
        ids = [d.id for d, _ in items]
        for own, default in zip(store.paragraph_centroids(ids), DocumentStore.paragraph_centroids(store, ids)):
            np.testing.assert_allclose(own, default, atol=1e-6)

    # -- a metadata filter inside the candidate stage (capabilities.filtered_knn) ----------------------------
    def test_a_metadata_filter_restricts_knn_lexical_search_and_ids_matching(self, store):
        if not store.capabilities.filtered_knn:
            pytest.skip("this store filters no candidate search (capabilities.filtered_knn is false)")
        import dataclasses

        from sdr_search.core.filters import matches

        def metadata(i: int) -> dict:  # strings, integers, floats, booleans, lists, a rare field
            return {"court": ["supreme", "high", "Low Court"][i % 3], "year": 2000 + i % 4, "score": 0.5 * (i % 3),
                    "flag": i % 2 == 0, "tags": ["a", "b"] if i % 5 == 0 else ["c"], "rare": i % 20 == 7}

        items = [(dataclasses.replace(d, metadata=metadata(i)), v) for i, (d, v) in enumerate(make_docs(60, seed=23))]
        store.put(items)
        by_id = {d.id: d.metadata for d, _ in items}
        filters = [{"court": "supreme"}, {"year": [2001, 2002]}, {"year": 2001.0, "flag": False}, {"flag": True},
                   {"score": [0.5, 1]}, {"tags": "a"}, {"rare": True}, {"court": ["high", "Low Court"], "year": [2000, 2003]},
                   {"rare": 1}, {"year": "2001"}, {"missing": 1}, {"year": 2001.5}]
        q = np.concatenate([items[0][1].vectors[:2], items[31][1].vectors[:1]])
        for flt in filters:
            want = sorted(i for i, m in by_id.items() if matches(m, flt))
            assert sorted(store.ids_matching(flt)) == want, flt
            for limit in (0, 1, 7):  # at most limit of them, each a match
                some = store.ids_matching(flt, limit=limit)
                assert len(some) == min(limit, len(want)) and set(some) <= set(want), (flt, limit)
            allowed = [i for i in want if i != "d000"]
            ids, best = brute_force_best(q, [(d, v) for d, v in items if d.id in set(allowed)]) if allowed else ([], None)
            hits = store.sentence_knn(q, 4, exclude_ids=["d000"], filter=flt)
            for r, got in enumerate(hits.doc_ids):
                expected = [ids[j] for j in np.argsort(-best[r], kind="stable")[:4]] if allowed else []
                assert got == expected, (flt, r)
                if allowed:
                    np.testing.assert_allclose(hits.scores[r], np.sort(best[r])[::-1][:len(got)], atol=1e-4)
        # filter and allowed ids together: the documents in both
        both = store.sentence_knn(q, 10, filter={"court": "supreme"}, allowed_ids=["d003", "d004", "d006", "d009"])
        assert all(sorted(row) == ["d003", "d006", "d009"] for row in both.doc_ids)
        assert store.sentence_knn(q, 3, allowed_ids=[]).doc_ids == [[], [], []]
        # lexical: the top k among the matching documents, with the unfiltered scores
        text = items[7][0].text
        every = store.lexical_search(text, 0, score_ids=list(by_id))
        for flt in ({"rare": True}, {"court": "high", "flag": False}, {"missing": 1}):
            matching = [i for i, m in by_id.items() if matches(m, flt) and i != "d007"]
            ranked = sorted((i for i in matching if every.scored[i] > 0), key=lambda i: (-every.scored[i], i))[:5]
            got = store.lexical_search(text, 5, exclude_ids=["d007"], score_ids=["d001"], filter=flt)
            assert set(got.ids) == set(ranked) and len(got.ids) == len(ranked), flt
            np.testing.assert_allclose(got.scores, [every.scored[i] for i in got.ids], rtol=1e-4)
            assert got.score_of("d001") == pytest.approx(every.scored["d001"], rel=1e-4)  # scored whatever the filter

    # -- the metadata and filter contract (sdr_search.core.metadata, sdr_search.core.filters; docs/http-api.md) --
    # One contract on every store: any JSON value under any key (no type fixed by a first writer), nested
    # objects and dotted keys both named by their dotted path, typed equality (5 == 5.0, 5 != "5", 1 != true),
    # a list matching any item, null matching nothing, and the limits checked before any work.
    def _put_metadata(self, store, metadatas: list, *, seed: int = 31, first_alone: bool = True) -> list[str]:
        import dataclasses

        items = [(dataclasses.replace(d, metadata=m), v) for (d, v), m in zip(make_docs(len(metadatas), seed=seed), metadatas)]
        if first_alone:  # the first in a put() of its own: it must not fix the type of its keys for the others
            store.put(items[:1])
            store.put(items[1:])
        else:
            store.put(items)
        for d, _ in items:
            assert store.get(d.id).document.metadata == d.metadata  # stored as given (dotted keys not expanded)
        return [d.id for d, _ in items]

    @staticmethod
    def _matching_everywhere(store, flt: dict, n: int, probe: DocVectors) -> dict[str, list[str]]:
        """The documents ``flt`` matches according to each filtered path of the store: ids_matching, the
        filtered nested k-NN of ``probe``'s first sentence (k = every document), the filtered lexical
        search and, where the store runs it, the candidate stage (sdr_candidates)."""
        got = {"ids_matching": sorted(store.ids_matching(flt))}
        hits = store.sentence_knn(probe.vectors[:1], n, filter=flt)
        got["sentence_knn"] = sorted(hits.doc_ids[0])
        got["lexical_search"] = sorted(store.lexical_search("Sentence says", n, filter=flt).ids)
        if store.capabilities.sdr_candidates:
            got["sdr_candidates"] = sorted(store.sdr_candidates(probe, n, n, filter=flt)[0])
        return got

    def test_metadata_values_of_any_type_under_one_key_and_typed_equality(self, store):
        """Case 11 of issue 41: ``5`` then ``"five"`` under one key are both stored (OpenSearch fixed the
        key's type at its first writer); ``5`` equals ``5.0`` but not ``"5"``, ``1`` is not ``true``,
        a list matches any item, null and an empty list match nothing, on every filtered path."""
        metas = [{"k": 5}, {"k": "five"}, {"k": 5.0}, {"k": "5"}, {"k": True}, {"k": 1}, {"k": None},
                 {"k": [5, "x"]}, {"k": []}, {"k": {"n": 5}}, {"k": 0.5}, {"k": "true"}]
        ids = self._put_metadata(store, metas)
        d, probe = dict(enumerate(ids)), store.get(ids[0]).vectors
        expect = {
            '{"k": 5}': [d[0], d[2], d[7]], '{"k": 5.0}': [d[0], d[2], d[7]], '{"k": "5"}': [d[3]],
            '{"k": "five"}': [d[1]], '{"k": 1}': [d[5]], '{"k": true}': [d[4]], '{"k": "true"}': [d[11]],
            '{"k": [1, "x"]}': [d[5], d[7]], '{"k": []}': [], '{"k.n": 5}': [d[9]], '{"k": 0.5}': [d[10]],
            '{"k": false}': [], '{"missing": 5}': [], '{"k": [5, 0.5, "5"]}': [d[0], d[2], d[3], d[7], d[10]],
        }
        import json

        for text, want in expect.items():
            flt = json.loads(text)
            for path, got in self._matching_everywhere(store, flt, len(ids), probe).items():
                assert got == sorted(want), (text, path)

    def test_nested_objects_and_dotted_keys_are_one_path(self, store):
        """Case 11: a nested object and a dotted key are both named by the dotted path, on every store
        (OpenSearch matched ``{"a.b.c.d": 1}`` on a nested object and the embedded store did not; a dotted
        key was refused by one and accepted by the other). A list of objects gives each object's values."""
        metas = [{"a": {"b": {"c": {"d": 1}}}}, {"a.b.c.d": 1}, {"a": {"b.c": {"d": 1}}}, {"a.b": 2},
                 {"a": {"b": 2}}, {"a": [{"b": 3}, {"b": [4, "four"]}]}, {"a": "x"}, {"a.b": {"c": "y"}, "a": {"b": 5}}]
        ids = self._put_metadata(store, metas)
        d, probe = dict(enumerate(ids)), store.get(ids[0]).vectors
        expect = [({"a.b.c.d": 1}, [d[0], d[1], d[2]]), ({"a.b": 2}, [d[3], d[4]]), ({"a.b": [3, "four"]}, [d[5]]),
                  ({"a.b": 4}, [d[5]]), ({"a": "x"}, [d[6]]), ({"a": 1}, []), ({"a.b.c": 1}, []), ({"a.b.c": "y"}, [d[7]]),
                  ({"a.b": 5}, [d[7]]), ({"a.b": [5, 2], "a.b.c": "y"}, [d[7]])]
        for flt, want in expect:
            for path, got in self._matching_everywhere(store, flt, len(ids), probe).items():
                assert got == sorted(want), (flt, path)

    def test_metadata_keys_are_not_index_fields(self, store):
        """Case 11: 940 metadata keys in one document, then 940 new keys in each of two more: every
        write succeeds (OpenSearch answered "Limit of total fields [1000] has been exceeded" for any new
        key once the first document had mapped 940, and for good: deleting documents did not help)."""
        metas = [{f"{p}{i}": i for i in range(940)} for p in ("k", "j", "m")]
        ids = self._put_metadata(store, metas[:2])
        store.delete(ids[:2])
        ids = self._put_metadata(store, metas, seed=32, first_alone=False)
        assert sorted(store.ids_matching({"j939": 939})) == [ids[1]]
        assert sorted(store.ids_matching({"m5": [5, 6], "m6": 6})) == [ids[2]]

    def test_a_filter_follows_replaced_and_deleted_metadata(self, store):
        """A filter sees a document's current metadata: a replaced value, a value of another type
        under the same key, a deleted document (the embedded store keeps terms across writes)."""
        import dataclasses

        ids = self._put_metadata(store, [{"k": 1, "t": "x"}, {"k": 2}, {"k": 3}])
        assert store.ids_matching({"k": [1, 2]}) == ids[:2]
        (doc, vec), = [(d, v) for d, v in make_docs(3, seed=31) if d.id == ids[1]]
        store.put([(dataclasses.replace(doc, metadata={"k": "2", "t": "x"}), vec)])
        store.delete([ids[2]])
        assert store.ids_matching({"k": [1, 2, 3]}) == ids[:1]
        assert store.ids_matching({"k": "2"}) == [ids[1]] and sorted(store.ids_matching({"t": "x"})) == ids[:2]

    def test_metadata_within_the_limits_is_written_and_filtered(self, store):
        """The largest metadata the contract accepts: 1,000 keys, 8 levels of nesting, a key of 256
        characters, a path of 1,024 characters, 10,000 values; strings of any length match exactly."""
        deep: dict = {"leaf": "deep"}
        for _ in range(7):
            deep = {"n": deep}  # n.n.n.n.n.n.n.leaf: 8 levels
        long_key = "k" * 256
        long_path = {"p" * 255: {"q" * 255: {"r" * 255: {"s" * 255: "far"}}}}  # 1,023 characters
        long_text = "word " * 2000
        metas = [{f"k{i}": i for i in range(1000)}, deep, {long_key: "long"},
                 long_path, {"many": list(range(10_000))}, {"text": long_text}]
        ids = self._put_metadata(store, metas, first_alone=False)
        assert store.ids_matching({"k999": 999}) == [ids[0]]
        assert store.ids_matching({"n.n.n.n.n.n.n.leaf": "deep"}) == [ids[1]]
        assert store.ids_matching({long_key: "long"}) == [ids[2]]
        assert store.ids_matching({".".join(["p" * 255, "q" * 255, "r" * 255, "s" * 255]): "far"}) == [ids[3]]
        assert store.ids_matching({"many": 9_999}) == [ids[4]]
        assert store.ids_matching({"text": long_text}) == [ids[5]]
        assert store.ids_matching({"text": long_text + "x"}) == []

    @pytest.mark.parametrize("metadata, named", [
        ({f"k{i}": i for i in range(1001)}, "k1000"),  # 1,001 keys
        ({"a": {f"k{i}": i for i in range(600)}, "b": {f"k{i}": i for i in range(399)}}, "b.k398"),  # keys at any depth count
        ({"n": {"n": {"n": {"n": {"n": {"n": {"n": {"n": {"x": 1}}}}}}}}}, "n.n.n.n.n.n.n.n.x"),  # 9 levels
        ({"a": [[[[[[[[1]]]]]]]]}, "a"),  # lists count as levels too
        ({"k" * 257: 1}, "k" * 40),  # a key of 257 characters
        ({"p" * 256: {"q" * 256: {"r" * 256: {"s" * 256: 1}}}}, "p" * 40),  # a path of 1,027 characters
        ({"": 1}, "''"),  # an empty key
        ({1: "one"}, "1"),  # a key that is not a string
        ({"many": list(range(10_001))}, "many"),  # 10,001 values
        ({"s": {1, 2}}, "s"),  # not a JSON value
    ])
    def test_metadata_over_the_limits_is_refused_before_writing(self, store, metadata, named):
        """Every limit is checked before anything is written, with the key (or path) named."""
        import dataclasses

        (ok, ok_vec), (doc, vec) = make_docs(2, seed=33)
        with pytest.raises(InvalidDocumentError) as err:
            store.put([(ok, ok_vec), (dataclasses.replace(doc, metadata=metadata), vec)])
        assert named in str(err.value) and "metadata" in str(err.value), str(err.value)
        assert store.counts()["documents"] == 0

    @pytest.mark.parametrize("flt, named", [
        ({"year": list(range(10_000))}, "'year'"),  # case 8 of issue 41: a 500 from OpenSearch, a 200 embedded
        ({"year": list(range(1001))}, "'year'"),
        ({f"f{i}": 1 for i in range(17)}, "17"),
        ({"year": None}, "'year'"),
        ({"year": {"gte": 3}}, "'year'"),
        ({"year": [[1, 2]]}, "'year'"),
        ({"year": float("nan")}, "'year'"),
        ({"": 1}, "''"),
        ({"x" * 1025: 1}, "x" * 40),
    ])
    def test_a_filter_over_the_limits_is_refused_by_every_filtered_path(self, store, flt, named):
        """One bound on both stores, checked before any search: at most 16 fields, at most 1,000 values
        per field, a value is a string, a number or a boolean (or a list of them), a field a path of at
        most 1,024 characters. Each path refuses with :class:`InvalidInputError` naming the field."""
        store.put(make_docs(2, seed=34))
        probe = store.get("d000").vectors
        calls = {"ids_matching": lambda: store.ids_matching(flt),
                 "sentence_knn": lambda: store.sentence_knn(probe.vectors[:1], 2, filter=flt),
                 "lexical_search": lambda: store.lexical_search("Sentence says", 2, filter=flt)}
        if store.capabilities.sdr_candidates:
            calls["sdr_candidates"] = lambda: store.sdr_candidates(probe, 2, 2, filter=flt)
        for path, call in calls.items():
            with pytest.raises(InvalidInputError) as err:
                call()
            assert named in str(err.value) and "filter" in str(err.value), (path, str(err.value))

    def test_a_filter_of_a_thousand_values_answers_on_every_filtered_path(self, store):
        """The bound itself is served: one field of 1,000 values, and 16 fields."""
        ids = self._put_metadata(store, [{"year": 2000 + i, **{f"f{j}": j for j in range(16)}} for i in range(3)],
                                 first_alone=False)
        probe = store.get(ids[0]).vectors
        years = list(range(1001, 2001))  # 1,000 values, 2000 among them
        for flt, want in (({"year": years}, [ids[0]]), ({f"f{j}": j for j in range(16)}, ids),
                          ({"year": years, **{f"f{j}": j for j in range(15)}}, [ids[0]])):
            for path, got in self._matching_everywhere(store, flt, 3, probe).items():
                assert got == sorted(want), (path, len(flt))
