"""``sdr train``: read the corpus, train (:mod:`sdr_search.core.training`), print a JSON summary."""

from __future__ import annotations

import json
import logging
import sys

from sdr_search.core.errors import SDRError

from .args import segmentation_settings

__all__ = ["cmd_train", "train_settings"]

logger = logging.getLogger("sdr")

_FLAGS = {
    "objective": "objective", "steps": "steps", "batch_size": "batch_size", "lr": "learning_rate",
    "max_tokens": "max_tokens", "margin": "margin", "triplet_margin": "triplet_margin",
    "temperature": "temperature", "trainable_layers": "trainable_layers",
    "mlm_weight": "mlm_weight", "head_warmup_steps": "head_warmup_steps", "head_warmup_lr": "head_warmup_lr",
    "max_sentences_per_paragraph": "max_sentences_per_paragraph", "positive_fraction": "positive_fraction",
    "checkpoint_every": "checkpoint_every", "seed": "seed", "device": "device", "precision": "precision",
}


def train_settings(args):
    from pydantic import ValidationError

    from sdr_search.core.training.settings import TrainSettings

    overrides = {field: getattr(args, flag) for flag, field in _FLAGS.items() if getattr(args, flag, None) is not None}
    try:
        return TrainSettings(**overrides)
    except ValidationError as e:
        first = e.errors()[0]
        raise SDRError(f"invalid training setting {'.'.join(map(str, first['loc']))}: {first['msg']}") from e


def cmd_train(args) -> int:
    from sdr_search.core.documents import ReadReport, read_documents
    from sdr_search.core.training.trainer import train

    settings = train_settings(args)
    report = ReadReport()
    seg = segmentation_settings(args)
    docs = list(read_documents(args.corpus, settings=seg, report=report, strict=args.strict))
    if len(docs) < 2:
        raise SDRError(f"training needs at least 2 usable documents, got {len(docs)}")
    logger.info("training corpus: %d documents (%d skipped)", len(docs), report.n_skipped)
    result = train(docs, args.out, base=args.base, settings=settings, restart=args.restart,
                   progress=not args.no_progress, threads=args.threads, segmentation=seg.recorded())
    out = {
        "out": str(result.out_dir), "objective": settings.objective, "steps": result.steps,
        "resumed_from_step": result.resumed_from, "seconds": round(result.seconds, 1),
        "loss_first_20": round(result.first_loss, 4), "loss_last_20": round(result.last_loss, 4),
        "corpus_documents": len(docs), "skipped": report.n_skipped,
        "corpus_hash": result.provenance["corpus_hash"], "segmentation": seg.recorded(),
        "probe_cosines": result.probe_cosines,
    }
    sys.stdout.write(json.dumps(out) + "\n")
    return 0
