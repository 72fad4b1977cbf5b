"""The embedded store's segmented lexical index (sdr_search.indexer.embedded.lexical): after any sequence of
puts, replacements and deletes, ``lexical_search`` gives the ids and scores of a BM25 index rebuilt
from the live texts (and of ``BM25Ranker`` fitted on them: bit for bit); writes go into a delta
segment and deletion mask, merged in bounded steps, never a rebuild per write; a second store
object (another process) writing the same directory never leaves a reader stale; a lost delta or
a damaged base costs at most a catch-up or a rebuild."""

from __future__ import annotations

import logging
import os
import threading

import numpy as np
import pytest

from sdr_search.core.documents import Document, parse_record
from sdr_search.core.lexical import RANKER_FILE, BM25Ranker
from sdr_search.core.vectors import DocVectors
from sdr_search.indexer.embedded import EmbeddedStore
from sdr_search.indexer.embedded.lexical import LEXICAL_PREFIX, Segments
from sdr_search.indexer.settings import EmbeddedStoreSettings
from sdr_search.indexer.store import IndexMeta

pytestmark = pytest.mark.unit

DIM = 8
META = IndexMeta("model-a", "tag-a", DIM, {"paragraph_unit": "paragraph"})
VOCAB = [f"w{i}" for i in range(300)]
BUILT = "built the lexical index"
MERGED = "pending changes into the lexical index"


