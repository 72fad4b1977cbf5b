"""sdr_search.core (folder sdr_core/): the model code shared by the indexer, the workers and the reranker.

- :mod:`sdr_search.core.documents` - input shapes, readers, validation
- :mod:`sdr_search.core.sentences` - offline NLTK Punkt sentence splitting
- :mod:`sdr_search.core.encoder` - mean-pooled sentence vectors from any local HuggingFace model
- :mod:`sdr_search.core.cache` / :mod:`sdr_search.core.embed` - cached document encoding
- :mod:`sdr_search.core.scoring` - exact two-stage SDR scoring; :mod:`sdr_search.core.reference` its brute-force oracle
- :mod:`sdr_search.core.stats` - normalisation statistics (exact and sampled)
- :mod:`sdr_search.core.metrics`, :mod:`sdr_search.core.lexical`, :mod:`sdr_search.core.evaluation` - ``sdr eval``

Nothing here loads a model or connects to a service at import time.
"""

__version__ = "0.1.0"
