"""tantivy (Rust, Lucene-style segments, PyPI ``tantivy``) against the embedded store's own lexical
index (``indexer/embedded/lexical.py``), side by side in one run (issue 34, item 3).

Both engines index the same tokens: every text is analysed once by the store's own analyser
(:meth:`BM25Ranker.tokenize`: lowercase, ``\\w\\w+``, English stop words, no stemming), and tantivy
gets the tokens joined by spaces in a field with its built-in ``whitespace`` tokenizer (no
lowercasing, no length cut, ``index_option="freq"``: term frequencies, no positions). So the two
vocabularies and term frequencies are identical and every difference in scores comes from the
engines' BM25, not from analysis. (tantivy's own ``regex`` tokenizer with ``lowercase`` and
``custom_stopword`` filters would come close, but Rust's ``\\w`` and Unicode lowercasing differ in
corner cases from Python's, and that would blur what is being compared.) A query is the source's
tokens as one ``boolean_query`` of ``Should`` term queries, each boosted by the term's count in
the source: the same "long query" BM25 the store computes (sum over query occurrences).

Sections (``--only`` picks some; default all):

- ``relevance``: IRLeD dev (50 queries, 2,000 judgments), BM25 alone, full sources and short ones
  (``sentences:9``, :func:`sdr_search.core.evaluation.cut_source`, as ``sdr eval --source-cut``):
  MAP and nDCG@10 of ours (k1 = 1.5, the default), ours at k1 = 1.2 (tantivy's fixed k1) and
  tantivy; top-100 overlap and score agreement between the engines. With ``--hybrid``, the
  default hybrid (:func:`hybrid_ranking` with :data:`DEFAULT_HYBRID`, K = 100, no document
  feedback) with each engine's BM25 swapped in; the vectors come from the embedding cache, and
  the hybrid is skipped (the BM25 figures stand) if a corpus document would have to be encoded.
- ``latency``: one whole-document query, top 100 (the query excluded), p50/p99, engines
  interleaved query by query (order alternating), over the IRLeD corpus (the 50 dev queries) and
  over 10,000 Wikipedia articles (50 of them as queries); also top 100 plus the scores of 100
  given ids (what the hybrid path asks: the vector candidates' BM25).
- ``writes``: 10,000 Wikipedia articles loaded in batches of 32 (``sdr index``'s put batch), each
  batch made visible to search (ours: the store's lexical update path, :class:`LexicalIndex`
  ``note_put``/``plan``/``apply`` with its background merges; tantivy: ``add_document`` +
  ``commit`` + ``reload``); then single-document writes at 10k (new / replacement / delete in
  turn), each made visible and followed by one search, engines alternating in blocks.
- ``crash``: a writer process SIGKILLed at random points, several times, each engine; after each
  kill the index is reopened and checked (see :func:`crash`).

Usage:

    python bench/experiments/tantivy_lexical.py                           # everything (about 30 min on a loaded 2-core VM)
    python bench/experiments/tantivy_lexical.py --only relevance --hybrid
    python bench/experiments/tantivy_lexical.py --only crash --kills 8
    python bench/experiments/tantivy_lexical.py --json runs/tantivy.json
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Sequence

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))  # lexical_writes

from sdr_search.core.documents import Document, read_documents  # noqa: E402
from sdr_search.core.lexical import BM25Ranker  # noqa: E402
from sdr_search.core.metrics import average_precision, ndcg_at, read_qrels  # noqa: E402
from sdr_search.core.scoring import rank  # noqa: E402
from sdr_search.indexer.embedded.lexical import LexicalIndex, Segments  # noqa: E402

from lexical_writes import read_articles  # noqa: E402  (bench/: the first n Wikipedia articles)

IRLED = ROOT.parent / "shared" / "data" / "irled"
K = 100
BATCH = 32


# -- tantivy behind a small interface --------------------------------------------------------------
class Tantivy:
    """A tantivy index with a stored raw ``id`` and a ``body`` of pre-analysed tokens."""

    def __init__(self, path: Path, *, create: bool = True, heap: int = 64_000_000, threads: int | None = None) -> None:
        import tantivy

        self.t = tantivy
        sb = tantivy.SchemaBuilder()
        sb.add_text_field("id", stored=True, tokenizer_name="raw", index_option="basic")
        sb.add_text_field("body", tokenizer_name="whitespace", index_option="freq")
        self.schema = sb.build()
        path.mkdir(parents=True, exist_ok=True)
        self.index = tantivy.Index(self.schema, path=str(path), reuse=not create)
        self.heap, self.threads = heap, threads
        self.writer = None

    def open_writer(self):
        if self.writer is None:
            kw = {"heap_size": self.heap}
            if self.threads:
                kw["num_threads"] = self.threads
            self.writer = self.index.writer(**kw)
        return self.writer

    def put(self, docs: Sequence[tuple[str, Sequence[str]]]) -> None:
        w = self.open_writer()
        for doc_id, toks in docs:
            w.delete_documents_by_term("id", doc_id)
            w.add_document(self.t.Document(id=[doc_id], body=[" ".join(toks)]))

    def delete(self, ids: Sequence[str]) -> None:
        w = self.open_writer()
        for doc_id in ids:
            w.delete_documents_by_term("id", doc_id)

    def commit(self) -> None:
        self.open_writer().commit()
        self.index.reload()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.wait_merging_threads()
            self.writer = None

    def _query(self, tokens: Sequence[str], exclude: Sequence[str] = (), restrict: Sequence[str] = ()):
        t, schema = self.t, self.schema
        clauses = [(t.Occur.Should, t.Query.boost_query(t.Query.term_query(schema, "body", term, index_option="freq"),
                                                        float(c)))
                   for term, c in Counter(tokens).items()]
        clauses += [(t.Occur.MustNot, t.Query.term_query(schema, "id", d)) for d in exclude]
        if restrict:
            clauses.append((t.Occur.Must, t.Query.const_score_query(t.Query.term_set_query(schema, "id", list(restrict)),
                                                                    0.0)))
        return t.Query.boolean_query(clauses)

    def search(self, tokens: Sequence[str], k: int, *, exclude: Sequence[str] = ()) -> tuple[list[str], np.ndarray]:
        """Top ``k`` (score > 0) ids and scores, best first."""
        searcher = self.index.searcher()
        hits = searcher.search(self._query(tokens, exclude), k, count=False).hits
        hits = [(s, a) for s, a in hits if s > 0]
        return [searcher.doc(a).get_first("id") for _, a in hits], np.asarray([s for s, _ in hits], dtype=np.float32)

    def scores_of(self, tokens: Sequence[str], ids: Sequence[str]) -> dict[str, float]:
        """BM25 of ``ids`` (0 for one that matches no term): one query restricted to them."""
        searcher = self.index.searcher()
        hits = searcher.search(self._query(tokens, restrict=ids), len(ids), count=False).hits
        out = {str(i): 0.0 for i in ids}
        for s, a in hits:
            out[searcher.doc(a).get_first("id")] = float(s)
        return out

    def ids(self) -> list[str]:
        searcher = self.index.searcher()
        hits = searcher.search(self.t.Query.all_query(), max(1, searcher.num_docs), count=False).hits
        return [searcher.doc(a).get_first("id") for _, a in hits]


def ours(ids: Sequence[str], tokens: Sequence[Sequence[str]], k1: float = 1.5) -> Segments:
    return Segments.build(BM25Ranker(k1=k1, stem=False), list(ids), [("k", None)] * len(ids), tokens)


def ours_top(seg: Segments, tokens: Sequence[str], k: int, exclude: Sequence[str] = ()) -> tuple[list[str], np.ndarray]:
    """:meth:`Segments.search` from tokens (the store's search tokenises the text the same way)."""
    from sdr_search.core.scoring import top_of

    with seg._rw.read():
        scores = seg._scores(tokens)
        return top_of(seg._ids, scores, k, exclude_ids=exclude, positive=True)


def pct(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values) * 1e3, q))


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


