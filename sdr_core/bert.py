"""BERT inference in plain torch: the encoder's forward pass without importing transformers.

The default encoder (all-MiniLM-L6-v2) and every model ``sdr train`` writes are BERT encoders.
Building one through transformers (``import transformers`` with its BERT module, then
``AutoModel.from_pretrained``) took 1.5 to 2.5 s of every process that encodes text, more than
the encoding of a short source; a one-shot ``sdr mlt --text`` paid it on each call. This module
loads the same files (the ``tokenizer.json`` through the ``tokenizers`` library that transformers'
fast tokenizers wrap; ``model.safetensors``) and computes the same forward pass with the same
torch operations transformers' ``BertModel`` uses: word + token-type (0) + position embeddings
and a layer norm, then per layer scaled-dot-product self-attention with a padding mask, the
output projection, residual and layer norm, the feed-forward block with GELU, residual and layer
norm. Inference only: no dropout, no gradients (training keeps transformers).

Only a directory this reproduces exactly is taken (:func:`native_support` says why another is
left to transformers): ``model_type`` bert with absolute positions, an encoder (not a decoder),
a GELU or ReLU activation, one ``model.safetensors`` (a ``BertForMaskedLM`` checkpoint's
``bert.`` prefix is dropped, its head ignored) and a ``tokenizer.json`` whose lower-casing agrees
with ``tokenizer_config.json``. ``tests/core/test_bert.py`` checks the token ids, offsets and last
hidden states against transformers' on the bundled model, in fp32 and under bf16 autocast.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

__all__ = ["native_support", "BertTokenizer", "BertModel", "load_bert"]

_ACTIVATIONS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "relu")
_WEIGHTS = "model.safetensors"


def json_object(path: Path) -> dict:
    """The JSON object in the model file ``path``; empty when it is missing, unreadable or not an
    object (the checks of this module and of :mod:`.onnx_backend` then say what is wrong)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def casing_disagreement(path: Path) -> str | None:
    """Why the model directory ``path``'s ``tokenizer.json`` cannot stand for its tokenizer (its
    lower-casing disagrees with ``tokenizer_config.json``'s ``do_lower_case``), or None."""
    normalizer = json_object(path / "tokenizer.json").get("normalizer") or {}
    wanted = json_object(path / "tokenizer_config.json").get("do_lower_case")
    if normalizer.get("type") == "BertNormalizer" and wanted is not None and bool(normalizer.get("lowercase")) != bool(wanted):
        return "tokenizer_config.json's do_lower_case disagrees with tokenizer.json"
    return None


def native_support(path: Path) -> str | None:
    """None when :class:`BertModel` and :class:`BertTokenizer` compute what transformers would
    for the model directory ``path``; otherwise why not (the encoder then loads transformers)."""
    config = json_object(path / "config.json")
    if config.get("model_type") != "bert":
        return f"model_type {config.get('model_type')!r} is not bert"
    if config.get("position_embedding_type", "absolute") != "absolute":
        return f"position_embedding_type {config.get('position_embedding_type')!r}"
    if config.get("is_decoder") or config.get("add_cross_attention"):
        return "a decoder"
    if config.get("hidden_act", "gelu") not in _ACTIVATIONS:
        return f"hidden_act {config.get('hidden_act')!r}"
    sizes = [config.get(k) for k in ("hidden_size", "num_attention_heads", "num_hidden_layers")]
    if not all(isinstance(v, int) and v > 0 for v in sizes) or sizes[0] % sizes[1]:
        return "hidden_size, num_attention_heads or num_hidden_layers missing or inconsistent"
    if not (path / _WEIGHTS).is_file():
        return f"no {_WEIGHTS}"
    if not json_object(path / "tokenizer.json"):
        return "no tokenizer.json"
    return casing_disagreement(path)


class BertTokenizer:
    """``tokenizer.json`` through the ``tokenizers`` library, truncating at ``max_tokens`` tokens
    (special tokens included) and never padding: what ``AutoTokenizer(...)(texts, truncation=True,
    max_length=max_tokens)`` gives for the same directory."""

    is_fast = True

    def __init__(self, path: Path, max_tokens: int) -> None:
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(path / "tokenizer.json"))
        tok.no_padding()
        tok.enable_truncation(max_length=max_tokens)
        self._tok = tok
        config = json_object(path / "config.json")
        pad = json_object(path / "tokenizer_config.json").get("pad_token")
        pad_id = tok.token_to_id(pad) if isinstance(pad, str) else None
        self.pad_id = int(pad_id if pad_id is not None else config.get("pad_token_id") or 0)

    def __call__(self, texts: Sequence[str], offsets: bool) -> tuple[list[list[int]], list | None]:
        encodings = self._tok.encode_batch(list(texts))
        ids = [e.ids for e in encodings]
        return ids, ([e.offsets for e in encodings] if offsets else None)

    def pad(self, ids: Sequence[Sequence[int]]):
        """Right-padded ``input_ids`` and ``attention_mask`` (int64 tensors), as transformers pads BERT."""
        import torch

        longest = max((len(x) for x in ids), default=0)
        input_ids = torch.full((len(ids), longest), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(ids), longest), dtype=torch.long)
        for i, row in enumerate(ids):
            input_ids[i, : len(row)] = torch.tensor(row, dtype=torch.long)
            mask[i, : len(row)] = 1
        return input_ids, mask


