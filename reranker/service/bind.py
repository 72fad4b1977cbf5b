"""The HTTP service's bind policy: without an API key (``SDR_SERVICE_API_KEY``) only a loopback
interface may be served, unless the operator says ``insecure`` (``sdr serve --insecure``), which
logs a warning instead."""

from __future__ import annotations

import ipaddress
import logging

from sdr_search.core.errors import SDRError

__all__ = ["is_loopback", "check_bind"]

logger = logging.getLogger("sdr")


def is_loopback(host: str) -> bool:
    """Whether ``host`` names a loopback interface (``localhost``, 127.0.0.0/8, ``::1``)."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # any other host name may resolve to a public interface


def check_bind(host: str, *, has_api_key: bool, insecure: bool) -> None:
    """Refuse a non-loopback bind without an API key unless ``insecure`` (then warn)."""
    if has_api_key or is_loopback(host):
        return
    if not insecure:
        raise SDRError(
            f"refusing to serve on {host} without an API key: set SDR_SERVICE_API_KEY, bind to 127.0.0.1, "
            "or pass --insecure to serve an open API"
        )
    logger.warning("serving on %s WITHOUT an API key (--insecure): anyone who can reach it can query it", host)
