"""A plugin that cannot take the node down (issue 41, cases 1-6), on a real node with a small heap.

Each case of the issue as a request to a node this module starts itself (``scripts/opensearch-node.sh`` on a
free port, heap ``SDR_TEST_NODE_HEAP``, default 512m; wiped at the end), with the shapes that killed a 1 GiB
node before the plugin's limits (opensearch-plugin/README.md, "Limits"). Each answers as designed and the node
is up after it:

1. an explained rescore of a 3,003-hit window (3,000 source sentences in 30 paragraphs): 200 with the
   breakdowns of the hits returned only; the same asking to return all 3,003 explained: 400 naming
   ``sdr.limits.max_explain_pairs``;
2. ``explain_top: 1000`` of a 1,000-hit window with 2,000 source sentences: 400 naming that setting;
3. concurrent large rescore bodies (here 8 of 27 MB, 20,001 x 256 float32 in base64): each a 400 naming
   ``sdr.limits.max_source_sentences`` or a 429 (``circuit_breaking_exception``), never a dropped connection;
4. ``sdr_vectors`` with 100,000 centroid rows and ``size: 10000``: 400 naming ``max_source_sentences``; 20,000
   rows x 10,000 hits: 400 naming ``max_fetch_values``; within the limits: 200;
5. ``sdr_candidates`` with 8,000 sentences x ``k: 10000``: 400 naming ``max_candidate_hits``; a heavy candidate
   stage within the limits stops at ``timeout`` (200, ``timed_out: true``, no hit) and when its task is cancelled
   (the task gone within seconds, not when it would have ended); a heavy rescore stops at ``timeout`` with the
   hits it scored;
6. bad input answers 400 naming the field (paragraph / position fields of the wrong type or missing, ``_name``,
   ``boost``, ``k: 10000`` in documents mode, ``mean`` of the wrong type, the rescorer's unknown key).

The heap and breakers after each case are logged (``_nodes/stats/jvm,breaker``). To see these tests fail on the
plugin before the fix, run them with ``SDR_TEST_NODE_SCRIPT`` pointing at another checkout's
``scripts/opensearch-node.sh`` (it builds that checkout's plugin).
"""

from __future__ import annotations

import base64
import json
import logging
import os
import threading
import time
import uuid
from collections import Counter
from typing import Any

import httpx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import OwnedNode, owned_node_port
from sdr_search.core.documents import Document
from sdr_search.core.vectors import DocVectors
from sdr_search.indexer.opensearch import OpenSearchSettings, OpenSearchStore
from sdr_search.indexer.store import IndexMeta

pytestmark = pytest.mark.integration

logger = logging.getLogger(__name__)

PORT = owned_node_port("SDR_TEST_SAFETY_NODE_PORT", 9330)
WIDE = IndexMeta("model-w", "tag-w", 16, {"paragraph_unit": "paragraph"}, {"numpy": np.__version__})
NARROW = IndexMeta("model-n", "tag-n", 4, {"paragraph_unit": "paragraph"}, {"numpy": np.__version__})
N_WIDE = 3_003   # documents of 4 sentences (2 paragraphs of 2), 16 dimensions: cases 1, 2 and the rescore time-out
N_NARROW = 10_000  # documents of 1 sentence, 4 dimensions: cases 4 and 5


# =============================================================================================
# the node and its two indices
# =============================================================================================
@pytest.fixture(scope="module")
def node():
    owned = OwnedNode(PORT, "")
    owned.wipe()
    if owned.answers():
        pytest.fail(f"port {PORT} answers but not with a node of opensearch-node.sh; set SDR_TEST_SAFETY_NODE_PORT",
                    pytrace=False)
    owned.start()
    try:
        yield owned
    finally:
        owned.wipe()


@pytest.fixture(scope="module")
def http(node):
    with httpx.Client(base_url=node.url, timeout=120) as client:
        yield client


