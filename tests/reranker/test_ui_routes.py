"""The /ui page's serving and the two routes it adds to the API (issue 45), without a browser: the page's
files are shipped in the package and load nothing from another origin (so it works offline), they are
served with a Content-Security-Policy of 'self' and without the API key (they hold no data), while
``GET /v1/indices`` and ``GET /v1/indices/{index}/_find`` need it like every /v1 route. The page in a
real browser: ``test_ui_browser.py``.
"""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient

from factories import AS_GIVEN, FakeEncoder
from sdr_search.core.documents import parse_record
from sdr_search.indexer.embedded import EmbeddedStore
from sdr_search.indexer.pipeline import index_documents
from sdr_search.indexer.stats_job import refresh_stats
from sdr_search.reranker.service.app import create_app
from sdr_search.reranker.service.settings import ServiceSettings
from sdr_search.reranker.service.ui import CSP, STATIC_DIR

pytestmark = pytest.mark.unit

KEY = {"X-API-Key": "k-123"}
RECORDS = [
    {"id": "court-1", "title": "Appeal to the high court", "paragraphs": ["The appeal was heard by the court.",
                                                                       "The judges dismissed it."]},
    {"id": "river-1", "title": "A river", "paragraphs": ["The river floods in spring.", "Boats cross it."]},
    {"id": "court-2", "title": "Another appeal", "paragraphs": ["The court allowed the appeal.", "Costs followed."]},
    {"id": "42", "title": "Numbers", "paragraphs": ["Forty two is a number.", "It is even."]},
]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("ui-routes") / "s"
    with EmbeddedStore(path, create=True) as s:
        index_documents(s, [parse_record(r, settings=AS_GIVEN) for r in RECORDS], FakeEncoder())
        refresh_stats(s, exact=True, sample_size=20, seed=0)
    with EmbeddedStore(path) as s:
        yield s


@pytest.fixture()
def client(store):
    with TestClient(create_app(stores={"default": store}, settings=ServiceSettings(api_key="k-123"))) as c:
        yield c


def test_the_page_is_shipped_and_loads_nothing_from_elsewhere():
    names = sorted(p.name for p in STATIC_DIR.iterdir())
    assert names == ["app.css", "app.js", "index.html"]
    html = (STATIC_DIR / "index.html").read_text(encoding="utf-8")
    assert re.findall(r'(?:src|href)="([^"]+)"', html) == ["data:,", "app.css", "app.js"]
    for name in names:  # no URL of another origin anywhere (no CDN, no web font, no analytics)
        text = (STATIC_DIR / name).read_text(encoding="utf-8")
        assert not re.search(r"(?:https?:)?//[\w.-]+\.[a-z]{2,}", text), name
        assert "@import" not in text and "url(" not in text, name
    assert "<script>" not in html and "style=" not in html  # nothing inline: the CSP forbids it


def test_the_page_is_served_without_the_key_with_a_strict_policy(client):
    r = client.get("/ui", follow_redirects=False)
    assert r.status_code == 307 and r.headers["location"] == "/ui/"
    for path, kind in (("/ui/", "text/html"), ("/ui/app.js", "text/javascript"), ("/ui/app.css", "text/css")):
        r = client.get(path)
        assert r.status_code == 200 and r.headers["content-type"].startswith(kind), path
        assert r.headers["content-security-policy"] == CSP
        assert "connect-src 'self'" in CSP and "default-src 'none'" in CSP
        assert r.headers["x-content-type-options"] == "nosniff"
    assert client.get("/ui/../openapi.json").status_code in (200, 404)  # never a file outside the folder
    assert client.get("/ui/%2e%2e/ui.py").status_code == 404  # ui.py lies next to static/


def test_the_page_can_be_turned_off(store):
    with TestClient(create_app(stores={"default": store}, settings=ServiceSettings(api_key=None, ui=False))) as c:
        assert c.get("/ui/").status_code == 404
        assert c.get("/v1/indices").json() == {"indices": ["default"]}


def test_the_page_routes_need_the_key(client):
    assert client.get("/v1/indices").status_code == 401
    assert client.get("/v1/indices/default/_find", params={"q": "court"}).status_code == 401
    assert client.get("/v1/indices", headers=KEY).json() == {"indices": ["default"]}


def test_find_gives_the_id_then_bm25_matches(client):
    r = client.get("/v1/indices/default/_find", params={"q": "court-2", "size": 3}, headers=KEY)
    assert r.status_code == 200, r.text
    hits = r.json()["hits"]
    assert hits[0] == {"id": "court-2", "title": "Another appeal", "match": "id"}
    assert all(h["match"] == "text" and h["score"] > 0 for h in hits[1:]) and len(hits) <= 3
    r = client.get("/v1/indices/default/_find", params={"q": "appeal court"}, headers=KEY)
    ids = [h["id"] for h in r.json()["hits"]]
    assert set(ids) == {"court-1", "court-2"}  # only documents holding the words
    assert client.get("/v1/indices/default/_find", params={"q": "42"}, headers=KEY).json()["hits"][0]["id"] == "42"
    assert client.get("/v1/indices/default/_find", params={"q": "zebra"}, headers=KEY).json()["hits"] == []
    # typed with white space around it, an id is still found (the box's words, stripped)
    assert client.get("/v1/indices/default/_find", params={"q": " court-2 "}, headers=KEY).json()["hits"][0] == {
        "id": "court-2", "title": "Another appeal", "match": "id"}
    assert [h["match"] for h in client.get("/v1/indices/default/_find", params={"q": "river"},
                                           headers=KEY).json()["hits"]] == ["text"]


@pytest.mark.parametrize("params, field", [({"q": "   "}, "q"), ({"q": "x", "size": 0}, "size"), ({"q": "x", "size": 51}, "size"),
                                            ({}, "q")])
def test_find_refuses_bad_parameters_naming_them(client, params, field):
    r = client.get("/v1/indices/default/_find", params=params, headers=KEY)
    assert r.status_code == 422, r.text
    assert field in r.json()["error"]["message"]


def test_find_in_an_unknown_index_is_404(client):
    r = client.get("/v1/indices/nope/_find", params={"q": "x"}, headers=KEY)
    assert r.status_code == 404 and "nope" in r.json()["error"]["message"]
