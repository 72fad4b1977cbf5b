"""docs/configuration.md is generated from the settings classes and must match the code."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]


def _generator():
    spec = importlib.util.spec_from_file_location("gen_configuration", ROOT / "scripts" / "gen_configuration.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_configuration_doc_is_up_to_date():
    gen = _generator()
    assert (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8") == gen.render(), (
        "docs/configuration.md is out of date: run .venv/bin/python scripts/gen_configuration.py")


def test_every_setting_is_listed_once_with_its_variable():
    gen = _generator()
    text = gen.render()
    from sdr_search.indexer.opensearch import OpenSearchSettings

    for name in OpenSearchSettings.model_fields:
        assert text.count(f"| `SDR_OPENSEARCH_{name.upper()}` |") == 1, name
    assert "`SDR_BROKER_URL` / `REDIS_URL`" in text  # aliases, not the field name
    assert text.count("| `SDR_FUSION` |") == 1  # inherited fields are listed once
