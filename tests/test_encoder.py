import shutil
import subprocess
import sys

import numpy as np
import pytest

from sdr_search.core.cache import EmbeddingCache, document_key
from sdr_search.core.documents import parse_record
from sdr_search.core.embed import embed_corpus, embed_documents
from sdr_search.core.encoder import SentenceEncoder, default_model_dir, plan_batches
from sdr_search.core.errors import InvalidInputError, ModelNotFoundError
from sdr_search.core.settings import EncoderSettings, SegmentationSettings

SENTENCES = [
    "The appeal is dismissed.",
    "The High Court erred in law when it construed Section 64 of the Income Tax Act against the assessee.",
    "Costs.",
    "Anarchism is a political philosophy that advocates self-governed societies based on voluntary institutions.",
    "The appeal is dismissed.",
]


@pytest.mark.unit
def test_plan_batches_respects_the_budget_and_covers_everything():
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 129, size=1000)
    batches = plan_batches(lengths, 2048)
    flat = np.concatenate(batches)
    assert sorted(flat.tolist()) == list(range(1000))
    for b in batches:
        assert len(b) * lengths[b].max() <= 2048
    maxes = [lengths[b].max() for b in batches]
    assert maxes == sorted(maxes, reverse=True)  # longest first
    assert [len(b) for b in plan_batches([500, 3], 100)] == [1, 1]  # over-budget sentence alone


@pytest.mark.unit
def test_nothing_heavy_is_imported_or_loaded_at_import():
    code = (
        "import sys, sdr_search.cli, sdr_search.core.encoder, sdr_search.core.documents, sdr_search.core.embed, sdr_search.core.evaluation;"
        "from sdr_search.core.encoder import SentenceEncoder; SentenceEncoder();"
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.unit
def test_missing_model_directory_is_a_clear_error(tmp_path):
    with pytest.raises(ModelNotFoundError, match="does not exist"):
        SentenceEncoder(settings=EncoderSettings(model=str(tmp_path / "nope"))).encode(["x"])
    with pytest.raises(ModelNotFoundError, match="no config.json"):
        SentenceEncoder(settings=EncoderSettings(model=str(tmp_path))).encode(["x"])
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ModelNotFoundError, match="no model weights"):
        SentenceEncoder(settings=EncoderSettings(model=str(tmp_path))).encode(["x"])


@pytest.mark.integration
def test_vectors_are_mean_pooled_unit_vectors_in_input_order(encoder):
    import torch
    from transformers import AutoModel, AutoTokenizer

    vecs = encoder.encode(SENTENCES)
    assert vecs.shape == (5, 384) and vecs.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    np.testing.assert_array_equal(vecs[0], vecs[4])
    # plain reference: one sentence at a time, no batching or sorting
    path = str(default_model_dir())
    tok, model = AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path).eval()
    for i, s in enumerate(SENTENCES):
        x = tok([s], truncation=True, max_length=128, return_tensors="pt")
        with torch.inference_mode():
            h = model(**x).last_hidden_state[0]
        ref = torch.nn.functional.normalize(h.mean(0), dim=0).numpy()
        assert float(ref @ vecs[i]) > 0.99999


@pytest.mark.integration
def test_empty_and_string_inputs(encoder):
    assert encoder.encode([]).shape == (0, 384)
    with pytest.raises(InvalidInputError):
        encoder.encode("one string")


@pytest.mark.integration
def test_token_cap_truncates(encoder):
    long = "word " * 400
    capped = SentenceEncoder(settings=EncoderSettings(precision="fp32", device="cpu", max_tokens=16))
    a, b = encoder.encode([long])[0], capped.encode([long])[0]
    assert float(a @ b) < 0.9999  # different inputs reached the model
    assert capped.cache_tag != encoder.cache_tag


@pytest.mark.integration
def test_bf16_stays_within_cosine_0_9999_of_fp32(encoder):
    import torch

    if not (torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()):
        pytest.skip("this CPU has no native bf16; auto precision uses fp32 here")
    bf16 = SentenceEncoder(settings=EncoderSettings(precision="bf16", device="cpu"))
    cos = np.sum(encoder.encode(SENTENCES) * bf16.encode(SENTENCES), axis=1)
    assert cos.min() >= 0.9999


@pytest.mark.integration
def test_any_local_model_directory_works(encoder, tmp_path):
    local = tmp_path / "my-model"
    shutil.copytree(default_model_dir(), local)
    other = SentenceEncoder(settings=EncoderSettings(model=str(local), precision="fp32", device="cpu"))
    np.testing.assert_allclose(other.encode(SENTENCES[:2]), encoder.encode(SENTENCES[:2]), atol=1e-6)
    assert other.model_id == str(local.resolve())
    assert other.fingerprint == encoder.fingerprint  # same content, same cache entries


@pytest.mark.unit
def test_cache_round_trip_and_keys(tmp_path):
    with EmbeddingCache(tmp_path / "c.sqlite") as c:
        v = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
        k = document_key("tag", [["a", "b"], ["c"]])
        c.put_many([(k, v)])
        np.testing.assert_array_equal(c.get_many([k, "missing"])[k], v)
        assert document_key("tag", [["a", "b"], ["c"]]) == k
        assert document_key("tag2", [["a", "b"], ["c"]]) != k
        assert document_key("tag", [["a"], ["b", "c"]]) != k  # paragraph boundaries count
        assert document_key("tag", [["a", "b", "c"]]) != k
    with EmbeddingCache(tmp_path / "c.sqlite") as c:  # persisted
        assert k in c.get_many([k])


@pytest.mark.integration
def test_embedding_goes_through_the_cache(encoder, cache, monkeypatch):
    as_given = SegmentationSettings.from_recorded({})
    docs = [parse_record({"id": str(i), "text": f"Doc {i} first. Doc {i} second.\n\nThird of {i}."}, settings=as_given)
            for i in range(5)]
    first = embed_corpus(docs, encoder, cache=cache)
    assert first.ids == tuple("01234") and first.n_paragraphs == 10 and first.n_sentences == 15

    def fail(*a, **k):
        raise AssertionError("cache miss: encoder was called")

    monkeypatch.setattr(encoder, "encode", fail)
    second = embed_corpus(docs, encoder, cache=cache)
    np.testing.assert_array_equal(first.vectors, second.vectors)
    np.testing.assert_array_equal(first.par_offsets, second.par_offsets)
    pairs = list(embed_documents(docs[:2], encoder, cache=cache, chunk_docs=1))
    assert [d.id for d, _ in pairs] == ["0", "1"]
