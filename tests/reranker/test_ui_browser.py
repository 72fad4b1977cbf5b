"""The "more like this" page (/ui, issue 45) in a real browser: headless chromium (Debian's package,
driven by Selenium through chromium-driver) against a real ``sdr serve`` subprocess with an API key,
over a small embedded store built with the real default encoder. Every check compares what the
page shows with what the HTTP API answers for the same request (called here with httpx):

- the page loads from the server alone (no other origin) with no console error;
- a search by id (picked from the title search) and by text lists the API's hits, same ids, same order;
- an opened hit's heat map has one cell per paragraph pair with the API's N_ij, and a click on a cell
  or on an explained sentence pair highlights, in both documents, the sentences at the API's offsets;
- like / unlike rank again as the API does;
- API errors (bad filter, unknown id, 429, 401) are shown as the API's message; the key is enforced.

Each view is saved as a screenshot under runs/test-artifacts/ui/; with SDR_UI_SCREENSHOTS=docs/images
the same pictures are written there for the README's tour.
"""

from __future__ import annotations

import gzip
import json
import os
import socket
import threading

import httpx
import pytest
from selenium.webdriver.support.ui import Select

from browser_harness import console_problems, screenshot, start_chromium, wait_for
from conftest import SHARED_DATA, running_server

pytestmark = pytest.mark.integration

API_KEY = "ui-test-key-0123456789"
MLT = "/v1/indices/default/more_like_this"

WIKI = SHARED_DATA / "wiki" / "articles-00.jsonl.gz"
# 15 short Wikipedia articles (500-900 words, 450 sentences in all) of three subjects, read from the shared
# data at test time
ARTICLES = {
    "law": ["wiki_7202", "wiki_5919", "wiki_795", "wiki_2665", "wiki_643"],
    "baseball": ["wiki_3809", "wiki_3807", "wiki_6725", "wiki_3859", "wiki_3860"],
    "politics": ["wiki_5332", "wiki_3679", "wiki_3697", "wiki_5462", "wiki_3698"],
}
TEXT = ("An appeal was lodged against the judgment of the trial court. The appellate court reviewed the record "
        "for errors of law and did not hear the witnesses again.\n\n"
        "A sworn written statement of the facts was filed with the court.")


def _records() -> list[dict]:
    """The articles as records (sections), each with its subject as metadata."""
    if not WIKI.is_file():
        pytest.fail(f"the page's test articles come from the shared data, not found: {WIKI}", pytrace=False)
    subject = {doc_id: topic for topic, ids in ARTICLES.items() for doc_id in ids}
    found = {}
    with gzip.open(WIKI, "rt", encoding="utf-8") as lines:
        for line in lines:
            doc_id = line[len('{"id": "'):line.find('"', len('{"id": "'))]
            if doc_id in subject:
                record = json.loads(line)
                found[doc_id] = {**record, "metadata": {"subject": subject[doc_id]}}
    assert set(found) == set(subject), set(subject) - set(found)
    return [found[doc_id] for doc_id in subject]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory, encoder):
    """`sdr serve` over the 15 articles, with an API key and one compute slot, no queue (so a second
    concurrent query answers 429 at once)."""
    from sdr_search.indexer.embedded import EmbeddedStore
    from sdr_search.indexer.ingest import index_paths

    tmp = tmp_path_factory.mktemp("ui")
    path = tmp / "store"
    articles = tmp / "articles.jsonl"
    articles.write_text("".join(json.dumps(r) + "\n" for r in _records()), encoding="utf-8")
    with EmbeddedStore(path, create=True) as store:  # as `sdr index` does: default segmentation, then statistics
        index_paths(store, [articles], encoder=encoder)
    env = {**os.environ, "SDR_SERVICE_API_KEY": API_KEY, "SDR_SERVICE_MAX_CONCURRENCY": "1",
           "SDR_SERVICE_MAX_QUEUE": "0", "SDR_CACHE_DIR": str(tmp / "cache")}
    with running_server(["serve", "--store", str(path), "--precision", "fp32", "--device", "cpu"], _free_port(),
                        tmp / "server.log", env) as base:
        yield base


@pytest.fixture(scope="module")
def client(server):
    with httpx.Client(base_url=server, headers={"X-API-Key": API_KEY}, timeout=120) as c:
        yield c


@pytest.fixture(scope="module")
def browser():
    driver = start_chromium()
    yield driver
    driver.quit()