@dataclass
class _Layer:
    q: tuple[Any, Any]
    k: tuple[Any, Any]
    v: tuple[Any, Any]
    attn_out: tuple[Any, Any]
    attn_norm: tuple[Any, Any]
    ff_in: tuple[Any, Any]
    ff_out: tuple[Any, Any]
    ff_norm: tuple[Any, Any]


class BertModel:
    """A BERT encoder's weights and its inference forward pass (:meth:`hidden`)."""

    def __init__(self, config: dict, tensors: dict[str, Any]) -> None:
        self.hidden_size = int(config["hidden_size"])
        self.heads = int(config["num_attention_heads"])
        self.eps = float(config.get("layer_norm_eps", 1e-12))
        self.activation = config.get("hidden_act", "gelu")

        def get(name: str):
            try:
                return tensors[name]
            except KeyError:
                raise KeyError(f"weight {name} missing") from None

        def pair(prefix: str):
            return get(prefix + ".weight"), get(prefix + ".bias")

        self.word = get("embeddings.word_embeddings.weight")
        self.position = get("embeddings.position_embeddings.weight")
        self.token_type = get("embeddings.token_type_embeddings.weight")
        self.embed_norm = (get("embeddings.LayerNorm.weight"), get("embeddings.LayerNorm.bias"))
        self.layers = []
        for i in range(int(config["num_hidden_layers"])):
            p = f"encoder.layer.{i}."
            self.layers.append(_Layer(
                q=pair(p + "attention.self.query"), k=pair(p + "attention.self.key"),
                v=pair(p + "attention.self.value"), attn_out=pair(p + "attention.output.dense"),
                attn_norm=pair(p + "attention.output.LayerNorm"), ff_in=pair(p + "intermediate.dense"),
                ff_out=pair(p + "output.dense"), ff_norm=pair(p + "output.LayerNorm"),
            ))

    def to(self, device) -> "BertModel":
        def move(x):
            return tuple(t.to(device) for t in x) if isinstance(x, tuple) else x.to(device)

        self.word, self.position, self.token_type = move(self.word), move(self.position), move(self.token_type)
        self.embed_norm = move(self.embed_norm)
        for layer in self.layers:
            for name in layer.__dataclass_fields__:
                setattr(layer, name, move(getattr(layer, name)))
        return self

    def _act(self, x):
        import torch.nn.functional as F

        if self.activation == "gelu":
            return F.gelu(x)
        if self.activation == "relu":
            return F.relu(x)
        return F.gelu(x, approximate="tanh")  # gelu_new, gelu_pytorch_tanh

    def hidden(self, input_ids, attention_mask):
        """Last-layer token vectors ``(batch, tokens, hidden)`` for right- or left-padded
        ``input_ids`` with ``attention_mask`` (1 for real tokens). Run it under
        ``torch.inference_mode()`` (and ``torch.autocast`` for bf16/fp16), as the encoder does."""
        import torch.nn.functional as F

        batch, length = input_ids.shape
        h, eps = self.hidden_size, self.eps
        x = F.embedding(input_ids, self.word) + self.token_type[0]
        x = x + self.position[:length]
        x = F.layer_norm(x, (h,), *self.embed_norm, eps)
        # True where a key may be attended to: every real token of the row
        keep = attention_mask.to(device=x.device, dtype=bool)[:, None, None, :]
        head = h // self.heads
        scale = 1.0 / math.sqrt(head)
        for layer in self.layers:
            def heads(w, x=x):
                return F.linear(x, *w).view(batch, length, self.heads, head).transpose(1, 2)

            a = F.scaled_dot_product_attention(heads(layer.q), heads(layer.k), heads(layer.v), attn_mask=keep, scale=scale)
            a = a.transpose(1, 2).reshape(batch, length, h)
            x = F.layer_norm(F.linear(a, *layer.attn_out) + x, (h,), *layer.attn_norm, eps)
            y = F.linear(self._act(F.linear(x, *layer.ff_in)), *layer.ff_out)
            x = F.layer_norm(y + x, (h,), *layer.ff_norm, eps)
        return x


def load_bert(path: Path) -> BertModel:
    """The BERT encoder of ``path`` (checked by :func:`native_support` first), on the CPU in float32."""
    from safetensors.torch import load_file

    tensors = load_file(str(path / _WEIGHTS), device="cpu")
    if any(k.startswith("bert.") for k in tensors):  # BertForMaskedLM and friends: the encoder under bert.
        tensors = {k[len("bert."):]: v for k, v in tensors.items() if k.startswith("bert.")}
    tensors = {k: v.float() for k, v in tensors.items()}
    return BertModel(json_object(path / "config.json"), tensors)
