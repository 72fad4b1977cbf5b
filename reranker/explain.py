"""Why a hit ranks where it does: the three levels of its SDR score (document, best paragraph pairs,
their best sentence pairs with cosines and character offsets), the snippet (the best sentence pair of
the best paragraph pair), and the returned hits presented with their title and metadata."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from sdr_search.core.documents import Document
from sdr_search.core.fusion import HybridSpec
from sdr_search.core.scoring import paragraph_scores
from sdr_search.core.vectors import CorpusVectors, DocVectors
from sdr_search.indexer.store import DocumentStore
from sdr_search.core.errors import DocumentNotFoundError, ExplanationTooLargeError

from .matrix import matrix_body, matrix_cells, paragraph_matrix
from .offsets import sentence_spans
from .pairs import Pairs, best_pairs, paragraph_sizes
from .results import Explanation, Hit, HybridExplanation, Snippet
from .scoring import Scoring
from .sources import Source

__all__ = ["explain_pair", "best_sentence_pair", "present"]


def _fits(candidate: Document, pairs: Pairs) -> bool:
    """Whether every paragraph and sentence the pairs name is in the candidate as read (a document
    replaced between its scoring and its reading may have fewer)."""
    return all(j < len(candidate.paragraphs) and all(r < len(candidate.paragraphs[j]) for _, r, _ in sentences)
               for _, j, _, _, sentences in pairs[1])


def _sentence_pair(
    source: Source, candidate: Document, i: int, j: int, k: int, r: int, cosine: float,
    source_spans: Sequence[Sequence[tuple[int, int] | None]] | None,
    candidate_spans: Sequence[Sequence[tuple[int, int]]] | None,
) -> dict[str, Any]:
    pair: dict[str, Any] = {
        **({"source": source.locate(i)[0]} if source.parts else {}),
        "source_sentence": source.document.paragraphs[i][k],
        "candidate_sentence": candidate.paragraphs[j][r],
        "cosine": round(cosine, 6),
    }
    src = source_spans[i][k] if source_spans is not None else None
    if src is not None:
        pair["source_start"], pair["source_end"] = src
    if candidate_spans is not None:
        pair["candidate_start"], pair["candidate_end"] = candidate_spans[j][r]
    return pair


def _explanation(source: Source, candidate: Document, best: Pairs,
                 source_spans: Sequence[Sequence[tuple[int, int] | None]] | None) -> dict[str, Any]:
    score, pairs = best
    source_spans = source.spans() if source_spans is None else source_spans
    candidate_spans = sentence_spans(candidate)
    return {"score": score, "paragraph_pairs": [{
        **({"source": source.locate(i)[0]} if source.parts else {}),
        "source_paragraph": source.locate(i)[1],
        "candidate_paragraph": j,
        "paragraph_score": round(p, 6),
        "normalised_score": round(n, 6),
        "sentence_pairs": [_sentence_pair(source, candidate, i, j, k, r, c, source_spans, candidate_spans)
                           for k, r, c in sentences],
    } for i, j, p, n, sentences in pairs]}


def _snippet(source: Source, candidate: Document, best: Pairs,
             source_spans: Sequence[Sequence[tuple[int, int] | None]] | None) -> dict[str, Any]:
    i, j, _, _, ((k, r, cosine), *_) = best[1][0]
    source_spans = source.spans() if source_spans is None else source_spans
    pair = _sentence_pair(source, candidate, i, j, k, r, cosine, source_spans, sentence_spans(candidate))
    return {**pair, "source_paragraph": source.locate(i)[1], "candidate_paragraph": j}


def explain_pair(
    source: Source, candidate: Document, cand_vectors: DocVectors, *, top_paragraphs: int = 3, top_sentences: int = 3,
    source_spans: Sequence[Sequence[tuple[int, int] | None]] | None = None, P: np.ndarray | None = None,
) -> dict[str, Any]:
    """The three levels of an SDR score: document score, best paragraph pairs with their
    normalised scores, and for each pair the best sentence pairs with their cosines and character
    offsets (the candidate's into its stored text; the source's into ``source_spans``' text, by
    default :meth:`Source.spans`). ``P``: the paragraph scores against the candidate, when known."""
    return _explanation(source, candidate, best_pairs(source, cand_vectors, top_paragraphs, top_sentences, P),
                        source_spans)


def best_sentence_pair(
    source: Source, candidate: Document, cand_vectors: DocVectors, *,
    source_spans: Sequence[Sequence[tuple[int, int] | None]] | None = None, P: np.ndarray | None = None,
) -> dict[str, Any]:
    """The snippet of a hit: the best sentence pair of its best paragraph pair (the pair SDR
    weighs most; the first sentence pair :func:`explain_pair` lists), with the two paragraphs'
    positions and the character offsets :func:`explain_pair` gives. ``P`` as for :func:`explain_pair`."""
    return _snippet(source, candidate, best_pairs(source, cand_vectors, 1, 1, P), source_spans)


def present(
    store: DocumentStore, source: Source, hits: list[Hit], scoring: Scoring, spec: HybridSpec | None,
    explain: bool, *, matrix: bool = False, max_cells: int | None = None,
) -> list[Hit]:
    """The returned hits with title, metadata and snippet (and the explanation when asked): the
    documents read in one call without vectors; the best pairs from whoever scored the candidates
    (``scoring``, :mod:`.scoring`): from the vectors the rerank fetched, or from the breakdown a store
    that scores exactly computed next to its data (no vector travels). A document replaced since it
    was scored is read again whole, vectors included.

    ``matrix`` (with ``explain``): each explanation also gets the whole paragraph-pair matrix
    (:mod:`.matrix`), computed here from the hits' vectors (:meth:`Scoring.hit_vectors`: those the
    rerank fetched, or, on a store that scored them itself, read now). At most ``max_cells`` cells over
    the hits (:class:`ExplanationTooLargeError` beyond, before any is computed).

    The documents are read in one call, but for those the scoring's own request brought
    (:attr:`Scoring.presented`: on OpenSearch with the plugin, the best hits came with their exact scores)."""
    ids = [h.id for h in hits]
    documents = {i: scoring.presented[i] for i in ids if i in scoring.presented}
    missing = [i for i in ids if i not in documents]
    documents.update(store.documents_of(missing) if missing else {})
    source_spans = source.spans()
    top = (3, 3) if explain else (1, 1)
    matrix = matrix and explain
    if matrix:
        _check_cells(source, [documents[h.id] for h in hits if h.id in documents], max_cells)
    bests, blocks = scoring.pairs(source, ids, documents, top)  # blocks: each hit's paragraph scores, where computed here
    vecs = scoring.hit_vectors(ids, documents) if matrix else [None] * len(hits)
    out = []
    for h, best, v, P in zip(hits, bests, vecs, blocks):
        doc = documents.get(h.id)
        if doc is not None and (best is None or not _fits(doc, best)
                                or (matrix and (v is None or paragraph_sizes(doc) != _vector_sizes(v)))):
            try:
                stored = store.get(h.id)
                v = stored.vectors
                P = paragraph_scores(source.vectors, CorpusVectors.from_docs([h.id], [v]))
                doc, best = stored.document, best_pairs(source, v, *top, P)
            except DocumentNotFoundError:
                doc = None
        if doc is None:  # deleted since it was scored: the hit stays, without details
            out.append(h)
            continue
        explanation = None
        if explain:
            ex = _explanation(source, doc, best, source_spans)
            first = ex["paragraph_pairs"][0]
            snippet = {**first["sentence_pairs"][0], "source_paragraph": first["source_paragraph"],
                       "candidate_paragraph": first["candidate_paragraph"]}
            if spec is not None and h.signals is not None:
                ex["hybrid"] = HybridExplanation(score=h.score, fusion=spec.fusion, signals=h.signals,
                                                 rank_constant=spec.rank_constant if spec.fusion == "rrf" else None)
            if matrix:
                ex["matrix"] = matrix_body(
                    paragraph_matrix(source.vectors, source.stats, v, P), stats=source.stats,
                    rows=[(source.locate(i)[0] if source.parts else None, source.locate(i)[1])
                          for i in range(source.vectors.n_paragraphs)],
                    source_spans=source_spans, candidate_spans=sentence_spans(doc))
            explanation = Explanation.model_validate(ex)
        else:
            snippet = _snippet(source, doc, best, source_spans)
        out.append(h.model_copy(update={"title": doc.title, "metadata": dict(doc.metadata),
                                        "snippet": Snippet.model_validate(snippet), "explanation": explanation}))
    return out


def _vector_sizes(vectors: DocVectors) -> tuple[int, ...]:
    return tuple(np.diff(vectors.par_offsets).tolist())


def _check_cells(source: Source, documents: Sequence[Document], max_cells: int | None) -> None:
    cells = matrix_cells(source.vectors.n_paragraphs, [len(d.paragraphs) for d in documents])
    if max_cells is not None and cells > max_cells:
        raise ExplanationTooLargeError(
            f"explain_matrix: the paragraph matrices of these {len(documents)} hits hold {cells:,} cells "
            f"({source.vectors.n_paragraphs} source paragraphs x {sum(len(d.paragraphs) for d in documents):,} hit "
            f"paragraphs), over the limit of {max_cells:,} (SDR_MAX_MATRIX_CELLS); ask fewer hits (from = a hit's "
            "rank, size 1)")
