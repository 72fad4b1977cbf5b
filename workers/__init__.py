"""workers: Celery tasks that embed documents in batches (the "Celery workers" issue).

They reuse :class:`sdr_core.encoder.SentenceEncoder` (model loaded once per process, batches
under a token budget) and :mod:`sdr_core.embed`.
"""