# -- (a) relevance -----------------------------------------------------------------------------
def relevance(args, out: dict) -> None:
    from sdr_search.core.evaluation import cut_source, parse_source_cut

    logging.getLogger("sdr_search.core.documents").setLevel(logging.ERROR)
    qrels = read_qrels(IRLED / "qrels-dev.txt")
    queries = [q for q in read_documents([str(IRLED / "queries-dev.jsonl.gz")]) if q.id in qrels]
    docs = list(read_documents([str(IRLED / "corpus.jsonl.gz")]))
    ids = [d.id for d in docs]
    an = BM25Ranker(stem=False)
    t0 = time.perf_counter()
    tokens = an.tokenize([d.text for d in docs])
    t_tok = time.perf_counter() - t0
    t0 = time.perf_counter()
    seg15 = ours(ids, tokens, 1.5)
    t_ours = time.perf_counter() - t0
    seg12 = ours(ids, tokens, 1.2)
    work = Path(tempfile.mkdtemp(prefix="tantivy-irled-"))
    t0 = time.perf_counter()
    tv = Tantivy(work / "tv")
    tv.put(list(zip(ids, tokens)))
    tv.commit()
    tv.close()
    t_tv = time.perf_counter() - t0
    print(f"IRLeD: {len(docs)} documents, {len(queries)} queries; tokenised in {t_tok:.1f} s; built: ours "
          f"{t_ours:.1f} s, tantivy {t_tv:.1f} s ({tv.index.searcher().num_segments} segments); load {load()}")
    out["irled_build_s"] = {"tokenise": t_tok, "ours": t_ours, "tantivy": t_tv}
    cut = parse_source_cut("sentences:9")
    res: dict = {}
    signals_by_cut: dict = {}
    for name, c in (("full", None), ("short (sentences:9)", cut)):
        qdocs = [cut_source(q, c) for q in queries]
        qtok = an.tokenize([q.text for q in qdocs])
        per: dict[str, list[tuple[float, float]]] = {"ours k1=1.5": [], "ours k1=1.2": [], "tantivy": []}
        agree = {"overlap@10": [], "overlap@100": [], "spearman@100": [], "ratio_spread": [], "ratio": []}
        agree15 = {"overlap@10": [], "overlap@100": []}
        full_signals = []
        for q, toks in zip(qdocs, qtok):
            rel = qrels[q.id]
            rankings = {}
            for label, seg in (("ours k1=1.5", seg15), ("ours k1=1.2", seg12)):
                s = seg._scores(toks)
                rankings[label] = ([ids[i] for i in rank(ids, s.astype(np.float64))], s)
            t_ids, t_scores = tv.search(toks, len(ids))
            pos = {d: i for i, d in enumerate(ids)}
            t_full = np.zeros(len(ids), dtype=np.float64)
            t_full[[pos[d] for d in t_ids]] = t_scores
            rankings["tantivy"] = ([ids[i] for i in rank(ids, t_full)], t_full)
            full_signals.append({"ours": rankings["ours k1=1.5"][1].astype(np.float64), "tantivy": t_full})
            for label, (r, _) in rankings.items():
                per[label].append((average_precision(r, rel), ndcg_at(r, rel, 10)))
            a, b = rankings["ours k1=1.2"][0], rankings["tantivy"][0]
            agree["overlap@10"].append(len(set(a[:10]) & set(b[:10])) / 10)
            agree["overlap@100"].append(len(set(a[:K]) & set(b[:K])) / K)
            a15 = rankings["ours k1=1.5"][0]
            agree15["overlap@10"].append(len(set(a15[:10]) & set(b[:10])) / 10)
            agree15["overlap@100"].append(len(set(a15[:K]) & set(b[:K])) / K)
            common = [d for d in a[:K] if d in set(b[:K])]
            ra = {d: i for i, d in enumerate(a)}
            rb = {d: i for i, d in enumerate(b)}
            x = np.asarray([ra[d] for d in common], dtype=float)
            y = np.asarray([rb[d] for d in common], dtype=float)
            agree["spearman@100"].append(float(np.corrcoef(np.argsort(np.argsort(x)), np.argsort(np.argsort(y)))[0, 1])
                                         if len(common) > 2 else float("nan"))
            so = rankings["ours k1=1.2"][1]
            ratio = np.asarray([t_full[pos[d]] / so[pos[d]] for d in common if so[pos[d]] > 0])
            med = float(np.median(ratio))
            agree["ratio"].append(med)
            agree["ratio_spread"].append(float(np.max(np.abs(ratio / med - 1))))
        signals_by_cut[name] = (qdocs, full_signals)
        entry = {label: {"MAP": float(np.mean([p[0] for p in v])), "nDCG@10": float(np.mean([p[1] for p in v]))}
                 for label, v in per.items()}
        entry["tantivy vs ours k1=1.2"] = {k: float(np.nanmean(v)) for k, v in agree.items()}
        entry["tantivy vs ours k1=1.2"]["overlap@100 min"] = float(np.min(agree["overlap@100"]))
        entry["tantivy vs ours k1=1.2"]["ratio_spread max"] = float(np.max(agree["ratio_spread"]))
        entry["tantivy vs ours k1=1.5"] = {k: float(np.mean(v)) for k, v in agree15.items()}
        entry["MAP per-query diff (tantivy - ours k1=1.5)"] = {
            "mean": float(np.mean([t[0] - o[0] for t, o in zip(per["tantivy"], per["ours k1=1.5"])])),
            "std": float(np.std([t[0] - o[0] for t, o in zip(per["tantivy"], per["ours k1=1.5"])]))}
        entry["MAP per-query diff (tantivy - ours k1=1.2)"] = {
            "mean": float(np.mean([t[0] - o[0] for t, o in zip(per["tantivy"], per["ours k1=1.2"])])),
            "std": float(np.std([t[0] - o[0] for t, o in zip(per["tantivy"], per["ours k1=1.2"])]))}
        res[name] = entry
        print(f"\n{name}:")
        for label in per:
            print(f"  {label:<12} MAP {entry[label]['MAP']:.4f}  nDCG@10 {entry[label]['nDCG@10']:.4f}")
        print(f"  tantivy vs ours k1=1.2: {json.dumps({k: round(v, 4) for k, v in entry['tantivy vs ours k1=1.2'].items()})}")
        print(f"  tantivy vs ours k1=1.5: {json.dumps({k: round(v, 4) for k, v in entry['tantivy vs ours k1=1.5'].items()})}")
        for key in ("MAP per-query diff (tantivy - ours k1=1.5)", "MAP per-query diff (tantivy - ours k1=1.2)"):
            d = entry[key]
            print(f"  {key}: {d['mean']:+.4f} (std {d['std']:.4f}, paired SE {d['std'] / np.sqrt(len(qdocs)):.4f})")
    out["relevance"] = res
    res["replace_drift"] = replace_drift(tv, seg15, ids, tokens, an.tokenize([q.text for q in queries]))
    if args.hybrid:
        try:
            hybrid(args, out, docs, queries, signals_by_cut, qrels)
        except SystemExit as e:  # the cache lacks a corpus document: the BM25 figures stand
            print(e)
            out["hybrid"] = str(e)
    shutil.rmtree(work, ignore_errors=True)


