"""The server killed (SIGKILL) at random points of random write sequences (issue 32): after a
restart, every write that was answered before the kill is there, and the write in flight when the
server died left each document it names either as it was or as one of its lines left it, never
half written. Then the store answers queries.

A real ``sdr serve`` process with the real default encoder, on an embedded store and on a real
OpenSearch node. The sequences, the request in flight and the moment of the kill come from a seeded
generator, so a failure names its seed and replays. The texts include the hostile ones of the
model-based test (issue 41: control characters, lone surrogates, tiny documents, documents at the
document limits and past them, with the same small limits): a refused write, or a refused line of a
bulk request, changes nothing, killed or not.
"""

from __future__ import annotations

import json
import os
import random
import threading
import time

import httpx
import pytest

from conftest import ServeProcess as Server
from test_document_api_model import (
    CONTROL,
    LIMIT_BYTES,
    LIMIT_SENTENCES,
    LIMITS,
    OK,
    SURROGATES,
    TOO_LARGE,
    INVALID,
    _inside_a_word,
    _of_bytes,
    _sentences,
)

pytestmark = pytest.mark.integration

IDS = [f"k{i}" for i in range(8)]
SENTENCES = [
    "The river flooded the northern valley in spring.",
    "Farmers lost their whole harvest to the water.",
    "The council built a new levee along the bank.",
    "An appeal against the tax assessment was dismissed.",
    "The tribunal found that the notice was served late.",
    "Shares of the company were sold below their value.",
    "The witness could not recall the date of the meeting.",
    "A second levee was planned for the following year.",
    "The contract was signed by both parties in March.",
    "Interest on the loan was charged at a fixed rate.",
]


def _flat(text: str) -> str:
    return " ".join(text.split())


def _text(rng: random.Random) -> tuple[str, int]:
    """A text to write and the answer it must get: mostly prose, else one of the hostile kinds."""
    prose = " ".join(rng.sample(SENTENCES, rng.randint(2, 6)))
    kind = rng.choice(["prose"] * 6 + ["control", "surrogate", "tiny", "limit"])
    if kind == "control":
        return _inside_a_word(prose, rng.choice(CONTROL), rng.randrange(1000)), OK
    if kind == "surrogate":
        return _inside_a_word(prose, rng.choice(SURROGATES), rng.randrange(1000)), INVALID
    if kind == "tiny":
        return rng.choice([("x", OK), (".", OK), ("\x00", OK)])
    if kind == "limit":
        k, n, m = LIMIT_SENTENCES + rng.randint(0, 1), LIMIT_BYTES + rng.randint(0, 1), 4 * LIMIT_SENTENCES + rng.randint(1, 2)
        return rng.choice([(_sentences(k, rng.choice([" ", "\n\n"])), OK if k <= LIMIT_SENTENCES else TOO_LARGE),
                           (_of_bytes(n), OK if n <= LIMIT_BYTES else TOO_LARGE),
                           ("Ab. " * m, OK if m - 1 <= 4 * LIMIT_SENTENCES else TOO_LARGE)])
    return prose, OK


def _operation(rng: random.Random) -> tuple[str, object]:
    """An operation; a text travels with the answer it must get (put: ``(id, text, answer)``; a bulk
    write line: ``{"id", "text", "_answer"}``, the last key not sent)."""
    kind = rng.choice(["put", "delete", "bulk", "bulk"])
    if kind == "put":
        return "put", (rng.choice(IDS), *_text(rng))
    if kind == "delete":
        return "delete", rng.choice(IDS)
    lines = []
    for _ in range(rng.randint(2, 10)):
        if rng.random() < 0.3:
            lines.append({"delete": rng.choice(IDS)})
        else:
            text, answer = _text(rng)
            lines.append({"id": rng.choice(IDS), "text": text, "_answer": answer})
    return "bulk", lines


