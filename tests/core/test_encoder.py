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


# -- pooling and prompts from the model directory (sentence-transformers files) ----------------

import json  # noqa: E402

from sdr_search.core.encoder import POOLING_MODES, read_model_recipe  # noqa: E402

_WORDS = "the appeal is dismissed court erred in law costs represent this sentence for searching relevant passages".split()


def _st_files(path, pooling=None, prompts=None, default_prompt=None, include_prompt=True, normalize=True, extra=()):
    """Write sentence-transformers' files into ``path``: modules.json, 1_Pooling/config.json with
    ``pooling`` (a mode name or a list of them) and config_sentence_transformers.json."""
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}]
    if pooling is not None:
        modes = [pooling] if isinstance(pooling, str) else list(pooling)
        modules.append({"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"})
        (path / "1_Pooling").mkdir(exist_ok=True)
        keys = {"cls": "pooling_mode_cls_token", "mean": "pooling_mode_mean_tokens", "max": "pooling_mode_max_tokens",
                "sqrt": "pooling_mode_mean_sqrt_len_tokens", "weightedmean": "pooling_mode_weightedmean_tokens",
                "lasttoken": "pooling_mode_lasttoken"}
        config = {"word_embedding_dimension": 32, **{k: name in modes for name, k in keys.items()},
                  "include_prompt": include_prompt}
        (path / "1_Pooling" / "config.json").write_text(json.dumps(config))
    for kind in extra:
        modules.append({"idx": len(modules), "name": str(len(modules)), "path": f"{len(modules)}_{kind}",
                        "type": f"sentence_transformers.models.{kind}"})
    if normalize:
        modules.append({"idx": len(modules), "name": str(len(modules)), "path": f"{len(modules)}_Normalize",
                        "type": "sentence_transformers.models.Normalize"})
    (path / "modules.json").write_text(json.dumps(modules))
    if prompts is not None:
        st = {"prompts": prompts, "default_prompt_name": default_prompt}
        (path / "config_sentence_transformers.json").write_text(json.dumps(st))
    return path


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    """A tiny random BERT (2 layers, 32 dims) with a WordPiece tokenizer, saved as a model directory;
    no sentence-transformers files."""
    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast

    path = tmp_path_factory.mktemp("tiny-bert")
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ":", ".", *_WORDS]
    (path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    BertTokenizerFast(vocab_file=str(path / "vocab.txt")).save_pretrained(str(path))
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=37, max_position_embeddings=64)
    BertModel(config).eval().save_pretrained(str(path))
    return path


def _variant(tiny_model, tmp_path, name, **st):
    path = tmp_path / name
    shutil.copytree(tiny_model, path)
    return _st_files(path, **st) if st else path


def _encoder(path, **settings):
    return SentenceEncoder(settings=EncoderSettings(model=str(path), precision="fp32", device="cpu", **settings))


