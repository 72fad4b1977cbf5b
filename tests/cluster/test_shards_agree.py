"""The same answers on 3 shards as on 1 (issue 43, item 2), on the local three-node cluster.

One corpus, indexed into the embedded store (the reference), a one-shard index and an index of 3 primary
shards with 1 replica (the store's ``shards`` / ``replicas`` settings), both through the sdr plugin on the
cluster. The corpus is built against the shard count: the documents that match the query best are given
to ids that route to one shard (asked of the cluster, ``_search_shards?routing=``), so that this shard
holds most of the global per-sentence top-k and of the top-K, and the other shards' local top-k are filled
with weak matches. The candidate stage (``sdr_candidates``: per source sentence the best ``knn_k``
documents, aggregated per document) then runs with a realistic K (candidates) far below the corpus.

Vectors are designed, not hashed: an "echo" sentence of query sentence ``s`` at strength ``w`` has cosine
``w`` with it exactly (:class:`GradedEncoder`), so every score is distinct and no tie decides a cut.
"""

from __future__ import annotations

import hashlib
import json
import re
import urllib.request
import uuid

import numpy as np
import pytest

from factories import AS_GIVEN, DIM, FakeEncoder
from sdr_search.core.documents import parse_record
from sdr_search.indexer.embedded import EmbeddedStore
from sdr_search.indexer.opensearch import OpenSearchSettings, OpenSearchStore
from sdr_search.indexer.pipeline import index_documents
from sdr_search.indexer.stats_job import refresh_stats
from sdr_search.reranker.engine import MLTSettings, MoreLikeThis, Query

pytestmark = pytest.mark.cluster

TOL = 1e-4
SHARDS = 3
N_DOCS = 90
HEAVY = 24          # good documents on the heavy shard
LIGHT = 4           # good documents elsewhere
QUERY_SENTENCES = 6  # two paragraphs of three
K = 10              # candidates: far below the corpus
KNN_K = 6           # documents per source sentence: below the good documents holding each sentence
SAMPLE = 1000       # the whole corpus is the statistics' sample in every store
VOCAB = [f"{a}{b}" for a in ("ka", "lo", "mi", "nu", "po", "ri", "su", "te", "va", "zo")
         for b in ("bar", "cen", "dol", "fim", "gus", "hap", "jet", "kol")]  # 80 words: BM25 without ties
_WORDS = np.random.default_rng(7)


def _words(n: int, rng: np.random.Generator = _WORDS) -> str:
    return " ".join(rng.choice(VOCAB, size=n))


QUERY_WORDS = [_words(4) for _ in range(QUERY_SENTENCES)]
QUERY_TEXT = "\n\n".join(" ".join(f"Query sentence {s} on {QUERY_WORDS[s]}." for s in p) for p in ((0, 1, 2), (3, 4, 5)))
_ECHO = re.compile(r"^Echo (\d+) at (0\.\d+) in \S+ on [a-z ]+\.$")
_QUERY = re.compile(r"^Query sentence (\d+) on [a-z ]+\.$")


def _unit(seed_text: str) -> np.ndarray:
    v = np.random.default_rng(int.from_bytes(hashlib.sha256(seed_text.encode()).digest()[:8], "little")).standard_normal(DIM)
    return v / np.linalg.norm(v)


QVEC = [_unit(f"query-{s}") for s in range(QUERY_SENTENCES)]


class GradedEncoder(FakeEncoder):
    """:class:`FakeEncoder` (one hashed unit vector per sentence), except two kinds of sentence:
    ``Query sentence s.`` is query vector ``q_s``; ``Echo s at w in ID.`` is ``w q_s + sqrt(1 - w^2) r`` with
    ``r`` a hashed unit vector orthogonal to ``q_s``: its cosine with ``q_s`` is ``w``."""

    def encode(self, sentences, *, progress: bool = False) -> np.ndarray:
        out = super().encode(sentences, progress=progress)
        for i, s in enumerate(sentences):
            if m := _QUERY.match(s):
                out[i] = QVEC[int(m.group(1))]
            elif m := _ECHO.match(s):
                q, w = QVEC[int(m.group(1))], float(m.group(2))
                r = _unit(s)
                r = r - (r @ q) * q
                r /= np.linalg.norm(r)
                out[i] = w * q + np.sqrt(1 - w * w) * r
        return out


