"""How a store's recorded segmentation decides the segmentation of what is added to it and of new
sources searched against it (no model, no services)."""

from argparse import Namespace
from types import SimpleNamespace

import pytest

from sdr_search.cli.index import store_segmentation
from sdr_search.indexer.provenance import segmentation_mismatch, segmentation_record
from sdr_search.reranker.engine import MoreLikeThis
from sdr_search.core.errors import ModelMismatchError
from sdr_search.core.settings import SegmentationSettings

pytestmark = pytest.mark.unit

LEGACY = {"paragraph_unit": "paragraph", "splitter": "curated"}  # what stores recorded before the new fields


def _args(**flags):
    base = {"paragraph_unit": None, "min_paragraph_sentences": None, "min_sentence_chars": None,
            "store": "s", "opensearch": None, "index": None}
    return Namespace(**{**base, **flags})


def test_record_holds_every_segmentation_field_and_the_splitter():
    rec = segmentation_record(SegmentationSettings(min_paragraph_sentences=4, min_sentence_chars=10), "curated")
    assert rec == {"paragraph_unit": "paragraph", "min_paragraph_sentences": 4, "min_sentence_chars": 10,
                   "splitter": "curated"}


def test_a_legacy_record_matches_as_given_segmentation_only():
    as_given = segmentation_record(SegmentationSettings.from_recorded({}), "curated")
    assert segmentation_mismatch(LEGACY, as_given) is None
    why = segmentation_mismatch(LEGACY, segmentation_record(SegmentationSettings(), "curated"))
    assert "min_paragraph_sentences=1 (not 8)" in why and "min_sentence_chars=0 (not 20)" in why
    assert segmentation_mismatch(None, as_given) is None and segmentation_mismatch({}, as_given) is None
    assert "splitter" in segmentation_mismatch({**as_given, "splitter": "trained"}, as_given)


def test_new_store_takes_flags_and_settings():
    assert store_segmentation(_args(), None) == SegmentationSettings()
    assert store_segmentation(_args(min_paragraph_sentences=3), None).min_paragraph_sentences == 3


def test_existing_store_keeps_its_segmentation_and_refuses_a_different_flag():
    assert store_segmentation(_args(), LEGACY).recorded() == SegmentationSettings.from_recorded({}).recorded()
    recorded = segmentation_record(SegmentationSettings(min_paragraph_sentences=4), "curated")
    assert store_segmentation(_args(min_paragraph_sentences=4), recorded).min_paragraph_sentences == 4
    with pytest.raises(ModelMismatchError, match="min_paragraph_sentences=4, not 2"):
        store_segmentation(_args(min_paragraph_sentences=2), recorded)


@pytest.mark.parametrize("recorded, expected", [
    (None, SegmentationSettings().recorded()),  # no index yet: the settings
    (LEGACY, {"paragraph_unit": "paragraph", "min_paragraph_sentences": 1, "min_sentence_chars": 0}),
    ({"paragraph_unit": "section", "min_paragraph_sentences": 2, "min_sentence_chars": 5},
     {"paragraph_unit": "section", "min_paragraph_sentences": 2, "min_sentence_chars": 5}),
])
def test_engine_segments_new_sources_as_the_store_recorded(recorded, expected):
    meta = None if recorded is None else SimpleNamespace(segmentation=recorded)
    engine = MoreLikeThis(store=SimpleNamespace(meta=lambda: meta), encoder=None)
    assert engine.segmentation().recorded() == expected
