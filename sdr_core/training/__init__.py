"""Self-supervised training of the sentence encoder on the user's corpus (``sdr train``).

- :mod:`.settings` - :class:`TrainSettings` (env ``SDR_TRAIN_*``)
- :mod:`.sampler` - sentence-pair sampling (intra-paragraph positives, inter-document negatives)
- :mod:`.losses` - SDR contrastive loss (eq. 1), MetricBERT angular triplet loss, MLM masking
- :mod:`.model` - loading a base model with an MLM head, saving a model directory with provenance
- :mod:`.trainer` - the training loop: checkpoints, resume, progress, determinism

Nothing here imports torch or transformers at import time except :mod:`.losses`, :mod:`.model`
and :mod:`.trainer`, which are imported only when training runs.
"""
