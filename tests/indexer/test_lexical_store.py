"""The embedded store's lexical index (sdr_search.indexer.embedded.lexical): the same results as the exhaustive
BM25Ranker on the same texts, kept up to date with puts and deletes, persisted crash-safely; and
the index's search defaults."""

from __future__ import annotations

import logging
import os

import numpy as np
import pytest

from sdr_search.indexer.embedded import EmbeddedStore
from sdr_search.indexer.embedded.lexical import LEXICAL_PREFIX
from sdr_search.indexer.store import IndexMeta
from sdr_search.core.documents import Document, parse_record
from sdr_search.core.errors import InvalidInputError, StoreError
from sdr_search.core.lexical import BM25Ranker
from sdr_search.core.vectors import DocVectors

pytestmark = pytest.mark.unit

DIM = 8
META = IndexMeta("model-a", "tag-a", DIM, {"paragraph_unit": "paragraph"})
VOCAB = [f"w{i}" for i in range(400)]
BUILT = "built the lexical index"


def _texts(n: int, seed: int) -> list[list[str]]:
    """Random Zipf-ish texts: a few common words, many rare ones (BM25 scores spread out)."""
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, len(VOCAB) + 1)
    p /= p.sum()
    out = []
    for _ in range(n):
        paragraphs = []
        for _ in range(int(rng.integers(1, 4))):
            sentences = [" ".join(rng.choice(VOCAB, int(rng.integers(4, 12)), p=p)) + "." for _ in range(2)]
            paragraphs.append(" ".join(s.capitalize() for s in sentences))
        out.append(paragraphs)
    return out


def make_items(n: int, seed: int = 0, prefix: str = "d") -> list[tuple[Document, DocVectors]]:
    rng = np.random.default_rng(seed + 1000)
    items = []
    for i, paragraphs in enumerate(_texts(n, seed)):
        doc = parse_record({"id": f"{prefix}{i:03d}", "title": f"Title {i % 7}", "paragraphs": paragraphs})
        v = rng.standard_normal((doc.n_sentences, DIM)).astype(np.float32)
        v /= np.linalg.norm(v, axis=1, keepdims=True)
        sizes = [len(p) for p in doc.paragraphs]
        items.append((doc, DocVectors(v, np.concatenate([[0], np.cumsum(sizes)]))))
    return items


@pytest.fixture()
def store(tmp_path):
    with EmbeddedStore(tmp_path / "s", create=True) as s:
        s.ensure_meta(META)
        yield s


def _builds(caplog) -> int:
    return sum(BUILT in r.getMessage() for r in caplog.records)


def test_lexical_top_100_equals_the_exhaustive_bm25_ranker(store):
    items = make_items(300)
    store.put(items[:150])
    store.put(items[150:])
    ranker = BM25Ranker().fit([d.id for d, _ in items], [d.text for d, _ in items])
    for query_doc, _ in items[::37]:
        query = query_doc.text + " w3 w3 w250"
        got = store.lexical_search(query, 100, exclude_ids=[query_doc.id], score_ids=["d007", "d299", "nope"])
        exp_ids, exp_scores = ranker.top(query, 100, exclude_ids=[query_doc.id])
        assert got.ids == exp_ids
        np.testing.assert_allclose(got.scores, exp_scores, rtol=1e-6)
        all_scores = ranker.scores(query)
        assert got.scored["d007"] == pytest.approx(float(all_scores[7]), rel=1e-6)
        assert got.scored["d299"] == pytest.approx(float(all_scores[299]), rel=1e-6)
        assert got.scored["nope"] == 0.0 and query_doc.id not in got.ids
        assert np.all(np.diff(got.scores) <= 0)


def test_only_matching_documents_are_hits_and_k_zero_only_scores(store):
    store.put(make_items(20))
    assert store.lexical_search("zzzz qqqq the and", 10).ids == []  # unknown and stop words only
    got = store.lexical_search("w399 w398", 50)
    assert len(got.ids) < 20 and np.all(got.scores > 0)
    only = store.lexical_search("w1 w2", 0, score_ids=["d001"])
    assert only.ids == [] and only.scores.size == 0 and only.scored["d001"] > 0
    with pytest.raises(InvalidInputError):
        store.lexical_search("w1", -1)


def test_empty_store_has_no_lexical_hits(store):
    got = store.lexical_search("w1", 5, score_ids=["a"])
    assert got.ids == [] and got.scored == {"a": 0.0}
    assert store.refresh_lexical() == 0


