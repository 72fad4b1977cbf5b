"""SDR_OPENSEARCH_URL / --opensearch with one node URL or a cluster's, comma-separated: parsed, checked,
and every node handed to the client (issue 43 item 3a)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from sdr_search.core.errors import InvalidInputError
from sdr_search.indexer.opensearch import OpenSearchSettings, OpenSearchStore
from sdr_search.indexer.opensearch.hosts import parse_urls, transport_retries

pytestmark = pytest.mark.unit


def test_one_url_and_several():
    assert parse_urls("http://localhost:9200") == ["http://localhost:9200"]
    assert parse_urls(" http://a:9200 , http://b:9201/,http://c:9202 ") == ["http://a:9200", "http://b:9201", "http://c:9202"]
    assert parse_urls("https://search.example.com/os") == ["https://search.example.com/os"]
    assert parse_urls("http://[::1]:9200") == ["http://[::1]:9200"]


@pytest.mark.parametrize("value, says", [
    ("", "is empty"),
    ("  ", "is empty"),
    ("http://a:9200,,http://b:9200", "empty entry 2"),
    ("http://a:9200,", "empty entry 2"),
    ("localhost:9200", "no scheme: write http://localhost:9200"),
    ("http://a:9200,b:9200", "entry 2 ('b:9200') has no scheme"),
    ("ftp://a:9200", "scheme 'ftp'"),
    ("http://:9200", "no host"),
    ("http://a:99999", "not a URL"),
    ("http://a:port", "not a URL"),
    ("http://a:0", "port 0"),
    ("http://user:pw@a:9200", "SDR_OPENSEARCH_USERNAME"),
    ("http://a:9200/?pretty", "query or fragment"),
    ("http://a:9200,http://a:9200/", "given twice"),
    ("http://a:9200,https://b:9200", "mixes http and https"),
])
def test_bad_urls_are_refused_by_name(value, says):
    with pytest.raises(InvalidInputError, match="SDR_OPENSEARCH_URL") as e:
        parse_urls(value)
    assert says in str(e.value)


def test_settings_check_the_env_url(monkeypatch):
    monkeypatch.setenv("SDR_OPENSEARCH_URL", "http://a:9200, http://b:9200")
    assert OpenSearchSettings().url == "http://a:9200,http://b:9200"
    monkeypatch.setenv("SDR_OPENSEARCH_URL", "a:9200")
    with pytest.raises(ValidationError, match="no scheme"):
        OpenSearchSettings()


def test_the_store_refuses_a_bad_url_before_connecting():
    with pytest.raises(InvalidInputError, match="entry 2"):
        OpenSearchStore("http://a:9200,nohost", index="x")


def test_the_client_gets_every_node_and_retries_on_the_others():
    store = OpenSearchStore("http://127.0.0.1:1,http://127.0.0.1:2,http://127.0.0.1:3", index="x",
                            settings=OpenSearchSettings(dead_timeout=7))
    transport = store._os().transport
    assert sorted(c.host for c in transport.connection_pool.connections) == [f"http://127.0.0.1:{p}" for p in (1, 2, 3)]
    assert transport.max_retries == 2 and transport.retry_on_timeout
    assert transport.connection_pool.dead_timeout == 7
    store.close()
    one = OpenSearchStore("http://127.0.0.1:1", index="x")
    assert one._os().transport.max_retries == 0  # one node: only the store's backoff retries
    one.close()
    assert [transport_retries(n) for n in (1, 2, 3)] == [0, 1, 2]
