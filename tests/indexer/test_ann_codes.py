"""The embedded store's compressed candidate graph (``SDR_STORE_ANN_CODES``: fp16, sq8) against the
float32 one and the exact references: nested k-NN answers and exact hit scores, the codes recorded
at creation, stores made before the setting, catch-up, rebuild, retraining and compaction (all
``unit``, seconds)."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from factories import META, brute_force_best, make_docs, unit
from sdr_search.core.reference import reference_cosine
from sdr_search.indexer.embedded import EmbeddedStore
from sdr_search.indexer.embedded.ann import SQ_TRAIN_ROWS, faiss_module, index_codes
from sdr_search.indexer.settings import EmbeddedStoreSettings

pytestmark = pytest.mark.unit
COMPRESSED = ["fp16", "sq8"]


def open_store(path: Path, codes: str, **kw) -> EmbeddedStore:
    store = EmbeddedStore(path, create=True, settings=EmbeddedStoreSettings(ann_codes=codes, **kw))
    store.ensure_meta(META)
    return store


def saved_codes(path: Path) -> str | None:
    return index_codes(faiss_module().read_index(str(path / "faiss.index")))


def check_exact(store: EmbeddedStore, items, queries: np.ndarray, k: int) -> None:
    """Top-``k`` documents and their scores equal the exact nested k-NN (every document's best
    sentence), the scores to float32 precision of the float64 reference cosine."""
    hits = store.sentence_knn(queries, k)
    ids, best = brute_force_best(queries, items)
    by_id = {d.id: v.vectors for d, v in items}
    for r, (got_ids, got_scores) in enumerate(zip(hits.doc_ids, hits.scores)):
        assert got_ids[:k] == [ids[j] for j in np.argsort(-best[r], kind="stable")[:k]]
        want = [max(reference_cosine(queries[r], s) for s in by_id[i]) for i in got_ids]
        np.testing.assert_allclose(got_scores, want, rtol=0, atol=2e-6)


@pytest.mark.parametrize("codes", COMPRESSED)
def test_compressed_graph_answers_as_exact_nested_knn(tmp_path, codes):
    items = make_docs(150, seed=3)
    rng = np.random.default_rng(4)
    queries = np.concatenate([unit(rng, 10), np.stack([v.vectors[1] for _, v in items[::15]])])
    with open_store(tmp_path / "s", codes) as store:
        store.put(items)
        check_exact(store, items, queries, k=5)
        assert store.ann_codes == codes
    assert saved_codes(tmp_path / "s") == codes


@pytest.mark.parametrize("codes", COMPRESSED)
def test_codes_are_recorded_and_win_over_the_setting(tmp_path, codes):
    items = make_docs(40, seed=5)
    with open_store(tmp_path / "s", codes) as store:
        store.put(items[:20])
    with EmbeddedStore(tmp_path / "s", settings=EmbeddedStoreSettings(ann_codes="float32")) as store:
        assert store.ann_codes == codes
        store.put(items[20:])
        check_exact(store, items, np.stack([v.vectors[0] for _, v in items]), k=3)
    assert saved_codes(tmp_path / "s") == codes


def test_store_made_before_the_setting_opens_as_float32(tmp_path, caplog):
    """A store whose meta has no ``ann_codes`` (the format before issue 44) keeps its float32
    graph: read as is, no rebuild, whatever the setting says."""
    items = make_docs(30, seed=6)
    with open_store(tmp_path / "s", "float32") as store:
        store.put(items)
    with sqlite3.connect(tmp_path / "s" / "store.sqlite") as conn:
        conn.execute("DELETE FROM meta WHERE key = 'ann_codes'")
    before = (tmp_path / "s" / "faiss.index").read_bytes()
    with caplog.at_level(logging.INFO, logger="sdr_search.indexer.embedded"), \
            EmbeddedStore(tmp_path / "s", settings=EmbeddedStoreSettings(ann_codes="sq8")) as store:
        assert store.ann_codes == "float32"
        check_exact(store, items, np.stack([v.vectors[2] for _, v in items]), k=4)
    assert "rebuild" not in caplog.text
    assert (tmp_path / "s" / "faiss.index").read_bytes() == before


@pytest.mark.parametrize("codes", ["float32", *COMPRESSED])
def test_catch_up_rebuild_and_wrong_codes(tmp_path, caplog, codes):
    """The FAISS index is a cache of the vector file, whatever its codes: a missing, short, unreadable,
    wrongly coded or too long (a lost transaction) index file is caught up or rebuilt, with a warning."""
    items = make_docs(20, seed=21)
    probe = np.stack([v.vectors[0] for _, v in items])
    expected = [[d.id] for d, _ in items]
    path = tmp_path / "s"
    with open_store(path, codes) as store:
        store.put(items[:10])
    short_index = (path / "faiss.index").read_bytes()
    with EmbeddedStore(path) as store:
        store.put(items[10:])
    long_index = (path / "faiss.index").read_bytes()

    def check(store_path: Path, want: list[list[str]], message: str) -> None:
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="sdr_search.indexer.embedded"), EmbeddedStore(store_path) as s:
            got = s.sentence_knn(probe[: len(want)], 1).doc_ids
            assert index_codes(s._ann.index) == codes  # the graph it loaded or rebuilt
        assert got == want
        assert message in caplog.text

    (path / "faiss.index").unlink()
    check(path, expected, "no FAISS index file")
    (path / "faiss.index").write_bytes(short_index)
    check(path, expected, "catching up 60 rows")
    (path / "faiss.index").write_bytes(b"garbage" * 10)
    check(path, expected, "unreadable")
    other = "sq8" if codes == "float32" else "float32"
    with open_store(tmp_path / "other", other) as wrong:
        wrong.put(items)
    (path / "faiss.index").write_bytes((tmp_path / "other" / "faiss.index").read_bytes())
    check(path, expected, f"holds {other} codes, the store records {codes}")
    with open_store(tmp_path / "half", codes) as half:
        half.put(items[:10])
    (tmp_path / "half" / "faiss.index").write_bytes(long_index)  # more rows than committed
    check(tmp_path / "half", expected[:10], "lost transaction")


def test_sq8_is_retrained_while_the_store_doubles(tmp_path, caplog):
    """An sq8 graph trained on the first put's rows (here a narrow range of values) is rebuilt
    once the store has twice its rows, so later rows of a wider range are not clamped into it."""
    rng = np.random.default_rng(7)
    narrow = make_docs(5, seed=8)
    narrow = [(d, type(v)(np.abs(v.vectors) * 0.1 + 0.3, v.par_offsets)) for d, v in narrow]  # positive, small
    wide = make_docs(60, seed=9, prefix="w")
    with caplog.at_level(logging.INFO, logger="sdr_search.indexer.embedded"), open_store(tmp_path / "s", "sq8") as store:
        store.put(narrow)
        store.sentence_knn(unit(rng, 1), 1)
        assert "retraining" not in caplog.text
        store.put(wide)
        assert "retraining the sq8 index" in caplog.text
        items = narrow + wide
        check_exact(store, items, np.stack([v.vectors[3] for _, v in wide]), k=3)
    assert 2 * len(items) * 6 < SQ_TRAIN_ROWS  # (the rule applies to small graphs only)


@pytest.mark.parametrize("codes", COMPRESSED)
def test_compaction_keeps_codes_and_answers(tmp_path, codes):
    items = make_docs(60, seed=11)
    with open_store(tmp_path / "s", codes) as store:
        store.put(items)
        store.delete([d.id for d, _ in items[::2]])
        store.compact()
        check_exact(store, items[1::2], np.stack([v.vectors[1] for _, v in items[1::2]]), k=3)
    assert saved_codes(tmp_path / "s") == codes
    with EmbeddedStore(tmp_path / "s") as store:
        check_exact(store, items[1::2], np.stack([v.vectors[4] for _, v in items[1::2]]), k=3)


@pytest.mark.parametrize("codes", COMPRESSED)
def test_hit_scores_from_the_codes_leave_the_vector_file_unread(tmp_path, codes, monkeypatch):
    """``hit_scores='codes'``: the hits keep the graph's own (approximate) scores, and the vector file
    is not read to score them; the documents found are those of the exact search but for near-ties,
    and the scores within the codes' rounding of the exact ones."""
    from sdr_search.indexer.embedded import ann

    items = make_docs(150, seed=3)
    queries = np.stack([v.vectors[1] for _, v in items[::10]])
    with open_store(tmp_path / "s", codes) as store:
        store.put(items)
        exact = store.sentence_knn(queries, 5)
    read: list[int] = []
    real = ann.exact_hit_scores
    monkeypatch.setattr(ann, "exact_hit_scores", lambda q, rows, m: read.append(rows.size) or real(q, rows, m))
    with EmbeddedStore(tmp_path / "s", settings=EmbeddedStoreSettings(hit_scores="codes")) as store:
        approx = store.sentence_knn(queries, 5)
    assert not read
    with EmbeddedStore(tmp_path / "s") as store:  # the default scores them exactly, through the same function
        assert store.sentence_knn(queries, 5).doc_ids == exact.doc_ids
    assert read
    same = sum(len(set(a) & set(b)) for a, b in zip(approx.doc_ids, exact.doc_ids))
    assert same >= 0.9 * sum(len(b) for b in exact.doc_ids)
    tolerance = 2e-3 if codes == "fp16" else 3e-2
    for a_ids, a_scores, e_ids, e_scores in zip(approx.doc_ids, approx.scores, exact.doc_ids, exact.scores):
        assert a_ids[0] == e_ids[0]  # each query is a stored sentence: its own document first
        np.testing.assert_allclose(a_scores[0], e_scores[0], atol=tolerance)
        assert not np.array_equal(a_scores, e_scores) or codes == "fp16"
