"""sdr_core: the model code shared by indexer, workers and reranker.

- :mod:`sdr_core.documents` - input shapes, readers, validation
- :mod:`sdr_core.sentences` - offline NLTK Punkt sentence splitting
- :mod:`sdr_core.encoder` - mean-pooled sentence vectors from any local HuggingFace model
- :mod:`sdr_core.cache` / :mod:`sdr_core.embed` - cached document encoding
- :mod:`sdr_core.scoring` - exact two-stage SDR scoring; :mod:`sdr_core.reference` its brute-force oracle
- :mod:`sdr_core.stats` - normalisation statistics (exact and sampled)
- :mod:`sdr_core.metrics`, :mod:`sdr_core.lexical`, :mod:`sdr_core.evaluation` - ``sdr eval``

Nothing here loads a model or connects to a service at import time.
"""

__version__ = "0.1.0"
