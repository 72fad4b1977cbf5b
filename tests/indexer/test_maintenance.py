"""`sdr delete` and `sdr compact` on an embedded store; compaction while another process reads."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from factories import FakeEncoder, make_docs, unit
from sdr_search.cli import main
from sdr_search.indexer.embedded import EmbeddedStore
from sdr_search.indexer.pipeline import index_documents
from sdr_search.indexer.stats_job import refresh_stats

pytestmark = pytest.mark.integration

READER = textwrap.dedent("""
    import sys, time
    import numpy as np
    from sdr_search.indexer.embedded import EmbeddedStore
    from sdr_search.reranker.engine import MLTSettings, MoreLikeThis, Query
    path, deleted, seconds = sys.argv[1], set(sys.argv[2].split(",")), float(sys.argv[3])
    store = EmbeddedStore(path)
    engine = MoreLikeThis(store=store, settings=MLTSettings(method="sdr", candidates=20, knn_k=10))
    ids = sorted(i for i in store.iter_ids())
    print("ready", flush=True)
    n, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        res = engine.run(Query(id=ids[n % len(ids)], size=5))
        bad = [h.id for h in res.hits if h.id in deleted]
        assert not bad, bad
        assert len(res.hits) == 5, res
        n += 1
    print("queries", n, flush=True)
""")


def _store(tmp_path: Path):
    path = tmp_path / "s"
    docs = make_docs(60, seed=3)
    with EmbeddedStore(path, create=True) as store:
        index_documents(store, [d for d, _ in docs], FakeEncoder())
        rng = np.random.default_rng(7)
        # replace 20 documents with new vectors: 20 documents' rows become dead
        store.put([(d, type(v)(unit(rng, v.n_sentences), v.par_offsets)) for d, v in docs[:20]])
        refresh_stats(store, exact=True, sample_size=50, seed=0)
    return path, [d.id for d, _ in docs]


def test_delete_then_compact_while_another_process_reads(tmp_path, capsys):
    path, ids = _store(tmp_path)
    gone = ids[20:30]
    ids_file = tmp_path / "ids.txt"
    ids_file.write_text("\n".join(gone[5:]) + "\n\n")
    assert main(["delete", "--store", str(path), *gone[:5], "no-such-id", "--ids-file", str(ids_file)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["deleted"] == 10 and out["missing"] == ["no-such-id"] and out["stats_stale"] is True
    assert main(["delete", "--store", str(path)]) == 2  # no id: one-line error

    reader = subprocess.Popen([sys.executable, "-c", READER, str(path), ",".join(gone), "8"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert reader.stdout.readline().strip() == "ready"
        time.sleep(1.0)
        with EmbeddedStore(path) as store:
            before = store.storage_info()  # dead rows present
        assert main(["compact", "--store", str(path)]) == 0
        out = json.loads(capsys.readouterr().out)
        assert out["rows_after"] < out["rows_before"] and out["bytes_after"] < out["bytes_before"]
        stdout, stderr = reader.communicate(timeout=60)
    finally:
        if reader.poll() is None:
            reader.kill()
    assert reader.returncode == 0, stderr[-3000:]
    assert int(stdout.split()[-1]) > 5  # it kept answering through the compaction
    with EmbeddedStore(path) as store:
        after = store.storage_info()
        assert after["dead_rows"] == 0 and before["dead_rows"] > 0
        assert sorted(store.iter_ids()) == sorted(set(ids) - set(gone))
    assert main(["compact", "--store", str(path)]) == 0  # nothing left to do
    out = json.loads(capsys.readouterr().out)
    assert out["rows_after"] == out["rows_before"]
