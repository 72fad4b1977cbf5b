"""The encoder's own BERT forward pass (sdr_core/bert.py) against transformers, its reference."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest

from sdr_search.core.bert import BertTokenizer, load_bert, native_support
from sdr_search.core.encoder import SentenceEncoder, default_model_dir
from sdr_search.core.settings import EncoderSettings

unit = pytest.mark.unit
integration = pytest.mark.integration

TEXTS = [
    "Short one.",
    "The appellant's counsel, Mr. Sharma, relied on Art. 14 and s. 302 I.P.C. (1860).",
    "Ünïcödé café, naïve façade; 北京 and Москва — ‘quotes’ … ellipsis",
    "word " * 300,
    "x",
    "   leading and trailing spaces   ",
    "z" * 2000,
]


def _copy_model(tmp_path):
    """The bundled model's small files (the weights linked), to edit its configuration."""
    src, dst = default_model_dir(), tmp_path / "model"
    dst.mkdir()
    for f in src.iterdir():
        if f.is_file():
            if f.suffix == ".safetensors":
                (dst / f.name).symlink_to(f)
            else:
                shutil.copy(f, dst / f.name)
    return dst


def _edit(path, name, **changes):
    data = json.loads((path / name).read_text())
    data.update(changes)
    (path / name).write_text(json.dumps(data))


@unit
def test_the_bundled_model_is_taken(tmp_path):
    assert native_support(default_model_dir()) is None
    assert native_support(_copy_model(tmp_path)) is None


@unit
@pytest.mark.parametrize(("file", "change", "reason"), [
    ("config.json", {"model_type": "roberta"}, "model_type 'roberta'"),
    ("config.json", {"position_embedding_type": "relative_key"}, "position_embedding_type"),
    ("config.json", {"is_decoder": True}, "decoder"),
    ("config.json", {"hidden_act": "silu"}, "hidden_act 'silu'"),
    ("config.json", {"num_attention_heads": 7}, "inconsistent"),
    ("tokenizer_config.json", {"do_lower_case": False}, "do_lower_case"),
])
def test_other_models_are_left_to_transformers(tmp_path, file, change, reason):
    path = _copy_model(tmp_path)
    _edit(path, file, **change)
    assert reason in native_support(path)


@unit
def test_missing_files_are_left_to_transformers(tmp_path):
    path = _copy_model(tmp_path)
    (path / "tokenizer.json").unlink()
    assert native_support(path) == "no tokenizer.json"
    (path / "model.safetensors").unlink()
    assert native_support(path) == "no model.safetensors"


@integration
@pytest.mark.parametrize("max_tokens", [5, 17, 128])
def test_token_ids_and_offsets_are_transformers(max_tokens):
    from transformers import AutoTokenizer

    path = default_model_dir()
    ours = BertTokenizer(path, max_tokens)
    hf = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    ids, spans = ours(TEXTS, True)
    ref = hf(TEXTS, truncation=True, max_length=max_tokens, return_offsets_mapping=True)
    assert ids == ref["input_ids"]
    assert [[tuple(s) for s in row] for row in spans] == [[tuple(s) for s in row] for row in ref["offset_mapping"]]
    input_ids, mask = ours.pad(ids)
    padded = hf.pad({"input_ids": ids}, padding=True, return_tensors="pt")
    assert input_ids.tolist() == padded["input_ids"].tolist() and mask.tolist() == padded["attention_mask"].tolist()


@integration
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_hidden_states_are_transformers(precision):
    import torch
    from transformers import AutoModel

    path = default_model_dir()
    tok = BertTokenizer(path, 128)
    input_ids, mask = tok.pad(tok(TEXTS, False)[0])
    ours = load_bert(path)
    hf = AutoModel.from_pretrained(str(path), local_files_only=True).eval()
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
        a = ours.hidden(input_ids, mask).float()
        b = hf(input_ids=input_ids, attention_mask=mask).last_hidden_state.float()
    real = mask.bool()
    assert a.shape == b.shape
    # the same operations in the same order: equal on every real token (padding rows are never pooled)
    np.testing.assert_allclose(a[real].numpy(), b[real].numpy(), rtol=0, atol=1e-5 if precision == "fp32" else 1e-2)


@integration
def test_a_masked_lm_checkpoint_loads_its_encoder(tmp_path):
    """``sdr train`` saves a BertForMaskedLM: the encoder's weights under ``bert.`` and a head."""
    import torch
    from transformers import AutoModel, AutoModelForMaskedLM

    path = default_model_dir()
    mlm = AutoModelForMaskedLM.from_pretrained(str(path), local_files_only=True)
    out = tmp_path / "mlm"
    mlm.save_pretrained(str(out), safe_serialization=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        shutil.copy(path / name, out / name)
    assert native_support(out) is None
    tok = BertTokenizer(out, 128)
    input_ids, mask = tok.pad(tok(TEXTS[:3], False)[0])
    hf = AutoModel.from_pretrained(str(out), local_files_only=True).eval()
    with torch.inference_mode():
        a = load_bert(out).hidden(input_ids, mask)
        b = hf(input_ids=input_ids, attention_mask=mask).last_hidden_state
    np.testing.assert_allclose(a[mask.bool()].numpy(), b[mask.bool()].numpy(), rtol=0, atol=1e-5)


@integration
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_the_encoder_gives_the_same_vectors_with_either_backend(precision):
    sentences = TEXTS + ["Another sentence of the corpus.", "Yet another, a little longer than the one before it."]
    native = SentenceEncoder(settings=EncoderSettings(precision=precision, device="cpu"))
    hf = SentenceEncoder(settings=EncoderSettings(precision=precision, device="cpu", encoder_backend="transformers"))
    assert (native.backend, hf.backend) == ("native-bert", "transformers")
    assert native.cache_tag == hf.cache_tag  # one model, one tag: vectors cached by either serve both
    a, b = native.encode(sentences), hf.encode(sentences)
    assert native.tokenize(sentences) == hf.tokenize(sentences)
    assert native.truncation == hf.truncation
    cos = np.sum(a * b, axis=1)
    assert cos.min() > (1 - 1e-6 if precision == "fp32" else 1 - 1e-3)


@integration
def test_encoding_with_the_default_model_does_not_import_transformers():
    code = ("import sys; from sdr_search.core.encoder import SentenceEncoder; "
            "v = SentenceEncoder().encode(['A sentence.', 'Another one.']); "
            "print(v.shape, 'transformers' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split()[-1] == "False", out.stdout + out.stderr
