"""The OpenSearch backend end to end on a real node: the ``sdr`` commands (`index`, `mlt`, `stats`,
`info`, `eval`) and a real `sdr serve` over HTTP, on a small corpus of real Wikipedia articles
trimmed to a few paragraphs (read from /work/shared/data at test time, never committed).

One corpus is indexed once per module into one OpenSearch index (deleted afterwards) and, for the
parity tests, into an embedded store from the same file: the same documents must give the same
exact SDR scores in both backends. `sdr index` runs as a real subprocess (the console entry
point); the other commands run through :func:`sdr_search.cli.main` in this process (the same handler
and output, without paying a Python and torch start-up per call); `sdr serve` is a subprocess
answering real HTTP.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import itertools
import json
import os
import socket
import subprocess
import sys
import uuid
import warnings
from pathlib import Path

import httpx
import pytest
from conftest import running_server

from sdr_search.cli import main

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
WIKI = REPO.parent / "shared" / "data" / "wiki" / "articles-00.jsonl.gz"
N_DOCS = 16
N_QUERIES = 4
INDEXED_PARAGRAPHS = 4  # per article; queries are later paragraphs of the same article (never indexed)
SEGMENTATION = ["--min-paragraph-sentences", "3"]  # several SDR paragraphs per document
TOL = 1e-4


def _articles() -> list[dict]:
    with gzip.open(WIKI, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in itertools.islice(f, N_DOCS)]


def _write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


class Corpus:
    """The files of the module's corpus, its documents and its queries."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.cache = root / "cache"
        self.docs: list[dict] = []
        self.held_out: dict[str, list[str]] = {}  # later paragraphs of each article, never indexed
        queries: list[dict] = []
        for k, article in enumerate(_articles()):
            paragraphs = [p for s in article["sections"] for p in s["paragraphs"] if p.strip()]
            self.docs.append({
                "id": article["id"], "title": article["title"],
                "metadata": {"group": "even" if k % 2 == 0 else "odd", "position": k},
                "paragraphs": paragraphs[:INDEXED_PARAGRAPHS],
            })
            self.held_out[article["id"]] = paragraphs[INDEXED_PARAGRAPHS + 2 : INDEXED_PARAGRAPHS + 5]
            if k < N_QUERIES:
                assert self.held_out[article["id"]], f"{article['id']} is too short for a held-out query"
                queries.append({"id": f"q_{article['id']}", "paragraphs": self.held_out[article["id"]]})
        self.path = _write_jsonl(root / "corpus.jsonl", self.docs)
        self.queries = _write_jsonl(root / "queries.jsonl", queries)
        self.qrels = root / "qrels.txt"
        self.qrels.write_text("".join(f"{q['id']} 0 {q['id'][2:]} 1\n" for q in queries), encoding="utf-8")
        self.ids = [d["id"] for d in self.docs]
        self.by_id = {d["id"]: d for d in self.docs}

    def encoder_args(self) -> list[str]:
        return ["--precision", "fp32", "--device", "cpu", "--cache-dir", str(self.cache)]


