"""Encoders side by side on IRLeD dev: relevance (full and short sources) and encoding cost.

Every model given with ``--model`` (repeatable; ``default`` is the bundled all-MiniLM-L6-v2) is
measured on the *same* documents and queries:

- **queries**: the first ``--queries-n`` judged dev queries (all 50 by default), full (the whole
  query judgment) and short (cut by ``--cut``, default ``sentences:9``: the first 9 sentences as one
  paragraph, as ``sdr eval --source-cut``; the first 12 sentences where that is not available);
- **corpus**: the whole corpus, or with ``--distractors K`` a fixed sub-corpus: every document
  judged relevant for a chosen query plus the BM25 top K of each chosen (full) query over the whole
  corpus. The sub-corpus depends on the data and BM25 only, never on a model, so every model ranks
  the same documents. SDR statistics are exact over the documents ranked (``sdr eval`` does the
  same over the whole corpus), so sub-corpus figures are comparable between models, not with the
  whole-corpus figures of docs/results/relevance.md.

Rows: ``sdr``, ``mean`` and ``hybrid`` (the default fusion, K = 100) per model and source kind, and
``bm25`` once (no model). Cost: sentences encoded per second while encoding the corpus side (cache
misses only; a cached run reports none), the vector dimension and the float32 vector bytes of the
ranked documents (what a store's vector file holds; a float16 store halves it).

Usage:

    python bench/experiments/encoder_relevance.py --model default --model DIR --queries-n 10 --distractors 5
    python bench/experiments/encoder_relevance.py --model default --model DIR        # whole corpus, 50 queries
    python bench/experiments/encoder_relevance.py --backends auto:bf16,auto:fp32,onnx,onnx-int8 --queries-n 10 --distractors 3

``--backends`` measures each model with several encoder backends (``SDR_ENCODER_BACKEND``, with
``:PRECISION`` for the torch ones). Backends whose vectors share an encoder tag (torch fp32 and
onnx) share cache entries: give each its own ``--cache-dir`` to encode both.

Vectors are cached in ``--cache-dir`` (default /var/tmp/sdr-encoder-bench), so a second run only
ranks; the corpus is encoded four documents at a time into the cache, so an interrupted run
resumes.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from sdr_search.core.cache import EmbeddingCache  # noqa: E402
from sdr_search.core.documents import Document, read_documents  # noqa: E402
from sdr_search.core.embed import embed_documents  # noqa: E402
from sdr_search.core.encoder import SentenceEncoder  # noqa: E402
from sdr_search.core.evaluation import EvalInputs, rank_all  # noqa: E402
from sdr_search.core.lexical import BM25Ranker  # noqa: E402
from sdr_search.core.metrics import evaluate, read_qrels  # noqa: E402
from sdr_search.core.onnx_backend import ONNX_BACKENDS  # noqa: E402
from sdr_search.core.scoring import rank  # noqa: E402
from sdr_search.core.settings import EncoderSettings  # noqa: E402
from sdr_search.core.vectors import CorpusVectors  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "irled"
METHODS = ("sdr", "mean", "hybrid")


def short_sources(queries: list[Document], spec: str) -> tuple[list[Document], str]:
    """The queries cut to short sources with ``sdr eval``'s cut, or to their first 12 sentences."""
    try:
        from sdr_search.core.evaluation import cut_source, parse_source_cut
    except ImportError:  # no --source-cut in this checkout
        from dataclasses import replace

        return [replace(q, paragraphs=(tuple(q.sentences[:12]),)) for q in queries], "sentences:12 (bench cut)"
    cut = parse_source_cut(spec)
    return [cut_source(q, cut) for q in queries], str(cut)


