"""Training losses (torch): SDR's contrastive loss, MetricBERT's triplet loss, MLM masking.

All metric losses take L2-normalised sentence vectors (mean-pooled last layer, as the encoder
computes them at inference).

- :func:`contrastive_loss` - paper eq. 1: ``1 - C(p, q)`` for a positive, ``max(0, C(p, q) - (1 - m))``
  for a negative; with ``m = 1`` negatives are pushed to orthogonality, and negative cosines are not
  penalised.
- :func:`triplet_hardest_loss` - MetricBERT eq. 1-3: ``max(0, m + d(a, p) - d(a, n))`` with the
  angular distance ``d = arccos(C) / pi`` and, for each anchor, the hardest (closest) in-batch
  negative among the sentences of *other documents*.
- :func:`inbatch_negatives_loss` - InfoNCE / multiple-negatives ranking loss: for each anchor, a
  softmax cross-entropy over ``C(a, p_j) / t`` with its own positive as the target and the other
  pairs' positives as negatives; positives of pairs from the anchor's own document are left out
  (they may be paraphrases, not negatives).
- :func:`mask_tokens` - RoBERTa-style dynamic masking: of the selected tokens 80 % become the mask
  token, 10 % a random token, 10 % stay; labels are -100 elsewhere.
"""

from __future__ import annotations

import torch

__all__ = ["contrastive_loss", "angular_distance", "triplet_hardest_loss", "inbatch_negatives_loss", "mask_tokens"]

_EPS = 1e-6


def contrastive_loss(fp: torch.Tensor, fq: torch.Tensor, labels: torch.Tensor, margin: float = 1.0) -> torch.Tensor:
    """Mean over pairs of SDR's contrastive loss (eq. 1) on unit vectors ``fp``, ``fq`` of shape (B, d)."""
    cos = (fp * fq).sum(dim=-1)
    pos = 1.0 - cos
    neg = torch.clamp(cos - (1.0 - margin), min=0.0)
    y = labels.to(cos.dtype)
    return (y * pos + (1.0 - y) * neg).mean()


def angular_distance(cos: torch.Tensor) -> torch.Tensor:
    """``arccos(cos) / pi`` in [0, 1]; clamped away from +-1 so the gradient stays finite."""
    return torch.arccos(cos.clamp(-1.0 + _EPS, 1.0 - _EPS)) / torch.pi


def triplet_hardest_loss(
    anchors: torch.Tensor, positives: torch.Tensor, docs: torch.Tensor, margin: float = 0.1
) -> torch.Tensor:
    """MetricBERT triplet loss with the hardest in-batch negative (see module docstring).

    ``anchors``/``positives``: unit vectors (B, d); ``docs``: (B,) document index of each pair.
    Negatives are the anchors and positives of pairs from other documents. Anchors without any
    such negative (a batch from one document) contribute nothing; a batch without any gives 0.
    """
    pool = torch.cat([anchors, positives], dim=0)  # (2B, d)
    pool_docs = torch.cat([docs, docs], dim=0)
    cos = anchors @ pool.T  # (B, 2B)
    allowed = docs.unsqueeze(1) != pool_docs.unsqueeze(0)
    has_neg = allowed.any(dim=1)
    if not bool(has_neg.any()):
        return anchors.sum() * 0.0
    hardest = cos.masked_fill(~allowed, -2.0).max(dim=1).values
    d_ap = angular_distance((anchors * positives).sum(dim=-1))
    d_an = angular_distance(hardest)
    loss = torch.clamp(margin + d_ap - d_an, min=0.0)
    return loss[has_neg].mean()


def inbatch_negatives_loss(
    anchors: torch.Tensor, positives: torch.Tensor, docs: torch.Tensor, temperature: float = 0.05
) -> torch.Tensor:
    """In-batch-negatives contrastive loss (see module docstring) on unit vectors (B, d).

    ``docs``: (B,) document index of each pair. Row ``i`` is ``-log softmax_j(C(a_i, p_j) / t)[i]``
    over its own positive and the positives of pairs from other documents; the mean over anchors.
    A batch from one document has no negatives: each row's loss is then 0."""
    logits = (anchors @ positives.T) / temperature  # (B, B)
    same_doc = docs.unsqueeze(1) == docs.unsqueeze(0)
    own = torch.eye(len(docs), dtype=torch.bool, device=logits.device)
    logits = logits.masked_fill(same_doc & ~own, float("-inf"))
    target = torch.arange(len(docs), device=logits.device)
    return torch.nn.functional.cross_entropy(logits.float(), target)


def mask_tokens(
    input_ids: torch.Tensor,
    special_tokens_mask: torch.Tensor,
    *,
    mask_token_id: int,
    vocab_size: int,
    probability: float = 0.15,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """RoBERTa-style masking. Returns ``(masked_input_ids, labels)``; special and padding tokens
    (``special_tokens_mask`` true) are never selected."""
    labels = input_ids.clone()
    probs = torch.full(input_ids.shape, probability)
    probs.masked_fill_(special_tokens_mask.bool(), 0.0)
    selected = torch.bernoulli(probs, generator=generator).bool()
    labels[~selected] = -100
    masked = input_ids.clone()
    to_mask = torch.bernoulli(torch.full(input_ids.shape, 0.8), generator=generator).bool() & selected
    masked[to_mask] = mask_token_id
    to_random = torch.bernoulli(torch.full(input_ids.shape, 0.5), generator=generator).bool() & selected & ~to_mask
    random_tokens = torch.randint(vocab_size, input_ids.shape, generator=generator, dtype=input_ids.dtype)
    masked[to_random] = random_tokens[to_random]
    return masked, labels