@pytest.fixture()
def page(browser, server):
    """The page, opened with the API key in the tab's session storage (as after typing it once), ready."""
    browser.get(f"{server}/ui/")
    browser.execute_script("sessionStorage.clear(); sessionStorage.setItem('sdr-search.api-key', arguments[0]);", API_KEY)
    browser.get(f"{server}/ui/")
    wait_for("the page to load the indices", lambda: browser.execute_script("return document.body.dataset.ready"),
             driver=browser)
    browser.get_log("browser")  # what the first visit logged is not this test's
    return browser


# -- helpers: what the page shows ------------------------------------------------------------------------
def _js(driver, script, *args):
    return driver.execute_script(script, *args)


def _search(driver, *, source_id=None, text=None, method="", filter_=None, size=10) -> None:
    """Fill the form like a user (method "": the index's default) and run the search; returns once
    the page shows its answer."""
    before = _js(driver, "return document.body.dataset.searched || '0'")
    kind = "id" if source_id is not None else "text"
    driver.find_element("css selector", f"input[name=kind][value={kind}]").click()
    if source_id is not None:
        box = driver.find_element("id", "source-id")
        box.clear()
        box.send_keys(source_id)
    else:
        box = driver.find_element("id", "source-text")
        box.clear()
        _js(driver, "arguments[0].value = arguments[1];", box, text)  # exactly as given (send_keys types line breaks)
    Select(driver.find_element("id", "method")).select_by_value(method)
    f = driver.find_element("id", "filter")
    f.clear()
    if filter_ is not None:
        f.send_keys(filter_)
    s = driver.find_element("id", "size")
    s.clear()
    s.send_keys(str(size))
    driver.find_element("id", "search").click()
    _wait_answered(driver, before)


def _wait_answered(driver, before: str) -> None:
    wait_for("the search to answer", lambda: _js(
        driver, "return document.body.dataset.busy === '0' && ((document.body.dataset.searched || '0') !== arguments[0]"
        " || !document.getElementById('error').hidden)", before), driver=driver)


def _shown_hits(driver) -> list[dict]:
    return _js(driver, """return [...document.querySelectorAll('#hits li.hit')].map(li => ({
        id: li.dataset.id, title: li.querySelector('.open-title').textContent,
        score: li.querySelector('.score').textContent}));""")


def _shown_error(driver) -> tuple[str, str] | None:
    shown = _js(driver, """const e = document.getElementById('error');
        return e.hidden ? null : [document.getElementById('error-status').textContent,
                                  document.getElementById('error-message').textContent];""")
    return tuple(shown) if shown else None


def _api(client, body: dict) -> dict:
    r = client.post(MLT, json=body)
    assert r.status_code == 200, r.text
    return r.json()


def _assert_same_hits(shown, answer) -> None:
    assert [h["id"] for h in shown] == [h["id"] for h in answer["hits"]]
    assert [h["title"] for h in shown] == [h.get("title") or h["id"] for h in answer["hits"]]
    assert [h["score"] for h in shown] == [f"{h['score']:.4f}" for h in answer["hits"]]


# -- the page --------------------------------------------------------------------------------------------
def test_the_page_loads_from_the_server_alone_with_no_console_error(page, server):
    assert _js(page, "return document.getElementById('index').value") == "default"
    # everything the page loaded came from this server: no CDN, nothing that needs a network
    loaded = _js(page, "return [location.href, ...performance.getEntriesByType('resource').map(e => e.name)]")
    assert all(u.startswith(server + "/") for u in loaded), loaded
    assert {u.rsplit("/", 1)[-1] for u in loaded} >= {"app.js", "app.css", "indices"}
    assert _shown_error(page) is None
    assert console_problems(page) == []
    screenshot(page, "start", readme=False)