def sdr(*argv: str, expect: int = 0) -> str:
    """Run ``sdr ARGV`` in this process; check its exit status and return its stdout."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main(["--log-level", "WARNING", *argv])
    assert rc == expect, f"sdr {' '.join(argv)} exited {rc}, expected {expect}:\n{out.getvalue()}"
    return out.getvalue()


def sdr_json(*argv: str) -> dict:
    return json.loads(sdr(*argv))


def _sdr_subprocess(*argv: str, timeout: float = 300) -> str:
    r = subprocess.run([sys.executable, "-m", "sdr_search", "--log-level", "WARNING", *argv], cwd=REPO,
                       capture_output=True, text=True, timeout=timeout, env={**os.environ})
    assert r.returncode == 0, f"sdr {' '.join(argv)} exited {r.returncode}:\n{r.stderr[-3000:]}"
    return r.stdout


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Corpus:
    return Corpus(tmp_path_factory.mktemp("os-e2e"))


@pytest.fixture(scope="module")
def indexed(opensearch_url, corpus):
    """``(url, index)``: the corpus indexed into a fresh OpenSearch index by a real ``sdr index``
    subprocess; the index and its state index are deleted afterwards."""
    from opensearchpy import OpenSearch

    name = f"sdr-e2e-{uuid.uuid4().hex[:10]}"
    try:
        out = json.loads(_sdr_subprocess(
            "index", "--opensearch", opensearch_url, "--index", name, str(corpus.path), "--no-progress",
            *SEGMENTATION, *corpus.encoder_args(),
        ))
        assert out["indexed"] == N_DOCS and out["failed"] == 0 and out["skipped"] == 0, out
        assert out["store"]["documents"] == N_DOCS
        assert out["store"]["paragraphs"] > N_DOCS  # several SDR paragraphs per document
        assert out["stats"]["stale"] is False and out["stats"]["docs_without_stats"] == 0
        yield opensearch_url, name
    finally:
        client = OpenSearch([opensearch_url], timeout=60)
        try:
            client.indices.delete(index=f"{name}*", params={"expand_wildcards": "all", "ignore_unavailable": "true"})
        except OSError as e:  # pragma: no cover - cleanup must not hide the test's own result
            warnings.warn(f"could not delete test indices {name}*: {e}", stacklevel=2)
        finally:
            client.close()


@pytest.fixture(scope="module")
def embedded(corpus, indexed):
    """The same file indexed into an embedded store with the same segmentation and encoder."""
    path = corpus.root / "store"
    out = sdr_json("index", "--store", str(path), str(corpus.path), "--no-progress", *SEGMENTATION, *corpus.encoder_args())
    assert out["indexed"] == N_DOCS and out["failed"] == 0
    return path


def os_args(indexed) -> list[str]:
    url, name = indexed
    return ["--opensearch", url, "--index", name]


def _hits(result: dict) -> list[tuple[str, float]]:
    return [(h["id"], h["score"]) for h in result["hits"]]


def _assert_same_ranking(a: list[tuple[str, float]], b: list[tuple[str, float]], what: str) -> None:
    """Same ids with scores within TOL; ids whose scores are within TOL may swap places."""
    assert len(a) == len(b), what
    sa, sb = dict(a), dict(b)
    assert set(sa) == set(sb), f"{what}: {sorted(set(sa) ^ set(sb))}"
    for doc_id in sa:
        assert sa[doc_id] == pytest.approx(sb[doc_id], abs=TOL), f"{what}: {doc_id}"
    for (ia, _), (ib, _) in zip(a, b):
        assert ia == ib or abs(sa[ia] - sa[ib]) <= TOL, f"{what}: {ia} vs {ib}"


# =============================================================================================
# sdr index / info / stats
# =============================================================================================
def test_index_records_provenance_and_reindexing_the_same_file_changes_nothing(indexed, corpus):
    info = sdr_json("info", *os_args(indexed), "--json")
    assert info["documents"] == N_DOCS and info["paragraphs"] > N_DOCS
    meta = info["meta"]
    assert meta["model_id"] == "sentence-transformers/all-MiniLM-L6-v2" and meta["dim"] == 384
    assert meta["segmentation"]["min_paragraph_sentences"] == 3  # the flags, recorded in the index
    assert "|fp32|" in meta["encoder_tag"]
    assert info["stats"]["mode"] == "sampled" and info["stats"]["stale"] is False

    again = sdr_json("index", *os_args(indexed), str(corpus.path), "--no-progress", *SEGMENTATION, *corpus.encoder_args())
    assert again["indexed"] == 0 and again["unchanged"] == N_DOCS  # stable _id from the document id: no duplicates
    assert again["store"]["documents"] == N_DOCS and "stats" not in again  # nothing changed: stats not recomputed

    # a segmentation flag that differs from the recorded one is refused (exit 2), not silently dropped
    sdr("index", *os_args(indexed), str(corpus.path), "--no-progress", "--min-paragraph-sentences", "5",
        *corpus.encoder_args(), expect=2)
    assert sdr_json("info", *os_args(indexed), "--json")["documents"] == N_DOCS


def test_stats_exact_then_queries_use_the_stored_statistics(indexed):
    before = sdr_json("info", *os_args(indexed), "--json")["stats"]
    out = sdr_json("stats", *os_args(indexed), "--no-progress")
    assert out["mode"] == "exact" and out["stale"] is False and out["docs_without_stats"] == 0
    assert out["version"] == before["version"] + 1
    after = sdr_json("info", *os_args(indexed), "--json")["stats"]
    assert after["mode"] == "exact" and after["version"] == out["version"]
    res = sdr_json("mlt", *os_args(indexed), "--id", "wiki_12", "--method", "sdr", "--json")
    assert res["stats"] == {"origin": "stored", "stale": False}


# =============================================================================================
# sdr mlt
# =============================================================================================
def _has_plugin(indexed) -> bool:
    """Whether the store uses the node's sdr plugin (listed, at the version this checkout speaks)."""
    from opensearchpy import OpenSearch

    from sdr_search.indexer.opensearch.plugin_version import PLUGIN_VERSION

    client = OpenSearch([indexed[0]])
    try:
        return any(p["component"] == "sdr" and p["version"] == PLUGIN_VERSION for p in client.cat.plugins(format="json"))
    finally:
        client.close()


