"""Provenance recorded with an index: which model, encoder settings, segmentation and library
versions produced its vectors (:class:`sdr_search.indexer.store.IndexMeta`)."""

from __future__ import annotations

import logging
import platform
from datetime import datetime, timezone
from importlib import metadata
from typing import TYPE_CHECKING, Any, Mapping

from .store import IndexMeta

if TYPE_CHECKING:  # pragma: no cover - typing only
    from sdr_search.core.encoder import SentenceEncoder
    from sdr_search.core.settings import SegmentationSettings

__all__ = ["library_versions", "index_meta", "segmentation_record", "segmentation_mismatch"]

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


def segmentation_record(settings: "SegmentationSettings", splitter_source: str) -> dict[str, Any]:
    """What an index records of how its documents were segmented (queries follow it)."""
    return {**settings.recorded(), "splitter": splitter_source}


def segmentation_mismatch(recorded: Mapping[str, Any] | None, wanted: Mapping[str, Any]) -> str | None:
    """Why documents segmented as ``wanted`` cannot join an index that recorded ``recorded``, or
    None when they can. A field the index did not record (built before it existed) reads as the
    value that index was built with, so old indexes keep taking documents segmented as they were."""
    from sdr_search.core.settings import SegmentationSettings

    if not recorded:
        return None

    def full(r: Mapping[str, Any]) -> dict[str, Any]:
        return {**r, **SegmentationSettings.from_recorded(r).recorded()}

    have, want = full(recorded), full(wanted)
    if have == want:
        return None
    diff = ", ".join(f"{k}={have.get(k)!r} (not {want.get(k)!r})" for k in sorted(set(have) | set(want))
                     if have.get(k) != want.get(k))
    return f"was built with segmentation {diff}"


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
