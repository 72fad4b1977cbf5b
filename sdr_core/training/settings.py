"""Settings of ``sdr train`` (env prefix ``SDR_TRAIN_``); command-line flags override fields."""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["TrainSettings"]


class TrainSettings(BaseSettings):
    """Hyper-parameters of self-supervised SDR training. Defaults fit a small CPU budget."""

    model_config = SettingsConfigDict(env_prefix="SDR_TRAIN_", extra="ignore")

    objective: Literal["sdr", "triplet", "inbatch"] = Field(
        "sdr",
        description="'sdr': MLM + contrastive loss on sentence pairs (paper eq. 1, margin m). "
        "'triplet': MLM + MetricBERT's angular-distance triplet loss with the hardest in-batch negative. "
        "'inbatch': MLM + in-batch-negatives contrastive loss (InfoNCE / multiple-negatives ranking): each "
        "anchor against its same-paragraph positive, the other documents' positives in the batch as negatives "
        "(use with mlm_weight 0 for contrastive only).",
    )
    steps: int = Field(1000, gt=0, description="Optimiser steps.")
    batch_size: int = Field(
        32, gt=1,
        description="Sentence pairs per step ('sdr': each pair is a positive or a negative; "
        "'triplet', 'inbatch': anchor-positive pairs, negatives taken from the batch).",
    )
    learning_rate: float = Field(
        1e-5, gt=0,
        description="AdamW peak learning rate (linear warm-up, then linear decay). 1e-5: at 2e-5 the measured "
        "IRLeD runs flattened the default encoder's sentence space (docs/results/training.md).",
    )
    warmup_fraction: float = Field(0.1, ge=0, lt=1, description="Fraction of the steps spent warming up.")
    weight_decay: float = Field(0.01, ge=0)
    max_tokens: int = Field(
        64, gt=4,
        description="Tokens per training sentence (longer ones are truncated). Shorter than the encoder's "
        "128 to keep CPU steps cheap; most sentences of the shared corpora fit.",
    )
    head_warmup_steps: int = Field(
        200, ge=0,
        description="Steps before --steps in which only a freshly initialised MLM head learns (encoder frozen, "
        "MLM loss only, at head_warmup_lr), so its random gradients do not reach the encoder. Skipped when the "
        "base model ships an MLM head and when mlm_weight is 0. 0 turns it off (measured on IRLeD: the "
        "encoder then collapses).",
    )
    head_warmup_lr: float = Field(5e-4, gt=0, description="Constant learning rate of the MLM head during its warm-up.")
    mlm_probability: float = Field(0.15, ge=0, lt=1, description="Fraction of tokens selected for MLM (RoBERTa-style 80/10/10).")
    mlm_weight: float = Field(1.0, ge=0, description="Weight of the MLM term (total = mlm_weight * MLM + metric loss).")
    margin: float = Field(
        1.0, gt=0, le=2,
        description="'sdr' contrastive margin m: negatives are penalised for cosine > 1 - m (m = 1: cosine > 0).",
    )
    triplet_margin: float = Field(
        0.1, gt=0, le=1, description="'triplet' margin on the angular distance arccos(cos)/pi (in [0, 1]).",
    )
    temperature: float = Field(
        0.05, gt=0, le=1,
        description="'inbatch' softmax temperature on the cosines (0.05 = sentence-transformers' scale 20).",
    )
    trainable_layers: int | None = Field(
        None, ge=1,
        description="Train only the top N transformer layers of the encoder (and what sits above them: a final "
        "norm or pooler, the MLM head); the embeddings and the lower layers stay frozen, and the frozen part "
        "runs without gradients. N equal to the number of layers freezes the embeddings only. Unset: everything "
        "learns.",
    )
    positive_fraction: float = Field(0.5, gt=0, lt=1, description="'sdr': probability that a sampled pair is a positive.")
    max_sentences_per_paragraph: int = Field(
        32, gt=1,
        description="Only the first N sentences of a paragraph are sampled (as in the reference code), so "
        "very long paragraphs do not dominate the positives.",
    )
    min_sentence_chars: int = Field(
        20, ge=0, description="Sentences shorter than this (headings, numbers) are never sampled.",
    )
    probe_pairs: int = Field(
        256, ge=0,
        description="Positive pairs (and about as many negatives) of a fixed probe set whose mean cosines are "
        "reported before and after training, to catch a collapsed encoder without a full evaluation; 0 = off.",
    )
    checkpoint_every: int = Field(200, gt=0, description="Steps between checkpoints (resumable).")
    keep_checkpoints: int = Field(2, gt=0, description="Checkpoints kept on disk (older ones are removed).")
    device: str = Field("auto", description="'auto' (CUDA when present), 'cpu', 'cuda', 'cuda:N'.")
    precision: Literal["auto", "fp32", "bf16", "fp16"] = Field(
        "auto",
        description="Autocast precision of the forward pass. 'auto': bf16 on CUDA with bf16 (fp16 with a "
        "gradient scaler otherwise) and on CPUs with native bf16 (AVX512-BF16/AMX), fp32 otherwise.",
    )
    seed: int = Field(0, description="Seeds the pair sampler, masking, dropout and the MLM head initialisation.")