def test_mlt_by_id_sdr_and_hybrid(indexed, corpus):
    res = sdr_json("mlt", *os_args(indexed), "--id", "wiki_308", "--method", "sdr", "--size", "5", "--json")
    assert res["method"] == "sdr" and "hybrid" not in res
    ids = [h["id"] for h in res["hits"]]
    assert len(ids) == 5 and "wiki_308" not in ids and set(ids) <= set(corpus.ids)  # the source is left out
    scores = [h["score"] for h in res["hits"]]
    assert scores == sorted(scores, reverse=True)
    assert res["candidates"] >= 5 and res["stats"]["origin"] == "stored"
    assert {"candidates", "rerank"} <= set(res["timings_ms"])
    # with the sdr plugin on the node the candidates are scored there and no vector is fetched
    assert ("fetch" in res["timings_ms"]) != _has_plugin(indexed)

    res = sdr_json("mlt", *os_args(indexed), "--id", "wiki_308", "--method", "hybrid", "--size", "5", "--json")
    assert res["method"] == "hybrid"
    assert res["hybrid"]["fusion"] == "adaptive" and res["hybrid"]["weights"] == {"bm25": 1.0, "sdr": 1.0, "mean": 1.0}
    assert len(res["hits"]) == 5 and "wiki_308" not in {h["id"] for h in res["hits"]}
    assert "lexical" in res["timings_ms"]

    res = sdr_json("mlt", *os_args(indexed), "--id", "wiki_308", "--fusion", "rrf", "--weights", "bm25=1,sdr=2",
                   "--rank-constant", "10", "--size", "3", "--json")
    assert res["method"] == "hybrid"
    assert res["hybrid"].pop("weights_applied") == pytest.approx({"bm25": 1 / 3, "sdr": 2 / 3, "mean": 0.0})
    assert res["hybrid"] == {"fusion": "rrf", "rank_constant": 10, "weights": {"bm25": 1.0, "sdr": 2.0, "mean": 0.0}}

    sdr("mlt", *os_args(indexed), "--id", "no-such-document", "--method", "sdr", expect=2)


def test_mlt_by_text_finds_the_article_the_text_comes_from(indexed, corpus):
    # the held-out paragraphs of "Aristotle" (never indexed) as one new document
    text = "\n\n".join(corpus.held_out["wiki_308"])
    for method in ("sdr", "hybrid"):
        res = sdr_json("mlt", *os_args(indexed), "--text", text, "--method", method, "--size", "3", "--json",
                       *corpus.encoder_args())
        assert res["method"] == method
        assert res["hits"][0]["id"] == "wiki_308", (method, res["hits"])
        assert res["stats"]["origin"] == "reference-sample"  # a new text: normalised against the reference sample

    record = corpus.root / "aristotle.json"
    record.write_text(json.dumps({"title": "Q", "paragraphs": corpus.held_out["wiki_308"]}), encoding="utf-8")
    res = sdr_json("mlt", *os_args(indexed), "--file", str(record), "--method", "sdr", "--size", "1", "--json",
                   *corpus.encoder_args())
    assert res["hits"][0]["id"] == "wiki_308"


