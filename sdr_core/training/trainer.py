"""The training loop of ``sdr train``: MLM + metric loss, checkpoints, resume, progress, determinism.

With ``head_warmup_steps`` (for a base without an MLM head, and ``mlm_weight > 0``) the run starts
with that many steps in which only the new head learns, from the MLM loss alone, at
``head_warmup_lr``: the encoder runs without gradients (a decoder tied to the word embeddings stays
frozen with it). A random head's MLM loss (about 10) otherwise dominates the total and its
gradients flatten the encoder's sentence space. ``steps`` counts the steps after the warm-up;
the learning-rate schedule starts after it.

One step: draw a batch of sentence pairs (:mod:`.sampler`), tokenise both sides together (padding
to the longest, ``max_tokens`` cap), mask them RoBERTa-style, run the encoder once, and combine

- the MLM loss (cross-entropy on the masked positions; the head is applied to those positions only),
- the metric loss on the mean-pooled last-layer vectors of the same pass: SDR's contrastive loss
  (``objective="sdr"``), MetricBERT's hardest-negative angular triplet loss (``"triplet"``) or the
  in-batch-negatives InfoNCE loss (``"inbatch"``, every other document's positive in the batch is
  a negative, at ``temperature``),

as ``mlm_weight * MLM + metric`` (the paper's total is the plain sum). As in the reference code,
the sentence vectors come from the masked input, so masking doubles as augmentation. With
``mlm_weight`` 0 the MLM loss is still computed and logged, without gradients.

With ``trainable_layers`` N only the top N transformer layers (and what sits above them) learn:
the embeddings and the lower layers are frozen (no gradients, no optimiser state), which also
makes the backward pass cheaper.

AdamW with linear warm-up and decay, gradient clipping at 1.0. The forward pass runs under
autocast: bf16 on CUDA (fp16 with a gradient scaler where bf16 is missing) and on CPUs with native
bf16 (AVX512-BF16/AMX: faster than fp32 per step, docs/results/training.md), fp32
otherwise; weights and optimiser state stay fp32. Every ``checkpoint_every`` steps the
weights, optimiser, scheduler, sampler and random states are written to
``OUT/checkpoints/step-NNNNNNN`` (temporary directory, then rename); a new run with the same
corpus, base model and settings resumes from the newest one and draws the same batches as an
uninterrupted run. The final model directory is written to ``OUT`` with provenance in its
``config.json``; the per-step losses go to ``OUT/training_log.jsonl``.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from .. import __version__
from ..documents import Document
from ..encoder import model_fingerprint, resolve_device, resolve_model_dir, resolve_precision
from ..errors import InvalidInputError, SDRError
from .sampler import PairSampler, SentencePool, corpus_fingerprint
from .settings import TrainSettings

__all__ = ["TrainResult", "train", "run_signature"]

logger = logging.getLogger(__name__)

_CHECKPOINTS = "checkpoints"
_LOG = "training_log.jsonl"
# Settings that do not change what is learned (a resumed run may change them).
_NOT_IN_SIGNATURE = {"checkpoint_every", "keep_checkpoints", "device", "probe_pairs"}


@dataclass
class TrainResult:
    out_dir: Path
    steps: int
    resumed_from: int
    seconds: float
    first_loss: float
    last_loss: float
    provenance: dict[str, Any]

    @property
    def probe_cosines(self) -> dict[str, Any]:
        return self.provenance["probe_cosines"]


def probe_pairs(pool: SentencePool, seed: int, n: int = 256):
    """A fixed probe set (own seed, drawn before training): ``n`` positive and ``n`` negative pairs."""
    sampler = PairSampler(pool, seed=seed + 7919)
    return sampler.anchor_positive_batch(n), sampler.pair_batch(4 * n)


def pair_cosines(model, tokenizer, probe, device, max_tokens: int) -> dict[str, float]:
    """Mean cosine of the probe's positive and negative pairs under ``model`` (eval mode, unmasked
    input, the encoder's pooling). A collapsed encoder shows negatives close to positives."""
    import torch

    from ..encoder import mean_pool

    positives, mixed = probe
    neg_left = [a for a, y in zip(mixed.left, mixed.labels) if y == 0]
    neg_right = [b for b, y in zip(mixed.right, mixed.labels) if y == 0]
    base = model.base_model
    was_training = model.training
    model.eval()

    def encode(texts: list[str]) -> torch.Tensor:
        out = []
        for i in range(0, len(texts), 64):
            enc = tokenizer(texts[i:i + 64], truncation=True, max_length=max_tokens, padding=True,
                            return_tensors="pt", return_token_type_ids=False)
            with torch.inference_mode():
                hidden = base(input_ids=enc["input_ids"].to(device), attention_mask=enc["attention_mask"].to(device)).last_hidden_state
                out.append(mean_pool(hidden.float(), enc["attention_mask"].to(device)))
        return torch.cat(out)

    try:
        pos = (encode(positives.left) * encode(positives.right)).sum(-1).mean().item()
        neg = (encode(neg_left) * encode(neg_right)).sum(-1).mean().item() if neg_left else float("nan")
    finally:
        model.train(was_training)
    return {"positive": round(pos, 4), "negative": round(neg, 4), "gap": round(pos - neg, 4)}


