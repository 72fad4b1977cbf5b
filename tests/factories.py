"""Factories and assertions shared by the tests: random unit vectors, small parsed documents with
vectors, corpora, reference samples, and a deterministic fake encoder. Pure functions of their
arguments (the random ones of the generator they are given), so a test that switches to them
draws exactly the vectors it drew before.

Import them by module name (``from factories import make_docs``): the tests folder is on the
import path, as for ``conftest``.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from sdr_search.core.documents import Document, parse_record
from sdr_search.core.settings import SegmentationSettings
from sdr_search.core.vectors import CorpusVectors, DocVectors
from sdr_search.indexer.store import IndexMeta, ReferenceParagraphs

__all__ = [
    "AS_GIVEN", "DIM", "META", "WORDS", "unit", "doc_vectors", "make_paragraphs", "make_corpus", "make_doc",
    "make_docs", "with_vectors", "planted_query", "assert_same_vectors", "assert_corpus_holds", "brute_force_best",
    "reference_sample", "assert_reference_equal", "FakeEncoder",
]

AS_GIVEN = SegmentationSettings.from_recorded({})  # paragraphs and sentences as written
DIM = 16
META = IndexMeta("model-a", "tag-a", DIM, {"paragraph_unit": "paragraph"}, {"numpy": np.__version__})
WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda sigma".split()


# -- vectors ------------------------------------------------------------------------------------------
def unit(rng: np.random.Generator, n: int, dim: int = DIM) -> np.ndarray:
    """``n`` random unit vectors (float32 rows)."""
    x = rng.standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def make_paragraphs(rng: np.random.Generator, sizes: list[int], dim: int = DIM) -> list[np.ndarray]:
    """One block of random unit vectors per paragraph size."""
    return [unit(rng, s, dim) for s in sizes]


def doc_vectors(rng: np.random.Generator, sizes: list[int], dim: int = DIM) -> DocVectors:
    """A document's vectors: paragraphs of ``sizes`` sentences, random unit vectors."""
    return DocVectors.from_paragraphs(make_paragraphs(rng, sizes, dim))


def make_corpus(docs: list[list[np.ndarray]], ids: list[str] | None = None) -> CorpusVectors:
    """A corpus of documents given as paragraph blocks; ids ``d00``, ``d01``, ... unless given."""
    ids = ids if ids is not None else [f"d{k:02d}" for k in range(len(docs))]
    return CorpusVectors.from_docs(ids, [DocVectors.from_paragraphs(d) for d in docs])


# -- documents ----------------------------------------------------------------------------------------
def make_doc(doc_id: str, rng: np.random.Generator, n_pars: int = 2, n_sents: int = 3) -> tuple[Document, DocVectors]:
    """A tiny parsed document (``n_pars`` paragraphs of ``n_sents`` sentences, metadata
    ``{"lang": "en"}``) with random unit vectors, one per sentence."""
    paragraphs = [
        " ".join(f"Sentence {s} of {doc_id[:20]} says {WORDS[(p + s) % len(WORDS)]}." for s in range(n_sents))
        for p in range(n_pars)
    ]
    doc = parse_record({"id": doc_id, "title": f"Title {doc_id[:20]}", "paragraphs": paragraphs, "lang": "en"},
                       settings=AS_GIVEN)
    sizes = [len(p) for p in doc.paragraphs]
    if sizes != [n_sents] * n_pars:
        raise ValueError(f"unexpected segmentation {sizes}")
    return doc, DocVectors(unit(rng, sum(sizes)), np.concatenate([[0], np.cumsum(sizes)]))


def make_docs(n: int, seed: int = 0, prefix: str = "d", **kw) -> list[tuple[Document, DocVectors]]:
    """``n`` documents ``<prefix>000``, ``<prefix>001``, ... (:func:`make_doc`) from one generator."""
    rng = np.random.default_rng(seed)
    return [make_doc(f"{prefix}{i:03d}", rng, **kw) for i in range(n)]


def with_vectors(item: tuple[Document, DocVectors], vectors: np.ndarray) -> tuple[Document, DocVectors]:
    """The same document with other sentence vectors (same paragraph grouping)."""
    return item[0], DocVectors(vectors, item[1].par_offsets)


def assert_same_vectors(got: DocVectors, expected: DocVectors) -> None:
    assert got.vectors.dtype == np.float32
    np.testing.assert_array_equal(got.vectors, expected.vectors)
    np.testing.assert_array_equal(got.par_offsets, expected.par_offsets)