def test_mlt_document_feedback_on_a_short_text(indexed, corpus):
    # a pasted paragraph: the first sentences of the held-out "Aristotle" text; adaptive fusion ranks
    # it again with its top 3 hits (stored documents read back from the node) as further sources
    text = " ".join(" ".join(corpus.held_out["wiki_308"]).split(". ")[:4])
    args = [*os_args(indexed), "--text", text, "--method", "hybrid", "--size", "3", "--json", *corpus.encoder_args()]
    plain = sdr_json("mlt", *args, "--no-feedback")
    res = sdr_json("mlt", *args)
    assert "feedback" not in plain["hybrid"] and plain["hybrid"]["adaptive"]["feedback_docs"] == 0
    fb = res["hybrid"]["feedback"]
    assert fb["ids"] == [h["id"] for h in plain["hits"]]  # the top 3 of the ranking without feedback
    assert 0.2 <= fb["share"] <= 1 and set(fb["ids"]) <= set(corpus.ids)
    assert {"feedback_sources", "feedback_candidates"} <= set(res["timings_ms"])
    assert ("feedback_fetch" in res["timings_ms"]) != _has_plugin(indexed)  # the plugin scores on the node
    assert res["hits"][0]["id"] == "wiki_308" and len(res["hits"]) == 3


def test_mlt_explain_levels_match_the_stored_documents(indexed, corpus):
    from sdr_search.indexer.opensearch import OpenSearchStore

    url, name = indexed
    res = sdr_json("mlt", *os_args(indexed), "--id", "wiki_12", "--method", "sdr", "--size", "3", "--explain", "--json")
    with OpenSearchStore(url, index=name) as store:
        source = store.get("wiki_12").document
        for hit in res["hits"]:
            ex = hit["explanation"]
            assert hit["title"] == corpus.by_id[hit["id"]]["title"]
            assert ex["score"] == pytest.approx(hit["score"], abs=TOL)  # level 1: the document score
            cand = store.get(hit["id"]).document
            assert ex["paragraph_pairs"]
            for pair in ex["paragraph_pairs"]:  # level 2: paragraph pairs; level 3: their sentence pairs
                assert pair["normalised_score"] <= ex["paragraph_pairs"][0]["normalised_score"] + 1e-9
                for sp in pair["sentence_pairs"]:
                    assert sp["source_sentence"] in source.paragraphs[pair["source_paragraph"]]
                    assert sp["candidate_sentence"] in cand.paragraphs[pair["candidate_paragraph"]]
                    assert -1.0 <= sp["cosine"] <= 1.0 + 1e-6

    res = sdr_json("mlt", *os_args(indexed), "--id", "wiki_12", "--method", "hybrid", "--size", "2", "--explain", "--json")
    for hit in res["hits"]:
        hybrid = hit["explanation"]["hybrid"]
        assert hybrid["score"] == pytest.approx(hit["score"], abs=TOL) and hybrid["fusion"] == "adaptive"
        assert set(hybrid["signals"]) == {"bm25", "sdr", "mean"}
        assert hybrid["signals"]["sdr"]["raw"] == pytest.approx(hit["explanation"]["score"], abs=TOL)

    text = sdr("mlt", *os_args(indexed), "--id", "wiki_12", "--method", "hybrid", "--size", "2", "--explain")
    lines = text.splitlines()
    assert lines[0].split() == ["rank", "score", "id"]
    assert any(line.strip().startswith("bm25 ") for line in lines)  # each signal's raw and normalised score
    assert any(line.strip().startswith("paragraph ") for line in lines)
    assert "fused (adaptive" in lines[-1]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_backend_errors_are_one_line_exit_2(opensearch_url):
    """No node at the URL, or no such index: one line on stderr and exit status 2, no traceback
    (also not the client library's own request-failure log with its traceback). Retries are off
    here: by default an unreachable node is retried for ~31 s first, one warning line per retry."""
    cases = [
        (["mlt", "--opensearch", f"http://127.0.0.1:{_free_port()}", "--index", "sdr-e2e-x", "--id", "a"], "cannot be reached"),
        (["serve", "--opensearch", opensearch_url, "--index", f"sdr-e2e-missing-{uuid.uuid4().hex[:8]}",
          "--port", str(_free_port())], "does not exist"),
    ]
    for argv, message in cases:
        env = {**os.environ, "SDR_OPENSEARCH_MAX_RETRIES": "0"}
        r = subprocess.run([sys.executable, "-m", "sdr_search", *argv], cwd=REPO, capture_output=True, text=True,
                           timeout=120, env=env)
        assert r.returncode == 2, (argv, r.stderr)
        assert message in r.stderr and "Traceback" not in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert r.stdout == ""


