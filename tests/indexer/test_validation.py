"""The checks every store makes on ``put()`` items (sdr_search.indexer.validation), as a pure function."""

from __future__ import annotations

import numpy as np
import pytest

from factories import AS_GIVEN, DIM, META, make_doc, make_docs, unit, with_vectors
from sdr_search.core.documents import parse_record
from sdr_search.core.errors import DuplicateIdError, InvalidDocumentError, InvalidInputError, ModelMismatchError
from sdr_search.core.vectors import DocVectors
from sdr_search.indexer.validation import check_put_item, check_put_items

pytestmark = pytest.mark.unit


def test_valid_items_pass_and_nothing_is_changed():
    items = make_docs(3)
    before = [v.vectors.copy() for _, v in items]
    assert check_put_items(items, META, where="store /s") is None
    assert check_put_items([], META, where="store /s") is None
    for (_, v), b in zip(items, before):
        np.testing.assert_array_equal(v.vectors, b)


def test_each_check_names_the_document_and_the_store():
    rng = np.random.default_rng(0)
    doc, vec = make_doc("x", rng)
    with pytest.raises(InvalidInputError, match=r"put\(\) takes \(Document, DocVectors\) pairs"):
        check_put_item(vec, doc, META, where="store /s")
    with pytest.raises(ModelMismatchError) as err:
        check_put_item(doc, DocVectors(unit(rng, vec.n_sentences, dim=DIM + 1), vec.par_offsets), META,
                       where="OpenSearch index 'i'")
    assert str(err.value) == ("document 'x': vectors have dimension 17, but OpenSearch index 'i' holds dimension 16 "
                              "(model model-a)")
    grouped = r"grouped as \[1, 5\] sentences per paragraph but the document has \[3, 3\]"
    with pytest.raises(InvalidDocumentError, match=grouped):
        check_put_item(doc, DocVectors(vec.vectors, [0, 1, vec.n_sentences]), META, where="store /s")
    inf = vec.vectors.copy()
    inf[0, 0] = np.inf
    with pytest.raises(InvalidDocumentError, match="NaN or infinity"):
        check_put_item(*with_vectors((doc, vec), inf), META, where="store /s")
    with pytest.raises(InvalidDocumentError, match="6 sentences, over the index limit of 5"):
        check_put_item(doc, vec, META, where="store /s", max_sentences=5)
    check_put_item(doc, vec, META, where="store /s", max_sentences=6)  # at the limit: fine
    for value in (float("nan"), object()):
        odd = parse_record({"id": "odd", "paragraphs": ["One. Two."], "v": value}, settings=AS_GIVEN)
        with pytest.raises(InvalidDocumentError, match="metadata key 'v': .*(not a JSON number|not a JSON value)"):
            check_put_item(odd, DocVectors(unit(rng, 2), [0, 2]), META, where="store /s")


def test_the_first_invalid_item_raises_and_an_id_twice_is_refused():
    items = make_docs(3)
    doc, vec = items[1]
    bad = (doc, DocVectors(vec.vectors, [0, vec.n_sentences]))  # grouped as one paragraph
    with pytest.raises(DuplicateIdError, match="appears twice in one put"):
        check_put_items([items[0], items[1], items[0], bad], META, where="store /s")
    with pytest.raises(InvalidDocumentError):
        check_put_items([items[0], bad, items[0]], META, where="store /s")
    with pytest.raises(InvalidInputError, match="pairs"):
        check_put_items([items[0], "not a pair"], META, where="store /s")
