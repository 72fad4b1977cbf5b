"""The sdr plugin's version is its protocol (issue 33, item 6): the store reads it from the node's plugin
list and uses the plugin only at the version it speaks (:data:`plugin_version.PLUGIN_VERSION`, equal to
opensearch-plugin/pom.xml's version: tests/indexer/test_plugin_shipping.py). A plugin of another version (a stale
build once answered ``400 parsing_exception: [sdr_candidates] does not support [search]``): with
SDR_OPENSEARCH_PLUGIN=auto the Python path and one warning per process naming both versions; with =on a
StoreError naming both and what to do. A node without the plugin is logged once per process.

On the real node (the default run) the mismatch is made by changing the version the Python side expects,
so the comparison is checked against the node's own answer; the node without the plugin is a stub client,
and the real node's plugin list read for a plugin of another name (or, in a run with SDR_NODE_PLUGIN=0, as it is).
"""

from __future__ import annotations

import logging
import os

import numpy as np
import pytest
from opensearchpy import OpenSearch

from sdr_search.core.errors import StoreError
from sdr_search.core.vectors import DocVectors
from sdr_search.indexer.opensearch import OpenSearchSettings, OpenSearchStore, plugin_version
from sdr_search.indexer.opensearch.plugin_version import PluginCheck, check_plugins
from sdr_search.indexer.store import IndexMeta

LOGGER = "sdr_search.indexer.opensearch.plugin"
STALE = "0.9.0-stale"


@pytest.fixture(autouse=True)
def fresh_log_memory(monkeypatch):
    """Each test starts as a fresh process would: nothing logged yet."""
    monkeypatch.setattr(plugin_version, "_logged", set())


def _records(caplog, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno == level]


# -- the comparison -------------------------------------------------------------------------------------
@pytest.mark.unit
def test_check_plugins_reads_the_version_of_every_node():
    v = plugin_version.PLUGIN_VERSION
    knn = {"component": "opensearch-knn", "version": "2.19.1.0"}
    assert check_plugins([]) == check_plugins(None) == check_plugins([knn]) == PluginCheck("absent")
    assert check_plugins([knn, {"component": "sdr", "version": v}]) == PluginCheck("ok", (v,))
    assert check_plugins([{"component": "sdr", "version": v}] * 3) == PluginCheck("ok", (v,))
    assert check_plugins([{"component": "sdr", "version": "1.0.0"}]) == PluginCheck("mismatch", ("1.0.0",))
    # a cluster in the middle of an upgrade: one node still has the old build
    assert check_plugins([{"component": "sdr", "version": v}, {"component": "sdr", "version": "1.0.0"}]) == \
        PluginCheck("mismatch", tuple(sorted(["1.0.0", v])))
    assert check_plugins([{"component": "sdr", "version": "7"}], expected="7").state == "ok"


# -- a node without the plugin (stub client) ----------------------------------------------------------------
class _Cat:
    def __init__(self, rows):
        self.rows = rows
        self.asked = 0

    def plugins(self, params=None):
        self.asked += 1
        assert params == {"format": "json", "h": "component,version"}
        return self.rows


class _Client:
    def __init__(self, rows):
        self.cat = _Cat(rows)


@pytest.mark.unit
def test_a_node_without_the_plugin_is_logged_once_per_process(caplog):
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    client = _Client([{"component": "opensearch-knn", "version": "2.19.1.0"}])
    for _ in range(3):  # several stores of one process (the service makes one per index), each asking once
        store = OpenSearchStore("http://node-a:9200", index="i", client=client)
        assert not store.has_plugin() and not store.has_plugin()
        assert not store.capabilities.sdr_candidates and not store.capabilities.exact_sdr
        store.close()
        assert not store.has_plugin()  # asked again after close, not logged again
    assert client.cat.asked == 6
    logged = _records(caplog, logging.INFO)
    assert len(logged) == 1 and "http://node-a:9200 has no sdr plugin" in logged[0]
    assert not _records(caplog, logging.WARNING)
    other = OpenSearchStore("http://node-b:9200", index="i", client=client)  # another node: its own line
    assert not other.has_plugin()
    assert len(_records(caplog, logging.INFO)) == 2
    on = OpenSearchStore("http://node-a:9200", index="i", client=client, settings=OpenSearchSettings(plugin="on"))
    with pytest.raises(StoreError, match="has no sdr plugin"):
        on.has_plugin()


@pytest.mark.unit
def test_a_stale_plugin_on_a_stub_node(caplog):
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    client = _Client([{"component": "sdr", "version": "1.0.0"}])
    for _ in range(2):
        store = OpenSearchStore("http://node-a:9200", index="i", client=client)
        assert not store.has_plugin()
    warned = _records(caplog, logging.WARNING)
    assert len(warned) == 1
    assert "1.0.0" in warned[0] and plugin_version.PLUGIN_VERSION in warned[0] and "rebuild" in warned[0]
    on = OpenSearchStore("http://node-a:9200", index="i", client=client, settings=OpenSearchSettings(plugin="on"))
    with pytest.raises(StoreError, match="is version 1.0.0 and this sdr-search speaks plugin version"):
        on.has_plugin()
    off = OpenSearchStore("http://node-a:9200", index="i", client=client, settings=OpenSearchSettings(plugin="off"))
    assert not off.has_plugin() and client.cat.asked == 3  # off never asks