def replace_drift(tv: Tantivy, seg: Segments, ids: list[str], tokens: list[list[str]], qtok: list[list[str]]) -> dict:
    """Put 10 % of the documents again, unchanged (a replacement with the same text), in both
    engines: the live corpus is the same, so its BM25 should be. Scores of the 50 full queries'
    top 100 before and after: tantivy keeps the replaced copies in its statistics (N, df, average
    length) until a merge drops them; ours computes them over the live documents."""
    before_t = [dict(zip(*tv.search(t, K))) for t in qtok]
    before_o = [seg._scores(t).copy() for t in qtok]
    again = list(range(0, len(ids), 10))
    tv.put([(ids[i], tokens[i]) for i in again])
    tv.commit()
    seg.update([], [(ids[i], ("k", None), tokens[i]) for i in again])
    diff_t, overlap_t, diff_o = [], [], []
    for t, bt, bo in zip(qtok, before_t, before_o):
        at = dict(zip(*tv.search(t, K)))
        common = [d for d in at if d in bt]
        overlap_t.append(len(common) / K)
        diff_t.append(max(abs(at[d] / bt[d] - 1) for d in common))
        after = seg._scores(t)
        live = np.asarray([seg._slot_of[d] for d in ids])
        old = np.asarray([bo[i] for i in range(len(ids))])
        diff_o.append(float(np.max(np.abs(after[live] - old))))
    out = {"replaced": len(again), "tantivy max rel. score change": float(np.max(diff_t)),
           "tantivy median of per-query max change": float(np.median(diff_t)),
           "tantivy top-100 overlap min": float(np.min(overlap_t)), "tantivy segments": tv.index.searcher().num_segments,
           "ours max abs score change": float(np.max(diff_o))}
    print(f"replace drift: {json.dumps(out)}")
    return out