def test_search_by_id_picked_from_the_title_search_lists_the_api_hits(page, client):
    box = page.find_element("id", "source-id")
    box.send_keys("appeal court judges")
    wait_for("suggestions", lambda: _js(page, "return !document.getElementById('suggestions').hidden"), driver=page)
    shown = _js(page, "return [...document.querySelectorAll('#suggestions li')].map(li => li.dataset.id)")
    found = client.get("/v1/indices/default/_find", params={"q": "appeal court judges", "size": 8}).json()
    assert shown == [h["id"] for h in found["hits"]] and shown, found
    page.find_elements("css selector", "#suggestions li")[0].click()
    assert box.get_attribute("value") == shown[0]
    before = _js(page, "return document.body.dataset.searched || '0'")
    page.find_element("id", "search").click()
    _wait_answered(page, before)
    answer = _api(client, {"id": shown[0], "size": 10, "explain": True})
    _assert_same_hits(_shown_hits(page), answer)
    # each hit's signals: weight x normalised, as the API's explanation gives them
    parts = _js(page, """return [...document.querySelectorAll('#hits li.hit')].map(li =>
        Object.fromEntries([...li.querySelectorAll('.signal')].map(s => [s.dataset.signal, Number(s.dataset.part)])));""")
    for shown_parts, hit in zip(parts, answer["hits"]):
        signals = hit["explanation"]["hybrid"]["signals"]
        total = sum(s["weight"] for s in signals.values())
        for name, s in signals.items():
            assert shown_parts[name] == pytest.approx(s["weight"] * (s.get("normalised") or 0.0) / total, abs=1e-12)
    assert console_problems(page) == []
    screenshot(page, "results")


def test_search_by_text_lists_the_api_hits(page, client):
    _search(page, text=TEXT, method="sdr", size=6)
    _assert_same_hits(_shown_hits(page), _api(client, {"text": TEXT, "method": "sdr", "size": 6, "explain": True}))
    _search(page, text=TEXT)  # hybrid, the index's default
    _assert_same_hits(_shown_hits(page), _api(client, {"text": TEXT, "size": 10, "explain": True}))
    assert console_problems(page) == []


def _open(driver, rank: int) -> None:
    before = _js(driver, "return document.body.dataset.openMs || ''")
    driver.find_elements("css selector", "#hits li.hit button.open")[rank].click()
    wait_for("the hit to open", lambda: _js(
        driver, "return document.body.dataset.busy === '0' && document.body.dataset.openMs !== arguments[0]"
        " && !document.getElementById('compare-view').hidden", before), driver=driver)


def _marks(driver) -> dict:
    """The two marked sentences, once both are scrolled into view (paragraphs off screen are drawn as they
    come into view, so the page sets the scroll again over a few frames)."""
    wait_for("the marked sentences in view", lambda: _js(driver, """const ms = [...document.querySelectorAll('mark')];
        return ms.length === 2 && ms.every(m => { const a = m.closest('.doc').getBoundingClientRect(), b = m.getBoundingClientRect();
                                                  return b.top >= a.top - 1 && b.bottom <= a.bottom + 1; });"""), timeout=5,
             driver=driver)
    return _js(driver, """const out = {};
        for (const m of document.querySelectorAll('mark')) {
          const pane = m.closest('.doc');
          const a = pane.getBoundingClientRect(), b = m.getBoundingClientRect();
          out[m.className] = {text: m.textContent, start: Number(m.dataset.start), end: Number(m.dataset.end),
                              visible: b.top >= a.top - 1 && b.bottom <= a.bottom + 1};
        }
        return out;""")


