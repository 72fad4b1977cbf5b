"""Shared fixtures. The real default encoder is loaded once per session (tiny and offline)."""

from __future__ import annotations

from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.fixture(scope="session")
def encoder():
    from sdr_core.encoder import SentenceEncoder
    from sdr_core.settings import EncoderSettings

    return SentenceEncoder(settings=EncoderSettings(precision="fp32", device="cpu"))


@pytest.fixture()
def cache(tmp_path):
    from sdr_core.cache import EmbeddingCache

    with EmbeddingCache(tmp_path / "emb.sqlite") as c:
        yield c