def hybrid(args, out: dict, docs: list[Document], queries: list[Document], signals_by_cut: dict, qrels) -> None:
    """The default hybrid (no document feedback) with each engine's BM25; the corpus vectors from
    the cache only (the run stops rather than encode the corpus)."""
    from sdr_search.core.cache import EmbeddingCache
    from sdr_search.core.embed import embed_corpus, embed_documents
    from sdr_search.core.encoder import SentenceEncoder
    from sdr_search.core.evaluation import EvalInputs, hybrid_ranking, signal_scorers
    from sdr_search.core.fusion import DEFAULT_HYBRID, SourceShape
    from sdr_search.core.settings import CacheSettings

    class NoEncoding(SentenceEncoder):
        def encode(self, *a, **kw):  # the cache must hold everything: never encode here
            raise SystemExit("hybrid: a document is not in the embedding cache; not encoding (run later)")

    encoder = NoEncoding()
    query_encoder = SentenceEncoder()  # a short source's few sentences may need encoding; the corpus may not
    ids = [d.id for d in docs]
    paragraphs = np.asarray([len(d.paragraphs) for d in docs], dtype=np.int64)
    spec = DEFAULT_HYBRID.replace(adaptive=DEFAULT_HYBRID.adaptive.without_feedback())
    res = {}
    with EmbeddingCache(CacheSettings().cache_dir / "embeddings.sqlite") as cache:
        corpus_vectors = embed_corpus(docs, encoder, cache=cache, progress=False)
        for name, (qdocs, bm25) in signals_by_cut.items():
            qv = [v for _, v in embed_documents(qdocs, query_encoder, cache=cache, progress=False, total=len(qdocs))]
            scorers = signal_scorers(("sdr", "mean"), EvalInputs(docs, qdocs, corpus_vectors, qv), stats="exact")
            per = {"ours": [], "tantivy": []}
            for k, q in enumerate(qdocs):
                vec = {n: np.asarray(fn(k, q), dtype=np.float64) for n, fn in scorers.items()}
                for engine in per:
                    r = hybrid_ranking(ids, {"bm25": bm25[k][engine], **vec}, spec, K, source=SourceShape.of(q),
                                       paragraphs=paragraphs)
                    per[engine].append((average_precision([d for d, _ in r], qrels[q.id]),
                                        ndcg_at([d for d, _ in r], qrels[q.id], 10)))
            res[name] = {e: {"MAP": float(np.mean([p[0] for p in v])), "nDCG@10": float(np.mean([p[1] for p in v]))}
                         for e, v in per.items()}
            d = np.asarray([t[0] - o[0] for t, o in zip(per["tantivy"], per["ours"])])
            res[name]["MAP per-query diff (tantivy - ours)"] = {"mean": float(d.mean()), "std": float(d.std()),
                                                                "se": float(d.std() / np.sqrt(len(d)))}
            print(f"hybrid {name}: " + ", ".join(f"{e} MAP {v['MAP']:.4f} nDCG@10 {v['nDCG@10']:.4f}"
                                                 for e, v in res[name].items() if "MAP" in v)
                  + f"; paired MAP diff {d.mean():+.4f} (SE {d.std() / np.sqrt(len(d)):.4f})")
    out["hybrid"] = res