def _unit(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    x = rng.standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _fill(url: str, meta: IndexMeta, n: int, sizes: list[int], prefix: str, seed: int) -> str:
    """An index written by the store: ``n`` documents of paragraphs of ``sizes`` sentences, random unit vectors."""
    rng = np.random.default_rng(seed)
    store = OpenSearchStore(url, index=f"sdr-safety-{prefix}-{uuid.uuid4().hex[:8]}",
                            settings=OpenSearchSettings(plugin="on", bulk_chunk_docs=1000, refresh="false"))
    try:
        store.ensure_meta(meta)
        total = sum(sizes)
        offsets = np.concatenate([[0], np.cumsum(sizes)])
        vectors = _unit(rng, n * total, meta.dim)
        items = []
        for i in range(n):
            paragraphs = tuple(tuple(f"s{i}.{p}.{k}." for k in range(size)) for p, size in enumerate(sizes))
            items.append((Document(f"{prefix}{i:05d}", paragraphs), DocVectors(vectors[i * total:(i + 1) * total], offsets)))
        store.put(items)
        name = store.index_name
    finally:
        store.close()
    httpx.post(f"{url}/{name}/_refresh", timeout=120).raise_for_status()
    return name


@pytest.fixture(scope="module")
def wide(node) -> str:
    return _fill(node.url, WIDE, N_WIDE, [2, 2], "w", 1)


@pytest.fixture(scope="module")
def narrow(node) -> str:
    return _fill(node.url, NARROW, N_NARROW, [1], "n", 2)


# =============================================================================================
# helpers
# =============================================================================================
def b64(v: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(v, dtype="<f4").tobytes()).decode("ascii")


def send(http: httpx.Client, path: str, body: Any, *, params: dict[str, str] | None = None,
         timeout: float = 120) -> tuple[int, dict[str, Any]]:
    """``(status, json)`` of a POST; a dropped connection fails the test naming the request."""
    content = body if isinstance(body, (bytes, str)) else json.dumps(body)
    try:
        r = http.post(path, content=content, params=params, headers={"Content-Type": "application/json"}, timeout=timeout)
    except httpx.TransportError as e:
        pytest.fail(f"POST {path}: no answer from the node ({type(e).__name__}: {e})", pytrace=False)
    try:
        return r.status_code, r.json()
    except ValueError:
        return r.status_code, {"raw": r.text[:500]}


def reason(answer: dict[str, Any]) -> str:
    return json.dumps(answer.get("error", answer))[:2000]


def assert_up(http: httpx.Client, what: str) -> dict[str, Any]:
    """The node still answers; returns its heap and breakers (logged)."""
    try:
        stats = http.get("/_nodes/stats/jvm,breaker", timeout=30).json()
    except httpx.TransportError as e:
        pytest.fail(f"the node is down after {what} ({type(e).__name__})", pytrace=False)
    (node,) = stats["nodes"].values()
    mem = node["jvm"]["mem"]
    pools = mem.get("pools", {})
    peak = {k: v.get("peak_used_in_bytes") for k, v in pools.items()}
    breakers = {k: (v["estimated_size_in_bytes"], v["tripped"]) for k, v in node["breakers"].items()
                if k in ("request", "parent", "in_flight_requests", "sdr_parse")}
    logger.info("after %s: heap %d %% (%d MB of %d MB), pool peaks %s, breakers (bytes, tripped) %s", what,
                mem["heap_used_percent"], mem["heap_used_in_bytes"] >> 20, mem["heap_max_in_bytes"] >> 20, peak, breakers)
    return node


def rescore_body(source: np.ndarray, sizes: list[int], *, window: int, size: int, **sdr: Any) -> dict[str, Any]:
    return {"size": size, "query": {"match_all": {}}, "_source": False,
            "rescore": {"window_size": window, "sdr": {"vectors": b64(source), "paragraph_sizes": sizes,
                                                       "mu": [0.0] * len(sizes), "sigma": [1.0] * len(sizes), **sdr}}}


# =============================================================================================
# cases 1-4: the node
# =============================================================================================
def test_case1_an_explained_window_keeps_the_breakdowns_of_the_hits_returned_only(http, wide):
    rng = np.random.default_rng(11)
    source = _unit(rng, 3_000, WIDE.dim)
    sizes = [100] * 30
    status, got = send(http, f"/{wide}/_search", rescore_body(source, sizes, window=3_003, size=10, explain=True))
    assert status == 200, reason(got)
    hits = got["hits"]["hits"]
    assert len(hits) == 10 and all(len(h["fields"]["_sdr"][0]["source_paragraphs"]) == 30 for h in hits)
    assert [h["_score"] for h in hits] == sorted((h["_score"] for h in hits), reverse=True)
    assert_up(http, "case 1 (10 of 3,003 explained)")
    status, got = send(http, f"/{wide}/_search", rescore_body(source, sizes, window=3_003, size=3_003, explain=True))
    assert status == 400, reason(got)
    assert "sdr.limits.max_explain_pairs" in reason(got) and "[explain]" in reason(got), reason(got)
    assert_up(http, "case 1 (3,003 of 3,003 explained: 400)")


def test_case2_explain_top_over_the_pair_limit_is_a_400(http, wide):
    rng = np.random.default_rng(12)
    source = _unit(rng, 2_000, WIDE.dim)
    sizes = [100] * 20
    status, got = send(http, f"/{wide}/_search", rescore_body(source, sizes, window=1_000, size=1_000, explain_top=1_000))
    assert status == 400, reason(got)
    assert "[explain_top] asks for the breakdowns of 1000 hits of 2000 source sentences each" in reason(got), reason(got)
    assert "sdr.limits.max_explain_pairs" in reason(got)
    assert_up(http, "case 2 (explain_top 1,000 x 2,000: 400)")
    status, got = send(http, f"/{wide}/_search", rescore_body(source, sizes, window=1_000, size=50, explain_top=50))
    assert status == 200, reason(got)
    assert sum(1 for h in got["hits"]["hits"] if "_sdr" in h.get("fields", {})) == 50
    assert_up(http, "case 2 (explain_top 50: 200)")


def test_case3_concurrent_large_sources_are_refused_without_dropping_a_connection(http, node, wide):
    rng = np.random.default_rng(13)
    over = rng.standard_normal((20_001, 256)).astype(np.float32)  # 27 MB of base64: one sentence over the limit
    body = json.dumps(rescore_body(over, [20_001], window=10, size=10)).encode()
    del over
    answers: list[tuple[int, str]] = []
    failures: list[str] = []

    def one() -> None:
        try:
            with httpx.Client(base_url=node.url, timeout=300) as client:
                r = client.post(f"/{wide}/_search", content=body, headers={"Content-Type": "application/json"})
                answers.append((r.status_code, r.text[:600]))
        except httpx.TransportError as e:
            failures.append(f"{type(e).__name__}: {e}")

    threads = [threading.Thread(target=one) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    logger.info("case 3: %s", sorted(s for s, _ in answers))
    assert not failures, failures
    assert len(answers) == 8
    for status, text in answers:
        assert status in (400, 429), text
        if status == 400:
            assert "[vectors] holds 20001 sentences" in text and "sdr.limits.max_source_sentences" in text, text
        else:
            assert "circuit_breaking_exception" in text, text
    assert_up(http, "case 3 (8 concurrent 27 MB sources)")


def test_case4_centroid_rows_are_bounded_by_rows_and_by_the_fetch(http, narrow):
    rng = np.random.default_rng(14)
    ids = {"ids": {"values": [f"n{i:05d}" for i in range(N_NARROW)]}}

    def vectors_search(rows: int, size: int) -> tuple[int, dict[str, Any]]:
        centroids = _unit(rng, rows, NARROW.dim)
        return send(http, f"/{narrow}/_search", {"size": size, "_source": False, "query": ids,
                                                 "ext": {"sdr_vectors": {"centroids": b64(centroids)}}})

    status, got = vectors_search(100_000, 10_000)
    assert status == 400, reason(got)
    assert "[sdr_vectors] [centroids] holds 100000 sentences" in reason(got)
    assert "sdr.limits.max_source_sentences" in reason(got)
    assert_up(http, "case 4 (100,000 rows x 10,000 hits: 400)")
    status, got = vectors_search(20_000, 10_000)
    assert status == 400, reason(got)
    assert "would return 200000000 float values for 10000 hits" in reason(got), reason(got)
    assert "sdr.limits.max_fetch_values" in reason(got)
    assert_up(http, "case 4 (20,000 rows x 10,000 hits: 400)")
    status, got = vectors_search(2_000, 100)
    assert status == 200, reason(got)
    rows = got["hits"]["hits"][0]["fields"]["_sdr_vectors"][0]["centroid_rows"]
    assert len(base64.b64decode(rows)) == 2_000 * 4
    assert_up(http, "case 4 (2,000 rows x 100 hits: 200)")


# =============================================================================================
# case 5: cancellation and time-outs
# =============================================================================================
def candidates_body(source: np.ndarray, k: int, **extra: Any) -> dict[str, Any]:
    return {"size": 10, "_source": False, "track_total_hits": False,
            "query": {"sdr_candidates": {"vectors": b64(source), "paragraph_sizes": [source.shape[0]], "k": k, **extra}}}


def _search_tasks(http: httpx.Client, opaque: str) -> list[dict[str, Any]]:
    tasks = http.get("/_tasks", params={"actions": "*search*", "detailed": "true"}, timeout=30).json()
    return [t for n in tasks["nodes"].values() for t in n["tasks"].values()
            if t.get("headers", {}).get("X-Opaque-Id") == opaque]


def test_case5_the_candidate_stage_is_bounded_and_stops_at_its_time_out(http, narrow):
    rng = np.random.default_rng(15)
    status, got = send(http, f"/{narrow}/_search", candidates_body(_unit(rng, 8_000, NARROW.dim), 10_000, oversample=1))
    assert status == 400, reason(got)
    assert "8000 source sentences x 10000 hits per sentence" in reason(got), reason(got)
    assert "sdr.limits.max_candidate_hits" in reason(got)
    heavy = candidates_body(_unit(rng, 1_000, NARROW.dim), 10_000)  # 10,000,000 candidate hits: at the limit
    t0 = time.monotonic()
    status, got = send(http, f"/{narrow}/_search", heavy, params={"timeout": "100ms"})
    elapsed = time.monotonic() - t0
    assert status == 200, reason(got)
    assert got["timed_out"] is True and got["hits"]["hits"] == [], got
    assert elapsed < 5, f"answered after {elapsed:.1f} s"
    assert_up(http, "case 5 (candidate stage at its time-out)")


def _cpu_ms(http: httpx.Client) -> int:
    (node,) = http.get("/_nodes/stats/process", timeout=30).json()["nodes"].values()
    return int(node["process"]["cpu"]["total_in_millis"])


def test_case5_a_cancelled_candidate_stage_stops(http, node, narrow):
    # 1,000 probes of k 10,000 over 10,000 sentences: about 25 s on two cores when let run
    heavy = candidates_body(_unit(np.random.default_rng(16), 1_000, NARROW.dim), 10_000)
    opaque = f"safety-{uuid.uuid4().hex[:8]}"
    answer: dict[str, Any] = {}

    def run() -> None:
        with httpx.Client(base_url=node.url, timeout=300) as client:
            r = client.post(f"/{narrow}/_search", content=json.dumps(heavy),
                            headers={"Content-Type": "application/json", "X-Opaque-Id": opaque})
            answer.update(status=r.status_code, text=r.text[:600])

    thread = threading.Thread(target=run)
    thread.start()
    deadline = time.monotonic() + 30
    while not _search_tasks(http, opaque):
        assert time.monotonic() < deadline, "the search never showed up in _tasks"
        time.sleep(0.05)
    time.sleep(1.0)  # well into its probes
    assert _search_tasks(http, opaque), "the search ended before it could be cancelled"
    cancelled_at = time.monotonic()
    http.post("/_tasks/_cancel", params={"actions": "*search*"}, timeout=30).raise_for_status()
    while _search_tasks(http, opaque):
        assert time.monotonic() - cancelled_at < 5, "the cancelled search is still running 5 s later"
        time.sleep(0.05)
    gone = time.monotonic() - cancelled_at
    thread.join(timeout=60)
    # and the node is idle again: no pool thread of the plugin goes on probing
    cpu = _cpu_ms(http)
    time.sleep(1.0)
    busy = _cpu_ms(http) - cpu
    logger.info("case 5: cancelled; its tasks were gone %.2f s later; answer %s; node CPU over the next second %d ms",
                gone, answer.get("status"), busy)
    assert gone < 2.0, f"tasks gone {gone:.1f} s after the cancellation"
    assert "task_cancelled_exception" in answer.get("text", ""), answer
    assert busy < 600, f"the node used {busy} ms of CPU in the second after the cancelled search ended"
    assert_up(http, "case 5 (cancelled candidate stage)")


def test_case5_a_rescore_stops_at_its_time_out_with_the_hits_it_scored(http, wide):
    rng = np.random.default_rng(17)
    source = _unit(rng, 20_000, WIDE.dim)  # 3,003 x 4 x 20,000 dot products: seconds
    body = rescore_body(source, [1_000] * 20, window=3_003, size=3_003)
    t0 = time.monotonic()
    status, got = send(http, f"/{wide}/_search", body, params={"timeout": "200ms"})
    elapsed = time.monotonic() - t0
    assert status == 200, reason(got)
    assert got["timed_out"] is True, {k: v for k, v in got.items() if k != "hits"}
    kept = got["hits"]["hits"]
    assert 1 <= len(kept) < N_WIDE
    assert elapsed < 5, f"answered after {elapsed:.1f} s"
    # the hits kept have their exact scores: the same as a search of just them
    ids = [h["_id"] for h in kept[:20]]
    exact_body = rescore_body(source, [1_000] * 20, window=len(ids), size=len(ids))
    exact_body["query"] = {"ids": {"values": ids}}
    status, exact = send(http, f"/{wide}/_search", exact_body)
    assert status == 200, reason(exact)
    assert {h["_id"]: h["_score"] for h in exact["hits"]["hits"]} == {h["_id"]: h["_score"] for h in kept[:20]}
    assert_up(http, "case 5 (rescore at its time-out)")


# =============================================================================================
# case 6: 400s, not 500s
# =============================================================================================
def test_case6_bad_fields_are_400s_naming_them(http, wide, narrow):
    rng = np.random.default_rng(18)
    source = _unit(rng, 3, WIDE.dim)

    def bad(body: dict[str, Any], *expected: str, index: str = wide) -> None:
        status, got = send(http, f"/{index}/_search", body)
        assert status == 400, reason(got)
        for part in expected:
            assert part in reason(got), (part, reason(got))

    for key in ("paragraph_field", "position_field"):
        bad(rescore_body(source, [3], window=5, size=5, **{key: "doc_id"}),
            f"[sdr] [{key}] [doc_id] is of type [keyword], not an integer field")
        bad(rescore_body(source, [3], window=5, size=5, **{key: "sentences.vector"}),
            f"[sdr] [{key}] [sentences.vector] is of type [knn_vector], not an integer field")
        bad(rescore_body(source, [3], window=5, size=5, **{key: "sentences.nothing"}),
            f"[sdr] [{key}] [sentences.nothing] is not in the mapping of index [{wide}]")
    small = _unit(rng, 3, NARROW.dim)
    bad(candidates_body(small, 5, _name={"a": 1}), "[sdr_candidates] [_name] must be a string, got START_OBJECT", index=narrow)
    bad(candidates_body(small, 5, _name=["a"]), "[sdr_candidates] [_name] must be a string, got START_ARRAY", index=narrow)
    bad(candidates_body(small, 5, boost="abc"), "[sdr_candidates] [boost] must be a number, got [abc]", index=narrow)
    bad({"query": {"match_all": {}}, "ext": {"sdr_vectors": {"mean": "yes"}}},
        "[sdr_vectors] [mean] must be true or false, got VALUE_STRING", index=narrow)
    status, got = send(http, f"/{wide}/_search", rescore_body(source, [3], window=5, size=5, k=3))
    assert status == 400 and "[sdr] does not support [k]: its keys are" in reason(got), reason(got)
    assert "[sdr] [sdr]" not in reason(got)
    status, got = send(http, f"/{narrow}/_search", candidates_body(small, 10_000))  # documents mode: no oversample
    assert status == 200, reason(got)
    assert_up(http, "case 6")


# =============================================================================================
# the plugin's REST surface, property-based
# =============================================================================================
DIMS = {"wide": WIDE.dim, "narrow": NARROW.dim}
FIELDS = ["sentences.vector", "sentences.vector", "sentences.vector", "doc_id", "sentences.paragraph", "nothing.vector",
          "vector", ""]
SIDE_FIELDS = [None, None, None, "sentences.paragraph", "sentences.position", "doc_id", "sentences.vector",
               "sentences.nothing", 3]
ODD = [None, 3, -1, 1.5, "x", "", [], {}, True, [1, "a"], {"a": {"b": 1}}]
# (rows, paragraphs) near the limits as well as small ones: sdr.limits.max_source_sentences is 20,000
ROWS = st.one_of(st.integers(1, 40), st.integers(41, 2_500), st.sampled_from([0, 1_000, 1_001, 19_999, 20_000, 20_001]))


@st.composite
def source(draw, index: str, *, arrays_up_to: int = 4_000) -> tuple[dict[str, Any], int]:
    """The source fields (vectors, paragraph_sizes, maybe statistics) and the number of rows sent."""
    rows = draw(ROWS)
    dim = draw(st.sampled_from([DIMS[index]] * 6 + [1, 3, 7]))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    v = rng.standard_normal((rows, dim)).astype(np.float32)
    form = draw(st.sampled_from(["b64"] * 6 + ["arrays", "garbage", "odd", "absent"]))
    fields: dict[str, Any] = {}
    if form == "b64":
        fields["vectors"] = b64(v)
    elif form == "arrays":
        fields["vectors"] = v.tolist() if rows * dim <= arrays_up_to else b64(v)
    elif form == "garbage":
        fields["vectors"] = draw(st.sampled_from(["%%%", "AAA", "A" * 7, "", "not base64 at all"]))
    elif form == "odd":
        fields["vectors"] = draw(st.sampled_from(ODD))
    n_par = draw(st.integers(1, max(1, min(rows, 30))))
    cuts = np.sort(rng.choice(np.arange(1, max(rows, 2)), size=min(n_par - 1, max(rows - 1, 0)), replace=False)) \
        if rows > 1 and n_par > 1 else np.zeros(0, dtype=int)
    sizes = np.diff(np.concatenate([[0], cuts, [rows]])).astype(int).tolist() if rows > 0 else [0]
    shape = draw(st.sampled_from(["right"] * 6 + ["zero", "negative", "short", "long", "odd", "absent", "float"]))
    if shape == "zero":
        sizes = sizes + [0]
    elif shape == "negative":
        sizes = [-1] + sizes
    elif shape == "short":
        sizes = sizes[:-1] or [1]
    elif shape == "long":
        sizes = sizes + [1]
    elif shape == "float":
        sizes = [s + 0.5 for s in sizes]
    if shape == "odd":
        fields["paragraph_sizes"] = draw(st.sampled_from(ODD))
    elif shape != "absent":
        fields["paragraph_sizes"] = sizes
    stats = draw(st.sampled_from(["right"] * 4 + ["none", "short", "negative", "huge", "odd"]))
    n = len(sizes)
    if stats == "right":
        fields.update(mu=[0.1] * n, sigma=[0.5] * n)
    elif stats == "short":
        fields.update(mu=[0.1] * max(0, n - 1), sigma=[0.5] * max(0, n - 1))
    elif stats == "negative":
        fields.update(mu=[0.1] * n, sigma=[-1.0] * n)
    elif stats == "huge":
        fields.update(mu=[1e308] * n, sigma=[1e-308] * n)
    elif stats == "odd":
        fields.update(mu=draw(st.sampled_from(ODD)), sigma=draw(st.sampled_from(ODD)))
    return fields, rows


@st.composite
def rescore_request(draw) -> tuple[str, str, dict[str, Any], dict[str, str]]:
    index = draw(st.sampled_from(["wide", "narrow"]))
    clause, rows = draw(source(index))
    explain = draw(st.sampled_from(["none"] * 4 + ["explain", "top", "odd"]))
    if explain == "explain":
        clause["explain"] = True
    elif explain == "top":
        clause["explain_top"] = draw(st.one_of(st.integers(0, 600), st.sampled_from([499, 500, 501, 3_003, 2**31, -1])))
    elif explain == "odd":
        clause[draw(st.sampled_from(["explain", "explain_top"]))] = draw(st.sampled_from(ODD))
    for key, values in (("field", FIELDS), ("paragraph_field", SIDE_FIELDS), ("position_field", SIDE_FIELDS)):
        if draw(st.integers(0, 5)) == 0:
            value = draw(st.sampled_from(values))
            if value is not None:
                clause[key] = value
    if draw(st.integers(0, 9)) == 0:
        clause[draw(st.sampled_from(["k", "boost", "window", "sdr"]))] = draw(st.sampled_from(ODD))
    window = draw(st.one_of(st.integers(1, 200), st.sampled_from([0, 1_000, 3_003, 10_000, 10_001])))
    size = draw(st.one_of(st.integers(0, 50), st.sampled_from([500, 1_000, 3_003])))
    body = {"size": size, "_source": False, "query": {"match_all": {}},
            "rescore": {"window_size": window, "sdr": clause}}
    return "sdr", index, body, {"timeout": draw(st.sampled_from(["100ms", "1s", "3s"]))}


@st.composite
def candidates_request(draw) -> tuple[str, str, dict[str, Any], dict[str, str]]:
    index = draw(st.sampled_from(["wide", "narrow"]))
    clause, rows = draw(source(index))
    if draw(st.booleans()):
        clause.pop("mu", None), clause.pop("sigma", None)
    number = st.one_of(st.integers(1, 200), st.sampled_from([0, -3, 1_000, 9_999, 10_000, 10_001, 2**31]), st.sampled_from(ODD))
    for key, values in (("k", number), ("ef_search", number), ("oversample", st.one_of(st.integers(1, 8), st.sampled_from(ODD))),
                        ("aggregation", st.sampled_from(["votes", "sum", "weighted-sum", "sdr-bound", "max", 3, None])),
                        ("search", st.sampled_from(["documents", "sentences", "paragraphs", 1, None])),
                        ("filter", st.sampled_from([{"term": {"doc_id": "w00001"}}, {"match_all": {}}, {"bogus": {}}, 3, []])),
                        ("exclude", st.sampled_from([["w00001", "n00002"], [], "x", [{}], [3]])),
                        ("boost", st.sampled_from([1.0, 2, "abc", "2.5", -1, {}, [], None])),
                        ("_name", st.sampled_from(["n", {"a": 1}, ["a"], 3, None])),
                        ("id_field", st.sampled_from(["doc_id", "nothing", "sentences.vector", 3])),
                        ("field", st.sampled_from(FIELDS)), ("nope", st.sampled_from(ODD))):
        if draw(st.integers(0, 3)) == 0:
            value = draw(values)
            if value is not None:
                clause[key] = value
    body = {"size": draw(st.integers(0, 100)), "_source": False, "track_total_hits": False,
            "query": {"sdr_candidates": clause}}
    return "sdr_candidates", index, body, {"timeout": draw(st.sampled_from(["100ms", "1s", "3s"]))}


@st.composite
def vectors_request(draw) -> tuple[str, str, dict[str, Any], dict[str, str]]:
    index = draw(st.sampled_from(["wide", "narrow"]))
    ext: dict[str, Any] = {}
    kind = draw(st.sampled_from(["vectors", "mean", "centroids", "centroids", "odd"]))
    if kind == "mean":
        ext["mean"] = draw(st.sampled_from([True, False, "yes", 1]))
    elif kind == "centroids":
        rows = draw(st.one_of(st.integers(1, 300), st.sampled_from([0, 2_000, 20_000, 20_001, 100_000])))
        dim = draw(st.sampled_from([DIMS[index]] * 4 + [1, 3]))
        v = np.random.default_rng(draw(st.integers(0, 2**32 - 1))).standard_normal((rows, dim)).astype(np.float32)
        ext["centroids"] = b64(v) if draw(st.integers(0, 5)) else draw(st.sampled_from(["%%", "AAA", 3, [], {}]))
    elif kind == "odd":
        ext[draw(st.sampled_from(["mean", "centroids", "field", "size"]))] = draw(st.sampled_from(ODD))
    if draw(st.integers(0, 5)) == 0:
        ext["field"] = draw(st.sampled_from(FIELDS + [3]))
    size = draw(st.one_of(st.integers(0, 60), st.sampled_from([250, 500, 1_000, 10_000])))
    return "sdr_vectors", index, {"size": size, "_source": False, "query": {"match_all": {}}, "ext": {"sdr_vectors": ext}}, {}


REQUESTS = st.one_of(rescore_request(), candidates_request(), vectors_request())


def _property_run(http: httpx.Client, indices: dict[str, str], max_examples: int) -> None:
    counts: Counter[tuple[str, int]] = Counter()

    @settings(max_examples=max_examples, deadline=None, database=None, derandomize=False,
              suppress_health_check=list(HealthCheck))
    @given(request=REQUESTS)
    def check(request: tuple[str, str, dict[str, Any], dict[str, str]]) -> None:
        surface, index, body, params = request
        content = json.dumps(body, allow_nan=True)
        try:
            r = http.post(f"/{indices[index]}/_search", content=content, params=params,
                          headers={"Content-Type": "application/json"}, timeout=120)
        except httpx.TransportError as e:
            raise AssertionError(f"no answer ({type(e).__name__}) to {surface} {content[:300]}") from e
        counts[(surface, r.status_code)] += 1
        assert r.status_code in (200, 400, 429), f"{r.status_code} to {surface} {content[:300]}: {r.text[:800]}"
        try:
            up = http.get("/", timeout=30).status_code
        except httpx.TransportError as e:
            raise AssertionError(f"the node is down after {surface} {content[:300]}") from e
        assert up == 200

    try:
        check()
    finally:
        total = sum(counts.values())
        summary = ", ".join(f"{s} {c}: {n}" for (s, c), n in sorted(counts.items()))
        logger.warning("REST surface property test: %d requests; by surface and status: %s", total, summary)
        print(f"\nREST surface property test: {total} requests; by surface and status: {summary}")


def test_the_rest_surface_answers_200_400_or_429_and_the_node_stays_up(http, wide, narrow):
    _property_run(http, {"wide": wide, "narrow": narrow}, int(os.environ.get("SDR_TEST_PROPERTY_EXAMPLES", "150")))
    assert_up(http, "the property test")


@pytest.mark.slow
def test_the_rest_surface_with_more_examples(http, wide, narrow):
    _property_run(http, {"wide": wide, "narrow": narrow}, 1_500)
    assert_up(http, "the slow property test")