def test_an_opened_hit_shows_the_api_matrix_and_highlights_by_offsets(page, client):
    from selenium.webdriver.common.action_chains import ActionChains

    _search(page, source_id="wiki_7202", method="sdr")
    listed = _api(client, {"id": "wiki_7202", "method": "sdr", "size": 10, "explain": True})
    _assert_same_hits(_shown_hits(page), listed)
    _open(page, 1)
    answer = _api(client, {"id": "wiki_7202", "method": "sdr", "size": 1, "from": 1, "explain": True, "explain_matrix": True})
    hit = answer["hits"][0]
    assert hit["id"] == listed["hits"][1]["id"] == _js(page, "return document.body.dataset.opened")
    mx = hit["explanation"]["matrix"]
    source_text = client.get("/v1/indices/default/documents/wiki_7202").json()["text"]
    hit_text = client.get(f"/v1/indices/default/documents/{hit['id']}").json()["text"]
    canvas = page.find_element("id", "heat")
    rows, columns, cell = (int(canvas.get_attribute(f"data-{k}")) for k in ("rows", "columns", "cell"))
    assert (rows, columns) == (len(mx["rows"]), len(mx["columns"])) and rows >= 3 and columns >= 2
    # both documents, paragraph by paragraph, as their stored texts cut at the API's offsets
    shown_rows = _js(page, "return [...document.querySelectorAll('#source-doc .para')].map(p => p.textContent)")
    assert shown_rows == [source_text[r["sentences"][0][0]:r["sentences"][-1][1]] for r in mx["rows"]]
    shown_cols = _js(page, "return [...document.querySelectorAll('#hit-doc .para')].map(p => p.textContent)")
    assert len(shown_cols) == columns
    assert screenshot(page, "compare")
    # every cell: a click shows its N_ij and marks its best sentence pair in both documents, by offsets
    origin = canvas.size
    for i in range(rows):
        for j in range(columns):
            ActionChains(page).move_to_element_with_offset(
                canvas, (j + 0.5) * cell - origin["width"] / 2, (i + 0.5) * cell - origin["height"] / 2).click().perform()
            detail = page.find_element("id", "cell")
            assert (int(detail.get_attribute("data-row")), int(detail.get_attribute("data-col"))) == (i, j)
            assert float(detail.get_attribute("data-normalised")) == mx["normalised"][i][j]
            assert f"N = {mx['normalised'][i][j]:.3f}" in detail.text
            k, r, cos = mx["sentence_pairs"][i][j]
            (a0, a1), (b0, b1) = mx["rows"][i]["sentences"][k], mx["columns"][j]["sentences"][r]
            marks = _marks(page)
            assert marks["src"] == {"text": source_text[a0:a1], "start": a0, "end": a1, "visible": True}
            assert marks["hit"] == {"text": hit_text[b0:b1], "start": b0, "end": b1, "visible": True}
            assert f"cos {cos:.3f}" in detail.text
    # the explanation's sentence pairs: a click marks the two sentences at their own offsets
    pairs = page.find_elements("css selector", "#pairs button.sentence-pair")
    explained = [sp for p in hit["explanation"]["paragraph_pairs"] for sp in p["sentence_pairs"]]
    assert len(pairs) == len(explained)
    for button, sp in zip(pairs, explained):
        button.click()
        marks = _marks(page)
        assert marks["src"]["text"] == sp["source_sentence"] == source_text[sp["source_start"]:sp["source_end"]]
        assert (marks["src"]["start"], marks["src"]["end"]) == (sp["source_start"], sp["source_end"])
        assert marks["hit"]["text"] == sp["candidate_sentence"] == hit_text[sp["candidate_start"]:sp["candidate_end"]]
        assert marks["hit"]["visible"] and marks["src"]["visible"]
    assert console_problems(page) == []
    page.find_element("id", "back").click()
    assert [h["id"] for h in _shown_hits(page)] == [h["id"] for h in listed["hits"]]


def test_like_and_unlike_rank_again_as_the_api_does(page, client):
    _search(page, source_id="wiki_3807")
    first = [h["id"] for h in _shown_hits(page)]
    _assert_same_hits(_shown_hits(page), _api(client, {"id": "wiki_3807", "size": 10, "explain": True}))
    before = _js(page, "return document.body.dataset.searched")
    page.find_elements("css selector", "#hits li.hit button.unlike")[0].click()
    _wait_answered(page, before)
    unliked = _api(client, {"like": [{"id": "wiki_3807"}], "unlike": [first[0]], "size": 10, "explain": True})
    _assert_same_hits(_shown_hits(page), unliked)
    assert first[0] not in [h["id"] for h in _shown_hits(page)]
    liked_id = _shown_hits(page)[0]["id"]
    before = _js(page, "return document.body.dataset.searched")
    page.find_elements("css selector", "#hits li.hit button.like")[0].click()
    _wait_answered(page, before)
    both = _api(client, {"like": [{"id": "wiki_3807"}, liked_id], "unlike": [first[0]], "size": 10, "explain": True})
    _assert_same_hits(_shown_hits(page), both)
    assert [h["id"] for h in _shown_hits(page)] != first
    chips = _js(page, "return [...document.querySelectorAll('.chip')].map(c => [c.className, c.dataset.id])")
    assert chips == [["chip like", liked_id], ["chip unlike", first[0]]]
    screenshot(page, "like-unlike")
    # an opened hit of several sources: rows from each like source, placed in its own text
    _open(page, 0)
    hit = _api(client, {"like": [{"id": "wiki_3807"}, liked_id], "unlike": [first[0]], "size": 1, "from": 0,
                        "explain": True, "explain_matrix": True})["hits"][0]
    sources = {r.get("source") for r in hit["explanation"]["matrix"]["rows"]}
    assert sources == {0, 1}
    heads = _js(page, "return [...document.querySelectorAll('#source-doc .source-title')].map(e => e.textContent)")
    assert [h.split(" ", 1)[0] for h in heads] == ["like[0]", "like[1]"]
    page.find_element("id", "back").click()
    # removing the chips goes back to the one source's ranking
    for _ in range(2):
        before = _js(page, "return document.body.dataset.searched")
        page.find_elements("css selector", ".chip button")[0].click()
        _wait_answered(page, before)
    assert [h["id"] for h in _shown_hits(page)] == first
    assert console_problems(page) == []