def run_signature(settings: TrainSettings, base_fingerprint: str, corpus_hash: str) -> dict[str, Any]:
    """What a checkpoint must match to be resumed."""
    s = {k: v for k, v in settings.model_dump().items() if k not in _NOT_IN_SIGNATURE}
    return {"settings": s, "base": base_fingerprint, "corpus": corpus_hash}


def _lr_lambda(total: int, warmup: int, *, frozen: int = 0, frozen_factor: float = 0.0):
    """Linear warm-up then linear decay over ``total`` steps, after ``frozen`` steps at the constant
    factor ``frozen_factor`` (the MLM-head warm-up: 0 for the encoder, head lr / lr for the head)."""
    def f(step: int) -> float:
        if step < frozen:
            return frozen_factor
        step -= frozen
        if warmup and step < warmup:
            return (step + 1) / warmup
        return max(0.0, (total - step) / max(1, total - warmup))

    return f


def _param_groups(model, head, weight_decay: float) -> tuple[list[dict], list[bool]]:
    """AdamW groups (decay / no decay) of the encoder and of the MLM head's own parameters (a
    decoder tied to the input embeddings belongs to the encoder), and which groups are the head's.
    Empty groups are left out."""
    head_ids = {id(p) for p in head.parameters()} if head is not None else set()
    base_ids = {id(p) for p in model.base_model.parameters()}
    buckets: dict[tuple[bool, bool], list] = {(h, d): [] for h in (False, True) for d in (True, False)}
    for name, p in model.named_parameters():
        if not p.requires_grad:  # frozen by --trainable-layers
            continue
        is_head = id(p) in head_ids and id(p) not in base_ids
        decays = not (p.ndim < 2 or "LayerNorm" in name or "layer_norm" in name)
        buckets[(is_head, decays)].append(p)
    groups, is_head = [], []
    for (h, d), params in buckets.items():
        if params:
            groups.append({"params": params, "weight_decay": weight_decay if d else 0.0})
            is_head.append(h)
    return groups, is_head


def _latest_checkpoint(out_dir: Path) -> Path | None:
    root = out_dir / _CHECKPOINTS
    if not root.is_dir():
        return None
    done = sorted(p for p in root.iterdir() if p.is_dir() and p.name.startswith("step-") and (p / "state.json").is_file())
    return done[-1] if done else None


