"""What a query reads of the store's state stays as fresh as the writes of another process (issue 44,
item 4): the plugin path reads less per query than it did (one request for the state, the source's
vectors and statistics without a sentence count search, the centroid rows with the candidates), and
none of it may be kept from an earlier query where a write since would change the answer.

Two processes on one index of a real node with the sdr plugin: this one holds a long-lived engine
(warm: it has answered before, so whatever it could keep, it has), another process (a subprocess with
a store of its own) writes, and once that write is acknowledged (the subprocess has exited) this
engine's next query sees it: changed search defaults (the method the query runs), the statistics
marked stale by a new document (``stats_stale``), and a document rewritten (queried by its id: its new
vectors and its statistics, which the rewrite deleted, so the reference sample's stand in).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import uuid

import numpy as np
import pytest

from sdr_search.indexer.opensearch import OpenSearchStore
from sdr_search.indexer.stats_job import refresh_stats
from sdr_search.reranker.engine import MLTSettings, MoreLikeThis, Query
from test_opensearch_plugin_store import DIM, META, item, plugin_url  # noqa: F401  (plugin_url: the fixture)

pytestmark = pytest.mark.integration

# the writer: a store of its own in another process; the write is acknowledged when the process exits 0
WRITER = textwrap.dedent("""
    import json, sys
    import numpy as np
    from sdr_search.core.documents import Document
    from sdr_search.core.vectors import DocVectors
    from sdr_search.indexer.opensearch import OpenSearchStore

    url, index, action = sys.argv[1:4]
    store = OpenSearchStore(url, index=index)
    try:
        if action == "defaults":
            store.set_search_defaults(json.loads(sys.stdin.read()))
        else:  # put: one document, its paragraphs and vectors
            d = json.loads(sys.stdin.read())
            doc = Document(d["id"], tuple(tuple(p) for p in d["paragraphs"]), d["title"], d["metadata"])
            store.put([(doc, DocVectors(np.asarray(d["vectors"], dtype=np.float32), np.asarray(d["offsets"])))])
    finally:
        store.close()
""")


def write_elsewhere(url: str, index: str, action: str, payload: object) -> None:
    r = subprocess.run([sys.executable, "-c", WRITER, url, index, action], input=json.dumps(payload), text=True,
                       capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr


def as_payload(doc, vectors, doc_id: str | None = None) -> dict:
    return {"id": doc_id or doc.id, "paragraphs": [list(p) for p in doc.paragraphs], "title": doc.title,
            "metadata": dict(doc.metadata), "vectors": vectors.vectors.tolist(), "offsets": vectors.par_offsets.tolist()}


@pytest.fixture()
def engine(plugin_url):  # noqa: F811
    """A store of 24 documents on the plugin node with statistics and a reference sample, and an engine
    on it (method sdr by its settings, K = 4 of a pool of 8: the in-store pre-rank runs)."""
    rng = np.random.default_rng(44)
    items = [item(f"d{k:02d}", rng, [int(n) for n in rng.integers(2, 6, size=rng.integers(2, 5))], k % 2)
             for k in range(24)]
    store = OpenSearchStore(plugin_url, index=f"sdr-test-state-procs-{uuid.uuid4().hex[:10]}")
    try:
        store.ensure_meta(META)
        store.put(items)
        refresh_stats(store, exact=False, sample_size=60, seed=0, progress=False)
        assert store.has_plugin() and store.capabilities.sdr_candidates
        yield MoreLikeThis(store=store, settings=MLTSettings(candidates=4, method="sdr")), items
    finally:
        store.drop()
        store.close()


def test_a_query_sees_what_another_process_wrote_before_it(engine, plugin_url):  # noqa: F811
    mlt, items = engine
    store = mlt.store
    by_id = {d.id: (d, v) for d, v in items}
    source = "d00"
    first = mlt.run(Query(id=source, size=5))
    assert first.method == "sdr" and not first.stats_stale and first.stats_origin == "stored"
    assert mlt.run(Query(id=source, size=5)).hits == first.hits  # warm: the same answer twice
    assert DIM == by_id[source][1].dim

    # search defaults changed by the other process: the next query runs the recorded method
    write_elsewhere(plugin_url, store.index, "defaults", {"method": "hybrid"})
    assert mlt.run(Query(id=source, size=5)).method == "hybrid"
    write_elsewhere(plugin_url, store.index, "defaults", {})
    assert mlt.run(Query(id=source, size=5)).method == "sdr"

    # a new document (a copy of one the source does not rank) marks the statistics stale: the next query says so
    shown = {h.id for h in first.hits}
    other = next(d for d in sorted(by_id) if d not in shown and d != source)
    write_elsewhere(plugin_url, store.index, "put", as_payload(*by_id[other], "new-1"))
    after = mlt.run(Query(id=source, size=5))
    assert after.stats_stale

    # the source rewritten with the content of the document it ranked last: queried by its id, its new
    # vectors find that document first (the same vectors: the best SDR score), its new text is the one its
    # snippets quote, and its statistics, deleted with the old content, are the reference sample's
    last = first.hits[-1].id
    assert first.hits[0].id != last
    write_elsewhere(plugin_url, store.index, "put", as_payload(*by_id[last], source))
    rewritten = mlt.run(Query(id=source, size=5))
    assert rewritten.hits[0].id == last
    assert first.hits[0].snippet.source_sentence.endswith(f" of {source}.")
    assert rewritten.hits[0].snippet.source_sentence.endswith(f" of {last}.")
    assert rewritten.stats_origin == "reference-sample"


def test_a_query_on_the_plugin_path_takes_four_requests(engine):
    """The round trips of one query by id on an index of one shard (issue 44; nine before): the state
    document with the source's statistics (one real-time ``_mget``), the statistics counts with the
    source's fields and vectors (one ``_msearch``), the candidate stage with the pool's centroid rows (one
    search), the K's exact scores with the presented hits' breakdowns and documents (one ``_msearch``; until
    session 52 the documents were a search of their own). By new text (pre-encoded) the same four, the
    ``_msearch`` without the source (seven before)."""
    mlt, items = engine
    client = mlt.store._os()
    sent: list[str] = []
    real = {name: getattr(client, name) for name in ("get", "mget", "search", "msearch", "count")}

    def counted(name):
        return lambda *a, **kw: (sent.append(name), real[name](*a, **kw))[1]

    mlt.run(Query(id="d00", size=3))  # warm: the reference sample and the node's limits read once per engine
    for name in real:
        setattr(client, name, counted(name))
    try:
        mlt.run(Query(id="d00", size=3))
        assert sent == ["mget", "msearch", "search", "msearch"]
        sent.clear()
        doc, vectors = items[3]
        mlt.run(Query(document=doc, vectors=vectors, size=3))
        assert sent == ["mget", "msearch", "search", "msearch"]
        sent.clear()  # K over the corpus (no pre-rank): the presented hits still explained with the scores
        mlt.run(Query(id="d00", size=3, candidates=50))
        assert sent == ["mget", "msearch", "search", "msearch"]
    finally:
        for name, fn in real.items():
            setattr(client, name, fn)
