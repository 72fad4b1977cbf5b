"""Lexical evidence at SDR's own level (issue 35, item 2), on IRLeD dev full and short sources.

Today's lexical signal is one BM25 of the whole source against the whole candidate. This bench
measures a **paragraph-level lexical matrix** ``L_ij`` (source SDR paragraph ``i`` against corpus
SDR paragraph ``j``), built on the same tokens as the BM25 side (:func:`sdr_search.core.lexical.analyze`:
lowercase, ``\\w\\w+``, English stopwords, no stemming) and on IDF from the whole corpus (document
frequencies, Lucene's ``ln(1 + (N - df + 0.5) / (df + 0.5))``), with two scorers:

- ``tfidf``: the cosine of the two paragraphs' ``(1 + ln tf) * idf`` vectors;
- ``bm25``: BM25 of source paragraph ``i`` (its term counts kept, as the product's BM25 keeps
  them) against paragraph ``j`` (k1 = 1.5, b = 0.75, length normalised over the corpus's
  paragraphs).

It is used in two ways, each principled and with one parameter ``lam``:

1. **a fourth signal** ``plex``, aggregated exactly as SDR aggregates ``P_ij``: per source paragraph
   the best paragraph of the candidate, z-scored with that row's ``mu_i`` / ``sigma_i`` over every
   corpus paragraph but the source's own (as ``sdr eval`` computes SDR's), the mean over ``i``;
   in the adaptive fusion it is z-scored over the fused set, after SDR's length correction
   ``c sqrt(2 ln N)`` (``c`` 0 or SDR's 0.375: the same row maximum over ``N`` paragraphs), and
   takes either the share ``lam`` of *all* the weights (BM25, SDR and mean keep their adaptive
   weights times ``1 - lam``) or the share ``lam`` of *SDR's* weight (a paragraph-level signal
   whose weight follows the source's length as SDR's does; ``lam = 1`` puts it in SDR's place);
2. **mixed into P_ij** before the maximum: ``M_ij = N^P_ij + lam N^L_ij``, the two row-z-scored
   matrices (so ``lam`` is in units of each row's spread), then ``M`` is normalised and aggregated
   as SDR is (row statistics over the corpus, best paragraph per candidate, mean over ``i``); it
   replaces SDR in the fusion (length correction and all).

Everything else is the shipped default (adaptive fusion ``n0 = 32, m = 0, g = 0, c = 0.375`` with
document feedback ``k = 3, f = 1, h = 8``): every ranking goes through
:func:`sdr_search.core.evaluation.hybrid_ranking`, the code path of ``sdr eval --method hybrid``,
feedback documents included (their own signals, variants and all, computed as sources with their
own paragraphs left out of their statistics). For the fourth signal the bench wraps that module's
``fuse`` (the signal joins the fusion) and ``candidate_set`` (it does not bring candidates: the
engine's candidates come from the vector and the whole-document lexical searches only).

``lam`` (and, for the signal, ``c``) is chosen by 5-fold cross-validation over the queries (seed 0,
the folds of ``bench/adaptive_fusion.py``), by the mean MAP of full and short sources on the
training folds (a query and its cut stay in one fold), and scored on the held-out fold; a last row
lets each fold choose among every variant *and* the default, the honest figure for "adopt one of
these". The check cuts (``--check-cut``) are scored with each fold's choice, never chosen on.

Per source, one pass computes every signal over the whole corpus and caches it under
``--signals-dir`` (default ``/var/tmp/sdr-plex``): BM25, exact SDR, the mean cosine, and each
variant; feedback documents are computed when a ranking first needs them and cached too. On 2
cores about 3-5 s per whole-judgment source (the SDR product dominates); the seconds each signal
took per source are printed.

``--cost-only`` measures, without the encoder, what the signal costs per source: over the whole
corpus (as here), and as a reranker would compute it (the source against a reference sample of
5,000 paragraphs for the row statistics and against the paragraphs of 200 candidates, whose term
vectors are either built from their text at query time or assumed stored).

    python bench/experiments/paragraph_lexical.py                                # IRLeD dev, full and short sources
    python bench/experiments/paragraph_lexical.py --check-cut sentences:30       # and a source length never chosen on
    python bench/experiments/paragraph_lexical.py --docs 60 --queries-n 4        # a quick check on a slice
    python bench/experiments/paragraph_lexical.py --cost-only                    # the cost per source
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import logging

import sys
import time
from collections import Counter
from pathlib import Path
from typing import Callable, Iterator, Mapping, Sequence

import numpy as np
import scipy.sparse as sp

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from hybrid import encoder_from_args, irled_arguments, read_irled  # noqa: E402

import sdr_search.core.evaluation as evaluation  # noqa: E402
from sdr_search.core.cache import EmbeddingCache  # noqa: E402
from sdr_search.core.documents import Document  # noqa: E402
from sdr_search.core.embed import embed_corpus, embed_documents  # noqa: E402
from sdr_search.core.evaluation import EvalInputs, cut_source, hybrid_ranking, parse_source_cut, signal_scorers  # noqa: E402
from sdr_search.core.fusion import ADAPTIVE_HYBRID, Fused, SourceShape, length_corrected, zscore  # noqa: E402
from sdr_search.core.lexical import analyze  # noqa: E402
from sdr_search.core.metrics import average_precision, ndcg_at, reciprocal_rank  # noqa: E402
from sdr_search.core.scoring import (  # noqa: E402
    NormStats, document_max, paragraph_scores, rank, sdr_scores, stats_from_paragraph_scores,
)
from sdr_search.core.settings import CacheSettings  # noqa: E402
from sdr_search.core.vectors import CorpusVectors, DocVectors  # noqa: E402

KINDS = (("full", None), ("short", "sentences:9"))
SCORERS = ("tfidf", "bm25")
SHARES = {"all": (0.1, 0.2, 0.3, 0.5), "sdr": (0.25, 0.5, 0.75, 1.0)}
SIGNAL_CORRECTIONS = (0.0, 0.375)
MIX_LAMBDAS = (0.25, 0.5, 1.0, 2.0)
BASE = ("bm25", "sdr", "mean")
EXTRA = "plex"
METRICS = ("MAP", "nDCG@10", "MRR")


# -- the paragraph-level lexical matrix ---------------------------------------------------------
def paragraph_text(paragraph: Sequence[str]) -> str:
    return " ".join(paragraph)


class ParagraphLexicon:
    """The corpus's SDR paragraphs as sparse term vectors, for ``L_ij`` of a source paragraph ``i``
    against every corpus paragraph ``j`` (:meth:`matrix`). ``docs``: segmented documents (their
    paragraphs in corpus order, the order of :class:`CorpusVectors`' paragraphs). IDF from document
    frequencies over ``docs``: ``ln(1 + (N - df + 0.5) / (df + 0.5))`` (Lucene's BM25 IDF)."""

    def __init__(self, docs: Sequence[Document], *, k1: float = 1.5, b: float = 0.75) -> None:
        self.vocab: dict[str, int] = {}
        rows, cols, vals, lengths = [], [], [], []
        df: Counter = Counter()
        doc_par = [0]
        for doc in docs:
            seen: set[int] = set()
            for para in doc.paragraphs:
                counts = Counter(analyze(paragraph_text(para)))
                r = len(lengths)
                for term, c in counts.items():
                    t = self.vocab.setdefault(term, len(self.vocab))
                    rows.append(r)
                    cols.append(t)
                    vals.append(c)
                    seen.add(t)
                lengths.append(sum(counts.values()))
            df.update(seen)
            doc_par.append(len(lengths))
        self.doc_par_offsets = np.asarray(doc_par, dtype=np.int64)
        n_par, n_terms = len(lengths), len(self.vocab)
        counts = sp.csr_matrix((np.asarray(vals, dtype=np.float64), (rows, cols)), shape=(n_par, n_terms))
        counts.sum_duplicates()
        dfs = np.zeros(n_terms)
        for t, c in df.items():
            dfs[t] = c
        n = len(docs)
        self.idf = np.log1p((n - dfs + 0.5) / (dfs + 0.5))
        self.k1, self.b = float(k1), float(b)
        self.lengths = np.asarray(lengths, dtype=np.float64)
        self.avg_length = float(self.lengths.mean()) if n_par else 1.0
        # tf-idf rows, unit length
        tfidf = counts.copy()
        tfidf.data = 1.0 + np.log(tfidf.data)
        tfidf = tfidf.multiply(self.idf[None, :]).tocsr()
        self.tfidf = _unit_rows(tfidf)
        # BM25 document-side weights: idf * tf (k1 + 1) / (tf + k1 (1 - b + b len / avglen))
        bm = counts.tocoo()
        norm = self.k1 * (1.0 - self.b + self.b * self.lengths[bm.row] / self.avg_length)
        weights = self.idf[bm.col] * bm.data * (self.k1 + 1.0) / (bm.data + norm)
        self.bm25 = sp.csr_matrix((weights, (bm.row, bm.col)), shape=counts.shape)

    @property
    def n_paragraphs(self) -> int:
        return int(self.lengths.size)

    def source_rows(self, paragraphs: Sequence[Sequence[str]], scorer: str) -> sp.csr_matrix:
        """The source paragraphs' query vectors for ``scorer``: unit tf-idf rows, or term counts
        (BM25 keeps the source's counts). Terms the corpus never saw are left out."""
        rows, cols, vals = [], [], []
        for r, para in enumerate(paragraphs):
            for term, c in Counter(analyze(paragraph_text(para))).items():
                t = self.vocab.get(term)
                if t is not None:
                    rows.append(r)
                    cols.append(t)
                    vals.append(float(c))
        q = sp.csr_matrix((vals, (rows, cols)), shape=(len(paragraphs), len(self.vocab)))
        if scorer == "tfidf":
            q.data = 1.0 + np.log(q.data)
            return _unit_rows(q.multiply(self.idf[None, :]).tocsr())
        if scorer == "bm25":
            return q
        raise ValueError(f"unknown scorer {scorer!r}; choose from {', '.join(SCORERS)}")

    def matrix(self, paragraphs: Sequence[Sequence[str]], scorer: str) -> np.ndarray:
        """``L``: shape ``(source paragraphs, corpus paragraphs)``, float64."""
        q = self.source_rows(paragraphs, scorer)
        corpus = self.tfidf if scorer == "tfidf" else self.bm25
        return np.asarray((q @ corpus.T).todense(), dtype=np.float64)


def _unit_rows(m: sp.csr_matrix) -> sp.csr_matrix:
    norms = np.sqrt(np.asarray(m.multiply(m).sum(axis=1)).ravel())
    return sp.diags(1.0 / np.maximum(norms, 1e-12)) @ m


def aggregated(L: np.ndarray, doc_par_offsets: np.ndarray, exclude: np.ndarray | None) -> np.ndarray:
    """SDR's aggregation of a paragraph matrix: per row the best paragraph of each document,
    z-scored with the row's statistics over the columns not excluded, the mean over rows."""
    stats = stats_from_paragraph_scores(L, exclude=exclude, if_empty="identity")
    return sdr_scores(document_max(L, doc_par_offsets), stats)


def _row_z(X: np.ndarray, stats: NormStats) -> np.ndarray:
    return (X - stats.mu[:, None]) / stats.sigma[:, None]


# -- per-source signals ---------------------------------------------------------------------------
def variant_names() -> list[str]:
    return [f"{EXTRA}_{s}" for s in SCORERS] + [f"mix_{s}_{lam:g}" for s in SCORERS for lam in MIX_LAMBDAS]


class Signals:
    """Every signal of a source against every corpus document: the three of the product and each
    variant's."""

    def __init__(self, docs: Sequence[Document], corpus: CorpusVectors, lexicon: ParagraphLexicon,
                 scorers: Mapping[str, Callable]) -> None:
        self.corpus, self.lexicon, self.scorers = corpus, lexicon, scorers
        self.par_doc = corpus.paragraph_doc()
        assert np.array_equal(lexicon.doc_par_offsets, corpus.doc_par_offsets), "lexicon and vectors disagree"
        self.seconds: Counter = Counter()  # per part, summed over sources: the cost of each signal
        self.sources = 0

    def of(self, k: int | None, doc: Document, vectors: DocVectors, own: int | None) -> dict[str, np.ndarray]:
        t = time.perf_counter()
        out = {name: np.asarray(self.scorers[name](k, doc), dtype=np.float64) for name in ("bm25", "mean")}
        exclude = self.par_doc == own if own is not None else None
        offsets = self.corpus.doc_par_offsets
        t1 = time.perf_counter()
        P = paragraph_scores(vectors, self.corpus).astype(np.float64)
        sP = stats_from_paragraph_scores(P, exclude=exclude)
        out["sdr"] = sdr_scores(document_max(P, offsets), sP)
        NP = _row_z(P, sP)
        del P
        t2 = time.perf_counter()
        self.seconds["bm25 + mean"] += t1 - t
        self.seconds["sdr"] += t2 - t1
        paragraphs = [p for p in doc.paragraphs if len(p)]
        for scorer in SCORERS:
            t = time.perf_counter()
            L = self.lexicon.matrix(paragraphs, scorer)
            sL = stats_from_paragraph_scores(L, exclude=exclude, if_empty="identity")
            out[f"{EXTRA}_{scorer}"] = sdr_scores(document_max(L, offsets), sL)
            self.seconds[f"{EXTRA}_{scorer}"] += time.perf_counter() - t
            NL = _row_z(L, sL)
            for lam in MIX_LAMBDAS:
                out[f"mix_{scorer}_{lam:g}"] = aggregated(NP + lam * NL, offsets, exclude)
        self.sources += 1
        return out

    def cost(self) -> str:
        """Seconds per source of each signal over the whole corpus, as measured so far."""
        n = max(self.sources, 1)
        return f"{self.sources} sources, s/source: " + ", ".join(f"{k} {v / n:.3f}" for k, v in sorted(self.seconds.items()))


# -- fusion with a fourth signal ------------------------------------------------------------------
@contextlib.contextmanager
def fourth_signal(lam: float, c: float, share: str = "all") -> Iterator[None]:
    """Inside, :func:`hybrid_ranking` fuses a signal named ``plex`` (when present), z-scored over the
    set after ``c sqrt(2 ln N)`` is taken off, at the share ``lam`` of all the weights (``share="all"``:
    ``(1 - lam)`` times the product's adaptive fusion plus ``lam`` times its z-score) or of SDR's
    weight (``share="sdr"``: SDR keeps ``(1 - lam)`` of its weight), and leaves it out of the
    candidate set."""
    if share not in SHARES:
        raise ValueError(f"unknown share {share!r}")
    original_fuse, original_set = evaluation.fuse, evaluation.candidate_set

    def fuse4(ids, signals, spec, *, source=None, weights=None, paragraphs=None) -> Fused:
        if weights is not None and EXTRA in weights:  # the set's weights, given for the rest: undo the move
            moved = weights[EXTRA]
            weights = {s: w for s, w in weights.items() if s != EXTRA}
            if share == "sdr":
                weights["sdr"] = weights.get("sdr", 0.0) + moved
        base = original_fuse(ids, {s: v for s, v in signals.items() if s != EXTRA}, spec, source=source,
                             weights=weights, paragraphs=paragraphs)
        if EXTRA not in signals or lam <= 0:
            return base
        x = np.asarray(signals[EXTRA], dtype=np.float64)
        z = zscore(length_corrected(x, paragraphs, c) if c > 0 else x)
        if share == "all":
            weights = {**{s: (1.0 - lam) * w for s, w in base.weights.items()}, EXTRA: lam}
            scores = (1.0 - lam) * base.scores + lam * z
        else:  # base.scores is sum_s w_s z_s with the shares w_s: move lam w_sdr from SDR's z to plex's
            w_sdr = base.weights.get("sdr", 0.0)
            weights = {**base.weights, "sdr": (1.0 - lam) * w_sdr, EXTRA: lam * w_sdr}
            scores = base.scores + lam * w_sdr * (z - base.normalised["sdr"]) if w_sdr > 0 else base.scores
        return Fused(scores, {**base.normalised, EXTRA: z}, {**base.raw, EXTRA: x}, weights)

    def candidates(ids, signals, k, *, exclude=None):
        return original_set(ids, {s: v for s, v in signals.items() if s != EXTRA}, k, exclude=exclude)

    evaluation.fuse, evaluation.candidate_set = fuse4, candidates
    try:
        yield
    finally:
        evaluation.fuse, evaluation.candidate_set = original_fuse, original_set


# -- what it would cost in the engine --------------------------------------------------------
def engine_cost(docs: Sequence[Document], sources: Sequence[Document], lexicon: ParagraphLexicon, bm25: Callable,
                *, candidates: int = 200, sample: int = 5000, seed: int = 0) -> dict[str, float]:
    """Seconds per source of the signal as a reranker would compute it: the source's paragraphs
    against a fixed reference sample of ``sample`` corpus paragraphs (the row statistics, as SDR's
    sampled statistics; the sample's term vectors prepared once) and against the paragraphs of
    ``candidates`` documents (the top of the whole-document BM25 here), whose term vectors are
    either built from their text at query time (``tokenise``: what a store without paragraph term
    vectors has to do) or read ready (``score``). IDF is the corpus's, as a store would keep it."""
    rng = np.random.default_rng(seed)
    picked = np.sort(rng.choice(lexicon.n_paragraphs, size=min(sample, lexicon.n_paragraphs), replace=False))
    ref = {s: (lexicon.tfidf if s == "tfidf" else lexicon.bm25)[picked] for s in SCORERS}
    seconds: Counter = Counter()
    for k, source in enumerate(sources):
        top = np.argsort(-np.asarray(bm25(k, source)))[:candidates]
        t = time.perf_counter()
        # the candidates' rows from their text, the corpus's idf
        rows, cols, vals, lengths, offsets = [], [], [], [], [0]
        for i in top:
            for para in docs[i].paragraphs:
                r = len(lengths)
                counts = Counter(analyze(paragraph_text(para)))
                for term, c in counts.items():
                    col = lexicon.vocab.get(term)
                    if col is not None:
                        rows.append(r)
                        cols.append(col)
                        vals.append(float(c))
                lengths.append(sum(counts.values()))
            offsets.append(len(lengths))
        counts_m = sp.csr_matrix((vals, (rows, cols)), shape=(len(lengths), len(lexicon.vocab)))
        seconds["tokenise"] += time.perf_counter() - t
        t = time.perf_counter()
        tfidf = counts_m.copy()
        tfidf.data = 1.0 + np.log(tfidf.data)
        cand = {"tfidf": _unit_rows(tfidf.multiply(lexicon.idf[None, :]).tocsr())}
        bm = counts_m.tocoo()
        lens = np.asarray(lengths, dtype=np.float64)
        norm = lexicon.k1 * (1.0 - lexicon.b + lexicon.b * lens[bm.row] / lexicon.avg_length)
        cand["bm25"] = sp.csr_matrix((lexicon.idf[bm.col] * bm.data * (lexicon.k1 + 1.0) / (bm.data + norm),
                                      (bm.row, bm.col)), shape=counts_m.shape)
        seconds["weights"] += time.perf_counter() - t
        paragraphs = [p for p in source.paragraphs if len(p)]
        for s in SCORERS:
            t = time.perf_counter()
            q = lexicon.source_rows(paragraphs, s)
            L_ref = np.asarray((q @ ref[s].T).todense())
            stats = stats_from_paragraph_scores(L_ref, if_empty="identity")
            L = np.asarray((q @ cand[s].T).todense())
            sdr_scores(document_max(L, np.asarray(offsets)), stats)
            seconds[s] += time.perf_counter() - t
    return {k: v / max(len(sources), 1) for k, v in seconds.items()}


# -- the run --------------------------------------------------------------------------------------
def cache_key(args, what: str) -> str:
    key = json.dumps([args.corpus, args.queries, args.docs, args.queries_n, args.model, args.precision, what,
                      SCORERS, MIX_LAMBDAS, 2])
    return hashlib.sha1(key.encode()).hexdigest()[:10]


def measure_cost(docs: Sequence[Document], queries: Sequence[Document], kinds) -> int:
    t = time.perf_counter()
    lexicon = ParagraphLexicon(docs)
    built = time.perf_counter() - t
    nnz = lexicon.tfidf.nnz
    print(f"paragraph lexicon of {len(docs)} documents: {lexicon.n_paragraphs} paragraphs, {len(lexicon.vocab)} "
          f"terms, {nnz} (paragraph, term) entries ({nnz * 12 / 2**20:.0f} MiB per CSR matrix), built in {built:.1f} s")
    bm25 = signal_scorers(("bm25",), EvalInputs(list(docs), []))["bm25"]  # scores any source text
    for kind, cut in kinds:
        sources = [cut_source(q, parse_source_cut(cut)) for q in queries]
        whole: Counter = Counter()
        for source in sources:
            paragraphs = [p for p in source.paragraphs if len(p)]
            for s in SCORERS:
                t = time.perf_counter()
                L = lexicon.matrix(paragraphs, s)
                sdr_scores(document_max(L, lexicon.doc_par_offsets), stats_from_paragraph_scores(L, if_empty="identity"))
                whole[s] += time.perf_counter() - t
        engine = engine_cost(docs, sources, lexicon, bm25)
        pars = np.mean([len(s.paragraphs) for s in sources])
        print(f"{kind} ({len(sources)} sources, {pars:.1f} paragraphs each), ms per source: "
              + ", ".join(f"{s} over the whole corpus {1e3 * whole[s] / len(sources):.0f}" for s in SCORERS)
              + "; as a reranker (200 candidates, 5,000 reference paragraphs): "
              + ", ".join(f"{k} {1e3 * v:.0f}" for k, v in engine.items()))
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    irled_arguments(p)
    p.add_argument("--candidates", type=int, default=100, help="K: each signal's top K form the fused set (default 100)")
    p.add_argument("--folds", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--signals-dir", default="/var/tmp/sdr-plex", help="cache of the per-source signals")
    p.add_argument("--check-cut", action="append", default=[], metavar="CUT",
                   help="also score sources cut this way with the variant each fold chose (never chosen on)")
    p.add_argument("--json", type=Path, metavar="OUT", help="also write every figure as JSON")
    p.add_argument("--cost-only", action="store_true",
                   help="only measure what the signal costs per source, as the whole-corpus matrix and as a "
                        "reranker would compute it (200 candidates, a sample of 5,000 paragraphs); no encoder")
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("sdr_search.core.documents").setLevel(logging.ERROR)
    t0 = time.perf_counter()

    qrels, queries, docs = read_irled(args)
    ids = [d.id for d in docs]
    position = {d: i for i, d in enumerate(ids)}
    paragraphs = np.asarray([len(d.paragraphs) for d in docs], dtype=np.int64)
    kinds = KINDS + tuple((cut, cut) for cut in args.check_cut)
    nq = len(queries)
    out_dir = Path(args.signals_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    names = [*BASE, *variant_names()]

    if args.cost_only:
        return measure_cost(docs, queries, kinds)
    encoder = encoder_from_args(args)
    cache = EmbeddingCache((args.cache_dir or CacheSettings().cache_dir) / "embeddings.sqlite")
    corpus = embed_corpus(docs, encoder, cache=cache, progress=True)
    t = time.perf_counter()
    lexicon = ParagraphLexicon(docs)
    print(f"paragraph lexicon: {lexicon.n_paragraphs} paragraphs, {len(lexicon.vocab)} terms, "
          f"{time.perf_counter() - t:.0f} s", file=sys.stderr)
    scorers = signal_scorers(("bm25", "mean"), EvalInputs(docs, [], corpus_vectors=corpus, query_vectors=[]))
    computer = Signals(docs, corpus, lexicon, scorers)

    data: dict[str, dict[str, np.ndarray]] = {}
    shapes: dict[str, list[SourceShape]] = {}
    for kind, cut in kinds:
        sources = [cut_source(q, parse_source_cut(cut)) for q in queries]
        shapes[kind] = [SourceShape.of(s) for s in sources]
        path = out_dir / f"queries-{kind.replace(':', '')}-{cache_key(args, str(cut))}.npz"
        if path.exists():
            z = np.load(path)
            assert list(z["ids"]) == ids and list(z["qids"]) == [q.id for q in queries], "stale signal cache"
            data[kind] = {n: z[n] for n in names}
            continue
        t = time.perf_counter()
        vectors = [v for _, v in embed_documents(sources, encoder, cache=cache)]
        qscorers = signal_scorers(("bm25", "mean"), EvalInputs(docs, sources, corpus_vectors=corpus, query_vectors=vectors))
        computer.scorers = qscorers
        rows = [computer.of(k, s, v, position.get(s.id)) for k, (s, v) in enumerate(zip(sources, vectors))]
        computer.scorers = scorers
        data[kind] = {n: np.stack([r[n] for r in rows]) for n in names}
        np.savez(path, ids=np.asarray(ids), qids=np.asarray([q.id for q in queries]), **data[kind])
        print(f"{kind}: signals of {nq} sources in {time.perf_counter() - t:.0f} s -> {path}; {computer.cost()}",
              file=sys.stderr)
        computer.seconds.clear()
        computer.sources = 0

    # feedback documents as sources, computed when first needed
    fb_path = out_dir / f"feedback-{cache_key(args, 'docs')}.npz"
    fb_cache: dict[int, dict[str, np.ndarray]] = {}
    if fb_path.exists():
        z = np.load(fb_path)
        fb_cache = {int(i): {n: z[n][j] for n in names} for j, i in enumerate(z["positions"])}
    fb_new = [0]

    def doc_signals(i: int) -> dict[str, np.ndarray]:
        if i not in fb_cache:
            fb_cache[i] = computer.of(None, docs[i], corpus.doc(i), i)
            fb_new[0] += 1
            if fb_new[0] % 25 == 0:
                save_feedback()
                print(f"  {fb_new[0]} feedback documents scored as sources", file=sys.stderr, flush=True)
        return fb_cache[i]

    def save_feedback() -> None:
        keys = sorted(fb_cache)
        np.savez(fb_path, positions=np.asarray(keys), **{n: np.stack([fb_cache[i][n] for i in keys]) for n in names})

    # variants: (name, sdr replacement, fourth signal, lam, c, share)
    Variant = tuple[str, str, str | None, float, float, str]
    default: Variant = ("default", "sdr", None, 0.0, 0.0, "all")
    signal_variants = {(s, share): [(f"plex {s}, {share} share {lam:g}, c={c:g}", "sdr", f"{EXTRA}_{s}", lam, c, share)
                                    for lam in lams for c in SIGNAL_CORRECTIONS]
                       for s in SCORERS for share, lams in SHARES.items()}
    mix_variants = {s: [(f"mixed {s}, lam={lam:g}", f"mix_{s}_{lam:g}", None, 0.0, 0.0, "all") for lam in MIX_LAMBDAS]
                    for s in SCORERS}

    def pick(sig: Mapping[str, np.ndarray], v: Variant) -> dict[str, np.ndarray]:
        out = {"bm25": sig["bm25"], "sdr": sig[v[1]], "mean": sig["mean"]}
        if v[2] is not None:
            out[EXTRA] = sig[v[2]]
        return out

    def metrics(ranking: list[str], relevant) -> tuple[float, float, float]:
        return average_precision(ranking, relevant), ndcg_at(ranking, relevant, 10), reciprocal_rank(ranking, relevant)

    memo: dict[tuple, np.ndarray] = {}

    def evaluate(kind: str, v: Variant) -> np.ndarray:
        """(queries, 3): AP, nDCG@10 and RR per query, the default engine path (feedback on)."""
        if (kind, v) in memo:
            return memo[kind, v]
        out = np.zeros((nq, 3))
        ctx = fourth_signal(v[3], v[4], v[5]) if v[2] is not None else contextlib.nullcontext()
        with ctx:
            for k, q in enumerate(queries):
                ranking = hybrid_ranking(
                    ids, pick({n: data[kind][n][k] for n in names}, v), ADAPTIVE_HYBRID, args.candidates,
                    exclude=position.get(q.id), source=shapes[kind][k], paragraphs=paragraphs,
                    feedback=lambda i: (pick(doc_signals(i), v), SourceShape.of(docs[i])))
                out[k] = metrics([d for d, _ in ranking], qrels[q.id])
        memo[kind, v] = out
        return out

    def alone(kind: str, name: str) -> np.ndarray:
        out = np.zeros((nq, 3))
        for k, q in enumerate(queries):
            own = position.get(q.id)
            keep = [i for i in range(len(ids)) if i != own]
            kept = [ids[i] for i in keep]
            out[k] = metrics([kept[i] for i in rank(kept, data[kind][name][k][keep])], qrels[q.id])
        return out

    folds = np.array_split(np.random.default_rng(args.seed).permutation(nq), args.folds)

    def cross_validate(grid: list[Variant]) -> tuple[dict[str, np.ndarray], list[str], dict[str, float]]:
        per_point = [{kind: evaluate(kind, v) for kind, _ in kinds} for v in grid]
        cv = {kind: np.zeros((nq, 3)) for kind, _ in kinds}
        chosen, fold_maps = [], {kind: [] for kind, _ in kinds}
        for test in folds:
            train = np.setdiff1d(np.arange(nq), test)
            best = int(np.argmax([np.mean([m[kind][train, 0].mean() for kind, _ in KINDS]) for m in per_point]))
            chosen.append(grid[best][0])
            for kind, _ in kinds:
                cv[kind][test] = per_point[best][kind][test]
                fold_maps[kind].append(float(per_point[best][kind][test, 0].mean()) if test.size else 0.0)
        return cv, chosen, {kind: float(np.std(fold_maps[kind])) for kind, _ in kinds}

    rows: list[dict] = []
    for name, label in (("bm25", "BM25"), ("sdr", "SDR"), ("mean", "mean (single vector)"),
                        (f"{EXTRA}_tfidf", "plex tfidf alone"), (f"{EXTRA}_bm25", "plex bm25 alone")):
        rows.append({"name": label, **{kind: alone(kind, name) for kind, _ in kinds}})
    rows.append({"name": "default (adaptive + length correction + feedback)", **{kind: evaluate(kind, default) for kind, _ in kinds}})
    every: list[Variant] = [default]
    for s in SCORERS:
        for family, grid in ((f"plex {s}, a share of all weights", signal_variants[s, "all"]),
                             (f"plex {s}, a share of SDR's weight", signal_variants[s, "sdr"]),
                             (f"{s} mixed into P_ij", mix_variants[s])):
            for v in grid:
                rows.append({"name": v[0], **{kind: evaluate(kind, v) for kind, _ in kinds}})
                print(f"  {v[0]}: " + ", ".join(f"{kind} {rows[-1][kind][:, 0].mean():.4f}" for kind, _ in kinds),
                      file=sys.stderr, flush=True)
            cv, chosen, std = cross_validate(grid)
            rows.append({"name": f"CV: {family}", **cv, "chosen": chosen, "std": std})
            every += grid
    cv, chosen, std = cross_validate(every)
    rows.append({"name": "CV: any variant or the default", **cv, "chosen": chosen, "std": std})
    if fb_new[0]:
        save_feedback()

    base = {kind: rows[0][kind][:, 0].mean() for kind, _ in kinds}
    print(f"\nIRLeD dev ({len(docs)} documents, {nq} queries), K = {args.candidates}, {len(folds)}-fold CV (seed "
          f"{args.seed}); MAP / nDCG@10 / MRR (MAP vs BM25)")
    print(f"{'method':<52}" + "".join(f"{kind:>34}" for kind, _ in kinds))
    for r in rows:
        cells = []
        for kind, _ in kinds:
            m = r[kind].mean(axis=0)
            sd = f"±{r['std'][kind]:.3f}" if "std" in r else ""
            cells.append(f"{m[0]:.3f}{sd:<6} / {m[1]:.3f} / {m[2]:.3f} ({100 * (m[0] / base[kind] - 1):+4.0f}%)")
        print(f"{r['name'][:51]:<52}" + "".join(f"{c:>34}" for c in cells))
        if "chosen" in r:
            print(f"{'':<6}folds chose: " + " | ".join(r["chosen"]))
    ref = rows[5]
    for r in rows:
        if r["name"].startswith("CV"):
            print(f"{r['name']} - default, per-query AP: " + "; ".join(
                f"{kind} {d.mean():+.4f} ({int((d > 1e-9).sum())} better, {int((d < -1e-9).sum())} worse)"
                for kind, _ in kinds for d in [r[kind][:, 0] - ref[kind][:, 0]]))
    print(f"{len(fb_cache)} feedback documents as sources ({fb_new[0]} new; {computer.cost()}); "
          f"{time.perf_counter() - t0:.0f} s", file=sys.stderr)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({
            "documents": len(docs), "queries": nq, "candidates": args.candidates, "folds": len(folds), "seed": args.seed,
            "rows": [{"name": r["name"], **({"chosen": r["chosen"]} if "chosen" in r else {}),
                      **{kind: dict(zip(METRICS, map(float, r[kind].mean(axis=0)))) for kind, _ in kinds}} for r in rows],
        }, indent=1))
    cache.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
