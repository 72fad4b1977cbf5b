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
from sdr_search.core.errors import DocumentNotFoundError

from .offsets import sentence_spans
from .results import Explanation, Hit, HybridExplanation, Snippet
from .sources import Source

__all__ = ["explain_pair", "best_sentence_pair", "present"]


def _best_pairs(
    source: Source, cand_vectors: DocVectors, top_paragraphs: int, top_sentences: int, P: np.ndarray | None = None,
) -> tuple[float, list[tuple[int, int, float, float, list[tuple[int, int, float]]]]]:
    """The SDR score against one candidate and its best paragraph pairs ``(i, j, P_ij, N_ij,
    [(source sentence k, candidate sentence r, cosine), ...])``, best first (positions inside the
    paragraphs). ``P``: the paragraph scores against this candidate when already computed."""
    P = paragraph_scores(source.vectors, CorpusVectors.from_docs([""], [cand_vectors])) if P is None else P  # (n, m)
    mu = np.asarray(source.stats.mu, dtype=np.float64)[:, None]
    sigma = np.asarray(source.stats.sigma, dtype=np.float64)[:, None]
    N = (P - mu) / sigma
    best_j = N.argmax(axis=1)
    best_n = N[np.arange(N.shape[0]), best_j]
    offsets = source.part_offsets  # several sources: the like sources' mean of their own scores
    score = float(np.mean(np.add.reduceat(best_n, offsets[:-1]) / np.diff(offsets))) if source.parts else float(best_n.mean())
    pairs = []
    for i in np.argsort(-best_n, kind="stable")[:top_paragraphs]:
        i, j = int(i), int(best_j[i])
        S = source.vectors.paragraph(i) @ cand_vectors.paragraph(j).T
        r = S.argmax(axis=1)
        sims = S[np.arange(S.shape[0]), r]
        sentences = [(int(k), int(r[k]), float(sims[k])) for k in np.argsort(-sims, kind="stable")[:top_sentences]]
        pairs.append((i, j, float(P[i, j]), float(N[i, j]), sentences))
    return score, pairs


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


def explain_pair(
    source: Source, candidate: Document, cand_vectors: DocVectors, *, top_paragraphs: int = 3, top_sentences: int = 3,
    source_spans: Sequence[Sequence[tuple[int, int] | None]] | None = None, P: np.ndarray | None = None,
) -> dict[str, Any]:
    """The three levels of an SDR score: document score, best paragraph pairs with their
    normalised scores, and for each pair the best sentence pairs with their cosines and character
    offsets (the candidate's into its stored text; the source's into ``source_spans``' text, by
    default :meth:`Source.spans`). ``P``: the paragraph scores against the candidate, when known."""
    score, best = _best_pairs(source, cand_vectors, top_paragraphs, top_sentences, P)
    source_spans = source.spans() if source_spans is None else source_spans
    candidate_spans = sentence_spans(candidate)
    pairs = [{
        **({"source": source.locate(i)[0]} if source.parts else {}),
        "source_paragraph": source.locate(i)[1],
        "candidate_paragraph": j,
        "paragraph_score": round(p, 6),
        "normalised_score": round(n, 6),
        "sentence_pairs": [_sentence_pair(source, candidate, i, j, k, r, c, source_spans, candidate_spans)
                           for k, r, c in sentences],
    } for i, j, p, n, sentences in best]
    return {"score": score, "paragraph_pairs": pairs}


def best_sentence_pair(
    source: Source, candidate: Document, cand_vectors: DocVectors, *,
    source_spans: Sequence[Sequence[tuple[int, int] | None]] | None = None, P: np.ndarray | None = None,
) -> dict[str, Any]:
    """The snippet of a hit: the best sentence pair of its best paragraph pair (the pair SDR
    weighs most; the first sentence pair :func:`explain_pair` lists), with the two paragraphs'
    positions and the character offsets :func:`explain_pair` gives. ``P`` as for :func:`explain_pair`."""
    _, best = _best_pairs(source, cand_vectors, 1, 1, P)
    i, j, _, _, ((k, r, cosine),) = best[0]
    source_spans = source.spans() if source_spans is None else source_spans
    pair = _sentence_pair(source, candidate, i, j, k, r, cosine, source_spans, sentence_spans(candidate))
    return {**pair, "source_paragraph": source.locate(i)[1], "candidate_paragraph": j}


def present(
    store: DocumentStore, source: Source, hits: list[Hit], vectors: list[DocVectors], spec: HybridSpec | None,
    explain: bool,
) -> list[Hit]:
    """The returned hits with title, metadata and snippet (and the explanation when asked): the
    documents read in one call without vectors; the snippet from the vectors the rerank
    fetched (a document replaced since is read again whole, vectors included)."""
    documents = store.documents_of([h.id for h in hits])
    source_spans = source.spans()
    # one paragraph-score product for every hit, split per hit (P for each is a column block)
    P_all = paragraph_scores(source.vectors, CorpusVectors.from_docs([h.id for h in hits], vectors))
    ends = np.cumsum([v.n_paragraphs for v in vectors])
    out = []
    for h, vecs, end in zip(hits, vectors, ends.tolist()):
        P: np.ndarray | None = P_all[:, end - vecs.n_paragraphs : end]
        doc = documents.get(h.id)
        if doc is not None and _paragraph_sizes(doc) != tuple(np.diff(vecs.par_offsets).tolist()):
            try:
                stored = store.get(h.id)
                doc, vecs, P = stored.document, stored.vectors, None
            except DocumentNotFoundError:
                doc = None
        if doc is None:  # deleted since it was scored: the hit stays, without details
            out.append(h)
            continue
        explanation = None
        if explain:
            ex = explain_pair(source, doc, vecs, source_spans=source_spans, P=P)
            first = ex["paragraph_pairs"][0]
            snippet = {**first["sentence_pairs"][0], "source_paragraph": first["source_paragraph"],
                       "candidate_paragraph": first["candidate_paragraph"]}
            if spec is not None and h.signals is not None:
                ex["hybrid"] = HybridExplanation(score=h.score, fusion=spec.fusion, signals=h.signals,
                                                 rank_constant=spec.rank_constant if spec.fusion == "rrf" else None)
            explanation = Explanation.model_validate(ex)
        else:
            snippet = best_sentence_pair(source, doc, vecs, source_spans=source_spans, P=P)
        out.append(h.model_copy(update={"title": doc.title, "metadata": dict(doc.metadata),
                                        "snippet": Snippet.model_validate(snippet), "explanation": explanation}))
    return out


def _paragraph_sizes(doc: Document) -> tuple[int, ...]:
    return tuple(len(p) for p in doc.paragraphs)
