"""Why a hit ranks where it does: the three levels of its SDR score (document, best paragraph pairs,
their best sentence pairs with cosines and character offsets), the snippet (the best sentence pair of
the best paragraph pair), and the returned hits presented with their title and metadata."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from sdr_search.core.documents import Document
from sdr_search.core.fusion import HybridSpec
from sdr_search.core.scoring import paragraph_scores
from sdr_search.core.vectors import CorpusVectors, DocVectors
from sdr_search.indexer.store import DocumentStore
from sdr_search.core.errors import DocumentNotFoundError, ExplanationTooLargeError

from .matrix import matrix_body, matrix_cells, paragraph_matrix
from .offsets import sentence_spans
from .results import Explanation, Hit, HybridExplanation, Snippet
from .sources import Source

__all__ = ["explain_pair", "best_sentence_pair", "present"]


Pairs = tuple[float, list[tuple[int, int, float, float, list[tuple[int, int, float]]]]]
"""An SDR score against one candidate and its best paragraph pairs ``(i, j, P_ij, N_ij, [(source
sentence k, candidate sentence r, cosine), ...])``, best first (positions inside the paragraphs)."""


def _score_of(source: Source, best_n: np.ndarray) -> float:
    """The SDR score from each source paragraph's best normalised score (several sources: the mean of
    their own scores, as the ranking computes it)."""
    if not source.parts:
        return float(best_n.mean())
    offsets = source.part_offsets
    return float(np.mean(np.add.reduceat(best_n, offsets[:-1]) / np.diff(offsets)))


def _best_pairs(
    source: Source, cand_vectors: DocVectors, top_paragraphs: int, top_sentences: int, P: np.ndarray | None = None,
) -> Pairs:
    """:data:`Pairs` from the candidate's vectors. ``P``: the paragraph scores against this candidate
    when already computed."""
    P = paragraph_scores(source.vectors, CorpusVectors.from_docs([""], [cand_vectors])) if P is None else P  # (n, m)
    mu = np.asarray(source.stats.mu, dtype=np.float64)[:, None]
    sigma = np.asarray(source.stats.sigma, dtype=np.float64)[:, None]
    N = (P - mu) / sigma
    best_j = N.argmax(axis=1)
    best_n = N[np.arange(N.shape[0]), best_j]
    pairs = []
    for i in np.argsort(-best_n, kind="stable")[:top_paragraphs]:
        i, j = int(i), int(best_j[i])
        S = source.vectors.paragraph(i) @ cand_vectors.paragraph(j).T
        r = S.argmax(axis=1)
        sims = S[np.arange(S.shape[0]), r]
        sentences = [(int(k), int(r[k]), float(sims[k])) for k in np.argsort(-sims, kind="stable")[:top_sentences]]
        pairs.append((i, j, float(P[i, j]), float(N[i, j]), sentences))
    return _score_of(source, best_n), pairs


def _stored_pairs(source: Source, breakdown: Mapping[str, Any], top_paragraphs: int, top_sentences: int) -> Pairs:
    """:data:`Pairs` from the breakdown a store that scores exactly computed next to its data
    (:attr:`SdrScores.explanations`: each source paragraph's best candidate paragraph with P_ij and
    N_ij, and each of its sentences' best sentence there; opensearch-plugin/README.md, "Response"):
    the same selection as :func:`_best_pairs`, no vector read."""
    rows = breakdown["source_paragraphs"]
    if len(rows) != source.vectors.n_paragraphs:
        raise ValueError(f"a breakdown of {len(rows)} source paragraphs for a source of {source.vectors.n_paragraphs}")
    best_n = np.asarray([float(row["normalised_score"]) for row in rows], dtype=np.float64)
    pairs = []
    for i in np.argsort(-best_n, kind="stable")[:top_paragraphs]:
        row = rows[int(i)]
        found = row["sentence_pairs"]
        sims = np.asarray([float(p["cosine"]) for p in found], dtype=np.float64)
        sentences = [(int(found[k]["source_sentence"]), int(found[k]["candidate_sentence"]), float(sims[k]))
                     for k in np.argsort(-sims, kind="stable")[:top_sentences]]
        pairs.append((int(i), int(row["candidate_paragraph"]), float(row["paragraph_score"]), float(best_n[i]), sentences))
    return _score_of(source, best_n), pairs


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
    return _explanation(source, candidate, _best_pairs(source, cand_vectors, top_paragraphs, top_sentences, P),
                        source_spans)


def best_sentence_pair(
    source: Source, candidate: Document, cand_vectors: DocVectors, *,
    source_spans: Sequence[Sequence[tuple[int, int] | None]] | None = None, P: np.ndarray | None = None,
) -> dict[str, Any]:
    """The snippet of a hit: the best sentence pair of its best paragraph pair (the pair SDR
    weighs most; the first sentence pair :func:`explain_pair` lists), with the two paragraphs'
    positions and the character offsets :func:`explain_pair` gives. ``P`` as for :func:`explain_pair`."""
    return _snippet(source, candidate, _best_pairs(source, cand_vectors, 1, 1, P), source_spans)


def present(
    store: DocumentStore, source: Source, hits: list[Hit], vectors: list[DocVectors] | None, spec: HybridSpec | None,
    explain: bool, explained: Mapping[str, Mapping[str, Any]] | None = None, *, matrix: bool = False,
    max_cells: int | None = None,
) -> list[Hit]:
    """The returned hits with title, metadata and snippet (and the explanation when asked): the
    documents read in one call without vectors; the snippet from the vectors the rerank fetched, or,
    when nothing was fetched (``vectors`` None: a store that scores exactly, ``capabilities.exact_sdr``),
    from the breakdown the store computed next to its data: with the exact scores (``explained``, by
    id) where it did, else in one request for the others (no vector travels). A document replaced
    since it was scored is read again whole, vectors included.

    ``matrix`` (with ``explain``): each explanation also gets the whole paragraph-pair matrix
    (:mod:`.matrix`), computed here from the hits' vectors: those the rerank fetched, or, on a store
    that scored them itself, the presented hits' vectors fetched now (:meth:`DocumentStore.fetch_documents`;
    on OpenSearch with the plugin, its ``sdr_vectors`` read). At most ``max_cells`` cells over the hits
    (:class:`ExplanationTooLargeError` beyond, before any is computed)."""
    documents = store.documents_of([h.id for h in hits])
    source_spans = source.spans()
    top = (3, 3) if explain else (1, 1)
    matrix = matrix and explain
    if matrix:
        _check_cells(source, [documents[h.id] for h in hits if h.id in documents], max_cells)
    blocks: list[np.ndarray | None] = [None] * len(hits)  # each hit's paragraph scores, where computed here
    if vectors is not None:
        bests, blocks = _pairs_from_vectors(source, hits, vectors, documents, top)
    else:
        bests = _pairs_from_store(store, source, hits, documents, top, explained or {})
    vecs: list[DocVectors | None] = list(vectors) if vectors is not None else [None] * len(hits)
    if matrix and vectors is None:
        vecs = _fetch_present(store, hits, documents)
    out = []
    for h, best, v, P in zip(hits, bests, vecs, blocks):
        doc = documents.get(h.id)
        if doc is not None and (best is None or not _fits(doc, best)
                                or (matrix and (v is None or _paragraph_sizes(doc) != _vector_sizes(v)))):
            try:
                stored = store.get(h.id)
                v = stored.vectors
                P = paragraph_scores(source.vectors, CorpusVectors.from_docs([h.id], [v]))
                doc, best = stored.document, _best_pairs(source, v, *top, P)
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


def _pairs_from_vectors(source: Source, hits: list[Hit], vectors: list[DocVectors], documents: Mapping[str, Document],
                        top: tuple[int, int]) -> tuple[list[Pairs | None], list[np.ndarray | None]]:
    """Each hit's :data:`Pairs` from its fetched vectors (None where the document read has other
    paragraphs than the vectors: replaced since), and the paragraph scores they came from (the
    matrix of ``explain_matrix`` shows the same numbers)."""
    # one paragraph-score product for every hit, split per hit (P for each is a column block)
    P_all = paragraph_scores(source.vectors, CorpusVectors.from_docs([h.id for h in hits], vectors))
    ends = np.cumsum([v.n_paragraphs for v in vectors]).tolist()
    out: list[Pairs | None] = []
    blocks: list[np.ndarray | None] = []
    for h, vecs, end in zip(hits, vectors, ends):
        doc = documents.get(h.id)
        fresh = doc is None or _paragraph_sizes(doc) == tuple(np.diff(vecs.par_offsets).tolist())
        P = P_all[:, end - vecs.n_paragraphs : end]
        out.append(_best_pairs(source, vecs, *top, P) if fresh else None)
        blocks.append(P if fresh else None)
    return out, blocks


def _pairs_from_store(store: DocumentStore, source: Source, hits: list[Hit], documents: Mapping[str, Document],
                      top: tuple[int, int], explained: Mapping[str, Mapping[str, Any]]) -> list[Pairs | None]:
    """Each hit's :data:`Pairs` from the store's exact SDR with its breakdown: those in ``explained``
    (returned with the scores), the other hits still there in one request; None where the breakdown
    does not match the document read (replaced since, or deleted between the two reads)."""
    breakdowns = {h.id: explained[h.id] for h in hits if h.id in explained}
    ids = [h.id for h in hits if h.id in documents and h.id not in breakdowns]
    if ids:
        try:
            breakdowns.update(zip(ids, store.sdr_scores([(source.vectors, source.stats)], ids, explain=True).explanations))
        except DocumentNotFoundError:  # deleted since it was read: each of them read again on its own
            pass
    out: list[Pairs | None] = []
    for h in hits:
        breakdown, doc = breakdowns.get(h.id), documents.get(h.id)
        same = (breakdown is not None and doc is not None and breakdown.get("paragraphs") == len(doc.paragraphs)
                and breakdown.get("sentences") == sum(map(len, doc.paragraphs))
                and len(breakdown.get("source_paragraphs") or ()) == source.vectors.n_paragraphs)
        out.append(_stored_pairs(source, breakdown, *top) if same else None)
    return out


def _paragraph_sizes(doc: Document) -> tuple[int, ...]:
    return tuple(len(p) for p in doc.paragraphs)


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


def _fetch_present(store: DocumentStore, hits: list[Hit], documents: Mapping[str, Document]) -> list[DocVectors | None]:
    """The presented hits' vectors, from a store that scored them itself (nothing was fetched for the
    rerank): one read of those still there; None for the others (read again on their own)."""
    ids = [h.id for h in hits if h.id in documents]
    try:
        fetched = dict(zip(ids, store.fetch_documents(ids))) if ids else {}
    except DocumentNotFoundError:  # deleted since it was read: each hit is read again on its own
        fetched = {}
    return [fetched.get(h.id) for h in hits]
