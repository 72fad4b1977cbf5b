"""Provenance recorded with an index: which model, encoder settings, segmentation and library
versions produced its vectors (:class:`indexer.store.IndexMeta`)."""

from __future__ import annotations

import logging
import platform
from datetime import datetime, timezone
from importlib import metadata
from typing import TYPE_CHECKING, Any, Mapping

from .store import IndexMeta

if TYPE_CHECKING:  # pragma: no cover - typing only
    from sdr_core.encoder import SentenceEncoder

__all__ = ["library_versions", "index_meta"]

logger = logging.getLogger(__name__)

# Display name -> distribution names to try, first found wins (faiss ships under several names).
_DISTRIBUTIONS: dict[str, tuple[str, ...]] = {
    "sdr-search": ("sdr-search",),
    "numpy": ("numpy",),
    "faiss": ("faiss-cpu", "faiss-gpu", "faiss-gpu-cu12", "faiss-gpu-cu11", "faiss"),
    "torch": ("torch",),
    "transformers": ("transformers",),
}


def _installed_version(names: tuple[str, ...]) -> str | None:
    for name in names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def library_versions() -> dict[str, str]:
    """Versions of the libraries that shape stored vectors and indexes, plus Python's.

    Read from installed package metadata (:func:`importlib.metadata.version`), so nothing heavy
    (torch) is imported. Libraries that are not installed are left out.
    """
    versions = {"python": platform.python_version()}
    for label, names in _DISTRIBUTIONS.items():
        found = _installed_version(names)
        if found is None:
            logger.debug("%s is not installed; not recorded", label)
        else:
            versions[label] = found
    return versions


def index_meta(encoder: "SentenceEncoder", segmentation: Mapping[str, Any]) -> IndexMeta:
    """The :class:`IndexMeta` of an index built with ``encoder`` and ``segmentation`` settings."""
    return IndexMeta(
        model_id=encoder.model_id,
        encoder_tag=encoder.cache_tag,
        dim=encoder.dim,
        segmentation=dict(segmentation),
        versions=library_versions(),
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        model_dir=str(encoder.model_dir) if encoder.settings.model is not None else None,
    )
