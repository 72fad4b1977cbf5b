"""workers: Celery tasks that embed documents in batches, and `sdr reindex` / `sdr worker`.

They reuse :class:`sdr_search.core.encoder.SentenceEncoder` (model loaded once per process, batches
under a token budget) and :mod:`sdr_search.core.embed`.
"""