def _save_checkpoint(out_dir: Path, step: int, model, optimizer, scheduler, scaler, sampler: PairSampler,
                     mask_gen, signature: dict, keep: int) -> None:
    import torch

    root = out_dir / _CHECKPOINTS
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step-{step:07d}"
    tmp = root / f".tmp-step-{step:07d}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    torch.save(
        {
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
            "scaler": scaler.state_dict() if scaler is not None else None,
            "torch_rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
            "mask_rng": mask_gen.get_state(),
        },
        tmp / "training.pt",
    )
    (tmp / "state.json").write_text(json.dumps({"step": step, "sampler": sampler.state(), "signature": signature}))
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    for old in sorted(p for p in root.iterdir() if p.name.startswith("step-"))[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    logger.info("checkpoint %s", final)


def _load_checkpoint(path: Path, model, optimizer, scheduler, scaler, sampler: PairSampler, mask_gen, signature: dict) -> int:
    import torch

    state = json.loads((path / "state.json").read_text())
    if state["signature"] != signature:
        raise SDRError(
            f"{path.parent.parent} holds checkpoints of a different training run (corpus, base model or "
            "settings differ); pass --restart to discard them or choose another --out"
        )
    blob = torch.load(path / "training.pt", map_location="cpu", weights_only=False)
    model.load_state_dict(blob["model"])
    optimizer.load_state_dict(blob["optimizer"])
    scheduler.load_state_dict(blob["scheduler"])
    if scaler is not None and blob.get("scaler") is not None:
        scaler.load_state_dict(blob["scaler"])
    torch.set_rng_state(blob["torch_rng"])
    if blob.get("cuda_rng") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(blob["cuda_rng"])
    mask_gen.set_state(blob["mask_rng"])
    sampler.set_state(state["sampler"])
    return int(state["step"])


def _truncate_log(path: Path, step: int) -> None:
    """Drop log lines past ``step`` (written after the checkpoint a resumed run starts from)."""
    if not path.exists():
        return
    keep = [line for line in path.read_text().splitlines() if line.strip() and json.loads(line)["step"] <= step]
    path.write_text("".join(line + "\n" for line in keep))


def train(
    docs: Sequence[Document],
    out_dir: Path,
    *,
    base: str | os.PathLike | None = None,
    settings: TrainSettings | None = None,
    restart: bool = False,
    progress: bool = True,
    threads: int | None = None,
    segmentation: Mapping[str, Any] | None = None,
) -> TrainResult:
    """Train an encoder on ``docs`` (see module docstring) and write it to ``out_dir``.

    ``segmentation`` (how ``docs`` were segmented, :meth:`SegmentationSettings.recorded`) is
    recorded in the provenance: it decides which sentences are positives."""
    import torch

    from ..encoder import mean_pool
    from .losses import contrastive_loss, inbatch_negatives_loss, mask_tokens, triplet_hardest_loss
    from .model import freeze_below, load_for_training, mlm_head, save_model

    settings = settings or TrainSettings()
    out_dir = Path(out_dir)
    if threads:
        torch.set_num_threads(threads)
    base_dir = resolve_model_dir(base)
    if base_dir == out_dir.resolve():
        raise InvalidInputError("--out must differ from the base model directory")
    pool = SentencePool.from_documents(
        docs, max_sentences_per_paragraph=settings.max_sentences_per_paragraph, min_chars=settings.min_sentence_chars
    )
    sampler = PairSampler(pool, seed=settings.seed, positive_fraction=settings.positive_fraction)
    corpus_hash = corpus_fingerprint(docs)
    base_fp = model_fingerprint(base_dir)
    signature = run_signature(settings, base_fp, corpus_hash)
    logger.info("training pool: %d documents, %d paragraphs, %d sentences", pool.n_docs, len(pool.par_doc), len(pool.sentences))

    device = resolve_device(settings.device)
    precision = resolve_precision(settings.precision, device)
    model, tokenizer, head_initialised = load_for_training(base_dir, seed=settings.seed)
    model.to(device).train()
    frozen_names: list[str] = []
    if settings.trainable_layers is not None:
        frozen_names = freeze_below(model, settings.trainable_layers)
        n_trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
        logger.info("trainable layers: top %d; %d parameter tensors frozen, %d parameters learn",
                    settings.trainable_layers, len(frozen_names), n_trainable)
    probe = probe_pairs(pool, settings.seed, settings.probe_pairs) if settings.probe_pairs else None
    cos_before = pair_cosines(model, tokenizer, probe, device, settings.max_tokens) if probe else None
    if cos_before:
        logger.info("probe pair cosines before training: %s", cos_before)
    head = mlm_head(model)
    base_model = model.base_model

    head_warmup = settings.head_warmup_steps
    if head_warmup and not head_initialised:
        logger.info("MLM head warm-up skipped: %s ships a trained MLM head", base_dir)
        head_warmup = 0
    elif head_warmup and settings.mlm_weight == 0:
        logger.info("MLM head warm-up skipped: --mlm-weight 0 leaves the head out of the loss")
        head_warmup = 0
    elif head_warmup and head is None:
        logger.warning("MLM head warm-up skipped: %s exposes no MLM head module", base_dir)
        head_warmup = 0
    total_steps = head_warmup + settings.steps
    groups, group_is_head = _param_groups(model, head, settings.weight_decay)
    optimizer = torch.optim.AdamW(groups, lr=settings.learning_rate)
    warmup = int(settings.steps * settings.warmup_fraction)
    head_factor = settings.head_warmup_lr / settings.learning_rate
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, [
        _lr_lambda(settings.steps, warmup, frozen=head_warmup, frozen_factor=head_factor if h else 0.0)
        for h in group_is_head
    ])
    scaler = torch.amp.GradScaler("cuda") if precision == "fp16" else None
    amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    mask_gen = torch.Generator().manual_seed(settings.seed + 1)
    torch.manual_seed(settings.seed + 2)  # dropout

    start = 0
    log_path = out_dir / _LOG
    if restart and (out_dir / _CHECKPOINTS).exists():
        shutil.rmtree(out_dir / _CHECKPOINTS)
        log_path.unlink(missing_ok=True)
    ckpt = _latest_checkpoint(out_dir)
    if ckpt is not None:
        start = _load_checkpoint(ckpt, model, optimizer, scheduler, scaler, sampler, mask_gen, signature)
        _truncate_log(log_path, start)
        logger.info("resuming from %s (step %d of %d)", ckpt, start, total_steps)
    elif not restart:
        log_path.unlink(missing_ok=True)
    if start >= total_steps:
        logger.info("training already reached %d steps; writing the model", start)

    vocab_size = model.get_output_embeddings().weight.shape[0] if model.get_output_embeddings() is not None else len(tokenizer)
    bar = None
    if progress and start < total_steps:
        from tqdm.auto import tqdm

        bar = tqdm(total=total_steps, initial=start, unit="step", desc=f"training ({settings.objective})")
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    losses: list[float] = []
    ema = None
    try:
        with log_path.open("a") as log:
            for step in range(start + 1, total_steps + 1):
                frozen = step <= head_warmup  # MLM-head warm-up: the encoder neither learns nor gets gradients
                if settings.objective == "sdr":
                    batch = sampler.pair_batch(settings.batch_size)
                else:
                    batch = sampler.anchor_positive_batch(settings.batch_size)
                enc = tokenizer(
                    batch.left + batch.right, truncation=True, max_length=settings.max_tokens, padding=True,
                    return_special_tokens_mask=True, return_tensors="pt", return_token_type_ids=False,
                )
                special = enc["special_tokens_mask"].bool() | (enc["attention_mask"] == 0)
                input_ids, labels = mask_tokens(
                    enc["input_ids"], special, mask_token_id=tokenizer.mask_token_id, vocab_size=vocab_size,
                    probability=settings.mlm_probability, generator=mask_gen,
                )
                input_ids, labels = input_ids.to(device), labels.to(device)
                attention = enc["attention_mask"].to(device)
                with torch.autocast(device_type=device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
                    if head is not None:
                        with torch.set_grad_enabled(not frozen):
                            hidden = base_model(input_ids=input_ids, attention_mask=attention).last_hidden_state
                        sel = labels != -100
                        if bool(sel.any()):
                            with torch.set_grad_enabled(frozen or settings.mlm_weight > 0):
                                logits = head(hidden[sel])
                                mlm = torch.nn.functional.cross_entropy(logits.float(), labels[sel])
                        else:
                            mlm = hidden.sum() * 0.0
                    else:
                        outputs = model(input_ids=input_ids, attention_mask=attention, labels=labels, output_hidden_states=True)
                        hidden, mlm = outputs.hidden_states[-1], outputs.loss.float()
                vecs = mean_pool(hidden.float(), attention)
                b = settings.batch_size
                fp, fq = vecs[:b], vecs[b:]
                if settings.objective == "sdr":
                    metric = contrastive_loss(fp, fq, torch.as_tensor(batch.labels, device=device), settings.margin)
                elif settings.objective == "inbatch":
                    metric = inbatch_negatives_loss(fp, fq, torch.as_tensor(batch.left_doc, device=device),
                                                    settings.temperature)
                else:
                    metric = triplet_hardest_loss(fp, fq, torch.as_tensor(batch.left_doc, device=device), settings.triplet_margin)
                loss = mlm if frozen else settings.mlm_weight * mlm + metric
                loss_value, mlm_value, metric_value = float(loss.detach()), float(mlm.detach()), float(metric.detach())
                if not math.isfinite(loss_value):
                    raise SDRError(f"training diverged at step {step} (loss {loss_value}); lower --lr")
                step_lr = max(g["lr"] for g in optimizer.param_groups)  # the head's during its warm-up
                optimizer.zero_grad(set_to_none=True)
                if loss.requires_grad:  # not so for a warm-up batch without a masked token
                    if scaler is not None:
                        scaler.scale(loss).backward()
                        scaler.unscale_(optimizer)
                        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                        scaler.step(optimizer)
                        scaler.update()
                    else:
                        loss.backward()
                        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                        optimizer.step()
                scheduler.step()
                row = {"step": step, "loss": round(loss_value, 5), "mlm": round(mlm_value, 5),
                       "metric": round(metric_value, 5), "lr": step_lr, "head_warmup": frozen}
                log.write(json.dumps(row) + "\n")
                if not frozen:  # the summary's first/last losses compare joint steps only
                    losses.append(loss_value)
                ema = loss_value if ema is None else 0.95 * ema + 0.05 * loss_value
                if bar is not None:
                    bar.update(1)
                    bar.set_postfix(loss=f"{ema:.3f}", mlm=f"{mlm_value:.2f}", metric=f"{metric_value:.3f}")
                elif step % 50 == 0:
                    logger.info("step %d/%d loss %.4f (mlm %.3f, %s %.4f)", step, total_steps, ema, mlm_value,
                                settings.objective, metric_value)
                if step % settings.checkpoint_every == 0 and step < total_steps:
                    log.flush()
                    _save_checkpoint(out_dir, step, model, optimizer, scheduler, scaler, sampler, mask_gen,
                                     signature, settings.keep_checkpoints)
    finally:
        if bar is not None:
            bar.close()
    seconds = time.perf_counter() - t0
    cos_after = pair_cosines(model, tokenizer, probe, device, settings.max_tokens) if probe else None
    if cos_after:
        logger.info("probe pair cosines after training: %s (before: %s)", cos_after, cos_before)
    if cos_after and (cos_after["gap"] < cos_before["gap"] or cos_after["negative"] > 0.5):
        logger.warning(
            "the trained encoder separates probe pairs less well than the base (gap %.3f -> %.3f, negative "
            "cosine %.3f): it may have collapsed; evaluate before using it, and try a lower --mlm-weight or --lr",
            cos_before["gap"], cos_after["gap"], cos_after["negative"])
    provenance = {
        "base_model": str(base_dir),
        "base_fingerprint": base_fp,
        "objective": settings.objective,
        "steps": settings.steps,
        "head_warmup_steps": head_warmup,
        "trainable_layers": settings.trainable_layers,
        "frozen_parameters": len(frozen_names),
        "corpus_hash": corpus_hash,
        "segmentation": dict(segmentation) if segmentation is not None else None,
        "corpus_documents": pool.n_docs,
        "corpus_sentences": len(pool.sentences),
        "mlm_head_initialised": head_initialised,
        "settings": signature["settings"],
        "precision": precision,
        "probe_cosines": {"before": cos_before, "after": cos_after},
        "sdr_search_version": __version__,
        "torch_version": torch.__version__,
    }
    model.eval()
    save_model(model.cpu(), tokenizer, out_dir, provenance)
    logger.info("wrote trained model to %s", out_dir)
    first = float(np.mean(losses[: min(20, len(losses))])) if losses else float("nan")
    last = float(np.mean(losses[-min(20, len(losses)):])) if losses else float("nan")
    return TrainResult(out_dir, settings.steps, start, seconds, first, last, provenance)
