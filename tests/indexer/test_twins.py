"""Twin rows (identical sentence vectors in several documents) and nested k-NN with ties."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from factories import AS_GIVEN, META, unit
from sdr_search.indexer.embedded import EmbeddedStore
from sdr_search.indexer.embedded import twins as twins_module
from sdr_search.indexer.embedded.twins import TwinGroups, Twins, row_hashes
from sdr_search.indexer.settings import EmbeddedStoreSettings
from sdr_search.core.documents import parse_record
from sdr_search.core.vectors import DocVectors

pytestmark = pytest.mark.unit


def groups_of(tw: TwinGroups) -> list[list[int]]:
    return sorted(tw.members[s : s + n].tolist() for s, n in zip(tw.start, tw.size))


def test_row_hashes_equal_rows_equal_hashes() -> None:
    rng = np.random.default_rng(0)
    m = unit(rng, 50)
    m[10] = m[3]
    h = row_hashes(m)
    assert h.dtype == np.uint64 and h[10] == h[3]
    assert len(set(h.tolist())) == 49
    flipped = m.copy()
    flipped[3, 5] = np.nextafter(flipped[3, 5], np.float32(2))  # one ulp
    assert row_hashes(flipped)[3] != h[3]
    assert row_hashes(m.astype(np.float16))[10] == row_hashes(m.astype(np.float16))[3]
    odd = unit(rng, 4, 7).astype(np.float16)  # 14-byte rows: 16-bit words
    assert row_hashes(odd).shape == (4,)


def test_groups_and_expansion() -> None:
    rng = np.random.default_rng(1)
    a, b, c, d = unit(rng, 4)
    m = np.stack([a, b, a, c, a, b, d])
    tw = Twins().current(epoch=1, committed=7, matrix=m)
    assert groups_of(tw) == [[0, 2, 4], [1, 5]]
    assert tw.group[3] == -1 and tw.group[6] == -1
    rows, dist = tw.expand(np.array([2, 3, -1]), np.array([0.9, 0.5, -1.0], dtype=np.float32))
    got = sorted(zip(rows.tolist(), dist.tolist()))
    assert got == sorted([(0, pytest.approx(0.9)), (2, pytest.approx(0.9)), (4, pytest.approx(0.9)),
                          (3, 0.5), (-1, -1.0)])
    # two hits from one group expand it once, at the first (best) hit's similarity
    rows, dist = tw.expand(np.array([4, 0]), np.array([0.8, 0.8], dtype=np.float32))
    assert sorted(rows.tolist()) == [0, 2, 4]


def test_hash_collisions_never_merge_different_rows(monkeypatch) -> None:
    rng = np.random.default_rng(2)
    a, b, c = unit(rng, 3)
    m = np.stack([a, b, a, c, b, c, c])
    monkeypatch.setattr(twins_module, "row_hashes", lambda block: np.zeros(block.shape[0], dtype=np.uint64))
    tw = Twins().current(epoch=1, committed=7, matrix=m)
    assert groups_of(tw) == [[0, 2], [1, 4], [3, 5, 6]]


def test_appended_rows_join_groups_and_new_epoch_rebuilds() -> None:
    rng = np.random.default_rng(3)
    a, b = unit(rng, 2)
    m = np.stack([a, b, b, a, a])
    tw = Twins()
    assert groups_of(tw.current(1, 3, m)) == [[1, 2]]
    assert groups_of(tw.current(1, 5, m)) == [[0, 3, 4], [1, 2]]
    rebuilt = tw.current(2, 2, m)
    assert groups_of(rebuilt) == []  # compaction: a new file, rebuilt
    assert rebuilt.rows == 2


def make_item(doc_id: str, vectors: np.ndarray):
    n = vectors.shape[0]
    doc = parse_record({"id": doc_id, "paragraphs": [" ".join(f"Sentence {k} of {doc_id}." for k in range(n))]}, settings=AS_GIVEN)
    assert doc.n_sentences == n
    return doc, DocVectors(vectors, np.array([0, n]))


def test_store_knn_reaches_every_document_sharing_a_sentence(tmp_path: Path) -> None:
    """A sentence in 30 documents ties them all: k=5 returns all 30, not an arbitrary 5."""
    rng = np.random.default_rng(4)
    shared = unit(rng, 1)
    items = []
    for i in range(30):
        v = unit(rng, 4)
        v[i % 4] = shared[0]
        items.append(make_item(f"s{i:02d}", v))
    items += [make_item(f"u{i:02d}", unit(rng, 4)) for i in range(40)]
    settings = EmbeddedStoreSettings(knn_twins=True)
    with EmbeddedStore(tmp_path / "s", create=True, settings=settings) as store:
        store.ensure_meta(META)
        store.put(items)
        hits = store.sentence_knn(shared, 5)
        assert sorted(hits.doc_ids[0]) == [f"s{i:02d}" for i in range(30)]
        np.testing.assert_allclose(hits.scores[0], 1.0, atol=1e-5)
        other = store.sentence_knn(unit(rng, 1), 5)  # no twins involved: exactly k
        assert len(other.doc_ids[0]) == 5
        # deleted and excluded documents are not reached through their twins
        store.delete(["s03", "s04"])
        hits = store.sentence_knn(shared, 5, exclude_ids=["s05"])
        assert sorted(hits.doc_ids[0]) == [f"s{i:02d}" for i in range(30) if i not in (3, 4, 5)]
        # a document added later joins the group; after compaction the groups are rebuilt
        v = unit(rng, 4)
        v[2] = shared[0]
        store.put([make_item("late", v)])
        assert "late" in store.sentence_knn(shared, 5).doc_ids[0]
        store.compact()
        hits = store.sentence_knn(shared, 5)
        assert len(hits.doc_ids[0]) == 29 and "late" in hits.doc_ids[0]  # 30 - 2 deleted + 1


def test_twins_switch(tmp_path: Path) -> None:
    """Without twins (the default) a row sees only its k * oversample sentence hits; the documents
    among them tied at the k-th place are all kept."""
    rng = np.random.default_rng(5)
    shared = unit(rng, 1)
    items = []
    for i in range(40):
        v = unit(rng, 3)
        v[0] = shared[0]
        items.append(make_item(f"s{i:02d}", v))
    for twins, expected in ((False, 16), (True, 40)):
        settings = EmbeddedStoreSettings(knn_twins=twins, knn_oversample=4)
        with EmbeddedStore(tmp_path / "s", create=True, settings=settings) as store:
            store.ensure_meta(META)
            if not twins:
                store.put(items)
            assert len(store.sentence_knn(shared, 4).doc_ids[0]) == expected


def test_first_hits_keeps_documents_tied_at_the_kth_place() -> None:
    from sdr_search.indexer.embedded.ann import _first_hits

    row_seq = np.array([10, 11, 12, 13, 14, 10], dtype=np.int64)  # row -> document seq
    dist = np.array([0.9, 0.8, 0.8, 0.8, 0.5, 0.4], dtype=np.float32)
    rows = np.array([0, 1, 2, 3, 4, 5])
    seqs, scores = _first_hits(dist, rows, row_seq, np.zeros(0, np.int64), 2)
    assert seqs.tolist() == [10, 11, 12, 13] and scores.tolist() == pytest.approx([0.9, 0.8, 0.8, 0.8])
    seqs, _ = _first_hits(dist, rows, row_seq, np.zeros(0, np.int64), 4)
    assert seqs.tolist() == [10, 11, 12, 13]  # no tie at the 4th place: exactly k
    seqs, _ = _first_hits(dist, rows, row_seq, np.array([11]), 2)
    assert seqs.tolist() == [10, 12, 13]


@pytest.mark.parametrize("seed", range(5))
def test_first_hits_of_all_rows_at_once_match_row_by_row(seed: int) -> None:
    """The vectorised per-search form equals the row-by-row reference, with repeated documents,
    ties at the k-th place, missing hits (-1), dead rows and excluded documents."""
    from sdr_search.indexer.embedded.ann import _first_hits, _first_hits_rows

    rng = np.random.default_rng(seed)
    n_rows, width, k = 40, 30, 5
    row_seq = rng.integers(0, 12, size=200).astype(np.int64)
    row_seq[rng.random(200) < 0.1] = -1  # dead rows
    rows = rng.integers(0, 200, size=(n_rows, width))
    rows[:, -3:] = -1  # FAISS pads short results with -1
    dist = -np.sort(-rng.choice(np.linspace(0, 1, 8), size=(n_rows, width)), axis=1).astype(np.float32)  # many ties
    for exclude in (np.zeros(0, np.int64), np.array([3, 7], dtype=np.int64)):
        got = _first_hits_rows(dist, rows, row_seq, exclude, k)
        assert len(got) == n_rows
        for j in range(n_rows):
            seqs, scores = _first_hits(dist[j], rows[j], row_seq, exclude, k)
            assert got[j][0].tolist() == seqs.tolist()
            assert got[j][1].tolist() == scores.tolist()
    assert _first_hits_rows(dist[:0], rows[:0], row_seq, np.zeros(0, np.int64), k) == []