# =============================================================================================
# sdr eval through OpenSearch
# =============================================================================================
def _eval(corpus: Corpus, store_args: list[str], method: str, run: Path) -> dict:
    return sdr_json("eval", *store_args, "--queries", str(corpus.queries), "--qrels", str(corpus.qrels),
                    "--method", method, "--run", str(run), "--no-progress", *corpus.encoder_args())


def _read_run(path: Path) -> dict[str, list[tuple[str, float]]]:
    runs: dict[str, list[tuple[str, float]]] = {}
    for line in path.read_text().splitlines():
        qid, _, doc_id, _, score, _ = line.split()
        runs.setdefault(qid, []).append((doc_id, float(score)))
    return runs


@pytest.mark.parametrize("method", ["sdr", "hybrid"])
def test_eval_through_opensearch(indexed, corpus, method):
    run = corpus.root / f"run-{method}.trec"
    out = _eval(corpus, os_args(indexed), method, run)
    assert out["engine"] == "two-stage" and out["method"] == method
    assert out["queries"] == N_QUERIES and out["corpus_documents"] == N_DOCS and out["skipped"] == {"queries": 0}
    assert out["HR@10"] == 1.0 and out["MRR"] >= 0.75, out  # a held-out passage finds its own article
    runs = _read_run(run)
    assert sorted(runs) == sorted(f"q_{i}" for i in corpus.ids[:N_QUERIES])
    assert all(len(r) == N_DOCS for r in runs.values())  # the whole tiny corpus is ranked
    tag = run.read_text().split("\n", 1)[0].split()[-1]
    assert tag == f"{method}-two-stage"


# =============================================================================================
# the same documents in both backends give the same exact SDR scores
# =============================================================================================
def test_same_sdr_scores_in_opensearch_and_the_embedded_store(indexed, embedded, corpus):
    emb = ["--store", str(embedded)]
    for args in (os_args(indexed), emb):  # the same statistics mode in both
        assert sdr_json("stats", *args, "--no-progress")["mode"] == "exact"
    k = ["--method", "sdr", "--size", str(N_DOCS), "--candidates", str(N_DOCS), "--json"]
    for doc_id in ("wiki_12", "wiki_308", corpus.ids[-1]):  # K covers the whole corpus: same candidates
        a = sdr_json("mlt", *os_args(indexed), "--id", doc_id, *k)
        b = sdr_json("mlt", *emb, "--id", doc_id, *k)
        assert a["candidates"] == b["candidates"] == N_DOCS - 1
        assert a["stats"] == b["stats"] == {"origin": "stored", "stale": False}
        _assert_same_ranking(_hits(a), _hits(b), f"--id {doc_id}")

    text = "\n\n".join(corpus.held_out["wiki_12"])  # a new text: normalised against the reference sample
    a = sdr_json("mlt", *os_args(indexed), "--text", text, *k, *corpus.encoder_args())
    b = sdr_json("mlt", *emb, "--text", text, *k, *corpus.encoder_args())
    assert a["stats"]["origin"] == b["stats"]["origin"] == "reference-sample"
    _assert_same_ranking(_hits(a), _hits(b), "--text")

    # hybrid: the vector signals (exact SDR, mean cosine) agree; BM25 is each backend's own
    h = ["--method", "hybrid", "--size", "5", "--explain", "--json"]
    a = sdr_json("mlt", *os_args(indexed), "--id", "wiki_308", *h)
    b = sdr_json("mlt", *emb, "--id", "wiki_308", *h)
    sig_a = {x["id"]: x["explanation"]["hybrid"]["signals"] for x in a["hits"]}
    sig_b = {x["id"]: x["explanation"]["hybrid"]["signals"] for x in b["hits"]}
    common = set(sig_a) & set(sig_b)
    assert common
    for doc_id in common:
        for signal in ("sdr", "mean"):
            assert sig_a[doc_id][signal]["raw"] == pytest.approx(sig_b[doc_id][signal]["raw"], abs=TOL), (doc_id, signal)

    # eval: the same run (ids and scores) from both backends
    ra, rb = corpus.root / "parity-os.trec", corpus.root / "parity-emb.trec"
    ma, mb = _eval(corpus, os_args(indexed), "sdr", ra), _eval(corpus, emb, "sdr", rb)
    for key in ("MRR", "MAP", "nDCG@10", "HR@10"):
        assert ma[key] == pytest.approx(mb[key], abs=1e-9), key
    runs_a, runs_b = _read_run(ra), _read_run(rb)
    assert sorted(runs_a) == sorted(runs_b)
    for qid in runs_a:
        _assert_same_ranking(runs_a[qid], runs_b[qid], f"eval {qid}")


