"""Single-document writes into an embedded store of 10,000 wiki articles, each followed by one
lexical (BM25) search: the lexical index rebuilt whole after every write (before) next to the
segmented index (after: base + delta segment + deletion mask, merged in bounded steps), in one run.

The store holds ``--docs`` articles of ``/work/shared/data/wiki/articles-*.jsonl.gz`` (the first
ones, in file order). No model is loaded: every section becomes one paragraph of one sentence (its
paragraphs joined) with a random unit vector (dimension 384), put through
``EmbeddedStore.put([(Document, DocVectors)])``; the lexical index sees each article's whole text
(title and paragraphs), as with real sentences.

Writes cycle through three kinds, one document each: a new document (a copy of a random article
under a new id), a replacement (a live article's id with its first section dropped) and a delete
(a random live article). After each write, one lexical search: the whole text of one of 50 fixed
query articles (never written), top 100, the query itself excluded, as ``sdr mlt`` asks it.

- **before**: the lexical index of commit ``--before-rev`` (the last one with the old design),
  loaded from git: every write changes the fingerprint of the live documents, so the search after
  it rebuilds bm25s over every text (what ``EmbeddedStore._lexical_ranker`` did at that commit;
  its index saved into a separate directory as it was).
- **after**: ``EmbeddedStore.lexical_search`` of this tree: the write's document tokenised into
  the delta segment, the search scores base + delta with the live corpus statistics; a merge when
  the delta and the masked documents exceed ``max(SDR_STORE_LEXICAL_MERGE_MIN_DOCS,
  SDR_STORE_LEXICAL_MERGE_FRACTION x base)``.

Printed: the time to build the lexical index over the whole store (both designs), per write the
write call and the search after it (p50, p99, max, mean), write+search cycles per second, and
the latency of searches with no write in between; then an exactness check of the final state (the
segmented index against bm25s fitted on the live texts: same ids, scores equal bit for bit).

Usage:

    python bench/lexical_writes.py                      # 10,000 articles, 3 writes before, 600 after
    python bench/lexical_writes.py --docs 2000 --writes 100 --before-writes 2   # a quick run
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import itertools
import json
import logging
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sdr_search.core.documents import Document  # noqa: E402
from sdr_search.core.lexical import BM25Ranker  # noqa: E402
from sdr_search.core.vectors import DocVectors  # noqa: E402
from sdr_search.indexer.embedded import EmbeddedStore, catalog  # noqa: E402
from sdr_search.indexer.settings import EmbeddedStoreSettings  # noqa: E402
from sdr_search.indexer.store import IndexMeta  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "wiki"
DIM = 384
BEFORE_REV = "5989502c9420a018724725206c4a0a92832382e3"  # last commit of the rebuild-per-write design
N_QUERIES = 50
K = 100


def read_articles(n: int) -> list[tuple[str, str, list[str]]]:
    """``(id, title, sections)`` of the first ``n`` articles, a section's paragraphs joined."""
    out = []
    for path in sorted(DATA.glob("articles-*.jsonl.gz")):
        with gzip.open(path, "rt", encoding="utf-8") as f:
            for line in f:
                r = json.loads(line)
                sections = [" ".join(s["paragraphs"]) for s in r["sections"] if s["paragraphs"]]
                if sections:
                    out.append((r["id"], r["title"], sections))
                if len(out) == n:
                    return out
    raise SystemExit(f"only {len(out)} articles under {DATA}")