def assert_corpus_holds(corpus: CorpusVectors, expected: dict[str, DocVectors]) -> None:
    """``corpus`` holds exactly the documents of ``expected`` (in any order), with their vectors."""
    assert sorted(corpus.ids) == sorted(expected)
    for k, doc_id in enumerate(corpus.ids):
        assert_same_vectors(corpus.doc(k), expected[doc_id])


def brute_force_best(queries: np.ndarray, items) -> tuple[list[str], np.ndarray]:
    """Each document's best sentence cosine for each query, shape (Q, D)."""
    return [d.id for d, _ in items], np.stack([(queries @ v.vectors.T).max(axis=1) for _, v in items], axis=1)


def planted_query(rng: np.random.Generator) -> tuple[np.ndarray, list[tuple[Document, DocVectors]]]:
    """A query vector ``q`` and two documents planted around it: ``target`` (2 x 3 sentences: one
    is ``q`` itself, two lie close to it) and ``other`` (1 x 2 sentences, one close to ``q``)."""
    q = unit(rng, 1)[0]
    near = q + 0.05 * unit(rng, 3)
    near /= np.linalg.norm(near, axis=1, keepdims=True)
    target = make_doc("target", rng, n_pars=2, n_sents=3)
    vec = target[1].vectors.copy()
    vec[1], vec[3], vec[4] = q, near[0], near[1]  # one exact match and two close ones
    other = make_doc("other", rng, n_pars=1, n_sents=2)
    ovec = other[1].vectors.copy()
    ovec[0] = near[2]
    return q, [with_vectors(target, vec), with_vectors(other, ovec)]


# -- reference sample ---------------------------------------------------------------------------------
def reference_sample(corpus: CorpusVectors, picks: list[int], seed: int) -> ReferenceParagraphs:
    """The reference sample of the corpus paragraphs ``picks`` (each its own "document")."""
    sampled = CorpusVectors(
        tuple(str(p) for p in picks),
        np.concatenate([corpus.vectors[corpus.par_offsets[p] : corpus.par_offsets[p + 1]] for p in picks]),
        np.concatenate([[0], np.cumsum([corpus.par_offsets[p + 1] - corpus.par_offsets[p] for p in picks])]),
        np.arange(len(picks) + 1),
    )
    owners = corpus.paragraph_doc()[picks]
    return ReferenceParagraphs(
        tuple(corpus.ids[o] for o in owners), np.asarray(picks) - corpus.doc_par_offsets[owners], sampled, seed, len(picks)
    )


def assert_reference_equal(got: ReferenceParagraphs, ref: ReferenceParagraphs) -> None:
    assert got.doc_ids == ref.doc_ids
    np.testing.assert_array_equal(got.paragraph_index, ref.paragraph_index)
    assert (got.seed, got.size) == (ref.seed, ref.size)
    assert got.vectors.ids == ref.vectors.ids
    np.testing.assert_array_equal(got.vectors.vectors, ref.vectors.vectors)
    np.testing.assert_array_equal(got.vectors.par_offsets, ref.vectors.par_offsets)
    np.testing.assert_array_equal(got.vectors.doc_par_offsets, ref.vectors.doc_par_offsets)


# -- encoder --------------------------------------------------------------------------------------------
class FakeEncoder:
    """Stands in for SentenceEncoder: one hashed unit vector per sentence (the same sentence, the
    same vector); fails with ``RuntimeError("boom")`` on a batch holding 'POISON'. ``calls``: the
    batch sizes it was asked to encode."""

    model_id = "fake-model"
    cache_tag = "fake|tok128|fp32|mean-l2"
    dim = DIM
    model_dir = Path("/nonexistent")
    settings = SimpleNamespace(model=None)

    def __init__(self) -> None:
        self.calls: list[int] = []

    def encode(self, sentences, *, progress: bool = False) -> np.ndarray:
        self.calls.append(len(sentences))
        if any("POISON" in s for s in sentences):
            raise RuntimeError("boom")
        out = np.empty((len(sentences), DIM), dtype=np.float32)
        for i, s in enumerate(sentences):
            seed = int.from_bytes(hashlib.sha256(s.encode()).digest()[:8], "little")
            v = np.random.default_rng(seed).standard_normal(DIM)
            out[i] = v / np.linalg.norm(v)
        return out
