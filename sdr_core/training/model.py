"""Loading a base model for training (with an MLM head) and saving the trained model directory.

The saved directory is a plain HuggingFace model directory (config, weights, tokenizer) that
:class:`sdr_search.core.encoder.SentenceEncoder` loads with ``AutoModel`` (the MLM head is ignored there).
Its ``config.json`` carries the training provenance under ``sdr_training``.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any

from ..errors import InvalidInputError, ModelNotFoundError

__all__ = ["load_for_training", "mlm_head", "encoder_layers", "freeze_below", "save_model", "read_provenance"]

logger = logging.getLogger(__name__)

PROVENANCE_KEY = "sdr_training"


def load_for_training(path: Path, *, seed: int = 0):
    """``(model, tokenizer, head_initialised)``: the base model with an MLM head. A base without
    one (e.g. the sentence-transformers MiniLM) gets a freshly initialised head (seeded)."""
    import torch
    from transformers import AutoModelForMaskedLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.manual_seed(seed)
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # the "newly initialised weights" warning is reported below instead
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        model, info = AutoModelForMaskedLM.from_pretrained(str(path), local_files_only=True, output_loading_info=True)
    except (OSError, ValueError, KeyError) as e:
        raise ModelNotFoundError(f"cannot load {path} as a masked language model: {e}") from e
    finally:
        hf_logging.set_verbosity(verbosity)
    if tokenizer.mask_token_id is None:
        raise ModelNotFoundError(f"the tokenizer of {path} has no mask token; MLM training needs one")
    missing = list(info.get("missing_keys", []))
    prefix = model.base_model_prefix
    head_missing = [k for k in missing if not k.startswith(prefix + ".")]
    base_missing = [k for k in missing if k.startswith(prefix + ".")]
    if base_missing:
        logger.warning("base model weights not found in %s and initialised randomly: %s", path, base_missing[:5])
    if head_missing:
        logger.info("%s has no MLM head: initialised a new one (%d tensors, seed %d)", path, len(head_missing), seed)
    return model, tokenizer, bool(head_missing)


def mlm_head(model) -> Any | None:
    """The module mapping hidden states to vocabulary logits, when the architecture exposes it as
    ``cls`` (BERT family) or ``lm_head`` (RoBERTa family); ``None`` otherwise."""
    for name in ("cls", "lm_head"):
        head = getattr(model, name, None)
        if head is not None and callable(head):
            return head
    return None


def encoder_layers(model):
    """The transformer layers of ``model``'s encoder, bottom first: the ``ModuleList`` of the base
    model with ``config.num_hidden_layers`` entries (``encoder.layer`` in BERT, RoBERTa, MPNet;
    ``transformer.layer`` in DistilBERT)."""
    import torch

    n = getattr(model.config, "num_hidden_layers", None)
    for _, module in model.base_model.named_modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) == n:
            return module
    raise ModelNotFoundError(f"cannot find the {n} transformer layers of {type(model).__name__}; "
                             "--trainable-layers needs them")


def freeze_below(model, trainable_layers: int) -> list[str]:
    """Freeze the embeddings and every transformer layer below the top ``trainable_layers`` (their
    parameters stop requiring gradients, so autograd builds no graph through them). What sits above
    the layers (a final norm, the pooler, the MLM head's own weights) keeps learning; a decoder tied
    to the word embeddings is frozen with them. Returns the frozen parameters' names."""
    layers = encoder_layers(model)
    if not 1 <= trainable_layers <= len(layers):
        raise InvalidInputError(f"--trainable-layers {trainable_layers}: the encoder has {len(layers)} layers")
    frozen_modules = [model.get_input_embeddings()]
    embeddings = getattr(model.base_model, "embeddings", None)
    if embeddings is not None:
        frozen_modules.append(embeddings)
    frozen_modules.extend(layers[: len(layers) - trainable_layers])
    frozen_ids = {id(p) for m in frozen_modules for p in m.parameters()}
    names = []
    for name, p in model.named_parameters():
        if id(p) in frozen_ids:
            p.requires_grad_(False)
            names.append(name)
    return names


def save_model(model, tokenizer, out_dir: Path, provenance: dict[str, Any]) -> None:
    """Write the model directory: weights, tokenizer and ``config.json`` with provenance.

    Written into a sibling temporary directory first, then moved into place file by file, with
    ``config.json`` last, so a directory with a config is complete."""
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / ".model-tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    setattr(model.config, PROVENANCE_KEY, provenance)
    model.save_pretrained(str(tmp), safe_serialization=True)
    tokenizer.save_pretrained(str(tmp))
    names = sorted(p.name for p in tmp.iterdir())
    for name in [n for n in names if n != "config.json"] + ["config.json"]:
        os.replace(tmp / name, out_dir / name)
    tmp.rmdir()


def read_provenance(model_dir: Path) -> dict[str, Any] | None:
    """The ``sdr_training`` provenance of a model directory, or ``None`` for an untrained model."""
    try:
        config = json.loads((Path(model_dir) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    value = config.get(PROVENANCE_KEY)
    return value if isinstance(value, dict) else None