# -- the real node ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def node(opensearch_url):
    """The node's URL and the sdr version its plugin list reports (None: no plugin, only when the run asks
    for a node without it, SDR_NODE_PLUGIN=0)."""
    client = OpenSearch([opensearch_url], timeout=60)
    try:
        rows = client.cat.plugins(params={"h": "component,version", "format": "json"})
    finally:
        client.close()
    versions = {r["version"] for r in rows if r["component"] == "sdr"}
    if not versions and os.environ.get("SDR_NODE_PLUGIN", "1") != "0":
        pytest.fail(f"the node at {opensearch_url} has no sdr plugin; scripts/opensearch-node.sh installs it", pytrace=False)
    assert len(versions) <= 1
    return opensearch_url, next(iter(versions), None)


@pytest.mark.integration
def test_the_test_node_runs_the_plugin_of_this_checkout(node):
    url, version = node
    if version is None:
        pytest.skip("SDR_NODE_PLUGIN=0: a node without the plugin")
    assert version == plugin_version.PLUGIN_VERSION, (
        f"the node at {url} runs sdr plugin {version}, this checkout builds {plugin_version.PLUGIN_VERSION}: "
        "scripts/opensearch-node.sh restart loads the current build")
    store = OpenSearchStore(url, index="sdr-test-version-unused")
    try:
        assert store.has_plugin() and store.capabilities.exact_sdr and store.capabilities.sdr_candidates
    finally:
        store.close()


@pytest.mark.integration
def test_another_plugin_version_on_the_real_node(node, os_index, monkeypatch, caplog):
    """The node's real answer against an expected version that differs: auto falls back with one warning per
    process naming both versions; on refuses with both and what to do; the plugin's own requests are refused
    by the store before they reach the node."""
    url, version = node
    if version is None:
        pytest.skip("SDR_NODE_PLUGIN=0: a node without the plugin")
    monkeypatch.setattr(plugin_version, "PLUGIN_VERSION", STALE)
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    name = os_index("sdr-test-version")
    stores = [OpenSearchStore(url, index=name) for _ in range(3)]
    try:
        stores[0].ensure_meta(IndexMeta("model-a", "tag-a", 16, {"paragraph_unit": "paragraph"}, {}))
        # written as for a node without the plugin: the vectors keep their base64 copy
        assert stores[0]._indices.read().vectors == "b64"
        for store in stores:
            assert not store.has_plugin()
            caps = store.capabilities
            assert not caps.sdr_candidates and not caps.exact_sdr and caps.filtered_knn
        warned = _records(caplog, logging.WARNING)
        assert len(warned) == 1, warned
        assert f"is version {version} but this sdr-search speaks plugin version {STALE}" in warned[0]
        assert "run in Python" in warned[0] and "rebuild opensearch-plugin/" in warned[0]
        assert not [m for m in _records(caplog, logging.INFO) if "no sdr plugin" in m]  # not also logged as absent
        source = DocVectors(np.eye(1, 16, dtype=np.float32), np.array([0, 1]))
        with pytest.raises(StoreError, match=f"capabilities: version {version}, not {STALE}"):
            stores[0].sdr_candidates(source, 5, 10)
    finally:
        for store in stores:
            store.close()
    on = OpenSearchStore(url, index="sdr-test-version-unused", settings=OpenSearchSettings(plugin="on"))
    try:
        with pytest.raises(StoreError) as info:
            on.has_plugin()
        message = str(info.value)
        assert f"SDR_OPENSEARCH_PLUGIN=on but the sdr plugin at {url} is version {version}" in message
        assert f"speaks plugin version {STALE}" in message
        assert "-Dopensearch.version=" in message and "reinstall it on every node" in message
        assert "restart" in message
    finally:
        on.close()


@pytest.mark.integration
def test_a_real_node_without_the_plugin_is_logged_once(node, caplog, monkeypatch):
    """The node's own plugin list, read as a node without the plugin would answer it: when the test node
    has the plugin, the store looks for a component of another name (a run with SDR_NODE_PLUGIN=0 has none)."""
    url, version = node
    if version is not None:
        monkeypatch.setattr(plugin_version, "PLUGIN_COMPONENT", "sdr-not-installed")
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    for _ in range(2):
        store = OpenSearchStore(url, index="sdr-test-version-unused")
        assert not store.has_plugin()
        store.close()
    assert len(_records(caplog, logging.INFO)) == 1