def item(doc_id: str, title: str, sections: list[str], rng: np.random.Generator) -> tuple[Document, DocVectors]:
    doc = Document(doc_id, tuple((s,) for s in sections), title)
    v = rng.standard_normal((len(sections), DIM)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return doc, DocVectors(v, np.arange(len(sections) + 1))


def load_before(rev: str, directory: Path):
    """The lexical module of commit ``rev`` (from git), imported beside the current one."""
    source = subprocess.run(["git", "show", f"{rev}:indexer/embedded/lexical.py"], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout
    path = directory / "lexical_before.py"
    path.write_text(source, encoding="utf-8")
    name = "sdr_search.indexer.embedded._lexical_before"  # its relative import (.durable) resolves
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


class BeforeLexical:
    """``EmbeddedStore._lexical_ranker`` / ``lexical_search`` as they were at ``BEFORE_REV``: on a
    generation change, the fingerprint of every live document; a different one, a full rebuild."""

    def __init__(self, store: EmbeddedStore, module, directory: Path) -> None:
        self.store, self.m = store, module
        directory.mkdir(parents=True, exist_ok=True)
        self.lex = module.LexicalIndex(directory, read_only=False)

    def ranker(self):
        store, lex = self.store, self.lex
        with lex.lock:
            with store._snapshot() as conn:
                generation = store._row_map().generation
                ranker = lex.current(generation)
                if ranker is not None:
                    return ranker
                keys = catalog.in_seq_order(conn, "doc_id, content_key, title")
                fp = self.m.fingerprint(keys, lex.params)
                texts = None
                if not lex.has(fp) and not lex.path_for(fp).is_dir():
                    texts = self.m.document_texts(catalog.in_seq_order(conn, "doc_id, title, paragraphs"))
            return lex.ranker(fp, generation, lambda: texts)

    def search(self, text: str, k: int, exclude: list[str]):
        return self.ranker().top(text, k, exclude_ids=exclude)


def summary(values: list[float]) -> str:
    v = np.asarray(values) * 1e3
    return f"{np.percentile(v, 50):9.1f} {np.percentile(v, 99):9.1f} {v.max():9.1f} {v.mean():9.1f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=10_000)
    ap.add_argument("--writes", type=int, default=600, help="writes with the segmented index")
    ap.add_argument("--before-writes", type=int, default=3, help="writes with the rebuild-per-write index")
    ap.add_argument("--static-queries", type=int, default=20, help="searches with no write before, each design")
    ap.add_argument("--before-rev", default=BEFORE_REV)
    ap.add_argument("--workdir", type=Path, help="where the store goes (default: a temp dir, removed)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    merges: list[str] = []

    class MergeLog(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "merged" in record.getMessage():
                merges.append(record.getMessage())

    log = logging.getLogger("sdr_search.indexer.embedded")
    log.addHandler(MergeLog(level=logging.INFO))
    log.setLevel(logging.INFO)

    rng = np.random.default_rng(args.seed)
    work = args.workdir or Path(tempfile.mkdtemp(prefix="lexical-writes-"))
    work.mkdir(parents=True, exist_ok=True)
    path = work / "store"
    if path.exists():
        shutil.rmtree(path)
    t0 = time.perf_counter()
    articles = read_articles(args.docs)
    by_id = {a[0]: a for a in articles}
    settings = EmbeddedStoreSettings()
    print(f"{len(articles)} articles read in {time.perf_counter() - t0:.1f} s; merge bound "
          f"max({settings.lexical_merge_min_docs}, {settings.lexical_merge_fraction} x base documents)")
    store = EmbeddedStore(path, create=True, settings=settings)
    store.ensure_meta(IndexMeta("random-unit-vectors", "bench", DIM, {"paragraph_unit": "section"}))
    t0 = time.perf_counter()
    for start in range(0, len(articles), 250):
        store.put([item(i, t, s, rng) for i, t, s in articles[start:start + 250]])
    counts = store.counts()
    print(f"store: {counts['documents']} documents, {counts['sentences']} vectors, put in "
          f"{time.perf_counter() - t0:.1f} s")

    query_ids = [a[0] for a in articles[:: max(1, len(articles) // N_QUERIES)]][:N_QUERIES]
    protected = set(query_ids)
    queries = [(q, Document(q, tuple((s,) for s in by_id[q][2]), by_id[q][1]).text) for q in query_ids]
    live = [a[0] for a in articles if a[0] not in protected]
    counter = itertools.count()

    def write(kind: int) -> str:
        """One write of the cycle (new, replacement, delete); returns its kind."""
        if kind == 0:
            _, title, sections = by_id[articles[int(rng.integers(0, len(articles)))][0]]
            doc_id = f"new-{next(counter)}"
            store.put([item(doc_id, title, sections, rng)])
            return "new"
        victim = live[int(rng.integers(0, len(live)))]
        if kind == 1:
            _, title, sections = by_id[victim]
            store.put([item(victim, title, sections[1:] or sections, rng)])
            return "replace"
        live.remove(victim)
        store.delete([victim])
        return "delete"

    def cycle(n: int, search) -> dict[str, list[float]]:
        out: dict[str, list[float]] = {"write": [], "search": [], "cycle": []}
        for i in range(n):
            qid, text = queries[i % len(queries)]
            t = time.perf_counter()
            write(i % 3)
            t1 = time.perf_counter()
            search(text, K, [qid])
            t2 = time.perf_counter()
            out["write"].append(t1 - t)
            out["search"].append(t2 - t1)
            out["cycle"].append(t2 - t)
        return out

    def static(search) -> list[float]:
        lat = []
        for qid, text in queries[: args.static_queries]:
            t = time.perf_counter()
            search(text, K, [qid])
            lat.append(time.perf_counter() - t)
        return lat

    # -- before: rebuild per write ---------------------------------------------------------------
    before_mod = load_before(args.before_rev, work)
    before = BeforeLexical(store, before_mod, work / "before-index")
    t = time.perf_counter()
    before.ranker()
    build_before = time.perf_counter() - t
    res_before = cycle(args.before_writes, before.search)
    static_before = static(before.search)

    # -- after: segments ------------------------------------------------------------------------
    def after_search(text, k, exclude):
        return store.lexical_search(text, k, exclude_ids=exclude)

    lexdirs = [p for p in path.iterdir() if p.name.startswith("lexical-")]
    assert not lexdirs, lexdirs
    t = time.perf_counter()
    store.refresh_lexical()  # full build of the base (no saved index yet)
    build_after = time.perf_counter() - t
    n_merges = len(merges)
    res_after = cycle(args.writes, after_search)
    merges_during = len(merges) - n_merges
    static_after = static(after_search)

    # -- report -----------------------------------------------------------------------------
    counts = store.counts()
    print(f"\nlexical index over the whole store: before (bm25s rebuild) {build_before:.1f} s, "
          f"after (base segment build, saved) {build_after:.1f} s")
    print(f"\n{'':38} {'p50 ms':>9} {'p99 ms':>9} {'max ms':>9} {'mean ms':>9}")
    for name, res, n in (("before", res_before, args.before_writes), ("after", res_after, args.writes)):
        print(f"{name} ({n} writes)")
        print(f"{'  write call (put / delete)':38} {summary(res['write'])}")
        print(f"{'  lexical search after the write':38} {summary(res['search'])}")
        print(f"{'  write + search':38} {summary(res['cycle'])}")
        print(f"{'  write + search cycles/s':38} {n / sum(res['cycle']):9.2f}")
    print(f"{'search, no write before: before':38} {summary(static_before)}")
    print(f"{'search, no write before: after':38} {summary(static_after)}")
    print(f"merges during the {args.writes} writes: {merges_during}; pending now "
          f"{store._lexical.index.pending}, bound {store._lexical.merge_bound()}; store {counts['documents']} documents")

    # -- exactness of the final state -------------------------------------------------------------
    with store._snapshot() as conn:
        rows = catalog.in_seq_order(conn, "doc_id, title, paragraphs")
    ids, texts = before_mod.document_texts(rows)
    ranker = BM25Ranker().fit(ids, texts)
    same = 0
    for qid, text in queries[:10]:
        got = store.lexical_search(text, K, exclude_ids=[qid])
        exp_ids, exp_scores = ranker.top(text, K, exclude_ids=[qid])
        same += got.ids == exp_ids and np.array_equal(got.scores, exp_scores)
    print(f"exactness: {same}/10 queries with the same top {K} ids and bit-identical scores as bm25s "
          f"fitted on the {len(ids)} live texts")
    store.close()
    if args.workdir is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
