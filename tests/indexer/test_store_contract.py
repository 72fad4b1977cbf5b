"""The store contract (:class:`store_contract.StoreContract`) run against every backend.

``TestEmbeddedStore``: a new embedded store in the test's temporary directory. ``TestOpenSearchStore``:
a real node (the ``opensearch_url`` fixture: ``OPENSEARCH_URL``, or the local node of
``scripts/opensearch-node.sh``); each test gets its own uniquely named indices, deleted afterwards
(other ``SDR_OPENSEARCH_*`` settings such as credentials apply), plus what only OpenSearch promises.
"""

from __future__ import annotations

import uuid

import numpy as np
import pytest

from factories import META, make_docs, reference_sample
from sdr_search.core.vectors import CorpusVectors
from store_contract import StoreContract, stats_for

pytestmark = pytest.mark.integration


class TestEmbeddedStore(StoreContract):
    @pytest.fixture()
    def make_store(self, tmp_path):
        from sdr_search.indexer.embedded import EmbeddedStore

        handles = []

        def make(name: str = "main"):
            store = EmbeddedStore(tmp_path / name, create=True)
            handles.append(store)
            return store

        yield make
        for store in handles:
            store.close()


class _CountingClient:
    """An opensearch-py client that counts the top-level requests made through it (``close`` included)."""

    def __init__(self, client) -> None:
        self._client = client
        self.calls: dict[str, int] = {}

    def __getattr__(self, name):
        attr = getattr(self._client, name)
        if not callable(attr):
            return attr

        def counted(*args, **kwargs):
            self.calls[name] = self.calls.get(name, 0) + 1
            return attr(*args, **kwargs)

        return counted


class TestOpenSearchStore(StoreContract):
    @pytest.fixture()
    def make_store(self, opensearch_url):
        """As the contract's, and ``make(name, client=...)`` talks through ``client`` (closed afterwards)."""
        from sdr_search.indexer.opensearch import OpenSearchSettings, OpenSearchStore

        settings = OpenSearchSettings(replicas=0)
        prefix = f"sdr-contract-{uuid.uuid4().hex[:12]}"
        handles = []

        def make(name: str = "main", *, client=None):
            store = OpenSearchStore(opensearch_url, index=f"{prefix}-{name}", settings=settings, client=client)
            handles.append(store)
            return store

        yield make
        dropped = set()
        for store in handles:
            if store.index not in dropped:
                dropped.add(store.index)
                store.drop()
            store.close()
        for store in handles:
            if store._transport.client is not None and not store._transport.owns_client:
                store._transport.client.close()

    def test_query_state_reads_the_state_document_once(self, make_store, opensearch_url):
        from opensearchpy import OpenSearch

        client = _CountingClient(OpenSearch([opensearch_url], timeout=60))
        store = make_store(client=client)
        store.ensure_meta(META)
        items = make_docs(4, seed=16)
        store.put(items)
        corpus = CorpusVectors.from_docs([d.id for d, _ in items], [v for _, v in items])
        store.set_reference(reference_sample(corpus, [1, 4], seed=3))
        store.write_stats(stats_for(store, [d.id for d, _ in items]), mode="sampled", sample_size=2, seed=3)
        client.calls.clear()
        state = store.query_state()
        assert client.calls == {"mget": 2, "msearch": 1}  # state document, stats counts (one request), sample
        assert state.reference is not None and state.stats.version == 1
        client.calls.clear()
        assert store.query_state(reference_version=1).reference_current
        assert client.calls == {"mget": 1, "msearch": 1}  # a current sample is not read again
        client.calls.clear()  # issue 44: a query's indexed sources are read in the state's _mget
        with_docs = store.query_state(reference_version=1, ids=[items[0][0].id, "absent"])
        assert client.calls["mget"] == 1 and "get" not in client.calls  # (and the vector fetch, where the plugin has them)
        assert list(with_docs.documents) == [items[0][0].id]
        got, want = with_docs.documents[items[0][0].id], store.get(items[0][0].id)
        assert got.document == want.document
        np.testing.assert_array_equal(got.vectors.vectors, want.vectors.vectors)
        np.testing.assert_array_equal(got.stats.mu, want.stats.mu)
