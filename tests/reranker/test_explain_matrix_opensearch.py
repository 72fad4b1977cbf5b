"""``explain_matrix`` on OpenSearch (issue 45): the whole paragraph-pair matrix through both paths of a
real node, the same as the embedded store's:

* the sdr plugin (the store scores exactly and explains its best pairs on the node; the engine fetches the
  presented hits' vectors through the store, the plugin's ``sdr_vectors`` read, and computes the matrix in
  Python: the node's own explain does not return the matrix yet), and
* the Python path (plugin off: vectors fetched for the rerank, the matrix from them).

One small corpus (the deterministic fake encoder, exact statistics), ``candidates`` covering it: the same
hits in every store, and for each hit the same rows, columns, sentence offsets and best sentence pairs, N_ij
within 1e-4 (the node computes in float32), each row's maximum the explanation's paragraph pair.
"""

from __future__ import annotations

import os
import uuid

import numpy as np
import pytest
from opensearchpy import OpenSearch

from factories import AS_GIVEN, FakeEncoder
from sdr_search.core.documents import parse_record
from sdr_search.indexer.embedded import EmbeddedStore
from sdr_search.indexer.opensearch import OpenSearchSettings, OpenSearchStore
from sdr_search.indexer.pipeline import index_documents
from sdr_search.indexer.stats_job import refresh_stats
from sdr_search.reranker.engine import MLTSettings, MoreLikeThis, Query

pytestmark = pytest.mark.integration

TOL = 1e-4
N_DOCS = 12
TOPICS = ["court", "river", "music", "rocket", "garden", "bridge"]
TEXT = "The river story begins near the old bridge. It is about the river and the music.\n\nA court paragraph follows."


def _record(k: int) -> dict:
    t, u = TOPICS[k % len(TOPICS)], TOPICS[(k * 5 + 1) % len(TOPICS)]
    paragraphs = [f"The {t} story {k} begins. It is about the {t} and the {u}.",
                  f"A {u} paragraph of document {k}. The {t} again, {k}.",
                  f"Closing words on the {t}. Number {k} ends here. The {u} stays. Then {k} more.",
                  f"One more {u} line for {k}."]
    return {"id": f"doc-{k}", "title": f"On the {t} ({k})", "paragraphs": paragraphs[: 1 + k % 4]}


@pytest.fixture(scope="module")
def stores(opensearch_url, tmp_path_factory):
    client = OpenSearch([opensearch_url], timeout=60)
    try:
        has = any(p["component"] == "sdr" for p in client.cat.plugins(params={"h": "component", "format": "json"}))
    finally:
        client.close()
    if not has:
        if os.environ.get("SDR_NODE_PLUGIN", "1") == "0":
            pytest.skip("SDR_NODE_PLUGIN=0: this run uses a node without the sdr plugin")
        pytest.fail(f"the node at {opensearch_url} has no sdr plugin; scripts/opensearch-node.sh installs it", pytrace=False)
    docs = [parse_record(_record(k), settings=AS_GIVEN) for k in range(N_DOCS)]
    name = f"sdr-test-matrix-{uuid.uuid4().hex[:8]}"
    made = {
        "embedded": EmbeddedStore(tmp_path_factory.mktemp("matrix-os") / "s", create=True),
        "plugin": OpenSearchStore(opensearch_url, index=f"{name}-plugin", settings=OpenSearchSettings(plugin="on")),
        "python": OpenSearchStore(opensearch_url, index=f"{name}-python", settings=OpenSearchSettings(plugin="off")),
    }
    try:
        for store in made.values():
            index_documents(store, docs, FakeEncoder())
            refresh_stats(store, exact=True, sample_size=1000, seed=0)
        assert made["plugin"].capabilities.exact_sdr and not made["python"].capabilities.exact_sdr
        yield made
    finally:
        for key in ("plugin", "python"):
            made[key].drop()
        for store in made.values():
            store.close()


QUERIES = {
    "id-sdr": dict(id="doc-3", method="sdr"),
    "text-hybrid": dict(text=TEXT, method="hybrid"),
    "like-unlike": dict(like=["doc-2", {"text": TEXT}], unlike=["doc-7"], method="sdr"),
}


def _run(store, **query):
    engine = MoreLikeThis(store=store, encoder=FakeEncoder(), settings=MLTSettings())
    return engine.run(Query(candidates=N_DOCS, size=5, explain=True, explain_matrix=True, **query))


@pytest.mark.parametrize("query", list(QUERIES), ids=list(QUERIES))
def test_the_matrix_is_the_same_through_every_path(stores, query):
    results = {k: _run(s, **QUERIES[query]) for k, s in stores.items()}
    emb = results["embedded"]
    assert len(emb.hits) == 5
    # the plugin path ranked without fetching vectors (the node scored them); the Python path fetched them
    assert "fetch" not in results["plugin"].timings_ms and "fetch" in results["python"].timings_ms
    for key in ("plugin", "python"):
        got = results[key]
        assert [h.id for h in got.hits] == [h.id for h in emb.hits], key
        for h, e in zip(got.hits, emb.hits):
            m, me = h.explanation.matrix, e.explanation.matrix
            assert m is not None, (key, h.id)
            assert [r.model_dump(exclude={"mu", "sigma"}) for r in m.rows] == [
                r.model_dump(exclude={"mu", "sigma"}) for r in me.rows], (key, h.id)
            assert m.columns == me.columns, (key, h.id)
            np.testing.assert_allclose(m.normalised, me.normalised, atol=TOL, err_msg=f"{key} {h.id}")
            assert [[c[:2] for c in row] for row in m.sentence_pairs] == [[c[:2] for c in row] for row in me.sentence_pairs]
            np.testing.assert_allclose([[c[2] for c in row] for row in m.sentence_pairs],
                                       [[c[2] for c in row] for row in me.sentence_pairs], atol=TOL)
            # each row's maximum is the explanation's paragraph pair, as this path computed it (the node's, plugin)
            N = np.asarray(m.normalised)
            for pair in h.explanation.paragraph_pairs:
                row = next(i for i, r in enumerate(m.rows) if (r.source, r.paragraph) == (pair.source, pair.source_paragraph))
                assert N[row].max() == pytest.approx(pair.normalised_score, abs=TOL), (key, h.id)
                assert int(N[row].argmax()) == pair.candidate_paragraph, (key, h.id)