def _doc(doc_id: str, rng: np.random.Generator) -> tuple[Document, DocVectors]:
    """A document of Zipf-ish random words (1-3 paragraphs, 1-25 words a sentence); one in ten
    holds only stop words (no indexable term, length 0)."""
    p = 1.0 / np.arange(1, len(VOCAB) + 1) ** 0.9
    p /= p.sum()
    if rng.random() < 0.1:
        paragraphs = ["The and of it."]
    else:
        paragraphs = []
        for _ in range(int(rng.integers(1, 4))):
            words = rng.choice(VOCAB, int(rng.integers(1, 26)), p=p)
            paragraphs.append(" ".join(words).capitalize() + ".")
    title = None if rng.random() < 0.3 else f"Title w{int(rng.integers(0, 40))}"
    doc = parse_record({"id": doc_id, "title": title, "paragraphs": paragraphs})
    v = rng.standard_normal((doc.n_sentences, DIM)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    sizes = [len(par) for par in doc.paragraphs]
    return doc, DocVectors(v, np.concatenate([[0], np.cumsum(sizes)]))


def _queries(live: dict[str, Document], rng: np.random.Generator) -> list[str]:
    """A whole live document (the "more like this" query), a repeated-term query, and one with
    unknown and stop words."""
    ids = sorted(live)
    out = ["w1 w1 w1 w7 w250 w251 zzzz the"]
    if ids:
        doc = live[ids[int(rng.integers(0, len(ids)))]]
        out.append(doc.text + " w3 w3 w299")
    return out


def _assert_exact(store: EmbeddedStore, live: dict[str, Document], rng: np.random.Generator, k: int = 1000) -> None:
    """``lexical_search`` == BM25Ranker fitted on the live texts (ids, and scores bit for bit)
    == a segment index built afresh from the live texts."""
    if not live:
        assert store.lexical_search("w1 w2", 5).ids == []
        return
    order = sorted(live)
    ranker = BM25Ranker().fit(order, [live[d].text for d in order])
    analyzer = BM25Ranker()
    fresh = Segments.build(analyzer, order, [("k", None)] * len(order), analyzer.tokenize([live[d].text for d in order]))
    for query in _queries(live, rng):
        probe = [order[0], order[-1], "nope"]
        got = store.lexical_search(query, k, score_ids=probe)
        exp_ids, exp_scores = ranker.top(query, k)
        assert got.ids == exp_ids
        np.testing.assert_allclose(got.scores, exp_scores, rtol=1e-6)
        np.testing.assert_array_equal(got.scores, exp_scores)  # in fact bit for bit
        all_scores = ranker.scores(query)
        pos = ranker.positions()
        assert got.scored == {order[0]: float(all_scores[pos[order[0]]]),
                              order[-1]: float(all_scores[pos[order[-1]]]), "nope": 0.0}
        f_ids, f_top, _ = fresh.search(query, k)
        assert f_ids == got.ids
        np.testing.assert_array_equal(f_top, got.scores)


def _builds(caplog) -> int:
    return sum(BUILT in r.getMessage() for r in caplog.records)


def _merges(caplog) -> int:
    return sum(MERGED in r.getMessage() for r in caplog.records)


def _open(path, *, merge_min_docs: int = 500, merge_fraction: float = 0.05, create: bool = False, **kw) -> EmbeddedStore:
    settings = EmbeddedStoreSettings(lexical_merge_min_docs=merge_min_docs, lexical_merge_fraction=merge_fraction)
    return EmbeddedStore(path, create=create, settings=settings, **kw)


def _random_writes(store: EmbeddedStore, live: dict[str, Document], rng: np.random.Generator, steps: int,
                   *, check_every: int = 1, pool: int = 60) -> None:
    """``steps`` random writes (a new document, a replacement, a delete, or a small batch), the
    lexical search checked after every ``check_every``."""
    for step in range(steps):
        r = rng.random()
        if r < 0.45 or not live:  # put one (new or replacing)
            doc_id = f"d{int(rng.integers(0, pool)):03d}"
            doc, vec = _doc(doc_id, rng)
            store.put([(doc, vec)])
            live[doc_id] = doc
        elif r < 0.75:  # delete one or two (one maybe unknown)
            ids = [sorted(live)[int(rng.integers(0, len(live)))], f"x{step}"]
            store.delete(ids)
            live.pop(ids[0], None)
        else:  # a batch of puts
            batch = {f"d{int(i):03d}" for i in rng.integers(0, pool, int(rng.integers(2, 6)))}
            items = [_doc(d, rng) for d in sorted(batch)]
            store.put(items)
            live.update({d.id: d for d, _ in items})
        if step % check_every == 0:
            _assert_exact(store, live, rng)


@pytest.mark.parametrize("merge_min_docs", [0, 4, 500])
def test_random_writes_score_exactly_as_a_rebuild(tmp_path, caplog, merge_min_docs):
    """Merging after every write, every few writes, or never: the same results as a rebuild."""
    caplog.set_level(logging.INFO, logger="sdr_search.indexer.embedded")
    rng = np.random.default_rng(merge_min_docs)
    live: dict[str, Document] = {}
    with _open(tmp_path / "s", create=True, merge_min_docs=merge_min_docs, merge_fraction=0.0) as store:
        store.ensure_meta(META)
        items = [_doc(f"d{i:03d}", rng) for i in range(30)]
        store.put(items)
        live.update({d.id: d for d, _ in items})
        _assert_exact(store, live, rng)
        assert _builds(caplog) == 1
        _random_writes(store, live, rng, 60)
        assert _builds(caplog) == 1  # never rebuilt: delta segment and mask, merged
        if merge_min_docs == 500:
            assert _merges(caplog) == 0
        else:
            assert _merges(caplog) >= 5
        # a new process loads the newest saved base and catches up with what it lacks
        store.refresh_lexical()
    with _open(tmp_path / "s", merge_min_docs=merge_min_docs) as again:
        _assert_exact(again, live, rng)
    assert _builds(caplog) == 1


def test_deleting_everything_then_writing_again(tmp_path):
    rng = np.random.default_rng(5)
    with _open(tmp_path / "s", create=True, merge_min_docs=3, merge_fraction=0.0) as store:
        store.ensure_meta(META)
        items = [_doc(f"d{i:03d}", rng) for i in range(6)]
        store.put(items)
        live = {d.id: d for d, _ in items}
        _assert_exact(store, live, rng)
        for doc_id in sorted(live):
            store.delete([doc_id])
        live.clear()
        _assert_exact(store, live, rng)
        assert store.refresh_lexical() == 0
        doc, vec = _doc("d100", rng)
        store.put([(doc, vec)])
        _assert_exact(store, {"d100": doc}, rng)


def test_merge_bound_is_the_setting(tmp_path, caplog):
    """Pending documents (delta + masked) beyond max(min docs, fraction x base) trigger one merge."""
    caplog.set_level(logging.INFO, logger="sdr_search.indexer.embedded")
    rng = np.random.default_rng(7)
    with _open(tmp_path / "s", create=True, merge_min_docs=3, merge_fraction=0.1) as store:
        store.ensure_meta(META)
        items = [_doc(f"d{i:03d}", rng) for i in range(50)]
        store.put(items)
        store.refresh_lexical()
        live = {d.id: d for d, _ in items}
        for i in range(5):  # bound max(3, 0.1 x 50) = 5: no merge yet
            doc, vec = _doc(f"n{i}", rng)
            store.put([(doc, vec)])
            live[doc.id] = doc
            store.lexical_search("w1", 3)
        assert _merges(caplog) == 0 and store._lexical.index.pending == 5
        store.delete(["d001"])
        live.pop("d001")
        _assert_exact(store, live, rng)  # past the bound: answered from base + delta, merged in the background
        _join_merge(store)
        assert _merges(caplog) == 1 and store._lexical.index.pending == 0
        _assert_exact(store, live, rng)
        assert _builds(caplog) == 1


def _join_merge(store: EmbeddedStore) -> None:
    thread = store._lexical._merging
    if thread is not None:
        thread.join(30)
        assert not thread.is_alive()


def test_a_search_past_the_bound_does_not_wait_for_the_merge(tmp_path, monkeypatch, caplog):
    """The search that finds the delta over the bound answers at once (base + delta, exact); a
    thread merges. Writes applied during the merge are recorded and replayed onto the merged base
    (nothing lost, no merge thrown away); past HARD_BOUND_FACTOR x the bound the search merges
    itself before answering."""
    from sdr_search.indexer.embedded.lexical import HARD_BOUND_FACTOR

    caplog.set_level(logging.INFO, logger="sdr_search.indexer.embedded")
    rng = np.random.default_rng(5)
    from sdr_search.indexer.embedded.lexical import LexicalIndex

    gate, started = threading.Event(), threading.Event()
    real = LexicalIndex._save

    def slow(self, index):  # the background merge is held after it has read the index
        if threading.current_thread().name == "sdr-lexical-merge":
            started.set()
            assert gate.wait(30)
        return real(self, index)

    monkeypatch.setattr(LexicalIndex, "_save", slow)
    with _open(tmp_path / "s", create=True, merge_min_docs=3, merge_fraction=0.0) as store:
        store.ensure_meta(META)
        items = [_doc(f"d{i:03d}", rng) for i in range(40)]
        store.put(items)
        store.refresh_lexical()
        live = {d.id: d for d, _ in items}
        merges = _merges(caplog)
        for i in range(4):  # bound 3: the fourth write is past it
            doc, vec = _doc(f"n{i}", rng)
            store.put([(doc, vec)])
            live[doc.id] = doc
        _assert_exact(store, live, rng)  # answered while the merge is held back
        assert started.wait(30) and store._lexical._merging.is_alive()
        doc, vec = _doc("late", rng)
        store.put([(doc, vec)])  # applied by the next search while the merge waits
        live["late"] = doc
        store.delete(["d003"])
        live.pop("d003")
        _assert_exact(store, live, rng)
        gate.set()
        _join_merge(store)
        assert _merges(caplog) == merges + 1
        assert store._lexical.index.pending == 2  # the two writes made during the merge, replayed
        _assert_exact(store, live, rng)
        started.clear()
        gate.clear()
        for i in range(HARD_BOUND_FACTOR * 3 + 1):  # a bulk load past the hard bound: merged before answering
            doc, vec = _doc(f"b{i}", rng)
            store.put([(doc, vec)])
            live[doc.id] = doc
        gate.set()
        _assert_exact(store, live, rng)
        assert store._lexical.index.pending == 0 and _merges(caplog) == merges + 2


def test_another_store_object_writing_the_directory_keeps_a_reader_exact(tmp_path, caplog):
    """Two objects on one directory are two processes to each other: each catches up with the
    catalogue when the generation moved without its own write notes."""
    caplog.set_level(logging.INFO, logger="sdr_search.indexer.embedded")
    rng = np.random.default_rng(11)
    path = tmp_path / "s"
    with _open(path, create=True, merge_min_docs=4, merge_fraction=0.0) as a:
        a.ensure_meta(META)
        items = [_doc(f"d{i:03d}", rng) for i in range(25)]
        a.put(items)
        live = {d.id: d for d, _ in items}
        with _open(path, merge_min_docs=4, merge_fraction=0.0) as b, EmbeddedStore(path, read_only=True) as ro:
            for round_ in range(12):
                writer, reader = (a, b) if round_ % 2 == 0 else (b, a)
                _random_writes(writer, live, rng, 3, check_every=10)
                _assert_exact(reader, live, rng)  # saw a generation it has no notes for
                _assert_exact(writer, live, rng)
                _assert_exact(ro, live, rng)
    assert _builds(caplog) <= 3  # one per object at most (the read-only one builds in memory)


def test_lost_delta_is_caught_up_by_tokenising_only_the_changed_documents(tmp_path, monkeypatch):
    rng = np.random.default_rng(13)
    path = tmp_path / "s"
    with _open(path, create=True) as s:
        s.ensure_meta(META)
        items = [_doc(f"d{i:03d}", rng) for i in range(40)]
        s.put(items)
        assert s.refresh_lexical() == 40  # base saved
        live = {d.id: d for d, _ in items}
        s.delete(["d003", "d004"])
        new = [_doc(f"d{i:03d}", rng) for i in (5, 6, 90)]  # two replacements, one new
        s.put(new)
        live.pop("d003"), live.pop("d004")
        live.update({d.id: d for d, _ in new})
        _assert_exact(s, live, rng)  # delta in memory only: "crash" now
    tokenised: list[int] = []
    original = BM25Ranker.tokenize

    def counting(self, texts):
        texts = list(texts)
        tokenised.append(len(texts))
        return original(self, texts)

    monkeypatch.setattr(BM25Ranker, "tokenize", counting)
    with _open(path) as again:
        again.lexical_search("w1", 1)
        assert tokenised[0] == 3  # the catch-up: just the three documents put after the base
        _assert_exact(again, live, rng)


def test_outdated_or_damaged_bases_are_rebuilt(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="sdr_search.indexer.embedded")
    rng = np.random.default_rng(17)
    path = tmp_path / "s"
    with _open(path, create=True) as s:
        s.ensure_meta(META)
        items = [_doc(f"d{i:03d}", rng) for i in range(20)]
        s.put(items)
        s.refresh_lexical()
    live = {d.id: d for d, _ in items}
    (saved,) = [p for p in path.iterdir() if p.name.startswith(LEXICAL_PREFIX)]
    # a base of the previous format (bm25s's files) under another name
    old = path / f"{LEXICAL_PREFIX}0123456789abcdef01234567"
    old.mkdir()
    (old / RANKER_FILE).write_text("{}")
    os.utime(old, ns=(saved.stat().st_mtime_ns + 10**9,) * 2)  # the newest: tried first
    (saved / "docs.npy").write_bytes(b"garbage")
    with _open(path) as s:
        _assert_exact(s, live, rng)
    messages = [r.getMessage() for r in caplog.records]
    assert any("is outdated (format 1" in m for m in messages)
    assert any("unreadable" in m for m in messages)
    assert _builds(caplog) == 2
    assert [p.name for p in path.iterdir() if p.name.startswith(LEXICAL_PREFIX)] == [saved.name]


def test_bulk_writes_overflowing_the_queue_are_caught_up_from_the_catalogue(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="sdr_search.indexer.embedded")
    rng = np.random.default_rng(19)
    with _open(tmp_path / "s", create=True, merge_min_docs=5, merge_fraction=0.0) as s:
        s.ensure_meta(META)
        items = [_doc(f"d{i:03d}", rng) for i in range(10)]
        s.put(items)
        live = {d.id: d for d, _ in items}
        _assert_exact(s, live, rng)
        for i in range(4):  # 20 documents queued: over the bound, the queue is dropped
            batch = [_doc(f"b{i}{j}", rng) for j in range(5)]
            s.put(batch)
            live.update({d.id: d for d, _ in batch})
        assert s._lexical._queue == [] or s._lexical._queued <= 5
        _assert_exact(s, live, rng)
    assert _builds(caplog) == 1


def test_searches_during_writes_from_other_threads(tmp_path):
    """Threads search while one writes: no error, and each result is a state's exact ranking
    (checked at the end, after the writes)."""
    rng = np.random.default_rng(23)
    with _open(tmp_path / "s", create=True, merge_min_docs=3, merge_fraction=0.0) as s:
        s.ensure_meta(META)
        items = [_doc(f"d{i:03d}", rng) for i in range(30)]
        s.put(items)
        live = {d.id: d for d, _ in items}
        errors: list[BaseException] = []
        stop = threading.Event()

        def search() -> None:
            try:
                while not stop.is_set():
                    hits = s.lexical_search("w1 w2 w3 w40 w41", 10)
                    assert np.all(np.diff(hits.scores) <= 0) and np.all(hits.scores > 0)
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=search) for _ in range(3)]
        for t in threads:
            t.start()
        wrng = np.random.default_rng(29)
        for i in range(40):
            doc, vec = _doc(f"d{int(wrng.integers(0, 50)):03d}", wrng)
            s.put([(doc, vec)])
            live[doc.id] = doc
            if i % 3 == 0:
                victim = sorted(live)[int(wrng.integers(0, len(live)))]
                s.delete([victim])
                live.pop(victim)
        stop.set()
        for t in threads:
            t.join()
        assert not errors
        _assert_exact(s, live, rng)


