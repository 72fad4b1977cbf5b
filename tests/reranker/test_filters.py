"""Metadata filters (sdr_search.reranker.filters): the matching rules, and candidate filtering
through the store interface's metadata look-up, bulk or the interface's default."""

from __future__ import annotations

import numpy as np
import pytest

from factories import AS_GIVEN, META, unit
from sdr_search.core.documents import parse_record
from sdr_search.core.errors import InvalidInputError
from sdr_search.core.vectors import DocVectors
from sdr_search.indexer.embedded import EmbeddedStore
from sdr_search.indexer.store import StoreCapabilities
from sdr_search.reranker.filters import filter_candidates, matches

pytestmark = pytest.mark.unit


def test_matching_rules():
    stored = {"lang": "en", "year": 2020, "tags": ["a", "b"], "flag": True, "score": 1.0}
    assert matches(stored, {}) and matches(stored, {"lang": "en", "year": 2020})
    assert matches(stored, {"year": 2020.0}) and matches(stored, {"score": 1})  # 1 equals 1.0
    assert not matches(stored, {"flag": 1}) and not matches(stored, {"score": True})  # a boolean only equals a boolean
    assert matches(stored, {"flag": True})
    assert matches(stored, {"lang": ["de", "en"]}) and not matches(stored, {"lang": ["de", "fr"]})  # any item
    assert matches(stored, {"tags": "b"}) and matches(stored, {"tags": ["c", "a"]})  # a stored list: any item
    assert not matches(stored, {"missing": 1}) and not matches(stored, {"year": "2020"})
    nested = {"a": {"b": [1, {"c": "x"}]}, "a.b": 2, "n": None, "e": []}  # a path names nested and dotted keys alike
    assert matches(nested, {"a.b": 1}) and matches(nested, {"a.b": 2}) and matches(nested, {"a.b.c": "x"})
    assert not matches(nested, {"a": 1}) and not matches(nested, {"e": []}) and not matches(nested, {"n": "None"})
    with pytest.raises(InvalidInputError, match="'missing': null matches nothing"):
        matches(stored, {"missing": None})
    with pytest.raises(InvalidInputError, match="'tags': 1,001 values, over the limit of 1,000"):
        matches(stored, {"tags": ["a"] * 1001})


class _GetOnlyStore(EmbeddedStore):
    """An embedded store that declares no capability: filters use the interface's defaults."""

    capabilities = StoreCapabilities()
    metadata_calls: list[int] = []

    def metadata_of(self, ids):
        self.metadata_calls.append(len(ids))
        from sdr_search.indexer.store import DocumentStore

        return DocumentStore.metadata_of(self, ids)


def _fill(store, n: int = 150) -> list[str]:
    rng = np.random.default_rng(0)
    store.ensure_meta(META)
    items = []
    for i in range(n):
        doc = parse_record({"id": f"d{i:03d}", "paragraphs": [f"Sentence {i}. Another one."],
                            "parity": "even" if i % 2 == 0 else "odd", "bucket": i % 7}, settings=AS_GIVEN)
        items.append((doc, DocVectors(unit(rng, 2), [0, 2])))
    store.put(items)
    return [d.id for d, _ in items]


@pytest.mark.parametrize("store_class", [EmbeddedStore, _GetOnlyStore])
def test_filter_candidates_keeps_order_stops_at_limit_and_skips_missing(tmp_path, store_class):
    with store_class(tmp_path / "s", create=True) as store:
        ids = _fill(store)
        asked = ["gone", *reversed(ids)]  # a candidate deleted since stage 1 is left out
        kept = filter_candidates(store, asked, {"parity": "even", "bucket": [0, 3]}, limit=1000)
        assert kept == [i for i in reversed(ids) if int(i[1:]) % 2 == 0 and int(i[1:]) % 7 in (0, 3)]
        assert filter_candidates(store, asked, {"parity": "odd"}, limit=5) == ["d149", "d147", "d145", "d143", "d141"]
        assert filter_candidates(store, asked, {"parity": "none"}, limit=5) == []


def test_a_store_without_bulk_metadata_is_read_in_small_chunks_until_the_limit(tmp_path):
    _GetOnlyStore.metadata_calls = []
    with _GetOnlyStore(tmp_path / "s", create=True) as store:
        ids = _fill(store)
        assert len(filter_candidates(store, ids, {"parity": "odd"}, limit=40)) == 40
        assert _GetOnlyStore.metadata_calls == [64, 64]  # 32 of each 64 match: two chunks reach 40
    with EmbeddedStore(tmp_path / "s") as store:
        assert store.capabilities.metadata_lookup
        assert len(filter_candidates(store, ids, {"parity": "odd"}, limit=75)) == 75
