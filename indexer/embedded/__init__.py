"""The embedded store: a :class:`~sdr_search.indexer.store.DocumentStore` in one directory (SQLite + vector
file + FAISS), :class:`EmbeddedStore`.

Layout of the directory::

    store.sqlite        SQLite (WAL): meta (JSON values), documents, reference sample
    vectors.<dtype>     append-only row-major matrix of sentence vectors (float32 or float16)
    faiss.index         HNSW (inner product) over every row of the vector file; row = faiss id
    lexical-<fp>/       BM25 (bm25s) index over the documents' texts, for hybrid search
    .lock               fcntl.flock: exclusive for writers, shared while a reader reloads

A ``kill -9`` at any moment leaves a store that opens and resumes. One module per job, each with
the design notes of its part:

* :mod:`.catalog`: the SQLite catalogue (schema, transactions, meta, document, statistics and
  reference rows; the format version and the generation counter).
* :mod:`.records`: documents, statistics and the reference sample to and from catalogue rows.
* :mod:`.rows`: which row of the vector file belongs to which live document (dead rows).
* :mod:`.vectorfile`: the append-only vector file (append + fsync, torn-tail repair, memmap reads).
* :mod:`.ann`: the FAISS HNSW index (a cache of the vector file) and nested k-NN search.
* :mod:`.compaction`: rewriting both files without dead rows, and finishing an interrupted one.
* :mod:`.lexical`: the BM25 index over the texts (a cache, rebuilt when the documents change).
* :mod:`.locking`: the directory lock that serialises writers across processes.
* :mod:`.durable`: fsync of files and directory entries.
* :mod:`.store`: :class:`EmbeddedStore`, which composes them.
"""

from ..provenance import library_versions
from .catalog import FORMAT_VERSION
from .store import EmbeddedStore

__all__ = ["EmbeddedStore", "FORMAT_VERSION", "library_versions"]
