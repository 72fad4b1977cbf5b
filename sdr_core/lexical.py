"""BM25 ranking (the ``bm25`` method of ``sdr eval``), built on the :mod:`bm25s` library.

The query is a whole document (often thousands of words), scored against every fitted document.

Tokenisation is bm25s's own: lowercasing, the ``(?u)\\b\\w\\w+\\b`` token pattern and the
English stopword list. Stemming is used only when PyStemmer (``import Stemmer``) is installed and
``stem`` is not ``False``; it is not a dependency of sdr-search, so by default there is none.
:attr:`BM25Ranker.stemming` says which was used.

Query term frequency: a term that occurs ``c`` times in the query contributes ``c`` times its
per-document BM25 weight, i.e. the score is what bm25s ``get_scores`` gives for the full token
list (duplicates kept). Keeping the counts is the natural "long query" BM25 (the query document's
term frequencies weigh its topical terms), and it is what bm25s does per occurrence. For speed the
tokens are grouped by count, so a query costs one bm25s lookup per distinct count value instead of
one per token occurrence; the result is the same sum. Query terms that are not in the fitted
vocabulary contribute nothing.

A fitted ranker can be saved to a directory and loaded back (:meth:`BM25Ranker.save`,
:meth:`BM25Ranker.load`: bm25s's own files plus ``sdr-bm25.json`` with the ids and the settings),
which the embedded store uses to keep its lexical index on disk.

bm25s's progress bars are always off. bm25s sets its own logger to ``DEBUG``, which would leak its
"Building index" message through any root handler; while this module calls bm25s that logger is
raised to ``WARNING`` and restored afterwards. bm25s is imported on first :meth:`BM25Ranker.fit`,
so importing this module does nothing visible.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from .scoring import top_of

__all__ = ["BM25Ranker", "stemmer_available", "RANKER_FILE", "TOKEN_PATTERN", "ENGLISH_STOPWORDS",
           "analyze", "query_terms"]

RANKER_FILE = "sdr-bm25.json"
"""The file :meth:`BM25Ranker.save` writes beside bm25s's own: ids and settings."""

logger = logging.getLogger(__name__)


TOKEN_PATTERN = r"(?u)\b\w\w+\b"
"""bm25s's token pattern: runs of two or more word characters (after lowercasing)."""

ENGLISH_STOPWORDS = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their then there "
    "these they this to was will with".split()
)
"""bm25s's English stopwords, which are Lucene's English stop set (OpenSearch ``_english_``)."""

_TOKEN = re.compile(TOKEN_PATTERN)


def analyze(text: str, *, stopwords: frozenset[str] | set[str] = ENGLISH_STOPWORDS) -> list[str]:
    """The tokens bm25s indexes for ``text`` without stemming (lowercase, :data:`TOKEN_PATTERN`,
    stopwords removed), in order; the same analysis as the OpenSearch ``sdr_text`` analyzer
    up to tokeniser details (pure; no bm25s import)."""
    return [t for t in _TOKEN.findall(text.lower()) if t not in stopwords]


def query_terms(text: str, max_terms: int | None = None) -> dict[str, int]:
    """The distinct tokens of ``text`` with their counts; with ``max_terms``, only that many, the
    most frequent first (ties by term), so a long source fits a query's clause limit."""
    counts = Counter(analyze(text))
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    if max_terms is not None:
        if max_terms < 1:
            raise ValueError(f"max_terms must be >= 1, got {max_terms}")
        ranked = ranked[:max_terms]
    return dict(ranked)


def stemmer_available() -> bool:
    """Whether PyStemmer (the optional stemmer bm25s can use) is importable."""
    try:
        import Stemmer  # noqa: F401
    except ImportError:
        return False
    return True


@contextlib.contextmanager
def _quiet_bm25s() -> Iterator[None]:
    """Raise the ``bm25s`` logger to WARNING for the duration (bm25s sets it to DEBUG itself)."""
    bm_logger = logging.getLogger("bm25s")
    old = bm_logger.level
    bm_logger.setLevel(max(old, logging.WARNING))
    try:
        yield
    finally:
        bm_logger.setLevel(old)


