"""A query's sources: each resolved to its sentence vectors and normalisation statistics, several
merged into one for the candidate stage (:func:`merge_sources`).

An indexed document brings its stored vectors and precomputed per-paragraph statistics (else the
reference sample's); a new document is segmented as the store's documents were, counted against
``SDR_MAX_QUERY_SENTENCES`` (every door), encoded with the store's model (all new sources in one
call) and normalised against the store's reference sample, which :class:`SourceResolver` keeps
between queries and reads again only when the statistics version changes.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from functools import cached_property
from typing import Sequence

import numpy as np

from sdr_search.core.documents import MAX_ENDS_PER_SENTENCE, Document
from sdr_search.core.embed import doc_vectors
from sdr_search.core.encoder import SentenceEncoder
from sdr_search.core.errors import (
    DocumentNotFoundError,
    InvalidDocumentError,
    InvalidInputError,
    ModelMismatchError,
    SourceTooLargeError,
    StatsUnavailableError,
)
from sdr_search.core.scoring import NormStats
from sdr_search.core.sentences import possible_sentence_ends
from sdr_search.core.settings import EncoderSettings, SegmentationSettings
from sdr_search.core.stats import SampledParagraphs, stats_against_sample
from sdr_search.core.vectors import DocVectors
from sdr_search.indexer.store import DocumentStore, IndexMeta, QueryState, StoredDocument

from .offsets import aligned_spans, sentence_spans
from .query import Query, SourceItem

__all__ = ["Source", "merge_sources", "SourceResolver", "query_encoder"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Source:
    """A query's source with its normalisation statistics; several sources scored as one
    (:func:`merge_sources`) have their paragraphs, vectors and statistics concatenated and keep
    the sources in :attr:`parts`."""

    document: Document
    vectors: DocVectors
    stats: NormStats
    stats_origin: str  # "stored" | "reference-sample" | "mixed" (merged sources of both origins)
    indexed_id: str | None = None  # set when the source is an indexed document (excluded from results)
    text: str | None = None  # a new-text source: the request's text (Query.request_text), which its offsets index
    parts: tuple["Source", ...] = ()  # merged sources: the sources, in order

    @property
    def members(self) -> tuple["Source", ...]:
        """The sources this one is made of (itself when it is not merged)."""
        return self.parts or (self,)

    @property
    def indexed_ids(self) -> tuple[str, ...]:
        """The indexed documents among the sources (left out of the results)."""
        return tuple(dict.fromkeys(m.indexed_id for m in self.members if m.indexed_id is not None))

    @cached_property
    def part_offsets(self) -> np.ndarray:
        """Source ``p`` owns paragraphs ``part_offsets[p]:part_offsets[p + 1]``."""
        return np.concatenate([[0], np.cumsum([m.vectors.n_paragraphs for m in self.members])]).astype(np.int64)

    def locate(self, i: int) -> tuple[int, int]:
        """Paragraph ``i`` of this (possibly merged) source as ``(source, paragraph in it)``."""
        p = int(np.searchsorted(self.part_offsets, i, side="right")) - 1
        return p, i - int(self.part_offsets[p])

    @property
    def offsets(self) -> str:
        """What the source's character offsets index: ``"stored"`` (its stored text,
        :attr:`Document.text`) or ``"request"`` (the request's text, :meth:`Query.request_text`);
        merged sources of both kinds: ``"mixed"`` (each source's own, as its kind says)."""
        kinds = {"stored" if m.text is None else "request" for m in self.members}
        return kinds.pop() if len(kinds) == 1 else "mixed"

    def spans(self) -> list[list[tuple[int, int] | None]]:
        """Each source sentence's ``(start, end)`` in the text :attr:`offsets` names (None: a
        sentence the request's text does not hold verbatim, up to white space); for merged
        sources, each paragraph's into its own source's text."""
        if self.parts:
            return [row for m in self.parts for row in m.spans()]
        if self.text is None:
            return sentence_spans(self.document)  # type: ignore[return-value]
        return aligned_spans(self.text, self.document)


def merge_sources(sources: Sequence[Source]) -> Source:
    """Several sources scored as one: paragraphs, vectors and statistics concatenated in order
    (one source is returned as it is). Stage 1 searches with all their sentences; the exact score
    splits back per source (:func:`sdr_search.core.scoring.part_scores`)."""
    if len(sources) == 1:
        return sources[0]
    members = tuple(m for s in sources for m in s.members)
    document = Document("", tuple(p for m in members for p in m.document.paragraphs))
    offsets, base = [np.zeros(1, dtype=np.int64)], 0
    for m in members:
        offsets.append(m.vectors.par_offsets[1:] + base)
        base += m.vectors.n_sentences
    vectors = DocVectors(np.concatenate([m.vectors.vectors for m in members]), np.concatenate(offsets))
    stats = NormStats(np.concatenate([m.stats.mu for m in members]), np.concatenate([m.stats.sigma for m in members]))
    origins = {m.stats_origin for m in members}
    return Source(document, vectors, stats, origins.pop() if len(origins) == 1 else "mixed", parts=members)


class SourceResolver:
    """Resolves a query's sources against one store, with the store's encoder; keeps the store's
    reference sample (for new-text sources) between queries."""

    def __init__(self, *, store: DocumentStore, encoder: SentenceEncoder | None, max_query_sentences: int) -> None:
        self.store = store
        self.encoder = encoder
        self.max_query_sentences = max_query_sentences
        self._sample: SampledParagraphs | None = None
        self._sample_doc_ids: tuple[str, ...] = ()
        self._sample_version: int | None = None
        self._sample_lock = threading.Lock()

    def segmentation(self, meta: IndexMeta | None = None) -> SegmentationSettings:
        """How new text is segmented for this store: as its documents were (the recorded
        segmentation; an index that recorded none, or no index yet, takes the settings)."""
        meta = self.store.meta() if meta is None else meta
        if meta is None or not dict(meta.segmentation):
            return SegmentationSettings()
        return SegmentationSettings.from_recorded(meta.segmentation)

    def check_encoder(self, meta: IndexMeta | None = None) -> None:
        meta = self.store.meta() if meta is None else meta
        if meta is not None and self.encoder is not None and meta.encoder_tag != self.encoder.cache_tag:
            raise ModelMismatchError(
                f"the index was built with model {meta.model_id} ({meta.encoder_tag}); the query encoder is "
                f"{self.encoder.model_id} ({self.encoder.cache_tag}). Use the index's model or re-index."
            )

    # -- sources --------------------------------------------------------------------------------
    def source(self, query: Query) -> Source:
        """The (like) source of ``query`` with its normalisation statistics, as the engine
        resolves it, several like sources merged (for exhaustive comparisons in tests and benches)."""
        likes, _ = self.resolve(self.state(query), query)
        return merge_sources(likes)

    def resolve(self, state: QueryState, query: Query) -> tuple[list[Source], list[Source]]:
        """The like and the unlike sources, each with its statistics. New documents are segmented
        first and their sentences counted against ``SDR_MAX_QUERY_SENTENCES`` together (before
        encoding: the cap bounds the encoder's work), then encoded in one call."""
        likes, unlikes = query.likes(), query.unlikes()
        several = query.like is not None or bool(unlikes)
        items: list[tuple[str, SourceItem | None]] = []
        if likes is None:  # a pre-encoded document
            items.append(("source", None))
        else:
            items += [(f"like[{k}]" if several else "source", x) for k, x in enumerate(likes)]
        items += [(f"unlike[{k}]", x) for k, x in enumerate(unlikes)]
        segmentation = self.segmentation(state.meta) if any(x is not None and x.id is None for _, x in items) else None
        self._check_split_work([x for _, x in items if x is not None and x.id is None], several)
        new: dict[int, Document] = {}
        for n, (where, x) in enumerate(items):
            if x is not None and x.id is None:
                try:
                    new[n] = x.new_document(segmentation)
                except InvalidDocumentError as e:  # name the source among several
                    if not several or e.source is not None:
                        raise
                    raise type(e)(e.doc_id, e.reason, source=where) from None
        pre_encoded = query.document.n_sentences if likes is None else 0
        self._check_size(sum(d.n_sentences for d in new.values()) + pre_encoded, several)
        encoded: dict[int, DocVectors] = {}
        if new:
            if self.encoder is None:
                raise InvalidInputError("this engine has no encoder; only indexed documents can be sources")
            self.check_encoder(state.meta)
            matrix = self.encoder.encode([s for d in new.values() for s in d.sentences])
            at = 0
            for n, d in new.items():
                encoded[n] = doc_vectors(d, matrix[at : at + d.n_sentences])
                at += d.n_sentences
        out: list[Source] = []
        for n, (where, x) in enumerate(items):
            try:
                if x is None:
                    vectors = query.vectors
                    out.append(Source(query.document, vectors, self._sampled_stats(vectors, None, state),
                                      "reference-sample"))
                elif x.id is not None:
                    out.append(self.source_from_id(x.id, state))
                else:
                    vectors = encoded[n]
                    out.append(Source(new[n], vectors, self._sampled_stats(vectors, None, state), "reference-sample",
                                      None, x.request_text()))
            except DocumentNotFoundError as e:
                if not several:
                    raise
                raise DocumentNotFoundError(e.doc_id, where) from None
        n_like = 1 if likes is None else len(likes)
        return out[:n_like], out[n_like:]

    def _check_split_work(self, new: Sequence[SourceItem], several: bool) -> None:
        """Refuse new sources whose possible sentence ends are more than
        :data:`~sdr_search.core.documents.MAX_ENDS_PER_SENTENCE` x ``SDR_MAX_QUERY_SENTENCES``, before
        any is split (the splitter's work grows with them; counting stops at the bound)."""
        bound = MAX_ENDS_PER_SENTENCE * self.max_query_sentences
        texts = (x.request_text() or "" for x in new)  # what the splitter would read (titles are not split)
        if new and possible_sentence_ends(texts, stop=bound) > bound:
            what = "the new sources have" if several else "the source has"
            raise SourceTooLargeError(
                f"{what} more than {bound} possible sentence ends, over {MAX_ENDS_PER_SENTENCE} x the limit of "
                f"{self.max_query_sentences} sentences (SDR_MAX_QUERY_SENTENCES): refused before splitting")

    def _check_size(self, n_sentences: int, several: bool = False) -> None:
        if n_sentences > self.max_query_sentences:
            what = "the new sources have" if several else "the source has"
            raise SourceTooLargeError(
                f"{what} {n_sentences} sentences, over the limit of "
                f"{self.max_query_sentences} (SDR_MAX_QUERY_SENTENCES)"
            )

    def source_from_id(self, doc_id: str, state: QueryState | None = None, stored: StoredDocument | None = None) -> Source:
        """An indexed document as the source: its stored statistics, else the reference sample's. The
        document ``stored`` when given (read already: document feedback reads its documents together), else
        as read with the query's state when it was (:meth:`state` with the query), else read now."""
        if stored is None and state is not None:
            stored = state.documents.get(doc_id)
        if stored is None:
            stored = self.store.get(doc_id)
        if stored.stats is not None and len(stored.stats.mu) == stored.vectors.n_paragraphs:
            return Source(stored.document, stored.vectors, stored.stats, "stored", doc_id)
        stats = self._sampled_stats(stored.vectors, doc_id, state)
        return Source(stored.document, stored.vectors, stats, "reference-sample", doc_id)

    def state(self, query: Query | None = None) -> QueryState:
        """The store's state for one query, and ``query``'s indexed sources read with it (one request on
        OpenSearch: :meth:`DocumentStore.query_state` with their ids). A reference sample newer than this
        engine's copy is adopted at once, whether or not this query needs it, so the next query's read
        skips the sample (a query by id with stored statistics never needs it, and read and decoded it on
        every request, a large share of a by-id request: docs/results/service.md)."""
        ids = () if query is None else query_source_ids(query)
        state = self.store.query_state(reference_version=self._sample_version, ids=ids)
        if state.reference is not None:
            self._reference(state)
        return state

    def _reference(self, state: QueryState | None) -> tuple[SampledParagraphs, tuple[str, ...]]:
        if state is None:
            state = self.state()
        with self._sample_lock:
            ref = state.reference
            # current for the version asked with, or adopted since (by _state) for this state's version
            if self._sample is not None and (state.reference_current or state.stats.version == self._sample_version):
                return self._sample, self._sample_doc_ids
            if ref is None:
                if state.reference_current:  # our copy was current when asked, then replaced: read it again
                    return self._reference(self.store.query_state())
                raise StatsUnavailableError(
                    "this index has no reference sample for normalisation statistics; run `sdr stats`"
                )
            owners = {d: k for k, d in enumerate(dict.fromkeys(ref.doc_ids))}
            doc_index = np.array([owners[d] for d in ref.doc_ids], dtype=np.int64)
            self._sample = SampledParagraphs(ref.vectors, doc_index)
            self._sample_doc_ids = ref.doc_ids
            self._sample_version = state.stats.version
            return self._sample, self._sample_doc_ids

    def _sampled_stats(self, vectors: DocVectors, own_id: str | None, state: QueryState | None) -> NormStats:
        sample, owners = self._reference(state)
        exclude = None
        if own_id is not None and own_id in owners:
            exclude = int(sample.doc_index[owners.index(own_id)])
        # a one-document store: the source's own paragraphs are the whole sample; no statistics
        # exist, so its scores stay unnormalised (mu 0, sigma 1) rather than failing
        return stats_against_sample(vectors, sample, exclude_doc=exclude, if_empty="identity" if own_id else "raise")


def query_source_ids(query: Query) -> tuple[str, ...]:
    """The ids of ``query``'s indexed sources (like and unlike), each once."""
    items = [*(query.likes() or ()), *query.unlikes()]
    return tuple(dict.fromkeys(x.id for x in items if x.id is not None))


def query_encoder(meta: IndexMeta | None, settings: EncoderSettings | None = None) -> SentenceEncoder:
    """The encoder for queries on a store: ``settings.model`` (``--model`` / ``SDR_MODEL``) when
    given, else the model the store was built with, else the default model. Nothing loads until it
    first encodes."""
    settings = settings or EncoderSettings()
    if settings.model is None and meta is not None and meta.model_dir is not None:
        settings = settings.model_copy(update={"model": meta.model_dir})
    return SentenceEncoder(settings=settings)