def shard_of(url: str, doc_ids: list[str], shards: int) -> dict[str, int]:
    """Each id's shard in an index of ``shards`` primaries (routing by ``_id``: the store's ``_id`` is the doc id),
    asked of the cluster on a throwaway index of that many shards (the routing depends on the count only)."""
    probe = f"sdr-test-routing-{uuid.uuid4().hex[:8]}"

    def call(method: str, path: str, body: dict | None = None) -> dict:
        req = urllib.request.Request(f"{url}/{path}", method=method, data=None if body is None else json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            return json.load(r)

    call("PUT", probe, {"settings": {"number_of_shards": shards, "number_of_replicas": 0}})
    try:
        return {i: call("GET", f"{probe}/_search_shards?routing={i}")["shards"][0][0]["shard"] for i in doc_ids}
    finally:
        call("DELETE", probe)


def build_corpus(shard: dict[str, int], heavy_shard: int = 0) -> tuple[list[dict], list[str]]:
    """``N_DOCS`` records: ``HEAVY`` good documents on ``heavy_shard``, ``LIGHT`` on the others, the rest
    filler. A good document echoes 2 to 4 query sentences at distinct strengths in [0.45, 0.97], among its own
    sentences; fillers hold only their own. Returns the records and the good ids."""
    rng = np.random.default_rng(43)
    ids = sorted(shard)
    heavy = [i for i in ids if shard[i] == heavy_shard][:HEAVY]
    light = [i for i in ids if shard[i] != heavy_shard][:LIGHT]
    assert len(heavy) == HEAVY and len(light) == LIGHT, "not enough ids on the shards"
    good = heavy + light
    strengths = iter(rng.permutation(np.arange(450, 970, 3))[: 4 * len(good)] / 1000)
    topics = ["court", "river", "music", "rocket", "garden", "bridge"]
    records = []
    for k, i in enumerate(ids):
        t = topics[k % len(topics)]
        paragraphs = [[f"The {t} of {i} {_words(int(rng.integers(3, 9)), rng)}." for _ in range(int(rng.integers(1, 4)))]
                      for _ in range(2)]
        if i in good:
            for s in rng.choice(QUERY_SENTENCES, size=int(rng.integers(2, 5)), replace=False):
                echo = f"Echo {s} at {next(strengths):.3f} in {i} on {_words(int(rng.integers(2, 5)), rng)}."
                paragraphs[int(rng.integers(0, 2))].append(echo)
        records.append({"id": i, "title": f"On the {t} ({k})", "topic": t, "group": k % 3,
                        "paragraphs": [" ".join(p) for p in paragraphs]})
    return records, good


def _search(url: str, path: str, body: dict) -> dict:
    req = urllib.request.Request(f"{url}/{path}", method="POST", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.load(r)


@pytest.fixture(scope="module")
def corpus(cluster, tmp_path_factory):
    """``{"embedded", "one", "three", "good", "shard"}``: the corpus in the embedded store, a one-shard index and
    an index of 3 shards and 1 replica on the cluster (sdr plugin on), the good ids and each id's shard."""
    url = cluster.urls[0]
    ids = [f"doc-{k:02d}" for k in range(N_DOCS)]
    shard = shard_of(url, ids, SHARDS)
    records, good = build_corpus(shard)
    docs = [parse_record(r, settings=AS_GIVEN) for r in records]
    name = f"sdr-test-shards-{uuid.uuid4().hex[:8]}"
    made = {"embedded": EmbeddedStore(tmp_path_factory.mktemp("shards") / "s", create=True),
            "one": OpenSearchStore(url, index=f"{name}-1", settings=OpenSearchSettings(plugin="on", shards=1, replicas=1)),
            "three": OpenSearchStore(url, index=f"{name}-3", settings=OpenSearchSettings(plugin="on", shards=SHARDS, replicas=1))}
    encoder = GradedEncoder()
    try:
        for store in made.values():
            index_documents(store, docs, encoder)
            refresh_stats(store, exact=True, sample_size=SAMPLE, seed=0)
        cluster.health("wait_for_status=green&timeout=120s")
        yield {**made, "good": good, "shard": shard, "url": url, "encoder": encoder}
    finally:
        for key in ("one", "three"):
            made[key].drop()
        for store in made.values():
            store.close()


def _run(corpus, store: str, **query):
    settings = MLTSettings(knn_k=KNN_K)
    return MoreLikeThis(store=corpus[store], encoder=corpus["encoder"], settings=settings).run(
        Query(candidates=K, size=10, explain=True, **query))


def _queries(good: list[str]) -> dict[str, dict]:
    return {
        "id": dict(id=good[0]),
        "text": dict(text=QUERY_TEXT),
        "like-unlike": dict(like=[good[1], {"text": QUERY_TEXT}], unlike=[good[-1]]),
        "filter": dict(text=QUERY_TEXT, filter={"group": [0, 1]}),
    }


def test_the_corpus_puts_the_best_on_one_shard(corpus):
    """The corpus is what the other tests need: the 3-shard index holds the good documents on the shard
    ``shard_of`` said (``preference=_shards:N``), and that shard holds most of the one-shard index's top-10."""
    index = corpus["three"].index_name
    on = {}
    for n in range(SHARDS):
        r = _search(corpus["url"], f"{index}/_search?preference=_shards:{n}",
                    {"size": N_DOCS, "_source": False, "docvalue_fields": ["doc_id"], "query": {"match_all": {}}})
        on.update({h["fields"]["doc_id"][0]: n for h in r["hits"]["hits"]})
    assert on == corpus["shard"]
    top = [h.id for h in _run(corpus, "one", method="sdr", **_queries(corpus["good"])["id"]).hits]
    assert len(top) == 10 and sum(corpus["shard"][i] == 0 for i in top) >= 6, [(i, corpus["shard"][i]) for i in top]


def _assert_same(a, b, what: str) -> None:
    assert [h.id for h in a.hits] == [h.id for h in b.hits], what
    assert a.candidates == b.candidates, what
    for ha, hb in zip(a.hits, b.hits):
        assert ha.score == pytest.approx(hb.score, abs=TOL), (what, ha.id)
        for name, sa in (ha.signals or {}).items():
            assert sa.raw == pytest.approx(hb.signals[name].raw, abs=TOL), (what, ha.id, name)
        ea, eb = ha.explanation, hb.explanation
        assert ea.score == pytest.approx(eb.score, abs=TOL), (what, ha.id)
        assert [(p.source_paragraph, p.candidate_paragraph) for p in ea.paragraph_pairs] == \
            [(p.source_paragraph, p.candidate_paragraph) for p in eb.paragraph_pairs], (what, ha.id)
        for pa, pb in zip(ea.paragraph_pairs, eb.paragraph_pairs):
            assert pa.normalised_score == pytest.approx(pb.normalised_score, abs=TOL), (what, ha.id)


@pytest.mark.parametrize("method", ["sdr", "hybrid"])
@pytest.mark.parametrize("query", ["id", "text", "like-unlike", "filter"])
def test_three_shards_answer_as_one(corpus, method, query):
    """Top-10, SDR scores (1e-4), hybrid signals (adaptive fusion, document feedback on) and explanations: the
    3-shard index as the one-shard index, with K = 10 of 90 documents; and each as close to the embedded store's
    top-10 as the other."""
    q = _queries(corpus["good"])[query]
    one, three, emb = (_run(corpus, k, method=method, **q) for k in ("one", "three", "embedded"))
    assert len(one.hits) == 10
    if method == "hybrid":
        assert one.hybrid["fusion"] == "adaptive"
        if query != "like-unlike":  # one source: document feedback applies
            assert one.hybrid["feedback"]["ids"], one.hybrid
        assert dict(one.hybrid, weights_applied=None) == dict(three.hybrid, weights_applied=None)
    _assert_same(three, one, f"{method} {query}: 3 shards vs 1")
    top = {h.id for h in emb.hits}
    assert len(top & {h.id for h in three.hits}) == len(top & {h.id for h in one.hits})
    if method == "sdr":  # exact SDR is the embedded store's too
        assert [h.id for h in one.hits] == [h.id for h in emb.hits]
        for h, e in zip(three.hits, emb.hits):
            assert h.score == pytest.approx(e.score, abs=TOL), h.id


def test_the_candidate_pool_does_not_depend_on_the_shard_count(corpus):
    """The candidate stage's pool (``prerank_factor`` x K documents by aggregation) and its aggregate scores: the
    same on 3 shards as on 1. Before the fix the 3-shard index aggregated each shard's own per-sentence top
    ``knn_k``: documents of the light shards gained rows they are not in the index's top ``knn_k`` of, and
    pushed good documents of the heavy shard out of the pool."""
    from sdr_search.reranker.retrieval import CandidateStage

    pools = {}
    for key in ("one", "three", "embedded"):
        engine = MoreLikeThis(store=corpus[key], encoder=corpus["encoder"], settings=MLTSettings(knn_k=KNN_K))
        source = engine.source(Query(text=QUERY_TEXT))
        pools[key] = CandidateStage(store=corpus[key], settings=engine.settings).aggregated(source, 2 * K, [])
    ids1, s1 = pools["one"]
    ids3, s3 = pools["three"]
    assert ids3 == ids1
    assert np.allclose(s3, s1, atol=1e-5)
    assert set(pools["embedded"][0]) == set(ids1)


def test_bm25_is_the_single_shard_bm25(corpus):
    """``dfs_query_then_fetch``: the 3-shard index's BM25 top and scores are the one-shard index's."""
    a = corpus["one"].lexical_search(QUERY_TEXT, 20, score_ids=corpus["good"])
    b = corpus["three"].lexical_search(QUERY_TEXT, 20, score_ids=corpus["good"])
    assert list(b.ids) == list(a.ids)
    assert np.allclose(b.scores, a.scores, rtol=1e-6)
    assert b.scored == pytest.approx(a.scored, rel=1e-6)


def test_normalisation_statistics_are_corpus_wide(corpus, monkeypatch):
    """The statistics are computed once over the corpus (the reference sample in the state index, one
    document), not per shard: the same sample in every store, and the same mu / sigma sent to every shard."""
    refs = {k: corpus[k].reference() for k in ("embedded", "one", "three")}
    for k in ("one", "three"):
        assert refs[k].doc_ids == refs["embedded"].doc_ids
        assert np.array_equal(refs[k].paragraph_index, refs["embedded"].paragraph_index)
    sent = {}
    for k in ("one", "three"):
        store, real = corpus[k], corpus[k].sdr_scores

        def spy(sources, ids, real=real, k=k, **kw):
            sent.setdefault(k, [(s.mu.copy(), s.sigma.copy()) for _, s in sources])
            return real(sources, ids, **kw)

        monkeypatch.setattr(store, "sdr_scores", spy)
        _run(corpus, k, method="sdr", text=QUERY_TEXT)
    (mu1, sg1), = sent["one"]
    (mu3, sg3), = sent["three"]
    assert np.array_equal(mu1, mu3) and np.array_equal(sg1, sg3)
