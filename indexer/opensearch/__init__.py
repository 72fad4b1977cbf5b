"""The OpenSearch backend of sdr-search: :class:`OpenSearchStore` implements
:class:`sdr_search.indexer.store.DocumentStore` on an OpenSearch 2.19+/3.x cluster with the k-NN plugin.

Request bodies are built by pure functions in :mod:`sdr_search.indexer.opensearch.requests`; the index
mappings are JSON files in ``mappings/``. Importing this package imports no client and connects
to nothing.
"""

from .settings import OpenSearchSettings
from .store import OpenSearchStore

__all__ = ["OpenSearchStore", "OpenSearchSettings"]
