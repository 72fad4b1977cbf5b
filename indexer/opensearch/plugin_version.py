"""Which sdr plugin this store speaks with: the plugin's version is its protocol.

The plugin (``opensearch-plugin/``) and this package change together: a request field the store sends
(``sdr_candidates``' ``search``, ``sdr_vectors``' ``mean``, ...) is unknown to an older build, which
answers ``400 parsing_exception: [sdr_candidates] does not support [search]``. So the plugin's
descriptor version (``<version>`` in ``opensearch-plugin/pom.xml``, written to
``plugin-descriptor.properties`` and listed by ``_cat/plugins``) is the protocol version, and the store
uses the plugin only when every node's ``sdr`` entry reports exactly :data:`PLUGIN_VERSION`. Bump both
together whenever a request or response of the plugin changes (``tests/indexer/test_plugin_version.py`` checks
that they agree).

What happens otherwise (``SDR_OPENSEARCH_PLUGIN``): ``auto`` runs the Python path and logs, once per
process and node, one warning naming both versions; ``on`` raises :class:`StoreError` naming both and
what to do (:func:`mismatch_message`). A node without the plugin is logged once per process too.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any, Iterable, Literal, Mapping

__all__ = ["PLUGIN_VERSION", "PluginCheck", "check_plugins", "mismatch_message", "log_once"]

PLUGIN_VERSION = "1.5.0"
"""The sdr plugin version (= protocol) this package speaks; equals the version in opensearch-plugin/pom.xml."""

_logged: set[tuple[str, ...]] = set()
_logged_lock = threading.Lock()

PLUGIN_COMPONENT = "sdr"
"""The plugin's name in the node's plugin list (``name`` in its plugin-descriptor.properties)."""


@dataclass(frozen=True)
class PluginCheck:
    """What a node's plugin list says about the sdr plugin: ``state`` 'ok' (every ``sdr`` entry is
    :data:`PLUGIN_VERSION`), 'absent' (no node lists it) or 'mismatch' (some node lists another
    version); ``versions``: the distinct versions listed, sorted."""

    state: Literal["ok", "absent", "mismatch"]
    versions: tuple[str, ...] = ()


def check_plugins(rows: Iterable[Mapping[str, Any]] | None, expected: str | None = None) -> PluginCheck:
    """Check the rows of ``_cat/plugins?format=json&h=component,version`` (one per node and plugin)
    against ``expected`` (default :data:`PLUGIN_VERSION`, read at call time)."""
    want = PLUGIN_VERSION if expected is None else expected
    versions = sorted({str(r.get("version")) for r in rows or [] if str(r.get("component")) == PLUGIN_COMPONENT})
    if not versions:
        return PluginCheck("absent")
    return PluginCheck("ok" if versions == [want] else "mismatch", tuple(versions))


def mismatch_message(url: str, found: Iterable[str], mode: str, expected: str | None = None) -> str:
    """The explanation of a plugin of another version: both versions, and what to do."""
    want = PLUGIN_VERSION if expected is None else expected
    have = ", ".join(found)
    fix = (f"rebuild opensearch-plugin/ from this checkout for the node's exact OpenSearch version "
           f"(mvn package -Dopensearch.version=<node version>; it builds plugin version {want}), reinstall it on every "
           "node (bin/opensearch-plugin remove sdr, then install file://.../sdr-opensearch-plugin-<node version>.zip) "
           "and restart them (docs/opensearch.md)")
    if mode == "on":
        return (f"SDR_OPENSEARCH_PLUGIN=on but the sdr plugin at {url} is version {have} and this sdr-search speaks "
                f"plugin version {want}: {fix}; or set SDR_OPENSEARCH_PLUGIN=auto to run candidates and exact SDR in "
                "Python meanwhile")
    return (f"the sdr plugin at {url} is version {have} but this sdr-search speaks plugin version {want}: candidates "
            f"and exact SDR run in Python (SDR_OPENSEARCH_PLUGIN=auto); to use the plugin, {fix}")


def log_once(log: logging.Logger, level: int, key: tuple[str, ...], msg: str, *args: Any) -> bool:
    """Log ``msg`` once per process for ``key``; True when it was logged now."""
    with _logged_lock:
        if key in _logged:
            return False
        _logged.add(key)
    log.log(level, msg, *args)
    return True