# -- (b) latency -------------------------------------------------------------------------------



def wiki_doc(a: tuple[str, str, list[str]]) -> Document:
    return Document(a[0], tuple((s,) for s in a[2]), a[1])


def latency_on(label: str, ids: list[str], texts: list[str], query_ids: list[str], query_texts: list[str],
               rounds: int, work: Path) -> dict:
    an = BM25Ranker(stem=False)
    tokens = an.tokenize(texts)
    seg = ours(ids, tokens)
    tv = Tantivy(work / f"tv-{label}")
    tv.put(list(zip(ids, tokens)))
    tv.commit()
    tv.close()
    rng = random.Random(0)
    times: dict[str, list[float]] = {"ours": [], "tantivy": [], "ours+scores": [], "tantivy+scores": []}
    overlap = []

    def run_ours(text: str, qid: str, extra: list[str]):
        toks = an.tokenize([text])[0]  # as Segments.search does
        r = ours_top(seg, toks, K, [qid])
        if extra:
            with seg._rw.read():
                s = seg._scores(toks)
            {d: float(s[seg._slot_of[d]]) for d in extra}
        return r

    def run_tv(text: str, qid: str, extra: list[str]):
        toks = an.tokenize([text])[0]
        r = tv.search(toks, K, exclude=[qid])
        if extra:
            tv.scores_of(toks, extra)
        return r

    for rnd in range(rounds):
        for j, (qid, text) in enumerate(zip(query_ids, query_texts)):
            extra = rng.sample(ids, K)
            order = [("ours", run_ours), ("tantivy", run_tv)]
            if (j + rnd) % 2:
                order.reverse()
            for name, fn in order:
                t0 = time.perf_counter()
                r = fn(text, qid, [])
                times[name].append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                fn(text, qid, extra)
                times[f"{name}+scores"].append(time.perf_counter() - t0)
                if rnd == 0 and name == "ours":
                    got_ours = r[0]
                elif rnd == 0:
                    got_tv = r[0]
            if rnd == 0:
                overlap.append(len(set(got_ours) & set(got_tv)) / K)
    # where tantivy's time goes (one pass, after the timed rounds): analysis, building the query
    # objects, the search, reading the ids of the hits
    parts: dict[str, list[float]] = {"tokenise": [], "build query": [], "search": [], "read ids": [], "ours score+top": []}
    for qid, text in zip(query_ids, query_texts):
        t0 = time.perf_counter()
        toks = an.tokenize([text])[0]
        t1 = time.perf_counter()
        q = tv._query(toks, [qid])
        t2 = time.perf_counter()
        searcher = tv.index.searcher()
        hits = searcher.search(q, K, count=False).hits
        t3 = time.perf_counter()
        [searcher.doc(a).get_first("id") for _, a in hits]
        t4 = time.perf_counter()
        ours_top(seg, toks, K, [qid])
        t5 = time.perf_counter()
        for key, v in zip(parts, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4)):
            parts[key].append(v)
    qlen = [len(set(t)) for t in an.tokenize(query_texts)]
    res = {name: {"p50_ms": pct(v, 50), "p99_ms": pct(v, 99), "n": len(v)} for name, v in times.items()}
    res["parts p50 ms"] = {key: pct(v, 50) for key, v in parts.items()}
    res["distinct query terms (median)"] = float(np.median(qlen))
    res["top100 overlap (k1 1.5 vs tantivy)"] = float(np.mean(overlap))
    res["load"] = load()
    print(f"latency {label} ({len(ids)} docs, {len(query_ids)} queries x {rounds} rounds, median "
          f"{np.median(qlen):.0f} distinct terms): " + ", ".join(
              f"{n} p50 {v['p50_ms']:.1f} p99 {v['p99_ms']:.1f} ms" for n, v in res.items() if isinstance(v, dict) and "p50_ms" in v)
          + f"; parts p50 (ms) {json.dumps({k: round(v, 1) for k, v in res['parts p50 ms'].items()})}; load {res['load']}")
    return res


