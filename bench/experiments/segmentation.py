"""What SDR's units do to relevance on IRLeD dev: the paragraph unit and the sentences kept.

SDR scores paragraph pairs (stage 1) and z-scores each source paragraph against every corpus
paragraph (stage 2), so what counts as a paragraph, and which sentences a paragraph holds, shape
the score as much as the encoder does. IRLeD's paragraphs are the lines of the original judgments:
a third are one sentence (a judge's name, a date, a case number), and sentence splitting of legal
text leaves fragments ("10.", "& H.", "1]"). This bench encodes the documents once (through the
embedding cache, so a second run does not encode) and re-groups the *same* sentence vectors under
each variant, so that only the unit changes between rows:

- ``as segmented``: the paragraphs and sentences as read with ``--min-paragraph-sentences`` and
  ``--min-sentence-chars`` (default 1 and 0: the lines and the splitter's sentences as given);
- ``min N``: consecutive paragraphs merged until each unit holds at least N sentences
  (:func:`sdr_search.core.segments.merge_short_paragraphs`, ``SDR_MIN_PARAGRAPH_SENTENCES``);
- ``cap N``: only the first N sentences of each paragraph scored (the reference code's
  sentences-per-paragraph cap);
- ``drop <C chars``: sentences shorter than C characters left out of the scoring;
- ``whole document``: one paragraph per document (stage 2 then normalises a single row).

Rows give exact SDR (statistics over every corpus paragraph) and the single-vector cosine
(``mean``) of the same vectors as a reference that the paragraph unit cannot change.

Usage:

    python bench/experiments/segmentation.py --docs 298 --queries-n 20   # the slice of docs/results/relevance.md
    python bench/experiments/segmentation.py                             # the full dev split
    python bench/experiments/segmentation.py --model models/irled-sdr    # a trained encoder
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from hybrid import encoder_from_args, irled_arguments, per_query, read_irled  # noqa: E402

from sdr_search.core.cache import EmbeddingCache  # noqa: E402
from sdr_search.core.documents import Document  # noqa: E402
from sdr_search.core.embed import embed_corpus, embed_documents  # noqa: E402
from sdr_search.core.evaluation import EvalInputs, signal_scorers  # noqa: E402
from sdr_search.core.scoring import rank  # noqa: E402
from sdr_search.core.segments import merge_short_paragraphs  # noqa: E402
from sdr_search.core.settings import CacheSettings, SegmentationSettings  # noqa: E402
from sdr_search.core.vectors import CorpusVectors, DocVectors  # noqa: E402

# A variant maps (document, its vectors) to new vectors: rows kept and their grouping.
Variant = Callable[[Document, DocVectors], DocVectors]


def regroup(vecs: DocVectors, sizes: list[int]) -> DocVectors:
    """The same sentence vectors under new paragraph sizes (which must cover every sentence)."""
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    return DocVectors(vecs.vectors, offsets)


def keep_rows(vecs: DocVectors, keep: list[np.ndarray]) -> DocVectors:
    """Per paragraph, the rows ``keep[i]`` (indices into the document); empty paragraphs dropped.
    A document left with nothing keeps its first sentence so that it can still be scored."""
    kept = [k for k in keep if k.size]
    if not kept:
        kept = [np.zeros(1, dtype=np.int64)]
    rows = np.concatenate(kept)
    return DocVectors(vecs.vectors[rows], np.concatenate([[0], np.cumsum([k.size for k in kept])]).astype(np.int64))


def variant_lines(doc: Document, vecs: DocVectors) -> DocVectors:
    return vecs


def variant_min(n: int) -> Variant:
    def f(doc: Document, vecs: DocVectors) -> DocVectors:
        merged = merge_short_paragraphs(doc.paragraphs, n)
        return regroup(vecs, [len(p) for p in merged])
    return f


def variant_cap(n: int) -> Variant:
    def f(doc: Document, vecs: DocVectors) -> DocVectors:
        off = vecs.par_offsets
        return keep_rows(vecs, [np.arange(off[i], min(off[i + 1], off[i] + n)) for i in range(off.size - 1)])
    return f


def variant_drop_short(chars: int) -> Variant:
    def f(doc: Document, vecs: DocVectors) -> DocVectors:
        off = vecs.par_offsets
        flat = doc.sentences
        return keep_rows(vecs, [np.asarray([r for r in range(off[i], off[i + 1]) if len(flat[r]) >= chars],
                                           dtype=np.int64) for i in range(off.size - 1)])
    return f


def variant_whole(doc: Document, vecs: DocVectors) -> DocVectors:
    return regroup(vecs, [vecs.vectors.shape[0]])


def variant_both(n: int, chars: int) -> Variant:
    drop = variant_drop_short(chars)

    def f(doc: Document, vecs: DocVectors) -> DocVectors:
        # merge first (on the document's own paragraphs, once), then drop fragments inside the units
        merged = merge_short_paragraphs(doc.paragraphs, n)
        return drop(Document(doc.id, tuple(merged)), regroup(vecs, [len(p) for p in merged]))
    return f


VARIANTS: dict[str, Variant] = {
    "as segmented": variant_lines,
    "min 2": variant_min(2),
    "min 4": variant_min(4),
    "min 8": variant_min(8),
    "min 16": variant_min(16),
    "min 32": variant_min(32),
    "cap 8": variant_cap(8),
    "drop <20 chars": variant_drop_short(20),
    "min 4, drop <20 chars": variant_both(4, 20),
    "min 8, drop <20 chars": variant_both(8, 20),
    "min 16, drop <20 chars": variant_both(16, 20),
    "whole document": variant_whole,
}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    irled_arguments(p)
    p.add_argument("--variants", help="comma-separated variant names (default: all)")
    p.add_argument("--min-paragraph-sentences", type=int, default=1,
                   help="segment with this SDR_MIN_PARAGRAPH_SENTENCES before the variants (default 1: as given)")
    p.add_argument("--min-sentence-chars", type=int, default=0,
                   help="segment with this SDR_MIN_SENTENCE_CHARS before the variants (default 0: as given; "
                   "joined fragments are new sentences, so this encodes again)")
    p.add_argument("--json", type=Path, metavar="OUT", help="also write every number as JSON")
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("sdr_search.core.documents").setLevel(logging.ERROR)

    t0 = time.perf_counter()
    seg = SegmentationSettings.from_recorded({"min_paragraph_sentences": args.min_paragraph_sentences,
                                              "min_sentence_chars": args.min_sentence_chars})
    qrels, queries, docs = read_irled(args, seg)
    if not queries or not docs:
        print("no judged query or no document", file=sys.stderr)
        return 2
    encoder = encoder_from_args(args)
    cache_dir = args.cache_dir or CacheSettings().cache_dir
    with EmbeddingCache(cache_dir / "embeddings.sqlite") as cache:
        q_vecs = [v for _, v in embed_documents(queries, encoder, cache=cache, progress=True, total=len(queries))]
        corpus = embed_corpus(docs, encoder, cache=cache, progress=True)
    d_vecs = [DocVectors(corpus.vectors[corpus.par_offsets[corpus.doc_par_offsets[k]]:
                                        corpus.par_offsets[corpus.doc_par_offsets[k + 1]]],
                         corpus.par_offsets[corpus.doc_par_offsets[k]:corpus.doc_par_offsets[k + 1] + 1]
                         - corpus.par_offsets[corpus.doc_par_offsets[k]])
              for k in range(len(docs))]
    ids = [d.id for d in docs]
    position = {d: k for k, d in enumerate(ids)}
    names = list(VARIANTS) if not args.variants else [v.strip() for v in args.variants.split(",")]
    print(f"{len(docs)} documents, {len(queries)} judged queries, model {encoder.model_id}; "
          f"embedded in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    print(f"\nIRLeD ({len(docs)} documents, {len(queries)} queries), model {encoder.model_id}, "
          f"segmented with {seg.recorded()}")
    print(f"{'unit':<24} {'paragraphs/doc':>14} {'sents/par':>9} {'SDR MAP':>8} {'nDCG@10':>8} {'mean MAP':>8}")
    rows = []
    for name in names:
        fn = VARIANTS[name]
        new_docs = [fn(d, v) for d, v in zip(docs, d_vecs)]
        new_q = [fn(q, v) for q, v in zip(queries, q_vecs)]
        inputs = EvalInputs(docs, queries, CorpusVectors.from_docs(ids, new_docs), new_q)
        scorers = signal_scorers(("sdr", "mean"), inputs, stats="exact")
        out = np.zeros((len(queries), 3))
        for k, q in enumerate(queries):
            own = position.get(q.id)
            keep = [i for i in range(len(ids)) if i != own]
            kept = [ids[i] for i in keep]
            for col, sig in ((0, "sdr"), (2, "mean")):
                scores = np.asarray(scorers[sig](k, q), dtype=np.float64)[keep]
                ranking = [kept[i] for i in rank(kept, scores)]
                ap, nd = per_query(ranking, qrels[q.id])
                out[k, col] = ap
                if col == 0:
                    out[k, 1] = nd
        n_par = np.mean([v.n_paragraphs for v in new_docs])
        spp = np.mean([v.vectors.shape[0] / v.n_paragraphs for v in new_docs])
        row = {"unit": name, "paragraphs_per_doc": float(n_par), "sentences_per_paragraph": float(spp),
               "SDR_MAP": float(out[:, 0].mean()), "SDR_nDCG@10": float(out[:, 1].mean()),
               "mean_MAP": float(out[:, 2].mean()), "per_query_AP": out[:, 0].tolist()}
        rows.append(row)
        print(f"{name:<24} {n_par:>14.1f} {spp:>9.2f} {row['SDR_MAP']:>8.3f} {row['SDR_nDCG@10']:>8.3f} "
              f"{row['mean_MAP']:>8.3f}", flush=True)
    print(f"\n{time.perf_counter() - t0:.0f} s", file=sys.stderr)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"documents": len(docs), "queries": [q.id for q in queries],
                                         "segmentation": seg.recorded(),
                                         "model": encoder.model_id, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