def _reference(path, sentences, mode, prompt=""):
    """Plain transformers, one sentence at a time: the pooled, L2-normalised last layer."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    tok, model = AutoTokenizer.from_pretrained(str(path)), AutoModel.from_pretrained(str(path)).eval()
    out = []
    for s in sentences:
        x = tok([prompt + s], truncation=True, max_length=128, return_tensors="pt")
        with torch.inference_mode():
            h = model(**x).last_hidden_state[0]
        v = {"cls": h[0], "mean": h.mean(0), "max": h.max(0).values, "lasttoken": h[-1],
             "weightedmean": (h * torch.arange(1, h.shape[0] + 1).view(-1, 1)).sum(0) / h.shape[0] / (h.shape[0] + 1) * 2}[mode]
        out.append(torch.nn.functional.normalize(v, dim=0).numpy())
    return np.stack(out)


TINY = ["the appeal is dismissed.", "the court erred in law.", "costs.", "the appeal is dismissed."]


@pytest.mark.unit
def test_recipe_from_sentence_transformers_files(tmp_path):
    assert read_model_recipe(tmp_path).pooling == "mean"  # nothing said: SDR's mean pooling
    assert read_model_recipe(tmp_path).tag == "mean-l2"
    for mode in ("cls", "mean", "max", "weightedmean", "lasttoken"):
        r = read_model_recipe(_st_files(tmp_path, pooling=mode))
        assert (r.pooling, r.source, r.normalize) == (mode, "modules.json", True)
    assert read_model_recipe(_st_files(tmp_path, pooling="sqrt")).pooling == "mean"  # equal after L2
    with pytest.raises(InvalidInputError, match="concatenates"):
        read_model_recipe(_st_files(tmp_path, pooling=["cls", "mean"]))
    assert read_model_recipe(tmp_path, pooling="max").pooling == "max"  # the setting overrides it
    with pytest.raises(InvalidInputError, match="unknown pooling"):
        read_model_recipe(tmp_path, pooling="median")
    assert read_model_recipe(_st_files(tmp_path, pooling="cls", normalize=False)).normalize is False
    assert read_model_recipe(_st_files(tmp_path, pooling="mean", extra=["Dense"])).ignored == ("Dense",)
    # prompts: the document side, else the default prompt name, else none
    _st_files(tmp_path, pooling="cls", prompts={"query": "Q: ", "document": "D: "}, default_prompt="query")
    r = read_model_recipe(tmp_path)
    assert (r.prompt, r.prompt_name) == ("D: ", "document")
    _st_files(tmp_path, pooling="cls", prompts={"query": "Q: ", "passage": "P: "})
    assert read_model_recipe(tmp_path).prompt == "P: "
    _st_files(tmp_path, pooling="cls", prompts={"query": "Q: ", "classification": "C: "}, default_prompt="classification")
    assert read_model_recipe(tmp_path).prompt == "C: "
    _st_files(tmp_path, pooling="cls", prompts={"query": "Q: "})  # a query-only instruction is not applied
    assert read_model_recipe(tmp_path).prompt == ""
    _st_files(tmp_path, pooling="cls", prompts={"document": "D: "})
    assert read_model_recipe(tmp_path, prompt="").prompt == ""  # the setting turns it off
    assert read_model_recipe(tmp_path, prompt="X: ").prompt == "X: "
    # the tag: stable for mean without a prompt, different for every pooling and prompt
    tags = {read_model_recipe(tmp_path, pooling=m, prompt="").tag for m in POOLING_MODES}
    assert len(tags) == len(POOLING_MODES) and "mean-l2" in tags
    assert read_model_recipe(tmp_path, pooling="mean").tag not in tags


@pytest.mark.integration
def test_pooling_follows_the_model_directory(tiny_model, tmp_path):
    plain = _encoder(tiny_model)
    assert plain.recipe.pooling == "mean" and plain.cache_tag.endswith("|mean-l2")
    np.testing.assert_allclose(plain.encode(TINY), _reference(tiny_model, TINY, "mean"), atol=1e-5)
    vectors, tags = {}, {plain.cache_tag}
    for mode in ("cls", "max", "lasttoken", "weightedmean"):
        enc = _encoder(_variant(tiny_model, tmp_path, mode, pooling=mode))
        assert enc.recipe.pooling == mode
        vectors[mode] = enc.encode(TINY)
        assert vectors[mode].shape == (4, 32)
        np.testing.assert_allclose(np.linalg.norm(vectors[mode], axis=1), 1.0, atol=1e-5)
        np.testing.assert_allclose(vectors[mode], _reference(tiny_model, TINY, mode), atol=1e-5)
        np.testing.assert_array_equal(vectors[mode][0], vectors[mode][3])
        tags.add(enc.cache_tag)
    assert len(tags) == 5  # a store built with one pooling is never queried with another
    assert float(np.min(np.sum(vectors["cls"] * plain.encode(TINY), axis=1))) < 0.9999
    # the content hash is the same: only the pooling part of the tag differs
    assert len({t.split("|")[0] for t in tags}) == 1
    # SDR_POOLING overrides the directory
    over = _encoder(_variant(tiny_model, tmp_path, "over", pooling="cls"), pooling="mean")
    np.testing.assert_allclose(over.encode(TINY), plain.encode(TINY), atol=1e-6)
    assert over.cache_tag == plain.cache_tag


@pytest.mark.integration
def test_document_prompt_is_put_before_every_sentence(tiny_model, tmp_path):
    path = _variant(tiny_model, tmp_path, "prompted", pooling="mean",
                    prompts={"query": "represent this sentence for searching relevant passages: ", "document": "costs: "})
    enc = _encoder(path)
    assert enc.recipe.prompt == "costs: "
    np.testing.assert_allclose(enc.encode(TINY), _reference(tiny_model, TINY, "mean", prompt="costs: "), atol=1e-5)
    assert enc.tokenize(["the appeal."])[0][:3] == enc.tokenize(["costs: the appeal."])[0][:3]
    off = _encoder(path, sentence_prompt="")
    np.testing.assert_allclose(off.encode(TINY), _encoder(tiny_model).encode(TINY), atol=1e-6)
    assert off.cache_tag == _encoder(tiny_model).cache_tag and enc.cache_tag != off.cache_tag
    # include_prompt false: the prompt's tokens are left out of the mean (sentence-transformers'
    # prompt_length: [CLS] and the prompt's tokens)
    excl = _encoder(_variant(tiny_model, tmp_path, "excluded", pooling="mean", prompts={"document": "costs: "},
                             include_prompt=False))
    import torch
    from transformers import AutoModel, AutoTokenizer

    tok, model = AutoTokenizer.from_pretrained(str(tiny_model)), AutoModel.from_pretrained(str(tiny_model)).eval()
    x = tok(["costs: " + TINY[1]], return_tensors="pt")
    with torch.inference_mode():
        h = model(**x).last_hidden_state[0]
    skip = len(tok("costs: ")["input_ids"]) - 1
    ref = torch.nn.functional.normalize(h[skip:].mean(0), dim=0).numpy()
    assert float(ref @ excl.encode([TINY[1]])[0]) > 0.99999
    assert excl.cache_tag not in (enc.cache_tag, off.cache_tag)


@pytest.mark.integration
def test_default_model_keeps_mean_pooling_and_its_tag(encoder):
    assert encoder.recipe.pooling == "mean" and encoder.recipe.source == "modules.json" and encoder.recipe.normalize
    assert encoder.recipe.prompt == ""
    assert encoder.cache_tag == f"{encoder.fingerprint}|tok128|{encoder.precision}|mean-l2"