# =============================================================================================
# sdr serve --opensearch over HTTP
# =============================================================================================
@pytest.fixture(scope="module")
def server(indexed, corpus):
    """A real `sdr serve --opensearch URL --index NAME` on a free loopback port; yields the base URL."""
    url, name = indexed
    port = _free_port()
    log_path = corpus.root / "server.log"
    env = {k: v for k, v in os.environ.items() if k != "SDR_SERVICE_API_KEY"}
    with running_server(["serve", "--opensearch", url, "--index", name, *corpus.encoder_args()], port, log_path,
                        env) as base:
        yield base


@pytest.fixture(scope="module")
def client(server):
    with httpx.Client(base_url=server, timeout=60) as c:
        yield c


def _mlt_path(indexed) -> str:
    return f"/v1/indices/{indexed[1]}/more_like_this"


def test_serve_health_and_documents(client, indexed, corpus):
    name = indexed[1]
    r = client.get("/health")
    assert r.status_code == 200
    health = r.json()["indices"][name]
    assert (health["status"], health["documents"], health["cluster"]["index_status"]) == ("ok", N_DOCS, "green")
    assert health["cluster"]["status"] in ("green", "yellow") and health["cluster"]["nodes"] >= 1
    assert r.json()["encoder"]["status"] == "ok"

    r = client.get(f"/v1/indices/{name}/documents/wiki_308")
    assert r.status_code == 200, r.text
    doc = r.json()
    assert doc["id"] == "wiki_308" and doc["title"] == "Aristotle"
    assert doc["metadata"] == {"group": "odd", "position": 7}
    assert len(doc["paragraphs"]) >= 2 and "vectors" not in doc

    r = client.get(f"/v1/indices/{name}/documents/nope")
    assert r.status_code == 404 and r.json()["error"]["type"] == "DocumentNotFoundError"
    r = client.post(_mlt_path(indexed), json={"id": "nope"})
    assert r.status_code == 404 and r.json()["error"]["type"] == "DocumentNotFoundError"
    r = client.post("/v1/indices/other-index/more_like_this", json={"id": "wiki_12"})
    assert r.status_code == 404 and r.json()["error"]["type"] == "IndexNotFoundError"
    r = client.post(_mlt_path(indexed), json={"id": "wiki_12", "size": 0})
    assert r.status_code == 422 and r.json()["error"]["type"] == "RequestValidationError"
    metrics = client.get("/metrics").text
    assert 'sdr_errors_total{status="404",type="DocumentNotFoundError"}' in metrics


def test_serve_mlt_by_id_and_text_match_the_cli(client, indexed, corpus):
    for method in ("sdr", "hybrid"):
        r = client.post(_mlt_path(indexed), json={"id": "wiki_308", "size": 5, "method": method})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["index"] == indexed[1] and body["method"] == method
        cli = sdr_json("mlt", *os_args(indexed), "--id", "wiki_308", "--method", method, "--size", "5", "--json")
        _assert_same_ranking(_hits(body), _hits(cli), f"serve vs cli ({method})")

    paragraphs = corpus.held_out["wiki_308"]
    r = client.post(_mlt_path(indexed), json={"text": "\n\n".join(paragraphs), "size": 3, "method": "sdr"})
    assert r.status_code == 200, r.text
    assert r.json()["hits"][0]["id"] == "wiki_308" and r.json()["stats"]["origin"] == "reference-sample"
    r = client.post(_mlt_path(indexed), json={"paragraphs": paragraphs, "size": 3, "explain": True})
    assert r.status_code == 200, r.text
    hit = r.json()["hits"][0]
    assert hit["id"] == "wiki_308" and hit["title"] == "Aristotle"
    assert set(hit["explanation"]["hybrid"]["signals"]) == {"bm25", "sdr", "mean"}