def latency(args, out: dict) -> None:
    logging.getLogger("sdr_search.core.documents").setLevel(logging.ERROR)
    work = Path(tempfile.mkdtemp(prefix="tantivy-latency-"))
    try:
        docs = list(read_documents([str(IRLED / "corpus.jsonl.gz")]))
        queries = list(read_documents([str(IRLED / "queries-dev.jsonl.gz")]))
        res = {"irled": latency_on("irled", [d.id for d in docs], [d.text for d in docs], [q.id for q in queries],
                                   [q.text for q in queries], args.rounds, work)}
        arts = read_articles(args.docs)
        qs = arts[:: max(1, len(arts) // 50)][:50]
        res["wiki"] = latency_on("wiki", [a[0] for a in arts], [wiki_doc(a).text for a in arts], [a[0] for a in qs],
                                 [wiki_doc(a).text for a in qs], args.rounds, work)
        out["latency"] = res
    finally:
        shutil.rmtree(work, ignore_errors=True)


# -- (c) writes --------------------------------------------------------------------------------
class _Prepared:
    def __init__(self, doc: Document) -> None:
        self.doc, self.content_key = doc, f"k-{hash(doc.text)}"


class OursLive:
    """The store's lexical update path without the catalogue: each write is a committed change the
    next search applies (``note_put``/``note_delete``, then ``plan`` + ``apply``), merges as the
    store makes them (in the background past the bound), bases saved to ``directory``."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.lex = LexicalIndex(directory, read_only=False, make_ranker=lambda: BM25Ranker(stem=False))
        self.g = 0
        self.lex.apply(self.lex.plan(0, lambda: [], lambda ids: []))

    def put(self, docs: list[Document]) -> None:
        self.lex.note_put(self.g, self.g + 1, [_Prepared(d) for d in docs])
        self.g += 1
        self._visible()

    def delete(self, ids: list[str]) -> None:
        self.lex.note_delete(self.g, self.g + 1, ids)
        self.g += 1
        self._visible()

    def _visible(self) -> Segments:
        with self.lex.lock:
            update = self.lex.plan(self.g, lambda: (_ for _ in ()).throw(RuntimeError("queue dropped")), None)
        return self.lex.apply(update)

    def search(self, text: str, exclude: str):
        return self._visible().search(text, K, exclude_ids=[exclude])


def writes(args, out: dict) -> None:
    arts = read_articles(args.docs)
    docs = [wiki_doc(a) for a in arts]
    an = BM25Ranker(stem=False)
    work = Path(tempfile.mkdtemp(prefix="tantivy-writes-"))
    res: dict = {"load_before": load()}
    try:
        # bulk: batches of 32, each made visible; ours first, then tantivy, then both again (2 rounds)
        bulk: dict[str, list[tuple[float, float]]] = {"ours": [], "tantivy": []}
        for rnd in range(args.bulk_rounds):
            for engine in (("ours", "tantivy") if rnd % 2 == 0 else ("tantivy", "ours")):
                d = work / f"bulk-{engine}-{rnd}"
                t0, c0 = time.perf_counter(), time.process_time()
                if engine == "ours":
                    o = OursLive(d)
                    for s in range(0, len(docs), BATCH):
                        o.put(docs[s:s + BATCH])
                    o.lex.wait_merge(600)
                else:
                    tv = Tantivy(d)
                    for s in range(0, len(docs), BATCH):
                        batch = docs[s:s + BATCH]
                        tv.put(list(zip([x.id for x in batch], an.tokenize([x.text for x in batch]))))
                        tv.commit()
                    tv.close()
                wall, cpu = time.perf_counter() - t0, time.process_time() - c0
                size = sum(f.stat().st_size for f in d.rglob("*") if f.is_file())
                bulk[engine].append((wall, cpu))
                print(f"bulk {engine} round {rnd}: {len(docs)} docs in batches of {BATCH}: {wall:.1f} s "
                      f"({len(docs) / wall:.0f} docs/s), CPU {cpu:.1f} s, on disk {size / 1e6:.0f} MB; load {load()}")
                res.setdefault("bulk_disk_MB", {})[engine] = size / 1e6
                if rnd < args.bulk_rounds - 1:
                    shutil.rmtree(d, ignore_errors=True)
        res["bulk"] = {e: {"docs_per_s": [len(docs) / w for w, _ in v], "wall_s": [w for w, _ in v],
                           "cpu_s": [c for _, c in v]} for e, v in bulk.items()}
        # steady state at 10k: both indexes from the last bulk round, single-document writes
        o = OursLive(work / "steady-ours")
        for s in range(0, len(docs), 250):
            o.put(docs[s:s + 250])
        o.lex.wait_merge(600)
        tv = Tantivy(work / f"bulk-tantivy-{args.bulk_rounds - 1}", create=False)
        rng = np.random.default_rng(0)
        queries = docs[:: len(docs) // 50][:50]
        protected = {q.id for q in queries}
        live = {e: [d.id for d in docs if d.id not in protected] for e in ("ours", "tantivy")}
        by_id = {d.id: d for d in docs}
        w_times: dict[str, list[float]] = {"ours": [], "tantivy": []}
        s_times: dict[str, list[float]] = {"ours": [], "tantivy": []}
        counter = {"ours": 0, "tantivy": 0}
        for block in range(args.writes // 25):
            for engine in (("ours", "tantivy") if block % 2 == 0 else ("tantivy", "ours")):
                for j in range(25):
                    kind = (block * 25 + j) % 3
                    if kind == 0:
                        src = docs[int(rng.integers(0, len(docs)))]
                        new = Document(f"new-{counter[engine]}", src.paragraphs, src.title)
                        counter[engine] += 1
                    else:
                        victim = live[engine][int(rng.integers(0, len(live[engine])))]
                        src = by_id[victim]
                        new = Document(victim, src.paragraphs[1:] or src.paragraphs, src.title)
                    q = queries[(block * 25 + j) % len(queries)]
                    t0 = time.perf_counter()
                    if engine == "ours":
                        if kind == 2:
                            live[engine].remove(new.id)
                            o.delete([new.id])
                        else:
                            o.put([new])
                    else:
                        if kind == 2:
                            live[engine].remove(new.id)
                            tv.delete([new.id])
                        else:
                            tv.put([(new.id, an.tokenize([new.text])[0])])
                        tv.commit()
                    t1 = time.perf_counter()
                    if engine == "ours":
                        o.search(q.text, q.id)
                    else:
                        tv.search(an.tokenize([q.text])[0], K, exclude=[q.id])
                    t2 = time.perf_counter()
                    w_times[engine].append(t1 - t0)
                    s_times[engine].append(t2 - t1)
        segs = tv.index.searcher().num_segments
        tv.close()
        res["steady"] = {e: {"writes": len(w_times[e]), "write_p50_ms": pct(w_times[e], 50),
                             "write_p99_ms": pct(w_times[e], 99), "search_p50_ms": pct(s_times[e], 50),
                             "search_p99_ms": pct(s_times[e], 99),
                             "cycles_per_s": len(w_times[e]) / (sum(w_times[e]) + sum(s_times[e]))}
                         for e in w_times}
        res["steady"]["tantivy"]["segments_after"] = segs
        res["load_after"] = load()
        for e, v in res["steady"].items():
            print(f"steady {e}: " + ", ".join(f"{k} {x:.1f}" for k, x in v.items()))
        out["writes"] = res
    finally:
        shutil.rmtree(work, ignore_errors=True)


# -- (d) crash safety --------------------------------------------------------------------------
DIM = 8


def writer_main(engine: str, path: Path, ack: Path, start: int) -> None:
    """Writes batches from ``start`` on until killed: batch b puts documents ``b-0..b-31`` (a
    whole wiki article each, cycled) and deletes ``(b-8)-0..(b-8)-7``; after each commit returns,
    appends ``b`` to ``ack`` (fsynced). ``ours`` is the real embedded store (catalogue + lexical
    index), with one lexical search after each batch (which applies it and starts merges)."""
    arts = read_articles(400)
    rng = np.random.default_rng(start)
    an = BM25Ranker(stem=False)
    if engine == "ours":
        from sdr_search.core.vectors import DocVectors
        from sdr_search.indexer.embedded import EmbeddedStore
        from sdr_search.indexer.settings import EmbeddedStoreSettings
        from sdr_search.indexer.store import IndexMeta

        store = EmbeddedStore(path, create=True, settings=EmbeddedStoreSettings(lexical_merge_min_docs=64))
        store.ensure_meta(IndexMeta("random-unit-vectors", "bench", DIM, {"paragraph_unit": "section"}))
    else:
        tv = Tantivy(path, create=not (path / "meta.json").exists(), heap=16_000_000, threads=1)
    fd = os.open(ack, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    b = start
    if b > 8:  # a client retries what it was not told had succeeded: the last batch's deletes
        redo = [f"{b - 9}-{i}" for i in range(8)]
        if engine == "ours":
            store.delete(redo)
        else:
            tv.delete(redo)
            tv.commit()
    while True:
        batch = [wiki_doc((f"{b}-{i}", a[1], a[2])) for i, a in
                 enumerate(arts[(b * BATCH + i) % len(arts)] for i in range(BATCH))]
        gone = [f"{b - 8}-{i}" for i in range(8)] if b >= 8 else []
        if engine == "ours":
            items = []
            for d in batch:
                v = rng.standard_normal((len(d.paragraphs), DIM)).astype(np.float32)
                v /= np.linalg.norm(v, axis=1, keepdims=True)
                items.append((d, DocVectors(v, np.arange(len(d.paragraphs) + 1))))
            store.put(items)  # commits
            if gone:
                store.delete(gone)  # another commit: a kill between them leaves the batch without its deletes
            store.lexical_search(batch[0].text, 10)
        else:
            tv.put(list(zip([d.id for d in batch], an.tokenize([d.text for d in batch]))))
            tv.delete(gone)
            tv.commit()  # one commit: adds and deletes together
        os.write(fd, f"{b}\n".encode())
        os.fsync(fd)
        b += 1


def crash(args, out: dict) -> None:
    """For each engine, ``--kills`` times: start a writer where the index stands, SIGKILL it after a
    random 1-6 s (ours: 4-14 s, it starts slower), reopen, check: the index opens; every batch is whole or absent (32 puts and its 8
    deletes together: tantivy's single commit; ours per store call, see writer_main); the batches
    present are exactly 0..n-1 with n the writer's start or its last acknowledged batch + 1, or
    one more (a commit whose ack was not yet written); ours: the lexical index equals the catalogue (same ids) and searches; no
    temp directory is left once the next writer has run; tantivy: the next writer opens (the lock
    is released with the process)."""
    work = Path(tempfile.mkdtemp(prefix="tantivy-crash-"))
    rng = random.Random(args.seed)
    res: dict = {}
    try:
        for engine in ("ours", "tantivy"):
            path = work / engine
            ack = work / f"{engine}.ack"
            rows = []
            for kill in range(args.kills):
                acked = [int(x) for x in ack.read_text().split()] if ack.exists() else []
                start = acked[-1] + 1 if acked else 0
                present_before = _present(engine, path) if path.exists() else set()
                if present_before:  # resume after what the index holds (one unacked commit may be there)
                    start = max(int(i.split("-")[0]) for i in present_before) + 1
                p = subprocess.Popen([sys.executable, __file__, "--writer", engine, str(path), str(ack), str(start)],
                                     stderr=subprocess.PIPE)
                wait = rng.uniform(1.0, 6.0) + (rng.uniform(3.0, 8.0) if engine == "ours" else 0.0)  # its start-up
                time.sleep(wait)
                alive = p.poll() is None
                os.kill(p.pid, signal.SIGKILL)
                p.wait()
                err = p.stderr.read().decode()[-400:] if p.stderr else ""
                acked = [int(x) for x in ack.read_text().split()] if ack.exists() else []
                row = {"kill": kill, "after_s": round(wait, 1), "was_running": alive, "acked_batches": len(acked)}
                try:
                    row.update(_check(engine, path, acked, start))
                except Exception as e:  # noqa: BLE001 - a failed reopen is the finding
                    row["error"] = f"{type(e).__name__}: {e}"
                if not alive:
                    row["writer_stderr"] = err
                rows.append(row)
                print(f"crash {engine} #{kill}: {json.dumps(row)}")
            res[engine] = rows
        out["crash"] = res
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _present(engine: str, path: Path) -> set[str]:
    if engine == "ours":
        from sdr_search.indexer.embedded import EmbeddedStore

        store = EmbeddedStore(path)
        try:
            return set(store.iter_ids())
        finally:
            store.close()
    return set(Tantivy(path, create=False).ids())


def _check(engine: str, path: Path, acked: list[int], start: int) -> dict:
    row: dict = {}
    expected_full = lambda b, n: {f"{b}-{i}" for i in range(BATCH)} - (  # noqa: E731
        {f"{b}-{i}" for i in range(8)} if b + 8 < n else set())
    if engine == "ours":
        from sdr_search.indexer.embedded import EmbeddedStore

        store = EmbeddedStore(path)
        try:
            present = set(store.iter_ids())
            hits = store.lexical_search("history of the city", 10)
            index = store._lexical.index
            row["lexical_equals_catalogue"] = index is not None and set(index.covered) == present
            row["lexical_hits"] = len(hits.ids)
        finally:
            store.close()
        row["tmp_dirs"] = len([p for p in path.glob("lexical-*") if ".tmp-" in p.name])
        row["bases"] = len([p for p in path.glob("lexical-*") if ".tmp-" not in p.name])
    else:
        tv = Tantivy(path, create=False)
        present = set(tv.ids())
        w = tv.open_writer()  # the lock must be free after the kill
        row["writer_reopens"] = True
        del w
        tv.writer = None
        row["segments"] = tv.index.searcher().num_segments
    batches = sorted({int(i.split("-")[0]) for i in present})
    n = (max(batches) + 1) if batches else 0
    row["batches_present"] = n
    row["documents"] = len(present)
    whole = all(present & {f"{b}-{i}" for i in range(BATCH)} == expected_full(b, n) for b in range(n))
    # ours: the last batch's deletes (of batch n-9) are a second store call and may be missing
    if not whole and engine == "ours":
        lenient = all(present & {f"{b}-{i}" for i in range(BATCH)} == expected_full(b, n - 1) for b in range(n))
        row["last_deletes_missing"] = lenient
        whole = lenient
    row["batches_whole"] = whole
    row["contiguous"] = batches == list(range(n))
    # every batch before this writer's start, and every one it acknowledged, is there; at most one
    # more (committed, killed before its acknowledgement)
    lower = max(start, max(acked) + 1 if acked else 0)
    row["acked_present"] = n >= lower
    row["unacked_commits"] = n - lower
    row["ok"] = bool(whole and row["contiguous"] and row["acked_present"] and n - lower in (0, 1)
                     and row.get("lexical_equals_catalogue", True) and not row.get("tmp_dirs", 0) > 1)
    return row


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--writer":
        writer_main(sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4]), int(sys.argv[5]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="relevance,latency,writes,crash")
    ap.add_argument("--hybrid", action="store_true", help="also the default hybrid with each engine's BM25 (cache only)")
    ap.add_argument("--docs", type=int, default=10_000, help="Wikipedia articles (latency, writes)")
    ap.add_argument("--rounds", type=int, default=3, help="latency rounds over the queries")
    ap.add_argument("--bulk-rounds", type=int, default=2)
    ap.add_argument("--writes", type=int, default=300, help="single-document writes per engine at 10k")
    ap.add_argument("--kills", type=int, default=6)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    import importlib.metadata as md

    out: dict = {"tantivy": md.version("tantivy"), "cpus": os.cpu_count(), "load_start": load()}
    print(f"tantivy {out['tantivy']}, {out['cpus']} CPUs, load {out['load_start']}")
    for section in args.only.split(","):
        {"relevance": relevance, "latency": latency, "writes": writes, "crash": crash}[section.strip()](args, out)
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
