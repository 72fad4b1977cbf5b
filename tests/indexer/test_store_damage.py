"""A damaged embedded store says so: one line naming the file from the CLI, 503 from the service
(queries and /health), and ``sdr info`` reporting the damage (issue 32, item 4)."""

from __future__ import annotations

import json
import sqlite3

import pytest

from factories import FakeEncoder, make_docs
from sdr_search.cli import main
from sdr_search.indexer.embedded import EmbeddedStore
from sdr_search.indexer.pipeline import index_documents
from sdr_search.indexer.stats_job import refresh_stats

pytestmark = pytest.mark.integration


def _build(path):
    with EmbeddedStore(path, create=True) as store:
        index_documents(store, [d for d, _ in make_docs(30, seed=5)], FakeEncoder())
        refresh_stats(store, exact=True, sample_size=50, seed=0)


def _overwrite_table_page(path, table: str) -> None:
    """Overwrite the first bytes of ``table``'s root page (its b-tree header): the meta table stays
    readable, so the store opens, but every read of ``table`` fails."""
    db = path / "store.sqlite"
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name=?", (table,)).fetchone()[0]
    conn.close()
    with open(db, "r+b") as fh:
        fh.seek((root - 1) * page_size)
        fh.write(b"\xde\xad" * 50)


@pytest.fixture()
def damaged_store(tmp_path):
    path = tmp_path / "s"
    _build(path)
    _overwrite_table_page(path, "documents")
    return path


def test_cli_reports_damage_in_one_line_naming_the_file(damaged_store, caplog, capsys):
    assert main(["mlt", "--store", str(damaged_store), "--id", "d001", "--method", "sdr"]) == 2
    assert "is damaged: store.sqlite" in caplog.text and "Traceback" not in caplog.text
    caplog.clear()
    assert main(["info", "--store", str(damaged_store), "--json"]) == 2
    out = json.loads(capsys.readouterr().out)
    assert "store.sqlite" in out["damaged"] and "documents" not in out


def test_info_reads_every_page_and_reports_damage_a_count_does_not_see(tmp_path, capsys):
    path = tmp_path / "s"
    _build(path)
    _overwrite_table_page(path, "documents_without_stats")  # an index no count or query of info reads
    with EmbeddedStore(path, read_only=True) as store:
        assert store.counts()["documents"] == 30  # the cheap read does not notice
    assert main(["info", "--store", str(path)]) == 2
    assert "DAMAGED" in capsys.readouterr().out


def test_a_vector_file_cut_short_is_damage(tmp_path, caplog):
    path = tmp_path / "s"
    _build(path)
    vec = path / "vectors.float32"
    vec.write_bytes(vec.read_bytes()[: vec.stat().st_size // 2])
    with EmbeddedStore(path, read_only=True) as store:
        with pytest.raises(Exception, match="is damaged: vectors.float32"):
            store.verify()


def test_service_health_and_queries_answer_503_with_the_reason(damaged_store):
    from fastapi.testclient import TestClient

    from sdr_search.reranker.service.app import create_app
    from sdr_search.reranker.service.settings import ServiceSettings

    with EmbeddedStore(damaged_store) as store:
        app = create_app(stores={"default": store}, encoder=FakeEncoder(),
                         settings=ServiceSettings(api_key=None, stats_refresh_delay_s=0))
        with TestClient(app) as client:
            health = client.get("/health")
            assert health.status_code == 503
            assert "is damaged: store.sqlite" in health.json()["indices"]["default"]["error"]
            r = client.post("/v1/indices/default/more_like_this", json={"id": "d001", "method": "sdr"})
            assert r.status_code == 503 and r.json()["error"]["type"] == "StoreDamagedError"
            assert "store.sqlite" in r.json()["error"]["message"]


def test_serve_refuses_to_start_on_a_damaged_store(damaged_store, caplog):
    assert main(["serve", "--store", str(damaged_store), "--port", "0"]) == 2
    assert "is damaged" in caplog.text and "Traceback" not in caplog.text