class BM25Ranker:
    """Score a query text against a fitted corpus with BM25 (bm25s, Lucene variant).

    Args:
        k1: term-frequency saturation.
        b: document-length normalisation.
        stopwords: a bm25s stopword language (``"en"``), a list of stopwords, or ``None`` for none.
        stem: ``None`` (default) stems only when PyStemmer is installed; ``False`` never stems;
            ``True`` requires PyStemmer (``ValueError`` when it is missing).
    """

    def __init__(
        self,
        *,
        k1: float = 1.5,
        b: float = 0.75,
        stopwords: str | Sequence[str] | None = "en",
        stem: bool | None = None,
    ) -> None:
        if not np.isfinite(k1) or k1 < 0:
            raise ValueError(f"k1 must be a finite number >= 0, got {k1!r}")
        if not np.isfinite(b) or not 0.0 <= b <= 1.0:
            raise ValueError(f"b must be in [0, 1], got {b!r}")
        self.k1 = float(k1)
        self.b = float(b)
        self.stopwords: str | list[str] = [] if stopwords is None else (
            stopwords if isinstance(stopwords, str) else list(stopwords)
        )
        if stem is True and not stemmer_available():
            raise ValueError("stem=True needs PyStemmer (the 'Stemmer' module), which is not installed")
        self.stemming: bool = stemmer_available() if stem is None else bool(stem)
        self._stemmer: Any = None
        self._ids: tuple[str, ...] | None = None
        self._model: Any = None
        self._positions: dict[str, int] | None = None

    @property
    def ids(self) -> tuple[str, ...]:
        """The fitted document ids, in fit order (the order of :meth:`scores`)."""
        if self._ids is None:
            raise ValueError("BM25Ranker is not fitted; call fit() first")
        return self._ids

    def _tokenize(self, texts: list[str]) -> list[list[str]]:
        import bm25s

        if self.stemming and self._stemmer is None:
            import Stemmer

            self._stemmer = Stemmer.Stemmer("english")
        tokens = bm25s.tokenize(
            texts,
            lower=True,
            stopwords=self.stopwords,
            stemmer=self._stemmer if self.stemming else None,
            return_ids=False,
            show_progress=False,
        )
        # bm25s's empty-document placeholder is "", which must never match anything.
        return [[t for t in doc if t] for doc in tokens]

    def tokenize(self, texts: Sequence[str]) -> list[list[str]]:
        """The tokens :meth:`fit` indexes for each of ``texts`` (and :meth:`scores` looks up for a
        query), in order, duplicates kept: the analysis an incremental index must share with this
        ranker to give its scores."""
        with _quiet_bm25s():
            return self._tokenize(list(texts))

    def fit(self, ids: Sequence[str], texts: Sequence[str]) -> BM25Ranker:
        """Index ``texts`` (one per id, same order). Returns ``self``.

        Raises:
            ValueError: no document, lengths differ, a duplicate id, or a text that is not a str.
        """
        ids = tuple(ids)
        texts = list(texts)
        if not ids:
            raise ValueError("cannot fit BM25 on an empty corpus")
        if len(ids) != len(texts):
            raise ValueError(f"{len(ids)} ids but {len(texts)} texts")
        if len(set(ids)) != len(ids):
            dup = next(i for i, c in Counter(ids).items() if c > 1)
            raise ValueError(f"duplicate document id {dup!r}")
        for doc_id, text in zip(ids, texts):
            if not isinstance(text, str):
                raise ValueError(f"document {doc_id!r}: text must be a str, got {type(text).__name__}")

        import bm25s

        with _quiet_bm25s():
            corpus_tokens = self._tokenize(texts)
            model = bm25s.BM25(k1=self.k1, b=self.b, method="lucene", dtype="float32")
            model.index(corpus_tokens, show_progress=False)
        empty = sum(1 for doc in corpus_tokens if not doc)
        if empty:
            logger.warning("BM25: %d of %d documents have no indexable term and will score 0", empty, len(ids))
        self._ids, self._model, self._positions = ids, model, None
        logger.debug("BM25 fitted on %d documents, vocabulary %d", len(ids), len(model.vocab_dict))
        return self

    def scores(self, query_text: str) -> np.ndarray:
        """BM25 score of ``query_text`` against every fitted document, in fit order (float32).

        Raises:
            ValueError: before :meth:`fit`, or when ``query_text`` is not a str.
        """
        if self._model is None or self._ids is None:
            raise ValueError("BM25Ranker is not fitted; call fit() first")
        if not isinstance(query_text, str):
            raise ValueError(f"query text must be a str, got {type(query_text).__name__}")
        model = self._model
        with _quiet_bm25s():
            tokens = self._tokenize([query_text])[0]
        vocab = model.vocab_dict
        counts = Counter(vocab[t] for t in tokens if t in vocab)
        total = np.zeros(len(self._ids), dtype=np.float64)
        # Group term ids by their query count: score = sum_c c * BM25(terms occurring c times).
        by_count: dict[int, list[int]] = defaultdict(list)
        for term_id, c in counts.items():
            by_count[c].append(term_id)
        for c, term_ids in by_count.items():
            total += c * model.get_scores_from_ids(term_ids).astype(np.float64)
        return total.astype(np.float32)

    # -- persistence and top-k ----------------------------------------------------------------
    @property
    def params(self) -> dict[str, Any]:
        """The settings that decide the scores (k1, b, stopwords, stemming, bm25s variant)."""
        return {"k1": self.k1, "b": self.b, "stopwords": self.stopwords, "stemming": self.stemming,
                "method": "lucene"}

    def save(self, directory: str | Path) -> None:
        """Write the fitted index into ``directory`` (created if needed; files are overwritten)."""
        if self._model is None or self._ids is None:
            raise ValueError("BM25Ranker is not fitted; call fit() first")
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        with _quiet_bm25s():
            self._model.save(str(directory), show_progress=False)
        (directory / RANKER_FILE).write_text(
            json.dumps({"params": self.params, "ids": list(self._ids)}), encoding="utf-8"
        )

    @classmethod
    def load(cls, directory: str | Path) -> "BM25Ranker":
        """A ranker saved by :meth:`save`. Raises ``ValueError`` when the directory does not hold
        one (or it needs PyStemmer, which is missing)."""
        import bm25s

        directory = Path(directory)
        try:
            info = json.loads((directory / RANKER_FILE).read_text(encoding="utf-8"))
            params, ids = info["params"], tuple(str(i) for i in info["ids"])
            ranker = cls(k1=float(params["k1"]), b=float(params["b"]), stopwords=params["stopwords"],
                         stem=bool(params["stemming"]))
            with _quiet_bm25s():
                model = bm25s.BM25.load(str(directory), mmap=False, show_progress=False)
        except (OSError, KeyError, TypeError, json.JSONDecodeError) as e:
            raise ValueError(f"{directory} does not hold a saved BM25 index: {e}") from e
        if int(model.scores["num_docs"]) != len(ids):
            raise ValueError(f"{directory}: the BM25 index has {model.scores['num_docs']} documents, the ids {len(ids)}")
        ranker._ids, ranker._model = ids, model
        return ranker

    def top(self, query_text: str, k: int, *, exclude_ids: Sequence[str] = ()) -> tuple[list[str], np.ndarray]:
        """The ``k`` best matching documents for ``query_text`` with their scores, best first (ties
        by id), leaving out ``exclude_ids``. Only documents that share a term with the query
        (score > 0) are hits, as in a search engine."""
        return self.top_of_scores(self.scores(query_text), k, exclude_ids=exclude_ids)

    def top_of_scores(self, scores: np.ndarray, k: int, *, exclude_ids: Sequence[str] = ()) -> tuple[list[str], np.ndarray]:
        """:meth:`top` from scores already computed with :meth:`scores`."""
        return top_of(self.ids, scores, k, exclude_ids=exclude_ids, positive=True)

    def positions(self) -> dict[str, int]:
        """Document id -> its index in :meth:`scores` (built once per fit)."""
        if self._positions is None or len(self._positions) != len(self.ids):
            self._positions = {d: i for i, d in enumerate(self.ids)}
        return self._positions

