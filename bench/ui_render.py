"""How long the /ui page takes to open the IRLeD judgment with the most paragraphs against a long hit,
in headless chromium (Debian's, through chromium-driver, as the tests drive it).

Builds (once, with an embedding cache) an embedded store of IRLeD judgments: the one with the most
SDR paragraphs under the default segmentation (prior_case_1047: 560 paragraphs, 5,305 sentences), the
second (prior_case_1239: 421 paragraphs) and ``--others`` more. Serves it with ``sdr serve``, searches
by id for the largest, opens its hit ``--hit`` (default: the second largest) and reads what the page
records:

- ``open_ms``: from the click on Open to the first frame drawn after the compare view is built: the
  API call with ``explain_matrix`` (the server computes the 560 x 421 matrix), the two documents'
  reads, the JSON parsing, building both documents (981 paragraphs), the heat map and the first
  selection;
- ``render_ms``: the page's own part of it (from the answers in hand to that frame);
- ``api_ms``: the same ``explain_matrix`` request timed alone from Python, with its body size, and
  ``api_without_matrix_ms``: the request without ``explain_matrix`` (the query and its explanation);
- ``click_ms``: a click on a heat-map cell to the next frame (marking both sentences, scrolling both
  documents), and ``click_in_view_ms``: to the frame where both marked sentences are in view (the
  paragraphs off screen are drawn as they come into view, so the scroll is set again over a few
  frames), over ``--clicks`` cells spread over the matrix: median and max.

    python bench/ui_render.py [--work runs/ui-bench] [--repeat 3] [--clicks 20] [--hit prior_case_1239]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO.parent / "shared" / "data" / "irled" / "corpus.jsonl.gz"
SOURCE, SECOND = "prior_case_1047", "prior_case_1239"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def build(work: Path, others: int) -> Path:
    """The store (built when missing): the two largest judgments and ``others`` judgments of 60 to 150
    paragraph lines, the first in the corpus's order."""
    from sdr_search.core.cache import EmbeddingCache
    from sdr_search.core.encoder import SentenceEncoder
    from sdr_search.core.settings import EncoderSettings
    from sdr_search.indexer.embedded import EmbeddedStore
    from sdr_search.indexer.ingest import index_paths

    store = work / "store"
    if (store / "done").is_file():
        return store
    shutil.rmtree(store, ignore_errors=True)
    picked = []
    with gzip.open(CORPUS, "rt", encoding="utf-8") as lines:
        for line in lines:
            record = json.loads(line)
            if record["id"] in (SOURCE, SECOND) or (len(picked) < others + 2 and 60 <= len(record["paragraphs"]) <= 150):
                picked.append(record)
    picked = [r for r in picked if r["id"] in (SOURCE, SECOND)] + [r for r in picked if r["id"] not in (SOURCE, SECOND)][:others]
    work.mkdir(parents=True, exist_ok=True)
    source = work / "judgments.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in picked), encoding="utf-8")
    t0 = time.perf_counter()
    encoder = SentenceEncoder(settings=EncoderSettings(precision="fp32", device="cpu"))
    with EmbeddingCache(work / "embeddings.sqlite") as cache, EmbeddedStore(store, create=True) as s:
        index_paths(s, [source], encoder=encoder, cache=cache, progress=True)
    (store / "done").write_text("")
    print(f"built {store} ({len(picked)} judgments) in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return store


def chromium():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = os.environ.get("SDR_CHROMIUM") or shutil.which("chromium")
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1360,860",
                "--force-device-scale-factor=1"):
        options.add_argument(arg)
    return webdriver.Chrome(options=options, service=Service(os.environ.get("SDR_CHROMEDRIVER") or shutil.which("chromedriver")))


