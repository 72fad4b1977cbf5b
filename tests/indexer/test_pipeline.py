"""The one in-process indexing path (sdr_search.indexer.pipeline.write_documents) shared by
``sdr index`` (index_documents) and the workers (index_batch): failing groups are split in halves,
a failing document fails alone with its reason, nothing else is lost. A deterministic fake
encoder stands in for the model."""

from __future__ import annotations

import pytest

from factories import AS_GIVEN, FakeEncoder
from sdr_search.core.documents import parse_record
from sdr_search.core.errors import BulkWriteError, InvalidDocumentError, SDRError, StoreError
from sdr_search.indexer.embedded import EmbeddedStore
from sdr_search.indexer.pipeline import WriteReport, index_documents, isolate_sdr_errors, write_documents
from sdr_search.indexer.provenance import index_meta

pytestmark = pytest.mark.unit


class SDRPoisonEncoder(FakeEncoder):
    """Fails with an SDRError (the documents' own failure for ``sdr index``) on 'POISON'."""

    def encode(self, sentences, *, progress: bool = False):
        if any("POISON" in s for s in sentences):
            self.calls.append(len(sentences))
            raise SDRError("cannot encode this")
        return super().encode(sentences, progress=progress)


class RejectingStore(EmbeddedStore):
    """Writes every document but those in ``reject``, then reports those as item-level rejections
    (as the OpenSearch store's bulk writes do)."""

    reject: set[str] = set()
    puts: list[int] = []

    def put(self, items):
        items = list(items)
        type(self).puts.append(len(items))
        super().put([(d, v) for d, v in items if d.id not in self.reject])
        failed = {d.id: "400 mapper_parsing_exception" for d, _ in items if d.id in self.reject}
        if failed:
            raise BulkWriteError("writing documents", failed)


def docs(n: int, *, poison: tuple[int, ...] = (), nan_metadata: tuple[int, ...] = ()):
    out = []
    for i in range(n):
        record = {"id": f"d{i:03d}", "paragraphs": [f"Document {i} makes point one. It adds point two."]}
        if i in poison:
            record["paragraphs"].append("This sentence is POISON for the encoder.")
        if i in nan_metadata:
            record["score"] = float("nan")  # not strict JSON: every store refuses it
        out.append(parse_record(record, settings=AS_GIVEN))
    return out


def _store(tmp_path, cls=EmbeddedStore, encoder=None):
    store = cls(tmp_path / "s", create=True)
    store.ensure_meta(index_meta(encoder or FakeEncoder(), {}))
    return store


def test_a_poison_document_fails_alone_by_halving_and_the_rest_is_written(tmp_path):
    encoder = SDRPoisonEncoder()
    batch = docs(8, poison=(5,))
    with _store(tmp_path, encoder=encoder) as store:
        report = write_documents(store, batch, encoder)
        assert [d.id for d in report.written] == [d.id for d in batch if d.id != "d005"]
        assert [(d.id, reason) for d, reason in report.failed] == [("d005", "encoding failed: cannot encode this")]
        assert report.encoded_sentences == 7 * 2
        assert len(encoder.calls) <= 1 + 2 * 3  # one failing group per level of 8 -> 1
        assert sorted(store.iter_ids()) == [d.id for d in batch if d.id != "d005"]


def test_a_document_the_store_refuses_fails_alone_with_the_stores_reason(tmp_path):
    batch = docs(6, nan_metadata=(2,))
    with _store(tmp_path) as store:
        report = write_documents(store, batch, FakeEncoder())
        assert [d.id for d, _ in report.failed] == ["d002"]
        assert report.failed[0][1].startswith("store rejected it: ") and "JSON" in report.failed[0][1]
        assert store.counts()["documents"] == 5 and len(report.written) == 5


def test_item_level_rejections_fail_only_the_rejected_documents(tmp_path):
    RejectingStore.reject, RejectingStore.puts = {"d001", "d004"}, []
    with _store(tmp_path, RejectingStore) as store:
        report = write_documents(store, docs(6), FakeEncoder())
        assert RejectingStore.puts == [6]  # the others were written by the same put: no retries
        assert {d.id: r for d, r in report.failed} == {"d001": "store rejected it: 400 mapper_parsing_exception",
                                                      "d004": "store rejected it: 400 mapper_parsing_exception"}
        assert sorted(store.iter_ids()) == ["d000", "d002", "d003", "d005"]


def test_the_error_policy_decides_what_stops_the_write(tmp_path):
    with _store(tmp_path) as store:
        with pytest.raises(RuntimeError, match="boom"):  # not an SDRError: sdr index stops
            write_documents(store, docs(4, poison=(1,)), FakeEncoder())
        assert store.counts()["documents"] == 0

        class Stop(Exception):
            pass

        def stop_on_anything(exc: Exception) -> None:
            raise Stop(str(exc)) from exc

        with pytest.raises(Stop):
            write_documents(store, docs(4, nan_metadata=(3,)), FakeEncoder(), check_error=stop_on_anything)
        with pytest.raises(ValueError):
            isolate_sdr_errors(ValueError("x"))
        assert isolate_sdr_errors(SDRError("x")) is None


def test_index_documents_counts_what_the_shared_path_did(tmp_path):
    encoder = SDRPoisonEncoder()
    batch = docs(10, poison=(3,), nan_metadata=(7,))
    with EmbeddedStore(tmp_path / "s", create=True) as store:
        summary = index_documents(store, batch, encoder, batch_docs=4)
        assert (summary.indexed, summary.failed, summary.unchanged, summary.sentences) == (8, 2, 0, 16)
        assert [i for i, _ in summary.failures] == ["d003", "d007"]
        again = index_documents(store, batch, encoder, batch_docs=4)  # resumes: unchanged ones are skipped
        assert (again.indexed, again.failed, again.unchanged) == (0, 2, 8)


class HalfBrokenStore(EmbeddedStore):
    """Refuses groups of more than two documents as the documents' fault (isolated), and fails
    for good (a store error) on a group holding ``d003``."""

    def put(self, items):
        items = list(items)
        if len(items) > 2:
            raise InvalidDocumentError(items[0][0].id, "too many at once")
        if any(d.id == "d003" for d, _ in items):
            raise StoreError("the store broke")
        super().put(items)


def test_a_stopped_write_still_reports_what_it_wrote(tmp_path):
    def stop_on_store_errors(exc: Exception) -> None:
        if isinstance(exc, StoreError):
            raise exc

    report = WriteReport()
    with _store(tmp_path, HalfBrokenStore) as store:
        with pytest.raises(StoreError, match="broke"):
            write_documents(store, docs(4), FakeEncoder(), check_error=stop_on_store_errors, report=report)
        assert [d.id for d in report.written] == ["d000", "d001"] and report.failed == []
        assert report.encoded_sentences == 8 and sorted(store.iter_ids()) == ["d000", "d001"]