@pytest.mark.parametrize("method", ["sdr", "hybrid"])
def test_serve_metadata_filter(client, indexed, corpus, method):
    odd = {d["id"] for d in corpus.docs if d["metadata"]["group"] == "odd"}
    r = client.post(_mlt_path(indexed), json={"id": "wiki_12", "size": 10, "method": method, "filter": {"group": "odd"}})
    assert r.status_code == 200, r.text
    ids = [h["id"] for h in r.json()["hits"]]
    assert set(ids) == odd  # every odd document, and only those (the source wiki_12 is even)
    assert r.json()["candidates"] == len(odd)

    wanted = {d["id"] for d in corpus.docs if d["metadata"]["position"] in (3, 5, 6)}
    r = client.post(_mlt_path(indexed), json={"id": "wiki_12", "method": method, "filter": {"position": [3, 5, 6]}})
    assert {h["id"] for h in r.json()["hits"]} == wanted
    r = client.post(_mlt_path(indexed), json={"id": "wiki_12", "method": method,
                                             "filter": {"group": "even", "position": [0, 2]}})
    assert [h["id"] for h in r.json()["hits"]] == [corpus.ids[2]]  # the source itself is left out
    r = client.post(_mlt_path(indexed), json={"id": "wiki_12", "method": method, "filter": {"group": "none"}})
    assert r.status_code == 200 and r.json()["hits"] == []

    if method == "sdr":  # filtered scores are the unfiltered scores of the same documents
        full = {h["id"]: h["score"] for h in client.post(
            _mlt_path(indexed), json={"id": "wiki_12", "size": N_DOCS, "method": "sdr"}).json()["hits"]}
        filtered = client.post(_mlt_path(indexed), json={"id": "wiki_12", "size": 10, "method": "sdr",
                                                         "filter": {"group": "odd"}}).json()["hits"]
        for h in filtered:
            assert h["score"] == pytest.approx(full[h["id"]], abs=TOL)


def test_serve_writes_on_opensearch(client, indexed, corpus):
    """PUT / DELETE / bulk over HTTP into a real OpenSearch index: visible to the next request.
    (Last in this module: it adds documents and removes them again.)"""
    name = indexed[1]
    doc_path = f"/v1/indices/{name}/documents/"
    paragraphs = corpus.held_out["wiki_308"]
    r = client.put(doc_path + "new_os", json={"title": "Copy", "metadata": {"group": "copy"}, "paragraphs": paragraphs})
    assert r.status_code == 200, r.text
    assert r.json()["result"] == "created" and r.json()["stats_stale"] is True
    assert client.get(doc_path + "new_os").json()["metadata"] == {"group": "copy"}
    r = client.post(_mlt_path(indexed), json={"id": "wiki_308", "size": 5, "method": "sdr", "filter": {"group": "copy"}})
    assert [h["id"] for h in r.json()["hits"]] == ["new_os"]
    assert client.put(doc_path + "new_os", json={"text": "A short replacement text about the sea."}).json()["result"] == "updated"

    raw = "\n".join(json.dumps(x) for x in [
        {"id": "bulk_os_1", "text": "Bulk text one about mountains and rivers."},
        {"id": "bulk_os_2", "paragraphs": ["Bulk text two.", "It is about deserts."]},
        {"delete": "new_os"},
    ])
    r = client.post(f"/v1/indices/{name}/_bulk", content=raw)
    assert r.status_code == 200, r.text
    assert (r.json()["written"], r.json()["deleted"], r.json()["failed"]) == (2, 1, [])
    assert client.get(doc_path + "new_os").status_code == 404
    for doc_id in ("bulk_os_1", "bulk_os_2"):
        assert client.delete(doc_path + doc_id).json()["result"] == "deleted"
    assert client.delete(doc_path + "bulk_os_1").status_code == 404
    r = client.post(f"/v1/indices/{name}/_refresh_stats")
    assert r.status_code == 200 and r.json()["stale"] is False and r.json()["documents"] == N_DOCS