def test_api_errors_are_shown_as_the_api_message(page, client):
    bad_filter = {"subject": {"nested": 1}}
    r = client.post(MLT, json={"id": "wiki_5919", "size": 10, "filter": bad_filter, "explain": True})
    assert r.status_code == 422
    _search(page, source_id="wiki_5919", filter_=json.dumps(bad_filter))
    assert _shown_error(page) == (f"422 {r.json()['error']['type']}", r.json()["error"]["message"])
    screenshot(page, "error")
    r = client.post(MLT, json={"id": "no-such-case", "size": 10, "explain": True})
    assert r.status_code == 404
    _search(page, source_id="no-such-case")
    assert _shown_error(page) == ("404 DocumentNotFoundError", r.json()["error"]["message"])
    # 429: the server's one compute slot is busy (a long new text is being encoded) and it queues none
    long_text = "\n\n".join(" ".join(f"Sentence {s} of paragraph {k} of a long filing on matter {k * 7 + s}."
                                       for s in range(5)) for k in range(60))
    held, done = [], threading.Event()

    def hold():  # until it runs: a search of the page's may have taken the slot first
        try:
            for _ in range(50):
                r = httpx.post(f"{client.base_url}{MLT}", json={"text": long_text, "size": 1},
                               headers={"X-API-Key": API_KEY}, timeout=300)
                held.append(r.status_code)
                if r.status_code != 429:
                    break
        finally:
            done.set()

    threading.Thread(target=hold, daemon=True).start()
    seen = None
    while not done.is_set():
        _search(page, source_id="wiki_5919")
        seen = _shown_error(page)
        if seen is not None:
            break
    done.wait(300)
    assert held[-1] == 200, held
    assert seen is not None, "the long request ended before a search met it (make it longer)"
    assert seen[0] == "429 OverloadedError" and seen[1].startswith("too many concurrent requests"), seen
    assert seen[1].endswith("(retry after 1 s)"), seen
    assert console_problems(page, expected_statuses=(404, 422, 429)) == []


def test_the_api_key_is_enforced(browser, server, client):
    assert httpx.get(f"{server}/v1/indices").status_code == 401
    assert httpx.post(f"{server}{MLT}", json={"id": "wiki_5919"}).status_code == 401
    assert httpx.get(f"{server}/ui/").status_code == 200  # the page's files hold no data and are public
    message = httpx.get(f"{server}/v1/indices").json()["error"]["message"]
    browser.get(f"{server}/ui/")
    browser.execute_script("sessionStorage.clear();")
    browser.get(f"{server}/ui/")
    wait_for("the 401", lambda: _shown_error(browser), driver=browser)
    assert _shown_error(browser) == ("401 AuthenticationError", message)
    assert _js(browser, "return document.getElementById('index').options.length") == 0
    assert _js(browser, "return document.activeElement.id") == "api-key"
    screenshot(browser, "key")
    key = browser.find_element("id", "api-key")
    key.send_keys("wrong-key")
    browser.find_element("css selector", "#key-form button[type=submit]").click()
    wait_for("the 401 again", lambda: _js(browser, "return document.body.dataset.ready !== '1'") and _shown_error(browser),
             driver=browser)
    assert _shown_error(browser) == ("401 AuthenticationError", message)
    assert _js(browser, "return sessionStorage.getItem('sdr-search.api-key')") == "wrong-key"
    key.send_keys(API_KEY)
    browser.find_element("css selector", "#key-form button[type=submit]").click()
    wait_for("the indices", lambda: _js(browser, "return document.body.dataset.ready === '1'"), driver=browser)
    assert _shown_error(browser) is None
    assert _js(browser, "return document.getElementById('index').value") == "default"
    assert _js(browser, "return sessionStorage.getItem('sdr-search.api-key')") == API_KEY
    assert console_problems(browser, expected_statuses=(401,)) == []