def test_puts_and_deletes_update_the_index_without_a_rebuild(store, caplog):
    caplog.set_level(logging.INFO, logger="sdr_search.indexer.embedded")
    items = make_items(30)
    store.put(items)
    first = store.lexical_search(items[4][0].text, 1)
    assert first.ids == ["d004"] and _builds(caplog) == 1
    store.lexical_search("w5", 3)
    assert _builds(caplog) == 1  # unchanged: the index in memory serves

    from sdr_search.core.scoring import NormStats

    stats = {d.id: NormStats(np.zeros(v.n_paragraphs), np.ones(v.n_paragraphs)) for d, v in items}
    store.write_stats(stats, mode="exact", sample_size=None, seed=None)
    store.lexical_search("w5", 3)
    assert _builds(caplog) == 1  # a statistics refresh does not touch the texts

    store.delete(["d004"])
    assert "d004" not in store.lexical_search(items[4][0].text, 5).ids
    replacement = parse_record({"id": "d010", "paragraphs": ["Xenolith xenolith granite."]})
    store.put([(replacement, DocVectors(np.eye(DIM, dtype=np.float32)[:1], [0, 1]))])
    assert store.lexical_search("xenolith", 3).ids == ["d010"]
    assert _builds(caplog) == 1  # the delete and the put went into the delta segment
    live = [(d, v) for d, v in items if d.id not in ("d004", "d010")] + [(replacement, None)]
    ranker = BM25Ranker().fit([d.id for d, _ in live], [d.text for d, _ in live])
    query = items[7][0].text + " xenolith"
    got = store.lexical_search(query, 50)
    exp_ids, exp_scores = ranker.top(query, 50)
    assert got.ids == exp_ids
    np.testing.assert_array_equal(got.scores, exp_scores)  # bit for bit, as a rebuild would score
    assert store.refresh_lexical() == 29 and _builds(caplog) == 1  # merged, not rebuilt
    assert len([p for p in os.listdir(store.path) if p.startswith(LEXICAL_PREFIX)]) == 1  # old ones removed


def test_saved_index_is_reused_by_the_next_process(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="sdr_search.indexer.embedded")
    items = make_items(40)
    with EmbeddedStore(tmp_path / "s", create=True) as s:
        s.ensure_meta(META)
        s.put(items)
        assert s.refresh_lexical() == 40
        before = s.lexical_search("w17 w3", 10)
    assert _builds(caplog) == 1
    with EmbeddedStore(tmp_path / "s") as s:
        after = s.lexical_search("w17 w3", 10)
    assert _builds(caplog) == 1  # loaded from lexical-<fingerprint>/, not rebuilt
    assert after.ids == before.ids
    np.testing.assert_array_equal(after.scores, before.scores)


def test_damaged_or_interrupted_index_files_are_recovered(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="sdr_search.indexer.embedded")
    items = make_items(25)
    with EmbeddedStore(tmp_path / "s", create=True) as s:
        s.ensure_meta(META)
        s.put(items)
        s.refresh_lexical()
        expected = s.lexical_search("w9 w11", 5).ids
    (saved,) = [p for p in (tmp_path / "s").iterdir() if p.name.startswith(LEXICAL_PREFIX)]
    (saved / "terms.json").write_text("{not json")  # damaged
    stray = tmp_path / "s" / f"{saved.name}.tmp-999999999-abcd"  # left by a build that died
    stray.mkdir()
    (stray / "params.index.json").write_text("{}")
    with EmbeddedStore(tmp_path / "s") as s:
        assert s.lexical_search("w9 w11", 5).ids == expected
    assert _builds(caplog) == 2 and any("unreadable" in r.getMessage() for r in caplog.records)
    names = [p.name for p in (tmp_path / "s").iterdir() if p.name.startswith(LEXICAL_PREFIX)]
    assert names == [saved.name]  # rebuilt in place of the damaged one; the stray temp directory is gone
    with EmbeddedStore(tmp_path / "s") as s:
        assert s.lexical_search("w9 w11", 5).ids == expected
    assert _builds(caplog) == 2  # the rebuilt index was saved


def test_read_only_store_builds_in_memory_only(tmp_path):
    items = make_items(15)
    with EmbeddedStore(tmp_path / "s", create=True) as s:
        s.ensure_meta(META)
        s.put(items)
    with EmbeddedStore(tmp_path / "s", read_only=True) as ro:
        assert ro.lexical_search(items[2][0].text, 1).ids == ["d002"]
    assert not [p for p in os.listdir(tmp_path / "s") if p.startswith(LEXICAL_PREFIX)]


def test_search_defaults_round_trip(tmp_path):
    with EmbeddedStore(tmp_path / "s", create=True) as s:
        assert s.search_defaults() == {}
        got = s.set_search_defaults({"method": "hybrid", "weights": {"bm25": 2, "sdr": 1}})
        assert got == {"method": "hybrid", "weights": {"bm25": 2.0, "sdr": 1.0, "mean": 0.0}}
        with pytest.raises(InvalidInputError):
            s.set_search_defaults({"method": "bm25"})
        with pytest.raises(InvalidInputError):
            s.set_search_defaults({"weights": {"bm25": -1}})
        with pytest.raises(InvalidInputError):
            s.set_search_defaults({"colour": "blue"})
    with EmbeddedStore(tmp_path / "s") as s:
        assert s.search_defaults() == got
        assert s.set_search_defaults({}) == {} and s.search_defaults() == {}
    with EmbeddedStore(tmp_path / "s", read_only=True) as ro:
        with pytest.raises(StoreError, match="read-only"):
            ro.set_search_defaults({"method": "sdr"})
