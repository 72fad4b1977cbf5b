"""The node URLs of an OpenSearch cluster: ``SDR_OPENSEARCH_URL`` / ``--opensearch`` take one URL or
several, comma-separated (``http://a:9200,http://b:9200,http://c:9200``). The client is given them
all: a request whose node cannot be reached (connection refused or reset, or no answer within the
timeout) is sent again to another node, and the failed node is left out for a while
(opensearch-py's transport: see :func:`transport_retries`)."""

from __future__ import annotations

from urllib.parse import urlsplit

from sdr_search.core.errors import InvalidInputError

__all__ = ["parse_urls", "transport_retries"]


def parse_urls(value: str, *, what: str = "SDR_OPENSEARCH_URL") -> list[str]:
    """The node URLs of ``value`` (one URL, or several separated by commas), each checked: scheme
    ``http`` or ``https`` (the same for all), a host, an optional port (1-65535), an optional path
    prefix (a proxy's), no query, fragment or user info (credentials go to ``SDR_OPENSEARCH_USERNAME`` /
    ``_PASSWORD``), no URL twice. :class:`InvalidInputError` naming ``what`` and the faulty entry."""
    if not isinstance(value, str) or not value.strip():
        raise InvalidInputError(f"{what} is empty: give an OpenSearch URL such as http://localhost:9200")
    urls: list[str] = []
    schemes: set[str] = set()
    for k, raw in enumerate(value.split(","), start=1):
        entry = raw.strip()
        where = f"{what} entry {k} ({entry!r})"
        if not entry:
            raise InvalidInputError(f"{what} has an empty entry {k} (two commas, or a comma at an end): {value!r}")
        if "://" not in entry:
            raise InvalidInputError(f"{where} has no scheme: write http://{entry} or https://{entry}")
        try:
            parts = urlsplit(entry)
            port = parts.port
        except ValueError as e:
            raise InvalidInputError(f"{where} is not a URL: {e}") from None
        if parts.scheme not in ("http", "https"):
            raise InvalidInputError(f"{where} has scheme {parts.scheme!r}; OpenSearch is reached over http or https")
        if not parts.hostname:
            raise InvalidInputError(f"{where} has no host")
        if port == 0:
            raise InvalidInputError(f"{where} has port 0 (1-65535)")
        if parts.username is not None or parts.password is not None:
            raise InvalidInputError(f"{where} carries credentials; set SDR_OPENSEARCH_USERNAME and "
                                    "SDR_OPENSEARCH_PASSWORD instead")
        if parts.query or parts.fragment:
            raise InvalidInputError(f"{where} has a query or fragment; a node URL is scheme://host[:port][/prefix]")
        url = entry.rstrip("/")
        if url in urls:
            raise InvalidInputError(f"{where} is given twice")
        schemes.add(parts.scheme)
        urls.append(url)
    if len(schemes) > 1:
        raise InvalidInputError(f"{what} mixes http and https: every node of a cluster is reached the same way")
    return urls


def transport_retries(nodes: int) -> int:
    """How many times opensearch-py's transport sends a request again to another node when its node cannot be
    reached or does not answer in time: once per other node (``nodes - 1``; 0 for one node, where the
    store's own backoff retries are the only ones). The transport marks a failed node dead (left out of
    the rotation, ``dead_timeout`` seconds, doubled at each further failure) and picks the next live node,
    without waiting."""
    return max(0, nodes - 1)
