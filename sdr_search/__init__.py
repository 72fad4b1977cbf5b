"""sdr-search: long-document "more like this" with SDR.

Front door for library use (everything else lives in the subpackages ``sdr_search.core``,
``sdr_search.indexer``, ``sdr_search.reranker``, ``sdr_search.workers``)::

    from sdr_search import Query, index, open_store, search

Nothing here connects, loads a model or imports torch until it is called.
"""