def _states(model: dict[str, str], op: tuple[str, object]) -> dict[str, list[str | None]]:
    """Every state each document the operation names passes through (None: absent), in order; a
    refused write leaves its document as it was."""
    kind, arg = op
    seen: dict[str, list[str | None]] = {}

    def step(doc_id: str, value: str | None) -> None:
        seen.setdefault(doc_id, [model.get(doc_id)]).append(value)

    if kind == "put":
        if arg[2] == OK:
            step(arg[0], _flat(arg[1]))
    elif kind == "delete":
        step(arg, None)
    else:
        for line in arg:
            if "delete" in line:
                step(line["delete"], None)
            elif line["_answer"] == OK:
                step(line["id"], _flat(line["text"]))
    return seen


def _json(value) -> bytes:
    return json.dumps(value).encode("ascii")  # a lone surrogate travels as the escape \ud800


def _send(client: httpx.Client, index: str, op: tuple[str, object]) -> httpx.Response:
    kind, arg = op
    if kind == "put":
        return client.put(f"/v1/indices/{index}/documents/{arg[0]}", content=_json({"text": arg[1]}),
                          headers={"Content-Type": "application/json"})
    if kind == "delete":
        return client.delete(f"/v1/indices/{index}/documents/{arg}")
    body = b"\n".join(_json({k: v for k, v in line.items() if k != "_answer"}) for line in arg) + b"\n"
    return client.post(f"/v1/indices/{index}/_bulk", content=body, headers={"Content-Type": "application/x-ndjson"})


def _refused(op: tuple[str, object]) -> int:
    """How many texts of ``op`` must be refused (422 or 413)."""
    kind, arg = op
    if kind == "put":
        return int(arg[2] != OK)
    return sum(1 for line in arg if "delete" not in line and line["_answer"] != OK) if kind == "bulk" else 0


def _answered(op: tuple[str, object], r: httpx.Response) -> None:
    """The answer an operation must get when the server is not killed under it."""
    kind, arg = op
    want = (arg[2],) if kind == "put" else (200, 404) if kind == "delete" else (200,)
    assert r.status_code in want, (op, r.status_code, r.text)
    if kind == "bulk":
        got = [i["result"] == "failed" for i in r.json()["items"]]
        assert got == ["delete" not in line and line["_answer"] != OK for line in arg], (arg, r.text)


def _read(client: httpx.Client, index: str, doc_id: str) -> str | None:
    r = client.get(f"/v1/indices/{index}/documents/{doc_id}")
    if r.status_code == 404:
        return None
    assert r.status_code == 200, r.text
    return _flat(" ".join(s for p in r.json()["paragraphs"] for s in p))


def _apply(model: dict[str, str], op: tuple[str, object]) -> None:
    for doc_id, states in _states(model, op).items():
        if states[-1] is None:
            model.pop(doc_id, None)
        else:
            model[doc_id] = states[-1]


def _call(client: httpx.Client, index: str, op: tuple[str, object], out: list) -> None:
    try:
        out.append(_send(client, index, op))
    except httpx.TransportError as e:  # the server died under it
        out.append(e)


