"""Bulk reindex while a data node and a worker are SIGKILLed (issue 43 item 3, reindex): ``sdr reindex
--opensearch <every node>`` with two real Celery workers over a real Redis into the three-node cluster (a new
generation of 3 primaries and 1 replica behind an alias); one worker is SIGKILLed mid-batch and a data node
SIGKILLed while the other worker writes. Every document is indexed exactly once (ids, counts, sentences,
vectors, statistics: ``check_generation`` of the workers' OpenSearch tests, imported), one generation is
created and the alias is switched once, to it alone.
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest

from faults_fixtures import victim
from worker_harness import Reindex, Worker, corpus, wait_for, write_jsonl

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workers"))
from test_workers_opensearch import _aliased, _env, _reindex_args, _state_files, check_generation  # noqa: E402

pytestmark = pytest.mark.cluster

N_DOCS = 42


def test_faults_reindex_with_a_data_node_and_a_worker_sigkilled(cluster, redis_url, tmp_path, workers_to_stop, encoder,
                                                                capsys):
    t0 = time.monotonic()
    alias = f"sdr-rx-{uuid.uuid4().hex[:8]}"
    survivor = cluster.urls[0]  # node 1 is never the victim: checks read through it
    env = _env(redis_url, tmp_path, SDR_RESEND_AFTER="8", SDR_VISIBILITY_TIMEOUT="600",
               SDR_OPENSEARCH_SHARDS="3", SDR_OPENSEARCH_REPLICAS="1")
    w1 = Worker(env, tmp_path / "w1.log", f"w1-{env['SDR_QUEUE']}")
    w2 = Worker(env, tmp_path / "w2.log", f"w2-{env['SDR_QUEUE']}")
    workers_to_stop.extend([w1, w2])
    w1.wait_ready(timeout=120)
    w2.wait_ready(timeout=120)
    records = corpus(N_DOCS, prefix="x", seed=43)
    data = write_jsonl(tmp_path / "docs.jsonl", records)
    node = victim(cluster)
    try:
        job = Reindex(env, _reindex_args(cluster.url, alias, data, batch_docs=6), tmp_path / "reindex.log")
        wait_for(lambda: w1.count("received") >= 2, 180, "worker 1 to start its second batch", poll=0.02)
        w1.kill()
        assert w1.count("succeeded") == w1.count("received") - 1, "worker 1 was not killed mid-batch"
        written_before = w2.count("succeeded")
        cluster.kill(node)
        killed_at = time.monotonic()
        out = job.result(timeout=480)
        run_s, down_s = time.monotonic() - t0, time.monotonic() - killed_at
        after_kill = w2.count("succeeded") - written_before
        assert out["complete"] and out["swapped"] and job.proc.returncode == 0, out
        assert (out["indexed"], out["skipped"], out["failed"], out["previous"]) == (N_DOCS, 0, 0, None), out
        assert out["resends"] >= 1, out  # worker 1's batch was sent again
        assert after_kill > 0, "worker 2 wrote nothing after the node was killed"
        assert not _state_files(env)
        # written with a node down: every document exactly once, read through a surviving node
        check_generation(survivor, alias, out["index"], records, encoder)
    finally:
        cluster.revive(node)
    generations = sorted(httpx.get(f"{survivor}/_cat/indices/{alias}-*?h=index&format=json", timeout=60).json(),
                         key=str)
    generations = [g["index"] for g in generations if not g["index"].endswith("-sdr-state")]
    assert generations == [out["index"]] and _aliased(survivor, alias) == {out["index"]}  # one generation, aliased once
    check_generation(survivor, alias, out["index"], records, encoder)  # and the same once the node is back
    with capsys.disabled():
        print(f"\nreindex, worker 1 and node {node} SIGKILLed ({down_s:.0f} s before the end of the run; worker 2 "
              f"wrote {after_kill} batches after), {run_s:.0f} s run, {time.monotonic() - t0:.0f} s in all: "
              + json.dumps({k: out[k] for k in ("indexed", "skipped", "failed", "resends", "swapped")})
              + f"; generations {len(generations)}; documents {out['documents']['documents']}")
    httpx.delete(f"{survivor}/{alias}-*", timeout=60)
