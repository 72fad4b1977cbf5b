"""Who computes the candidates' exact SDR: the object the candidate stage returns with them, which
the ranking and the presentation ask for what they need (each source's SDR scores, the hybrid
features, the best sentence pairs of the presented hits, their vectors for ``explain_matrix``).

- :class:`LocalScoring`: the candidates' vectors were fetched once, and everything is computed from
  them here (the embedded store; OpenSearch without the sdr plugin);
- :class:`StoreScoring`: the store computes exact SDR next to its data (``capabilities.exact_sdr``,
  the sdr plugin), nothing is fetched; it carries the exact scores and breakdowns the candidate
  stage's own request returned (the in-store pre-rank of the pool), which are reused.

The candidate stage (:meth:`sdr_search.reranker.retrieval.CandidateStage.find`) is the one place
that chooses; another way to score (a coordinator over several shards) is one more class with the
operations of :class:`Scoring`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol, Sequence

import numpy as np

from sdr_search.core.documents import Document
from sdr_search.core.errors import DocumentNotFoundError
from sdr_search.core.scoring import document_best, paragraph_scores, part_scores, sdr_scores
from sdr_search.core.vectors import CorpusVectors, DocVectors
from sdr_search.indexer.store import CandidateFeatures, DocumentStore

from .pairs import Pairs, best_pairs, paragraph_sizes, stored_pairs
from .sources import Source

__all__ = ["Scoring", "LocalScoring", "StoreScoring"]

Blocks = list[np.ndarray | None]
"""Each presented hit's paragraph scores ``P`` where computed here (None elsewhere): the
``explain_matrix`` shows the same numbers as the explanation."""


class Scoring(Protocol):
    """What the ranking and the presentation ask of whoever scores the candidates exactly."""

    @property
    def fetched(self) -> Mapping[str, DocVectors]:
        """The candidates' vectors this query read (by id; empty when nothing was fetched): a second
        search of the same query (document feedback) does not read them again."""
        ...

    @property
    def presented(self) -> Mapping[str, Document]:
        """Documents (without vectors) that the scoring's own request brought, by id: the best hits, those
        to present, where the store read them with their breakdowns; the presentation reads only the others."""
        ...

    def sdr_rows(self, every: Source, ids: Sequence[str]) -> np.ndarray:
        """Each source's exact SDR score of each of ``ids``, ``(sources, candidates)``."""
        ...

    def features(self, ids: Sequence[str]) -> CandidateFeatures:
        """The hybrid features of ``ids``: paragraph counts and mean vectors."""
        ...

    def pairs(self, source: Source, ids: Sequence[str], documents: Mapping[str, Document],
              top: tuple[int, int]) -> tuple[list[Pairs | None], Blocks]:
        """Each presented hit's :data:`Pairs` (the ``top`` paragraph pairs and sentence pairs of
        each), None where they do not fit the document as read (``documents``: replaced since, or
        deleted), and the paragraph scores they came from where computed here."""
        ...

    def hit_vectors(self, ids: Sequence[str], documents: Mapping[str, Document]) -> list[DocVectors | None]:
        """The presented hits' vectors (the ``explain_matrix``), None for those no longer there."""
        ...

    def joined(self, other: Scoring) -> Scoring:
        """The scoring of these candidates and those of ``other`` (document feedback's second
        search, of another source: no score of either is reused)."""
        ...


@dataclass(frozen=True)
class LocalScoring:
    """Exact SDR computed here from the candidates' fetched vectors (``vectors``, by id)."""

    vectors: Mapping[str, DocVectors]

    @property
    def fetched(self) -> Mapping[str, DocVectors]:
        return self.vectors

    @property
    def presented(self) -> Mapping[str, Document]:
        return {}

    def sdr_rows(self, every: Source, ids: Sequence[str]) -> np.ndarray:
        """One product for every source's paragraphs."""
        best = document_best(every.vectors, [self.vectors[i] for i in ids])
        if len(every.members) == 1:
            return sdr_scores(best, every.stats)[None, :]
        return part_scores(best, every.stats, every.part_offsets)

    def features(self, ids: Sequence[str]) -> CandidateFeatures:
        return CandidateFeatures.of([self.vectors[i] for i in ids])

    def pairs(self, source: Source, ids: Sequence[str], documents: Mapping[str, Document],
              top: tuple[int, int]) -> tuple[list[Pairs | None], Blocks]:
        """From the fetched vectors: one paragraph-score product for every hit, split per hit (each
        hit's ``P`` is a column block); None where the document read has other paragraphs than the
        vectors (replaced since)."""
        vectors = [self.vectors[i] for i in ids]
        P_all = paragraph_scores(source.vectors, CorpusVectors.from_docs(list(ids), vectors))
        ends = np.cumsum([v.n_paragraphs for v in vectors]).tolist()
        out: list[Pairs | None] = []
        blocks: Blocks = []
        for i, vecs, end in zip(ids, vectors, ends):
            doc = documents.get(i)
            fresh = doc is None or paragraph_sizes(doc) == tuple(np.diff(vecs.par_offsets).tolist())
            P = P_all[:, end - vecs.n_paragraphs : end]
            out.append(best_pairs(source, vecs, *top, P) if fresh else None)
            blocks.append(P if fresh else None)
        return out, blocks

    def hit_vectors(self, ids: Sequence[str], documents: Mapping[str, Document]) -> list[DocVectors | None]:
        return [self.vectors[i] for i in ids]

    def joined(self, other: Scoring) -> Scoring:
        return LocalScoring({**other.fetched, **self.vectors})