def run_kills(server: Server, model: dict[str, str], *, seed: int, kills: int) -> dict[str, int]:
    """``kills`` rounds on one server: a random sequence, a kill during one of its requests, a restart,
    every id checked against the model, a query. Returns what was covered."""
    rng = random.Random(seed)
    covered = {"operations": 0, "kills": 0, "in_flight_answered": 0, "refused_texts": 0}
    server.start()
    for round_ in range(kills):
        ops = [_operation(rng) for _ in range(rng.randint(2, 6))]
        victim = rng.randrange(len(ops))
        delay = rng.uniform(0.0, 0.3)
        in_flight: dict[str, list[str | None]] = {}
        with httpx.Client(base_url=server.base, timeout=60) as client:
            for k, op in enumerate(ops):
                covered["operations"] += 1
                covered["refused_texts"] += _refused(op)
                if k < victim:
                    r = _send(client, server.index, op)
                    _answered(op, r)
                    _apply(model, op)
                    continue
                answer: list = []
                states = _states(model, op)
                worker = threading.Thread(target=_call, args=(client, server.index, op, answer), daemon=True)
                worker.start()
                time.sleep(delay)
                server.kill()
                worker.join(timeout=30)
                covered["kills"] += 1
                if answer and isinstance(answer[0], httpx.Response) and answer[0].status_code < 500:
                    _answered(op, answer[0])
                    covered["in_flight_answered"] += 1  # answered before the kill: committed
                    _apply(model, op)
                else:
                    in_flight = states
                break
        server.start()
        with httpx.Client(base_url=server.base, timeout=60) as client:
            for doc_id in IDS:
                got = _read(client, server.index, doc_id)
                if doc_id in in_flight:
                    assert got in in_flight[doc_id], (seed, round_, doc_id, got, in_flight[doc_id])
                    if got is None:
                        model.pop(doc_id, None)
                    else:
                        model[doc_id] = got
                else:
                    assert got == model.get(doc_id), (seed, round_, doc_id, got, model.get(doc_id))
            assert client.post(f"/v1/indices/{server.index}/_refresh_stats").status_code == 200
            source = next(iter(model), None)
            if source is not None:
                r = client.post(f"/v1/indices/{server.index}/more_like_this", json={"id": source, "size": 5})
                assert r.status_code == 200, r.text
                assert {h["id"] for h in r.json()["hits"]} <= set(model)
    server.stop()
    return covered


def _seed_docs(store, encoder) -> dict[str, str]:
    from sdr_search.core.documents import parse_record
    from sdr_search.indexer.pipeline import index_documents
    from sdr_search.indexer.stats_job import refresh_stats

    first = {doc_id: " ".join(SENTENCES[k : k + 3]) for k, doc_id in enumerate(IDS[:4])}
    index_documents(store, [parse_record({"id": k, "text": v}) for k, v in first.items()], encoder)
    refresh_stats(store, exact=True, sample_size=50, seed=0)
    return {k: _flat(v) for k, v in first.items()}


SEED = int(os.environ.get("SDR_FAULT_SEED", "32"))


def test_sigkill_of_the_server_loses_no_answered_write_embedded(tmp_path, encoder, capsys):
    from sdr_search.indexer.embedded import EmbeddedStore

    path = tmp_path / "store"
    with EmbeddedStore(path, create=True) as store:
        model = _seed_docs(store, encoder)
    env = {**os.environ, "SDR_SERVICE_STATS_REFRESH_DELAY_S": "0", "SDR_CACHE_DIR": str(tmp_path / "cache"), **LIMITS}
    env.pop("SDR_SERVICE_API_KEY", None)
    server = Server(["serve", "--store", str(path), "--precision", "fp32", "--device", "cpu"], env, tmp_path / "server.log")
    try:
        covered = run_kills(server, model, seed=SEED, kills=8)
    finally:
        server.stop()
    with capsys.disabled():
        print(f"\nembedded fault run (seed {SEED}): {covered}")
    assert covered["kills"] == 8


def test_sigkill_of_the_server_loses_no_answered_write_opensearch(tmp_path, encoder, opensearch_url, os_index, capsys):
    from sdr_search.indexer.opensearch import OpenSearchSettings, OpenSearchStore

    name = os_index("sdr-fault")
    with OpenSearchStore(opensearch_url, index=name, settings=OpenSearchSettings(replicas=0)) as store:
        model = _seed_docs(store, encoder)
    env = {**os.environ, "SDR_SERVICE_STATS_REFRESH_DELAY_S": "0", "SDR_CACHE_DIR": str(tmp_path / "cache"),
           "SDR_OPENSEARCH_REPLICAS": "0", **LIMITS}
    env.pop("SDR_SERVICE_API_KEY", None)
    server = Server(["serve", "--opensearch", opensearch_url, "--index", name, "--precision", "fp32", "--device", "cpu"],
                    env, tmp_path / "server.log", index=name)
    try:
        covered = run_kills(server, model, seed=SEED + 1, kills=4)
    finally:
        server.stop()
    with capsys.disabled():
        print(f"\nOpenSearch fault run (seed {SEED + 1}): {covered}")
    assert covered["kills"] == 4