def bm25_subcorpus(docs: list[Document], queries: list[Document], qrels, k: int) -> list[Document]:
    """Relevant documents of ``queries`` plus each query's BM25 top ``k``, in corpus order."""
    ids = [d.id for d in docs]
    ranker = BM25Ranker()
    ranker.fit(ids, [d.text for d in docs])
    keep = {d for q in queries for d, g in qrels[q.id].items() if g > 0}
    for q in queries:
        scores = np.asarray(ranker.scores(q.text), dtype=np.float64)
        keep.update(ids[i] for i in rank(ids, scores)[:k])
    return [d for d in docs if d.id in keep]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--corpus", default=str(DATA / "corpus.jsonl.gz"))
    p.add_argument("--queries", default=str(DATA / "queries-dev.jsonl.gz"))
    p.add_argument("--qrels", default=str(DATA / "qrels-dev.txt"))
    p.add_argument("--model", action="append", default=[], metavar="DIR",
                   help="model directory, or 'default' (repeatable; default: only the bundled model)")
    p.add_argument("--precision", default="bf16", choices=["auto", "fp32", "bf16"])
    p.add_argument("--backends", default="auto",
                   help="comma-separated encoder backends, each BACKEND or BACKEND:PRECISION (auto, transformers, onnx, "
                        "onnx-int8; default: auto with --precision), each measured with every model")
    p.add_argument("--queries-n", type=int, help="first N judged queries (default all)")
    p.add_argument("--distractors", type=int, help="sub-corpus: relevant documents + BM25 top K of each query")
    p.add_argument("--cut", default="sentences:9", help="short-source cut (default sentences:9)")
    p.add_argument("--cache-dir", type=Path, default=Path("/var/tmp/sdr-encoder-bench"))
    p.add_argument("--json", type=Path, metavar="OUT", help="also write every number as JSON")
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("sdr_search.core.documents").setLevel(logging.ERROR)

    qrels = read_qrels(args.qrels)
    queries = [q for q in read_documents([args.queries]) if any(g > 0 for g in qrels.get(q.id, {}).values())]
    queries = queries[: args.queries_n] if args.queries_n else queries
    qrels = {q.id: qrels[q.id] for q in queries}
    docs = list(read_documents([args.corpus]))
    setting = f"whole corpus ({len(docs)} documents)"
    if args.distractors is not None:
        docs = bm25_subcorpus(docs, queries, qrels, args.distractors)
        setting = (f"sub-corpus: relevant documents of the {len(queries)} queries + BM25 top {args.distractors} "
                   f"of each ({len(docs)} documents)")
    shorts, cut = short_sources(queries, args.cut)
    n_sent = sum(d.n_sentences for d in docs)
    print(f"{setting}, {n_sent} sentences; {len(queries)} queries ({sum(q.n_sentences for q in queries)} "
          f"sentences), short = {cut}", flush=True)

    out: dict = {"setting": setting, "documents": [d.id for d in docs], "queries": [q.id for q in queries],
                 "cut": cut, "sentences": n_sent, "models": {}}
    bm25 = {}
    for kind, qs in (("full", queries), ("short", shorts)):
        runs = rank_all("bm25", EvalInputs(docs, qs))
        bm25[kind] = evaluate({k: [d for d, _ in v] for k, v in runs.items()}, qrels)
    out["bm25"] = bm25
    args.cache_dir.mkdir(parents=True, exist_ok=True)
    rows = [("bm25", "-", kind, m["MAP"], m["nDCG@10"]) for kind, m in bm25.items()]
    for model, spec in [(m, b) for m in args.model or ["default"] for b in args.backends.split(",")]:
        backend, _, precision = spec.partition(":")
        if not precision:
            precision = "auto" if backend in ONNX_BACKENDS else args.precision
        enc = SentenceEncoder(settings=EncoderSettings(model=None if model == "default" else model,
                                                       precision=precision, device="cpu", encoder_backend=backend))
        enc.load()
        label = f"{Path(enc.model_id).name} {enc.backend} {enc.precision}"
        res: dict = {"model_id": enc.model_id, "backend": enc.backend, "precision": enc.precision, "tag": enc.cache_tag,
                     "dim": enc.dim}
        encode, counted = enc.encode, [0]

        def counting_encode(sentences, _encode=encode, _counted=counted, **kw):
            _counted[0] += len(sentences)  # cache misses only (the truncation count includes cached entries)
            return _encode(sentences, **kw)

        enc.encode = counting_encode
        with EmbeddingCache(args.cache_dir / "embeddings.sqlite") as cache:
            t = time.perf_counter()
            pairs = list(embed_documents(docs, enc, cache=cache, chunk_docs=4, progress=True, total=len(docs)))
            corpus = CorpusVectors.from_docs([d.id for d, _ in pairs], [v for _, v in pairs])
            dt = time.perf_counter() - t
            encoded = counted[0]
            res["corpus_encoded_sentences"] = encoded
            res["corpus_encode_s"] = dt
            res["sentences_per_s"] = encoded / dt if encoded else None
            qv = {kind: [v for _, v in embed_documents(qs, enc, cache=cache)] for kind, qs in
                  (("full", queries), ("short", shorts))}
        res["vector_bytes_f32"] = int(corpus.vectors.shape[0]) * res["dim"] * 4
        for kind, qs in (("full", queries), ("short", shorts)):
            inputs = EvalInputs(docs, qs, corpus, qv[kind])
            for method in METHODS:
                runs = rank_all(method, inputs)
                m = evaluate({k: [d for d, _ in v] for k, v in runs.items()}, qrels)
                res[f"{method}/{kind}"] = m
                rows.append((method, label, kind, m["MAP"], m["nDCG@10"]))
        out["models"][model if spec == "auto" else f"{model} {spec}"] = res
        sps = f"{res['sentences_per_s']:.1f} sentences/s" if res["sentences_per_s"] else "all cached"
        print(f"{label} ({enc.cache_tag}): dim {res['dim']}, {encoded} sentences encoded in {dt:.0f} s ({sps}), "
              f"vectors {res['vector_bytes_f32'] / 2**20:.1f} MiB (float32)", flush=True)
    print(f"{'method':>7} {'encoder':>40} {'source':>6} {'MAP':>6} {'nDCG@10':>8}")
    for method, name, kind, map_, ndcg in rows:
        print(f"{method:>7} {name[-40:]:>40} {kind:>6} {map_:6.4f} {ndcg:8.4f}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