@dataclass(frozen=True)
class StoreScoring:
    """Exact SDR computed by the store next to its data (the sdr plugin on OpenSearch); no vector
    travels. ``exact`` and ``explained``: the scores of ``source`` and the breakdowns of its best
    hits (those to present) that the candidate stage's request returned already (``DocumentStore.sdr_scores``
    with ``explain_top``), by id; they are reused for that source (the very object) only. ``presented``:
    those hits' documents, read by the same request (``documents``)."""

    store: DocumentStore
    source: Source | None = None
    exact: Mapping[str, float] = field(default_factory=dict)
    explained: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    presented: Mapping[str, Document] = field(default_factory=dict)

    @property
    def fetched(self) -> Mapping[str, DocVectors]:
        return {}

    def sdr_rows(self, every: Source, ids: Sequence[str]) -> np.ndarray:
        """One request for the sources, but the source whose scores of the pool the candidate stage
        has already asks only for the candidates outside the pool (lexical ones)."""
        parts, known = every.members, self.exact
        reused = [k for k, m in enumerate(parts) if known and m is self.source]
        if not reused:
            return self.store.sdr_scores([(m.vectors, m.stats) for m in parts], ids).scores
        rows = np.empty((len(parts), len(ids)))
        asked = [k for k in range(len(parts)) if k not in reused]
        if asked:
            rows[asked] = self.store.sdr_scores([(parts[k].vectors, parts[k].stats) for k in asked], ids).scores
        missing = [i for i in ids if i not in known]
        m = parts[reused[0]]
        more = dict(zip(missing, self.store.sdr_scores([(m.vectors, m.stats)], missing).scores[0])) if missing else {}
        rows[reused] = [known[i] if i in known else more[i] for i in ids]
        return rows

    def features(self, ids: Sequence[str]) -> CandidateFeatures:
        return self.store.candidate_features(ids)

    def pairs(self, source: Source, ids: Sequence[str], documents: Mapping[str, Document],
              top: tuple[int, int]) -> tuple[list[Pairs | None], Blocks]:
        """From the store's breakdowns: those returned with the scores, the other hits still there
        in one request; None where the breakdown does not match the document read (replaced since,
        or deleted between the two reads)."""
        explained = self.explained if source is self.source else {}
        breakdowns = {i: explained[i] for i in ids if i in explained}
        asked = [i for i in ids if i in documents and i not in breakdowns]
        if asked:
            try:
                breakdowns.update(zip(asked, self.store.sdr_scores([(source.vectors, source.stats)], asked,
                                                                   explain=True).explanations))
            except DocumentNotFoundError:  # deleted since it was read: each of them read again on its own
                pass
        out: list[Pairs | None] = []
        for i in ids:
            breakdown, doc = breakdowns.get(i), documents.get(i)
            same = (breakdown is not None and doc is not None and breakdown.get("paragraphs") == len(doc.paragraphs)
                    and breakdown.get("sentences") == sum(map(len, doc.paragraphs))
                    and len(breakdown.get("source_paragraphs") or ()) == source.vectors.n_paragraphs)
            out.append(stored_pairs(source, breakdown, *top) if same else None)
        return out, [None] * len(out)

    def hit_vectors(self, ids: Sequence[str], documents: Mapping[str, Document]) -> list[DocVectors | None]:
        """Fetched now (nothing was for the rerank; on OpenSearch with the plugin, its ``sdr_vectors``
        read): one read of those still there; None for the others (read again on their own)."""
        there = [i for i in ids if i in documents]
        try:
            fetched = dict(zip(there, self.store.fetch_documents(there))) if there else {}
        except DocumentNotFoundError:  # deleted since it was read: each hit is read again on its own
            fetched = {}
        return [fetched.get(i) for i in ids]

    def joined(self, other: Scoring) -> Scoring:
        return StoreScoring(self.store)