def wait(driver, script: str, timeout: float = 600.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = driver.execute_script(script)
        if value:
            return value
        time.sleep(0.05)
    raise RuntimeError(f"timed out: {script}")


CLICK = """
const [i, j, done] = [arguments[0], arguments[1], arguments[arguments.length - 1]];
const canvas = document.getElementById('heat');
const cell = Number(canvas.dataset.cell);
const box = canvas.getBoundingClientRect();
const shown = () => [...document.querySelectorAll('mark')].length === 2 && [...document.querySelectorAll('mark')].every(m => {
  const a = m.closest('.doc').getBoundingClientRect(), b = m.getBoundingClientRect();
  return b.top >= a.top - 1 && b.bottom <= a.bottom + 1; });
const t0 = performance.now();
canvas.dispatchEvent(new MouseEvent('click', {bubbles: true, clientX: box.left + (j + 0.5) * cell * box.width / canvas.width,
                                               clientY: box.top + (i + 0.5) * cell * box.height / canvas.height}));
let frame = null;
const check = () => {
  if (frame === null) frame = performance.now() - t0;  // the first frame drawn after the click
  if (shown() || performance.now() - t0 > 3000) {
    done([frame, performance.now() - t0, shown(), document.getElementById('cell').dataset.row, document.getElementById('cell').dataset.col]);
  } else requestAnimationFrame(check);
};
requestAnimationFrame(check);
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, default=REPO / "runs" / "ui-bench")
    ap.add_argument("--others", type=int, default=6)
    ap.add_argument("--hit", default=SECOND)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--clicks", type=int, default=20)
    args = ap.parse_args()
    store = build(args.work, args.others)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if k != "SDR_SERVICE_API_KEY"}
    log = (args.work / "server.log").open("wb")
    server = subprocess.Popen([sys.executable, "-m", "sdr_search", "serve", "--store", str(store), "--port", str(port),
                               "--precision", "fp32", "--device", "cpu"], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    driver = None
    try:
        for _ in range(600):
            try:
                if httpx.get(f"{base}/health", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.5)
        listed = httpx.post(f"{base}/v1/indices/default/more_like_this", json={"id": SOURCE, "size": 10, "explain": True},
                            timeout=600).json()
        rank = [h["id"] for h in listed["hits"]].index(args.hit)
        body = {"id": SOURCE, "size": 1, "from": rank, "explain": True, "explain_matrix": True}
        api, plain = [], []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            httpx.post(f"{base}/v1/indices/default/more_like_this", json={**body, "explain_matrix": False},
                       timeout=600).raise_for_status()
            t1 = time.perf_counter()
            r = httpx.post(f"{base}/v1/indices/default/more_like_this", json=body, timeout=600)
            api.append((time.perf_counter() - t1) * 1e3)
            plain.append((t1 - t0) * 1e3)
        r.raise_for_status()
        matrix = r.json()["hits"][0]["explanation"]["matrix"]
        n, m = len(matrix["rows"]), len(matrix["columns"])

        driver = chromium()
        driver.get(f"{base}/ui/")
        wait(driver, "return document.body.dataset.ready === '1'")
        driver.find_element("id", "source-id").send_keys(SOURCE)
        driver.find_element("id", "search").click()
        wait(driver, "return document.body.dataset.searched && document.body.dataset.busy === '0'")
        opened, rendered = [], []
        for _ in range(args.repeat):
            before = driver.execute_script("return document.body.dataset.openMs || ''")
            driver.find_elements("css selector", "#hits li.hit button.open")[rank].click()
            wait(driver, f"return document.body.dataset.busy === '0' && (document.body.dataset.openMs || '') !== '{before}'")
            shown = driver.execute_script("return document.getElementById('error').hidden ? null : document.getElementById('error').textContent")
            if shown:
                raise RuntimeError(f"the page shows an error: {shown}")
            opened.append(float(driver.execute_script("return document.body.dataset.openMs")))
            rendered.append(float(driver.execute_script("return document.body.dataset.renderMs")))
            paragraphs = driver.execute_script("return document.querySelectorAll('.doc .para').length")
            driver.find_element("id", "back").click()
        driver.find_elements("css selector", "#hits li.hit button.open")[rank].click()
        wait(driver, "return document.body.dataset.busy === '0' && !document.getElementById('compare-view').hidden")
        clicks, settled = [], []
        for c in range(args.clicks):
            i, j = (c * 7919) % n, (c * 104729) % m
            frame, until, seen, row, col = driver.execute_async_script(CLICK, i, j)
            assert (int(row), int(col)) == (i, j), (row, col, i, j)
            if not seen:
                raise RuntimeError(f"cell {i}, {j}: the two sentences not in view 3 s after the click")
            clicks.append(frame)
            settled.append(until)
        out = {
            "source": SOURCE, "hit": args.hit, "matrix": f"{n} x {m}", "cells": n * m, "paragraphs_shown": paragraphs,
            "body_mb": round(len(r.content) / 1e6, 2),
            "api_ms": [round(x) for x in api], "api_without_matrix_ms": [round(x) for x in plain],
            "open_ms": [round(x) for x in opened], "render_ms": [round(x) for x in rendered],
            "open_ms_median": round(statistics.median(opened)), "render_ms_median": round(statistics.median(rendered)),
            "click_ms_median": round(statistics.median(clicks), 1), "click_ms_max": round(max(clicks), 1),
            "click_in_view_ms_median": round(statistics.median(settled), 1), "click_in_view_ms_max": round(max(settled), 1),
            "chromium": driver.capabilities.get("browserVersion"), "cores": os.cpu_count(),
            "load_average": [round(x, 2) for x in os.getloadavg()],
        }
        print(json.dumps(out))
    finally:
        if driver is not None:
            driver.quit()
        server.terminate()
        server.wait(30)
        log.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
