"""Tests of the embedded store (sdr_search.indexer.embedded): round trips, nested k-NN, statistics,
reference sample, compaction, float16, repairs (all ``unit``), and a kill -9 crash test
(``integration``: it runs a writer subprocess)."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from factories import (
    DIM,
    META,
    assert_reference_equal,
    brute_force_best,
    make_doc,
    make_docs,
    planted_query,
    reference_sample,
    unit,
    with_vectors,
)
from sdr_search.indexer.embedded import EmbeddedStore, library_versions
from sdr_search.indexer.settings import EmbeddedStoreSettings
from sdr_search.indexer.store import IndexMeta
from sdr_search.core.cache import document_key
from sdr_search.core.documents import Document
from sdr_search.core.errors import (
    DocumentNotFoundError,
    IndexNotFoundError,
    InvalidInputError,
    ModelMismatchError,
    StoreError,
)
from sdr_search.core.scoring import NormStats
from sdr_search.core.vectors import CorpusVectors, DocVectors


# -- helpers ----------------------------------------------------------------------------------
def open_store(path: Path, **kw) -> EmbeddedStore:
    store = EmbeddedStore(path, create=True, **kw)
    store.ensure_meta(META)
    return store


def brute_force_top(queries: np.ndarray, items, k: int) -> list[list[str]]:
    """Exact nested k-NN: documents ranked by their best sentence."""
    ids, best = brute_force_best(queries, items)
    return [[ids[j] for j in np.argsort(-row, kind="stable")[:k]] for row in best]


def answers(store: EmbeddedStore, queries: np.ndarray, k: int = 5):
    hits = store.sentence_knn(queries, k)
    return hits.doc_ids, [s.copy() for s in hits.scores]


# -- basics -------------------------------------------------------------------------------------
@pytest.mark.unit
def test_missing_store_raises_index_not_found(tmp_path):
    with pytest.raises(IndexNotFoundError, match="sdr index") as err:
        EmbeddedStore(tmp_path / "nope")
    assert str(tmp_path / "nope") in str(err.value)


@pytest.mark.unit
def test_init_is_lazy(tmp_path):
    store = EmbeddedStore(tmp_path / "s", create=True)
    assert not (tmp_path / "s").exists()
    assert store.meta() is None
    assert (tmp_path / "s" / "store.sqlite").exists()
    store.close()


@pytest.mark.unit
def test_put_requires_meta(tmp_path):
    with EmbeddedStore(tmp_path / "s", create=True) as store, pytest.raises(StoreError, match="ensure_meta"):
        store.put(make_docs(1))


@pytest.mark.unit
def test_put_get_round_trip(tmp_path):
    items = make_docs(5)
    with open_store(tmp_path / "s") as store:
        store.put(items)
        for doc, vec in items:
            got = store.get(doc.id)
            assert got.document == doc
            assert got.document.metadata == {"lang": "en"}
            np.testing.assert_array_equal(got.vectors.vectors, vec.vectors)
            np.testing.assert_array_equal(got.vectors.par_offsets, vec.par_offsets)
            assert got.stats is None
        assert store.counts() == {"documents": 5, "paragraphs": 10, "sentences": sum(v.n_sentences for _, v in items)}
        assert list(store.iter_ids()) == [d.id for d, _ in items]
        keys = store.content_keys(["d000", "zzz"])
        assert keys == {"d000": document_key(META.encoder_tag, items[0][0].paragraphs)}
        with pytest.raises(DocumentNotFoundError):
            store.get("zzz")


@pytest.mark.unit
def test_put_rejects_wrong_dimension(tmp_path):
    rng = np.random.default_rng(1)
    doc, vec = make_doc("x", rng)
    bad = DocVectors(unit(rng, vec.n_sentences, dim=DIM + 1), vec.par_offsets)
    with open_store(tmp_path / "s") as store, pytest.raises(ModelMismatchError, match="dimension"):
        store.put([(doc, bad)])


@pytest.mark.unit
def test_update_replaces_and_never_returns_stale_rows(tmp_path):
    rng = np.random.default_rng(2)
    items = make_docs(10, seed=3)
    with open_store(tmp_path / "s") as store:
        store.put(items)
        old = items[4][1].vectors
        new_item = with_vectors(items[4], unit(rng, old.shape[0]))
        store.put([new_item])
        np.testing.assert_array_equal(store.get("d004").vectors.vectors, new_item[1].vectors)
        assert store.counts()["documents"] == 10
        assert store.storage_info()["dead_rows"] == old.shape[0]
        hits = store.sentence_knn(old, 10)
        for ids, scores in zip(hits.doc_ids, hits.scores):
            assert len(ids) == len(set(ids))
            if "d004" in ids:  # may appear through its *new* vectors, never with the old exact match
                assert scores[ids.index("d004")] < 0.999
        hits = store.sentence_knn(new_item[1].vectors, 1)
        assert all(ids == ["d004"] for ids in hits.doc_ids)
        assert list(store.iter_ids()).index("d004") == 4  # a replaced document keeps its place


@pytest.mark.unit
def test_delete(tmp_path):
    items = make_docs(6)
    with open_store(tmp_path / "s") as store:
        store.put(items)
        assert store.delete(["d001", "d003", "missing"]) == 2
        assert store.delete(["d001"]) == 0
        assert store.counts()["documents"] == 4
        with pytest.raises(DocumentNotFoundError):
            store.get("d001")
        hits = store.sentence_knn(items[1][1].vectors, 4)
        assert all("d001" not in ids for ids in hits.doc_ids)
        assert list(store.iter_ids()) == ["d000", "d002", "d004", "d005"]


@pytest.mark.unit
def test_reopen_gives_identical_answers(tmp_path):
    items = make_docs(40, seed=4)
    queries = unit(np.random.default_rng(5), 8)
    with open_store(tmp_path / "s") as store:
        store.put(items[:20])
        store.put(items[20:])
        before = answers(store, queries)
        counts, got = store.counts(), store.get("d017")
    with EmbeddedStore(tmp_path / "s") as store:
        after = answers(store, queries)
        assert store.counts() == counts
        again = store.get("d017")
        assert again.document == got.document
        np.testing.assert_array_equal(again.vectors.vectors, got.vectors.vectors)
        assert store.meta() == META
    assert before[0] == after[0]
    for a, b in zip(before[1], after[1]):
        np.testing.assert_array_equal(a, b)


@pytest.mark.unit
def test_second_handle_sees_writes_of_the_first(tmp_path):
    items = make_docs(6)
    writer = open_store(tmp_path / "s")
    reader = EmbeddedStore(tmp_path / "s")
    try:
        writer.put(items[:3])
        assert reader.counts()["documents"] == 3
        assert reader.sentence_knn(items[0][1].vectors[:1], 1).doc_ids == [["d000"]]
        writer.put(items[3:])
        writer.delete(["d000"])
        assert reader.sentence_knn(items[5][1].vectors[:1], 1).doc_ids == [["d005"]]
        with pytest.raises(DocumentNotFoundError):
            reader.get("d000")
        reader.put([items[0]])
        assert writer.get("d000").document == items[0][0]
        assert writer.sentence_knn(items[0][1].vectors[:1], 1).doc_ids == [["d000"]]
    finally:
        writer.close()
        reader.close()


@pytest.mark.unit
def test_read_only(tmp_path):
    items = make_docs(4)
    with open_store(tmp_path / "s") as store:
        store.put(items)
    with EmbeddedStore(tmp_path / "s", read_only=True) as store:
        assert store.ensure_meta(META) == META
        assert store.sentence_knn(items[2][1].vectors[:1], 1).doc_ids == [["d002"]]
        with pytest.raises(StoreError, match="read-only"):
            store.put(items[:1])
        with pytest.raises(StoreError, match="read-only"):
            store.delete(["d000"])


# -- nested k-NN --------------------------------------------------------------------------------
@pytest.mark.unit
def test_nested_knn_semantics(tmp_path):
    rng = np.random.default_rng(6)
    q, planted = planted_query(rng)  # "target" holds q itself, "other" a sentence close to it
    with open_store(tmp_path / "s") as store:
        store.put([*planted, *make_docs(20, seed=7)])
        queries = np.stack([q, unit(rng, 1)[0]])
        hits = store.sentence_knn(queries, 5)
        assert hits.doc_ids[0][:2] == ["target", "other"]
        assert hits.scores[0][0] == pytest.approx(1.0, abs=1e-5)
        assert hits.scores[0].dtype == np.float32
        for ids, scores in zip(hits.doc_ids, hits.scores):
            assert len(ids) == 5 and len(set(ids)) == 5
            assert np.all(np.diff(scores) <= 1e-7)
        excluded = store.sentence_knn(queries, 5, exclude_ids=["target"])
        assert excluded.doc_ids[0][0] == "other"
        assert all("target" not in ids for ids in excluded.doc_ids)
        assert len(store.sentence_knn(queries, 100).doc_ids[0]) == 22  # every document once
        one = store.sentence_knn(q, 1)  # a single vector is one query row
        assert one.doc_ids == [["target"]]
        with pytest.raises(InvalidInputError):
            store.sentence_knn(queries, 0)
        with pytest.raises(ModelMismatchError):
            store.sentence_knn(np.ones((1, DIM + 2), np.float32), 3)


@pytest.mark.unit
@pytest.mark.parametrize("rounds", [1, 2])
def test_knn_rounds_for_rows_whose_hits_crowd_into_one_document(tmp_path, rounds):
    rng = np.random.default_rng(11)
    q = unit(rng, 1)[0]
    crowd = make_doc("crowd", rng, n_pars=3, n_sents=6)
    near = q + 0.05 * unit(rng, 18)  # all 18 sentences of "crowd" lie next to the query
    near /= np.linalg.norm(near, axis=1, keepdims=True)
    items = [with_vectors(crowd, near), *make_docs(30, seed=12, n_sents=3)]
    settings = EmbeddedStoreSettings(knn_oversample=2, knn_rounds=rounds)
    with open_store(tmp_path / "s", settings=settings) as store:
        store.put(items)
        hits = store.sentence_knn(np.stack([q, unit(rng, 1)[0]]), 5)
    if rounds == 1:  # the 10 hits of one search are all "crowd" sentences: that row keeps one document
        assert hits.doc_ids[0] == ["crowd"]
    else:  # a second search with 4x the hits finds the next documents
        assert hits.doc_ids[0][0] == "crowd"
        assert set(hits.doc_ids[0]) == set(brute_force_top(q[None], items, 5)[0])
    assert len(hits.doc_ids[1]) == 5  # a row with spread-out neighbours gets k documents in one search


@pytest.mark.unit
def test_knn_on_empty_store(tmp_path):
    with open_store(tmp_path / "s") as store:
        hits = store.sentence_knn(unit(np.random.default_rng(0), 2), 3)
        assert hits.doc_ids == [[], []]


@pytest.mark.unit
def test_knn_recall_vs_brute_force(tmp_path):
    items = make_docs(200, seed=8, n_pars=2, n_sents=5)  # 2000 sentences
    queries = unit(np.random.default_rng(9), 50)
    with open_store(tmp_path / "s") as store:
        store.put(items)
        hits = store.sentence_knn(queries, 10)
    exact = brute_force_top(queries, items, 10)
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(hits.doc_ids, exact)])
    assert recall >= 0.95


# -- fetch / all_vectors -------------------------------------------------------------------------
@pytest.mark.unit
def test_fetch_order_and_unknown_id(tmp_path):
    items = make_docs(8, seed=10)
    by_id = {d.id: v for d, v in items}
    with open_store(tmp_path / "s") as store:
        store.put(items)
        store.put([with_vectors(items[2], unit(np.random.default_rng(1), items[2][1].n_sentences))])
        by_id["d002"] = store.get("d002").vectors
        order = ["d005", "d002", "d000", "d007", "d005"]
        cv = store.fetch(order)
        assert cv.ids == tuple(order)
        assert cv.vectors.dtype == np.float32
        for k, doc_id in enumerate(order):
            np.testing.assert_array_equal(cv.doc(k).vectors, by_id[doc_id].vectors)
            np.testing.assert_array_equal(cv.doc(k).par_offsets, by_id[doc_id].par_offsets)
        with pytest.raises(DocumentNotFoundError, match="nope"):
            store.fetch(["d001", "nope"])
        with pytest.raises(InvalidInputError):
            store.fetch([])
        views = store.fetch_documents(order)
        assert all(not v.vectors.flags.writeable for v in views)  # memory-map views, not copies
        assert [v.vectors.tolist() for v in views] == [cv.doc(k).vectors.tolist() for k in range(len(order))]


def _assert_corpus_equal(got: CorpusVectors, expected: CorpusVectors) -> None:
    assert got.ids == expected.ids
    assert got.vectors.dtype == np.float32
    np.testing.assert_array_equal(got.vectors, expected.vectors)
    np.testing.assert_array_equal(got.par_offsets, expected.par_offsets)
    np.testing.assert_array_equal(got.doc_par_offsets, expected.doc_par_offsets)


@pytest.mark.unit
def test_all_vectors_equals_concatenation(tmp_path):
    items = make_docs(7, seed=11)
    with open_store(tmp_path / "s") as store:
        with pytest.raises(StoreError, match="no documents"):
            store.all_vectors()
        store.put(items)
        expected = CorpusVectors.from_docs([d.id for d, _ in items], [v for _, v in items])
        _assert_corpus_equal(store.all_vectors(), expected)
        store.delete(["d003"])
        _assert_corpus_equal(store.all_vectors(), expected.subset([0, 1, 2, 4, 5, 6]))


# -- metadata, statistics, reference ----------------------------------------------------------
@pytest.mark.unit
def test_model_mismatch_message(tmp_path):
    with open_store(tmp_path / "s") as store:
        assert store.ensure_meta(IndexMeta("model-a", "tag-a", DIM, {})) == META  # same tag and dim
        other = IndexMeta("model-b", "tag-b", DIM, {})
        with pytest.raises(ModelMismatchError) as err:
            store.ensure_meta(other)
        msg = str(err.value)
        assert "model-a" in msg and "model-b" in msg and "tag-a" in msg
        assert "--model model-a" in msg and "re-index" in msg
        with pytest.raises(ModelMismatchError):
            store.ensure_meta(IndexMeta("model-a", "tag-a", DIM * 2, {}))
    with EmbeddedStore(tmp_path / "s") as store, pytest.raises(ModelMismatchError):
        store.ensure_meta(other)


def _stats_for(store: EmbeddedStore, ids, shift: float = 0.0) -> dict[str, NormStats]:
    out = {}
    for i, doc_id in enumerate(ids):
        n = store.get(doc_id).vectors.n_paragraphs
        out[doc_id] = NormStats(np.full(n, 0.1 * i + shift), np.full(n, 0.5 + i))
    return out


@pytest.mark.unit
def test_stats_lifecycle(tmp_path):
    items = make_docs(3, seed=12)
    ids = [d.id for d, _ in items]
    with open_store(tmp_path / "s") as store:
        info = store.stats_info()
        assert (info.version, info.stale, info.docs_without_stats, info.mode) == (0, False, 0, None)
        store.put(items)
        info = store.stats_info()
        assert info.stale and info.docs_without_stats == 3
        stats = _stats_for(store, ids)
        info = store.write_stats(stats, mode="sampled", sample_size=100, seed=7)
        assert (info.version, info.stale, info.docs_without_stats) == (1, False, 0)
        assert (info.mode, info.sample_size, info.seed) == ("sampled", 100, 7) and info.computed_at
        np.testing.assert_array_equal(store.get("d001").stats.mu, stats["d001"].mu)
        np.testing.assert_array_equal(store.get("d001").stats.sigma, stats["d001"].sigma)

        store.put([items[1]])  # the same content again: nothing a score depends on changed
        assert not store.stats_info().stale and store.get("d001").stats is not None
        store.put([make_doc("d001", np.random.default_rng(3), n_sents=4)])  # new content
        info = store.stats_info()
        assert info.stale and info.docs_without_stats == 1 and info.version == 1
        assert store.get("d001").stats is None and store.get("d000").stats is not None

        info = store.write_stats(_stats_for(store, ids[:2]), mode="exact", sample_size=None, seed=None)
        assert info.version == 2 and info.stale and info.docs_without_stats == 0  # d002 has version-1 stats
        info = store.write_stats(_stats_for(store, ids, 1.0), mode="exact", sample_size=None, seed=None)
        assert (info.version, info.stale, info.mode) == (3, False, "exact")

        bad = {"d000": NormStats(np.zeros(5), np.ones(5))}
        with pytest.raises(InvalidInputError, match="paragraphs"):
            store.write_stats(bad, mode="exact", sample_size=None, seed=None)
        assert store.stats_info().version == 3  # the failed refresh changed nothing
        store.delete(["d002"])
        assert store.stats_info().stale
        info = store.write_stats({**_stats_for(store, ids[:2]), "gone": NormStats(np.zeros(1), np.ones(1))},
                                 mode="exact", sample_size=None, seed=None)
        assert info.stale  # an id vanished between computing and writing
    with EmbeddedStore(tmp_path / "s") as store:
        assert store.stats_info().version == 4


@pytest.mark.unit
def test_reference_persists_and_survives_deletes(tmp_path):
    items = make_docs(5, seed=13)
    with open_store(tmp_path / "s") as store:
        assert store.reference() is None
        store.put(items)
        corpus = store.all_vectors()
        ref = reference_sample(corpus, [1, 2, 7], seed=42)  # corpus paragraph indices
        sampled = ref.vectors
        store.set_reference(ref)
        store.delete(list(ref.doc_ids))
    with EmbeddedStore(tmp_path / "s") as store:
        got = store.reference()
    assert got.doc_ids == ref.doc_ids == ("d000", "d001", "d003")
    np.testing.assert_array_equal(got.paragraph_index, [1, 0, 1])
    assert (got.seed, got.size) == (42, 3)
    assert got.vectors.ids == sampled.ids
    np.testing.assert_array_equal(got.vectors.vectors, sampled.vectors)
    np.testing.assert_array_equal(got.vectors.par_offsets, sampled.par_offsets)
    np.testing.assert_array_equal(got.vectors.doc_par_offsets, sampled.doc_par_offsets)


@pytest.mark.unit
def test_query_state_is_one_read_transaction(tmp_path):
    items = make_docs(4, seed=17)
    with open_store(tmp_path / "s") as store:
        store.put(items)
        ref = reference_sample(store.all_vectors(), [0, 5], seed=1)
        store.set_reference(ref)
        store.meta()  # load the catalogue: what follows is one query's reads
        statements: list[str] = []
        store._db().set_trace_callback(statements.append)
        state = store.query_state()
        assert [s for s in statements if s.startswith("BEGIN")] == ["BEGIN"]
        assert state.meta == META
        assert_reference_equal(state.reference, ref)
        statements.clear()
        state = store.query_state(reference_version=state.stats.version)  # cached per generation, sample current
        assert state.reference_current and state.reference is None
        assert [s for s in statements if s.startswith("BEGIN")] == ["BEGIN"]
        assert not any("reference" in s for s in statements)  # the sample was not read again
        store._db().set_trace_callback(None)


# -- compaction ----------------------------------------------------------------------------------
def _churn(store: EmbeddedStore) -> None:
    """Put 30 documents, replace 10, delete 5: leaves dead rows."""
    rng = np.random.default_rng(14)
    items = make_docs(30, seed=15)
    store.put(items)
    store.put([with_vectors(it, unit(rng, it[1].n_sentences)) for it in items[::3]])
    store.delete([d.id for d, _ in items[1:10:2]])


def _snapshot(store: EmbeddedStore, queries: np.ndarray):
    av = store.all_vectors()
    return answers(store, queries, k=8), av.ids, av.vectors.copy(), store.counts()


def _assert_same(a, b) -> None:
    (ids_a, sc_a), ids1, v1, c1 = a
    (ids_b, sc_b), ids2, v2, c2 = b
    assert ids_a == ids_b and ids1 == ids2 and c1 == c2
    np.testing.assert_array_equal(v1, v2)
    for x, y in zip(sc_a, sc_b):
        np.testing.assert_allclose(x, y, atol=1e-6)


@pytest.mark.unit
def test_compact_keeps_answers_and_shrinks_file(tmp_path):
    queries = unit(np.random.default_rng(16), 6)
    with open_store(tmp_path / "s") as store:
        _churn(store)
        before = _snapshot(store, queries)
        dead = store.storage_info()["dead_rows"]
        assert dead > 0
        result = store.compact()
        assert result["rows_before"] - result["rows_after"] == dead
        assert result["bytes_after"] < result["bytes_before"]
        assert store.storage_info()["dead_rows"] == 0
        _assert_same(before, _snapshot(store, queries))
        assert store.compact()["rows_after"] == result["rows_after"]  # nothing left to do
    assert not list((tmp_path / "s").glob("*.tmp"))
    with EmbeddedStore(tmp_path / "s") as store:
        _assert_same(before, _snapshot(store, queries))


@pytest.mark.unit
def test_interrupted_compaction_is_finished_on_open(tmp_path, monkeypatch, caplog):
    queries = unit(np.random.default_rng(17), 6)
    store = open_store(tmp_path / "s")
    _churn(store)
    before = _snapshot(store, queries)
    import sdr_search.indexer.embedded.compaction as embedded  # its os.replace renames the compacted files

    real_replace = embedded.os.replace

    def crash(src, dst):
        if str(src).endswith(".compact.tmp"):
            raise OSError("simulated crash between commit and rename")
        real_replace(src, dst)

    monkeypatch.setattr(embedded.os, "replace", crash)
    with pytest.raises(OSError, match="simulated"):
        store.compact()
    monkeypatch.setattr(embedded.os, "replace", real_replace)
    store.close()
    with EmbeddedStore(tmp_path / "s", read_only=True) as reader:  # reads the renamed-to-be files in place
        _assert_same(before, _snapshot(reader, queries))
    with caplog.at_level(logging.WARNING, logger="sdr_search.indexer.embedded"), EmbeddedStore(tmp_path / "s") as store:
        _assert_same(before, _snapshot(store, queries))
        assert store.storage_info()["dead_rows"] == 0
    assert "finished an interrupted compaction" in caplog.text
    assert not list((tmp_path / "s").glob("*.tmp"))


@pytest.mark.unit
def test_failed_compaction_rename_is_finished_by_the_same_handle(tmp_path, monkeypatch):
    queries = unit(np.random.default_rng(18), 6)
    import sdr_search.indexer.embedded.compaction as embedded  # its os.replace renames the compacted files

    real_replace = embedded.os.replace
    with open_store(tmp_path / "s") as store:
        _churn(store)
        before = _snapshot(store, queries)
        calls = []

        def flaky(src, dst):  # the first rename fails once (e.g. a transient I/O error)
            calls.append(src)
            if len(calls) == 1:
                raise OSError("simulated rename failure")
            real_replace(src, dst)

        monkeypatch.setattr(embedded.os, "replace", flaky)
        with pytest.raises(OSError, match="simulated"):
            store.compact()
        _assert_same(before, _snapshot(store, queries))
        assert store.storage_info()["dead_rows"] == 0
    assert not list((tmp_path / "s").glob("*.tmp"))


# -- float16 ------------------------------------------------------------------------------------
@pytest.mark.unit
def test_float16_round_trip(tmp_path):
    items = make_docs(20, seed=18)
    queries = unit(np.random.default_rng(19), 5)
    with open_store(tmp_path / "s", settings=EmbeddedStoreSettings(vector_dtype="float16")) as store:
        store.put(items)
        assert (tmp_path / "s" / "vectors.float16").exists()
        for doc, vec in items[:5]:
            got = store.get(doc.id).vectors.vectors
            assert got.dtype == np.float32
            np.testing.assert_allclose(got, vec.vectors, atol=1e-3)
        converted = store.fetch_documents(["d003", "d001"])
        assert converted[0].vectors.dtype == np.float32
        np.testing.assert_array_equal(converted[1].vectors, store.fetch(["d001"]).vectors)
        hits = store.sentence_knn(queries, 3)
    exact = {d.id: v.vectors for d, v in items}
    for q, ids, scores in zip(queries, hits.doc_ids, hits.scores):
        for doc_id, s in zip(ids, scores):
            assert s == pytest.approx(float((exact[doc_id] @ q).max()), abs=1e-3)
    with EmbeddedStore(tmp_path / "s", settings=EmbeddedStoreSettings(vector_dtype="float32")) as store:
        assert store.vector_dtype == "float16"  # recorded dtype wins over the setting
        np.testing.assert_allclose(store.fetch(["d003"]).vectors, exact["d003"], atol=1e-3)
        assert store.sentence_knn(queries, 3).doc_ids == hits.doc_ids


# -- repairs ------------------------------------------------------------------------------------
@pytest.mark.unit
def test_torn_tail_is_truncated(tmp_path, caplog):
    items = make_docs(10, seed=20)
    with open_store(tmp_path / "s") as store:
        store.put(items[:6])
        size = store.storage_info()["vector_bytes"]
    with open(tmp_path / "s" / "vectors.float32", "ab") as fh:
        fh.write(os.urandom(37))
    with caplog.at_level(logging.WARNING, logger="sdr_search.indexer.embedded"), EmbeddedStore(tmp_path / "s") as store:
        assert store.counts()["documents"] == 6
        assert (tmp_path / "s" / "vectors.float32").stat().st_size == size
        assert store.sentence_knn(items[3][1].vectors[:1], 1).doc_ids == [["d003"]]
        store.put(items[6:])
        np.testing.assert_array_equal(store.get("d009").vectors.vectors, items[9][1].vectors)
    assert "unfinished append" in caplog.text


@pytest.mark.unit
def test_library_versions():
    versions = library_versions()
    assert versions["numpy"] == np.__version__
    assert "faiss" in versions and "sdr-search" in versions


# -- crash test ----------------------------------------------------------------------------------
CRASH_DOCS = 2000
CRASH_BATCH = 10
CRASH_META = IndexMeta("crash-model", "crash-tag", DIM, {})


def crash_item(i: int) -> tuple[Document, DocVectors]:
    """Deterministic document ``i`` of the crash test (1-3 paragraphs of 1-4 sentences)."""
    rng = np.random.default_rng(1000 + i)
    sizes = rng.integers(1, 5, size=int(rng.integers(1, 4))).tolist()
    paragraphs = tuple(tuple(f"doc {i} paragraph {p} sentence {s}." for s in range(n)) for p, n in enumerate(sizes))
    doc = Document(f"c{i:04d}", paragraphs, None, {"i": i})
    return doc, DocVectors(unit(rng, sum(sizes)), np.concatenate([[0], np.cumsum(sizes)]))


def _crash_writer(path: str) -> None:
    """Body of the child process: index every crash document, one put per batch."""
    store = EmbeddedStore(path, create=True, settings=EmbeddedStoreSettings(faiss_save_every=400))
    store.ensure_meta(CRASH_META)
    for b in range(0, CRASH_DOCS, CRASH_BATCH):
        store.put([crash_item(i) for i in range(b, b + CRASH_BATCH)])
    store.close()


_CHILD = (
    "import os, sys; sys.path[:0] = [sys.argv[1], os.path.dirname(sys.argv[1])]; "
    "import test_embedded_store as t; t._crash_writer(sys.argv[2])"
)


def _run_and_kill(path: Path, fraction: float) -> None:
    total = sum(crash_item(i)[1].n_sentences for i in range(CRASH_DOCS)) * DIM * 4
    vec = path / "vectors.float32"
    proc = subprocess.Popen([sys.executable, "-c", _CHILD, str(Path(__file__).parent), str(path)])
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            if vec.exists() and vec.stat().st_size >= fraction * total:
                break
            time.sleep(0.0005)
        assert proc.poll() is None, "the writer finished (or died) before it could be killed"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.integration
@pytest.mark.parametrize("fraction", [0.3, 0.45, 0.6])
def test_kill_9_leaves_a_consistent_resumable_store(tmp_path, fraction):
    path = tmp_path / "crash"
    _run_and_kill(path, fraction)
    with EmbeddedStore(path) as store:
        ids = list(store.iter_ids())
        assert 0 < len(ids) < CRASH_DOCS
        n = len(ids)
        assert n % CRASH_BATCH == 0 and ids == [f"c{i:04d}" for i in range(n)]  # whole batches only
        info = store.storage_info()
        assert info["vector_bytes"] == info["rows"] * DIM * 4 and info["dead_rows"] == 0
        for doc_id in ids:
            got = store.get(doc_id)
            doc, vec = crash_item(int(doc_id[1:]))
            assert got.document.paragraphs == doc.paragraphs
            assert got.vectors.n_sentences == vec.n_sentences
            assert np.all(np.isfinite(got.vectors.vectors))
            np.testing.assert_allclose(np.linalg.norm(got.vectors.vectors, axis=1), 1.0, atol=1e-5)
            np.testing.assert_array_equal(got.vectors.vectors, vec.vectors)
        assert store.sentence_knn(crash_item(n - 1)[1].vectors[:1], 1).doc_ids == [[ids[-1]]]

        skipped = 0
        for b in range(0, CRASH_DOCS, CRASH_BATCH):
            batch = [crash_item(i) for i in range(b, b + CRASH_BATCH)]
            stored = store.content_keys([d.id for d, _ in batch])
            todo = [(d, v) for d, v in batch if stored.get(d.id) != document_key(CRASH_META.encoder_tag, d.paragraphs)]
            skipped += len(batch) - len(todo)
            if todo:
                store.put(todo)
        assert skipped == n
        assert store.counts()["documents"] == CRASH_DOCS
    with EmbeddedStore(path) as store:
        assert store.counts()["documents"] == CRASH_DOCS
        probes = [0, n, CRASH_DOCS - 1]
        hits = store.sentence_knn(np.stack([crash_item(i)[1].vectors[0] for i in probes]), 1)
        assert hits.doc_ids == [[f"c{i:04d}"] for i in probes]
        assert store.storage_info()["dead_rows"] == 0


# -- paragraph centroids (pre-rank) -----------------------------------------------------------
def _fresh_centroids(store: EmbeddedStore, ids: list[str]) -> list[np.ndarray]:
    from sdr_search.core.scoring import paragraph_centroids

    return [paragraph_centroids(store.get(i).vectors) for i in ids]


@pytest.mark.unit
def test_paragraph_centroids_follow_puts_replacements_deletes_and_compaction(tmp_path):
    """The in-memory centroids always match the stored vectors, through every kind of write,
    and equal the store interface's default (computed from the fetched vectors)."""
    from sdr_search.indexer.store import DocumentStore

    with EmbeddedStore(tmp_path / "s", create=True) as store:
        store.ensure_meta(META)
        store.put(make_docs(6, seed=1, n_pars=3))
        ids = list(store.iter_ids())

        def check(expected_ids):
            got = store.paragraph_centroids(expected_ids)
            default = DocumentStore.paragraph_centroids(store, expected_ids)
            for g, d, f in zip(got, default, _fresh_centroids(store, expected_ids)):
                assert g.dtype == np.float32 and g.shape == f.shape == d.shape and not g.flags.writeable
                np.testing.assert_allclose(g, f, atol=1e-6)
                np.testing.assert_allclose(d, f, atol=1e-6)

        check(ids)  # fills the cache for every live document
        assert len(store._centroids) == 6
        store.put(make_docs(2, seed=2, prefix="new", n_pars=2))  # new documents, asked for later
        check(["new000", ids[0], "new001"])
        store.put([make_doc(ids[1], np.random.default_rng(9), n_pars=4)])  # replaced: new rows, new centroids
        check([ids[1]])
        assert store.paragraph_centroids([ids[1]])[0].shape == (4, DIM)
        store.delete([ids[2]])
        with pytest.raises(DocumentNotFoundError):
            store.paragraph_centroids([ids[2]])
        store.compact()  # a new epoch: rows move, the cache starts again
        live = list(store.iter_ids())
        check(live)
        assert len(store._centroids) == len(live)
    with EmbeddedStore(tmp_path / "s") as reopened:  # derived on reopening, nothing written
        got = reopened.paragraph_centroids(live)
        for g, f in zip(got, _fresh_centroids(reopened, live)):
            np.testing.assert_allclose(g, f, atol=1e-6)
        with pytest.raises(InvalidInputError):
            reopened.paragraph_centroids([])