def test_segments_merged_equals_built_afresh():
    """Merging (postings moved, nothing tokenised) gives the index a fresh build gives."""
    analyzer = BM25Ranker()
    texts = {f"d{i}": " ".join(f"w{(i * 7 + j) % 23}" for j in range(i % 9)) for i in range(40)}
    ids = sorted(texts)
    seg = Segments.build(analyzer, ids[:30], [("k", None)] * 30, analyzer.tokenize([texts[d] for d in ids[:30]]))
    seg.update(["d3", "d17", "nope"], [(d, ("k2", "t"), analyzer.tokenize([texts[d] + " w99"])[0]) for d in ids[30:] + ["d5"]])
    assert seg.pending == 2 + 11 and seg.size == 38
    merged = seg.merged()
    assert merged.pending == 0 and merged.size == 38 and merged.covered == seg.covered
    live = [d for d in ids if d not in ("d3", "d17")]
    final = {d: texts[d] + (" w99" if d in ids[30:] + ["d5"] else "") for d in live}
    fresh = Segments.build(analyzer, live, [seg.covered[d] for d in live], analyzer.tokenize([final[d] for d in live]))
    for query in ["w1 w2 w2 w99", "w5 w5 w5 w22 w0", texts["d7"]]:
        a, b, c = seg.search(query, 50), merged.search(query, 50), fresh.search(query, 50)
        assert a[0] == b[0] == c[0]
        np.testing.assert_array_equal(a[1], b[1])
        np.testing.assert_array_equal(b[1], c[1])