# -- memory: the centroid fill reads, it does not map ----------------------------------------------
def _mapped_kib(path: Path) -> int:
    """KiB of ``path`` resident through this process's memory maps (/proc/self/smaps)."""
    total, inside = 0, False
    with open("/proc/self/smaps") as fh:
        for line in fh:
            head = line.split()
            if head and "-" in head[0] and len(head) >= 5:  # a mapping's header line
                inside = len(head) >= 6 and head[-1] == str(path)
            elif inside and head and head[0] == "Rss:":
                total += int(head[1])
    return total


@pytest.mark.unit
@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="needs Linux /proc")
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_centroid_fill_leaves_the_vector_file_unmapped(tmp_path, dtype):
    """The first pre-rank fills every document's paragraph centroids in one pass over the vector
    file (issue 44): read with pread, that pass adds none of the file to the process's RSS (through
    the memory map it added the whole file: 15 GB at 10M sentences), and gives the same centroids."""
    items = make_docs(300, seed=31, n_pars=3, n_sents=6)
    with open_store(tmp_path / "s", settings=EmbeddedStoreSettings(vector_dtype=dtype)) as store:
        store.put(items)
    with EmbeddedStore(tmp_path / "s") as store:
        ids = [d.id for d, _ in items]
        got = store.paragraph_centroids(ids[:2])
        assert _mapped_kib(store.vector_path) == 0
        mapped = store.fetch(ids)  # the rerank's reads go through the map
        assert _mapped_kib(store.vector_path) > 0
        for (_, vectors), centroids in zip(items[:2], got):
            expected = np.stack([vectors.vectors[a:b].mean(axis=0) for a, b in zip(vectors.par_offsets[:-1],
                                                                                   vectors.par_offsets[1:])])
            np.testing.assert_allclose(centroids / np.linalg.norm(centroids, axis=1, keepdims=True),
                                       expected / np.linalg.norm(expected, axis=1, keepdims=True), atol=2e-3)
        del mapped
